// SPDX-License-Identifier: MIT
// Test-only driver of the writers, for the Python integration tests (tests/integration/
// test_writers.py), which check what it writes with zipfile, pickle and torch.
//
//   writer_tool tensor OUT DTYPE SHAPE [options]   tensor.pt; SHAPE "2,3", "" for 0-d
//       --data FILE          the tensor's bytes in C order (else none: an empty tensor)
//       --requires-grad --big-endian --no-byteorder --serialization-id --prefix P
//       --per-tensor SCALE ZERO_POINT
//       --per-channel AXIS SCALES_FILE ZERO_POINTS_FILE   (float64 and int64 bytes)
//   writer_tool keys OUT [--prefix P] [--no-byteorder] HEX...   map.pt of the keys' bytes
//   writer_tool value OUT JSON [--prefix P] [--no-byteorder]    <key>.pt of a value
//   writer_tool pickle JSON                                     the pickle alone, on stdout
//   writer_tool sparse OUT BIG_SIZE SMALL_FILE                  an archive past 4 GiB, the
//       big record a hole: (uint8 tensor of BIG_SIZE zeros, float32 tensor of SMALL_FILE)
//   writer_tool layout FILE    prints "name data_offset size" per record (our ZipArchive)
//
// JSON values: null, true/false, integers, floats, strings, arrays (lists); objects are dicts
// with string keys, except the tagged forms {"tuple": [...]}, {"bytes": "hex"}, {"float":
// "0x1.8p+0"} (any C hexadecimal float, "inf", "-inf"),
// {"dict": [[k, v], ...]}, {"ordered_dict": [[k, v], ...]}, {"str_hex": "hex"} (a str given by
// its UTF-8 bytes, surrogates allowed), {"int": "decimal"} (any size).
#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/pickle/pickle_writer.hpp>
#include <ckptfs/format/torch/torch_writer.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/model/dtype.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <fcntl.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using ckptfs::pickle::DictEntry;
using ckptfs::pickle::Value;

std::string unhex(const std::string& hex) {
  if (hex.size() % 2 != 0) throw std::runtime_error("odd hex string");
  std::string out;
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// A decimal integer of any size as little-endian two's complement bytes.
std::string decimal_to_twos_complement(std::string decimal) {
  const bool negative = !decimal.empty() && decimal[0] == '-';
  if (negative) decimal.erase(0, 1);
  std::vector<unsigned> digits;
  for (const char c : decimal) digits.push_back(static_cast<unsigned>(c - '0'));
  std::string magnitude;  // little-endian bytes
  while (!digits.empty()) {
    unsigned remainder = 0;
    std::vector<unsigned> quotient;
    for (const unsigned d : digits) {
      const unsigned value = remainder * 10 + d;
      if (!quotient.empty() || value / 256 != 0) quotient.push_back(value / 256);
      remainder = value % 256;
    }
    magnitude.push_back(static_cast<char>(remainder));
    digits = quotient;
  }
  magnitude.push_back('\0');  // room for the sign
  if (negative) {
    bool carry = true;
    for (char& c : magnitude) {
      unsigned v = static_cast<unsigned char>(~static_cast<unsigned char>(c));
      if (carry) {
        ++v;
        carry = v > 0xff;
      }
      c = static_cast<char>(v & 0xff);
    }
  }
  return magnitude;
}

Value to_value(const nlohmann::json& j) {
  if (j.is_null()) return Value::none_value();
  if (j.is_boolean()) return Value::boolean(j.get<bool>());
  if (j.is_number_integer()) return Value::integer(j.get<std::int64_t>());
  if (j.is_number_float()) return Value::real(j.get<double>());
  if (j.is_string()) return Value::str(j.get<std::string>());
  if (j.is_array()) {
    std::vector<Value> items;
    for (const auto& item : j) items.push_back(to_value(item));
    return Value::list(std::move(items));
  }
  if (j.size() == 1) {
    const std::string tag = j.begin().key();
    const nlohmann::json& body = j.begin().value();
    auto pairs = [&] {
      std::vector<DictEntry> entries;
      for (const auto& kv : body)
        entries.push_back(DictEntry{to_value(kv.at(0)), to_value(kv.at(1))});
      return entries;
    };
    if (tag == "tuple") {
      std::vector<Value> items;
      for (const auto& item : body) items.push_back(to_value(item));
      return Value::tuple(std::move(items));
    }
    if (tag == "bytes") return Value::bytes_value(unhex(body.get<std::string>()));
    if (tag == "float") return Value::real(std::strtod(body.get<std::string>().c_str(), nullptr));
    if (tag == "str_hex") return Value::str(unhex(body.get<std::string>()));
    if (tag == "int") {
      return Value::big_integer(decimal_to_twos_complement(body.get<std::string>()));
    }
    if (tag == "dict") return Value::dict(pairs());
    if (tag == "ordered_dict") return Value::ordered_dict(pairs());
  }
  std::vector<DictEntry> entries;
  for (const auto& [key, item] : j.items())
    entries.push_back(DictEntry{Value::str(key), to_value(item)});
  return Value::dict(std::move(entries));
}

void write_file(const std::string& path, const ckptfs::TorchArchive& archive,
                const std::vector<std::string>& storage_files) {
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) throw std::runtime_error(path + ": " + std::strerror(errno));
  auto sink = [&](std::string_view bytes) {
    if (std::fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size()) {
      throw std::runtime_error(path + ": write failed");
    }
  };
  // Storages streamed from their files in pieces, as pack would.
  archive.write(sink, [&](std::size_t storage, ckptfs::ZipStreamWriter& writer) {
    if (storage_files.at(storage).empty()) return;  // an empty storage
    const ckptfs::FileSource source(storage_files.at(storage));
    std::string piece(1 << 16, '\0');
    for (std::uint64_t at = 0; at < source.size(); at += piece.size()) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), source.size() - at));
      source.read(at, std::as_writable_bytes(std::span(piece.data(), n)));
      writer.write(std::string_view(piece.data(), n));
    }
  });
  if (std::fclose(out) != 0) throw std::runtime_error(path + ": close failed");
}

