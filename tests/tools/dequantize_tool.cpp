// SPDX-License-Identifier: MIT
// Test tool for dequantize(): dequantizes a file of raw blocks for the gguf-py comparison, and
// measures the throughput of each code path.
//
//   ckptfs_dequantize_tool paths          the code paths this CPU runs, one a line
//   ckptfs_dequantize_tool formats        the block formats it dequantizes, one a line (GGML names)
//   ckptfs_dequantize_tool dequantize FORMAT PATH IN OUT
//                                         IN's blocks of FORMAT ("Q4_K") -> OUT, float32 LE
//   ckptfs_dequantize_tool bench [MIB]    GB/s of float32 values per format and path, as TSV
// PATH is scalar, avx2 or best. Exit status 0 on success, 1 on a usage error, 2 on an I/O error.
#include <ckptfs/format/gguf/dequantize.hpp>
#include <ckptfs/view/read_dequantized.hpp>

#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

using namespace ckptfs;
using detail::DequantizePath;

namespace {

constexpr BlockFormat every_format[] = {
    BlockFormat::q4_0,    BlockFormat::q4_1,   BlockFormat::q5_0,    BlockFormat::q5_1,
    BlockFormat::q8_0,    BlockFormat::q8_1,   BlockFormat::q2_k,    BlockFormat::q3_k,
    BlockFormat::q4_k,    BlockFormat::q5_k,   BlockFormat::q6_k,    BlockFormat::q8_k,
    BlockFormat::iq2_xxs, BlockFormat::iq2_xs, BlockFormat::iq3_xxs, BlockFormat::iq1_s,
    BlockFormat::iq4_nl,  BlockFormat::iq3_s,  BlockFormat::iq2_s,   BlockFormat::iq4_xs,
    BlockFormat::iq1_m,   BlockFormat::tq1_0,  BlockFormat::tq2_0,   BlockFormat::mxfp4,
    BlockFormat::nvfp4,   BlockFormat::q1_0,   BlockFormat::q2_0};

std::optional<BlockFormat> format_from_name(std::string_view name) {
  for (BlockFormat f : every_format) {
    if (info(f).name == name) return f;
  }
  return std::nullopt;
}

std::optional<DequantizePath> path_from_name(std::string_view name) {
  if (name == "scalar") return DequantizePath::scalar;
  if (name == "avx2") return DequantizePath::avx2;
  if (name == "best") return detail::dequantize_best_path();
  return std::nullopt;
}

const char* path_name(DequantizePath path) {
  return path == DequantizePath::avx2 ? "avx2" : "scalar";
}

int usage() {
  fmt::print(stderr,
             "usage: ckptfs_dequantize_tool paths|formats\n"
             "       ckptfs_dequantize_tool dequantize FORMAT scalar|avx2|best IN OUT\n"
             "       ckptfs_dequantize_tool bench [MIB]\n");
  return 1;
}

int dequantize_file(char** argv) {
  const auto format = format_from_name(argv[0]);
  const auto path = path_from_name(argv[1]);
  if (!format || !dequantizable(*format) || !path) return usage();
  if (!detail::dequantize_path_available(*path)) {
    fmt::print(stderr, "ckptfs_dequantize_tool: this CPU cannot run path {}\n", argv[1]);
    return 1;
  }
  std::ifstream in_file(argv[2], std::ios::binary);
  std::vector<char> in;
  if (in_file) in.assign(std::istreambuf_iterator<char>(in_file), std::istreambuf_iterator<char>());
  const BlockFormatInfo& b = info(*format);
  if (!in_file || in.size() % b.block_bytes != 0) {
    fmt::print(stderr, "ckptfs_dequantize_tool: cannot read {} as whole blocks\n", argv[2]);
    return 2;
  }
  const std::size_t blocks = in.size() / b.block_bytes;
  std::vector<char> out(blocks * b.block_elements * 4);
  detail::dequantize_with(*path, *format, reinterpret_cast<const std::byte*>(in.data()),
                          reinterpret_cast<std::byte*>(out.data()), blocks);
  std::ofstream out_file(argv[3], std::ios::binary);
  out_file.write(out.data(), static_cast<std::streamsize>(out.size()));
  out_file.close();
  if (!out_file) {
    fmt::print(stderr, "ckptfs_dequantize_tool: cannot write {}\n", argv[3]);
    return 2;
  }
  return 0;
}

// GB/s of float32 values, each format on random blocks (a NaN or an infinity in a scale does not
// slow down SSE/AVX arithmetic), values written to a buffer of 64 KiB as a read does.
int bench(std::size_t mib) {
  std::mt19937_64 random(42);
  fmt::print("format\tpath\tGB/s\n");
  for (BlockFormat f : every_format) {
    if (!dequantizable(f)) continue;
    const BlockFormatInfo& b = info(f);
    const std::size_t values_per_step = dequantize_staging_bytes / 4;
    const std::size_t per_step = values_per_step / b.block_elements;
    const std::size_t total_blocks = (mib << 20) / 4 / b.block_elements;
    std::vector<std::byte> in(total_blocks * b.block_bytes);
    for (auto& byte : in) byte = static_cast<std::byte>(random());
    std::vector<std::byte> out(dequantize_staging_bytes);
    for (DequantizePath path : {DequantizePath::scalar, DequantizePath::avx2}) {
      if (!detail::dequantize_path_available(path)) continue;
      double best = 0;
      for (int run = 0; run < 3; ++run) {
        const auto start = std::chrono::steady_clock::now();
        for (std::size_t at = 0; at + per_step <= total_blocks; at += per_step) {
          detail::dequantize_with(path, f, in.data() + at * b.block_bytes, out.data(), per_step);
        }
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        best = std::max(
            best, static_cast<double>(total_blocks / per_step * per_step * b.block_elements * 4) /
                      seconds / 1e9);
      }
      fmt::print("{}\t{}\t{:.2f}\n", b.name, path_name(path), best);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string_view command = argv[1];
  if (command == "paths" && argc == 2) {
    for (DequantizePath p : {DequantizePath::scalar, DequantizePath::avx2}) {
      if (detail::dequantize_path_available(p)) fmt::print("{}\n", path_name(p));
    }
    return 0;
  }
  if (command == "formats" && argc == 2) {
    for (BlockFormat f : every_format) {
      if (dequantizable(f)) fmt::print("{}\n", info(f).name);
    }
    return 0;
  }
  if (command == "dequantize" && argc == 6) return dequantize_file(argv + 2);
  if (command == "bench" && argc <= 3) {
    return bench(argc == 3 ? std::stoul(argv[2]) : 64);
  }
  return usage();
}
