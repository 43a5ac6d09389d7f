// SPDX-License-Identifier: MIT
// read_hdf5() and read_keras(): the groups of an HDF5 file walked from the root with an explicit
// stack, each dataset a tensor over a range of the file or over its decoded chunks.
#include "hdf5_file.hpp"

#include <ckptfs/format/hdf5/hdf5_reader.hpp>

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_writer.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/impostor.hpp>
#include <ckptfs/model/assembly.hpp>
#include <ckptfs/source/chunk_source.hpp>
#include <ckptfs/source/inflated_source.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

namespace ckptfs {
namespace {

using namespace hdf5;

constexpr std::string_view hdf5_signature("\x89HDF\r\n\x1a\n", 8);

// What Keras writes into a .keras archive besides its weights.
constexpr std::string_view keras_weights = "model.weights.h5";

// The most string attributes of the root group listed in metadata, and strings per attribute.
constexpr std::size_t max_metadata_attributes = 256;
constexpr std::size_t max_metadata_strings = 4096;

std::vector<std::int64_t> c_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> stride(shape.size());
  std::int64_t step = 1;
  for (std::size_t k = shape.size(); k-- > 0;) {
    stride[k] = step;
    if (__builtin_mul_overflow(step, std::max<std::int64_t>(shape[k], 1), &step)) step = 0;
  }
  return stride;
}

const char* filter_name(std::uint16_t id) {
  switch (id) {
    case 1:
      return "deflate";
    case 2:
      return "shuffle";
    case 3:
      return "fletcher32";
    case 4:
      return "szip";
    case 5:
      return "nbit";
    case 6:
      return "scaleoffset";
    case 32000:
      return "lzf";
    case 32001:
      return "blosc";
    case 32004:
      return "lz4";
    case 32008:
      return "bitshuffle";
    case 32015:
      return "zstd";
    default:
      return nullptr;
  }
}

// Builds the model of one HDF5 file whose bytes are in source `data_source` of the model.
class Reader {
 public:
  Reader(const File& file, Hdf5Model& out, std::uint32_t data_source)
      : file_(file), limits_(file.limits()), out_(out), data_source_(data_source) {}

  void read() {
    struct Visit {
      std::uint64_t address;
      std::string path;  // with '/', "" for the root
    };
    std::vector<Visit> stack{{file_.root(), ""}};
    // Each object read once: a dataset reached again is one more key of its tensor; a group
    // reached again (a second hard link, or a cycle) is not read again.
    std::unordered_map<std::uint64_t, std::optional<std::size_t>> seen;
    std::uint64_t objects = 0;
    std::uint64_t links = 0;
    while (!stack.empty()) {
      Visit v = std::move(stack.back());
      stack.pop_back();
      if (const auto it = seen.find(v.address); it != seen.end()) {
        if (it->second) add_entry(v.path, *it->second);
        continue;
      }
      if (++objects > limits_.max_objects) {
        throw Error(ExitCode::unsupported,
                    fmt::format("more than {} objects: ckptfs stops there (Hdf5Limits)",
                                limits_.max_objects));
      }
      const std::vector<Message> messages = read_object_header(file_, v.address);
      const bool dataset = std::any_of(messages.begin(), messages.end(),
                                       [](const Message& m) { return m.type == data_layout; });
      if (dataset) {
        if (v.path.empty()) fail("the root group is a dataset");
        const std::optional<std::size_t> tensor = read_dataset(v.path, messages);
        seen.emplace(v.address, tensor);
        if (tensor) {
          add_entry(v.path, *tensor);
        } else {
          add_null(v.path);
        }
        continue;
      }
      seen.emplace(v.address, std::nullopt);
      if (v.path.empty()) read_root_attributes(messages);
      std::vector<Link> children = read_links(file_, messages, links);
      std::sort(children.begin(), children.end(),
                [](const Link& a, const Link& b) { return natural_less(a.name, b.name); });
      // Pushed last to first, so that the first name is read first.
      for (auto it = children.rbegin(); it != children.rend(); ++it) {
        if (it->kind != Link::Kind::hard) continue;  // soft and external links lead elsewhere
        stack.push_back({it->address, v.path.empty() ? it->name : v.path + "/" + it->name});
      }
    }
  }

