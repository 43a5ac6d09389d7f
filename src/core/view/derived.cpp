// SPDX-License-Identifier: MIT
// read_derived(): a derived tensor's values, row runs and transposes, from its sources' float32
// values (read as served.cpp serves them).
#include <ckptfs/view/convert.hpp>
#include <ckptfs/view/derived.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

namespace ckptfs {
namespace {

// Source values read at once (64 KiB of float32), when a read's rows come from one run.
constexpr std::uint64_t step_values = 16384;
constexpr std::uint64_t value_size = 4;  // float32

void apply_op(Derivation::Op op, std::span<float> values) {
  switch (op) {
    case Derivation::Op::none:
      return;
    case Derivation::Op::minus_one:
      // numpy's `weights - 1` on float32: one IEEE subtraction each.
      for (float& v : values) v -= 1.0f;
      return;
  }
}

// The values of elements [first, first + values.size()) of a derivation in rows.
void read_rows(const Model& model, const Derivation& d, std::uint64_t first,
               const ReadSourceValues& read, std::span<float> values) {
  const std::uint64_t length = d.row_length;
  std::uint64_t element = first;
  const std::uint64_t end = first + values.size();
  while (element < end) {
    const std::uint64_t row = element / length;
    const std::uint64_t column = element % length;
    // The run holding `row`: the last that starts at or before it.
    const auto it =
        std::upper_bound(d.runs.begin(), d.runs.end(), row,
                         [](std::uint64_t r, const Derivation::Run& run) { return r < run.at; }) -
        1;
    const Derivation::Run& run = *it;
    const std::uint64_t source_row = run.first + (row - run.at) * run.step;
    // Rows of a run of step 1 are consecutive in the source: read them together.
    const std::uint64_t available =
        run.step == 1 ? (run.at + run.count - row) * length - column : length - column;
    const std::uint64_t n = std::min({available, end - element, step_values});
    const std::span<float> into = values.subspan(element - first, n);
    read(model.tensors[run.source], (source_row * length + column) * value_size,
         {reinterpret_cast<char*>(into.data()), into.size_bytes()});
    element += n;
  }
}

// The values of elements [first, first + values.size()) of the transpose of a [rows, columns]
// source: element (c, r) of the tensor is (r, c) of the source. Each source row gives the
// elements of the columns the range touches, one read.
void read_transpose(const Tensor& source, std::uint64_t first, const ReadSourceValues& read,
                    std::span<float> values) {
  const auto rows = static_cast<std::uint64_t>(source.shape[0]);
  const auto columns = static_cast<std::uint64_t>(source.shape[1]);
  const std::uint64_t end = first + values.size();
  // The tensor's rows the range touches are the source's columns [low, high].
  const std::uint64_t low = first / rows;
  const std::uint64_t high = (end - 1) / rows;
  thread_local std::vector<float> band;
  band.resize(high - low + 1);
  for (std::uint64_t r = 0; r < rows; ++r) {
    // Column c of source row r is element c × rows + r of the tensor: in the range or not.
    const std::uint64_t from = low * rows + r < first ? low + 1 : low;
    const std::uint64_t to = high * rows + r >= end ? high : high + 1;  // one past
    if (from >= to) continue;
    const std::span<float> part(band.data(), to - from);
    read(source, (r * columns + from) * value_size,
         {reinterpret_cast<char*>(part.data()), part.size_bytes()});
    for (std::uint64_t c = from; c < to; ++c) values[c * rows + r - first] = part[c - from];
  }
}

}  // namespace

void read_derived(const Model& model, const Tensor& tensor, DType dtype, std::uint64_t offset,
                  std::span<char> out, const ReadSourceValues& read) {
  if (out.empty()) return;
  const Derivation& d = model.derivations[tensor.derivation];
  const std::uint64_t size = info(dtype).element_size;
  const std::uint64_t first = offset / size;
  const std::uint64_t end = (offset + out.size() + size - 1) / size;
  thread_local std::vector<float> values;
  values.resize(end - first);
  if (d.transpose) {
    read_transpose(model.tensors[d.runs[0].source], first, read, values);
  } else {
    read_rows(model, d, first, read, values);
  }
  apply_op(d.op, values);
  const char* served = reinterpret_cast<const char*>(values.data());
  thread_local std::vector<std::byte> converted;
  if (dtype != DType::float32) {
    converted.resize(values.size() * size);
    convert(DType::float32, dtype, false, reinterpret_cast<const std::byte*>(values.data()),
            converted.data(), values.size());
    served = reinterpret_cast<const char*>(converted.data());
  }
  std::memcpy(out.data(), served + (offset - first * size), out.size());
}

}  // namespace ckptfs
