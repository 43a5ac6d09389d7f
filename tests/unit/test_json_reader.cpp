// SPDX-License-Identifier: MIT
// Unit tests of the strict JSON reader: every rule of the grammar, strings, numbers, duplicate
// keys and limits, the same in memory and streamed a byte at a time, deep and huge inputs.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/base/text.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

using namespace ckptfs;
using Token = JsonReader::Token;

namespace {

// The text's tokens as a compact trace: { } [ ] k:NAME s:TEXT n:TEXT t f null.
std::string trace_of(JsonReader& json) {
  std::string out;
  for (Token t = json.next(); t != Token::end; t = json.next()) {
    if (!out.empty()) out += ' ';
    switch (t) {
      case Token::begin_object:
        out += '{';
        break;
      case Token::end_object:
        out += '}';
        break;
      case Token::begin_array:
        out += '[';
        break;
      case Token::end_array:
        out += ']';
        break;
      case Token::key:
        out += "k:" + std::string(json.string());
        break;
      case Token::string:
        out += "s:" + std::string(json.string());
        break;
      case Token::number:
        out += "n:" + std::string(json.number_text());
        break;
      case Token::true_value:
        out += 't';
        break;
      case Token::false_value:
        out += 'f';
        break;
      case Token::null:
        out += "null";
        break;
      case Token::end:
        break;
    }
  }
  return out;
}

// An Input that hands out `text` `step` bytes per call, however large the buffer.
JsonReader::Input pieces_of(const std::string& text, std::size_t step) {
  return [text, step, at = std::size_t{0}](std::span<char> buffer) mutable {
    std::size_t n = std::min({step, buffer.size(), text.size() - at});
    std::copy_n(text.data() + at, n, buffer.data());
    at += n;
    return n;
  };
}

std::string trace(const std::string& text, JsonLimits limits = {}) {
  JsonReader memory(text, limits);
  std::string a = trace_of(memory);
  JsonReader streamed(pieces_of(text, 1), limits, 16);
  std::string b = trace_of(streamed);
  JsonReader chunked(pieces_of(text, 7), limits, 16);
  std::string c = trace_of(chunked);
  REQUIRE(a == b);  // the same tokens however the text arrives
  REQUIRE(a == c);
  return a;
}

// The error message of reading `text` whole, in memory and streamed (they must agree); "" if
// it is valid.
std::string error(const std::string& text, JsonLimits limits = {}) {
  std::string messages[2];
  for (int mode = 0; mode < 2; ++mode) {
    try {
      if (mode == 0) {
        JsonReader json(text, limits);
        trace_of(json);
      } else {
        JsonReader json(pieces_of(text, 1), limits, 16);
        trace_of(json);
      }
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::bad_checkpoint);
      messages[mode] = e.what();
    }
  }
  CHECK(messages[0] == messages[1]);
  return messages[0];
}

bool valid(const std::string& text) { return error(text).empty(); }

}  // namespace

TEST_SUITE_BEGIN("json_reader");

TEST_CASE("tokens of a document, in order") {
  CHECK(trace(R"({"a": [1, -2.5e3, "x"], "b": {"c": null}, "d": true, "e": false})") ==
        "{ k:a [ n:1 n:-2.5e3 s:x ] k:b { k:c null } k:d t k:e f }");
  CHECK(trace(" \t\r\n[]\n ") == "[ ]");
  CHECK(trace("{}") == "{ }");
  CHECK(trace("[[], {}, [[]]]") == "[ [ ] { } [ [ ] ] ]");
  // A scalar is a whole JSON text too.
  CHECK(trace("7") == "n:7");
  CHECK(trace("\"s\"") == "s:s");
  CHECK(trace("null") == "null");
}

TEST_CASE("after the end, next() keeps returning end, depth and offsets") {
  JsonReader json(R"( {"a": [1]} )");
  CHECK(json.next() == Token::begin_object);
  CHECK(json.offset() == 1);
  CHECK(json.depth() == 1);
  CHECK(json.next() == Token::key);
  CHECK(json.offset() == 2);
  CHECK(json.next() == Token::begin_array);
  CHECK(json.depth() == 2);
  CHECK(json.next() == Token::number);
  CHECK(json.offset() == 8);
  CHECK(json.next() == Token::end_array);
  CHECK(json.next() == Token::end_object);
  CHECK(json.depth() == 0);
  CHECK(json.next() == Token::end);
  CHECK(json.next() == Token::end);
}

