// SPDX-License-Identifier: MIT
// serve(), read_served() and read_stored(): a tensor's bytes as served; a strided view's read
// from its storage in coalesced windows; an assembled tensor's, piece by piece.
#include <ckptfs/model/assembly.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/convert.hpp>
#include <ckptfs/view/dequantize.hpp>
#include <ckptfs/view/derived.hpp>
#include <ckptfs/view/served.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

namespace ckptfs {
namespace {

struct Run {
  std::uint64_t source;  // absolute offset in the checkpoint
  std::uint64_t target;  // offset in the gathered buffer
  std::uint64_t length;
};

// Runs closer than this are read with one pread, and one pread reads at most max_window bytes:
// a transposed matrix then costs one small read per row instead of one per element.
constexpr std::uint64_t max_gap = 4096;
constexpr std::uint64_t max_window = 1 << 20;

}  // namespace

void gather_view(const StridedView& view, std::uint64_t offset, Sources sources,
                 std::span<char> out) {
  const std::size_t length = out.size();
  if (length == 0) return;
  const std::uint64_t es = view.element_size;
  const ByteSource& source = *sources[view.storage->source];
  const std::uint64_t base = data_offset(*view.storage);
  const std::size_t dims = view.shape.size();
  const std::uint64_t first = offset / es;
  const std::uint64_t last = (offset + length + es - 1) / es;  // one past the last element
  // Runs of elements adjacent in the storage: the innermost dimension when its stride is 1.
  const bool inner_contiguous = dims > 0 && view.stride[dims - 1] == 1;
  const std::uint64_t inner = dims > 0 ? static_cast<std::uint64_t>(view.shape[dims - 1]) : 1;

  // The multi-index of element `first`.
  thread_local std::vector<std::uint64_t> index;
  index.assign(dims, 0);
  std::uint64_t rest = first;
  for (std::size_t d = dims; d-- > 0;) {
    auto size = static_cast<std::uint64_t>(view.shape[d]);
    index[d] = rest % size;
    rest /= size;
  }

  thread_local std::vector<Run> runs;
  runs.clear();
  std::uint64_t element = first;
  while (element < last) {
    std::uint64_t storage_element = static_cast<std::uint64_t>(view.storage_offset);
    for (std::size_t d = 0; d < dims; ++d) {
      storage_element += index[d] * static_cast<std::uint64_t>(view.stride[d]);
    }
    std::uint64_t count = 1;
    if (inner_contiguous) count = std::min(inner - index[dims - 1], last - element);
    runs.push_back({base + storage_element * es, (element - first) * es, count * es});
    element += count;
    // Advance the multi-index by `count` elements (count only spans the innermost dimension).
    if (dims > 0) {
      index[dims - 1] += count;
      for (std::size_t d = dims;
           d-- > 1 && index[d] >= static_cast<std::uint64_t>(view.shape[d]);) {
        index[d] = 0;
        ++index[d - 1];
      }
    }
  }

  // Elements are read whole into `elements`, then the requested bytes are cut out of it.
  thread_local std::vector<char> elements;
  thread_local std::vector<char> window;
  elements.resize((last - first) * es);
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.source < b.source; });
  for (std::size_t i = 0; i < runs.size();) {
    std::uint64_t begin = runs[i].source;
    std::uint64_t end = begin + runs[i].length;
    std::size_t j = i + 1;
    while (j < runs.size() && runs[j].source <= end + max_gap &&
           std::max(end, runs[j].source + runs[j].length) - begin <= max_window) {
      end = std::max(end, runs[j].source + runs[j].length);
      ++j;
    }
    window.resize(end - begin);
    source.read(begin, std::as_writable_bytes(std::span(window)));
    for (std::size_t k = i; k < j; ++k) {
      std::memcpy(elements.data() + runs[k].target, window.data() + (runs[k].source - begin),
                  runs[k].length);
    }
    i = j;
  }
  std::memcpy(out.data(), elements.data() + (offset - first * es), length);
}

