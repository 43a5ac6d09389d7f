// SPDX-License-Identifier: MIT
// Unit tests of directory_name(): escapes, reserved names, and the cut of long names.
#include <ckptfs/view/names.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

using ckptfs::directory_name;

TEST_SUITE_BEGIN("names");

TEST_CASE("plain keys are their own names") {
  CHECK(directory_name("encoder.layers.0.weight") == "encoder.layers.0.weight");
  CHECK(directory_name("poids.ünïcødé.层") == "poids.ünïcødé.层");
  CHECK(directory_name("with space\nand newline") == "with space\nand newline");
}

TEST_CASE("percent, slash and NUL are escaped") {
  CHECK(directory_name("a/b") == "a%2Fb");
  CHECK(directory_name("100%") == "100%25");
  CHECK(directory_name(std::string_view("a\0b", 3)) == "a%00b");
  CHECK(directory_name("%2F") == "%252F");  // escaping stays reversible
}

TEST_CASE("names that cannot be directories get a percent in front") {
  CHECK(directory_name("") == "%");
  CHECK(directory_name(".") == "%.");
  CHECK(directory_name("..") == "%..");
  CHECK(directory_name("index.json") == "%index.json");
  CHECK(directory_name("...") == "...");
  CHECK(directory_name("%index.json") == "%25index.json");
}

TEST_CASE("fnv1a64 matches the reference values") {
  CHECK(ckptfs::fnv1a64("") == 0xcbf29ce484222325ull);
  CHECK(ckptfs::fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(ckptfs::fnv1a64("foobar") == 0x85944171f73967e8ull);
}

TEST_CASE("long names keep 200 bytes, a tilde and the hash of the whole key") {
  std::string key(300, 'k');
  std::string name = directory_name(key);
  CHECK(name.size() == 200 + 1 + 16);
  CHECK(name == std::string(200, 'k') + fmt::format("~{:016x}", ckptfs::fnv1a64(key)));

  SUBCASE("exactly 255 bytes is kept whole") {
    CHECK(directory_name(std::string(255, 'x')) == std::string(255, 'x'));
    CHECK(directory_name(std::string(256, 'x')).size() == 217);
  }
  SUBCASE("the cut never splits a UTF-8 character") {
    std::string utf8;
    while (utf8.size() < 300) utf8 += "层";  // 3 bytes each
    std::string cut = directory_name(utf8);
    CHECK(cut.substr(0, cut.size() - 17).size() == 198);
    CHECK(cut.substr(0, 198) == utf8.substr(0, 198));
  }
  SUBCASE("the cut never splits an escape") {
    std::string key2 = std::string(199, 'a') + "/" + std::string(100, 'b');
    std::string cut = directory_name(key2);
    CHECK(cut.substr(0, 200) == std::string(199, 'a') + "~");
  }
  SUBCASE("different long keys with a common prefix differ") {
    CHECK(directory_name(key + "1") != directory_name(key + "2"));
  }
}

TEST_SUITE_END();
