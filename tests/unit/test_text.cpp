// SPDX-License-Identifier: MIT
// Unit tests of the one UTF-8 rule and its escapes: JSON strings, terminal text, quoted names.
#include <ckptfs/base/text.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace ckptfs;

TEST_SUITE_BEGIN("text");

TEST_CASE("utf8_sequence_length() accepts well-formed UTF-8 only") {
  using namespace std::string_literals;
  CHECK(utf8_sequence_length("a", 0) == 1);
  CHECK(utf8_sequence_length("é", 0) == 2);
  CHECK(utf8_sequence_length("层", 0) == 3);
  CHECK(utf8_sequence_length("\xf0\x9f\x98\x80", 0) == 4);
  CHECK(utf8_sequence_length("\x80", 0) == 0);              // a continuation byte
  CHECK(utf8_sequence_length("\xc0\xaf", 0) == 0);          // overlong '/'
  CHECK(utf8_sequence_length("\xe0\x80\xaf", 0) == 0);      // overlong, three bytes
  CHECK(utf8_sequence_length("\xed\xa0\x80", 0) == 0);      // a surrogate
  CHECK(utf8_sequence_length("\xf4\x90\x80\x80", 0) == 0);  // past U+10FFFF
  CHECK(utf8_sequence_length("\xe5\xb1", 0) == 0);          // cut short
  CHECK(utf8_sequence_length("\xe5\x41\x42", 0) == 0);      // not a continuation
}

TEST_CASE("append_json_string(): surrogateescape for every byte that starts no character") {
  auto json = [](std::string_view s) {
    std::string out;
    append_json_string(out, s);
    return out;
  };
  CHECK(json("a\"b\\c\n\t\x01") == R"("a\"b\\c\n\t\u0001")");
  CHECK(json("poids.层") == "\"poids.层\"");
  CHECK(json(std::string("\xff\xfe", 2)) == R"("\udcff\udcfe")");
  // Two different byte strings never give the same text: an encoded surrogate is three escapes.
  CHECK(json("\xed\xb3\xbf") == R"("\udced\udcb3\udcbf")");
  CHECK(json("\xed\xb3\xbf") != json("\xff"));
}

TEST_CASE("quote() makes untrusted names printable on one line") {
  CHECK(quote("archive/data/0") == "\"archive/data/0\"");
  CHECK(quote("a\nb\"c\\") == "\"a\\x0ab\\\"c\\\\\"");
  CHECK(quote("poids.层") == "\"poids.层\"");
  CHECK(quote(std::string("\xff\xfe", 2)) == "\"\\xff\\xfe\"");
  CHECK(quote("\xc2\x85") == "\"\\xc2\\x85\"");  // a C1 control character
  CHECK(quote(std::string(500, 'x')).size() < 130);
  CHECK(escape_for_terminal("tab\there", SIZE_MAX) == "tab\\x09here");
}

TEST_CASE("shell_quote() gives a word a shell reads back as the path") {
  CHECK(shell_quote("/data/model.pth") == "/data/model.pth");
  CHECK(shell_quote("my model's dir") == "'my model'\\''s dir'");
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("a\nb") == "\"a\\x0ab\"");  // a control character: shown escaped
}

TEST_SUITE_END();
