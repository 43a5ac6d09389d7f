// SPDX-License-Identifier: MIT
// What torch.save writes: tensors pickled as torch pickles them, the records of a torch zip
// around a data.pkl, and the files built on them: one tensor (tensor.pt), a list of keys
// (map.pt), a plain value (<key>.pt).
//
// A virtual tensor.pt whose data record is served from the checkpoint:
//   TorchArchive file = tensor_file(tensor_file_spec(model, tensor),
//                                   {.prefix = "tensor", .big_endian = big_endian(model, tensor)});
//   file.plan().size();                             // the file's size, before any CRC
//   for (const ZipSegment& s : file.plan().segments()) ...
//     local_header: file.plan().local_header(s.record)
//     payload:      file.record(s.record).literal, or for a storage record the bytes of storage
//                   file.record(s.record).storage (0: the tensor in C order; 1, 2: per-channel
//                   scales and zero points), e.g. a range of the checkpoint
//     descriptor:   file.plan().data_descriptor(s.record, crc) with crc = file.known_crc(...)
//                   for a literal record, else the CRC of the storage's bytes (crc32_of_range)
//     trailer:      file.plan().trailer(file.crcs(storage_crcs))
// and pack, streaming what torch.save writes for a state dict:
//   pickle::Writer w; TorchPickler torch(w);
//   w.ordered_dict(n, [&](std::size_t i) { w.string(key[i]); torch.tensor(args[i]); });
//   TorchArchive out(std::move(w).finish(), torch.storages(), {.prefix = "model"});
//   out.write(sink, [&](std::size_t storage, ZipStreamWriter& z) { ...z.write(piece)... });
//
// Which torch loads these files with torch.load(f, weights_only=True): 1.13 ran here (tests/
// integration/test_writers.py); the later versions are read in torch's sources, not run:
//   dense tensors of a dtype with a legacy storage class (float32/64/16, bfloat16, int8-64,
//   uint8, bool, complex64/128), through _rebuild_tensor_v2 ............ torch >= 1.13
//   the dtypes without one, through _rebuild_tensor_v3 and UntypedStorage, as torch >= 2.2
//   writes them: 1.13 refuses the GLOBAL (ran). float8_e5m2/e4m3fn(uz) and complex32 are in
//   the allowlist of early 2024 (2.3; 2.2 perhaps), bits* from 2.4 (PR #124330), uint16/32/64
//   from 2.6 (PR #137184 made them savable), float8_e8m0fnu and float4_e2m1fn_x2 from the
//   releases that brought those dtypes; every one of them, and bcomplex32, loads with torch
//   2.14's weights_only=True and mmap=True (ran: tests/interop/test_interop_torch.py).
//   quantized tensors (_rebuild_qtensor; the scale is a float) ... torch >= 2.4 (PR #124330);
//   1.13 refuses (ran), its weights_only=False loads them.
//   byteorder "big": torch >= 2.1 swaps to the host's order; 1.13 ignores the record and
//   loads the bytes as they are (ran).
//   lists of keys and plain values: see pickle_writer.hpp.
// Files torch 1.13 writes are matched byte for byte when the byteorder record is left out
// (tensors of every 1.13 dtype, quantized ones, lists of keys, values): tests/integration.
#pragma once

#include <ckptfs/format/pickle/pickle_writer.hpp>
#include <ckptfs/format/zip/zip_writer.hpp>
#include <ckptfs/model/dtype.hpp>
#include <ckptfs/model/model.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace ckptfs {

// ---- Tensors pickled as torch pickles them ----

// A strided view of a storage: the arguments of torch's rebuild call.
struct TensorArgs {
  DType dtype = DType::float32;
  std::uint64_t storage = 0;         // the caller's id of the storage; same id, same storage
  std::uint64_t storage_nbytes = 0;  // its size in bytes
  std::int64_t storage_offset = 0;   // in elements
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> stride;  // in elements; empty: C order for `shape`
  bool requires_grad = false;
};

// torch saves quantized tensors under two tags only (per_channel_affine_float_qparams goes
// under per_channel_affine) and refuses the others.
enum class QScheme : std::uint8_t { per_tensor_affine, per_channel_affine };

