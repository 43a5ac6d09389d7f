// SPDX-License-Identifier: MIT
// The superblock, object headers and messages of an HDF5 file, as the format specification
// (version 3.0) lays them out, each field checked before use.
#include "hdf5_file.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <deque>
#include <unordered_set>

namespace ckptfs::hdf5 {
namespace {

constexpr std::string_view signature("\x89HDF\r\n\x1a\n", 8);

std::uint32_t rot(std::uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }

std::uint64_t round_up8(std::uint64_t n) { return (n + 7) & ~std::uint64_t{7}; }

std::string hex(std::uint64_t address) { return fmt::format("{:#x}", address); }

}  // namespace

std::uint32_t lookup3(std::string_view bytes, std::uint32_t initval) noexcept {
  const auto* k = reinterpret_cast<const unsigned char*>(bytes.data());
  std::size_t length = bytes.size();
  std::uint32_t a = 0xdeadbeef + static_cast<std::uint32_t>(length) + initval;
  std::uint32_t b = a;
  std::uint32_t c = a;
  auto word = [](const unsigned char* p) {
    return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
           std::uint32_t{p[3]} << 24;
  };
  while (length > 12) {
    a += word(k);
    b += word(k + 4);
    c += word(k + 8);
    a -= c, a ^= rot(c, 4), c += b;
    b -= a, b ^= rot(a, 6), a += c;
    c -= b, c ^= rot(b, 8), b += a;
    a -= c, a ^= rot(c, 16), c += b;
    b -= a, b ^= rot(a, 19), a += c;
    c -= b, c ^= rot(b, 4), b += a;
    length -= 12;
    k += 12;
  }
  if (length == 0) return c;
  // The last 1 to 12 bytes, zero-padded (what hashlittle's fall-through switch adds).
  unsigned char tail[12] = {};
  std::copy(k, k + length, tail);
  a += word(tail);
  b += word(tail + 4);
  c += word(tail + 8);
  c ^= b, c -= rot(b, 14);
  a ^= c, a -= rot(c, 11);
  b ^= a, b -= rot(a, 25);
  c ^= b, c -= rot(b, 16);
  a ^= c, a -= rot(c, 4);
  b ^= a, b -= rot(a, 14);
  c ^= b, c -= rot(b, 24);
  return c;
}

unsigned bytes_to_hold(std::uint64_t value) noexcept {
  return value == 0 ? 1 : static_cast<unsigned>(std::bit_width(value) - 1) / 8 + 1;
}

void fail(const std::string& what) { throw Error(ExitCode::bad_checkpoint, what); }

// ---------------------------------------------------------------------------------- File

File::File(const ByteSource& source, std::uint64_t begin, std::uint64_t size,
           const Hdf5Limits& limits)
    : source_(source), begin_(begin), size_(size), limits_(limits) {
  // The superblock is at 0, or after a user block at 512, 1024, 2048...
  std::uint64_t at = 0;
  for (;; at = at == 0 ? 512 : at * 2) {
    if (at > size || size - at < 8) fail("no HDF5 signature (\\211HDF) at byte 0, 512, 1024...");
    if (source.read_string(begin + at, 8) == signature) break;
  }
  // Versions 0 and 1: 24 bytes before the addresses; 2 and 3: 12 before them. Read the most a
  // superblock can take (8-byte offsets), or what the file has.
  const std::uint64_t most = std::min<std::uint64_t>(size - at, 8 + 20 + 4 * 8 + 2 * 8 + 24);
  const std::string head = source.read_string(begin + at, static_cast<std::size_t>(most));
  read_bytes_ += most;
  const std::string what = fmt::format("the superblock at byte {}", at);
  Cursor c(head, *this, what);
  c.skip(8);
  superblock_version_ = c.u8();
  std::uint64_t stored_base = 0;
  std::uint64_t eof = 0;
  if (superblock_version_ <= 1) {
    c.skip(3);  // free-space, root group symbol table entry and reserved versions
    c.skip(1);  // shared header message format version
    offset_size_ = c.u8();
    length_size_ = c.u8();
    c.skip(1);
    if (c.u16() == 0 || c.u16() == 0) c.fail("a group B-tree K of 0");
    c.skip(4);                                // file consistency flags
    if (superblock_version_ == 1) c.skip(4);  // indexed storage K, reserved
    for (unsigned s : {offset_size_, length_size_}) {
      if (s != 2 && s != 4 && s != 8) c.fail(fmt::format("a size of offsets or lengths of {}", s));
    }
    stored_base = c.offset();
    c.offset();  // free space info (unused since HDF5 1.6)
    eof = c.offset();
    if (c.offset() != undefined) {
      throw Error(ExitCode::unsupported,
                  "an HDF5 file of several files (the family, multi or split driver: it has a "
                  "driver information block): ckptfs reads single files");
    }
    // The root group's symbol table entry: its link name's offset, then its object header.
    c.offset();
    root_ = c.offset();
  } else if (superblock_version_ <= 3) {
    offset_size_ = c.u8();
    length_size_ = c.u8();
    c.skip(1);  // file consistency flags
    for (unsigned s : {offset_size_, length_size_}) {
      if (s != 2 && s != 4 && s != 8) c.fail(fmt::format("a size of offsets or lengths of {}", s));
    }
    stored_base = c.offset();
    c.offset();  // superblock extension: B-tree K values, file space info (none needed here)
    eof = c.offset();
    root_ = c.offset();
    const std::size_t checked = c.position();
    const std::uint32_t stored = c.u32();
    if (lookup3(std::string_view(head).substr(0, checked)) != stored) {
      c.fail("its checksum does not match its bytes");
    }
  } else {
    c.fail(fmt::format("superblock version {}, which ckptfs does not know", superblock_version_));
  }
  // Addresses count from the superblock, wherever it was found (H5F__super_read moves the base
  // there); the end of file address counts from the stored base.
  if (stored_base == undefined || eof == undefined || eof < stored_base) {
    c.fail("its base or end of file address is undefined or inconsistent");
  }
  const std::uint64_t extent = eof - stored_base;
  if (extent > size - at) throw Error(ExitCode::bad_checkpoint, std::string(looks_truncated));
  base_ = begin + at;
  size_ = extent;  // from now on: the bytes addresses may reach
  if (root_ == undefined) c.fail("no root group");
}

bool File::contains(std::uint64_t address, std::uint64_t length) const noexcept {
  return address != undefined && address <= size_ && length <= size_ - address;
}

std::string File::read(std::uint64_t address, std::uint64_t length, const std::string& what) const {
  if (!contains(address, length)) {
    fail(fmt::format("{}: {} bytes at address {} lie outside the file ({} bytes)", what, length,
                     address == undefined ? std::string("undefined") : hex(address), size_));
  }
  read_bytes_ += length;
  if (read_bytes_ > size_ + limits_.max_extra_metadata_bytes) {
    throw Error(ExitCode::unsupported,
                fmt::format("reading its structure takes more than {} bytes beyond its own size "
                            "(structure read over and over): ckptfs stops there",
                            limits_.max_extra_metadata_bytes));
  }
  return source_.read_string(absolute(address), static_cast<std::size_t>(length));
}

std::string File::read_signed(std::uint64_t address, std::uint64_t length, std::string_view sig,
                              const std::string& what) const {
  if (length < sig.size() + 4) fail(fmt::format("{}: too short ({} bytes)", what, length));
  std::string bytes = read(address, length, what);
  if (std::string_view(bytes).substr(0, sig.size()) != sig) {
    fail(fmt::format("{}: no {} signature there", what, sig));
  }
  const auto* tail = reinterpret_cast<const unsigned char*>(bytes.data() + length - 4);
  const std::uint32_t stored =
      tail[0] | tail[1] << 8 | tail[2] << 16 | static_cast<std::uint32_t>(tail[3]) << 24;
  if (lookup3(std::string_view(bytes).substr(0, length - 4)) != stored) {
    fail(fmt::format("{}: its checksum does not match its bytes", what));
  }
  return bytes;
}

// -------------------------------------------------------------------------------- Cursor

void Cursor::fail(const std::string& why) const { hdf5::fail(fmt::format("{}: {}", what_, why)); }

std::uint64_t Cursor::uint(unsigned size) {
  const std::string_view b = bytes(size);
  std::uint64_t v = 0;
  for (unsigned i = size; i-- > 0;) v = v << 8 | static_cast<unsigned char>(b[i]);
  return v;
}

std::uint64_t Cursor::offset() {
  const unsigned size = file_.offset_size();
  const std::uint64_t v = uint(size);
  return v == (size == 8 ? undefined : (std::uint64_t{1} << (8 * size)) - 1) ? undefined : v;
}

std::uint64_t Cursor::length() { return uint(file_.length_size()); }

std::string_view Cursor::bytes(std::size_t n) {
  if (n > remaining()) {
    fail(fmt::format("needs {} bytes at {} of its {}", n, at_, bytes_.size()));
  }
  const std::string_view b = bytes_.substr(at_, n);
  at_ += n;
  return b;
}

void Cursor::seek(std::size_t at) {
  if (at > bytes_.size()) fail(fmt::format("a field at {} of its {} bytes", at, bytes_.size()));
  at_ = at;
}

// ------------------------------------------------------------------------ Object headers

std::vector<Message> read_object_header(const File& file, std::uint64_t address) {
  const std::string what = fmt::format("the object header at address {}", hex(address));
  const std::uint64_t max_bytes = file.limits().max_header_bytes;
  std::vector<Message> messages;
  struct Block {
    std::uint64_t address;
    std::uint64_t length;
  };
  std::deque<Block> blocks;
  std::unordered_set<std::uint64_t> seen{address};
  std::uint64_t total = 0;
  auto take = [&](std::uint64_t length) {
    if (length > max_bytes - total) {
      throw Error(ExitCode::unsupported,
                  fmt::format("{}: more than {} bytes with its continuations", what, max_bytes));
    }
    total += length;
  };
  const std::string first = file.read(address, 4, what);
  const bool v2 = first == "OHDR";
  // Parses the messages in [begin, end) of a block's bytes, queueing continuations.
  auto parse = [&](const std::string& bytes, std::uint64_t block_address, std::size_t begin,
                   std::size_t end, bool creation_order) {
    Cursor c(std::string_view(bytes).substr(0, end), file, what);
    c.seek(begin);
    const std::size_t header = v2 ? (creation_order ? 6 : 4) : 8;
    while (c.remaining() >= header) {
      Message m;
      m.type = v2 ? c.u8() : c.u16();
      const std::uint16_t size = c.u16();
      m.flags = c.u8();
      if (v2 && creation_order) c.skip(2);
      if (!v2) c.skip(3);
      m.address = block_address + c.position();
      m.data = std::string(c.bytes(size));
      if (m.type == continuation) {
        Cursor d(m.data, file, what + " (its continuation message)");
        const std::uint64_t at = d.offset();
        const std::uint64_t length = d.length();
        if (!seen.insert(at).second) fail(fmt::format("{}: continues twice at {}", what, hex(at)));
        blocks.push_back({at, length});
      } else if (m.type != nil) {
        messages.push_back(std::move(m));
      }
    }
  };
  if (v2) {
    // "OHDR", version, flags, [4 times], [2 attribute phase change values], chunk 0's size.
    const std::string prefix = file.read(address, 6, what);
    const auto version = static_cast<unsigned char>(prefix[4]);
    const auto flags = static_cast<unsigned char>(prefix[5]);
    if (version != 2) fail(fmt::format("{}: version {} (after OHDR, 2 expected)", what, version));
    if ((flags & 0xc0) != 0) fail(fmt::format("{}: reserved flags set ({:#x})", what, flags));
    const std::size_t size_width = std::size_t{1} << (flags & 3);
    const std::size_t fields = 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0);
    Cursor s(file.read(address + fields, size_width, what), file, what);
    const std::uint64_t chunk0 = s.uint(static_cast<unsigned>(size_width));
    const std::uint64_t head = fields + size_width;
    take(chunk0);
    take(head + 4);
    const std::string bytes = file.read_signed(address, head + chunk0 + 4, "OHDR", what);
    parse(bytes, address, static_cast<std::size_t>(head), static_cast<std::size_t>(head + chunk0),
          (flags & 0x04) != 0);
    while (!blocks.empty()) {
      const Block b = blocks.front();
      blocks.pop_front();
      take(b.length);
      const std::string more = file.read_signed(
          b.address, b.length, "OCHK", what + fmt::format(" (continued at {})", hex(b.address)));
      parse(more, b.address, 4, static_cast<std::size_t>(b.length - 4), (flags & 0x04) != 0);
    }
    return messages;
  }
  // Version 1: version, reserved, message count, reference count, header size, 4 bytes of
  // padding; the messages from byte 16, each 8-byte aligned.
  Cursor h(file.read(address, 16, what), file, what);
  if (const unsigned version = h.u8(); version != 1) {
    fail(fmt::format("{}: version {}, which ckptfs does not know", what, version));
  }
  h.skip(1 + 2 + 4);
  const std::uint64_t size = h.u32();
  take(size);
  take(16);
  parse(file.read(address + 16, size, what), address + 16, 0, static_cast<std::size_t>(size),
        false);
  while (!blocks.empty()) {
    const Block b = blocks.front();
    blocks.pop_front();
    take(b.length);
    parse(file.read(b.address, b.length, what), b.address, 0, static_cast<std::size_t>(b.length),
          false);
  }
  return messages;
}

