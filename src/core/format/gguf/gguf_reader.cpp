// SPDX-License-Identifier: MIT
// read_gguf(): the header read through a buffered cursor, metadata values written as JSON
// without recursion, tensor infos checked against the file, and split sets combined.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/gguf/gguf_reader.hpp>
#include <ckptfs/format/impostor.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <numeric>

namespace ckptfs {
namespace {

// GGUF's value types (gguf.h's gguf_type).
enum ValueType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
constexpr std::array<std::string_view, 13> type_names = {
    "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
    "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
constexpr std::array<std::uint8_t, 13> scalar_sizes = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

constexpr std::uint32_t default_alignment = 32;

// The header, read front to back through a buffer: few reads of the source (a remote one
// too), each field checked to lie inside the file and inside limits.max_header_bytes.
class Cursor {
 public:
  Cursor(const ByteSource& source, const GgufLimits& limits)
      : source_(source),
        end_(std::min(source.size(), limits.max_header_bytes)),
        limited_(source.size() > limits.max_header_bytes),
        limit_(limits.max_header_bytes) {}

  std::uint64_t offset() const noexcept { return offset_; }
  void set_big_endian(bool big) noexcept { big_endian_ = big; }
  bool big_endian() const noexcept { return big_endian_; }

  // `n` bytes from here; valid until the next call.
  const std::uint8_t* take(std::uint64_t n) {
    need(n);
    if (offset_ < buffer_start_ || offset_ + n > buffer_start_ + buffer_.size()) fill(n);
    const std::uint8_t* p = buffer_.data() + (offset_ - buffer_start_);
    offset_ += n;
    return p;
  }

  std::uint64_t number(unsigned size) {
    const std::uint8_t* p = take(size);
    std::uint64_t v = 0;
    for (unsigned i = 0; i < size; ++i) {
      const unsigned byte = big_endian_ ? i : size - 1 - i;
      v = v << 8 | p[byte];
    }
    return v;
  }
  std::uint32_t u32() { return static_cast<std::uint32_t>(number(4)); }
  std::uint64_t u64() { return number(8); }
  // A count or a length: 32 bits in version 1, 64 after.
  std::uint64_t size(bool version1) { return version1 ? u32() : u64(); }

  std::string_view bytes(std::uint64_t n) {
    return {reinterpret_cast<const char*>(take(n)), static_cast<std::size_t>(n)};
  }
  // `n` bytes from here, the cursor left where it is; valid until the next call.
  std::string_view peek(std::uint64_t n) {
    const std::string_view v = bytes(n);
    offset_ -= n;
    return v;
  }
  void skip(std::uint64_t n) {
    need(n);
    offset_ += n;
  }
  // Back to an offset read before.
  void rewind_to(std::uint64_t offset) noexcept { offset_ = offset; }

  // Throws unless `n` more bytes are inside the file and the header limit.
  void need(std::uint64_t n) const {
    if (n <= end_ - offset_) return;
    if (limited_ && n > limit_ - offset_) {
      throw Error(ExitCode::unsupported,
                  fmt::format("GGUF header: more than {} bytes of metadata and tensor infos "
                              "(byte {} needs {} more)",
                              limit_, offset_, n));
    }
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("GGUF header: byte {} needs {} more bytes, past the end of the file "
                            "({} bytes; or a count or length lies): {}",
                            offset_, n, source_.size(), looks_truncated));
  }

 private:
  void fill(std::uint64_t n) {
    constexpr std::uint64_t chunk = 1 << 20;
    const std::uint64_t length = std::min(std::max(n, chunk), end_ - offset_);
    buffer_.resize(static_cast<std::size_t>(length));
    source_.read(offset_, std::as_writable_bytes(std::span(buffer_)));
    buffer_start_ = offset_;
  }

  const ByteSource& source_;
  std::uint64_t end_;
  bool limited_;
  std::uint64_t limit_;
  std::uint64_t offset_ = 0;
  bool big_endian_ = false;
  std::vector<std::uint8_t> buffer_;
  std::uint64_t buffer_start_ = 0;
};

// A float32 as the shortest decimal that reads back as the same float32 ("1e-05", "0.5",
// "3.0"), or {"__float__": ...} for what JSON has no number for.
void append_float32(std::string& out, float v) {
  if (!std::isfinite(v)) {
    out += float_json(static_cast<double>(v));
    return;
  }
  char text[32];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, v);
  std::string_view s(text, static_cast<std::size_t>(end - text));
  out += s;
  if (s.find_first_of(".e") == std::string_view::npos) out += ".0";  // a float, as Python says
}

std::string type_name(std::uint32_t type) {
  return type < type_names.size() ? std::string(type_names[type]) : fmt::format("type {}", type);
}

// Metadata keys, values and tensor names, each string streamed from the cursor a piece at a
// time and checked against its limit of JSON text before it is read: a string's bytes are one
// byte of JSON or more each (a control character six), so a string longer than the limit leaves
// is refused unread, and one whose escaped form would pass it is refused before it is written.
class HeaderReader {
 public:
  HeaderReader(Cursor& in, const GgufLimits& limits, bool version1)
      : in_(in), limits_(limits), version1_(version1) {}

