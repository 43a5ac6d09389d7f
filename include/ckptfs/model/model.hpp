// SPDX-License-Identifier: MIT
// The model every format reader produces and every view is built on: storages (byte runs in one
// of the model's sources), tensors (typed, strided views of a storage, or assembled from pieces
// of several: see assembly.hpp) and flattened entries (keyed tensors and values), with every
// offset validated. It knows no file format and no FUSE.
#pragma once

#include <ckptfs/base/boxed_optional.hpp>
#include <ckptfs/model/block_format.hpp>
#include <ckptfs/model/dtype.hpp>
#include <ckptfs/model/nesting.hpp>
#include <ckptfs/model/plain_value.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfs {

// What a model was read from. The names are what index.json and inspect call it.
enum class Format : std::uint8_t {
  zip,          // torch.save of torch >= 1.6: data.pkl plus one stored record per storage
  legacy,       // torch < 1.6 or _use_new_zipfile_serialization=False: pickles, then storages
  torchscript,  // torch.jit.save: data.pkl and constants.pkl over stored records
  safetensors,  // an 8-byte header length, a JSON header, then the tensors' bytes
  sharded,      // a Hugging Face sharded set: an *.index.json naming one shard per key
  split,        // key directories copied out of a mount: meta.json and data, or value.json
  rfc,          // the RFC's split layout: map.pt (the keys in order) and one <name>.pt per key
  dcp,          // PyTorch Distributed Checkpoint: .metadata and __<rank>_<n>.distcp files
  zero,         // DeepSpeed ZeRO (stages 1-3): *_model_states.pt and per-rank *_optim_states.pt
  gguf,         // llama.cpp's GGUF: typed key-value metadata, then tensors (block-quantized too)
  npz,          // numpy.savez: a zip of .npy members
  onnx,         // an ONNX model: a protobuf ModelProto whose initializers are the tensors
  hdf5,         // HDF5 (h5py, Keras's .weights.h5 and Keras 2's .h5): datasets in groups
  keras,        // Keras 3's .keras: a zip of model.weights.h5 (HDF5), config.json, metadata.json
};
std::string_view format_name(Format format);

// Where storages start when their format learns it only on first use: a remote zip's records,
// whose local headers are read with their bytes instead of one request each at mount.
class StorageLocator {
 public:
  virtual ~StorageLocator() = default;
  // The absolute offset of record `index`'s first byte in its source, read and checked on the
  // first call, then remembered. Thread-safe. Throws Error: bad_zip when the record's header is
  // invalid or its bytes do not fit where the directory says, io when it cannot be read.
  virtual std::uint64_t data_offset(std::uint32_t index) const = 0;
  // The same once it is known, without reading: nullopt before the first data_offset().
  virtual std::optional<std::uint64_t> located(std::uint32_t index) const noexcept = 0;
  // The bytes [first, second) that hold record `index` whole (its header and its data, nothing
  // of another record's), known without reading: where a reader of it reads (for a remote
  // source's readahead, ByteSource::set_read_units()).
  virtual std::pair<std::uint64_t, std::uint64_t> span(std::uint32_t index) const noexcept = 0;
};

// A run of bytes in one source holding one storage (torch) or one tensor's bytes (safetensors).
struct Storage {
  std::uint32_t source = 0;  // index into Model::sources
  std::string key;           // the persistent id's key ("0", "94613254123456"), or a name
  std::string record;        // zip record name ("archive/data/0"); empty outside zips
  // Absolute offset of the storage's first byte in its source, unless `locator` is set: then
  // locator->data_offset(locator_index) says it, on first use (see data_offset()).
  std::uint64_t file_offset = 0;
  std::shared_ptr<const StorageLocator> locator;
  std::uint32_t locator_index = 0;
  std::uint64_t nbytes = 0;  // bytes of the storage in the source
  bool big_endian = false;   // byte order of its elements (the zip's `byteorder` record)
  // The CRC-32 of the whole storage as its zip's central directory records it (torch 1.13 and
  // 2.x never check it, and torch >= 2.6 writes 0 when told not to compute it); none outside
  // zips and where the record holds more than the storage (an .npz member).
  std::optional<std::uint32_t> record_crc32;
  // The zip record holding the storage, when its bytes are checked against its CRC-32 as they
  // are read (source/record_checks.hpp, format/zip/zip_record_checks.hpp): it begins `before`
  // bytes before the storage's first byte (an .npz member's .npy header) and holds `size` bytes
  // (the storage's and any after them); its local header is at `header_offset`. None outside
  // zips, for a torch record whose recorded CRC is 0 (none computed), and for a deflated .npz
  // member (its InflatedSource checks it).
  struct RecordCheck {
    std::uint32_t crc32 = 0;
    std::uint64_t before = 0;
    std::uint64_t size = 0;
    std::uint64_t header_offset = 0;
  };
  std::optional<RecordCheck> record_check;
  std::string broken;  // why it cannot be served (missing record); empty when fine
};