 private:
  void add_key(Entry& e, const std::string& path) {
    e.key = path;
    std::replace(e.key.begin(), e.key.end(), '/', '.');
    keys_json_ += json_escaped_size(e.key) + 2;
    if (keys_json_ > limits_.max_keys_json_bytes) {
      throw Error(ExitCode::unsupported,
                  fmt::format("its datasets' names take more than {} bytes as JSON (at {})",
                              limits_.max_keys_json_bytes, quote(path)));
    }
  }

  void add_entry(const std::string& path, std::size_t tensor) {
    Entry e;
    add_key(e, path);
    e.kind = Entry::Kind::tensor;
    e.tensor = tensor;
    out_.model.entries.push_back(std::move(e));
  }

  void add_null(const std::string& path) {
    Entry e;
    add_key(e, path);
    e.kind = Entry::Kind::value;
    e.value_json = "null";
    out_.model.entries.push_back(std::move(e));
  }

  // Keras 2's keras_version, backend, model_config... (fixed-length strings, as Keras writes
  // bytes), and any other string attribute of the root group.
  void read_root_attributes(const std::vector<Message>& messages) {
    std::size_t listed = 0;
    for (const Message& m : messages) {
      if (m.type != attribute || listed == max_metadata_attributes) continue;
      try {
        Cursor c(m.data, file_, "an attribute of the root group");
        const Attribute a = decode_attribute(c);
        const auto strings = attribute_strings(file_, a, max_metadata_strings);
        if (!strings) continue;
        if (a.space.kind == Dataspace::Kind::scalar) {
          out_.model.metadata.emplace_back(a.name, (*strings)[0]);
        } else {
          std::string json;
          JsonWriter j(json);
          j.begin_array();
          for (const std::string& s : *strings) j.string(s);
          j.end_array();
          out_.model.json_metadata.push_back({a.name, "ARRAY[STRING]", std::move(json)});
        }
        ++listed;
      } catch (const Error& e) {
        if (e.code() != ExitCode::bad_checkpoint) throw;
        // An attribute ckptfs cannot read is not listed: it holds no tensor.
      }
    }
  }

  // Keras 3's bfloat16 weights: an opaque 2-byte type and the attribute dtype = "bfloat16".
  bool keras_bfloat16(const std::vector<Message>& messages) {
    for (const Message& m : messages) {
      if (m.type != attribute) continue;
      try {
        Cursor c(m.data, file_, "an attribute");
        const Attribute a = decode_attribute(c);
        if (a.name != "dtype") continue;
        const auto strings = attribute_strings(file_, a, 1);
        return strings && a.space.kind == Dataspace::Kind::scalar && (*strings)[0] == "bfloat16";
      } catch (const Error& e) {
        if (e.code() != ExitCode::bad_checkpoint) throw;
      }
    }
    return false;
  }

  // A dataset's tensor (its index in Model::tensors), or nullopt for a dataset without data (a
  // null dataspace).
  std::optional<std::size_t> read_dataset(const std::string& path,
                                          const std::vector<Message>& messages) {
    Tensor t;
    t.dtype = DType::uint8;
    std::string details;
    JsonWriter j(details);
    j.begin_object().key("path").string("/" + path);
    try {
      if (!describe_dataset(path, messages, t, j)) return std::nullopt;
    } catch (const Error& e) {
      if (e.code() != ExitCode::bad_checkpoint) throw;
      t.storage.reset();
      t.assembly.reset();
      t.broken = e.what();
      j.key("error").string(e.what());
    }
    j.end_object();
    if (!t.broken.empty()) {
      t.storage.reset();
      t.assembly.reset();
    }
    if (t.stride.size() != t.shape.size()) t.stride = c_strides(t.shape);
    out_.model.tensors.push_back(std::move(t));
    out_.model.tensor_notes.push_back(std::move(details));
    return out_.model.tensors.size() - 1;
  }

  const Message* find(const std::vector<Message>& messages, std::uint16_t type) {
    for (const Message& m : messages) {
      if (m.type == type) return &m;
    }
    return nullptr;
  }

