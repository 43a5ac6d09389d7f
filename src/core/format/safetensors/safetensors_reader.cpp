// SPDX-License-Identifier: MIT
// read_safetensors(): the header length, the JSON header pulled a token at a time, the checks of
// every number and extent, and the Model of one storage per tensor.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/format/impostor.hpp>
#include <ckptfs/format/safetensors/safetensors_reader.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>

namespace ckptfs {
namespace {

using Token = JsonReader::Token;

// A dtype of the format (safetensors' Dtype enum) and what torch calls it.
struct FormatDType {
  std::string name;            // as the header writes it ("F32")
  std::optional<DType> dtype;  // none: torch has no such dtype
  unsigned bits = 0;           // per element, as the library counts them
};

// The whole-byte dtypes are the dtype table's (model/dtype.hpp); the sub-byte ones are here.
std::optional<FormatDType> find_dtype(std::string_view name) {
  if (name == "F4") return FormatDType{"F4", DType::float4_e2m1fn_x2, 4};  // two per byte
  if (name == "F6_E2M3" || name == "F6_E3M2") return FormatDType{std::string(name), {}, 6};
  if (auto d = dtype_from_safetensors(name)) {
    return FormatDType{std::string(name), *d, 8u * info(*d).element_size};
  }
  return std::nullopt;
}

// One tensor as its header describes it; offsets relative to the data's start.
struct Described {
  std::string name;
  std::optional<FormatDType> dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t nbytes = 0;  // from shape and dtype
};

struct Header {
  std::vector<Described> tensors;  // in header order
  std::vector<std::pair<std::string, std::string>> metadata;
};

class HeaderParser {
 public:
  HeaderParser(JsonReader& json, const SafetensorsLimits& limits) : json_(json), limits_(limits) {}

  Header run() {
    if (json_.next() != Token::begin_object) json_.fail("the header is not a JSON object");
    for (Token t = json_.next(); t != Token::end_object; t = json_.next()) {
      std::string name(json_.string());
      if (name == "__metadata__") {
        metadata();
      } else {
        if (header_.tensors.size() == limits_.max_tensors) {
          throw Error(ExitCode::unsupported,
                      fmt::format("more than {} tensors", limits_.max_tensors));
        }
        tensor(std::move(name));
      }
    }
    json_.next();  // Token::end, or an error for anything but whitespace after the object
    return std::move(header_);
  }

 private:
  void metadata() {
    Token t = json_.next();
    if (t == Token::null) return;  // what MLX writes when there is none; the library accepts it
    if (t != Token::begin_object) json_.fail("__metadata__ is neither an object nor null");
    std::uint64_t bytes = 0;
    for (t = json_.next(); t != Token::end_object; t = json_.next()) {
      std::string key(json_.string());
      if (json_.next() != Token::string) {
        json_.fail(fmt::format("__metadata__ {} is not a string", quote(key)));
      }
      bytes += key.size() + json_.string().size();
      if (header_.metadata.size() == limits_.max_metadata_entries ||
          bytes > limits_.max_metadata_bytes) {
        throw Error(ExitCode::unsupported,
                    fmt::format("__metadata__ has more than {} entries or {} bytes",
                                limits_.max_metadata_entries, limits_.max_metadata_bytes));
      }
      header_.metadata.emplace_back(std::move(key), json_.string());
    }
  }

  std::uint64_t natural(const Described& d, const char* what) {
    if (json_.token() != Token::number) {
      json_.fail(
          fmt::format("tensor {}: {} holds something that is not a number", quote(d.name), what));
    }
    auto v = json_.uint64();
    if (!v) {
      json_.fail(fmt::format("tensor {}: {} holds {}, not an integer from 0 to 2^64 - 1",
                             quote(d.name), what, quote(json_.number_text(), 40)));
    }
    return *v;
  }