TEST_CASE("the grammar, exactly") {
  for (const char* bad : {
           "",
           " ",
           "{",
           "[",
           "]",
           "}",
           "[1,]",
           "[,1]",
           "[1 2]",
           "{\"a\":1,}",
           "{,}",
           "{\"a\" 1}",
           "{\"a\":}",
           "{a:1}",
           "{'a':1}",
           "['a']",
           "{1:2}",
           "[1]]",
           "[1] x",
           "{} {}",
           "nul",
           "nulll",
           "True",
           "NaN",
           "Infinity",
           "-Infinity",
           "[undefined]",
           "/* c */ 1",
           "1 // c",
           "[1,,2]",
           "{\"a\":1 \"b\":2}",
           "\"a",
           "[\"a]",
           "\x00",
       }) {
    CAPTURE(bad);
    CHECK(!valid(bad));
  }
  CHECK(error("[1,]") == "invalid JSON at byte 3: a trailing comma in an array");
  CHECK(error("{\"a\":1,}") == "invalid JSON at byte 7: a trailing comma in an object");
  CHECK(error("[1] x") == "invalid JSON at byte 4: more than whitespace after the root value");
  CHECK(error("") == "invalid JSON at byte 0: an empty text");
  CHECK(error("[1") == "invalid JSON at byte 2: expected ',' or ']' after an array item");
  // Whitespace is space, tab, CR and LF only.
  CHECK(!valid("\f[]"));
  CHECK(!valid("[]\v"));
  CHECK(!valid("\xc2\xa0[]"));
}

TEST_CASE("numbers: RFC 8259's grammar") {
  for (const char* good : {"0", "-0", "7", "-7", "10", "0.5", "-0.5", "1e5", "1E+5", "1e-5",
                           "1.25e10", "123456789012345678901234567890"}) {
    CAPTURE(good);
    CHECK(valid(good));
    CHECK(valid(std::string("[") + good + "]"));
  }
  for (const char* bad : {"01", "-01", "00", "+1", ".5", "1.", "1.e5", "1e", "1e+", "--1", "-",
                          "0x10", "1_000", "1.5.2", "1e5e5", "[01]", "[1.]", "[-]", "[.5]"}) {
    CAPTURE(bad);
    CHECK(!valid(bad));
  }
  JsonLimits limits;
  limits.max_number_chars = 8;
  CHECK(error("[123456789]", limits) ==
        "invalid JSON at byte 9: a number longer than 8 characters");
  CHECK(error("[12345678]", limits).empty());
}

TEST_CASE("numbers: exact integers, and told apart from the rest") {
  auto number = [](const std::string& text) {
    static std::string kept;
    kept = text;
    auto json = std::make_unique<JsonReader>(kept);
    REQUIRE(json->next() == Token::number);
    return json;
  };
  CHECK(number("0")->uint64() == 0u);
  CHECK(number("18446744073709551615")->uint64() == 18446744073709551615ull);
  CHECK(!number("18446744073709551616")->uint64());
  CHECK(!number("99999999999999999999999")->uint64());
  CHECK(!number("-1")->uint64());
  CHECK(!number("-0")->uint64());  // a minus sign, even on zero
  CHECK(!number("1.0")->uint64());
  CHECK(!number("1e2")->uint64());
  CHECK(!number("0.5")->uint64());
  CHECK(number("-0")->int64() == 0);
  CHECK(number("-9223372036854775808")->int64() == INT64_MIN);
  CHECK(number("9223372036854775807")->int64() == INT64_MAX);
  CHECK(!number("9223372036854775808")->int64());
  CHECK(!number("-9223372036854775809")->int64());
  CHECK(!number("2.0")->int64());
  CHECK(number("-2.5e3")->floating() == -2500.0);
  CHECK(number("0.1")->floating() == 0.1);
  CHECK(number("1e999")->floating() == std::numeric_limits<double>::infinity());
  CHECK(number("-1e999")->floating() == -std::numeric_limits<double>::infinity());
  CHECK(number("1e-999")->floating() == 0.0);
  // 2^53 + 1 is not a double: it comes out exact as an integer.
  CHECK(number("9007199254740993")->uint64() == 9007199254740993ull);
}

