// SPDX-License-Identifier: MIT
// Unit tests of KeyGlob: each expectation is what Python's fnmatch.fnmatchcase() answers for the
// same pattern and key (checked with /usr/bin/python3 when they were written).
#include <ckptfs/pack/key_glob.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>

using ckptfs::KeyGlob;

TEST_SUITE_BEGIN("key_glob");

TEST_CASE("patterns match as fnmatch.fnmatchcase does") {
  struct Case {
    const char* pattern;
    std::string key;
    bool match;
  };
  const Case cases[] = {
      {"a*", "abc", true},
      {"*.weight", "x.weight", true},
      {"decoder.*", "decoder.layers.0.weight", true},
      {"decoder.*", "encoder.weight", false},
      {"?", "\xc3\xa9", true},  // one character, two bytes
      {"??", "\xc3\xa9", false},
      {"[a-c]x", "bx", true},
      {"[!a-c]x", "dx", true},
      {"[!a-c]x", "ax", false},
      {"[", "[", true},
      {"a[", "a[", true},
      {"[]]", "x", false},
      {"[]]", "]", true},
      {"[!]]", "]", false},
      {"[!]]", "a", true},
      {"*a*a*b", "aaaaaaaaaaaaaac", false},
      {"[z-a]", "z", false},
      {"[*]", "*", true},
      {"[*]", "a", false},
      {"a-b", "a-b", true},
      {"[a-]", "-", true},
      {"x*", "x", true},
      {"", "", true},
      {"", "a", false},
      {"**", "", true},
      {"*", "a/b.c\nd", true},
      {"W", "w", false},
      {"a\\*", "a\\b", true},  // no escape character
      {"*.0.*", "layers.0.weight", true},
      {"*.0.*", "layers.10.weight", false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.pattern);
    CAPTURE(c.key);
    CHECK(KeyGlob(c.pattern).matches(c.key) == c.match);
  }
  // A byte that starts no UTF-8 sequence is a character of its own.
  CHECK(
      KeyGlob("a?b").matches(std::string("a\xff"
                                         "b")));
  CHECK(KeyGlob("a*").pattern() == "a*");
}

TEST_CASE("many stars against a long key stay quick") {
  const std::string key(20'000, 'a');
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(KeyGlob("*a*a*a*a*a*a*a*a*b").matches(key));
  CHECK(KeyGlob("*a*a*a*a*a*a*a*a*").matches(key));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_SUITE_END();
