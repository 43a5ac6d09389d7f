// SPDX-License-Identifier: MIT
// A restricted pickle machine: runs the opcodes of pickle protocols 0-5 and builds an inert graph.
// It never imports, resolves or calls anything: a GLOBAL is only a (module, name) pair, and a
// call (REDUCE, NEWOBJ, NEWOBJ_EX, INST, OBJ) only records what would have been called with what.
// The checkpoint layer then interprets the graph (torch's _rebuild_* calls, storages).
#pragma once

#include <ckptfs/base/error.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfs::pickle {

// Nodes are numbered 0..size()-1 in creation order. A memo GET pushes the *same* node again, so
// the graph is a DAG that may even contain cycles (a list appended to itself): consumers walk it
// iteratively and track what is on their path.
using NodeId = std::uint32_t;
inline constexpr NodeId no_node = std::numeric_limits<NodeId>::max();

enum class Kind : std::uint8_t {
  none,
  boolean,
  integer,      // fits in int64
  big_integer,  // LONG/LONG1/LONG4 beyond int64: little-endian two's complement bytes
  floating,
  string,     // unicode text (UTF-8 bytes, unvalidated: surrogatepass can make them invalid)
  bytes,      // BINBYTES*, _codecs.encode(s, "latin1"), bytes(...)
  bytearray,  // BYTEARRAY8, bytearray(...)
  tuple,
  list,
  dict,  // also collections.OrderedDict() (ordered()): items in insertion order, duplicates kept
  set,
  frozenset,
  global,         // GLOBAL / STACK_GLOBAL / INST's class: a dotted name, never resolved
  object,         // the inert result of a call or instantiation (see Object)
  persistent_id,  // BINPERSID / PERSID: wraps the pid value
};

// A kind as a message says it: "a dict", "an int", "None"...
std::string_view a_kind(Kind kind) noexcept;

struct Global {
  std::string module;  // Python 2 names mapped to Python 3 ones (__builtin__ -> builtins, ...)
  std::string name;
  std::string dotted() const { return module + "." + name; }
};

// What a call or instantiation would have produced, kept inert.
struct Object {
  NodeId callable = no_node;       // usually a global; could be any node (REDUCE on anything)
  NodeId args = no_node;           // a tuple node (INST/OBJ get one built from the marked items)
  NodeId kwargs = no_node;         // NEWOBJ_EX only: a dict node
  NodeId state = no_node;          // argument of the last BUILD applied to it, if any
  std::vector<NodeId> list_items;  // APPEND(S) / ADDITEMS applied to it
  std::vector<std::pair<NodeId, NodeId>> dict_items;  // SETITEM(S) applied to it
};

struct Limits {
  std::uint64_t max_nodes = 16'000'000;  // nodes of the graph
  std::uint64_t max_stack = 16'000'000;  // stack entries plus marks
  std::uint64_t max_memo = 16'000'000;   // memo entries
};

class Graph {
 public:
  std::size_t size() const noexcept { return nodes_.size(); }
  NodeId root() const noexcept { return root_; }

  Kind kind(NodeId id) const;
  bool boolean(NodeId id) const;
  std::int64_t integer(NodeId id) const;
  const std::string& big_integer(NodeId id) const;  // little-endian two's complement
  double floating(NodeId id) const;
  const std::string& text(NodeId id) const;           // string, bytes or bytearray
  const std::vector<NodeId>& items(NodeId id) const;  // tuple, list, set, frozenset
  const std::vector<std::pair<NodeId, NodeId>>& dict_items(NodeId id) const;  // dict
  bool ordered(NodeId id) const;  // dict: made by collections.OrderedDict
  const Global& global(NodeId id) const;
  const Object& object(NodeId id) const;
  NodeId persistent_id(NodeId id) const;  // the pid value
  // The state BUILD gave a dict (state_dict's {'_metadata': ...}) or an object; else no_node.
  NodeId build_state(NodeId id) const;

  // Accessors throw std::logic_error when `id` is out of range or of another kind: callers check
  // kind() first. The rest is the machine's business.
  struct Node {
    Kind kind;
    std::uint32_t index;  // into the table of its kind
  };

 private:
  friend class Machine;
  friend class GraphBuilder;
  std::vector<Node> nodes_;
  std::vector<std::int64_t> integers_;  // also booleans (0/1)
  std::vector<double> floats_;
  std::vector<std::string> texts_;  // strings, bytes, big integers
  std::vector<std::vector<NodeId>> sequences_;
  std::vector<std::vector<std::pair<NodeId, NodeId>>> dicts_;
  std::vector<NodeId> dict_states_;  // parallel to dicts_
  std::vector<bool> dict_ordered_;   // parallel to dicts_
  std::vector<Global> globals_;
  std::vector<Object> objects_;
  std::vector<NodeId> persistent_ids_;
  NodeId root_ = no_node;
};

// What parse() throws when the pickle's bytes end before its STOP, or before what an opcode's
// length says: inside a zip record, a record that lies; at the end of a file (a legacy stream,
// a DCP .metadata), a file cut short, which its reader says.
class Truncated : public Error {
 public:
  using Error::Error;
};

struct ParseResult {
  Graph graph;
  std::uint64_t end_offset = 0;  // absolute offset just past the STOP opcode
  int protocol = 0;              // from PROTO, 0 when absent
};

// Runs the pickle that starts at `offset` in `source` until its STOP, reading at most
// `max_length` bytes (the record size for data.pkl; the rest of the file for legacy streams).
// Throws Error(bad_checkpoint) with the byte offset and the problem: unknown opcode, truncated
// pickle (no STOP within max_length), stack underflow, missing MARK, bad memo index, a length
// prefix larger than the bytes left, a limit exceeded, an out-of-band buffer, an extension code.
// Memory is bounded by the limits and by max_length; nothing recurses per nesting level.
ParseResult parse(const ByteSource& source, std::uint64_t offset, std::uint64_t max_length,
                  const Limits& limits = {});

}  // namespace ckptfs::pickle