Message shared_message(const File& file, const Message& message) {
  const std::string what = fmt::format("a shared message at address {}", hex(message.address));
  Cursor c(message.data, file, what);
  const unsigned version = c.u8();
  std::uint64_t address = undefined;
  if (version == 1) {
    c.skip(1 + 6);  // type, reserved
    address = c.offset();
  } else if (version == 2 || version == 3) {
    const unsigned type = c.u8();
    if (version == 3 && type == 1) {
      c.fail(
          "a message kept in the file's shared object header message heap, which ckptfs "
          "does not read");
    }
    address = c.offset();
  } else {
    c.fail(fmt::format("version {}", version));
  }
  for (Message& m : read_object_header(file, address)) {
    if (m.type != message.type) continue;
    if ((m.flags & 0x02) != 0) c.fail("it refers to a message that is shared itself");
    return std::move(m);
  }
  c.fail(fmt::format("the object header at {} has no such message", hex(address)));
}

// ------------------------------------------------------------------------------ Messages

Dataspace decode_dataspace(Cursor& c) {
  Dataspace s;
  const unsigned version = c.u8();
  const unsigned rank = c.u8();
  const unsigned flags = c.u8();
  if (version == 1) {
    c.skip(1 + 4);
    s.kind = rank == 0 ? Dataspace::Kind::scalar : Dataspace::Kind::simple;
  } else if (version == 2) {
    const unsigned type = c.u8();
    if (type > 2) c.fail(fmt::format("dataspace type {}", type));
    s.kind = static_cast<Dataspace::Kind>(type);
    if (s.kind != Dataspace::Kind::simple && rank != 0) {
      c.fail(fmt::format("a scalar or null dataspace of {} dimensions", rank));
    }
  } else {
    c.fail(fmt::format("dataspace version {}", version));
  }
  if (rank > c.file().limits().max_dims) {
    c.fail(fmt::format("{} dimensions, more than HDF5's {}", rank, c.file().limits().max_dims));
  }
  for (unsigned i = 0; i < rank; ++i) s.dims.push_back(c.length());
  if ((flags & 1) != 0) {
    for (unsigned i = 0; i < rank; ++i) s.max_dims.push_back(c.length());
  } else {
    s.max_dims = s.dims;
  }
  return s;
}

