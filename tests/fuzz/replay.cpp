// SPDX-License-Identifier: MIT
// Replay runner: a plain main() that feeds files to a fuzz target's LLVMFuzzerTestOneInput, so
// that the committed corpus and every crash ever found run as ordinary tests with any compiler.
//
//   fuzz_replay_zip tests/fuzz/corpus/zip tests/fuzz/crashes/zip [FILE...]
//
// Each argument is a file or a directory (its regular files but dot files, in name order). A
// failing input aborts (FUZZ_CHECK) or trips a sanitizer; the runner names each file before
// running it, so the log shows which one failed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> in_dir;
      for (const auto& entry : fs::directory_iterator(arg)) {
        if (entry.is_regular_file() && entry.path().filename().string()[0] != '.') {
          in_dir.push_back(entry.path());
        }
      }
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::exists(arg, ec)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s: no such file\n", argv[i]);
      return 2;
    }
  }
  std::uint64_t bytes = 0;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "replay: %s: cannot read\n", path.c_str());
      return 2;
    }
    std::fprintf(stderr, "replay: %s\n", path.c_str());
    // Like libFuzzer: the target sees a copy it does not own, in a buffer of exactly that size.
    std::vector<std::uint8_t> copy(data.begin(), data.end());
    LLVMFuzzerTestOneInput(copy.empty() ? nullptr : copy.data(), copy.size());
    bytes += copy.size();
  }
  std::printf("replayed %zu inputs (%llu bytes) without a failure\n", files.size(),
              static_cast<unsigned long long>(bytes));
  return 0;
}