  // One key-value pair: its key, its type's name and its value as JSON.
  Model::JsonMetadata key_value() {
    Model::JsonMetadata m;
    const std::uint64_t at = in_.offset();
    key_ = nullptr;
    key_at_ = at;
    // A key is written twice: in index.json's metadata and in its metadata_types.
    m.key = string_text(2, json_bytes_, limits_.max_metadata_json_bytes, false);
    json_bytes_ += 2 * (json_escaped_size(m.key) + 2);
    key_ = &m.key;
    const std::uint32_t type = in_.u32();
    if (type > f64) fail(at, fmt::format("has value type {}, which GGUF does not define", type));
    if (type == array) {
      m.type = array_value(m.value_json);
    } else {
      m.type = type_names[type];
      scalar(type, m.value_json);
    }
    json_bytes_ += m.value_json.size();
    check_json(std::string(), m.type.size());
    json_bytes_ += m.type.size();
    return m;
  }

  // A tensor's name, counted against the limit of all names as JSON (index.json lists them).
  std::string tensor_name() {
    key_ = nullptr;
    key_at_ = in_.offset();
    std::string name = string_text(1, names_bytes_, limits_.max_names_json_bytes, true);
    names_bytes_ += json_escaped_size(name) + 2;
    return name;
  }

 private:
  [[noreturn]] void fail(std::uint64_t at, const std::string& what) const {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("GGUF header: metadata key {} (byte {}) {}", quote(*key_), at, what));
  }

  [[noreturn]] void fail_limit(std::uint64_t limit, bool names) const {
    throw Error(ExitCode::unsupported,
                fmt::format("GGUF {}: more than {} bytes of {} as JSON (at {})",
                            names ? "header" : "metadata", limit, names ? "tensor names" : "values",
                            key_ ? "key " + quote(*key_) : fmt::format("byte {}", key_at_)));
  }

  // Pieces of a string's bytes, at most this many at a time.
  static constexpr std::uint64_t piece_bytes = 1 << 20;

  // Feeds the `length` bytes at the cursor to `piece`, a piece at a time, each ending where no
  // UTF-8 sequence is cut (utf8_piece_end()).
  template <class Piece>
  void stream(std::uint64_t length, Piece&& piece) {
    in_.need(length);
    while (length > 0) {
      std::uint64_t n = std::min(length, piece_bytes);
      const std::string_view bytes = in_.peek(n);
      if (n < length) n = utf8_piece_end(bytes);
      piece(bytes.substr(0, static_cast<std::size_t>(n)));
      in_.skip(n);
      length -= n;
    }
  }

  // A string's bytes (its length first), refused unread when `copies` times its JSON (at least
  // its length and two quotes) would take `used` past `limit`, and before it is kept when its
  // escaped size would.
  std::string string_text(std::uint64_t copies, std::uint64_t used, std::uint64_t limit,
                          bool names) {
    const std::uint64_t length = in_.size(version1_);
    in_.need(length);
    if (length > limit || copies * (length + 2) > limit - std::min(used, limit)) {
      fail_limit(limit, names);
    }
    const std::uint64_t start = in_.offset();
    std::uint64_t escaped = 0;
    stream(length, [&](std::string_view piece) { escaped += json_escaped_size(piece); });
    if (copies * (escaped + 2) > limit - used) fail_limit(limit, names);
    in_.rewind_to(start);
    std::string text;
    text.reserve(static_cast<std::size_t>(length));
    stream(length, [&](std::string_view piece) { text += piece; });
    return text;
  }