namespace {

const char* integer_name(std::uint32_t size, bool is_signed) {
  switch (size) {
    case 1:
      return is_signed ? "int8" : "uint8";
    case 2:
      return is_signed ? "int16" : "uint16";
    case 4:
      return is_signed ? "int32" : "uint32";
    case 8:
      return is_signed ? "int64" : "uint64";
    default:
      return nullptr;
  }
}

std::optional<DType> integer_dtype(std::uint32_t size, bool is_signed) {
  const char* name = integer_name(size, is_signed);
  return name ? dtype_from_name(name) : std::nullopt;
}

// A fixed-point type: header (after class/version) and its 4 bytes of properties.
void decode_integer(Cursor& c, Datatype& t) {
  const unsigned offset = c.u16();
  const unsigned precision = c.u16();
  t.big_endian = (t.bits & 1) != 0;
  const bool is_signed = (t.bits & 8) != 0;
  const char* name = integer_name(t.size, is_signed);
  if (name == nullptr || offset != 0 || precision != t.size * 8) {
    t.unsupported =
        fmt::format("an integer type of {} bits at bit {} in {} bytes", precision, offset, t.size);
    return;
  }
  t.dtype = integer_dtype(t.size, is_signed);
  t.name = name;
}

// The floating-point layouts ckptfs knows: IEEE binary16, 32 and 64, and bfloat16.
struct FloatLayout {
  std::uint32_t size;
  unsigned sign, exponent_at, exponent_bits, mantissa_bits, bias;
  const char* name;
};
constexpr FloatLayout float_layouts[] = {
    {2, 15, 10, 5, 10, 15, "float16"},
    {2, 15, 7, 8, 7, 127, "bfloat16"},
    {4, 31, 23, 8, 23, 127, "float32"},
    {8, 63, 52, 11, 52, 1023, "float64"},
};

void decode_float(Cursor& c, Datatype& t) {
  const unsigned offset = c.u16();
  const unsigned precision = c.u16();
  const unsigned exponent_at = c.u8();
  const unsigned exponent_bits = c.u8();
  const unsigned mantissa_at = c.u8();
  const unsigned mantissa_bits = c.u8();
  const std::uint32_t bias = c.u32();
  const unsigned order = (t.bits & 1) | ((t.bits >> 5) & 2);
  const unsigned sign = (t.bits >> 8) & 0xff;
  const unsigned normalization = (t.bits >> 4) & 3;
  if (order == 3) {
    t.unsupported = "a VAX-ordered floating-point type";
    return;
  }
  t.big_endian = order == 1;
  for (const FloatLayout& f : float_layouts) {
    if (f.size == t.size && offset == 0 && precision == t.size * 8 && sign == f.sign &&
        exponent_at == f.exponent_at && exponent_bits == f.exponent_bits && mantissa_at == 0 &&
        mantissa_bits == f.mantissa_bits && bias == f.bias && normalization == 2) {
      t.dtype = dtype_from_name(f.name);
      t.name = f.name;
      return;
    }
  }
  t.unsupported = fmt::format(
      "a {}-byte floating-point type of {} bits (exponent {} bits at {}, mantissa {} bits at {}, "
      "bias {}) that is not IEEE binary16, 32, 64 or bfloat16",
      t.size, precision, exponent_bits, exponent_at, mantissa_bits, mantissa_at, bias);
}

// A member or base type's header: class, version, bit fields, size.
void decode_header(Cursor& c, Datatype& t) {
  const unsigned head = c.u8();
  t.type_class = static_cast<int>(head & 0x0f);
  t.version = static_cast<int>(head >> 4);
  t.bits = c.u8();
  t.bits |= std::uint32_t{c.u8()} << 8;
  t.bits |= std::uint32_t{c.u8()} << 16;
  t.size = c.u32();
  if (t.version < 1 || t.version > 5) c.fail(fmt::format("datatype version {}", t.version));
}

// A name in a compound or enum type: NUL-terminated, padded to a multiple of 8 before version 3.
std::string member_name(Cursor& c, int version) {
  const std::size_t start = c.position();
  std::string name;
  for (char ch = static_cast<char>(c.u8()); ch != '\0'; ch = static_cast<char>(c.u8())) {
    name += ch;
  }
  if (version < 3) c.seek(start + round_up8(c.position() - start));
  return name;
}

// h5py's complex numbers: a compound of two floats "r" and "i" of one layout, at 0 and size / 2.
void decode_compound(Cursor& c, Datatype& t) {
  const unsigned members = t.bits & 0xffff;
  t.unsupported = fmt::format("a compound type of {} members", members);
  if (members != 2 || t.size % 2 != 0) return;
  Datatype parts[2];
  for (unsigned i = 0; i < 2; ++i) {
    const std::string name = member_name(c, t.version);
    std::uint64_t offset = 0;
    if (t.version == 1) {
      offset = c.u32();
      const unsigned dims = c.u8();
      c.skip(3 + 4 + 4 + 16);
      if (dims != 0) return;  // an array member
    } else if (t.version == 2) {
      offset = c.u32();
    } else {
      offset = c.uint(bytes_to_hold(t.size));
    }
    decode_header(c, parts[i]);
    if (name != (i == 0 ? "r" : "i") || offset != i * (t.size / 2) || parts[i].type_class != 1) {
      return;
    }
    decode_float(c, parts[i]);
  }
  if (!parts[0].dtype || parts[0].dtype != parts[1].dtype ||
      parts[0].big_endian != parts[1].big_endian || parts[0].size != t.size / 2) {
    return;
  }
  t.big_endian = parts[0].big_endian;
  if (parts[0].dtype == DType::float32) {
    t.dtype = DType::complex64;
  } else if (parts[0].dtype == DType::float64) {
    t.dtype = DType::complex128;
  } else if (parts[0].dtype == DType::float16) {
    t.dtype = DType::complex32;
  } else {
    return;
  }
  t.name = fmt::format("h5py complex (compound of {} r, i)", info(*parts[0].dtype).name);
  t.unsupported.clear();
}

// An enum: its base (an integer), member names, values. h5py's bool is the enum of int8 FALSE = 0,
// TRUE = 1; other enums are served as their base integers, as h5py reads them.
void decode_enum(Cursor& c, Datatype& t) {
  const unsigned members = t.bits & 0xffff;
  Datatype base;
  decode_header(c, base);
  if (base.type_class != 0) {
    t.unsupported = "an enum type whose base is not an integer";
    return;
  }
  decode_integer(c, base);
  if (!base.dtype) {
    t.unsupported = "an enum type of " + base.unsupported;
    return;
  }
  std::vector<std::string> names;
  for (unsigned i = 0; i < members && i < 3; ++i) names.push_back(member_name(c, t.version));
  t.big_endian = base.big_endian;
  t.dtype = base.dtype;
  t.name = fmt::format("enum of {}", base.name);
  if (members == 2 && base.dtype == DType::int8 && names[0] == "FALSE" && names[1] == "TRUE") {
    const std::uint64_t false_value = c.u8();
    const std::uint64_t true_value = c.u8();
    if (false_value == 0 && true_value == 1) {
      t.dtype = DType::boolean;
      t.name = "h5py bool (enum of int8)";
    }
  }
}

}  // namespace

