// SPDX-License-Identifier: MIT
// Fuzz target: the ZIP reader over arbitrary bytes. Any input either throws Error(bad_zip or
// bad_checkpoint) or yields entries whose every byte range lies inside the file, before the
// central directory, without overlaps: the invariants the rest of ckptfs relies on.
#include "fuzz_check.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <algorithm>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ckptfs;
  MemorySource source(std::string(reinterpret_cast<const char*>(data), size));
  (void)looks_like_zip(source);
  try {
    ZipArchive zip(source, ZipLimits{.max_entries = 100'000, .max_central_directory = 1 << 24});
    const std::uint64_t cd = zip.central_directory_offset();
    FUZZ_CHECK(cd <= source.size());
    std::vector<const ZipEntry*> by_offset;
    for (const ZipEntry& e : zip.entries()) {
      FUZZ_CHECK(e.header_offset + 30 <= e.data_offset);
      FUZZ_CHECK(e.data_offset <= cd);
      FUZZ_CHECK(e.compressed_size <= cd - e.data_offset);
      FUZZ_CHECK(!e.stored() || e.compressed_size == e.size);
      FUZZ_CHECK(source.contains(e.data_offset, e.compressed_size));
      const ZipEntry* found = zip.find(e.name);
      FUZZ_CHECK(found != nullptr && found->name == e.name);
      by_offset.push_back(&e);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](auto* a, auto* b) { return a->header_offset < b->header_offset; });
    for (std::size_t i = 1; i < by_offset.size(); ++i) {
      FUZZ_CHECK(by_offset[i - 1]->data_offset + by_offset[i - 1]->compressed_size <=
                 by_offset[i]->header_offset);
    }
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_zip || e.code() == ExitCode::bad_checkpoint);
    FUZZ_CHECK(std::string_view(e.what()).find('\n') == std::string_view::npos);
  }
  return 0;
}