TEST_CASE("strings: escapes decoded, UTF-8 checked, control characters refused") {
  CHECK(trace(R"(["a\"b\\c\/d\b\f\n\r\t"])") == "[ s:a\"b\\c/d\b\f\n\r\t ]");
  CHECK(trace(R"(["\u00e9\u5c42"])") == "[ s:é层 ]");
  CHECK(trace(R"(["\ud83d\ude00"])") == "[ s:\xf0\x9f\x98\x80 ]");
  CHECK(trace(R"(["\uD83D\uDE00"])") == "[ s:\xf0\x9f\x98\x80 ]");
  CHECK(trace("[\"\xf0\x9f\x98\x80 \xc3\xa9\"]") == "[ s:\xf0\x9f\x98\x80 \xc3\xa9 ]");
  {
    JsonReader json(R"(["a\u0000b"])");
    json.next();
    REQUIRE(json.next() == Token::string);
    CHECK(json.string() == std::string_view("a\0b", 3));
  }
  CHECK(error(R"(["\ud83d"])") ==
        "invalid JSON at byte 2: a high surrogate escape not followed by a low one");
  CHECK(error(R"(["\ud83d\u0041"])") ==
        "invalid JSON at byte 8: a high surrogate escape not followed by a low one");
  CHECK(error(R"(["\ude00"])") == "invalid JSON at byte 2: a lone low surrogate escape");
  CHECK(error(R"(["\ud83dx"])") ==
        "invalid JSON at byte 2: a high surrogate escape not followed by a low one");
  for (const char* bad : {R"(["\x41"])", R"(["\'"])", R"(["\u12"])", R"(["\u12g4"])",
                          R"(["\U0041"])", "[\"\\", "[\"\\u00"}) {
    CAPTURE(bad);
    CHECK(!valid(bad));
  }
  CHECK(error("[\"a\nb\"]") ==
        "invalid JSON at byte 3: a control character inside a string (it must be escaped)");
  CHECK(!valid("[\"\t\"]"));
  CHECK(!valid(std::string("[\"\0\"]", 5)));
  CHECK(valid("[\"\x7f\"]"));  // DEL is not a control character to JSON
  // base/text.hpp's UTF-8 rule.
  for (const char* bad :
       {"[\"\xff\"]", "[\"\x80\"]", "[\"\xc0\xaf\"]", "[\"\xe0\x80\xaf\"]", "[\"\xed\xa0\x80\"]",
        "[\"\xf4\x90\x80\x80\"]", "[\"\xe5\xb1\"]", "[\"\xe5\"]", "{\"\xff\": 1}"}) {
    CAPTURE(bad);
    CHECK(error(bad).find("not well-formed UTF-8") != std::string::npos);
  }
}

TEST_CASE("surrogate_escapes: ckptfs's own escapes of bytes that are not UTF-8 read back") {
  JsonLimits limits;
  limits.surrogate_escapes = true;
  // Every byte 0x80-0xff as base/text.hpp writes it reads back as that byte.
  std::string bytes, json = "[";
  for (int b = 0x80; b <= 0xff; ++b) bytes += static_cast<char>(b);
  append_json_string(json, bytes);
  json += "]";
  {
    JsonReader reader(json, limits);
    reader.next();
    REQUIRE(reader.next() == Token::string);
    CHECK(reader.string() == bytes);
  }
  CHECK(trace(R"(["a\udcffb", {"\udc80": 1}])", limits) ==
        "[ s:a\xff"
        "b { k:\x80 n:1 } ]");
  // Pairs still pair; what surrogateescape never makes is still refused.
  CHECK(trace(R"(["\ud83d\ude00"])", limits) == "[ s:\xf0\x9f\x98\x80 ]");
  CHECK(error(R"(["\udc7f"])", limits) == "invalid JSON at byte 2: a lone low surrogate escape");
  CHECK(error(R"(["\ude00"])", limits) == "invalid JSON at byte 2: a lone low surrogate escape");
  CHECK(error(R"(["\ud83d"])", limits) ==
        "invalid JSON at byte 2: a high surrogate escape not followed by a low one");
  // Off (the default), the format's rule.
  CHECK(error(R"(["\udcff"])") == "invalid JSON at byte 2: a lone low surrogate escape");
  // The byte counts toward the string limit.
  limits.max_string_bytes = 2;
  CHECK(error(R"(["\udcff\udcff\udcff"])", limits) ==
        "invalid JSON at byte 1: a string longer than 2 bytes");
}

