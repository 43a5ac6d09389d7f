// SPDX-License-Identifier: MIT
// Unit tests of JsonWriter: commas, nesting, indentation, escaping.
#include <ckptfs/base/json_writer.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using ckptfs::JsonWriter;

TEST_SUITE_BEGIN("json_writer");

TEST_CASE("compact output of every kind of value") {
  std::string out;
  JsonWriter j(out, 0);
  j.begin_object();
  j.key("s").string("a\"\n");
  j.key("i").number(std::int64_t{-3});
  j.key("u").number(std::uint64_t{18446744073709551615ull});
  j.key("b").boolean(true);
  j.key("n").null();
  j.key("raw").raw(R"({"x":[1]})");
  j.key("shape").numbers({4, 3});
  j.key("empty").begin_array().end_array();
  j.key("list").begin_array().number(std::int64_t{1}).begin_object().end_object().end_array();
  j.end_object();
  CHECK(out == R"({"s":"a\"\n","i":-3,"u":18446744073709551615,"b":true,"n":null,)"
               R"("raw":{"x":[1]},"shape":[4,3],"empty":[],"list":[1,{}]})");
}

TEST_CASE("indented output parses back, number arrays stay on one line") {
  std::string out;
  JsonWriter j(out, 2);
  j.begin_object().key("shape").numbers({2, 0, 5}).key("storage").begin_object();
  j.key("key").string("0").end_object().key("shared_with").begin_array().string("w");
  j.string("poids.层").end_array().end_object();
  CHECK(out ==
        "{\n  \"shape\": [2, 0, 5],\n  \"storage\": {\n    \"key\": \"0\"\n  },\n"
        "  \"shared_with\": [\n    \"w\",\n    \"poids.层\"\n  ]\n}");
  auto parsed = nlohmann::json::parse(out);
  CHECK(parsed["shared_with"][1] == "poids.层");
}

TEST_CASE("bytes that are not UTF-8 in keys and strings are escaped, never replaced") {
  std::string out;
  JsonWriter j(out, 0);
  j.begin_object().key(std::string("k\xff", 2)).string(std::string("\xc3", 1)).end_object();
  CHECK(out == R"({"k\udcff":"\udcc3"})");
}

TEST_SUITE_END();