  // Fills `t` (shape, dtype, where its bytes are) and its "hdf5" fields; false for a null
  // dataspace. Throws Error(bad_checkpoint) for what makes the tensor broken.
  bool describe_dataset(const std::string& path, const std::vector<Message>& messages, Tensor& t,
                        JsonWriter& j) {
    const Message* space_message = find(messages, dataspace);
    const Message* type_message = find(messages, datatype);
    const Message* layout_message = find(messages, data_layout);
    if (space_message == nullptr || type_message == nullptr) {
      fail("a dataset without a dataspace or datatype message");
    }
    Cursor sc(space_message->data, file_, "its dataspace");
    const Dataspace space = decode_dataspace(sc);
    if (space.kind == Dataspace::Kind::null) return false;
    Message shared;
    if ((type_message->flags & 0x02) != 0) {
      shared = shared_message(file_, *type_message);
      type_message = &shared;
    }
    Cursor tc(type_message->data, file_, "its datatype");
    Datatype type = decode_datatype(tc);
    if (type.opaque && type.size == 2 && keras_bfloat16(messages)) {
      type.dtype = DType::bfloat16;
      type.name = "Keras bfloat16 (opaque, 2 bytes, attribute dtype=bfloat16)";
      type.unsupported.clear();
    }
    for (std::uint64_t d : space.dims) {
      if (d > static_cast<std::uint64_t>(INT64_MAX)) fail("a dimension past 2^63");
      t.shape.push_back(static_cast<std::int64_t>(d));
    }
    t.stride = c_strides(t.shape);
    j.key("type").string(type.name);
    j.key("byteorder").string(type.big_endian ? "big" : "little");
    if (type.dtype) t.dtype = *type.dtype;
    if (!type.unsupported.empty()) {
      fail(fmt::format("{}, which has no torch dtype", type.unsupported));
    }
    if (info(t.dtype).element_size != type.size) {
      fail(fmt::format("a {}-byte element for {}", type.size, info(t.dtype).name));
    }
    const std::uint64_t numel = t.numel();
    std::uint64_t nbytes = 0;
    const bool empty = std::any_of(t.shape.begin(), t.shape.end(), [](auto d) { return d == 0; });
    if ((!empty && numel == 0) ||
        __builtin_mul_overflow(numel, std::uint64_t{type.size}, &nbytes) ||
        nbytes > max_tensor_bytes) {
      fail("a shape with more bytes than a file can hold");
    }
    if (find(messages, external_files) != nullptr) {
      j.key("layout").string("external");
      fail("its data is in external files, which ckptfs does not open");
    }
    if (layout_message == nullptr) fail("a dataset without a layout message");
    Cursor lc(layout_message->data, file_, "its layout");
    const Layout layout = decode_layout(lc, layout_message->address);
    std::vector<Filter> filters;
    if (const Message* m = find(messages, filter_pipeline)) {
      Cursor fc(m->data, file_, "its filter pipeline");
      filters = decode_filter_pipeline(fc);
    }
    std::optional<std::string> fill;
    if (const Message* m = find(messages, fill_value)) {
      Cursor fc(m->data, file_, "its fill value");
      fill = decode_fill_value(fc, false);
    } else if (const Message* old = find(messages, fill_value_old)) {
      Cursor fc(old->data, file_, "its fill value");
      fill = decode_fill_value(fc, true);
    }
    if (fill && fill->size() != type.size) {
      fail(fmt::format("a fill value of {} bytes for {}-byte elements", fill->size(), type.size));
    }
    Storage s;
    s.key = "/" + path;
    s.big_endian = type.big_endian;
    s.source = data_source_;
    switch (layout.layout_class) {
      case Layout::Class::compact:
        j.key("layout").string("compact");
        if (layout.size < nbytes) {
          fail(fmt::format("compact data of {} bytes for {} bytes of elements", layout.size,
                           nbytes));
        }
        s.file_offset = file_.absolute(layout.compact_address);
        s.nbytes = layout.size;
        break;
      case Layout::Class::contiguous: {
        j.key("layout").string("contiguous");
        const std::uint64_t size = layout.size == undefined ? nbytes : layout.size;
        if (nbytes != 0 && layout.address == undefined) {
          // Never written: every element is the fill value, as h5py reads it.
          j.key("allocated").boolean(false);
          s = fill_storage(path, type, nbytes, fill);
          break;
        }
        if (size < nbytes) {
          fail(fmt::format("contiguous data of {} bytes for {} bytes of elements", size, nbytes));
        }
        if (nbytes != 0 && !file_.contains(layout.address, nbytes)) {
          fail(fmt::format("its {} bytes at {:#x} lie outside the file", nbytes, layout.address));
        }
        s.file_offset = nbytes == 0 ? 0 : file_.absolute(layout.address);
        s.nbytes = nbytes;
        break;
      }
      case Layout::Class::chunked:
        j.key("layout").string("chunked");
        read_chunked(path, t, s, layout, space, type, filters, fill, nbytes, j);
        break;
      case Layout::Class::virtual_storage:
        j.key("layout").string("virtual");
        fail("a virtual dataset (its data in other datasets), which ckptfs does not assemble");
    }
    if (t.assembly) return true;
    if (nbytes == 0) {
      s.source = data_source_;
      s.file_offset = 0;
      s.nbytes = 0;
    }
    t.storage = out_.model.storages.size();
    out_.model.storages.push_back(std::move(s));
    return true;
  }