TEST_CASE("strings longer than the limit are refused, not cut") {
  JsonLimits limits;
  limits.max_string_bytes = 10;
  CHECK(valid("[\"0123456789\"]"));
  CHECK(error("[\"0123456789\"]", limits).empty());
  CHECK(error("[\"01234567890\"]", limits) ==
        "invalid JSON at byte 1: a string longer than 10 bytes");
  CHECK(error("[\"012345678\\u00e9\"]", limits).find("longer than 10 bytes") !=
        std::string::npos);  // é is 2 bytes decoded
  CHECK(error("{\"0123456789x\": 1}", limits).find("longer than 10 bytes") != std::string::npos);
}

TEST_CASE("duplicate keys: refused in every object, at any depth, when it closes") {
  CHECK(error(R"({"a": 1, "a": 2})") ==
        "invalid JSON at byte 0: the object that starts here has the key \"a\" twice");
  CHECK(error(R"({"x": {"b": 1, "c": 2, "b": 3}})") ==
        "invalid JSON at byte 6: the object that starts here has the key \"b\" twice");
  CHECK(!valid(R"([{}, {"k": [], "k": []}])"));
  // Equal after decoding is equal.
  CHECK(!valid(R"({"é": 1, "\u00e9": 2})"));
  CHECK(!valid(R"({"a": {"b": 1}, "a": {"c": 1}})"));
  // The same key in different objects, and values equal to keys, are fine.
  CHECK(valid(R"({"a": {"a": {"a": "a"}}, "b": {"a": 1}})"));
  CHECK(valid(R"([{"a": 1}, {"a": 2}])"));
  CHECK(valid(R"({"a": 1, "A": 2, "a ": 3, "": 4})"));
  // The key comes back to the caller before the duplicate is found: the object's end says it.
  JsonReader json(R"({"a": 1, "a": 2})");
  CHECK(json.next() == Token::begin_object);
  CHECK(json.next() == Token::key);
  CHECK(json.next() == Token::number);
  CHECK(json.next() == Token::key);
  CHECK(json.next() == Token::number);
  CHECK_THROWS_AS(json.next(), Error);
}

