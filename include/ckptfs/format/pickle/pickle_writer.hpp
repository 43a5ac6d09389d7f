// SPDX-License-Identifier: MIT
// Writes pickles the way CPython's pickler (_pickle.c, what torch.save runs) does at protocol 2,
// torch.save's default: the same opcodes, the same memo, the same APPENDS/SETITEMS batches, so
// that a value pickled here is byte for byte what pickle.dumps(value, protocol=2) gives when no
// object appears twice in it.
//
//   pickle::Writer w;                                     // PROTO 2
//   w.list(keys.size(), [&](std::size_t i) { w.string(keys[i]); });
//   std::string bytes = std::move(w).finish();            // STOP
//
// What each torch version's torch.load(..., weights_only=True) reads. 1.13 ran here
// (tests/integration/test_writers.py), but for torch.Size, which 1.13's allowlist has; the later
// versions are read in the sources of torch/_weights_only_unpickler.py, not run:
//   none, bool, int (any size up to 255 bytes), str, list, tuple, dict, OrderedDict,
//   torch.Size, memo GET/PUT ....................................... torch >= 1.13
//   float (BINFLOAT) ............................................... torch >= 2.0
//   bytes (_codecs.encode REDUCE) .................................. torch >= 2.5 or 2.6
//   int of 256 bytes or more (LONG4) ............................... no version
// A value the loader cannot read fails the whole load ("Unsupported operand 71" for a float on
// 1.13): a caller targeting 1.13 keeps floats and bytes out.
#pragma once

#include <ckptfs/base/hash.hpp>
#include <ckptfs/model/plain_value.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ckptfs::pickle {

class Writer;

// A memo slot, for get(). CPython numbers them 0, 1, 2... in the order it memoizes objects.
using MemoSlot = std::uint32_t;
inline constexpr MemoSlot no_slot = std::numeric_limits<MemoSlot>::max();

// Where the opcodes between the items of a list or dict go, for items written one by one: what
// appends(), setitems() and iterated_setitems() do around each item, as a state of its own.
//
//   Batches b(Batches::Style::setitems, n);
//   for (i = 0; i < n; ++i) { b.before_item(w); write key i; write value i; b.after_item(w); }
//   b.finish(w);
class Batches {
 public:
  enum class Style : std::uint8_t { appends, setitems, iterated_setitems };
  Batches(Style style, std::size_t count) : style_(style), count_(count) {}

  void before_item(Writer& w);
  void after_item(Writer& w);
  void finish(Writer& w);  // after the last item (and for none)

 private:
  // Whether the batch starting at item `start` is written MARK ... SETITEMS (or APPENDS).
  bool marked(std::size_t start) const noexcept;

  Style style_;
  std::size_t count_;
  std::size_t next_ = 0;  // items written
};

class Writer {
 public:
  // CPython's batch size for APPENDS and SETITEMS.
  static constexpr std::size_t batch_size = 1000;

  Writer();  // writes PROTO 2

  // Scalars. CPython memoizes none of them.
  void none();
  void boolean(bool value);  // NEWTRUE / NEWFALSE
  // BININT1 (0..255), BININT2 (..65535), BININT (int32), else LONG1 with the fewest bytes.
  void integer(std::int64_t value);
  // An int of any size, as little-endian two's complement bytes (the pickle reader's
  // big_integer): shortened to the fewest bytes, then written as integer() would.
  void big_integer(std::string_view twos_complement_le);
  void floating(double value);  // BINFLOAT (big-endian IEEE 754 double)

  // A str: BINUNICODE with `utf8` as is. Our strings are the bytes Python's UTF-8 codec with
  // 'surrogatepass' gives, so an encoded lone surrogate (ED A0 80 for U+D800) is accepted and
  // reads back as the same str. Throws Error(bad_checkpoint) when the bytes are no such
  // encoding (torch.load would fail on them) or longer than 4 GiB - 1. Memoized.
  MemoSlot string(std::string_view utf8);

  // A bytes object as Python 3 pickles it at protocol 2: _codecs.encode(text, 'latin1') REDUCE,
  // text being the bytes as code points U+0000-U+00FF. Memoized. One intentional difference:
  // CPython writes an empty bytes as __builtin__.bytes() REDUCE, which no weights_only loader
  // allows, while this writes _codecs.encode('', 'latin1'): the same b''.
  MemoSlot bytes(std::string_view data);

  // GLOBAL module name the first time, a get() of that slot after: CPython memoizes a class or
  // function once and refers to it after.
  MemoSlot global(std::string_view module, std::string_view name);

  // The memo: put() stores the object on top of the stack in the next slot (BINPUT below 256,
  // else LONG_BINPUT); get() pushes a stored object again (BINGET / LONG_BINGET).
  MemoSlot put();
  void get(MemoSlot slot);