  // A storage of `nbytes` of fill value (a dataset never written), in a source of its own.
  Storage fill_storage(const std::string& path, const Datatype& type, std::uint64_t nbytes,
                       const std::optional<std::string>& fill) {
    ChunkSpec spec;
    spec.chunk_bytes = nbytes;
    spec.fill = fill.value_or(std::string());
    spec.chunks.resize(1);
    count_chunks(1);
    if (nbytes > limits_.max_chunk_bytes) {
      // Decoded in blocks of a chunk's size at most, whatever the dataset's.
      const std::uint64_t unit =
          type.size * std::max<std::uint64_t>(limits_.max_chunk_bytes / type.size, 1);
      spec.chunk_bytes = unit;
      const std::uint64_t blocks = nbytes / unit + (nbytes % unit != 0);
      count_chunks(blocks - 1);
      spec.chunks.resize(static_cast<std::size_t>(blocks));
    }
    Storage s;
    s.key = "/" + path;
    s.big_endian = type.big_endian;
    s.source = add_chunk_source(path, std::move(spec));
    s.nbytes = nbytes;
    return s;
  }

  // Counts `n` more chunks made (grids, blocks of fill value) against Hdf5Limits::max_chunks,
  // before they are: past it, the file is refused.
  void count_chunks(std::uint64_t n) {
    if (n > limits_.max_chunks || made_chunks_ > limits_.max_chunks - n) {
      throw Error(ExitCode::unsupported,
                  fmt::format("its chunked datasets have more than {} chunks: ckptfs stops there "
                              "(Hdf5Limits)",
                              limits_.max_chunks));
    }
    made_chunks_ += n;
  }

  std::uint32_t add_chunk_source(const std::string& path, ChunkSpec spec) {
    if (!cache_) cache_ = std::make_shared<ChunkCache>(limits_.chunk_cache_bytes);
    std::string name = out_.model.sources[0] + ":/" + path;
    out_.sources.push_back(
        std::make_unique<ChunkSource>(file_.source(), std::move(spec), cache_, name));
    out_.model.sources.push_back(std::move(name));
    return static_cast<std::uint32_t>(out_.model.sources.size() - 1);
  }