Datatype decode_datatype(Cursor& c) {
  Datatype t;
  decode_header(c, t);
  switch (t.type_class) {
    case 0:
      decode_integer(c, t);
      break;
    case 1:
      decode_float(c, t);
      break;
    case 3:
      t.text = Datatype::Text::fixed;
      t.unsupported = fmt::format("a string type ({} bytes)", t.size);
      break;
    case 5: {
      const std::size_t tag_length = t.bits & 0xff;
      const std::string_view tag = c.bytes(tag_length);
      t.opaque = true;
      t.name = fmt::format("opaque ({} bytes)", t.size);
      t.unsupported =
          fmt::format("an opaque type of {} bytes{}", t.size,
                      tag.empty() ? "" : " tagged " + quote(tag.substr(0, tag.find('\0'))));
      break;
    }
    case 6:
      decode_compound(c, t);
      break;
    case 8:
      decode_enum(c, t);
      break;
    case 9:
      if ((t.bits & 0xf) == 1) {
        t.text = Datatype::Text::variable;
        t.unsupported = "a variable-length string type";
      } else {
        t.unsupported = "a variable-length sequence type";
      }
      break;
    default: {
      static constexpr const char* names[] = {"",
                                              "",
                                              "a time type",
                                              "",
                                              "a bitfield type",
                                              "",
                                              "",
                                              "a reference type",
                                              "",
                                              "",
                                              "an array type",
                                              "a complex type"};
      t.unsupported = t.type_class < 12 ? names[t.type_class] : "";
      if (t.unsupported.empty()) t.unsupported = fmt::format("datatype class {}", t.type_class);
      break;
    }
  }
  if (t.name.empty()) t.name = t.unsupported;
  return t;
}