  // A string value, appended to `out` as JSON once its size is known to fit the limit.
  void string_value(std::string& out) {
    const std::uint64_t length = in_.size(version1_);
    in_.need(length);
    check_json(out, length + 2);
    const std::uint64_t start = in_.offset();
    std::uint64_t escaped = 0;
    stream(length, [&](std::string_view piece) { escaped += json_escaped_size(piece); });
    check_json(out, escaped + 2);
    in_.rewind_to(start);
    out += '"';
    stream(length, [&](std::string_view piece) { append_json_escaped(out, piece); });
    out += '"';
  }

  void scalar(std::uint32_t type, std::string& out) {
    if (type == string) {
      string_value(out);
      return;
    }
    const std::uint64_t v = in_.number(scalar_sizes[type]);
    char text[24];
    auto integer = [&](auto value) {
      out.append(text, static_cast<std::size_t>(std::to_chars(text, text + 24, value).ptr - text));
    };
    switch (type) {
      case u8:
      case u16:
      case u32:
      case u64:
        return integer(v);
      case i8:
        return integer(static_cast<std::int8_t>(v));
      case i16:
        return integer(static_cast<std::int16_t>(v));
      case i32:
        return integer(static_cast<std::int32_t>(v));
      case i64:
        return integer(static_cast<std::int64_t>(v));
      case f32:
        return append_float32(out, std::bit_cast<float>(static_cast<std::uint32_t>(v)));
      case f64:
        out += float_json(std::bit_cast<double>(v));
        return;
      case boolean:
        out += v != 0 ? "true" : "false";
        return;
      default:
        return;
    }
  }

  // An array (of arrays...) read with an explicit stack, never recursing per level. Returns
  // its type's name: "ARRAY[" the item type "]", inner arrays' item types from the first one,
  // which every other must have.
  std::string array_value(std::string& out) {
    struct Level {
      std::uint64_t left;  // items still to read
      std::uint32_t item;  // their type
    };
    std::vector<Level> stack;
    std::vector<std::uint32_t> types;  // the item type of each depth, as the first array says
    auto open = [&] {
      const std::uint64_t at = in_.offset();
      const std::uint32_t item = in_.u32();
      if (item > f64)
        fail(at, fmt::format("holds an array of type {}, which GGUF does not define", item));
      const std::uint64_t count = in_.size(version1_);
      // Every item takes a byte or more (a string's length: 4 or 8): a count larger than the
      // bytes left is a lie, found before any work.
      in_.need(count);
      if (stack.size() < types.size()) {
        if (types[stack.size()] != item) {
          fail(at, fmt::format("holds arrays of {} and of {}: ckptfs keeps one type per array",
                               type_name(types[stack.size()]), type_name(item)));
        }
      } else {
        if (stack.size() == limits_.max_array_depth) {
          fail(at, fmt::format("nests arrays more than {} deep", limits_.max_array_depth));
        }
        types.push_back(item);
      }
      stack.push_back({count, item});
      out += '[';
    };
    open();
    while (!stack.empty()) {
      Level& top = stack.back();
      if (top.left == 0) {
        out += ']';
        stack.pop_back();
        if (!stack.empty() && stack.back().left != 0) out += ',';
        continue;
      }
      --top.left;
      if (top.item == array) {
        open();
        continue;
      }
      if (top.item != string && top.left > 0) {
        // A run of numbers: one bounds check and one buffer for all of them.
        const std::uint64_t n = top.left + 1;
        in_.need(n * scalar_sizes[top.item]);
        for (std::uint64_t i = 0; i < n; ++i) {
          scalar(top.item, out);
          if (i + 1 < n) out += ',';
          if ((i & 0xffff) == 0) check_json(out);
        }
        top.left = 0;
      } else {
        scalar(top.item, out);
        if (top.left != 0) out += ',';
      }
      check_json(out);
    }
    // "ARRAY[ARRAY[UINT8]]"; "ARRAY[ARRAY]" when no inner array said its items' type.
    std::string name;
    for (std::size_t i = 0; i < types.size(); ++i) name += "ARRAY[";
    name += type_names[types.back()];
    name.append(types.size(), ']');
    return name;
  }

  // Throws unless the metadata's JSON so far, `out` and `more` bytes fit the limit.
  void check_json(const std::string& out, std::uint64_t more = 0) const {
    const std::uint64_t limit = limits_.max_metadata_json_bytes;
    if (json_bytes_ > limit || out.size() > limit - json_bytes_ ||
        more > limit - json_bytes_ - out.size()) {
      fail_limit(limit, false);
    }
  }