// The quantization parameters of a quantized tensor (torch's _rebuild_qtensor), without which
// its integer data cannot be dequantized.
struct Quantization {
  std::string scheme;           // "per_tensor_affine", "per_channel_affine", ...
  double scale = 0;             // per-tensor schemes
  std::int64_t zero_point = 0;  // per-tensor schemes
  std::int64_t axis = 0;        // per-channel schemes
  // Per-channel schemes: indices into Model::tensors of the scales (float64) and zero points
  // (int64) tensors; also entries of their own, under the keys the flattener gives them.
  std::optional<std::size_t> scales;
  std::optional<std::size_t> zero_points;
};

// The most bytes a tensor may have: every file made of its data (data, tensor.npy, tensor.pt,
// a header of a few KiB included) must have a size that fits off_t. A larger one (a stride-0
// view of 2^62 elements, say) is marked broken.
inline constexpr std::uint64_t max_tensor_bytes =
    (std::uint64_t{1} << 63) - (std::uint64_t{1} << 24);

struct Model;
struct Tensor;

// A tensor assembled from pieces: a PyTorch DCP tensor's chunks (n-dimensional boxes of it, each
// in some .distcp file), a DeepSpeed ZeRO parameter's ranges of flat partitions (one per rank).
// Each piece is a strided view of one storage placed at a box of the tensor: of its shape, or of
// its elements in C order taken as one dimension. assembly.hpp validates and reads them.
// Where one piece's elements are; its box and strides are in Assembly::numbers.
struct Piece {
  std::size_t storage = 0;          // index into Model::storages
  std::int64_t storage_offset = 0;  // of the piece's first element, in elements
};

struct Assembly {
  // The space the boxes are in.
  enum class Grid : std::uint8_t {
    shape,  // the tensor's shape, one box edge per dimension (DCP's chunks)
    flat,   // its elements in C order as one dimension (ZeRO's ranges of flat partitions)
  };

  Assembly() = default;
  Assembly(Grid grid, std::size_t rank) : grid_(grid), rank_(grid == Grid::flat ? 1 : rank) {}

  Grid grid() const noexcept { return grid_; }
  // Dimensions of the grid: 1 when flat, else the tensor's.
  std::size_t rank() const noexcept { return rank_; }

  // Adds a piece whose elements, in its box's C order, are the view of `piece.storage` with
  // these strides (in elements) from piece.storage_offset. Each span has rank() numbers; no
  // check here: index_assembly() checks everything.
  void add(Piece piece, std::span<const std::int64_t> offset, std::span<const std::int64_t> length,
           std::span<const std::int64_t> stride);
  // The same for a piece that is one contiguous range of its storage (its strides in C order).
  void add_contiguous(Piece piece, std::span<const std::int64_t> offset,
                      std::span<const std::int64_t> length);

  std::size_t size() const noexcept { return pieces_.size(); }
  const Piece& piece(std::size_t i) const { return pieces_[i]; }
  std::span<const std::int64_t> offset(std::size_t i) const { return part(i, 0); }
  std::span<const std::int64_t> length(std::size_t i) const { return part(i, 1); }
  std::span<const std::int64_t> stride(std::size_t i) const { return part(i, 2); }
  std::uint64_t elements(std::size_t i) const noexcept;  // of the box (valid once indexed)
  // Whether piece i's elements are one range of its storage in the box's C order.
  bool contiguous(std::size_t i) const noexcept;

