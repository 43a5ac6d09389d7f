// SPDX-License-Identifier: MIT
// Tensors pickled as torch.save pickles them, the records of its zip, and the files built on them.
#include <ckptfs/format/torch/torch_writer.hpp>

#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/base/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace ckptfs {
namespace {

bool quantized(DType dtype) {
  switch (dtype) {
    case DType::qint8:
    case DType::quint8:
    case DType::qint32:
    case DType::quint4x2:
    case DType::quint2x4:
      return true;
    default:
      return false;
  }
}

// torch's contiguous strides: a size of 0 counts as 1, so (3, 0) has strides (1, 1).
std::vector<std::int64_t> c_order_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> stride(shape.size());
  std::int64_t step = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    stride[i] = step;
    step *= std::max<std::int64_t>(shape[i], 1);
  }
  return stride;
}

// Checks a view against its storage: sizes not negative, strides as many as sizes and not
// negative, and every element inside the storage. Returns the strides to write.
std::vector<std::int64_t> checked_strides(const TensorArgs& t) {
  const std::size_t element = info(t.dtype).element_size;
  for (const std::int64_t size : t.shape) {
    if (size < 0) throw Error(ExitCode::bad_checkpoint, fmt::format("negative size {}", size));
  }
  std::vector<std::int64_t> stride =
      t.stride.empty() && !t.shape.empty() ? c_order_strides(t.shape) : t.stride;
  if (stride.size() != t.shape.size()) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("{} strides for {} sizes", stride.size(), t.shape.size()));
  }
  if (t.storage_offset < 0) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("negative storage offset {}", t.storage_offset));
  }
  // The last element's index and the bytes up to it, refused on overflow.
  std::uint64_t last = static_cast<std::uint64_t>(t.storage_offset);
  bool empty = false;
  bool overflow = false;
  for (std::size_t i = 0; i < stride.size(); ++i) {
    if (stride[i] < 0) {
      throw Error(ExitCode::bad_checkpoint, fmt::format("negative stride {}", stride[i]));
    }
    if (t.shape[i] == 0) empty = true;
    std::uint64_t step = 0;
    if (t.shape[i] > 0) {
      overflow |= __builtin_mul_overflow(static_cast<std::uint64_t>(t.shape[i] - 1),
                                         static_cast<std::uint64_t>(stride[i]), &step);
      overflow |= __builtin_add_overflow(last, step, &last);
    }
  }
  std::uint64_t end = 0;
  overflow |= __builtin_add_overflow(last, std::uint64_t{1}, &end);
  overflow |= __builtin_mul_overflow(end, std::uint64_t{element}, &end);
  if (!empty && (overflow || end > t.storage_nbytes)) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("a {} view reaches past its storage of {} bytes", info(t.dtype).name,
                            t.storage_nbytes));
  }
  return stride;
}

