// SPDX-License-Identifier: MIT
// SHA-256 (FIPS 180-4): a digest of text that must not be stored as it is, and that another text
// must not be made to share (the disk cache's object keys, which hold URLs with their tokens).
//
//   ckptfs::Sha256 h;  h.update(a);  h.update(b);   // in pieces
//   h.hex() == ckptfs::sha256_hex(std::string(a) + std::string(b))
//
// Pure; an object is used by one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ckptfs {

class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;

  Sha256() noexcept;
  // Adds bytes to the message.
  void update(std::string_view bytes) noexcept;
  // The digest of everything added; the object is then spent (update() or finish() again give
  // meaningless values).
  Digest finish() noexcept;
  // finish() as 64 lower-case hex digits.
  std::string hex();

 private:
  void compress(const std::uint8_t* block) noexcept;
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> pending_{};
  std::size_t pending_size_ = 0;
  std::uint64_t total_ = 0;  // bytes added
};

// SHA-256 of `bytes`, as 64 lower-case hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace ckptfs