  void tensor(std::string name) {
    Described d;
    d.name = std::move(name);
    if (json_.next() != Token::begin_object) {
      json_.fail(fmt::format("tensor {}: its description is not an object", quote(d.name)));
    }
    bool has_shape = false, has_offsets = false;
    for (Token t = json_.next(); t != Token::end_object; t = json_.next()) {
      std::string_view field = json_.string();
      if (field == "dtype") {
        if (json_.next() != Token::string) {
          json_.fail(fmt::format("tensor {}: dtype is not a string", quote(d.name)));
        }
        d.dtype = find_dtype(json_.string());
        if (!d.dtype) {
          json_.fail(
              fmt::format("tensor {}: unknown dtype {}", quote(d.name), quote(json_.string(), 40)));
        }
      } else if (field == "shape") {
        if (json_.next() != Token::begin_array) {
          json_.fail(fmt::format("tensor {}: shape is not an array", quote(d.name)));
        }
        d.shape.clear();
        for (t = json_.next(); t != Token::end_array; t = json_.next()) {
          if (d.shape.size() == limits_.max_dims) {
            throw Error(ExitCode::unsupported, fmt::format("tensor {} has more than {} dimensions",
                                                           quote(d.name), limits_.max_dims));
          }
          d.shape.push_back(natural(d, "shape"));
        }
        has_shape = true;
      } else if (field == "data_offsets") {
        if (json_.next() != Token::begin_array) {
          json_.fail(fmt::format("tensor {}: data_offsets is not an array", quote(d.name)));
        }
        std::size_t n = 0;
        for (t = json_.next(); t != Token::end_array; t = json_.next()) {
          if (n == 2) {
            json_.fail(
                fmt::format("tensor {}: data_offsets has more than two numbers", quote(d.name)));
          }
          (n++ == 0 ? d.begin : d.end) = natural(d, "data_offsets");
        }
        if (n != 2) {
          json_.fail(
              fmt::format("tensor {}: data_offsets has fewer than two numbers", quote(d.name)));
        }
        has_offsets = true;
      } else {
        json_.skip_value();  // a member the format does not define: ignored, as the library does
      }
    }
    const char* missing = !d.dtype       ? "dtype"
                          : !has_shape   ? "shape"
                          : !has_offsets ? "data_offsets"
                                         : nullptr;
    if (missing) json_.fail(fmt::format("tensor {} has no {}", quote(d.name), missing));
    header_.tensors.push_back(std::move(d));
  }

  JsonReader& json_;
  const SafetensorsLimits& limits_;
  Header header_;
};

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// The library's checks of one tensor: elements and bits without overflow, whole bytes, and a
// length of exactly that many bytes.
void check_size(Described& d) {
  const auto numel = element_count(d.shape);
  if (!numel) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("tensor {}: shape {} has more elements than 64 bits count",
                            quote(d.name), shape_text(d.shape)));
  }
  const auto bits = checked_product(*numel, d.dtype->bits);
  if (!bits) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("tensor {}: shape {} of {} has more bits than 64 bits count",
                            quote(d.name), shape_text(d.shape), d.dtype->name));
  }
  if (*bits % 8 != 0) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("tensor {}: {} elements of {} bits do not fill whole bytes",
                            quote(d.name), *numel, d.dtype->bits));
  }
  d.nbytes = *bits / 8;
  if (d.end < d.begin) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("tensor {}: data_offsets [{}, {}] end before they begin", quote(d.name),
                            d.begin, d.end));
  }
  if (d.end - d.begin != d.nbytes) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("tensor {}: data_offsets [{}, {}] hold {} bytes, but {} {} needs {}",
                            quote(d.name), d.begin, d.end, d.end - d.begin, d.dtype->name,
                            shape_text(d.shape), d.nbytes));
  }
}

// The tensor as torch holds it: its dtype, shape and C-order strides (torch's rule for empty
// tensors: each stride is the product of the later sizes, a size 0 counting as 1).
Tensor to_torch(const Described& d, std::size_t storage) {
  if (!d.dtype->dtype) {
    throw Error(ExitCode::unsupported,
                fmt::format("tensor {} has dtype {} ({}-bit elements), which torch has no dtype "
                            "for: ckptfs does not serve it",
                            quote(d.name), d.dtype->name, d.dtype->bits));
  }
  Tensor t;
  t.dtype = *d.dtype->dtype;
  constexpr auto int64_max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  for (auto n : d.shape) {
    if (n > int64_max) {
      throw Error(ExitCode::unsupported,
                  fmt::format("tensor {}: a dimension of {} is past what torch can hold",
                              quote(d.name), n));
    }
    t.shape.push_back(static_cast<std::int64_t>(n));
  }
  if (d.dtype->bits == 4) {
    // torch's float4_e2m1fn_x2 holds a pair of F4 elements along the last dimension.
    if (t.shape.empty() || t.shape.back() % 2 != 0) {
      throw Error(ExitCode::unsupported,
                  fmt::format("tensor {}: F4 of shape {}: torch's float4_e2m1fn_x2 packs pairs "
                              "along the last dimension, which must be even",
                              quote(d.name), shape_text(d.shape)));
    }
    t.shape.back() /= 2;
  }
  t.stride.resize(t.shape.size());
  std::int64_t step = 1;
  for (std::size_t i = t.shape.size(); i-- > 0;) {
    t.stride[i] = step;
    if (i > 0 && __builtin_mul_overflow(step, std::max<std::int64_t>(t.shape[i], 1), &step)) {
      throw Error(ExitCode::unsupported,
                  fmt::format("tensor {}: shape {} has strides past what torch can hold",
                              quote(d.name), shape_text(d.shape)));
    }
  }
  t.storage = storage;
  return t;
}

