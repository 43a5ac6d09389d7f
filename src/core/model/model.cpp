// SPDX-License-Identifier: MIT
// The model's derived quantities: element counts, contiguity, offsets in the source.
#include <ckptfs/model/model.hpp>

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
    case Format::hdf5:
      return "hdf5";
    case Format::keras:
      return "keras";
  }
  return "?";
}

std::uint64_t Tensor::numel() const noexcept {
  std::uint64_t n = 1;
  for (auto d : shape) {
    if (d <= 0) return 0;
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return 0;
  }
  return n;
}

std::uint64_t Tensor::nbytes() const noexcept {
  std::uint64_t n = 0;
  if (__builtin_mul_overflow(numel(), element_size(), &n)) return 0;
  return n;
}

std::uint64_t Tensor::stored_nbytes() const noexcept {
  std::uint64_t n = 0;
  if (blocks != BlockFormat::none) {
    const BlockFormatInfo& b = info(blocks);
    if (__builtin_mul_overflow(numel() / b.block_elements, b.block_bytes, &n)) return 0;
    return n;
  }
  if (__builtin_mul_overflow(numel(), stored_element_size(), &n)) return 0;
  return n;
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
