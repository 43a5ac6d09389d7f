// SPDX-License-Identifier: MIT
// The model's derived quantities: element counts, sizes checked, contiguity, offsets in the source.
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/model/model.hpp>

#include <fmt/format.h>

namespace ckptfs {

std::string_view format_name(Format format) {
  switch (format) {
    case Format::zip:
      return "zip";
    case Format::legacy:
      return "legacy";
    case Format::torchscript:
      return "torchscript";
    case Format::safetensors:
      return "safetensors";
    case Format::sharded:
      return "sharded";
    case Format::split:
      return "split";
    case Format::rfc:
      return "rfc";
    case Format::dcp:
      return "dcp";
    case Format::zero:
      return "zero";
    case Format::gguf:
      return "gguf";
    case Format::npz:
      return "npz";
    case Format::onnx:
      return "onnx";
    case Format::hdf5:
      return "hdf5";
    case Format::keras:
      return "keras";
  }
  return "?";
}

std::uint64_t Tensor::numel() const noexcept { return element_count(shape).value_or(0); }

std::uint64_t Tensor::nbytes() const noexcept {
  if (numel() == 0) return 0;  // an overflowing count too
  return tensor_nbytes(dtype, shape).value_or(0);
}

std::uint64_t Tensor::stored_nbytes() const noexcept {
  if (blocks != BlockFormat::none) {
    const BlockFormatInfo& b = info(blocks);
    return checked_product(numel() / b.block_elements, b.block_bytes).value_or(0);
  }
  if (numel() == 0) return 0;  // an overflowing count too
  return tensor_nbytes(stored(), shape).value_or(0);
}

std::string size_problem(const Tensor& t) {
  const std::string shape = fmt::format("[{}]", fmt::join(t.shape, ", "));
  for (const std::int64_t d : t.shape) {
    if (d < 0) return fmt::format("its shape {} has a negative dimension", shape);
  }
  const auto numel = element_count(t.shape);
  if (!numel) return fmt::format("its shape {} has more elements than 64 bits count", shape);
  // tensor_nbytes(): numel × element size, or a packed dtype's rows of bytes.
  const auto served = tensor_nbytes(t.dtype, t.shape);
  auto stored = tensor_nbytes(t.stored(), t.shape);
  if (t.blocks != BlockFormat::none) {
    const BlockFormatInfo& b = info(t.blocks);
    stored = checked_product(*numel / b.block_elements, b.block_bytes);
  }
  if (!served || !stored || *served > max_tensor_bytes || *stored > max_tensor_bytes) {
    return fmt::format("its shape {} of {} holds more bytes than a file can (at most {})", shape,
                       t.blocks != BlockFormat::none ? info(t.blocks).name : info(t.dtype).name,
                       max_tensor_bytes);
  }
  return {};
}

bool Tensor::contiguous() const noexcept {
  if (shape.size() != stride.size()) return false;
  if (numel() == 0) return true;
  std::uint64_t expected = 1;  // numel() did not overflow, so neither does this
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && static_cast<std::uint64_t>(stride[i]) != expected) return false;
    expected *= static_cast<std::uint64_t>(shape[i]);
  }
  return true;
}

std::optional<std::uint64_t> Model::offset_in_storage(const Tensor& t) const {
  if (!t.broken.empty() || !t.storage || !t.contiguous()) return std::nullopt;
  const Storage& s = storages[*t.storage];
  if (t.blocks != BlockFormat::none) {
    if (t.storage_offset != 0 || t.stored_nbytes() > s.nbytes) return std::nullopt;
    return 0;
  }
  // Inside the storage, the empty tensors too: an empty view may sit at any offset (x[5:5]).
  std::uint64_t begin = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(t.storage_offset), t.stored_element_size(),
                             &begin) ||
      begin > s.nbytes || t.stored_nbytes() > s.nbytes - begin) {
    return std::nullopt;
  }
  return begin;
}

std::optional<std::uint64_t> Model::file_offset(const Tensor& t) const {
  const auto begin = offset_in_storage(t);
  if (!begin) return std::nullopt;
  return data_offset(storages[*t.storage]) + *begin;
}

bool big_endian(const Model& model, const Tensor& tensor) noexcept {
  if (tensor.storage) return model.storages[*tensor.storage].big_endian;
  if (!tensor.assembly) return false;
  const Assembly& a = model.assemblies[*tensor.assembly];
  return a.size() != 0 && model.storages[a.piece(0).storage].big_endian;
}

std::string_view Model::byteorder() const {
  bool little = false, big = false;
  for (const Storage& s : storages) (s.big_endian ? big : little) = true;
  return little && big ? "mixed" : big ? "big" : "little";
}

}  // namespace ckptfs