Header parse_header(const ByteSource& source, std::uint64_t length,
                    const SafetensorsLimits& limits) {
  std::uint64_t consumed = 0;
  JsonReader json(
      [&](std::span<char> buffer) -> std::size_t {
        auto n =
            static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), length - consumed));
        source.read(8 + consumed, std::as_writable_bytes(buffer.first(n)));
        consumed += n;
        return n;
      },
      JsonLimits{});
  try {
    return HeaderParser(json, limits).run();
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("safetensors header: {}", e.what()));
  }
}

Model read_safetensors_file(const ByteSource& source, std::string source_name,
                            const SafetensorsLimits& limits) {
  const std::uint64_t size = source.size();
  if (size < 8) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("a {}-byte file: too short for a safetensors header length: {}", size,
                            looks_truncated));
  }
  std::array<unsigned char, 8> head{};
  source.read(0, std::as_writable_bytes(std::span(head)));
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | head[static_cast<std::size_t>(i)];
  if (length > limits.max_header_bytes) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("safetensors header length {} is over the limit of {} bytes (the "
                            "safetensors library's)",
                            length, limits.max_header_bytes));
  }
  if (length > size - 8) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("safetensors header length {} runs past the end of the file ({} "
                            "bytes): {}",
                            length, size, looks_truncated));
  }
  Header header = parse_header(source, length, limits);
  for (Described& d : header.tensors) check_size(d);

  // The data's order: by offsets, as the library sorts; equal ones (empty tensors) in header
  // order. It must be one run from 0, without overlaps or gaps, ending at the end of the file.
  std::vector<std::size_t> order(header.tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const Described& x = header.tensors[a];
    const Described& y = header.tensors[b];
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  const std::uint64_t data_start = 8 + length;
  std::uint64_t at = 0;
  const Described* previous = nullptr;
  for (std::size_t i : order) {
    const Described& d = header.tensors[i];
    if (d.begin < at) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("tensor {}: data_offsets [{}, {}] overlap those of tensor {}, "
                              "which end at {}",
                              quote(d.name), d.begin, d.end, quote(previous->name), at));
    }
    if (d.begin > at) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("tensor {}: data_offsets [{}, {}] leave bytes [{}, {}) of the data "
                              "to no tensor",
                              quote(d.name), d.begin, d.end, at, d.begin));
    }
    at = d.end;
    previous = &d;
  }
  const std::uint64_t data_size = size - data_start;
  if (at != data_size) {
    throw Error(ExitCode::bad_checkpoint,
                at > data_size
                    ? fmt::format("the tensors' data runs to byte {} of the file, past its end "
                                  "({} bytes): {}",
                                  data_start + at, size, looks_truncated)
                    : fmt::format("the tensors' data ends at byte {} of the file, but the file "
                                  "has {} bytes",
                                  data_start + at, size));
  }

  Model m;
  m.format = Format::safetensors;
  m.sources.push_back(std::move(source_name));
  m.metadata = std::move(header.metadata);
  m.storages.reserve(order.size());
  m.tensors.reserve(order.size());
  m.entries.reserve(order.size());
  for (std::size_t i : order) {
    Described& d = header.tensors[i];
    m.tensors.push_back(to_torch(d, m.storages.size()));
    Storage s;
    s.key = d.name;
    s.file_offset = data_start + d.begin;
    s.nbytes = d.nbytes;
    m.storages.push_back(std::move(s));
    Entry e;
    e.key = std::move(d.name);
    e.kind = Entry::Kind::tensor;
    e.tensor = m.tensors.size() - 1;
    m.entries.push_back(std::move(e));
  }
  return m;
}

}  // namespace

bool looks_like_safetensors(const ByteSource& source) {
  return source.size() >= 10 && source.read_string(8, 1) == "{";
}

Model read_safetensors(const ByteSource& source, std::string source_name,
                       const SafetensorsLimits& limits) {
  return read_or_name_impostor(
      source, [&] { return read_safetensors_file(source, std::move(source_name), limits); });
}

}  // namespace ckptfs
