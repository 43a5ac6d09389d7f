// SPDX-License-Identifier: MIT
// The JSON forms of entries: meta.json and `inspect --json`.
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/npy.hpp>
#include <ckptfs/view/served.hpp>

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace ckptfs {

SharingIndex::SharingIndex(const Model& c) : by_storage_(c.storages.size()) {
  for (std::size_t i = 0; i < c.entries.size(); ++i) {
    const Entry& e = c.entries[i];
    if (e.kind != Entry::Kind::tensor) continue;
    const Tensor& t = c.tensors[e.tensor];
    if (t.storage) by_storage_[*t.storage].push_back(i);
  }
}

namespace {

// An assembled tensor's pieces: the grid their boxes are in, how many there are, and the first
// max_listed_pieces of them, each with its file, where its bytes start there (null when they are
// no one range), its size in bytes and its box.
void write_pieces(JsonWriter& j, const Model& c, const Tensor& t) {
  const Assembly& a = c.assemblies[*t.assembly];
  j.begin_object();
  j.key("grid").string(a.grid() == Assembly::Grid::flat ? "flat" : "shape");
  j.key("count").number(std::uint64_t{a.size()});
  j.key("list").begin_array();
  for (std::size_t i = 0; i < a.size() && i < max_listed_pieces; ++i) {
    const Piece& p = a.piece(i);
    const bool valid = p.storage < c.storages.size();
    j.begin_object();
    j.key("source");
    if (valid) {
      j.string(c.sources[c.storages[p.storage].source]);
    } else {
      j.null();
    }
    j.key("file_offset");
    std::uint64_t begin = 0;
    if (valid && a.contiguous(i) && p.storage_offset >= 0 &&
        !__builtin_mul_overflow(static_cast<std::uint64_t>(p.storage_offset),
                                t.stored_element_size(), &begin)) {
      try {
        j.number(data_offset(c.storages[p.storage]) + begin);
      } catch (const std::exception&) {
        j.null();  // a remote record's header that cannot be read now
      }
    } else {
      j.null();
    }
    std::uint64_t nbytes = 0;
    if (t.broken.empty()) nbytes = a.elements(i) * t.stored_element_size();
    j.key("nbytes").number(nbytes);
    j.key("offsets").numbers(a.offset(i));
    j.key("lengths").numbers(a.length(i));
    j.end_object();
  }
  j.end_array();
  j.end_object();
}

// "ggml": the tensor's GGML type as a GGUF file stores it, and where its `data` is in the file:
// {"type": "Q4_K", "type_id": 12, "block_elements": 256, "block_bytes": 144, "nbytes",
// "file_offset"}, and for a block-quantized tensor its blocks' "byteorder", whether its values
// are served ("dequantized") and why not ("not_dequantized").
void write_ggml_fields(JsonWriter& j, const Model& c, const Tensor& t) {
  const ServedTensor data = serve_data(c, t);
  j.key("ggml").begin_object();
  if (t.blocks != BlockFormat::none) {
    const BlockFormatInfo& b = info(t.blocks);
    j.key("type").string(b.name).key("type_id").number(std::uint64_t{b.ggml_type});
    j.key("block_elements").number(std::uint64_t{b.block_elements});
    j.key("block_bytes").number(std::uint64_t{b.block_bytes});
  } else if (const auto plain = ggml_plain_type_of(t.dtype)) {
    j.key("type").string(plain->name).key("type_id").number(std::uint64_t{plain->ggml_type});
    j.key("block_elements").number(std::uint64_t{1});
    j.key("block_bytes").number(std::uint64_t{info(t.dtype).element_size});
  } else {
    j.key("type").null().key("type_id").null();  // no GGML type (a split directory's tensor)
  }
  j.key("nbytes").number(data.nbytes);
  j.key("file_offset");
  if (auto offset = c.file_offset(t); offset && !t.stored_dtype) {
    j.number(*offset);
  } else {
    j.null();
  }
  if (t.blocks != BlockFormat::none) {
    const std::string_view why = values_not_served(c, t);
    // The blocks' own byte order (their values are served little-endian).
    j.key("byteorder").string(big_endian(c, t) ? "big" : "little");
    j.key("dequantized").boolean(why.empty());
    j.key("not_dequantized");
    if (why.empty()) {
      j.null();
    } else {
      j.string(why);
    }
  }
  j.end_object();
}

// "packing" of a quint4x2 or quint2x4 tensor, whose `data` is torch's storage of it
// (model/dtype.hpp): {"elements_per_byte": 2, "bits": 4, "order": "c", "packed_nbytes": 8,
// "row_nbytes": 3, "numpy_shape": [9]}. Its elements go flat in C order, element i in bits
// (i % k) × bits up of byte i / k, in the first packed_nbytes bytes (torch's int_repr()); then
// padding up to nbytes, torch's rows of row_nbytes bytes. tensor.npy holds those bytes as uint8,
// one dimension: numpy_shape.
void write_packing(JsonWriter& j, const Tensor& t) {
  const std::uint64_t k = elements_per_byte(t.dtype);
  const std::uint64_t numel = t.broken.empty() ? t.numel() : 0;
  // (a broken tensor's shape may hold anything: a negative size counts nothing)
  const std::uint64_t last =
      t.shape.empty() ? 1 : static_cast<std::uint64_t>(std::max<std::int64_t>(t.shape.back(), 0));
  j.key("packing").begin_object();
  j.key("elements_per_byte").number(k);
  j.key("bits").number(8 / k);
  j.key("order").string("c");
  j.key("packed_nbytes").number(numel / k + (numel % k != 0));
  j.key("row_nbytes").number(last / k + (last % k != 0));
  j.key("numpy_shape").numbers(npy_shape(t.dtype, t.shape));
  j.end_object();
}

}  // namespace

void write_tensor_fields(JsonWriter& j, const Model& c, std::size_t entry_index,
                         const SharingIndex& sharing, std::optional<DType> convert_to) {
  const Entry& e = c.entries[entry_index];
  const Tensor& t = c.tensors[e.tensor];
  const ServedTensor served = serve(c, t, convert_to);
  // A block-quantized tensor's `data` holds its blocks as stored, one range of the file (its
  // values, dequantized, are in tensor.npy, tensor.pt and the exports): stored_dtype names
  // their GGML type, and contiguous, nbytes and file_offset describe `data`, as for any tensor.
  const bool blocked = t.blocks != BlockFormat::none;
  const ServedTensor data = blocked ? serve_data(c, t, convert_to) : served;
  const bool converted =
      !blocked && (served.dtype != served.stored || served.big_endian != big_endian(c, t));
  j.key("dtype").string(info(served.dtype).name);
  j.key("stored_dtype").string(blocked ? info(t.blocks).name : info(served.stored).name);
  j.key("shape").numbers(t.shape);
  j.key("stride").numbers(t.stride);
  j.key("storage_offset").number(t.storage_offset);
  j.key("contiguous").boolean(t.broken.empty() && !t.assembly && t.contiguous() && !converted);
  // The size of `data` (a broken tensor's: the size its files keep, though reading them fails).
  j.key("nbytes").number(t.broken.empty() ? data.nbytes : nominal_nbytes(t, true));
  j.key("source");
  if (t.storage) {
    j.string(c.sources[c.storages[*t.storage].source]);
  } else {
    j.null();
  }
  j.key("file_offset");
  if (auto offset = c.file_offset(t); offset && !converted) {
    j.number(*offset);
  } else {
    j.null();
  }
  // tensor.npy's descr; none when there is no tensor.npy (values ckptfs does not dequantize).
  j.key("numpy");
  if (blocked && !values_not_served(c, t).empty()) {
    j.null();
  } else {
    j.string(numpy_descr(served.dtype, served.big_endian));
  }
  j.key("byteorder").string(served.big_endian ? "big" : "little");
  j.key("requires_grad").boolean(t.requires_grad);
  j.key("quantization");
  if (const auto& q = t.quantization) {
    j.begin_object().key("qscheme").string(q->scheme);
    if (q->scales || q->zero_points) {
      // Per channel: the entries holding the scales (float64) and zero points (int64).
      j.key("axis").number(q->axis);
      j.key("scales").string(e.key + ".q_per_channel_scales");
      j.key("zero_points").string(e.key + ".q_per_channel_zero_points");
    } else {
      j.key("scale").raw(float_json(q->scale));
      j.key("zero_point").number(q->zero_point);
    }
    j.end_object();
  } else {
    j.null();
  }
  if (is_packed(t.dtype)) write_packing(j, t);
  if (t.blocks != BlockFormat::none || c.format == Format::gguf) write_ggml_fields(j, c, t);
  // What the format alone says of the tensor (an ONNX initializer's data type, its external
  // file; an HDF5 dataset's path, layout, chunks): compact JSON its reader made.
  if (!c.tensor_notes_key.empty() && e.tensor < c.tensor_notes.size() &&
      !c.tensor_notes[e.tensor].empty()) {
    j.key(c.tensor_notes_key).raw(c.tensor_notes[e.tensor]);
  }
  std::uint64_t others = 0;
  j.key("storage");
  if (t.storage) {
    const Storage& s = c.storages[*t.storage];
    j.begin_object();
    j.key("key").string(s.key);
    j.key("record");
    if (s.record.empty()) {
      j.null();
    } else {
      j.string(s.record);
    }
    j.key("file_offset").number(data_offset(s));
    j.key("nbytes").number(s.nbytes);
    j.end_object();
    j.key("shared_with").begin_array();
    // The entry itself is among its storage's entries: the others are the rest. The list stops
    // at max_shared_with keys or max_shared_with_bytes of them, so that N entries over one
    // storage cost O(N) and not O(N^2), in time and in the size of their meta.json files.
    const auto& sharers = sharing.entries_of_storage(*t.storage);
    others = sharers.size() - 1;
    std::size_t listed = 0;
    std::size_t listed_bytes = 0;
    for (std::size_t other : sharers) {
      if (listed == max_shared_with || listed_bytes >= max_shared_with_bytes) break;
      if (other == entry_index) continue;
      j.string(c.entries[other].key);
      ++listed;
      listed_bytes += c.entries[other].key.size();
    }
    j.end_array();
  } else {
    j.null();
    j.key("shared_with").begin_array().end_array();
  }
  j.key("shared_with_count").number(others);
  j.key("pieces");
  if (t.assembly) {
    write_pieces(j, c, t);
  } else {
    j.null();
  }
  j.key("broken");
  if (t.broken.empty()) {
    j.null();
  } else {
    j.string(t.broken);
  }
  write_origin(j, c, entry_index);
}

void write_origin(JsonWriter& j, const Model& c, std::size_t entry_index) {
  if (entry_index >= c.origins.size()) return;
  const Model::Origin& o = c.origins[entry_index];
  j.key("original_key").string(o.key);
  j.key("transform");
  if (o.how.empty()) {
    j.null();
  } else {
    j.string(o.how);
  }
}

void write_sources_and_metadata(JsonWriter& j, const Model& c) {
  j.key("sources").begin_array();
  for (const std::string& source : c.sources) j.string(source);
  j.end_array();
  j.key("metadata").begin_object();
  for (const auto& [key, value] : c.metadata) j.key(key).string(value);
  for (const Model::JsonMetadata& m : c.json_metadata) j.key(m.key).raw(m.value_json);
  j.end_object();
  if (!c.json_metadata.empty()) {
    j.key("metadata_types").begin_object();
    for (const Model::JsonMetadata& m : c.json_metadata) j.key(m.key).string(m.type);
    j.end_object();
  }
  if (!c.notes.empty()) {
    j.key("notes").begin_array();
    for (const std::string& note : c.notes) j.string(note);
    j.end_array();
  }
}

std::vector<std::optional<LocalFile>> local_files(Sources sources) {
  std::vector<std::optional<LocalFile>> out;
  out.reserve(sources.size());
  for (const ByteSource* source : sources) {
    // A file the user named, or a member of a checkpoint's directory (a shard, a hub cache
    // snapshot's link to its blob: its name is the link, which leads to this very file).
    const FileIdentity* identity = source->local_file();
    if (identity == nullptr) {
      out.emplace_back();
      continue;
    }
    std::error_code ec;
    std::filesystem::path absolute = std::filesystem::absolute(source->name(), ec);
    if (ec) {
      out.emplace_back();  // no working directory to make it absolute against: not published
      continue;
    }
    out.push_back(LocalFile{absolute.string(), *identity});
  }
  return out;
}

void write_source_files(JsonWriter& j, std::span<const std::optional<LocalFile>> files) {
  j.key("source_files").begin_array();
  for (const auto& file : files) {
    const FileIdentity* id = file ? &file->identity : nullptr;
    // Nanoseconds since the epoch, as Python's os.stat() gives st_mtime_ns (until 2262).
    std::int64_t mtime_ns = 0;
    if (id == nullptr || __builtin_mul_overflow(id->mtime_sec, 1'000'000'000, &mtime_ns) ||
        __builtin_add_overflow(mtime_ns, id->mtime_nsec, &mtime_ns)) {
      j.null();
      continue;
    }
    j.begin_object().key("path").string(file->path);
    j.key("device").number(std::uint64_t{id->device});
    j.key("inode").number(std::uint64_t{id->inode});
    j.key("size").number(id->size).key("mtime_ns").number(mtime_ns);
    j.end_object();
  }
  j.end_array();
}

void write_file_range(JsonWriter& j, const Model& c, const ServedTensor& served,
                      std::span<const std::optional<LocalFile>> files) {
  j.key("file_range");
  if (served.way != ServedTensor::Way::range) {
    j.null();
    return;
  }
  const Storage& storage = c.storages[served.storage];
  if (storage.source >= files.size() || !files[storage.source]) {
    j.null();  // not a local file
    return;
  }
  std::uint64_t offset = 0;
  try {
    offset = data_offset(storage) + served.begin;  // a local file's located record: a pread
  } catch (const std::exception&) {
    j.null();  // its record's header cannot be read now: reads through the mount will say why
    return;
  }
  const std::uint64_t size = files[storage.source]->identity.size;
  if (offset < served.begin || offset > size || served.nbytes > size - offset) {
    j.null();  // never past the file (the reader checked it; this costs nothing)
    return;
  }
  j.begin_object().key("source").number(std::uint64_t{storage.source});
  j.key("offset").number(offset);
  j.key("byteorder").string(served.big_endian ? "big" : "little");
  j.end_object();
}

void write_key_path(JsonWriter& j, const Entry& e) {
  if (e.key_path.empty()) return;
  j.key("key_path").raw(e.key_path);
  if (e.containers.empty()) return;
  j.key("containers").begin_array();
  for (const char code : e.containers) {
    const auto kind = container_from_code(code);
    j.string(kind ? container_name(*kind) : "object");
  }
  j.end_array();
}

void write_root(JsonWriter& j, const Model& c) {
  j.key("root");
  if (c.root) {
    j.string(container_name(*c.root));
  } else {
    j.null();
  }
}

std::string tensor_meta_json(const Model& c, std::size_t entry_index, const SharingIndex& sharing,
                             std::optional<DType> convert_to) {
  std::string out;
  out.reserve(640);  // a typical meta.json: one allocation
  JsonWriter j(out);
  const Entry& e = c.entries[entry_index];
  j.begin_object().key("key").string(e.key);
  write_key_path(j, e);
  write_tensor_fields(j, c, entry_index, sharing, convert_to);
  j.end_object();
  out += '\n';
  return out;
}

std::string model_json(const Model& c) {
  SharingIndex sharing(c);
  std::string out;
  JsonWriter j(out);
  j.begin_object();
  j.key("format").string(format_name(c.format));
  j.key("byteorder").string(c.byteorder());
  write_sources_and_metadata(j, c);
  write_root(j, c);
  j.key("entries").begin_array();
  for (std::size_t i = 0; i < c.entries.size(); ++i) {
    const Entry& e = c.entries[i];
    j.begin_object().key("key").string(e.key);
    write_key_path(j, e);
    if (e.kind == Entry::Kind::tensor) {
      j.key("kind").string("tensor");
      write_tensor_fields(j, c, i, sharing);
    } else {
      j.key("kind").string("value");
      j.key("value").raw(e.value_json);
    }
    j.end_object();
  }
  j.end_array().end_object();
  out += '\n';
  return out;
}

}  // namespace ckptfs
