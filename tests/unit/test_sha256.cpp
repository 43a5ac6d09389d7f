// SPDX-License-Identifier: MIT
// Tests of SHA-256: FIPS 180's examples, messages around the padding's block boundaries (values
// from Python's hashlib), and a message hashed in pieces of every size.
#include <ckptfs/base/sha256.hpp>

#include <doctest/doctest.h>

#include <string>

TEST_SUITE_BEGIN("sha256");

namespace {

std::string pattern(std::size_t n) {
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<char>((i * 7 + 3) & 255);
  return out;
}

}  // namespace

TEST_CASE("FIPS 180-2's examples") {
  CHECK(ckptfs::sha256_hex("") ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(ckptfs::sha256_hex("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(ckptfs::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(ckptfs::sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("lengths around the padding's boundaries (55, 56, 63, 64, 119, 120 bytes)") {
  const std::pair<std::size_t, const char*> cases[] = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {57, "35df609437dcfea3279283ab79fd554e2bf78f8f7ae2de532d8ee300b09e8f73"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
      {128, "d2742f1f4ac6bb7ca2b239ee18402ba8b3f9f8e652d2a72973c2b9ba11c08cf6"}};
  for (const auto& [n, want] : cases) {
    CAPTURE(n);
    CHECK(ckptfs::sha256_hex(pattern(n)) == want);
  }
}

TEST_CASE("a message added in pieces has the digest of the whole") {
  const std::string message = pattern(300);
  const std::string whole = ckptfs::sha256_hex(message);
  for (std::size_t piece = 1; piece <= 130; ++piece) {
    CAPTURE(piece);
    ckptfs::Sha256 h;
    for (std::size_t at = 0; at < message.size(); at += piece) {
      h.update(std::string_view(message).substr(at, piece));
    }
    CHECK(h.hex() == whole);
  }
}

TEST_SUITE_END();