namespace {

StridedView view_of(const Model& model, const Tensor& tensor) {
  return {&model.storages[*tensor.storage], tensor.storage_offset, tensor.shape, tensor.stride,
          tensor.stored_element_size()};
}

StridedView view_of_piece(const Model& model, const Assembly& a, std::size_t piece,
                          std::size_t element_size) {
  const Piece& p = a.piece(piece);
  return {&model.storages[p.storage], p.storage_offset, a.length(piece), a.stride(piece),
          element_size};
}

// Calls visit(storage, piece view, its contiguity, offset in the piece's C-order bytes,
// length) for each part of bytes [offset, offset + length) of an assembled tensor, in order.
template <typename Visit>
void for_each_piece_part(const Model& model, const Tensor& tensor, std::uint64_t offset,
                         std::uint64_t length, Visit visit) {
  const Assembly& a = model.assemblies[*tensor.assembly];
  const std::uint64_t es = tensor.stored_element_size();
  const std::uint64_t end = offset + length;
  const std::uint64_t last = (end + es - 1) / es;  // one past the last element touched
  for (std::uint64_t at = offset; at < end;) {
    const std::uint64_t first = at / es;
    const PieceRun run = run_at(tensor, a, first, last - first);
    const std::uint64_t n = std::min(end, (first + run.count) * es) - at;
    visit(view_of_piece(model, a, run.piece, es), a.contiguous(run.piece),
          run.local * es + (at - first * es), n);
    at += n;
  }
}

// The source range of bytes [offset, offset + length) of a view that is contiguous.
std::uint64_t contiguous_offset(const StridedView& view, std::uint64_t offset) {
  return data_offset(*view.storage) +
         static_cast<std::uint64_t>(view.storage_offset) * view.element_size + offset;
}

// serve() of a block-quantized tensor: its values, dequantized on read.
ServedTensor serve_blocks(const Model& model, const Tensor& tensor,
                          std::optional<DType> convert_to) {
  ServedTensor s;
  s.dtype = s.stored = tensor.dtype;
  s.big_endian = big_endian(model, tensor);
  const auto begin = model.offset_in_storage(tensor);
  if (!tensor.broken.empty() || !begin || !values_not_served(model, tensor).empty()) return s;
  // Values are served little-endian, whatever the blocks'.
  const bool big_endian_blocks = s.big_endian;
  s.big_endian = false;
  if (convert_to && convertible(DType::float32, *convert_to)) s.dtype = *convert_to;
  s.contiguous = true;
  s.storage = *tensor.storage;
  s.begin = *begin;
  s.blocks = tensor.blocks;
  s.blocks_big_endian = big_endian_blocks;
  s.nbytes = tensor.numel() * info(s.dtype).element_size;  // float32's fits (Tensor::blocks)
  if (s.nbytes != 0) s.way = ServedTensor::Way::dequantize;
  return s;
}

// Why derived `tensor`'s values are not served: a source whose values are not served as
// float32 (values_not_served(), or a dtype convert() does not make float32 of); "" when they are.
std::string_view derived_values_not_served(const Model& model, const Tensor& tensor) {
  for (const Derivation::Run& run : model.derivations[tensor.derivation].runs) {
    const Tensor& source = model.tensors[run.source];
    if (const std::string_view why = values_not_served(model, source); !why.empty()) return why;
    if (source.blocks == BlockFormat::none && !convertible(source.dtype, DType::float32)) {
      return "a source of a dtype that is not served as float32";
    }
  }
  return {};
}

// Bytes [offset, offset + out.size()) of `source`'s values as float32, little-endian: what
// read_derived() takes its sources' values from.
void read_source_values(const Model& model, const Tensor& source, std::uint64_t offset,
                        Sources sources, std::span<char> out) {
  const ServedTensor served = serve(model, source, DType::float32, ByteOrder::little);
  thread_local ReadBuffer buffer;
  buffer.clear();
  read_served(model, source, served, offset, out.size(), sources, buffer);
  char* at = out.data();
  for (const ReadPiece& p : buffer.pieces()) {
    if (p.memory) {
      std::memcpy(at, p.memory, p.length);
    } else {
      sources[p.source]->read(p.source_offset, std::as_writable_bytes(std::span(at, p.length)));
    }
    at += p.length;
  }
}

// serve() of a derived tensor: its values, computed on read.
ServedTensor serve_derived(const Model& model, const Tensor& tensor,
                           std::optional<DType> convert_to) {
  ServedTensor s;
  s.dtype = s.stored = tensor.dtype;
  if (!tensor.broken.empty() || !derived_values_not_served(model, tensor).empty()) return s;
  if (convert_to && convertible(DType::float32, *convert_to)) s.dtype = *convert_to;
  s.nbytes = tensor.numel() * info(s.dtype).element_size;  // float32's fits (the reader checked)
  if (s.nbytes != 0) s.way = ServedTensor::Way::derive;
  return s;
}

}  // namespace

void read_stored(const Model& model, const Tensor& tensor, std::uint64_t offset, Sources sources,
                 std::span<char> out) {
  if (out.empty()) return;
  if (tensor.assembly) {
    std::size_t done = 0;
    for_each_piece_part(
        model, tensor, offset, out.size(),
        [&](const StridedView& view, bool contiguous, std::uint64_t at, std::uint64_t n) {
          const std::span<char> into = out.subspan(done, n);
          if (contiguous) {
            sources[view.storage->source]->read(contiguous_offset(view, at),
                                                std::as_writable_bytes(into));
          } else {
            gather_view(view, at, sources, into);
          }
          done += n;
        });
    return;
  }
  if (const auto begin = model.offset_in_storage(tensor)) {
    const Storage& storage = model.storages[*tensor.storage];
    sources[storage.source]->read(data_offset(storage) + *begin + offset,
                                  std::as_writable_bytes(out));
    return;
  }
  gather_view(view_of(model, tensor), offset, sources, out);
}

