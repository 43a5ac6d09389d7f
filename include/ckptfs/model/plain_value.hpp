// SPDX-License-Identifier: MIT
// PlainValue: a value exactly as a checkpoint held it, when it is data and nothing else: what
// `ckptfs pack` and the RFC layout's <key>.pt write back, so that torch.load gives the same
// value, of the same types, as from the checkpoint (a tuple stays a tuple, an int key an int).
//
//   PlainValue::dict({{PlainValue::str("epoch"), PlainValue::integer(7)},
//                     {PlainValue::str("betas"), PlainValue::tuple({PlainValue::real(0.9),
//                                                                   PlainValue::real(0.999)})}})
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

struct PlainDictEntry;

// A plain Python value: what JSON holds, plus the kinds pickles tell apart (tuples, sets, bytes,
// ints past 64 bits, dicts with keys that are not strings, OrderedDicts), plus the few calls of
// data constructors that checkpoints pickle as values (torch.Size, numpy scalars): `call`.
struct PlainValue {
  enum class Kind : std::uint8_t {
    none,
    boolean,
    integer,       // fits in int64
    big_integer,   // `text`: little-endian two's complement bytes
    real,          // a Python float
    string,        // `text`: UTF-8, encoded surrogates allowed (pickle::Writer::string)
    bytes,         // `text`
    bytearray,     // `text`
    list,          // `items`
    tuple,         // `items`
    set,           // `items`, in the pickle's order (each hashable)
    frozenset,     // `items`, likewise
    dict,          // `entries`, in order (keys: any hashable value: str, int, tuple...)
    ordered_dict,  // `entries`, as collections.OrderedDict
    // `module`.`name`(*items[0]) (items[0] a tuple), then BUILD with items[1] when `flag`:
    // only the constructors of plain_calls below.
    call,
  };
  Kind kind = Kind::none;
  bool flag = false;              // boolean; call: has a BUILD state (items[1])
  std::int64_t number = 0;        // integer
  double real_value = 0;          // real
  std::string text;               // big_integer, string, bytes, bytearray; call: "module\nname"
  std::vector<PlainValue> items;  // list, tuple, set, frozenset; call: args, state
  std::vector<PlainDictEntry> entries;  // dict, ordered_dict

  static PlainValue none_value();
  static PlainValue boolean(bool b);
  static PlainValue integer(std::int64_t n);
  static PlainValue big_integer(std::string twos_complement_le);
  static PlainValue real(double x);
  static PlainValue str(std::string utf8);
  static PlainValue bytes_value(std::string data);
  static PlainValue bytearray_value(std::string data);
  static PlainValue list(std::vector<PlainValue> items);
  static PlainValue tuple(std::vector<PlainValue> items);
  static PlainValue set(std::vector<PlainValue> items);
  static PlainValue frozenset(std::vector<PlainValue> items);
  static PlainValue dict(std::vector<PlainDictEntry> entries);
  static PlainValue ordered_dict(std::vector<PlainDictEntry> entries);
  // A call of one of plain_calls: `args` a tuple; `state` applied with BUILD when given.
  static PlainValue call(std::string_view module, std::string_view name, PlainValue args);
  static PlainValue call(std::string_view module, std::string_view name, PlainValue args,
                         PlainValue state);

  std::string_view call_module() const;  // call: the module of the constructor
  std::string_view call_name() const;    // call: its name
};

// A key and its value. Not a std::pair, and nothing in PlainValue's body that destroys a
// PlainValue: clang with libstdc++ 12 instantiates those while PlainValue is still incomplete,
// and fails.
struct PlainDictEntry {
  PlainValue first;   // the key
  PlainValue second;  // the value
};

inline PlainValue PlainValue::none_value() { return {}; }

// The constructors a `call` may name, with the arguments each takes, so that nothing but data
// is ever written (checked where a call is made: format/pickle/plain_value.cpp):
//   torch.Size((int, ...))                                     a torch.Size
//   numpy.dtype(str, bool, bool) with a BUILD state            a numpy dtype
//   numpy.core.multiarray.scalar(dtype, bytes)                 a numpy scalar (numpy 1.x)
//   numpy._core.multiarray.scalar(dtype, bytes)                the same, as numpy 2.x names it
bool is_plain_call(std::string_view module, std::string_view name);

}  // namespace ckptfs
