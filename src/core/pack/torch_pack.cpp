// SPDX-License-Identifier: MIT
// TorchPack: the state_dict pickled over records of whole storages, and the file written record
// by record, storages copied in the kernel where their CRC is known.
#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/pack/torch_pack.hpp>
#include <ckptfs/view/served.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <unordered_map>

namespace ckptfs {
namespace {

// A record's bytes are read this much at a time when they are made (gathered, converted,
// swapped): a multiple of every swap unit.
constexpr std::size_t chunk_bytes = 1 << 20;

// Writes storage `s` whole with the bytes of each `unit`-byte element reversed (big-endian
// stored, little-endian written), through OutputFile's buffer; returns the CRC-32 written.
std::uint32_t write_swapped(const Storage& s, std::size_t unit, Sources sources, OutputFile& out) {
  const ByteSource& source = *sources[s.source];
  const std::uint64_t at = data_offset(s);
  std::span<char> buffer = out.buffer();
  const std::size_t step = buffer.size() - buffer.size() % unit;
  std::uint32_t crc = 0;
  for (std::uint64_t done = 0; done < s.nbytes; done += step) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(step, s.nbytes - done));
    try {
      source.read(at + done, std::as_writable_bytes(buffer.first(n)));
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: {}", source.name(), e.what()));
    }
    for (std::size_t i = 0; i + unit <= n; i += unit) {
      std::reverse(buffer.begin() + static_cast<std::ptrdiff_t>(i),
                   buffer.begin() + static_cast<std::ptrdiff_t>(i + unit));
    }
    crc = crc32(crc, buffer.data(), n);
    out.write({buffer.data(), n});
  }
  return crc;
}

}  // namespace

std::string torch_prefix_of(const std::string& path) {
  const auto slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const auto dot = name.rfind('.');
  if (dot != std::string::npos) name.resize(dot);
  return name.empty() ? "archive" : name;
}

TorchPack::TorchPack(const Model& model, const Selection& selection, const Structure& structure,
                     std::string prefix, std::optional<DType> convert_to) {
  pickle::Writer w;
  TorchPickler torch(w);
  std::map<std::pair<std::size_t, DType>, std::uint64_t> by_storage;

  // A record of the tensor's own bytes as served (converted, or in C order), little-endian.
  auto own_record = [&](std::size_t index, std::optional<DType> convert) {
    const ServedTensor served = serve(model, model.tensors[index], convert, ByteOrder::little);
    payloads_.push_back(
        {StoragePayload::Way::tensor, 0, index, convert, served.nbytes, served.dtype, 1});
    return TensorArgs{served.dtype,
                      payloads_.size() - 1,
                      served.nbytes,
                      0,
                      model.tensors[index].shape,
                      {},
                      model.tensors[index].requires_grad};
  };
  auto args_of = [&](std::size_t index, std::optional<DType> convert) {
    const Tensor& t = model.tensors[index];
    const ServedTensor served = serve(model, t, convert, ByteOrder::little);
    // Converted or dequantized (an empty tensor too: no bytes, but the dtype it is served as),
    // or stored in another dtype.
    if (served.way == ServedTensor::Way::convert || served.way == ServedTensor::Way::dequantize ||
        served.dtype != t.dtype || !t.storage || t.stored_dtype) {
      return own_record(index, convert);
    }
    const Storage& s = model.storages[*t.storage];
    const bool typed = !info(t.dtype).storage_class.empty();
    if (typed && s.nbytes % t.element_size() != 0) return own_record(index, convert);
    auto [it, fresh] = by_storage.try_emplace({*t.storage, t.dtype}, payloads_.size());
    if (fresh) {
      // A big-endian storage is written swapped, element by element of this dtype.
      payloads_.push_back({StoragePayload::Way::storage, *t.storage, 0, std::nullopt, s.nbytes,
                           t.dtype, s.big_endian ? swap_unit(t.dtype) : std::size_t{1}});
    }
    return TensorArgs{t.dtype, it->second, s.nbytes,       t.storage_offset,
                      t.shape, t.stride,   t.requires_grad};
  };

  std::unordered_map<std::size_t, pickle::MemoSlot> pickled;  // tensor index -> its memo slot
  write_structure(w, structure, [&](std::size_t i) {
    const Entry& e = model.entries[selection.entries[i]];
    if (e.kind == Entry::Kind::value) {
      write_value(w, *selection.values[i]);
      return;
    }
    if (auto it = pickled.find(e.tensor); it != pickled.end()) {
      w.get(it->second);  // the same tensor object again, as torch memoizes it
      return;
    }
    const Tensor& t = model.tensors[e.tensor];
    const TensorArgs args = args_of(e.tensor, convert_to);
    pickle::MemoSlot slot;
    if (!t.quantization) {
      slot = torch.tensor(args);
    } else {
      const Quantization& q = *t.quantization;
      QuantizationArgs qa;
      if (q.scales) {
        // Its scales and zero points, as stored (never converted), from their own storages.
        qa.scheme = QScheme::per_channel_affine;
        qa.axis = q.axis;
        qa.scales = args_of(*q.scales, std::nullopt);
        qa.zero_points = args_of(*q.zero_points, std::nullopt);
      } else {
        qa.scheme = QScheme::per_tensor_affine;
        qa.scale = q.scale;
        qa.zero_point = q.zero_point;
      }
      slot = torch.quantized_tensor(args, qa);
    }
    pickled.emplace(e.tensor, slot);
  });

  // Every record little-endian, whatever the sources' byte orders: torch before 2.1 reads the
  // bytes as little-endian whatever the byteorder record says.
  std::vector<StorageRecord> storages = torch.storages();
  archive_.emplace(std::move(w).finish(), std::move(storages),
                   TorchArchiveOptions{
                       .prefix = std::move(prefix), .byteorder_record = true, .big_endian = false});
}