std::string_view values_not_served(const Model& model, const Tensor& tensor) {
  if (tensor.derived() && tensor.broken.empty()) return derived_values_not_served(model, tensor);
  if (tensor.blocks == BlockFormat::none) return {};
  if (!dequantizable(tensor.blocks)) return info(tensor.blocks).not_dequantized;
  if (big_endian(model, tensor) && !big_endian_dequantizable(tensor.blocks)) {
    return "big-endian blocks of a type gguf-convert-endian (which writes big-endian GGUF "
           "files) does not convert: the byte order of their fields is unknown, they are "
           "served as data only";
  }
  return {};
}

std::uint64_t nominal_nbytes(const Tensor& tensor, bool data) noexcept {
  std::uint64_t numel = 1;
  for (const std::int64_t d : tensor.shape) {
    if (d < 0 || __builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel)) return 0;
  }
  std::uint64_t per = info(tensor.dtype).element_size;  // served as its dtype: unconverted
  if (tensor.blocks != BlockFormat::none && data) {
    const BlockFormatInfo& b = info(tensor.blocks);
    if (numel % b.block_elements != 0) return 0;
    numel /= b.block_elements;
    per = b.block_bytes;
  }
  std::uint64_t n = 0;
  if (__builtin_mul_overflow(numel, per, &n) || n > max_tensor_bytes) return 0;
  return n;
}

ServedTensor serve_data(const Model& model, const Tensor& tensor, std::optional<DType> convert_to) {
  if (tensor.blocks == BlockFormat::none) return serve(model, tensor, convert_to);
  ServedTensor s;
  s.dtype = s.stored = DType::uint8;
  s.big_endian = big_endian(model, tensor);
  const auto begin = model.offset_in_storage(tensor);
  if (!tensor.broken.empty() || !begin) return s;
  s.contiguous = true;
  s.storage = *tensor.storage;
  s.begin = *begin;
  s.blocks = tensor.blocks;
  s.nbytes = tensor.stored_nbytes();
  if (s.nbytes != 0) s.way = ServedTensor::Way::range;
  return s;
}

ServedTensor serve(const Model& model, const Tensor& tensor, std::optional<DType> convert_to,
                   ByteOrder order) {
  if (tensor.blocks != BlockFormat::none) return serve_blocks(model, tensor, convert_to);
  if (tensor.derived()) return serve_derived(model, tensor, convert_to);
  ServedTensor s;
  s.dtype = tensor.dtype;
  s.stored = tensor.stored();
  s.big_endian = big_endian(model, tensor);
  if (!tensor.broken.empty()) return s;
  s.nbytes = tensor.nbytes();
  const auto begin = model.offset_in_storage(tensor);
  if (begin) {
    s.contiguous = true;
    s.storage = *tensor.storage;
    s.begin = *begin;
  }
  const bool wanted =
      convert_to && convertible(tensor.dtype, *convert_to) &&
      (*convert_to != tensor.dtype || s.big_endian) &&
      converted_size(s.stored, *convert_to, tensor.stored_nbytes()) <= max_tensor_bytes;
  if (tensor.stored_dtype) {
    // Stored in another dtype: always converted, to `dtype`, or on through it to convert_to
    // (torch's .float().to(convert_to): through float32, as the reader's conversion gives it).
    s.big_endian = false;
    if (wanted && *convert_to != tensor.dtype) {
      s.via = tensor.dtype;
      s.dtype = *convert_to;
      s.nbytes = converted_size(s.stored, *convert_to, tensor.stored_nbytes());
    }
    if (s.nbytes != 0) s.way = ServedTensor::Way::convert;
    return s;
  }
  if (wanted) {
    s.dtype = *convert_to;
    s.big_endian = false;
    s.nbytes = converted_size(tensor.dtype, *convert_to, s.nbytes);
    if (s.nbytes != 0) s.way = ServedTensor::Way::convert;
    return s;
  }
  if (order == ByteOrder::little && s.big_endian) {
    // Swapped; one-byte elements (and no elements) are the same bytes in either order.
    s.big_endian = false;
    if (s.nbytes != 0 && swap_unit(tensor.dtype) > 1) {
      s.way = ServedTensor::Way::swap;
      return s;
    }
  }
  if (s.nbytes == 0) return s;
  s.way = begin             ? ServedTensor::Way::range
          : tensor.assembly ? ServedTensor::Way::pieces
                            : ServedTensor::Way::gather;
  return s;
}