std::vector<Filter> decode_filter_pipeline(Cursor& c) {
  const unsigned version = c.u8();
  const unsigned count = c.u8();
  if (version != 1 && version != 2) c.fail(fmt::format("filter pipeline version {}", version));
  if (count > 32) c.fail(fmt::format("{} filters, more than HDF5's 32", count));
  if (version == 1) c.skip(6);
  std::vector<Filter> filters(count);
  for (Filter& f : filters) {
    f.id = c.u16();
    std::size_t name_length = 0;
    if (version == 1 || f.id >= 256) name_length = c.u16();
    f.flags = c.u16();
    const unsigned values = c.u16();
    const std::string_view name = c.bytes(version == 1 ? round_up8(name_length) : name_length);
    f.name = std::string(name.substr(0, name.find('\0')));
    for (unsigned i = 0; i < values; ++i) f.client_data.push_back(c.u32());
    if (version == 1 && values % 2 != 0) c.skip(4);
  }
  return filters;
}

Layout decode_layout(Cursor& c, std::uint64_t data_address) {
  Layout l;
  l.version = c.u8();
  auto set_class = [&](unsigned k) {
    if (k > 3) c.fail(fmt::format("layout class {}", k));
    l.layout_class = static_cast<Layout::Class>(k);
  };
  if (l.version == 1 || l.version == 2) {
    const unsigned dims = c.u8();
    set_class(c.u8());
    c.skip(5);
    if (l.layout_class == Layout::Class::virtual_storage) c.fail("layout class 3");
    if (l.layout_class != Layout::Class::compact) l.address = c.offset();
    std::vector<std::uint64_t> sizes;
    for (unsigned i = 0; i < dims; ++i) sizes.push_back(c.u32());
    if (l.layout_class == Layout::Class::chunked) {
      l.chunk = std::move(sizes);
    } else if (l.layout_class == Layout::Class::compact) {
      l.size = c.u32();
      l.compact_address = data_address + c.position();
      c.skip(l.size);
    } else {
      l.size = undefined;  // versions 1 and 2 leave the contiguous size to the dataspace
    }
    return l;
  }
  // Version 5 (HDF5 2.0, libver="latest") encodes what version 4 does for the classes read here.
  if (l.version < 3 || l.version > 5) c.fail(fmt::format("layout version {}", l.version));
  set_class(c.u8());
  switch (l.layout_class) {
    case Layout::Class::compact:
      l.size = c.u16();
      l.compact_address = data_address + c.position();
      c.skip(l.size);
      break;
    case Layout::Class::contiguous:
      l.address = c.offset();
      l.size = c.length();
      break;
    case Layout::Class::chunked:
      if (l.version == 3) {
        const unsigned dims = c.u8();
        l.address = c.offset();
        for (unsigned i = 0; i < dims; ++i) l.chunk.push_back(c.u32());
      } else {
        l.chunk_flags = c.u8();
        const unsigned dims = c.u8();
        const unsigned width = c.u8();
        if (width < 1 || width > 8) c.fail(fmt::format("chunk dimensions of {} bytes", width));
        for (unsigned i = 0; i < dims; ++i) l.chunk.push_back(c.uint(width));
        l.index_type = c.u8();
        switch (l.index_type) {
          case 1:
            if ((l.chunk_flags & 2) != 0) {
              l.single_size = c.length();
              l.single_mask = c.u32();
            }
            break;
          case 2:
            break;
          case 3:
            l.fixed_page_bits = c.u8();
            break;
          case 4:
            c.skip(5);
            break;
          case 5:
            c.skip(4 + 1 + 1);
            break;
          default:
            c.fail(fmt::format("chunk index type {}", l.index_type));
        }
        l.address = c.offset();
      }
      break;
    case Layout::Class::virtual_storage:
      break;
  }
  return l;
}

