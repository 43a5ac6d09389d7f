// SPDX-License-Identifier: MIT
// read_npz(): the zip's members as entries, each .npy header read from the file (or inflated,
// for a deflated member's), checked against the member's size.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/impostor.hpp>
#include <ckptfs/format/npz/npy_format.hpp>
#include <ckptfs/format/npz/npz_reader.hpp>

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <memory>

namespace ckptfs {
namespace {

// The first bytes of a deflated member, inflated: at most `limit` (its .npy header is in them).
std::string inflate_start(const ByteSource& source, const ZipEntry& entry, std::size_t limit) {
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return {};  // raw deflate, as zip stores it
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, inflateEnd);
  std::string out(limit, '\0');
  std::array<unsigned char, 1 << 14> in;
  const std::uint64_t at = payload_offset(source, entry);
  std::uint64_t read = 0;
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(limit);
  while (z.avail_out != 0) {
    if (z.avail_in == 0) {
      if (read == entry.compressed_size) break;
      const auto n = static_cast<std::size_t>(
          std::min<std::uint64_t>(in.size(), entry.compressed_size - read));
      source.read(at + read, std::as_writable_bytes(std::span(in.data(), n)));
      read += n;
      z.next_in = in.data();
      z.avail_in = static_cast<uInt>(n);
    }
    const int status = inflate(&z, Z_NO_FLUSH);
    if (status == Z_STREAM_END) break;
    if (status != Z_OK) return {};
  }
  out.resize(limit - z.avail_out);
  return out;
}

// torch's strides of a C- or Fortran-ordered array (a size 0 counting as 1, as torch counts).
// Past int64 (a shape size_problem() refuses) a stride is 0.
std::vector<std::int64_t> strides_of(const std::vector<std::int64_t>& shape, bool fortran) {
  std::vector<std::int64_t> stride(shape.size());
  std::int64_t step = 1;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    const std::size_t i = fortran ? k : shape.size() - 1 - k;
    stride[i] = step;
    if (__builtin_mul_overflow(step, std::max<std::int64_t>(shape[i], 1), &step)) step = 0;
  }
  return stride;
}

Model read_npz_members(const ByteSource& source, const std::string& source_name,
                       const NpzLimits& limits, std::vector<DeflatedMember>* deflated_members) {
  const ZipArchive zip(source, limits.zip);
  Model m;
  m.format = Format::npz;
  m.sources.push_back(source_name);
  m.entries.reserve(zip.entries().size());
  std::uint64_t keys_json = 0;
  for (const ZipEntry& member : zip.entries()) {
    Entry e;
    e.key =
        member.name.ends_with(".npy") ? member.name.substr(0, member.name.size() - 4) : member.name;
    keys_json += json_escaped_size(e.key) + 2;
    if (keys_json > limits.max_keys_json_bytes) {
      throw Error(ExitCode::unsupported,
                  fmt::format("its members' names take more than {} bytes as JSON (at member {})",
                              limits.max_keys_json_bytes, quote(member.name)));
    }
    e.kind = Entry::Kind::tensor;
    e.tensor = m.tensors.size();
    Tensor t;
    t.dtype = DType::uint8;
    const bool deflated = member.method == 8 && (member.flags & 1) == 0;
    const std::size_t head_limit = 12 + max_npy_header_bytes;
    std::string head;
    if (member.stored()) {
      head = source.read_string(
          payload_offset(source, member),
          static_cast<std::size_t>(std::min<std::uint64_t>(member.size, head_limit)));
    } else if (deflated) {
      head = inflate_start(source, member, head_limit);
    }
    std::uint64_t data_begin = 0;  // in the member
    if (is_npy(head)) {
      NpyHeader h;
      try {
        h = read_npy_header(head, limits.max_dims);
      } catch (const Error& error) {
        throw Error(error.code(), fmt::format("member {}: {}", quote(member.name), error.what()));
      }
      data_begin = h.size;
      t.shape = h.shape;
      t.stride = strides_of(h.shape, h.fortran_order);
      if (h.dtype) t.dtype = *h.dtype;
      t.broken = h.unsupported;
      if (t.broken.empty()) t.broken = size_problem(t);
      if (t.broken.empty() && (member.stored() || deflated) &&
          t.nbytes() > member.size - std::min(member.size, h.size)) {
        t.broken = fmt::format(
            "the member holds {} bytes of data, but a {} array of shape {} "
            "needs {}",
            member.size - h.size, h.descr, fmt::join(h.shape, "x"), t.nbytes());
      }
    } else if (member.stored() || deflated) {
      // numpy.load gives a member without the magic as its bytes.
      t.shape = {static_cast<std::int64_t>(std::min<std::uint64_t>(member.size, INT64_MAX))};
      t.stride = {1};
      t.broken = size_problem(t);
    }
    if (t.broken.empty() && !member.stored() && !(deflated && deflated_members)) {
      t.broken = deflated ? "a deflated member (numpy.savez_compressed), read here without "
                            "inflating: its header says its dtype and shape"
                          : fmt::format(
                                "a member compressed with zip method {}{}, which ckptfs "
                                "does not serve",
                                member.method, member.flags & 1 ? " and encrypted" : "");
    }
    if (t.broken.empty()) {
      Storage s;
      s.key = member.name;
      s.record = member.name;
      s.file_offset = payload_offset(source, member) + data_begin;
      if (deflated) {
        // Its own source: the member inflated, in which the array starts after its header.
        deflated_members->push_back(
            {payload_offset(source, member), member.compressed_size, member.size, member.crc32});
        s.source = static_cast<std::uint32_t>(m.sources.size());
        s.file_offset = data_begin;
        m.sources.push_back(source_name + "/" + member.name);
      }
      s.nbytes = t.nbytes();
      s.big_endian = is_npy(head) && read_npy_header(head, limits.max_dims).big_endian;
      s.record_crc32 = std::nullopt;  // the member's CRC covers its .npy header too
      if (!deflated) {
        // numpy (zipfile) checks every member's CRC, 0 or not.
        s.record_check =
            Storage::RecordCheck{member.crc32, data_begin, member.size, member.header_offset};
      }
      t.storage = m.storages.size();
      m.storages.push_back(std::move(s));
    }
    m.tensors.push_back(std::move(t));
    m.entries.push_back(std::move(e));
  }
  return m;
}

}  // namespace

bool looks_like_npz(const ByteSource& source) {
  if (!looks_like_zip(source) || source.size() < 30) return false;
  const std::string header = source.read_string(0, 30);
  const std::size_t name_length =
      static_cast<unsigned char>(header[26]) | static_cast<unsigned char>(header[27]) << 8;
  if (name_length < 4 || !source.contains(30, name_length)) return false;
  return source.read_string(30, name_length).ends_with(".npy");
}

Model read_npz(const ByteSource& source, const std::string& source_name, const NpzLimits& limits,
               std::vector<DeflatedMember>* deflated_members) {
  return read_or_name_impostor(
      source, [&] { return read_npz_members(source, source_name, limits, deflated_members); });
}

}  // namespace ckptfs