std::size_t swap_unit(DType dtype) noexcept {
  const std::size_t size = info(dtype).element_size;
  const bool complex = dtype == DType::complex32 || dtype == DType::bcomplex32 ||
                       dtype == DType::complex64 || dtype == DType::complex128;
  return complex ? size / 2 : size;
}

namespace {

// The source a tensor's staged bytes are said to come from (a read checks that it did not
// change): its storage's, or the source of the piece of an assembled tensor's first element.
std::uint32_t staged_source(const Model& model, const Tensor& tensor, std::uint64_t offset) {
  if (tensor.derived()) {
    // The source of its first run's source: enough to tell a changed file (the others are
    // checked as they are read).
    return staged_source(model, model.tensors[model.derivations[tensor.derivation].runs[0].source],
                         0);
  }
  if (tensor.storage) return model.storages[*tensor.storage].source;
  if (!tensor.assembly) return ReadPiece::generated;
  const Assembly& a = model.assemblies[*tensor.assembly];
  const PieceRun run = run_at(tensor, a, offset / tensor.stored_element_size(), 1);
  return model.storages[a.piece(run.piece).storage].source;
}

}  // namespace

void read_served(const Model& model, const Tensor& tensor, const ServedTensor& served,
                 std::uint64_t offset, std::size_t length, Sources sources, ReadBuffer& out) {
  switch (served.way) {
    case ServedTensor::Way::none:
      return;
    case ServedTensor::Way::range: {
      const Storage& storage = model.storages[served.storage];
      out.add_source(storage.source, data_offset(storage) + served.begin + offset, length);
      return;
    }
    case ServedTensor::Way::gather: {
      const std::uint32_t source = model.storages[*tensor.storage].source;
      gather_view(view_of(model, tensor), offset, sources, out.add_staged(length, source));
      return;
    }
    case ServedTensor::Way::pieces: {
      // Runs of a contiguous piece are ranges of its source, joined where they meet; the rest
      // is gathered, a piece's run at a time.
      for_each_piece_part(
          model, tensor, offset, length,
          [&](const StridedView& view, bool contiguous, std::uint64_t at, std::uint64_t n) {
            const std::uint32_t source = view.storage->source;
            if (contiguous) {
              out.add_source(source, contiguous_offset(view, at), n);
            } else {
              gather_view(view, at, sources, out.add_staged(n, source));
            }
          });
      return;
    }
    case ServedTensor::Way::swap: {
      // The whole elements the range touches, read as stored, reversed, then cut.
      const std::size_t unit = swap_unit(served.stored);
      const std::uint64_t first = offset / unit * unit;
      const std::uint64_t last = (offset + length + unit - 1) / unit * unit;
      thread_local std::vector<char> stored;
      stored.resize(static_cast<std::size_t>(last - first));
      read_stored(model, tensor, first, sources, stored);
      for (std::size_t i = 0; i < stored.size(); i += unit) {
        std::reverse(stored.begin() + static_cast<std::ptrdiff_t>(i),
                     stored.begin() + static_cast<std::ptrdiff_t>(i + unit));
      }
      std::memcpy(out.add_staged(length, staged_source(model, tensor, first)).data(),
                  stored.data() + (offset - first), length);
      return;
    }
    case ServedTensor::Way::convert: {
      const std::span<char> into = out.add_staged(length, staged_source(model, tensor, 0));
      // The stored elements a staging buffer at a time: never the whole tensor in memory.
      read_converted({served.stored, served.dtype, served.via, big_endian(model, tensor)}, offset,
                     std::as_writable_bytes(into),
                     [&](std::uint64_t at, std::span<std::byte> stored) {
                       read_stored(model, tensor, at, sources,
                                   {reinterpret_cast<char*>(stored.data()), stored.size()});
                     });
      return;
    }
    case ServedTensor::Way::derive:
      read_derived(model, tensor, served.dtype, offset,
                   out.add_staged(length, staged_source(model, tensor, 0)),
                   [&](const Tensor& source, std::uint64_t at, std::span<char> into) {
                     read_source_values(model, source, at, sources, into);
                   });
      return;
    case ServedTensor::Way::dequantize: {
      const Storage& storage = model.storages[served.storage];
      const std::span<char> into = out.add_staged(length, storage.source);
      // Only the blocks the range touches, a staging buffer at a time.
      read_dequantized(
          served.blocks, served.blocks_big_endian, served.dtype, offset,
          std::as_writable_bytes(into), [&](std::uint64_t at, std::span<std::byte> blocks) {
            sources[storage.source]->read(data_offset(storage) + served.begin + at, blocks);
          });
      return;
    }
  }
}

}  // namespace ckptfs