const StoragePayload& TorchPack::payload(std::size_t i) const {
  return payloads_.at(archive_->storages().at(i).id);
}

void TorchPack::write(const Model& model, Sources sources, OutputFile& out) const {
  const ZipPlan& plan = archive_->plan();
  std::vector<std::uint32_t> crcs(plan.record_count());
  ReadBuffer buffer;
  for (std::size_t i = 0; i < plan.record_count(); ++i) {
    out.write(plan.local_header(i));
    const TorchRecord& r = archive_->record(i);
    switch (r.source) {
      case TorchRecord::Source::literal:
        out.write(r.literal);
        crcs[i] = *archive_->known_crc(i);
        break;
      case TorchRecord::Source::serialization_id: {
        const std::string id = archive_->serialization_id(crcs);
        out.write(id);
        crcs[i] = crc32(id);
        break;
      }
      case TorchRecord::Source::storage: {
        const StoragePayload& p = payload(r.storage);
        if (p.way == StoragePayload::Way::storage && p.swap_unit > 1) {
          crcs[i] = write_swapped(model.storages[p.storage], p.swap_unit, sources, out);
          break;
        }
        if (p.way == StoragePayload::Way::storage) {
          const Storage& s = model.storages[p.storage];
          const ByteSource& source = *sources[s.source];
          const std::uint64_t at = data_offset(s);
          // torch >= 2.6 may write 0 for a CRC: only a non-zero one (or an empty record's) is
          // taken as the CRC of the bytes.
          if (s.record_crc32 && (*s.record_crc32 != 0 || s.nbytes == 0)) {
            out.copy(source, at, s.nbytes);
            crcs[i] = *s.record_crc32;
          } else {
            crcs[i] = out.copy_with_crc(source, at, s.nbytes);
          }
          break;
        }
        const Tensor& t = model.tensors[p.tensor];
        const ServedTensor served = serve(model, t, p.convert_to, ByteOrder::little);
        std::uint32_t crc = 0;
        for (std::uint64_t at = 0; at < served.nbytes; at += chunk_bytes) {
          const auto n =
              static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes, served.nbytes - at));
          buffer.clear();
          read_served(model, t, served, at, n, sources, buffer);
          for (const ReadPiece& piece : buffer.pieces()) {
            if (piece.memory) {
              crc = crc32(crc, piece.memory, piece.length);
              out.write({piece.memory, piece.length});
            } else {
              crc =
                  out.copy_with_crc(*sources[piece.source], piece.source_offset, piece.length, crc);
            }
          }
        }
        crcs[i] = crc;
        break;
      }
    }
    if (plan.layout(i).descriptor_size != 0) out.write(plan.data_descriptor(i, crcs[i]));
  }
  out.write(plan.trailer(crcs));
  if (out.size() != plan.size()) {
    throw std::logic_error(
        fmt::format("TorchPack::write: {} bytes written, {} planned", out.size(), plan.size()));
  }
}

}  // namespace ckptfs
