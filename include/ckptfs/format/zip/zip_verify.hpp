// SPDX-License-Identifier: MIT
// verify_zip_records(): every record of a zip read once, in the file's order, and its CRC-32
// compared with the one its central directory records (`ckptfs inspect --verify`).
#pragma once

#include <ckptfs/source/byte_source.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ckptfs {

struct ZipVerification {
  std::size_t records = 0;             // in the zip
  std::size_t checked = 0;             // whose CRC-32 was compared
  std::uint64_t bytes = 0;             // of the records checked, as stored (compressed)
  std::vector<std::string> unchecked;  // why a record was not: "record \"x\": method 12"...
  std::vector<std::string> corrupt;    // one line per record that does not match
};

// Reads the zip in `source` (ZipArchive: throws Error(bad_zip) when it is no valid zip) and each
// of its records whole, in order of their place in the file: a stored one as it is, a deflated
// one inflated (its size checked too), each CRC-32 compared with the central directory's. A
// record compressed otherwise or encrypted is not checked (said in `unchecked`); so is a
// non-empty record whose recorded CRC is 0 when `zero_is_none` (torch >= 2.6 writes 0 when told
// not to compute CRCs; zipfile and numpy take 0 as a CRC like any other). A record that cannot
// be read (a truncated file) or inflated is corrupt, with why. Throws what reading the zip's
// directory throws.
ZipVerification verify_zip_records(const ByteSource& source, bool zero_is_none);

}  // namespace ckptfs