struct QuantizationArgs {
  QScheme scheme = QScheme::per_tensor_affine;
  double scale = 0;             // per tensor
  std::int64_t zero_point = 0;  // per tensor
  std::int64_t axis = 0;        // per channel
  TensorArgs scales;            // per channel: a 1-D tensor (torch: float64)
  TensorArgs zero_points;       // per channel: a 1-D tensor (torch: int64)
};

// A storage a pickle refers to, and so a record of the archive: "<prefix>/data/<key>".
struct StorageRecord {
  std::string key;       // "0", "1"...: in the order the pickle first refers to them
  std::uint64_t id = 0;  // the caller's storage id (TensorArgs::storage)
  std::uint64_t nbytes = 0;
};

// Writes tensors into a pickle exactly as torch.save does (the same opcodes and memo, so a
// file of one tensor is byte for byte torch's), and collects the storages they refer to.
class TorchPickler {
 public:
  explicit TorchPickler(pickle::Writer& writer) : w_(writer) {}

  // torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
  // OrderedDict()) over the dtype's legacy typed storage (FloatStorage...), or, for the dtypes
  // that have none, _rebuild_tensor_v3(..., dtype) over an UntypedStorage (pid numel: bytes).
  // Throws Error(unsupported) for a quantized dtype (use quantized_tensor), for a storage whose
  // size is not a whole number of elements, or for a storage that another tensor of this
  // pickle viewed as another dtype (torch refuses that too); Error(bad_checkpoint) when shape
  // and stride disagree, a size, stride or offset is negative, or the view reaches past the
  // storage. Returns the tensor's memo slot: the same tensor reached again (a tied weight saved
  // as one Python object) is writer.get(slot), as torch writes it.
  pickle::MemoSlot tensor(const TensorArgs& tensor);

  // torch._utils._rebuild_qtensor(storage, offset, size, stride, qparams, requires_grad,
  // OrderedDict()) with qparams (torch.per_tensor_affine, scale, zero_point) or
  // (torch.per_channel_affine, scales, zero_points, axis). Throws Error(unsupported) for a
  // dtype other than qint8, quint8 and qint32 (quint4x2 and quint2x4 pack several values in a
  // byte, which this does not model).
  pickle::MemoSlot quantized_tensor(const TensorArgs& tensor, const QuantizationArgs& quantization);

  const std::vector<StorageRecord>& storages() const noexcept { return storages_; }

 private:
  void storage_pid(const TensorArgs& tensor, bool untyped);
  // Argument i < 4 of both rebuild calls: storage, storage offset, size, stride.
  void view_arg(const TensorArgs& tensor, const std::vector<std::int64_t>& stride, bool untyped,
                std::size_t i);
  void backward_hooks();

  pickle::Writer& w_;
  std::vector<StorageRecord> storages_;
  struct Known {
    std::size_t index;     // into storages_
    pickle::MemoSlot key;  // the memo slot of its key string
    DType pickled_as;      // uint8 for an untyped storage
  };
  std::unordered_map<std::uint64_t, Known> by_id_;
  pickle::MemoSlot storage_word_ = pickle::no_slot;  // the 'storage' of every pid
  pickle::MemoSlot location_ = pickle::no_slot;      // 'cpu'
};

// ---- The archive ----

struct TorchArchiveOptions {
  // The folder of every record. torch >= 1.13 names it after the file (tensor.pt: "tensor"),
  // "archive" when saving to a stream. Neither empty nor holding '/' or NUL.
  std::string prefix = "archive";
  bool byteorder_record = true;  // "byteorder", as torch >= 2.1 writes (1.13 does not)
  bool big_endian = false;       // what it says ("big" or "little"): the storages' byte order
  // ".data/serialization_id", as torch >= 2.1 writes: 40 decimal digits, torch only logs it.
  // Ours are the FNV-1a 64 hash of the record names before it, then the CRC-32 of their
  // payloads end to end (torch's mix its own hashes): it depends on every CRC.
  bool serialization_id = false;
  // data/* sorted as strings ("0", "1", "10", "2"), as torch 1.6 to 2.6 writes; else in key
  // order, as torch >= 2.7.
  bool sort_storage_keys = true;
  std::uint32_t alignment = 64;  // see ZipPlanOptions
};