std::optional<std::string> decode_fill_value(Cursor& c, bool old_style) {
  if (old_style) {
    const std::uint32_t size = c.u32();
    if (size == 0) return std::nullopt;
    return std::string(c.bytes(size));
  }
  const unsigned version = c.u8();
  bool defined = false;
  if (version == 1 || version == 2) {
    c.skip(2);  // allocation time, fill time
    defined = c.u8() != 0;
  } else if (version == 3) {
    defined = (c.u8() & 0x20) != 0;
  } else {
    c.fail(fmt::format("fill value version {}", version));
  }
  if (!defined) return std::nullopt;
  const std::uint32_t size = c.u32();
  if (size == 0) return std::nullopt;
  return std::string(c.bytes(size));
}

Attribute decode_attribute(Cursor& c) {
  Attribute a;
  const unsigned version = c.u8();
  if (version < 1 || version > 3) c.fail(fmt::format("attribute version {}", version));
  const unsigned flags = c.u8();
  if (version >= 2 && (flags & 3) != 0) c.fail("a shared datatype or dataspace");
  const std::size_t name_size = c.u16();
  const std::size_t type_size = c.u16();
  const std::size_t space_size = c.u16();
  if (version == 3) c.skip(1);  // the name's character set
  auto padded = [&](std::size_t n) { return version == 1 ? round_up8(n) : n; };
  const std::string_view name = c.bytes(padded(name_size));
  a.name = std::string(name.substr(0, std::min(name_size, name.find('\0'))));
  const std::size_t type_at = c.position();
  c.skip(padded(type_size));
  const std::size_t space_at = c.position();
  c.skip(padded(space_size));
  const std::size_t data_at = c.position();
  c.seek(type_at);
  a.type = decode_datatype(c);
  c.seek(space_at);
  a.space = decode_dataspace(c);
  c.seek(data_at);
  a.data = c.bytes(c.remaining());
  return a;
}