  Cursor& in_;
  const GgufLimits& limits_;
  bool version1_;
  const std::string* key_ = nullptr;  // the metadata key being read, once read
  std::uint64_t key_at_ = 0;          // where its key-value pair or tensor info starts
  std::uint64_t json_bytes_ = 0;      // metadata keys, values and types as JSON, so far
  std::uint64_t names_bytes_ = 0;     // tensor names as JSON, so far
};

struct TensorInfo {
  std::string name;
  std::vector<std::uint64_t> ne;  // GGML's order: ne[0] innermost
  std::uint32_t type = 0;
  std::uint64_t offset = 0;  // from the data start
  std::uint64_t info_offset = 0;
};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// The tensor a tensor info describes, with its storage's size in `stored` (0 when broken).
Tensor make_tensor(const TensorInfo& info_, std::uint64_t& stored, const GgufLimits& limits) {
  Tensor t;
  const std::string where =
      fmt::format("GGUF tensor {} (info at byte {})", quote(info_.name), info_.info_offset);
  if (info_.ne.size() > limits.max_dims) {
    throw Error(ExitCode::bad_checkpoint, fmt::format("{} has {} dimensions, more than GGML's {}",
                                                      where, info_.ne.size(), limits.max_dims));
  }
  const std::vector<std::uint64_t> dims(info_.ne.rbegin(), info_.ne.rend());  // outermost first
  const auto count = element_count(dims);
  if (!count || std::ranges::any_of(dims, [](std::uint64_t d) { return d > INT64_MAX; })) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("{}: ne {} has more elements than 64 bits count", where,
                            fmt::join(info_.ne, ", ")));
  }
  const std::uint64_t numel = *count;
  t.shape.assign(dims.begin(), dims.end());
  t.stride.resize(t.shape.size());
  std::int64_t step = 1;
  for (std::size_t i = t.shape.size(); i-- > 0;) {
    t.stride[i] = step;
    // 0 past int64: only a shape with a 0 in it (no element) gets there.
    if (__builtin_mul_overflow(step, std::max<std::int64_t>(t.shape[i], 1), &step)) step = 0;
  }
  stored = 0;
  if (const auto plain = ggml_plain_type(info_.type)) {
    t.dtype = plain->dtype;
  } else if (const auto format = block_format_from_ggml(info_.type)) {
    t.blocks = *format;
    const BlockFormatInfo& b = info(*format);
    const std::uint64_t row = info_.ne.empty() ? 1 : info_.ne[0];
    if (row % b.block_elements != 0) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("{}: rows of {} values are no whole number of {} blocks of {}", where,
                              row, b.name, b.block_elements));
    }
  } else {
    t.broken = fmt::format(
        "GGML type {}, which ckptfs does not know (removed from GGML, or newer than ckptfs): "
        "its size is unknown",
        info_.type);
    return t;
  }
  // The values as served (float32 for blocks) must fit a file, as any tensor's.
  const auto nbytes = checked_product(numel, info(t.dtype).element_size);
  if (!nbytes || *nbytes > max_tensor_bytes) {
    throw Error(
        ExitCode::bad_checkpoint,
        fmt::format("{}: shape {} holds more bytes than a file can", where, shape_text(t.shape)));
  }
  stored = t.stored_nbytes();
  return t;
}

