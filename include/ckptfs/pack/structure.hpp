// SPDX-License-Identifier: MIT
// The structure `ckptfs pack` writes into a .pth: the selected entries put back into the
// containers their key paths say (Entry::key_path and Entry::containers), so that torch.load of
// the file gives what torch.load of the source gave; or, with --flat, one OrderedDict of their
// flattened keys. Made from the model's description alone, and written by a walk with a stack
// of its own, never by recursion.
//
//   Structure s = nested_structure(model, selection);  // {"model": OrderedDict, "epoch": 3}
//   write_structure(w, s, [&](std::size_t i) { /* the tensor or value of selection entry i */ });
#pragma once

#include <ckptfs/format/pickle/pickle_writer.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/pack/selection.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ckptfs {

// Containers nested deeper than this are not rebuilt: what is below is written under its
// flattened keys. Python pickles and compares nesting by recursion, which its own limit stops
// at about 1000 levels: torch.save never writes deeper.
inline constexpr std::size_t max_rebuilt_depth = 1000;

// A dict key as pack writes it: a str, int, bool, None, float or bytes, exactly as its key path
// says it.
struct StructureKey {
  enum class Kind : std::uint8_t { str, integer, boolean, none, real, bytes };
  Kind kind = Kind::str;
  std::int64_t number = 0;  // integer; boolean: 0 or 1
  double real = 0;
  std::string text;  // str, bytes
};

struct Structure {
  struct Node {
    bool is_entry = false;
    std::size_t selected = 0;  // an entry: its index in Selection::entries
    // A container's kind; `object` (what ckptfs never builds) is written as an OrderedDict of
    // the flattened keys below it.
    ContainerKind kind = ContainerKind::ordered_dict;
    StructureKey key;            // its key, in a dict (an object's stand-in included)
    std::uint64_t position = 0;  // its position, in a list, tuple, set or frozenset
    // A container's children: in the model's order; in a list or tuple by position.
    std::vector<std::uint32_t> children;
    // A list's or tuple's length: its last position + 1; positions without a child are None
    // (an item left out, or not selected, keeps the positions of the items after it).
    std::uint64_t length = 0;
    // An OrderedDict's attributes (Model::container_states), set with BUILD after its items.
    std::shared_ptr<const PlainValue> state;
  };
  std::vector<Node> nodes;  // nodes[0]: the root (a container, or the checkpoint's one entry)
  // (entry's key, key written) of the entries written under a flattened key that another item
  // of their container has: "<key>%#<n>", the mount's rule (base/names.hpp).
  std::vector<std::pair<std::string, std::string>> renamed;
  // Where the nesting was not rebuilt, and why, for the user: (a key, or "" for the root; why).
  std::vector<std::pair<std::string, std::string>> flattened;
};

// The selected entries in the containers their key paths say, in the model's order:
//   - each level of a key path is rebuilt as its container says (dict, OrderedDict, list,
//     tuple, set, frozenset) when its key is one pack writes exactly (a str, int, bool, None,
//     float or bytes; a non-negative position in a list, tuple or set) and it is less than
//     max_rebuilt_depth deep;
//   - from the first level that is not, the entry goes under the rest of its flattened key (a
//     str): below an `object` container, into an OrderedDict standing for the object; below a
//     key that is no such key (a tuple), into its dict; said in Structure::flattened;
//   - an entry without a key path is one str key of Model::root (flat formats: an OrderedDict),
//     renamed apart from another of the same text (an RFC directory's map.pt may list one twice);
//     the entry whose key path is [] is the root itself, when it is the one selected; an entry
//     with a key path but no containers (a split directory from an older mount) goes under its
//     key into the root;
//   - the text of each key rebuilt must begin the entry's key, and it must be the only item of
//     its container at that place, every entry agreeing on the kind of each container: else
//     Error(bad_checkpoint) naming the entries (a split directory whose JSON lies);
//   - padding lists and tuples with None passes no bound that the entries do not set
//     (Error(bad_checkpoint) past max(2^20, 16 × the entries)).
Structure nested_structure(const Model& model, const Selection& selection);

// --flat: one OrderedDict of Selection::keys, today's torch.save(state_dict) layout.
Structure flat_structure(const Selection& selection);

// Writes the structure with `w` as CPython pickles it (protocol 2: every container memoized,
// items batched as pickle_writer.hpp says), each entry by `write_entry(selected)`. Iterative.
void write_structure(pickle::Writer& w, const Structure& structure,
                     const std::function<void(std::size_t selected)>& write_entry);

}  // namespace ckptfs