  // Made by index_assembly(): whether it succeeded, and the grid's cuts per dimension (sorted
  // distinct box edges, 0 and the size included) and the piece of each cell, row-major.
  bool indexed() const noexcept { return indexed_; }
  const std::vector<std::vector<std::int64_t>>& cuts() const noexcept { return cuts_; }
  std::uint32_t piece_of_cell(std::size_t cell) const { return cells_[cell]; }

 private:
  friend std::string index_assembly(const Model& model, const Tensor& tensor, Assembly& assembly);
  std::span<const std::int64_t> part(std::size_t i, std::size_t which) const {
    return {numbers_.data() + (i * 3 + which) * rank_, rank_};
  }

  Grid grid_ = Grid::shape;
  std::size_t rank_ = 0;
  std::vector<Piece> pieces_;
  // Per piece, 3 × rank numbers: its box's offsets, then its lengths, then its strides.
  std::vector<std::int64_t> numbers_;
  bool indexed_ = false;
  std::vector<std::vector<std::int64_t>> cuts_;
  std::vector<std::uint32_t> cells_;
};

// A tensor whose values are computed on read from other tensors' values, where neither a
// strided view of a storage nor an assembly of pieces can say them: a GGUF file's tensor as
// transformers' GGUF loader gives it (format/gguf/gguf_hf.hpp) when its source is block-quantized
// or its values change. Each source's values are taken as served in float32 (dequantized, or
// converted as torch converts); the tensor, float32, serves in C order:
//   - `transpose` false: rows of `row_length` elements, each a row of a source (elements
//     [r × row_length, (r + 1) × row_length) of the source's C order are its row r), run by run:
//     a run gives `count` rows, the source's rows first, first + step, first + 2 step...;
//   - `transpose` true: the transpose of its one run's source, a 2-d [m, n] tensor ([n, m]);
// then `op` applied to each value with float32 arithmetic (numpy's: what transformers computes).
// check_derivation() (model/derivation.hpp) validates one; view/derived.hpp serves it.
struct Derivation {
  struct Run {
    std::size_t source = 0;   // index into Model::tensors: a tensor that is not derived itself
    std::uint64_t at = 0;     // the tensor's row the run starts at: the earlier runs' rows
    std::uint64_t first = 0;  // the source row of the run's first row
    std::uint64_t count = 0;  // rows
    std::uint64_t step = 1;   // source rows from one of the run's rows to the next
  };
  enum class Op : std::uint8_t {
    none,
    minus_one,  // w - 1: Gemma's and Nemotron's norm weights, which llama.cpp stores as w + 1
  };
  std::vector<Run> runs;
  std::uint64_t row_length = 1;
  bool transpose = false;
  Op op = Op::none;
};

struct Tensor {
  DType dtype = DType::float32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> stride;  // in elements, as stored (assembled: C order)
  std::int64_t storage_offset = 0;   // in elements, as stored (assembled: 0)
  bool requires_grad = false;
  std::optional<std::size_t> storage;        // index into Model::storages; none for meta tensors
  BoxedOptional<Quantization> quantization;  // few tensors have one: boxed (8 bytes, not 96)
  std::string broken;                        // why the bytes cannot be served; empty when fine
  // Index into Model::assemblies when the tensor is made of pieces (storage is then none, and
  // a tensor whose assembly index_assembly() refused is broken).
  std::optional<std::size_t> assembly;
  // The dtype of its elements as stored, when the reader serves them converted to `dtype` (a
  // DeepSpeed ZeRO buffer, which zero_to_fp32 gives as .float() of what was saved); none when
  // they are stored as `dtype`. Its view (storage_offset, stride) or its pieces count elements
  // of the stored dtype; every view serves `dtype`, converted on read (view/served.hpp), which
  // the reader makes sure convert() can do (stored_convertible(), model/dtype.hpp).
  std::optional<DType> stored_dtype;
  // Index into Model::derivations when the tensor's values are computed from other tensors'
  // (storage and assembly are then none, stride C order), else no_derivation: 4 bytes where
  // the struct has room for them.
  static constexpr std::uint32_t no_derivation = 0xffffffff;
  std::uint32_t derivation = no_derivation;