Model read_gguf_file(const ByteSource& source, std::string source_name, const GgufLimits& limits) {
  Cursor in(source, limits);
  if (source.size() < 8 || source.read_string(0, 4) != "GGUF") {
    throw Error(ExitCode::bad_checkpoint, "not a GGUF file: it does not start with \"GGUF\"");
  }
  in.take(4);
  std::uint32_t version = in.u32();
  if ((version & 0xffff) == 0) {
    // Written on a big-endian machine: every number of the file is big-endian.
    in.set_big_endian(true);
    version = __builtin_bswap32(version);
  }
  if (version < 1 || version > 3) {
    throw Error(
        ExitCode::bad_checkpoint,
        fmt::format("GGUF header: version {}, which ckptfs does not read (1 to 3)", version));
  }
  const bool version1 = version == 1;
  const std::uint64_t tensor_count = in.size(version1);
  const std::uint64_t kv_count = in.size(version1);
  if (tensor_count > limits.max_tensors) {
    throw Error(ExitCode::unsupported,
                fmt::format("GGUF header: {} tensors, more than ckptfs reads ({})", tensor_count,
                            limits.max_tensors));
  }
  // Each key-value pair and tensor info takes a dozen bytes or more: larger counts than the
  // bytes left are lies, found before any allocation.
  in.need(kv_count);
  in.need(tensor_count);

  Model m;
  m.format = Format::gguf;
  m.sources.push_back(std::move(source_name));
  HeaderReader header(in, limits, version1);
  TextSet keys;
  std::optional<std::uint32_t> alignment;
  for (std::uint64_t i = 0; i < kv_count; ++i) {
    const std::uint64_t at = in.offset();
    Model::JsonMetadata kv = header.key_value();
    if (!keys.insert(kv.key).second) {
      throw Error(
          ExitCode::bad_checkpoint,
          fmt::format("GGUF header: metadata key {} (byte {}) appears twice", quote(kv.key), at));
    }
    if (kv.key == "general.alignment") {
      std::uint64_t a = 0;
      if (kv.type != "UINT32" ||
          std::from_chars(kv.value_json.data(), kv.value_json.data() + kv.value_json.size(), a)
                  .ec != std::errc() ||
          a == 0 || (a & (a - 1)) != 0) {
        throw Error(ExitCode::bad_checkpoint,
                    fmt::format("GGUF header: general.alignment is {} {}, not a UINT32 power of "
                                "two",
                                kv.type, kv.value_json));
      }
      alignment = static_cast<std::uint32_t>(a);
    }
    m.json_metadata.push_back(std::move(kv));
  }

  std::vector<TensorInfo> infos;
  infos.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(tensor_count, 1 << 16)));
  TextSet names;
  for (std::uint64_t i = 0; i < tensor_count; ++i) {
    TensorInfo t;
    t.info_offset = in.offset();
    t.name = header.tensor_name();
    const std::uint32_t dims = in.u32();
    if (dims > limits.max_dims) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("GGUF tensor {} (info at byte {}) has {} dimensions, more than "
                              "GGML's {}",
                              quote(t.name), t.info_offset, dims, limits.max_dims));
    }
    for (std::uint32_t d = 0; d < dims; ++d) t.ne.push_back(in.size(version1));
    t.type = in.u32();
    t.offset = in.u64();
    if (!names.insert(t.name).second) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("GGUF tensor {} (info at byte {}): a second tensor of that name",
                              quote(t.name), t.info_offset));
    }
    infos.push_back(std::move(t));
  }

  const std::uint64_t align = alignment.value_or(default_alignment);
  const std::uint64_t header_end = in.offset();
  const std::uint64_t data_start = (header_end + align - 1) / align * align;  // header < 2^63
  const std::uint64_t size = source.size();

  struct Placed {
    std::uint64_t begin, end;
    std::size_t tensor;
  };
  std::vector<Placed> placed;
  m.tensors.reserve(infos.size());
  m.storages.reserve(infos.size());
  m.entries.reserve(infos.size());
  for (const TensorInfo& ti : infos) {
    std::uint64_t stored = 0;
    Tensor t = make_tensor(ti, stored, limits);
    const std::string where =
        fmt::format("GGUF tensor {} (info at byte {})", quote(ti.name), ti.info_offset);
    if (ti.offset % align != 0) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("{}: offset {} is not a multiple of the alignment, {}", where,
                              ti.offset, align));
    }
    if (t.broken.empty()) {
      if (data_start > size || ti.offset > size - data_start ||
          stored > size - data_start - ti.offset) {
        throw Error(ExitCode::bad_checkpoint,
                    fmt::format("{}: its {} bytes at offset {} of the data (byte {}) run past the "
                                "end of the file ({} bytes): {}",
                                where, stored, ti.offset, decimal(uint128{data_start} + ti.offset),
                                size, looks_truncated));
      }
      Storage s;
      s.key = ti.name;
      s.file_offset = data_start + ti.offset;
      s.nbytes = stored;
      s.big_endian = in.big_endian();
      t.storage = m.storages.size();
      if (stored != 0) placed.push_back({s.file_offset, s.file_offset + stored, m.tensors.size()});
      m.storages.push_back(std::move(s));
    }
    m.tensors.push_back(std::move(t));
    Entry e;
    e.key = ti.name;
    e.kind = Entry::Kind::tensor;
    e.tensor = m.tensors.size() - 1;
    m.entries.push_back(std::move(e));
  }
  std::sort(placed.begin(), placed.end(),
            [](const Placed& a, const Placed& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < placed.size(); ++i) {
    if (placed[i].begin < placed[i - 1].end) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("GGUF tensors {} and {} overlap: bytes [{}, {}) and [{}, {})",
                              quote(m.entries[placed[i - 1].tensor].key),
                              quote(m.entries[placed[i].tensor].key), placed[i - 1].begin,
                              placed[i - 1].end, placed[i].begin, placed[i].end));
    }
  }
  return m;
}

}  // namespace

