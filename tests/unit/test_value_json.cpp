// SPDX-License-Identifier: MIT
// Unit tests of key_text() and value_json(): renderings of untrusted pickled values.
#include "support/pickle_builder.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/pickle/value_json.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

// The JSON of the root of a pickle built by `fill`.
template <typename Fill>
std::string json_of(Fill fill, std::size_t max_bytes = 1 << 20) {
  PickleBuilder p;
  p.proto(2);
  fill(p);
  MemorySource source(p.stop().bytes());
  auto parsed = pickle::parse(source, 0, source.size());
  return value_json(parsed.graph, parsed.graph.root(), max_bytes);
}

template <typename Fill>
std::string key_of(Fill fill) {
  PickleBuilder p;
  p.proto(2);
  fill(p);
  MemorySource source(p.stop().bytes());
  auto parsed = pickle::parse(source, 0, source.size());
  return key_text(parsed.graph, parsed.graph.root());
}

}  // namespace

TEST_SUITE_BEGIN("value_json");

TEST_CASE("scalars") {
  CHECK(json_of([](auto& p) { p.none(); }) == "null");
  CHECK(json_of([](auto& p) { p.newtrue(); }) == "true");
  CHECK(json_of([](auto& p) { p.integer(-7); }) == "-7");
  CHECK(json_of([](auto& p) { p.binfloat(0.1); }) == "0.1");
  CHECK(json_of([](auto& p) { p.binfloat(2.0); }) == "2.0");
  // JSON has no nan or inf, and null is None: an object that says which.
  CHECK(json_of([](auto& p) { p.binfloat(1e300 * 1e300); }) == R"({"__float__":"inf"})");
  CHECK(json_of([](auto& p) { p.binfloat(-1e300 * 1e300); }) == R"({"__float__":"-inf"})");
  CHECK(json_of([](auto& p) { p.binfloat(std::nan("")); }) == R"({"__float__":"nan"})");
  CHECK(json_of([](auto& p) { p.binunicode("a\"b\n"); }) == R"("a\"b\n")");
  CHECK(json_of([](auto& p) { p.binbytes(std::string("\x00\xff", 2)); }) ==
        R"({"__bytes__":"00ff"})");
}

TEST_CASE("big integers in decimal, both signs") {
  // 2**64 and -(2**64)
  CHECK(json_of([](auto& p) { p.long1(std::string("\0\0\0\0\0\0\0\0\x01", 9)); }) ==
        "18446744073709551616");
  CHECK(json_of([](auto& p) { p.long1(std::string("\0\0\0\0\0\0\0\0\xff", 9)); }) ==
        "-18446744073709551616");
  CHECK(key_of([](auto& p) {
          p.long1(std::string("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10));
        }) == "119547037146038801333356");  // torch's legacy magic number
}

TEST_CASE("bytes that are not UTF-8 become lone surrogates, as Python's surrogateescape") {
  // Each byte of an encoded surrogate and each stray byte is its own escape, so that different
  // bytes never give the same text.
  std::string j = json_of([](auto& p) { p.binunicode(std::string("ok\xed\xa0\x80\xff", 6)); });
  CHECK(j == "\"ok\\udced\\udca0\\udc80\\udcff\"");
  CHECK(json_of([](auto& p) { p.binunicode(std::string("\xfe", 1)); }) == "\"\\udcfe\"");
  CHECK(json_of([](auto& p) { p.binunicode("poids.层\x7f"); }) == "\"poids.层\x7f\"");
}

TEST_CASE("containers, objects, globals, numpy scalars, torch.Size") {
  CHECK(json_of([](auto& p) {
          p.empty_dict().integer(1).empty_list().integer(2).append().setitem();
        }) == R"({"__dict__":[[1,[2]]]})");  // an int key stays an int
  CHECK(json_of([](auto& p) {
          p.empty_dict().binunicode("1").empty_list().integer(2).append().setitem();
        }) == R"({"1":[2]})");
  CHECK(json_of([](auto& p) { p.global("torch", "float16"); }) ==
        R"({"__global__":"torch.float16"})");
  CHECK(json_of([](auto& p) {
          p.global("torch", "Size").int_tuple({2, 3}).tuple1().reduce();
        }) == R"({"__tuple__":[2,3]})");  // a tuple, as torch.Size is one
  // numpy.core.multiarray.scalar(numpy.dtype('f8', False, True) + BUILD state, b'...')
  CHECK(json_of([](auto& p) {
          p.global("numpy.core.multiarray", "scalar");
          p.global("numpy", "dtype").binunicode("f8").newfalse().newtrue().tuple3().reduce();
          p.mark()
              .integer(3)
              .binunicode("<")
              .none()
              .none()
              .none()
              .integer(-1)
              .integer(-1)
              .integer(0)
              .tuple()
              .build();
          double v = 0.25;
          p.binbytes(std::string(reinterpret_cast<const char*>(&v), 8)).tuple2().reduce();
        }) == "0.25");
  CHECK(json_of([](auto& p) {
          p.global("os", "system").binunicode("rm -rf /").tuple1().reduce();
        }) == R"({"__class__":"os.system","args":["rm -rf /"]})");
}

TEST_CASE("a list inside itself, a value too large, a value too deep") {
  CHECK(json_of([](auto& p) { p.empty_list().binput(0).binget(0).append(); }) ==
        R"([{"__recursion__":true}])");
  // A billion-laughs DAG: each level doubles the output; the limit cuts it.
  std::string laughs = json_of(
      [](auto& p) {
        p.binunicode("lol").binput(0);
        for (int i = 1; i < 40; ++i)
          p.binget(static_cast<std::uint8_t>(i - 1))
              .dup()
              .tuple2()
              .binput(static_cast<std::uint8_t>(i));
      },
      1 << 16);
  CHECK(laughs == R"({"__truncated__":true,"bytes_limit":65536})");
  std::string deep = json_of([](auto& p) {
    for (int i = 0; i < 1000; ++i) p.empty_list();
    for (int i = 1; i < 1000; ++i) p.append();
  });
  CHECK(deep.find("depth_limit") != std::string::npos);
  CHECK(nlohmann::json::accept(deep));
}

TEST_CASE("dict keys as Python's str()") {
  CHECK(key_of([](auto& p) { p.integer(3); }) == "3");
  CHECK(key_of([](auto& p) { p.newfalse(); }) == "False");
  CHECK(key_of([](auto& p) { p.none(); }) == "None");
  CHECK(key_of([](auto& p) { p.binfloat(1.5); }) == "1.5");
  CHECK(key_of([](auto& p) { p.binunicode("a").integer(1).tuple2(); }) == "('a', 1)");
  CHECK(key_of([](auto& p) { p.integer(1).tuple1(); }) == "(1,)");
}

TEST_SUITE_END();