std::vector<std::int64_t> parse_shape(const std::string& text) {
  std::vector<std::int64_t> shape;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t comma = text.find(',', at);
    shape.push_back(std::stoll(text.substr(at, comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return shape;
}

int tensor_command(const std::vector<std::string>& a) {
  const std::string out = a.at(0);
  ckptfs::TensorFileSpec spec;
  spec.dtype = ckptfs::dtype_from_name(a.at(1)).value();
  spec.shape = parse_shape(a.at(2));
  ckptfs::TorchArchiveOptions options;
  std::vector<std::string> files;
  std::string data_file;
  for (std::size_t i = 3; i < a.size(); ++i) {
    if (a[i] == "--data") {
      data_file = a.at(++i);
    } else if (a[i] == "--requires-grad") {
      spec.requires_grad = true;
    } else if (a[i] == "--big-endian") {
      options.big_endian = true;
    } else if (a[i] == "--no-byteorder") {
      options.byteorder_record = false;
    } else if (a[i] == "--serialization-id") {
      options.serialization_id = true;
    } else if (a[i] == "--prefix") {
      options.prefix = a.at(++i);
    } else if (a[i] == "--per-tensor") {
      ckptfs::QuantizationSpec q;
      q.scale = std::stod(a.at(++i));
      q.zero_point = std::stoll(a.at(++i));
      spec.quantization = q;
    } else if (a[i] == "--per-channel") {
      ckptfs::QuantizationSpec q;
      q.scheme = ckptfs::QScheme::per_channel_affine;
      q.axis = std::stoll(a.at(++i));
      spec.quantization = q;
      files.resize(3);
      files[1] = a.at(++i);
      files[2] = a.at(++i);
    } else {
      throw std::runtime_error("unknown option " + a[i]);
    }
  }
  if (files.empty()) files.resize(1);
  files[0] = data_file;
  write_file(out, ckptfs::tensor_file(spec, options), files);
  return 0;
}

ckptfs::TorchArchiveOptions archive_options(const std::vector<std::string>& a, std::size_t from,
                                            std::vector<std::string>* rest) {
  ckptfs::TorchArchiveOptions options;
  for (std::size_t i = from; i < a.size(); ++i) {
    if (a[i] == "--prefix") {
      options.prefix = a.at(++i);
    } else if (a[i] == "--no-byteorder") {
      options.byteorder_record = false;
    } else if (rest != nullptr) {
      rest->push_back(a[i]);
    } else {
      throw std::runtime_error("unknown argument " + a[i]);
    }
  }
  return options;
}

// (uint8 tensor of `big` zero bytes, float32 tensor of the small file) with the big payload a
// hole: the file is written sparse, its CRC computed without reading a byte.
int sparse_command(const std::vector<std::string>& a) {
  const std::string out = a.at(0);
  const std::uint64_t big = std::stoull(a.at(1));
  const ckptfs::FileSource small(a.at(2));
  const std::string small_bytes = small.read_string(0, static_cast<std::size_t>(small.size()));
  ckptfs::pickle::Writer w;
  ckptfs::TorchPickler torch(w);
  w.tuple(2, [&](std::size_t i) {
    if (i == 0) {
      torch.tensor({ckptfs::DType::uint8, 0, big, 0, {static_cast<std::int64_t>(big)}, {}, false});
    } else {
      torch.tensor({ckptfs::DType::float32,
                    1,
                    small_bytes.size(),
                    0,
                    {static_cast<std::int64_t>(small_bytes.size() / 4)},
                    {},
                    false});
    }
  });
  const ckptfs::TorchArchive archive(std::move(w).finish(), torch.storages(), {.prefix = "sparse"});
  const std::vector<std::uint32_t> crcs = archive.crcs(
      std::vector<std::uint32_t>{ckptfs::crc32_zeros(0, big), ckptfs::crc32(small_bytes)});
  const ckptfs::ZipPlan& plan = archive.plan();
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(out + ": " + std::strerror(errno));
  auto put = [&](std::uint64_t offset, const std::string& bytes) {
    if (::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)) !=
        static_cast<ssize_t>(bytes.size())) {
      throw std::runtime_error(out + ": " + std::strerror(errno));
    }
  };
  if (::ftruncate(fd, static_cast<off_t>(plan.size())) != 0) {
    throw std::runtime_error(out + ": " + std::strerror(errno));
  }
  for (const ckptfs::ZipSegment& s : plan.segments()) {
    const ckptfs::TorchRecord& r = archive.record(s.record);
    switch (s.kind) {
      case ckptfs::ZipSegmentKind::local_header:
        put(s.offset, plan.local_header(s.record));
        break;
      case ckptfs::ZipSegmentKind::data_descriptor:
        put(s.offset, plan.data_descriptor(s.record, crcs[s.record]));
        break;
      case ckptfs::ZipSegmentKind::trailer:
        put(s.offset, plan.trailer(crcs));
        break;
      case ckptfs::ZipSegmentKind::payload:
        if (r.source == ckptfs::TorchRecord::Source::literal) put(s.offset, r.literal);
        if (r.source == ckptfs::TorchRecord::Source::storage && r.storage == 1) {
          put(s.offset, small_bytes);
        }
        break;  // storage 0: the hole
    }
  }
  ::close(fd);
  return 0;
}

int layout_command(const std::vector<std::string>& a) {
  const ckptfs::FileSource source(a.at(0));
  const ckptfs::ZipArchive zip(source);
  for (const ckptfs::ZipEntry& e : zip.entries()) {
    std::cout << e.name << ' ' << e.data_offset << ' ' << e.size << '\n';
  }
  return 0;
}

int run(const std::vector<std::string>& args) {
  const std::string& command = args.at(0);
  const std::vector<std::string> a(args.begin() + 1, args.end());
  if (command == "tensor") return tensor_command(a);
  if (command == "keys") {
    std::vector<std::string> hex;
    const auto options = archive_options(a, 1, &hex);
    std::vector<std::string> keys;
    for (const std::string& h : hex) keys.push_back(unhex(h));
    write_file(a.at(0), ckptfs::keys_file(keys, options), {});
    return 0;
  }
  if (command == "value") {
    const auto options = archive_options(a, 2, nullptr);
    write_file(a.at(0), ckptfs::value_file(to_value(nlohmann::json::parse(a.at(1))), options), {});
    return 0;
  }
  if (command == "pickle") {
    ckptfs::pickle::Writer w;
    ckptfs::pickle::write_value(w, to_value(nlohmann::json::parse(a.at(0))));
    const std::string bytes = std::move(w).finish();
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    return 0;
  }
  if (command == "sparse") return sparse_command(a);
  if (command == "layout") return layout_command(a);
  throw std::runtime_error("unknown command " + command);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const ckptfs::Error& e) {
    std::cerr << "writer_tool: " << e.what() << '\n';
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::cerr << "writer_tool: " << e.what() << '\n';
    return 1;
  }
}
