// SPDX-License-Identifier: MIT
// Shell-style patterns over keys, as Python's fnmatch.fnmatchcase() matches them: what
// `ckptfs pack --keys GLOB` selects with.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

// A compiled pattern:
//   *        any run of characters, '.' and '/' included ("decoder.*" takes every decoder key)
//   ?        one character
//   [seq]    one character of seq ("a-z" a range); [!seq] one character not in it; a '[' that
//            no ']' closes is itself
//   anything else, itself (no escape character: "[*]" matches a '*', as in fnmatch)
// Characters are UTF-8 code points; a byte that starts no well-formed sequence is a character
// of its own. Matching is case-sensitive and takes O(pattern x key) steps at most (no
// backtracking blow-up: "*a*a*a*b" against a long key stays linear per star).
class KeyGlob {
 public:
  explicit KeyGlob(std::string_view pattern);
  bool matches(std::string_view key) const;
  const std::string& pattern() const noexcept { return pattern_; }

 private:
  struct Range {
    char32_t low;
    char32_t high;
  };
  struct Item {
    enum class Kind : unsigned char { literal, any, star, set };
    explicit Item(Kind k, char32_t c = 0) : kind(k), literal(c) {}
    Kind kind;
    char32_t literal;
    bool negated = false;
    std::vector<Range> ranges;  // set
  };
  bool item_matches(const Item& item, char32_t c) const;

  std::string pattern_;
  std::vector<Item> items_;
};

}  // namespace ckptfs
