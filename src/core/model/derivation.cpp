// SPDX-License-Identifier: MIT
// check_derivation(): a derived tensor's runs against its shape and its sources.
#include <ckptfs/model/derivation.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ckptfs {

std::string check_derivation(const Model& model, const Tensor& tensor) {
  if (tensor.derivation >= model.derivations.size()) return "its derivation is not in the model";
  const Derivation& d = model.derivations[tensor.derivation];
  if (tensor.dtype != DType::float32) return "a derived tensor is float32";
  if (tensor.storage || tensor.assembly || tensor.blocks != BlockFormat::none) {
    return "a derived tensor has no storage of its own";
  }
  Tensor c_order;
  c_order.shape = tensor.shape;
  c_order.stride = tensor.stride;
  if (!c_order.contiguous() || tensor.storage_offset != 0) {
    return "a derived tensor's stride is C order";
  }
  if (d.runs.empty() || d.runs.size() > max_derivation_runs) {
    return fmt::format("a derivation of {} runs (1 to {})", d.runs.size(), max_derivation_runs);
  }
  for (const Derivation::Run& run : d.runs) {
    if (run.source >= model.tensors.size()) return "a run's source is not in the model";
    const Tensor& s = model.tensors[run.source];
    if (s.derived()) return "a run's source is derived itself";
    if (!s.broken.empty()) return fmt::format("its source is broken: {}", s.broken);
    if (!s.storage && !s.assembly) return "its source has no elements (a meta tensor)";
  }
  const std::uint64_t numel = tensor.numel();
  if (d.transpose) {
    const Tensor& s = model.tensors[d.runs[0].source];
    if (d.runs.size() != 1 || s.shape.size() != 2 || tensor.shape.size() != 2 ||
        tensor.shape[0] != s.shape[1] || tensor.shape[1] != s.shape[0]) {
      return fmt::format("shape [{}] is no transpose of its source's [{}]",
                         fmt::join(tensor.shape, ", "), fmt::join(s.shape, ", "));
    }
    return {};
  }
  if (d.row_length == 0) return "rows of 0 elements";
  std::uint64_t rows = 0;
  for (const Derivation::Run& run : d.runs) {
    const Tensor& s = model.tensors[run.source];
    const std::uint64_t source_numel = s.numel();
    if (source_numel % d.row_length != 0) {
      return fmt::format("its source's {} elements are no whole number of rows of {}", source_numel,
                         d.row_length);
    }
    const std::uint64_t source_rows = source_numel / d.row_length;
    std::uint64_t last = 0;
    if (run.count == 0 || run.step == 0 || __builtin_mul_overflow(run.count - 1, run.step, &last) ||
        __builtin_add_overflow(last, run.first, &last) || last >= source_rows) {
      return fmt::format("a run of {} rows from row {} by {} is outside its source's {} rows",
                         run.count, run.first, run.step, source_rows);
    }
    if (run.at != rows) return fmt::format("a run starts at row {}, not {}", run.at, rows);
    if (__builtin_add_overflow(rows, run.count, &rows)) return "more rows than 64 bits count";
  }
  std::uint64_t elements = 0;
  if (__builtin_mul_overflow(rows, d.row_length, &elements) || elements != numel) {
    return fmt::format("its runs give {} rows of {}, not its {} elements", rows, d.row_length,
                       numel);
  }
  return {};
}

}  // namespace ckptfs