bool looks_like_gguf(const ByteSource& source) {
  return source.size() >= 4 && source.read_string(0, 4) == "GGUF";
}

Model read_gguf(const ByteSource& source, std::string source_name, const GgufLimits& limits) {
  return read_or_name_impostor(
      source, [&] { return read_gguf_file(source, std::move(source_name), limits); });
}

std::optional<GgufSplitName> gguf_split_name(std::string_view name) {
  // "<prefix>-NNNNN-of-MMMMM.gguf": 5 digits each, as llama_split_path() writes them.
  constexpr std::string_view suffix = ".gguf";
  constexpr std::size_t tail = 1 + 5 + 4 + 5;  // "-NNNNN-of-MMMMM"
  if (!name.ends_with(suffix) || name.size() < suffix.size() + tail + 1) return std::nullopt;
  const std::string_view part = name.substr(name.size() - suffix.size() - tail, tail);
  if (part[0] != '-' || part.substr(6, 4) != "-of-") return std::nullopt;
  auto digits = [](std::string_view s, std::uint32_t& v) {
    if (!std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    return std::from_chars(s.data(), s.data() + s.size(), v).ec == std::errc();
  };
  GgufSplitName n;
  if (!digits(part.substr(1, 5), n.number) || !digits(part.substr(10, 5), n.count) ||
      n.number == 0 || n.number > n.count) {
    return std::nullopt;
  }
  n.prefix = std::string(name.substr(0, name.size() - suffix.size() - tail));
  return n;
}

std::string gguf_split_file(std::string_view prefix, std::uint32_t number, std::uint32_t count) {
  return fmt::format("{}-{:05}-of-{:05}.gguf", prefix, number, count);
}

Model combine_gguf_splits(const std::vector<std::string>& names, std::vector<Model> models) {
  Model m;
  m.format = Format::gguf;
  m.sources = names;
  TextSet seen;
  for (std::size_t i = 0; i < models.size(); ++i) {
    Model& part = models[i];
    // split.no (0-based) and split.count, as llama.cpp's gguf-split writes them, must agree.
    for (const Model::JsonMetadata& kv : part.json_metadata) {
      const std::uint64_t expected = kv.key == "split.no"      ? i
                                     : kv.key == "split.count" ? models.size()
                                                               : ~std::uint64_t{0};
      if (expected == ~std::uint64_t{0}) continue;
      std::uint64_t v = 0;
      const auto [_, ec] =
          std::from_chars(kv.value_json.data(), kv.value_json.data() + kv.value_json.size(), v);
      if (ec != std::errc() || v != expected) {
        throw Error(ExitCode::bad_checkpoint,
                    fmt::format("split {} of {} ({}) says {} {}", i + 1, models.size(),
                                quote(names[i]), kv.key, kv.value_json));
      }
    }
    const std::size_t storage_base = m.storages.size();
    const std::size_t tensor_base = m.tensors.size();
    for (Storage& s : part.storages) {
      s.source = static_cast<std::uint32_t>(i);
      m.storages.push_back(std::move(s));
    }
    for (Tensor& t : part.tensors) {
      if (t.storage) *t.storage += storage_base;
      m.tensors.push_back(std::move(t));
    }
    for (Entry& e : part.entries) {
      if (!seen.insert(e.key).second) {
        throw Error(ExitCode::bad_checkpoint,
                    fmt::format("tensor {} is in two files of the split set (again in {})",
                                quote(e.key), quote(names[i])));
      }
      e.tensor += tensor_base;
      m.entries.push_back(std::move(e));
    }
  }
  if (!models.empty()) m.json_metadata = std::move(models.front().json_metadata);
  return m;
}

}  // namespace ckptfs