struct TorchRecord {
  enum class Source : std::uint8_t {
    literal,           // `literal` holds the payload: data.pkl, byteorder, version
    storage,           // the bytes of storages()[storage]
    serialization_id,  // made from the other records' CRCs: TorchArchive::serialization_id()
  };
  std::string name;  // with the prefix: "tensor/data/0"
  std::uint64_t size = 0;
  Source source = Source::literal;
  std::string literal;
  std::size_t storage = 0;
};

// The records of a torch zip in torch's order (data.pkl, byteorder, data/*, version,
// .data/serialization_id) and their layout. Immutable; safe to share between threads.
class TorchArchive {
 public:
  // Throws Error(unsupported) for a bad prefix or alignment.
  TorchArchive(const std::string& data_pkl, std::vector<StorageRecord> storages,
               const TorchArchiveOptions& options = {});

  const std::vector<TorchRecord>& records() const noexcept { return records_; }
  const TorchRecord& record(std::size_t i) const { return records_.at(i); }
  const std::vector<StorageRecord>& storages() const noexcept { return storages_; }
  const ZipPlan& plan() const noexcept { return plan_; }

  // The CRC of a literal record (known at construction), else none.
  std::optional<std::uint32_t> known_crc(std::size_t record) const;
  // Every record's CRC from the CRC of each storage (indexed as storages()): what
  // ZipPlan::trailer() takes. Throws std::invalid_argument on a count mismatch.
  std::vector<std::uint32_t> crcs(std::span<const std::uint32_t> storage_crcs) const;
  // The payload of the serialization_id record from every record's CRC (those after it are
  // ignored).
  std::string serialization_id(std::span<const std::uint32_t> record_crcs) const;

  // Writes the whole file into `sink`. Each storage record's payload is written by
  // `storage_payload(storage index, writer)` through writer.write(), in pieces as it likes.
  void write(const ZipStreamWriter::Sink& sink,
             const std::function<void(std::size_t, ZipStreamWriter&)>& storage_payload) const;
  // The whole file, for an archive without storages (map.pt, values). Throws
  // std::logic_error when it has storages.
  std::string bytes() const;

 private:
  std::vector<StorageRecord> storages_;
  std::vector<TorchRecord> records_;
  std::vector<std::optional<std::uint32_t>> known_crcs_;
  std::optional<std::size_t> serialization_id_record_;
  ZipPlan plan_;
};

// ---- The files ----

struct QuantizationSpec {
  QScheme scheme = QScheme::per_tensor_affine;
  double scale = 0;
  std::int64_t zero_point = 0;
  std::int64_t axis = 0;  // per channel: shape[axis] scales and zero points
  DType scales_dtype = DType::float64;
  DType zero_points_dtype = DType::int64;
};

// One tensor, contiguous (C-order strides, offset 0), as tensor.pt holds it.
struct TensorFileSpec {
  DType dtype = DType::float32;
  std::vector<std::int64_t> shape;  // () for a 0-d tensor
  bool requires_grad = false;
  std::optional<QuantizationSpec> quantization;
};

// The spec of a model's tensor (its dtype, shape, requires_grad, quantization). Throws
// Error(unsupported) for a quantization scheme torch does not save, or per-channel parameters
// that are not 1-D tensors of shape[axis] elements.
TensorFileSpec tensor_file_spec(const Model& model, const Tensor& tensor);

// A file that torch.load(f, weights_only=True) reads as exactly that tensor (see the table
// above for which torch). Storage ids: 0 is the tensor's bytes in C order (numel × element
// size), 1 and 2 the per-channel scales and zero points (shape[axis] elements each).
// options.big_endian tells the byte order of those bytes. Throws what TorchPickler throws.
TorchArchive tensor_file(const TensorFileSpec& spec, const TorchArchiveOptions& options = {});

// torch.save(list_of_keys): map.pt of the RFC layout.
TorchArchive keys_file(std::span<const std::string> keys, const TorchArchiveOptions& options = {});

// torch.save(value) for a plain value: <key>.pt of the RFC layout.
TorchArchive value_file(const pickle::Value& value, const TorchArchiveOptions& options = {});

}  // namespace ckptfs