  void read_chunked(const std::string& path, Tensor& t, Storage& s, const Layout& layout,
                    const Dataspace& space, const Datatype& type,
                    const std::vector<Filter>& filters, const std::optional<std::string>& fill,
                    std::uint64_t nbytes, JsonWriter& j) {
    const std::size_t rank = space.dims.size();
    if (layout.chunk.size() != rank + 1 || rank == 0) {
      fail(fmt::format("chunks of {} dimensions for a dataset of {}", layout.chunk.size(), rank));
    }
    if (layout.chunk[rank] != type.size) {
      fail(fmt::format("chunks of {}-byte elements for {}-byte ones", layout.chunk[rank],
                       type.size));
    }
    ChunkGrid grid;
    grid.chunk.assign(layout.chunk.begin(), layout.chunk.end() - 1);
    grid.chunk_bytes = type.size;
    grid.total = 1;
    for (std::size_t d = 0; d < rank; ++d) {
      const std::uint64_t c = grid.chunk[d];
      if (c == 0) fail("a chunk dimension of 0");
      grid.counts.push_back(space.dims[d] / c + (space.dims[d] % c != 0));
      if (__builtin_mul_overflow(grid.chunk_bytes, c, &grid.chunk_bytes) ||
          __builtin_mul_overflow(grid.total, grid.counts[d], &grid.total)) {
        fail("chunks too large to count");
      }
    }
    // Every chunk of the grid is a piece of the tensor and an entry of its source: counted
    // against the mount's chunks before any is made.
    count_chunks(grid.total);
    static constexpr const char* index_names[] = {"v1 B-tree",   "single chunk",     "implicit",
                                                  "fixed array", "extensible array", "v2 B-tree"};
    j.key("chunks").begin_array();
    for (std::uint64_t c : grid.chunk) j.number(c);
    j.end_array();
    j.key("chunk_index").string(index_names[layout.index_type]);
    j.key("filters").begin_array();
    for (const Filter& f : filters) {
      const char* name = filter_name(f.id);
      j.string(name ? name : fmt::format("filter {}", f.id));
    }
    j.end_array();
    ChunkSpec spec;
    spec.fill = fill.value_or(std::string());
    for (const Filter& f : filters) {
      switch (f.id) {
        case 1:
          spec.filters.push_back(ChunkFilter::deflate);
          break;
        case 2:
          spec.filters.push_back(ChunkFilter::shuffle);
          // Its element size, as the writer set it (H5Z_set_local_shuffle: the type's size).
          spec.shuffle_element_size = f.client_data.empty() ? type.size : f.client_data[0];
          break;
        case 3:
          spec.filters.push_back(ChunkFilter::fletcher32);
          break;
        default: {
          const char* name = filter_name(f.id);
          fail(fmt::format("the filter {} (id {}), which ckptfs does not decode",
                           name ? name : quote(f.name.empty() ? "unnamed" : f.name), f.id));
        }
      }
    }
    if (nbytes == 0) return;  // an empty dataset: a storage of nothing
    if (grid.chunk_bytes > limits_.max_chunk_bytes) {
      fail(fmt::format("chunks of {} bytes decoded, more than ckptfs decodes ({}, Hdf5Limits)",
                       grid.chunk_bytes, limits_.max_chunk_bytes));
    }
    spec.chunk_bytes = grid.chunk_bytes;
    spec.chunks = read_chunk_index(file_, layout, grid, space.dims, space.max_dims,
                                   !spec.filters.empty(), chunks_);
    // One storage, the decoded chunks one after the other; each chunk a piece of the tensor at
    // its box, clipped to the dataset (edge chunks are whole chunks in the file).
    s.source = add_chunk_source(path, std::move(spec));
    s.file_offset = 0;
    s.nbytes = grid.total * grid.chunk_bytes;
    const std::size_t storage = out_.model.storages.size();
    out_.model.storages.push_back(std::move(s));
    Assembly a(Assembly::Grid::shape, rank);
    std::vector<std::int64_t> stride(rank), offset(rank, 0), length(rank);
    std::int64_t step = 1;
    for (std::size_t d = rank; d-- > 0;) {
      stride[d] = step;
      step *= static_cast<std::int64_t>(grid.chunk[d]);
    }
    const auto chunk_elements = static_cast<std::int64_t>(grid.chunk_bytes / type.size);
    std::vector<std::uint64_t> scaled(rank, 0);
    for (std::uint64_t i = 0; i < grid.total; ++i) {
      for (std::size_t d = 0; d < rank; ++d) {
        offset[d] = static_cast<std::int64_t>(scaled[d] * grid.chunk[d]);
        length[d] = static_cast<std::int64_t>(
            std::min<std::uint64_t>(grid.chunk[d], space.dims[d] - scaled[d] * grid.chunk[d]));
      }
      a.add({storage, static_cast<std::int64_t>(i) * chunk_elements}, offset, length, stride);
      for (std::size_t d = rank; d-- > 0;) {
        if (++scaled[d] < grid.counts[d]) break;
        scaled[d] = 0;
      }
    }
    t.assembly = out_.model.assemblies.size();
    out_.model.assemblies.push_back(std::move(a));
    const std::string why = index_assembly(out_.model, t, out_.model.assemblies.back());
    if (!why.empty()) fail(why);
  }

