// SPDX-License-Identifier: MIT
// Unit tests of the naming rule: escapes, reserved names, the cut of long names, collisions.
#include <ckptfs/base/names.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <vector>

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
  CHECK(directory_name("%index.json") == "%25index.json");
  // Hidden names: no key's name starts with '.', so `*` shows every key and `P*` for a key
  // prefix P never matches the mount's .ckptfs folder.
  CHECK(directory_name("...") == "%...");
  CHECK(directory_name(".ckptfs") == "%.ckptfs");
  CHECK(directory_name(".hidden.weight") == "%.hidden.weight");
  CHECK(directory_name("./x") == "%.%2Fx");
  CHECK(directory_name("a.") == "a.");
  CHECK(ckptfs::is_own_name("a.b"));
  CHECK_FALSE(ckptfs::is_own_name(".a"));
  // The root's own files in every layout and view.
  CHECK(directory_name("map") == "%map");
  CHECK(directory_name("model.safetensors") == "%model.safetensors");
  CHECK(directory_name("model.safetensors.index.json") == "%model.safetensors.index.json");
  CHECK(directory_name("model-00001-of-00004.safetensors") == "%model-00001-of-00004.safetensors");
  CHECK(directory_name("model-1-of-x.safetensors") == "model-1-of-x.safetensors");
  CHECK(directory_name("maps") == "maps");
}

TEST_CASE("fnv1a64 matches the reference values") {
  CHECK(ckptfs::fnv1a64("") == 0xcbf29ce484222325ull);
  CHECK(ckptfs::fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(ckptfs::fnv1a64("foobar") == 0x85944171f73967e8ull);
}

TEST_CASE("long names keep 200 bytes, %~ and the hash of the whole key") {
  std::string key(300, 'k');
  std::string name = directory_name(key);
  CHECK(name.size() == 200 + 2 + 16);
  CHECK(name == std::string(200, 'k') + fmt::format("%~{:016x}", ckptfs::fnv1a64(key)));

  SUBCASE("exactly 255 bytes is kept whole") {
    CHECK(directory_name(std::string(255, 'x')) == std::string(255, 'x'));
    CHECK(directory_name(std::string(256, 'x')).size() == 218);
  }
  SUBCASE("the cut never splits a UTF-8 character") {
    std::string utf8;
    while (utf8.size() < 300) utf8 += "层";  // 3 bytes each
    std::string cut = directory_name(utf8);
    CHECK(cut.substr(0, cut.size() - 18).size() == 198);
    CHECK(cut.substr(0, 198) == utf8.substr(0, 198));
  }
  SUBCASE("the cut never splits an escape") {
    std::string key2 = std::string(199, 'a') + "/" + std::string(100, 'b');
    std::string cut = directory_name(key2);
    CHECK(cut.substr(0, 201) == std::string(199, 'a') + "%~");
  }
  SUBCASE("different long keys with a common prefix differ") {
    CHECK(directory_name(key + "1") != directory_name(key + "2"));
  }
}

TEST_CASE("a literal key always gets the rule's name, only real collisions get %#N") {
  // {"a.b": 1, "a": {"b": 2}, "a.b#2": 3}: the literal "a.b#2" keeps its own name.
  ckptfs::NameAllocator names;
  CHECK(names.name("a.b") == "a.b");
  CHECK(names.name("a.b") == "a.b%#2");
  CHECK(names.name("a.b#2") == "a.b#2");
  CHECK(names.name("a.b%#2") == "a.b%25#2");  // the literal text of a suffixed name: escaped
  CHECK(names.name("a.b") == "a.b%#3");
}

TEST_CASE("keys of equal text: a number whose <text>%#<n> is a key of its own is skipped") {
  // {"a.b": 1, "a": {"b": 2}, "a.b%#2": 3, 0: 4, "0": 5, "0": ...}: pack writes the second "a.b"
  // as the key "a.b%#3" ("a.b%#2" is taken by a key of its own), and the mount names it so.
  const std::vector<std::string> keys = {"a.b", "a.b", "a.b%#2", "0", "0", "0%#3", "0"};
  const ckptfs::TextViewSet own(keys.begin(), keys.end());
  ckptfs::NameAllocator names(ckptfs::max_name_bytes, &own);
  std::vector<std::string> got;
  for (const auto& k : keys) got.push_back(names.name(k));
  CHECK(got ==
        std::vector<std::string>{"a.b", "a.b%#3", "a.b%25#2", "0", "0%#2", "0%25#3", "0%#4"});
  CHECK(ckptfs::suffix_is_own_key("a.b", 2, own));
  CHECK_FALSE(ckptfs::suffix_is_own_key("a.b", 3, own));
}

TEST_CASE("a literal key never takes a long key's cut name") {
  std::string long_key(300, 'k');
  std::string cut_name = directory_name(long_key);
  ckptfs::NameAllocator names;
  // A key whose text is the cut name is escaped: it cannot be the cut name itself.
  CHECK(names.name(cut_name) != cut_name);
  CHECK(names.name(long_key) == cut_name);
}

TEST_CASE("suffixed names stay within 255 bytes") {
  ckptfs::NameAllocator names;
  std::string key(255, 'x');
  CHECK(names.name(key) == key);
  std::string second = names.name(key);
  CHECK(second.size() <= 255);
  CHECK(second == std::string(200, 'x') + fmt::format("%~{:016x}%#2", ckptfs::fnv1a64(key)));
  CHECK(names.name(key).ends_with("%#3"));
}

TEST_CASE("key_of_name reverses the rule for names that say their key") {
  using ckptfs::key_of_name;
  for (std::string key : {"decoder.weight", "a/b", "100%", "%2F", "", ".", "..", "index.json",
                          "map", "model.safetensors", "model-00001-of-00002.safetensors",
                          "%index.json", "poids.层", ".ckptfs", ".hidden", "./x", ".%", "%.x"}) {
    CAPTURE(key);
    CHECK(key_of_name(directory_name(key)) == key);
  }
  CHECK(key_of_name(std::string_view("a%00b")) == std::string("a\0b", 3));
  // Names that do not say their key, and names the rule never makes.
  CHECK_FALSE(key_of_name(directory_name(std::string(300, 'x'))));  // cut: "%~" and a hash
  CHECK_FALSE(key_of_name("w%#2"));
  CHECK_FALSE(key_of_name("a%zz"));
  CHECK_FALSE(key_of_name("a%2"));
  CHECK_FALSE(key_of_name("%weight"));     // a '%' in front of a name that is not reserved
  CHECK_FALSE(key_of_name("index.json"));  // reserved: the rule writes it "%index.json"
  CHECK_FALSE(key_of_name(".hidden"));     // hidden: the rule writes it "%.hidden"
  CHECK_FALSE(key_of_name(".ckptfs"));
  CHECK_FALSE(key_of_name("a%2f"));  // escapes are upper-case
  // Within the RFC layout's 252 bytes: a 253-byte name is a directory's, never a <name>.pt's.
  const std::string long_key(253, 'y');
  CHECK(key_of_name(long_key) == long_key);
  CHECK_FALSE(key_of_name(long_key, ckptfs::rfc_name_bytes));
  CHECK(key_of_name(std::string(252, 'y'), ckptfs::rfc_name_bytes) == std::string(252, 'y'));
  CHECK(directory_name(long_key, ckptfs::rfc_name_bytes).find("%~") == 200);
}

TEST_SUITE_END();
