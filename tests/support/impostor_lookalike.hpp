// SPDX-License-Identifier: MIT
// Valid files that look like an impostor (format/impostor.hpp) where their bytes can be chosen:
// for the tests that such a file is read as what it is, never refused for what it holds.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <functional>
#include <string>

namespace ckptfs::test {

// A valid file whose first 512 bytes are a POSIX tar header too: "ustar" at 257 and the checksum
// tar computes at 148 (right only when nothing else in those bytes depends on the text, as a
// zip's CRC-32 in a local header would). `build(text)` makes the file with `text` (a key, a name,
// a string value) over bytes 148 to 262; each build must place it at the same offset.
inline std::string tar_lookalike(const std::function<std::string(const std::string&)>& build) {
  const std::string filler(600, 'm');
  std::string file = build(filler);
  const std::size_t at = file.find(filler);
  REQUIRE(at <= 148);
  REQUIRE(at + filler.size() >= 262);
  REQUIRE(file.size() >= 512);
  std::string text = filler;
  text.replace(257 - at, 5, "ustar");
  text.replace(148 - at, 8, std::string(8, ' '));
  file = build(text);
  unsigned sum = 0;
  for (std::size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(file[i]);
  char field[16];
  std::snprintf(field, sizeof field, "%06o  ", sum);
  text.replace(148 - at, 8, field, 8);
  return build(text);
}

}  // namespace ckptfs::test
