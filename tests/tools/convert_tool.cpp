// SPDX-License-Identifier: MIT
// Test tool for convert(): converts a file of raw elements for the torch comparison, and
// measures the throughput of each code path.
//
//   ckptfs_convert_tool paths             the code paths this CPU runs, one a line
//   ckptfs_convert_tool convert FROM TO little|big PATH IN OUT
//                                         IN's elements (of the byte order given) -> OUT,
//                                         little-endian
//   ckptfs_convert_tool bench [MIB]       GB/s per pair and path, as TSV
// PATH is scalar, avx2 or best. Exit status 0 on success, 1 on a usage error, 2 on an I/O error.
#include <ckptfs/view/convert.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

using namespace ckptfs;
using detail::ConvertPath;

namespace {

std::optional<ConvertPath> path_from_name(std::string_view name) {
  if (name == "scalar") return ConvertPath::scalar;
  if (name == "avx2") return ConvertPath::avx2;
  if (name == "best") return detail::convert_best_path();
  return std::nullopt;
}

const char* path_name(ConvertPath path) { return path == ConvertPath::avx2 ? "avx2" : "scalar"; }

int usage() {
  fmt::print(stderr,
             "usage: ckptfs_convert_tool paths\n"
             "       ckptfs_convert_tool convert FROM TO little|big scalar|avx2|best IN OUT\n"
             "       ckptfs_convert_tool bench [MIB]\n");
  return 1;
}

int convert_file(char** argv) {
  const auto from = dtype_from_name(argv[0]);
  const auto to = dtype_from_name(argv[1]);
  const std::string_view order = argv[2];
  const auto path = path_from_name(argv[3]);
  if (!from || !to || !convertible(*from, *to) || (order != "little" && order != "big") || !path) {
    return usage();
  }
  if (!detail::convert_path_available(*path)) {
    fmt::print(stderr, "ckptfs_convert_tool: this CPU cannot run path {}\n", argv[3]);
    return 1;
  }
  std::ifstream in_file(argv[4], std::ios::binary);
  std::vector<char> in;
  if (in_file) in.assign(std::istreambuf_iterator<char>(in_file), std::istreambuf_iterator<char>());
  const std::size_t in_size = info(*from).element_size;
  if (!in_file || in.size() % in_size != 0) {
    fmt::print(stderr, "ckptfs_convert_tool: cannot read {} as whole elements\n", argv[4]);
    return 2;
  }
  const std::size_t count = in.size() / in_size;
  std::vector<char> out(count * info(*to).element_size);
  detail::convert_with(*path, *from, *to, order == "big",
                       reinterpret_cast<const std::byte*>(in.data()),
                       reinterpret_cast<std::byte*>(out.data()), count);
  std::ofstream out_file(argv[5], std::ios::binary);
  out_file.write(out.data(), static_cast<std::streamsize>(out.size()));
  out_file.close();
  if (!out_file) {
    fmt::print(stderr, "ckptfs_convert_tool: cannot write {}\n", argv[5]);
    return 2;
  }
  return 0;
}

// Seconds of the fastest of `runs` calls of fn.
template <class Fn>
double fastest(int runs, Fn fn) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count());
  }
  return best;
}

// Two figures per pair and path, each the fastest of 5 runs, in GB/s of source bytes (1 GB =
// 1e9 bytes):
//  - staged: 64 KiB of source converted again and again, what read_converted() does (the source
//    stays in cache: the cost of the conversion itself);
//  - streamed: a MIB-MiB source converted in one call (memory-bound: source and output are
//    far larger than the caches).
int bench(std::size_t mib) {
  const std::size_t source_bytes = mib << 20;
  std::vector<std::byte> in(source_bytes);
  std::vector<std::byte> out(source_bytes * 2);  // room for the widest result (float16 -> float32)
  fmt::print("from\tto\tpath\tstaged_GBps\tstreamed_GBps\n");
  const std::pair<DType, DType> pairs[] = {
      {DType::float32, DType::float16},  {DType::float32, DType::bfloat16},
      {DType::bfloat16, DType::float32}, {DType::float16, DType::float32},
      {DType::float64, DType::float32},  {DType::float64, DType::bfloat16},
      {DType::float64, DType::float16},  {DType::float16, DType::bfloat16},
      {DType::bfloat16, DType::float16}, {DType::float32, DType::float32},
  };
  for (const auto& pair : pairs) {
    const DType from = pair.first, to = pair.second;  // not bindings: lambdas capture them
    const std::size_t in_size = info(from).element_size;
    const std::size_t count = source_bytes / in_size;
    // Finite values in [-8, 8), as model weights are (random bits would be mostly NaN and inf
    // for some pairs), written in the source dtype.
    std::vector<float> values(count);
    for (std::size_t i = 0; i < count; ++i) {
      values[i] =
          static_cast<float>(static_cast<double>((i * 2654435761u) % 1000003) / 62500.0 - 8.0);
    }
    if (from == DType::float64) {
      for (std::size_t i = 0; i < count; ++i) {
        const double d = values[i];
        std::memcpy(in.data() + i * 8, &d, 8);
      }
    } else {
      detail::convert_with(ConvertPath::scalar, DType::float32, from, false,
                           reinterpret_cast<const std::byte*>(values.data()), in.data(), count);
    }
    for (ConvertPath path : {ConvertPath::scalar, ConvertPath::avx2}) {
      if (!detail::convert_path_available(path)) continue;
      const std::size_t staged_count = convert_staging_bytes / in_size;
      const std::size_t repeats = std::max<std::size_t>(1, count / staged_count);
      const double staged = fastest(5, [&] {
        for (std::size_t r = 0; r < repeats; ++r) {
          detail::convert_with(path, from, to, false, in.data(), out.data(), staged_count);
        }
      });
      const double streamed = fastest(
          5, [&] { detail::convert_with(path, from, to, false, in.data(), out.data(), count); });
      fmt::print("{}\t{}\t{}\t{:.2f}\t{:.2f}\n", info(from).name, info(to).name, path_name(path),
                 static_cast<double>(repeats * staged_count * in_size) / staged / 1e9,
                 static_cast<double>(source_bytes) / streamed / 1e9);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string_view command = argv[1];
  if (command == "paths" && argc == 2) {
    for (ConvertPath path : {ConvertPath::scalar, ConvertPath::avx2}) {
      if (detail::convert_path_available(path)) fmt::print("{}\n", path_name(path));
    }
    return 0;
  }
  if (command == "convert" && argc == 8) return convert_file(argv + 2);
  if (command == "bench" && argc <= 3) {
    const std::size_t mib = argc == 3 ? std::stoul(argv[2]) : 64;
    return mib == 0 ? usage() : bench(mib);
  }
  return usage();
}
