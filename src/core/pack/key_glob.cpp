// SPDX-License-Identifier: MIT
// KeyGlob: a pattern compiled into items, matched against code points with the usual greedy
// walk that returns to the last '*' on a mismatch.
#include <ckptfs/base/text.hpp>
#include <ckptfs/pack/key_glob.hpp>

namespace ckptfs {
namespace {

// The code points of `text`; a byte that starts no well-formed UTF-8 sequence is one of its own,
// as U+DC00 + byte (what Python's surrogateescape makes of it).
std::vector<char32_t> code_points(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t n = utf8_sequence_length(text, i);
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
    switch (n) {
      case 1:
        out.push_back(b(0));
        break;
      case 2:
        out.push_back(char32_t(b(0) & 0x1f) << 6 | (b(1) & 0x3f));
        break;
      case 3:
        out.push_back(char32_t(b(0) & 0x0f) << 12 | char32_t(b(1) & 0x3f) << 6 | (b(2) & 0x3f));
        break;
      case 4:
        out.push_back(char32_t(b(0) & 0x07) << 18 | char32_t(b(1) & 0x3f) << 12 |
                      char32_t(b(2) & 0x3f) << 6 | (b(3) & 0x3f));
        break;
      default:
        out.push_back(0xdc00 + b(0));
        break;
    }
    i += n == 0 ? 1 : n;
  }
  return out;
}

}  // namespace

KeyGlob::KeyGlob(std::string_view pattern) : pattern_(pattern) {
  const std::vector<char32_t> p = code_points(pattern);
  std::size_t i = 0;
  while (i < p.size()) {
    const char32_t c = p[i++];
    if (c == '*') {
      // Stars in a row are one star.
      if (items_.empty() || items_.back().kind != Item::Kind::star) {
        items_.emplace_back(Item::Kind::star);
      }
    } else if (c == '?') {
      items_.emplace_back(Item::Kind::any);
    } else if (c == '[') {
      // Where the set ends: a ']' right after '[' or '[!' belongs to the set (fnmatch's rule).
      std::size_t j = i;
      if (j < p.size() && p[j] == '!') ++j;
      if (j < p.size() && p[j] == ']') ++j;
      while (j < p.size() && p[j] != ']') ++j;
      if (j >= p.size()) {
        items_.emplace_back(Item::Kind::literal, '[');
        continue;
      }
      Item set(Item::Kind::set);
      std::size_t k = i;
      if (p[k] == '!') {
        set.negated = true;
        ++k;
      }
      while (k < j) {
        if (k + 2 < j && p[k + 1] == '-') {
          if (p[k] <= p[k + 2]) set.ranges.push_back({p[k], p[k + 2]});  // z-a: matches nothing
          k += 3;
        } else {
          set.ranges.push_back({p[k], p[k]});
          ++k;
        }
      }
      items_.push_back(std::move(set));
      i = j + 1;
    } else {
      items_.emplace_back(Item::Kind::literal, c);
    }
  }
}

bool KeyGlob::item_matches(const Item& item, char32_t c) const {
  switch (item.kind) {
    case Item::Kind::literal:
      return item.literal == c;
    case Item::Kind::any:
      return true;
    case Item::Kind::star:
      return false;
    case Item::Kind::set: {
      bool in = false;
      for (const Range& r : item.ranges) in = in || (c >= r.low && c <= r.high);
      return in != item.negated;
    }
  }
  return false;
}

bool KeyGlob::matches(std::string_view key) const {
  const std::vector<char32_t> text = code_points(key);
  std::size_t p = 0, s = 0;
  std::size_t star = items_.size();  // none yet
  std::size_t resume = 0;            // where the text resumes after the last star's match
  while (s < text.size()) {
    if (p < items_.size() && items_[p].kind == Item::Kind::star) {
      star = p++;
      resume = s;
    } else if (p < items_.size() && item_matches(items_[p], text[s])) {
      ++p;
      ++s;
    } else if (star != items_.size()) {
      // The last star takes one more character, and the items after it try again.
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (p < items_.size() && items_[p].kind == Item::Kind::star) ++p;
  return p == items_.size();
}

}  // namespace ckptfs