std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t hash) {
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace

// ---- TorchPickler ----

void TorchPickler::storage_pid(const TensorArgs& t, bool untyped) {
  const DTypeInfo& type = info(t.dtype);
  const DType pickled_as = untyped ? DType::uint8 : t.dtype;
  if (!untyped && t.storage_nbytes % type.element_size != 0) {
    throw Error(ExitCode::unsupported,
                fmt::format("a storage of {} bytes is no whole number of {} elements",
                            t.storage_nbytes, type.name));
  }
  auto known = by_id_.find(t.storage);
  if (known != by_id_.end()) {
    if (known->second.pickled_as != pickled_as) {
      throw Error(ExitCode::unsupported,
                  fmt::format("storage {} is viewed as both {} and {}, which torch cannot save",
                              storages_[known->second.index].key,
                              info(known->second.pickled_as).name, info(pickled_as).name));
    }
    if (storages_[known->second.index].nbytes != t.storage_nbytes) {
      throw std::invalid_argument(fmt::format("storage id {} given with {} and {} bytes", t.storage,
                                              storages_[known->second.index].nbytes,
                                              t.storage_nbytes));
    }
  }
  // ('storage', storage_type, key, location, numel): torch's strings 'storage' and 'cpu' are
  // constants and a storage's key one str, so each is memoized once and got after.
  w_.tuple(5, [&](std::size_t i) {
    switch (i) {
      case 0:
        if (storage_word_ == pickle::no_slot) {
          storage_word_ = w_.string("storage");
        } else {
          w_.get(storage_word_);
        }
        break;
      case 1:
        if (untyped) {
          w_.global("torch.storage", "UntypedStorage");
        } else {
          w_.global("torch", type.storage_class);
        }
        break;
      case 2:
        if (known != by_id_.end()) {
          w_.get(known->second.key);
        } else {
          StorageRecord record{std::to_string(storages_.size()), t.storage, t.storage_nbytes};
          const pickle::MemoSlot key = w_.string(record.key);
          by_id_.emplace(t.storage, Known{storages_.size(), key, pickled_as});
          storages_.push_back(std::move(record));
        }
        break;
      case 3:
        if (location_ == pickle::no_slot) {
          location_ = w_.string("cpu");
        } else {
          w_.get(location_);
        }
        break;
      default:
        w_.integer(static_cast<std::int64_t>(untyped ? t.storage_nbytes
                                                     : t.storage_nbytes / type.element_size));
    }
  });
  w_.binpersid();
}

void TorchPickler::view_arg(const TensorArgs& t, const std::vector<std::int64_t>& stride,
                            bool untyped, std::size_t i) {
  switch (i) {
    case 0:
      storage_pid(t, untyped);
      break;
    case 1:
      w_.integer(t.storage_offset);
      break;
    case 2:
      w_.int_tuple(t.shape);
      break;
    default:
      w_.int_tuple(stride);
  }
}

void TorchPickler::backward_hooks() {
  w_.ordered_dict(0, [](std::size_t) {});
}

pickle::MemoSlot TorchPickler::tensor(const TensorArgs& t) {
  if (quantized(t.dtype)) {
    throw Error(ExitCode::unsupported,
                fmt::format("a {} tensor needs its quantization parameters", info(t.dtype).name));
  }
  const std::vector<std::int64_t> stride = checked_strides(t);
  const bool untyped = info(t.dtype).storage_class.empty();
  w_.global("torch._utils", untyped ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
  w_.tuple(untyped ? 7 : 6, [&](std::size_t i) {
    switch (i) {
      case 0:
      case 1:
      case 2:
      case 3:
        view_arg(t, stride, untyped, i);
        break;
      case 4:
        w_.boolean(t.requires_grad);
        break;
      case 5:
        backward_hooks();
        break;
      default:
        w_.global("torch", info(t.dtype).name);
    }
  });
  w_.reduce();
  return w_.put();
}

pickle::MemoSlot TorchPickler::quantized_tensor(const TensorArgs& t, const QuantizationArgs& q) {
  if (t.dtype != DType::qint8 && t.dtype != DType::quint8 && t.dtype != DType::qint32) {
    throw Error(ExitCode::unsupported,
                fmt::format("quantized tensors of dtype {} are not written", info(t.dtype).name));
  }
  const std::vector<std::int64_t> stride = checked_strides(t);
  if (q.scheme == QScheme::per_channel_affine &&
      (q.axis < 0 || static_cast<std::size_t>(q.axis) >= t.shape.size())) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("quantization axis {} of a {}-d tensor", q.axis, t.shape.size()));
  }
  w_.global("torch._utils", "_rebuild_qtensor");
  w_.tuple(7, [&](std::size_t i) {
    switch (i) {
      case 0:
      case 1:
      case 2:
      case 3:
        view_arg(t, stride, false, i);
        break;
      case 4:
        if (q.scheme == QScheme::per_tensor_affine) {
          w_.tuple(3, [&](std::size_t k) {
            if (k == 0) w_.global("torch", "per_tensor_affine");
            if (k == 1) w_.floating(q.scale);
            if (k == 2) w_.integer(q.zero_point);
          });
        } else {
          w_.tuple(4, [&](std::size_t k) {
            if (k == 0) w_.global("torch", "per_channel_affine");
            if (k == 1) tensor(q.scales);
            if (k == 2) tensor(q.zero_points);
            if (k == 3) w_.integer(q.axis);
          });
        }
        break;
      case 5:
        w_.boolean(t.requires_grad);
        break;
      default:
        backward_hooks();
    }
  });
  w_.reduce();
  return w_.put();
}

// ---- TorchArchive ----