  // Containers, their items written by `item(i)` for i in [0, count): exactly one object each
  // (list, tuple), or a key then a value (dict).
  // tuple: EMPTY_TUPLE (not memoized); items + TUPLE1/2/3; MARK items TUPLE beyond 3. Returns
  // the slot, or no_slot for ().
  template <class Item>
  MemoSlot tuple(std::size_t count, Item&& item);
  // list: EMPTY_LIST, put(), then appends().
  template <class Item>
  MemoSlot list(std::size_t count, Item&& item);
  // dict: EMPTY_DICT, put(), then setitems().
  template <class Item>
  MemoSlot dict(std::size_t count, Item&& item);
  // collections.OrderedDict: global(), EMPTY_TUPLE, REDUCE, put(), then iterated_setitems().
  template <class Item>
  MemoSlot ordered_dict(std::size_t count, Item&& item);
  // Items added to the list or dict on top of the stack, batched as CPython's C pickler (the
  // one torch.save runs) does, which differs from pickle.py's:
  //   appends() (a list): one item with APPEND; more in MARK ... APPENDS batches of 1000, a
  //     last batch of one item included;
  //   setitems() (a dict): one item with SETITEM; more in MARK ... SETITEMS batches of 1000,
  //     followed by an empty MARK SETITEMS when the last batch is full (1000, 2000... items);
  //   iterated_setitems() (the items of a call's result, as an OrderedDict's): MARK ...
  //     SETITEMS batches of 1000, a last batch of one item with SETITEM alone.
  template <class Item>
  void appends(std::size_t count, Item&& item);
  template <class Item>
  void setitems(std::size_t count, Item&& item);
  template <class Item>
  void iterated_setitems(std::size_t count, Item&& item);
  // The same containers opened and closed around items written one by one, for a writer that
  // walks a nesting with a stack of its own instead of callbacks (pack's): each begin_ writes
  // what comes before the items, each end_ what comes after them, and Batches (below) what
  // comes between items. The helpers above are made of these.
  MemoSlot begin_dict();                  // EMPTY_DICT, put()
  MemoSlot begin_list();                  // EMPTY_LIST, put()
  MemoSlot begin_ordered_dict();          // global(), EMPTY_TUPLE, REDUCE, put()
  void begin_tuple(std::size_t count);    // MARK beyond 3 items
  MemoSlot end_tuple(std::size_t count);  // TUPLE1/2/3 or TUPLE, put(); () (no slot) for none
  // set(list) or frozenset(list), as write_value() writes them: global(), then begin_list();
  // end_set() closes the list's tuple and calls it.
  void begin_set(bool frozen);
  void end_set();

  // A tuple of ints (a size or a stride).
  MemoSlot int_tuple(std::span<const std::int64_t> values);
  // torch.Size(values): GLOBAL torch Size, ((values...),) REDUCE, put().
  MemoSlot torch_size(std::span<const std::int64_t> values);

  // Calls and objects, for what the helpers above do not cover.
  void mark();
  void reduce();     // callable args -> callable(*args); CPython then memoizes the result
  void build();      // object state -> object with the state applied
  void binpersid();  // pid -> persistent_load(pid)

  // Writes STOP and hands the pickle over.
  std::string finish() &&;
  const std::string& bytes_so_far() const noexcept { return out_; }

 private:
  void op(std::uint8_t code);
  void le(std::uint64_t value, int width);
  template <class Item>
  void batch(Batches::Style style, std::size_t count, Item& item);

  friend class Batches;

  std::string out_;
  MemoSlot next_slot_ = 0;
  TextMap<MemoSlot> globals_;  // "module\nname" -> slot
  MemoSlot latin1_ = no_slot;  // the 'latin1' of bytes(), shared as CPython's
};

// ---- Plain values (model/plain_value.hpp): what map.pt, the <key>.pt files of plain values and
// pack's values hold. ----

using Value = PlainValue;
using DictEntry = PlainDictEntry;

// Containers nested deeper than this are refused (Error(bad_checkpoint)): writing recurses.
inline constexpr std::size_t max_value_depth_written = 1000;

// Writes `value` as CPython pickles it at protocol 2 (every str and container its own memo
// slot): sets and frozensets as __builtin__.set([items]) (as REDUCE), bytearrays as
// __builtin__.bytearray(bytes) (bytearray() when empty), a call as module.name(*args) REDUCE then
// its state BUILD. Throws Error(bad_checkpoint) for what a pickle cannot hold (a str that is not
// UTF-8 with surrogates, nesting past max_value_depth_written, a call of no plain constructor).
void write_value(Writer& writer, const Value& value);

// The oldest torch whose weights_only loader reads `value`: {1, 13}, {2, 0} for floats, {2, 5}
// for bytes (the first release it may be in; see the table above); {0, 0} when none is known to
// (sets, frozensets, bytearrays and numpy scalars are not in the table: {0, 0}).
struct TorchVersion {
  int major = 0;
  int minor = 0;
  friend bool operator==(const TorchVersion&, const TorchVersion&) = default;
};
TorchVersion weights_only_since(const Value& value);

// ---- Template definitions ----

template <class Item>
MemoSlot Writer::tuple(std::size_t count, Item&& item) {
  begin_tuple(count);
  for (std::size_t i = 0; i < count; ++i) item(i);
  return end_tuple(count);
}

template <class Item>
MemoSlot Writer::list(std::size_t count, Item&& item) {
  const MemoSlot slot = begin_list();
  appends(count, item);
  return slot;
}

template <class Item>
MemoSlot Writer::dict(std::size_t count, Item&& item) {
  const MemoSlot slot = begin_dict();
  setitems(count, item);
  return slot;
}

template <class Item>
MemoSlot Writer::ordered_dict(std::size_t count, Item&& item) {
  const MemoSlot slot = begin_ordered_dict();
  iterated_setitems(count, item);
  return slot;
}

template <class Item>
void Writer::batch(Batches::Style style, std::size_t count, Item& item) {
  Batches batches(style, count);
  for (std::size_t i = 0; i < count; ++i) {
    batches.before_item(*this);
    item(i);
    batches.after_item(*this);
  }
  batches.finish(*this);
}

template <class Item>
void Writer::appends(std::size_t count, Item&& item) {
  batch(Batches::Style::appends, count, item);
}

template <class Item>
void Writer::setitems(std::size_t count, Item&& item) {
  batch(Batches::Style::setitems, count, item);
}

template <class Item>
void Writer::iterated_setitems(std::size_t count, Item&& item) {
  batch(Batches::Style::iterated_setitems, count, item);
}

}  // namespace ckptfs::pickle