  bool derived() const noexcept { return derivation != no_derivation; }
  // The elements (element_count(), base/numbers.hpp) and their bytes in C order as served:
  // numel × element size, or a packed dtype's rows of bytes (tensor_nbytes(),
  // model/dtype.hpp); both 0 when size_problem() is not empty, which every reader marks
  // broken, so that a tensor that is not broken has exactly these.
  std::uint64_t numel() const noexcept;
  std::uint64_t nbytes() const noexcept;
  DType stored() const noexcept { return stored_dtype.value_or(dtype); }
  std::size_t stored_element_size() const noexcept { return info(stored()).element_size; }
  // A block-quantized tensor (GGUF's Q4_K...): its storage holds, from its first byte, the
  // blocks of its values in C order (stored_nbytes() bytes), its last dimension a whole number
  // of blocks; `dtype` is float32, what they dequantize to, stride C order, storage_offset 0.
  // BlockFormat::none for every other tensor.
  BlockFormat blocks = BlockFormat::none;

  // The bytes of the tensor as stored: its blocks when block-quantized, else in C order
  // tensor_nbytes() of the stored dtype (nbytes() unless stored_dtype says otherwise); 0 when
  // size_problem() is not empty.
  std::uint64_t stored_nbytes() const noexcept;
  // True when the tensor's bytes in C order are one range of its storage (empty tensors too).
  bool contiguous() const noexcept;
  std::size_t element_size() const noexcept { return info(dtype).element_size; }
};

// Why a tensor of its shape, dtype, stored dtype and block format cannot be served, or "" when it
// can: a negative dimension, more elements than 64 bits count (element_count()), more bytes as
// served or as stored than max_tensor_bytes. The one check from a shape to elements to bytes:
// every reader marks a tensor broken with it (after setting those four), so that an overflow
// never passes for an empty tensor (a count that wrapped to 0) or a small one.
std::string size_problem(const Tensor& tensor);

// One flattened item of the model (see format/pickle/flatten.hpp for torch's rule).
struct Entry {
  enum class Kind : std::uint8_t { tensor, value };
  std::string key;  // the flattened key as text; two entries may share it
  // The Python keys along the way, as compact JSON ([0, "exp_avg"]), unless the entry is one
  // str key of the model's root (Model::root) whose text no other entry has: then empty. "[]"
  // for an entry that is the whole checkpoint (a bare tensor or value: Model::root is none).
  std::string key_path;
  Kind kind = Kind::value;
  std::size_t tensor = 0;  // index into Model::tensors when kind == tensor
  std::string value_json;  // the value as compact JSON when kind == value (value_json.hpp)
  // The value exactly as the checkpoint held it, when it is plain data (plain_value.hpp) and
  // was read from a pickle: what pack and the RFC layout write. Null for a value that is not
  // plain, or that only value_json says (split copies, formats without pickles): value_json
  // then says it as exactly as JSON can (format/pickle/read_plain_value.hpp, plain_value()).
  std::shared_ptr<const PlainValue> value;
  // The kind of the container holding each part of key_path, one container_code() each
  // (nesting.hpp): "do" for ["model", "fc.weight"] in {"model": OrderedDict}, Model::root's
  // kind first. Empty when key_path is empty or "[]", and when the containers are unknown (a
  // split directory copied from a mount older than containers): pack then writes the entry
  // under its key at the root.
  std::string containers;
};

