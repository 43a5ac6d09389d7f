// SPDX-License-Identifier: MIT
// Fuzz target: the restricted pickle machine over arbitrary bytes, then everything that consumes
// its graph without a zip around it: the torch interpreter, flattening and value JSON. Any input
// either throws Error(bad_checkpoint) or yields a graph whose every reference is a valid node.
#include "fuzz_check.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/pickle/flatten.hpp>
#include <ckptfs/format/pickle/pickle_machine.hpp>
#include <ckptfs/format/pickle/value_json.hpp>
#include <ckptfs/format/torch/torch_interpreter.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <string>

namespace {

using namespace ckptfs;
using pickle::Kind;
using pickle::no_node;
using pickle::NodeId;

// Every id a node refers to is a node of the graph (or no_node where that is allowed).
void check_graph(const pickle::Graph& g) {
  const auto valid = [&](NodeId id) { return id < g.size(); };
  FUZZ_CHECK(g.root() == no_node || valid(g.root()));
  for (NodeId id = 0; id < g.size(); ++id) {
    switch (g.kind(id)) {
      case Kind::tuple:
      case Kind::list:
      case Kind::set:
      case Kind::frozenset:
        for (NodeId item : g.items(id)) FUZZ_CHECK(valid(item));
        break;
      case Kind::dict:
        for (const auto& [k, v] : g.dict_items(id)) FUZZ_CHECK(valid(k) && valid(v));
        FUZZ_CHECK(g.build_state(id) == no_node || valid(g.build_state(id)));
        break;
      case Kind::object: {
        const pickle::Object& o = g.object(id);
        FUZZ_CHECK(o.callable == no_node || valid(o.callable));
        FUZZ_CHECK(o.args == no_node || valid(o.args));
        FUZZ_CHECK(o.kwargs == no_node || valid(o.kwargs));
        FUZZ_CHECK(o.state == no_node || valid(o.state));
        for (NodeId item : o.list_items) FUZZ_CHECK(valid(item));
        for (const auto& [k, v] : o.dict_items) FUZZ_CHECK(valid(k) && valid(v));
        break;
      }
      case Kind::persistent_id:
        FUZZ_CHECK(valid(g.persistent_id(id)));
        break;
      case Kind::global:
        (void)g.global(id).dotted();
        break;
      case Kind::string:
      case Kind::bytes:
        (void)g.text(id);
        break;
      case Kind::big_integer:
        FUZZ_CHECK(!g.big_integer(id).empty());
        break;
      default:
        break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  MemorySource source(std::string(reinterpret_cast<const char*>(data), size));
  const ReadLimits limits = fuzz_limits();
  pickle::ParseResult parsed;
  try {
    parsed = pickle::parse(source, 0, size, limits.pickle);
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint);
    FUZZ_CHECK(std::string_view(e.what()).find('\n') == std::string_view::npos);
    return 0;
  }
  FUZZ_CHECK(parsed.end_offset <= size);
  check_graph(parsed.graph);
  if (parsed.graph.root() == no_node) return 0;
  const std::string json = value_json(parsed.graph, parsed.graph.root(), 1 << 16);
  FUZZ_CHECK(!json.empty());
  (void)key_text(parsed.graph, parsed.graph.root());
  Interpretation in = interpret(parsed.graph, limits.max_dims);
  FUZZ_CHECK(in.tensor_of.size() == parsed.graph.size());
  for (const auto& [node, parts] : in.composites) {
    FUZZ_CHECK(node < parsed.graph.size());
    for (const auto& [name, part] : parts) FUZZ_CHECK(part < parsed.graph.size());
  }
  for (const Tensor& t : in.tensors) {
    FUZZ_CHECK(!t.storage || *t.storage < in.storage_refs.size());
    if (t.broken.empty()) FUZZ_CHECK(t.shape.size() == t.stride.size());
  }
  try {
    std::vector<Entry> entries = flatten(parsed.graph, in, limits).entries;
    for (const Entry& e : entries) {
      FUZZ_CHECK(e.kind != Entry::Kind::tensor || e.tensor < in.tensors.size());
      FUZZ_CHECK(e.key.size() <=
                 std::max<std::uint64_t>(limits.max_flattened_bytes, 64 * parsed.graph.size()));
    }
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint);
  }
  return 0;
}