namespace {

void check_prefix(const std::string& prefix) {
  if (prefix.empty() || prefix.find('/') != std::string::npos ||
      prefix.find('\0') != std::string::npos) {
    throw Error(ExitCode::unsupported,
                fmt::format("archive prefix {} is empty or holds '/' or NUL", quote(prefix)));
  }
}

std::vector<TorchRecord> make_records(const std::string& data_pkl,
                                      const std::vector<StorageRecord>& storages,
                                      const TorchArchiveOptions& options) {
  check_prefix(options.prefix);
  const std::string folder = options.prefix + "/";
  std::vector<TorchRecord> records;
  records.push_back(
      {folder + "data.pkl", data_pkl.size(), TorchRecord::Source::literal, data_pkl, 0});
  if (options.byteorder_record) {
    std::string order = options.big_endian ? "big" : "little";
    records.push_back({folder + "byteorder", order.size(), TorchRecord::Source::literal, order, 0});
  }
  std::vector<std::size_t> order(storages.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (options.sort_storage_keys) {
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return storages[a].key < storages[b].key;
    });
  }
  for (const std::size_t i : order) {
    records.push_back({folder + "data/" + storages[i].key,
                       storages[i].nbytes,
                       TorchRecord::Source::storage,
                       {},
                       i});
  }
  records.push_back({folder + "version", 2, TorchRecord::Source::literal, "3\n", 0});
  if (options.serialization_id) {
    records.push_back(
        {folder + ".data/serialization_id", 40, TorchRecord::Source::serialization_id, {}, 0});
  }
  return records;
}

std::vector<ZipRecordSpec> zip_specs(const std::vector<TorchRecord>& records) {
  std::vector<ZipRecordSpec> specs;
  specs.reserve(records.size());
  for (const TorchRecord& r : records) specs.push_back({r.name, r.size});
  return specs;
}

}  // namespace

TorchArchive::TorchArchive(const std::string& data_pkl, std::vector<StorageRecord> storages,
                           const TorchArchiveOptions& options)
    : storages_(std::move(storages)),
      records_(make_records(data_pkl, storages_, options)),
      plan_(zip_specs(records_), ZipPlanOptions{options.alignment}) {
  known_crcs_.resize(records_.size());
  for (std::size_t i = 0; i < records_.size(); ++i) {
    if (records_[i].source == TorchRecord::Source::literal)
      known_crcs_[i] = crc32(records_[i].literal);
    if (records_[i].source == TorchRecord::Source::serialization_id) serialization_id_record_ = i;
  }
}

std::optional<std::uint32_t> TorchArchive::known_crc(std::size_t record) const {
  return known_crcs_.at(record);
}

std::vector<std::uint32_t> TorchArchive::crcs(std::span<const std::uint32_t> storage_crcs) const {
  if (storage_crcs.size() != storages_.size()) {
    throw std::invalid_argument(fmt::format("TorchArchive::crcs: {} CRCs for {} storages",
                                            storage_crcs.size(), storages_.size()));
  }
  std::vector<std::uint32_t> out(records_.size());
  for (std::size_t i = 0; i < records_.size(); ++i) {
    if (records_[i].source == TorchRecord::Source::literal) out[i] = *known_crcs_[i];
    if (records_[i].source == TorchRecord::Source::storage)
      out[i] = storage_crcs[records_[i].storage];
  }
  if (serialization_id_record_) out[*serialization_id_record_] = crc32(serialization_id(out));
  return out;
}

std::string TorchArchive::serialization_id(std::span<const std::uint32_t> record_crcs) const {
  const std::size_t end = serialization_id_record_.value_or(records_.size());
  if (record_crcs.size() < end) {
    throw std::invalid_argument(
        fmt::format("TorchArchive::serialization_id: {} CRCs, {} needed", record_crcs.size(), end));
  }
  std::uint64_t names = 0xcbf29ce484222325ull;
  std::uint32_t payloads = 0;
  for (std::size_t i = 0; i < end; ++i) {
    names = fnv1a64(records_[i].name, names);
    names = fnv1a64(std::string_view("\0", 1), names);
    payloads = crc32_combine(payloads, record_crcs[i], records_[i].size);
  }
  return fmt::format("{:020}{:020}", names, payloads);
}

void TorchArchive::write(
    const ZipStreamWriter::Sink& sink,
    const std::function<void(std::size_t, ZipStreamWriter&)>& storage_payload) const {
  ZipStreamWriter out(plan_, sink);
  for (std::size_t i = 0; i < records_.size(); ++i) {
    const TorchRecord& r = records_[i];
    out.begin_record(i);
    switch (r.source) {
      case TorchRecord::Source::literal:
        out.write(r.literal);
        break;
      case TorchRecord::Source::storage:
        storage_payload(r.storage, out);
        break;
      case TorchRecord::Source::serialization_id:
        out.write(serialization_id(out.crcs()));
        break;
    }
    out.end_record();
  }
  out.finish();
}