std::optional<std::vector<std::string>> attribute_strings(const File& file, const Attribute& a,
                                                          std::size_t max_strings) {
  std::uint64_t count = 1;
  if (a.space.kind == Dataspace::Kind::null) return std::nullopt;
  if (a.space.kind == Dataspace::Kind::simple) {
    if (a.space.dims.size() != 1) return std::nullopt;
    count = a.space.dims[0];
  }
  if (count > max_strings || a.type.size == 0) return std::nullopt;
  std::vector<std::string> out;
  if (a.type.text == Datatype::Text::fixed) {
    if (a.data.size() / a.type.size < count) return std::nullopt;
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::string_view s = a.data.substr(i * a.type.size, a.type.size);
      out.emplace_back(s.substr(0, s.find('\0')));
    }
    return out;
  }
  if (a.type.text != Datatype::Text::variable) return std::nullopt;
  // Each element: a length, then a global heap ID (its collection's address, an object index).
  const std::size_t element = 4 + file.offset_size() + 4;
  if (a.type.size != element || a.data.size() / element < count) return std::nullopt;
  std::uint64_t collection_address = undefined;
  std::string collection;
  for (std::uint64_t i = 0; i < count; ++i) {
    Cursor e(a.data.substr(i * element, element), file, "an attribute's string");
    const std::uint32_t length = e.u32();
    const std::uint64_t at = e.offset();
    const std::uint32_t index = e.u32();
    if (length == 0) {
      out.emplace_back();
      continue;
    }
    if (at != collection_address) {
      // "GCOL", version 1, reserved, the collection's size (its header included).
      const std::string what = fmt::format("the global heap collection at {}", hex(at));
      Cursor h(file.read(at, 8 + file.length_size(), what), file, what);
      if (h.bytes(4) != "GCOL" || h.u8() != 1) h.fail("no GCOL signature and version 1");
      h.skip(3);
      const std::uint64_t size = h.length();
      if (size > (16u << 20)) return std::nullopt;
      collection = file.read(at, size, what);
      collection_address = at;
    }
    Cursor g(collection, file, "a global heap collection");
    g.seek(8 + file.length_size());
    std::optional<std::string> found;
    while (g.remaining() >= 8 + file.length_size()) {
      const std::uint16_t object = g.u16();
      g.skip(2 + 4);
      const std::uint64_t size = g.length();
      if (object == 0) break;  // the collection's free space
      if (size > g.remaining()) break;
      const std::string_view data = g.bytes(static_cast<std::size_t>(size));
      if (object == index) {
        if (length > size) return std::nullopt;
        found = std::string(data.substr(0, length));
        break;
      }
      g.skip(std::min<std::size_t>(g.remaining(), round_up8(size) - size));
    }
    if (!found) return std::nullopt;
    out.push_back(std::move(*found));
  }
  return out;
}

Link decode_link(Cursor& c) {
  Link l;
  if (const unsigned version = c.u8(); version != 1)
    c.fail(fmt::format("link version {}", version));
  const unsigned flags = c.u8();
  unsigned type = 0;
  if ((flags & 0x08) != 0) type = c.u8();
  if ((flags & 0x04) != 0) c.skip(8);  // creation order
  if ((flags & 0x10) != 0) c.skip(1);  // character set
  const std::uint64_t name_length = c.uint(1u << (flags & 3));
  if (name_length == 0) c.fail("a link without a name");
  if (name_length > c.remaining()) c.fail(fmt::format("a link name of {} bytes", name_length));
  l.name = std::string(c.bytes(static_cast<std::size_t>(name_length)));
  if (type == 0) {
    l.address = c.offset();
  } else {
    l.kind = type == 1 ? Link::Kind::soft : Link::Kind::external;
  }
  return l;
}

}  // namespace ckptfs::hdf5