TEST_CASE("nesting: a depth limit, and no recursion however deep the text") {
  auto nested = [](std::size_t n) { return std::string(n, '[') + std::string(n, ']'); };
  CHECK(valid(nested(128)));
  CHECK(error(nested(129)) ==
        "invalid JSON at byte 128: arrays and objects nested deeper than 128 levels");
  JsonLimits deep;
  deep.max_depth = 100'000;
  CHECK(error(nested(100'000), deep).empty());  // iterative: no stack overflow
  // Two million '[' (an attack on recursive parsers) end at the limit, at once.
  auto start = std::chrono::steady_clock::now();
  CHECK(!error(std::string(2'000'000, '[')).empty());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  std::string objects;
  for (int i = 0; i < 200; ++i) objects += "{\"k\":";
  CHECK(error(objects + "1" + std::string(200, '}')).find("deeper than 128") != std::string::npos);
}

TEST_CASE("skip_value() passes over whole values, keys and scalars") {
  JsonReader json(R"({"skip": {"a": [1, {"b": [[], "x"]}], "c": null}, "keep": 5, "s": "v"})");
  CHECK(json.next() == Token::begin_object);
  CHECK(json.next() == Token::key);
  json.skip_value();  // from the key: the whole member's value
  CHECK(json.token() == Token::end_object);
  CHECK(json.depth() == 1);
  CHECK(json.next() == Token::key);
  CHECK(json.string() == "keep");
  CHECK(json.next() == Token::number);
  json.skip_value();  // a scalar: nothing more
  CHECK(json.next() == Token::key);
  CHECK(json.next() == Token::string);
  CHECK(json.next() == Token::end_object);
  CHECK(json.next() == Token::end);
  // Skipped values obey every rule.
  JsonReader bad(R"({"skip": {"a": 1, "a": 2}, "keep": 5})");
  bad.next();
  bad.next();
  CHECK_THROWS_AS(bad.skip_value(), Error);
}

TEST_CASE("fail() reports the current token's offset") {
  JsonReader json(R"({"shape": "oops"})");
  json.next();
  json.next();
  json.next();
  try {
    json.fail("shape is not an array");
    FAIL("fail() returned");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::bad_checkpoint);
    CHECK(std::string(e.what()) == "at byte 10: shape is not an array");
  }
}

TEST_CASE("errors in a streamed text give offsets in the whole text") {
  std::string text = "[" + std::string(100'000, ' ') + "1,]";
  JsonReader json(pieces_of(text, 4096), {}, 4096);
  json.next();
  json.next();
  try {
    json.next();
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "invalid JSON at byte 100003: a trailing comma in an array");
  }
}

TEST_CASE("a million members, streamed: one pass, and the last key duplicating the first") {
  std::string text = "{";
  for (int i = 0; i < 1'000'000; ++i) text += "\"key." + std::to_string(i) + "\":" + "[0,1],";
  text += "\"key.0\":[]}";
  auto start = std::chrono::steady_clock::now();
  JsonReader json(pieces_of(text, 65536), {}, 65536);
  std::size_t keys = 0;
  std::string message;
  try {
    for (Token t = json.next(); t != Token::end; t = json.next()) keys += t == Token::key;
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(keys == 1'000'001);
  CHECK(message ==
        "invalid JSON at byte 0: the object that starts here has the key \"key.0\" "
        "twice");
  // Generous for sanitizer builds; about 0.3 s optimized.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

TEST_CASE("parse_json(): a document in the text's order") {
  JsonValue v = parse_json(
      R"({"b": [1, "two", null, true, {"x": -1.5}], "a": {}, "c": 18446744073709551615})");
  REQUIRE(v.is(JsonValue::Kind::object));
  REQUIRE(v.members().size() == 3);
  CHECK(v.members()[0].first == "b");
  CHECK(v.members()[1].first == "a");
  const JsonValue* b = v.find("b");
  REQUIRE(b);
  REQUIRE(b->items().size() == 5);
  CHECK(b->items()[0].uint64() == 1u);
  CHECK(b->items()[1].text() == "two");
  CHECK(b->items()[2].is(JsonValue::Kind::null));
  CHECK(b->items()[3].boolean());
  CHECK(b->items()[4].find("x")->floating() == -1.5);
  CHECK(!b->items()[4].find("x")->uint64());
  CHECK(v.find("a")->members().empty());
  CHECK(v.find("c")->uint64() == 18446744073709551615ull);
  CHECK(v.find("missing") == nullptr);
  CHECK(parse_json("3").uint64() == 3u);
  CHECK_THROWS_AS(parse_json(R"({"a": 1, "a": 1})"), Error);
  CHECK_THROWS_AS(parse_json("[1, 2, 3]", {}, 3), Error);  // four values with the array
  CHECK_NOTHROW(parse_json("[1, 2, 3]", {}, 4));
}

TEST_CASE("compact_json(): the same value without whitespace, numbers as written") {
  CHECK(
      compact_json(" { \"a\" : [ 1 , 2.50 , -0 , 1e3 ] ,\n \"b\": {\"c\": null},\"d\":true } \n") ==
      R"({"a":[1,2.50,-0,1e3],"b":{"c":null},"d":true})");
  CHECK(compact_json(R"("caf\u00e9 \" \u0001")") == "\"caf\xc3\xa9 \\\" \\u0001\"");
  CHECK(compact_json("[]") == "[]");
  CHECK(compact_json("{}") == "{}");
  CHECK(compact_json("7") == "7");
  // Its reader's rules all apply: nothing is written back that it would refuse.
  CHECK_THROWS_AS(compact_json("[1,]"), Error);
  CHECK_THROWS_AS(compact_json(R"({"a": 1, "a": 2})"), Error);
  CHECK_THROWS_AS(compact_json("\"\\ud800\""), Error);
  CHECK_THROWS_AS(compact_json("[[[1]]]", JsonLimits{2, 100, 100}), Error);
  // Deep nesting within the limit, without recursion.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  CHECK(compact_json(deep, JsonLimits{100'000, 100, 100}) == deep);
}

TEST_SUITE_END();