  const File& file_;
  const Hdf5Limits& limits_;
  Hdf5Model& out_;
  std::uint32_t data_source_;
  std::shared_ptr<ChunkCache> cache_;
  std::uint64_t keys_json_ = 0;
  std::uint64_t chunks_ = 0;       // chunks listed by chunk indexes
  std::uint64_t made_chunks_ = 0;  // chunks of grids and fill blocks made
};

Hdf5Model read_hdf5_file(const ByteSource& source, const std::string& source_name,
                         const Hdf5Limits& limits) {
  Hdf5Model out;
  out.model.format = Format::hdf5;
  out.model.sources.push_back(source_name);
  out.model.tensor_notes_key = "hdf5";
  const File file(source, 0, source.size(), limits);
  Reader(file, out, 0).read();
  return out;
}

// A top-level member of a .keras archive served in .ckptfs/: its JSON files.
bool keras_extra_file(const std::string& name) {
  return name.ends_with(".json") && name.find('/') == std::string::npos && !name.starts_with(".") &&
         name.size() <= 255;
}

Hdf5Model read_keras_archive(const ByteSource& source, const std::string& source_name,
                             const Hdf5Limits& limits) {
  const ZipArchive zip(source, limits.zip);
  Hdf5Model out;
  out.model.format = Format::keras;
  out.model.sources.push_back(source_name);
  out.model.tensor_notes_key = "hdf5";
  // A deflated member is inflated on read: a source of its own.
  auto inflated = [&](const ZipEntry& member) {
    out.model.sources.push_back(source_name + "/" + member.name);
    out.sources.push_back(std::make_unique<InflatedSource>(source, payload_offset(source, member),
                                                           member.compressed_size, member.size,
                                                           out.model.sources.back()));
    return static_cast<std::uint32_t>(out.model.sources.size() - 1);
  };
  auto readable = [](const ZipEntry& member) {
    return member.stored() || (member.method == 8 && (member.flags & 1) == 0);
  };
  const ZipEntry* weights = zip.find(keras_weights);
  if (weights == nullptr) {
    if (zip.find("model.weights.npz") != nullptr) {
      throw Error(ExitCode::unsupported,
                  "its weights are model.weights.npz (save(weights_format='npz')): unzip it and "
                  "mount model.weights.npz");
    }
    throw Error(ExitCode::bad_checkpoint,
                "a zip without model.weights.h5: not a .keras archive Keras wrote");
  }
  if (!readable(*weights)) {
    throw Error(
        ExitCode::unsupported,
        fmt::format("{} is compressed with zip method {}{}: unzip it and mount it", keras_weights,
                    weights->method, weights->flags & 1 ? ", encrypted" : ""));
  }
  for (const ZipEntry& member : zip.entries()) {
    if (!keras_extra_file(member.name) || !readable(member) || out.model.extra_files.size() == 16) {
      continue;
    }
    if (std::any_of(out.model.extra_files.begin(), out.model.extra_files.end(),
                    [&](const Model::ExtraFile& f) { return f.name == member.name; })) {
      continue;  // a name twice: the first is served
    }
    if (member.stored()) {
      out.model.extra_files.push_back(
          {member.name, 0, payload_offset(source, member), member.size});
    } else {
      const std::uint32_t index = inflated(member);
      out.model.extra_files.push_back({member.name, index, 0, member.size});
    }
  }
  try {
    if (weights->stored()) {
      const File file(source, payload_offset(source, *weights), weights->size, limits);
      Reader(file, out, 0).read();
    } else {
      const std::uint32_t index = inflated(*weights);
      const File file(*out.sources[index - 1], 0, weights->size, limits);
      Reader(file, out, index).read();
    }
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", keras_weights, e.what()));
  }
  return out;
}

}  // namespace

bool looks_like_hdf5(const ByteSource& source) {
  for (std::uint64_t at = 0; at <= 65536; at = at == 0 ? 512 : at * 2) {
    if (!source.contains(at, 8)) return false;
    if (source.read_string(at, 8) == hdf5_signature) return true;
  }
  return false;
}

bool looks_like_keras(const ByteSource& source) {
  if (!looks_like_zip(source) || source.size() < 30) return false;
  const std::string header = source.read_string(0, 30);
  const std::size_t name_length =
      static_cast<unsigned char>(header[26]) | static_cast<unsigned char>(header[27]) << 8;
  if (!source.contains(30, name_length)) return false;
  const std::string name = source.read_string(30, name_length);
  return name == "metadata.json" || name == "config.json" || name == keras_weights;
}

Hdf5Model read_hdf5(const ByteSource& source, const std::string& source_name,
                    const Hdf5Limits& limits) {
  return read_or_name_impostor(source, [&] { return read_hdf5_file(source, source_name, limits); });
}

Hdf5Model read_keras(const ByteSource& source, const std::string& source_name,
                     const Hdf5Limits& limits) {
  return read_or_name_impostor(source,
                               [&] { return read_keras_archive(source, source_name, limits); });
}

}  // namespace ckptfs