struct Model {
  Format format = Format::zip;
  // The files (or URLs) the bytes come from, as the user named them relative to what was
  // mounted; index = Storage::source. One for every format but sharded sets.
  std::vector<std::string> sources;
  std::vector<Storage> storages;
  std::vector<Tensor> tensors;
  std::vector<Assembly> assemblies;  // of the assembled tensors (Tensor::assembly)
  std::vector<Entry> entries;        // in the model's order
  // What torch.load of the checkpoint gives at the top, holding the entries without a key path:
  // an OrderedDict for formats without nesting (safetensors, GGUF, npz, sharded sets, ZeRO's
  // consolidated state dict: what pack writes of them); none when the checkpoint is one tensor
  // or value, the entry whose key path is "[]".
  std::optional<ContainerKind> root = ContainerKind::ordered_dict;
  // The attributes of OrderedDicts of the nesting (a state_dict()'s {"_metadata": ...}, pickled
  // as a BUILD state after its items), for pack to write them back: none for formats without
  // pickles and for split directories, whose JSON does not say them.
  std::vector<ContainerState> container_states;
  // String metadata of the file (safetensors' __metadata__), in the file's order.
  std::vector<std::pair<std::string, std::string>> metadata;
  // Metadata whose values are not all strings (a GGUF file's typed key-value pairs), in the
  // file's order, after `metadata`: each key, its type as the file names it ("UINT32",
  // "ARRAY[STRING]") and its value as compact JSON.
  struct JsonMetadata {
    std::string key;
    std::string type;
    std::string value_json;
  };
  std::vector<JsonMetadata> json_metadata;
  // What the format says of a tensor that the fields above do not (an ONNX initializer's data
  // type, its external file, how its typed field is decoded; an HDF5 dataset's path, layout,
  // chunks, filters), as a compact JSON object, by index into `tensors`: meta.json and
  // `inspect --json` show it under `tensor_notes_key` ("onnx", "hdf5"). Shorter than
  // `tensors` (empty for most formats) where there is nothing to say.
  std::string tensor_notes_key;
  std::vector<std::string> tensor_notes;

  // Files of the checkpoint served as they are, read-only, in .ckptfs/ beside the views (a .keras
  // archive's config.json and metadata.json): each `size` bytes at `offset` of source `source`.
  // A name is one path component that no view has (the tree leaves out any other).
  struct ExtraFile {
    std::string name;
    std::uint32_t source = 0;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
  };
  std::vector<ExtraFile> extra_files;
  std::vector<Derivation> derivations;  // of the derived tensors (Tensor::derivation)

  // What an entry was in the file, when a naming of the model's keys other than the file's
  // changed it (-o names=hf: a GGUF file's tensors under transformers' names): its key there
  // and how its values were made from it ("" when they are the file's). By entry when any
  // entry has one; empty otherwise.
  struct Origin {
    std::string key;
    std::string how;
  };
  std::vector<Origin> origins;

  // A file of the model beside its tensors (a config.json made from a GGUF file's metadata),
  // shown in the views folder under `name`. `make` gives its bytes from the model and the dtype
  // the view converts floating-point tensors to (-o dtype; none: as the model serves them); the
  // view calls it once, on first use, from any thread.
  struct File {
    std::string name;
    std::function<std::string(const Model&, std::optional<DType>)> make;
  };
  std::vector<File> files;

  // What a user should know about how the model was read, one line each (an architecture
  // -o names=hf does not know): said on standard error and in index.json.
  std::vector<std::string> notes;

  // Where the tensor's first byte is in its storage, when the tensor is servable, its bytes in C
  // order (as stored: stored_nbytes(); a block-quantized tensor's: its blocks) are one range of
  // its storage, and that range lies inside the storage (never for an assembled tensor). No I/O.
  std::optional<std::uint64_t> offset_in_storage(const Tensor& tensor) const;
  // The same as an absolute offset in the storage's source: it may ask the storage's locator,
  // and so read the source and throw what data_offset() throws.
  std::optional<std::uint64_t> file_offset(const Tensor& tensor) const;
  // "little" or "big" when every storage agrees, "mixed" otherwise ("little" without storages).
  std::string_view byteorder() const;
};

// The absolute offset of a storage's first byte in its source: file_offset, or what its locator
// reads (which may throw Error).
inline std::uint64_t data_offset(const Storage& storage) {
  return storage.locator ? storage.locator->data_offset(storage.locator_index)
                         : storage.file_offset;
}

// The byte order of a tensor's elements: its storage's (an assembled tensor's: its pieces', which
// index_assembly() makes sure are all one).
bool big_endian(const Model& model, const Tensor& tensor) noexcept;

}  // namespace ckptfs