std::string TorchArchive::bytes() const {
  if (!storages_.empty()) {
    throw std::logic_error("TorchArchive::bytes: the archive has storage records");
  }
  std::string out;
  out.reserve(plan_.size());
  write([&](std::string_view b) { out += b; }, [](std::size_t, ZipStreamWriter&) {});
  return out;
}

// ---- Files ----

TensorFileSpec tensor_file_spec(const Model& model, const Tensor& tensor) {
  TensorFileSpec spec{tensor.dtype, tensor.shape, tensor.requires_grad, std::nullopt};
  if (!tensor.quantization) return spec;
  const Quantization& q = *tensor.quantization;
  QuantizationSpec out;
  if (q.scheme == "per_tensor_affine") {
    out.scheme = QScheme::per_tensor_affine;
    out.scale = q.scale;
    out.zero_point = q.zero_point;
  } else if (q.scheme == "per_channel_affine" || q.scheme == "per_channel_affine_float_qparams") {
    out.scheme = QScheme::per_channel_affine;
    out.axis = q.axis;
    if (!q.scales || !q.zero_points || *q.scales >= model.tensors.size() ||
        *q.zero_points >= model.tensors.size() || q.axis < 0 ||
        static_cast<std::size_t>(q.axis) >= tensor.shape.size()) {
      throw Error(ExitCode::unsupported, "per-channel quantization without its parameters");
    }
    const Tensor& scales = model.tensors[*q.scales];
    const Tensor& zero_points = model.tensors[*q.zero_points];
    const std::vector<std::int64_t> channels{tensor.shape[static_cast<std::size_t>(q.axis)]};
    if (scales.shape != channels || zero_points.shape != channels) {
      throw Error(ExitCode::unsupported,
                  "per-channel scales or zero points are not one per channel");
    }
    out.scales_dtype = scales.dtype;
    out.zero_points_dtype = zero_points.dtype;
  } else {
    throw Error(ExitCode::unsupported,
                fmt::format("torch does not save quantization scheme {}", quote(q.scheme)));
  }
  spec.quantization = out;
  return spec;
}

TorchArchive tensor_file(const TensorFileSpec& spec, const TorchArchiveOptions& options) {
  for (const std::int64_t size : spec.shape) {
    if (size < 0) throw Error(ExitCode::bad_checkpoint, fmt::format("negative size {}", size));
  }
  const std::uint64_t count = element_count(spec.shape).value_or(UINT64_MAX);
  if (count > (std::uint64_t{1} << 58)) {
    throw Error(ExitCode::unsupported, "a tensor of more than 2^58 elements");
  }
  pickle::Writer w;
  TorchPickler torch(w);
  TensorArgs data{spec.dtype,        0, count * info(spec.dtype).element_size, 0, spec.shape, {},
                  spec.requires_grad};
  if (!spec.quantization) {
    torch.tensor(data);
  } else {
    const QuantizationSpec& q = *spec.quantization;
    QuantizationArgs args{q.scheme, q.scale, q.zero_point, q.axis, {}, {}};
    if (q.scheme == QScheme::per_channel_affine) {
      if (q.axis < 0 || static_cast<std::size_t>(q.axis) >= spec.shape.size()) {
        throw Error(ExitCode::bad_checkpoint, fmt::format("quantization axis {} of a {}-d tensor",
                                                          q.axis, spec.shape.size()));
      }
      const std::int64_t channels = spec.shape[static_cast<std::size_t>(q.axis)];
      const auto n = static_cast<std::uint64_t>(channels);
      args.scales = {q.scales_dtype, 1, n * info(q.scales_dtype).element_size, 0, {channels}, {},
                     false};
      args.zero_points = {q.zero_points_dtype,
                          2,
                          n * info(q.zero_points_dtype).element_size,
                          0,
                          {channels},
                          {},
                          false};
    }
    torch.quantized_tensor(data, args);
  }
  std::vector<StorageRecord> storages = torch.storages();
  return TorchArchive(std::move(w).finish(), std::move(storages), options);
}

TorchArchive keys_file(std::span<const std::string> keys, const TorchArchiveOptions& options) {
  pickle::Writer w;
  w.list(keys.size(), [&](std::size_t i) { w.string(keys[i]); });
  return TorchArchive(std::move(w).finish(), {}, options);
}

TorchArchive value_file(const pickle::Value& value, const TorchArchiveOptions& options) {
  pickle::Writer w;
  write_value(w, value);
  return TorchArchive(std::move(w).finish(), {}, options);
}

}  // namespace ckptfs
