// SPDX-License-Identifier: MIT
// The structures of an HDF5 file that ckptfs reads (private to src/core/format/hdf5): the
// superblock, object headers and their messages (dataspace, datatype, layout, filters, fill
// value, attributes, links), each decoded from bytes read once and checked field by field.
// Groups' links (hdf5_groups.cpp) and chunk indexes (hdf5_chunks.cpp) build on them.
#pragma once

#include <ckptfs/format/hdf5/hdf5_limits.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/chunk_source.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs::hdf5 {

// An address whose every bit is set: none (unallocated storage, no B-tree yet).
inline constexpr std::uint64_t undefined = ~std::uint64_t{0};

// Jenkins's lookup3 hash (hashlittle) with which HDF5 checksums its newer structures.
std::uint32_t lookup3(std::string_view bytes, std::uint32_t initval = 0) noexcept;

// The least number of bytes that hold `value` (H5VM_limit_enc_size: log2(value) / 8 + 1).
unsigned bytes_to_hold(std::uint64_t value) noexcept;

// Throws Error(bad_checkpoint) with `what`: the file's structure is invalid.
[[noreturn]] void fail(const std::string& what);

// The HDF5 file in `size` bytes at `begin` of a source (a whole file, or a zip member): its
// superblock read and checked at construction, then structure read on demand, every range
// checked against the file's end and every byte counted against the limits.
class File {
 public:
  File(const ByteSource& source, std::uint64_t begin, std::uint64_t size, const Hdf5Limits& limits);

  const ByteSource& source() const noexcept { return source_; }
  const Hdf5Limits& limits() const noexcept { return limits_; }
  unsigned offset_size() const noexcept { return offset_size_; }
  unsigned length_size() const noexcept { return length_size_; }
  int superblock_version() const noexcept { return superblock_version_; }
  std::uint64_t root() const noexcept { return root_; }  // the root group's object header

  // Whether [address, address + length) lies in the file (never for an undefined address).
  bool contains(std::uint64_t address, std::uint64_t length) const noexcept;
  // The offset in source() of `address` (which contains() accepted).
  std::uint64_t absolute(std::uint64_t address) const noexcept { return base_ + address; }
  // `length` bytes of structure at `address`, named `what` in errors: "the file looks
  // truncated" past the file's end, Error(unsupported) once the mount has read more structure
  // than the file's size and max_extra_metadata_bytes.
  std::string read(std::uint64_t address, std::uint64_t length, const std::string& what) const;
  // The same for a structure that starts with `signature` and ends with its lookup3 checksum
  // (`length` counts both), both checked.
  std::string read_signed(std::uint64_t address, std::uint64_t length, std::string_view signature,
                          const std::string& what) const;

 private:
  const ByteSource& source_;
  std::uint64_t begin_;
  std::uint64_t size_;
  const Hdf5Limits& limits_;
  std::uint64_t base_ = 0;  // absolute offset of address 0: where the superblock is
  unsigned offset_size_ = 8;
  unsigned length_size_ = 8;
  int superblock_version_ = 0;
  std::uint64_t root_ = undefined;
  mutable std::uint64_t read_bytes_ = 0;
};

// Little-endian fields of structure read from the file, each checked to be there; a failure
// names the structure ("the object header at 4096: ...").
class Cursor {
 public:
  Cursor(std::string_view bytes, const File& file, std::string what)
      : bytes_(bytes), file_(file), what_(std::move(what)) {}
  // Over bytes read for it (File::read()'s): the cursor keeps them.
  Cursor(std::string&& bytes, const File& file, std::string what)
      : owned_(std::move(bytes)), bytes_(owned_), file_(file), what_(std::move(what)) {}
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;
  std::uint64_t uint(unsigned size);  // 1 to 8 bytes
  std::uint8_t u8() { return static_cast<std::uint8_t>(uint(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(uint(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(uint(4)); }
  std::uint64_t u64() { return uint(8); }
  std::uint64_t offset();  // of the superblock's size; `undefined` when every bit is set
  std::uint64_t length();
  std::string_view bytes(std::size_t n);
  void skip(std::size_t n) { (void)bytes(n); }
  void seek(std::size_t at);
  std::size_t position() const noexcept { return at_; }
  std::size_t remaining() const noexcept { return bytes_.size() - at_; }
  const File& file() const noexcept { return file_; }
  [[noreturn]] void fail(const std::string& why) const;

 private:
  std::string owned_;  // declared first: bytes_ may view it
  std::string_view bytes_;
  const File& file_;
  std::string what_;
  std::size_t at_ = 0;
};

// A message of an object header: its type, flags, and data (with where the data is in the file).
struct Message {
  std::uint16_t type = 0;
  std::uint8_t flags = 0;
  std::uint64_t address = 0;
  std::string data;
};
enum MessageType : std::uint16_t {
  nil = 0x0,
  dataspace = 0x1,
  link_info = 0x2,
  datatype = 0x3,
  fill_value_old = 0x4,
  fill_value = 0x5,
  link = 0x6,
  external_files = 0x7,
  data_layout = 0x8,
  filter_pipeline = 0xb,
  attribute = 0xc,
  continuation = 0x10,
  symbol_table = 0x11,
  attribute_info = 0x15,
};

// The messages of the object header at `address` (version 1 or 2), its continuation blocks
// followed, each once, at most limits().max_header_bytes in all. A shared message (flag bit 1)
// is kept as it is: shared_message() reads what it refers to.
std::vector<Message> read_object_header(const File& file, std::uint64_t address);

// The message a shared message stands for, when it refers to another object's header (a
// committed datatype): that header's first message of the same type, which must not be shared
// itself. Throws Error(bad_checkpoint) naming what is wrong (a message in the file's shared
// message heap too, which ckptfs does not read).
Message shared_message(const File& file, const Message& message);

struct Dataspace {
  enum class Kind : std::uint8_t { scalar, simple, null };
  Kind kind = Kind::scalar;
  std::vector<std::uint64_t> dims;
  std::vector<std::uint64_t> max_dims;  // as dims when the message has none
};
Dataspace decode_dataspace(Cursor& c);

// A datatype message's header and properties, decoded as far as ckptfs uses them.
struct Datatype {
  int type_class = 0;  // 0 fixed-point, 1 floating-point, 3 string, 5 opaque, 6 compound, 8 enum,
                       // 9 variable-length, ...
  int version = 0;
  std::uint32_t bits = 0;  // the class's 24 bit fields
  std::uint32_t size = 0;  // bytes of an element
  // What the reader makes of it: the torch dtype of its elements (none when there is no such
  // dtype: `unsupported` says why), their byte order, and how meta.json names the HDF5 type.
  std::optional<DType> dtype;
  bool big_endian = false;
  std::string unsupported;
  std::string name;  // "IEEE float32", "h5py bool (enum of int8)", "opaque (2 bytes)"...
  bool opaque = false;
  enum class Text : std::uint8_t { none, fixed, variable };  // a string type, and which
  Text text = Text::none;
};
// Decodes the datatype at the cursor (consuming exactly its encoding when it can tell its
// length). Never recurses: an enum's base and a compound's members are read one level deep, and
// any deeper nesting is a type ckptfs does not serve.
Datatype decode_datatype(Cursor& c);

struct Filter {
  std::uint16_t id = 0;
  std::uint16_t flags = 0;
  std::string name;
  std::vector<std::uint32_t> client_data;
};
std::vector<Filter> decode_filter_pipeline(Cursor& c);

struct Layout {
  enum class Class : std::uint8_t { compact, contiguous, chunked, virtual_storage };
  Class layout_class = Class::contiguous;
  int version = 0;
  std::uint64_t address = undefined;  // contiguous data; chunked: the chunk index
  std::uint64_t size = 0;             // contiguous data, or compact data
  std::uint64_t compact_address = 0;  // of the compact data in the file
  std::vector<std::uint64_t> chunk;   // chunk dimensions, the element size last (as stored)
  // Version 4's chunk index: 1 single chunk, 2 implicit, 3 fixed array, 4 extensible array,
  // 5 v2 B-tree; 0 for versions 1 to 3 (a v1 B-tree).
  int index_type = 0;
  std::uint8_t chunk_flags = 0;      // version 4: bit 1 a filtered single chunk
  std::uint64_t single_size = 0;     // a filtered single chunk's size...
  std::uint32_t single_mask = 0;     // ...and filter mask
  std::uint8_t fixed_page_bits = 0;  // a fixed array's page bits
};
Layout decode_layout(Cursor& c, std::uint64_t data_address);

// A fill value message (old or new): the value's bytes; nullopt when it says none (zeros).
std::optional<std::string> decode_fill_value(Cursor& c, bool old_style);

struct Attribute {
  std::string name;
  Datatype type;
  Dataspace space;
  std::string_view data;  // into the message's data
};
Attribute decode_attribute(Cursor& c);

// The text of a string attribute's elements (one for a scalar), each at most `max_bytes`
// (longer ones are cut): fixed-length strings as stored up to their first NUL, variable-length
// ones read from the global heap. nullopt when the attribute holds no strings or they cannot be
// read.
std::optional<std::vector<std::string>> attribute_strings(const File& file, const Attribute& a,
                                                          std::size_t max_strings);

// A link of a group: its name and where it leads.
struct Link {
  enum class Kind : std::uint8_t { hard, soft, external };
  std::string name;
  Kind kind = Kind::hard;
  std::uint64_t address = undefined;  // a hard link's object header
};
Link decode_link(Cursor& c);

// ----------------------------------------------------------- indexes (hdf5_indexes.cpp)

// Calls `visit(key, child)` for every child of every leaf node of the version 1 B-tree at
// `address` whose nodes are of `node_type` (0: a group's symbol table nodes, 1: a dataset's
// chunks), each key `key_size` bytes (the key before the child). Nodes are walked with an
// explicit stack, each at most once, their levels strictly decreasing; at most `max_children`
// children in all (Error(unsupported) past it).
void walk_btree1(const File& file, std::uint64_t address, unsigned node_type, std::size_t key_size,
                 std::uint64_t max_children,
                 const std::function<void(std::string_view key, std::uint64_t child)>& visit);

// Calls `visit(record)` for every record of the version 2 B-tree whose header is at `address`,
// which must be of `tree_type` (5: a group's link names, 10 and 11: a dataset's chunks), in no
// particular order; at most `max_records` (Error(unsupported) past it). Every node's checksum
// and record count are checked, each node read once.
void walk_btree2(const File& file, std::uint64_t address, unsigned tree_type,
                 std::uint64_t max_records, const std::function<void(std::string_view)>& visit);

// The links of the group whose object header holds `messages`: its symbol table (a version 1
// B-tree of symbol table nodes, their names in a local heap), or its link messages and, when its
// link info message names one, the fractal heap of its dense links (indexed by a version 2
// B-tree of their names). `links` counts every link listed against limits().max_links.
std::vector<Link> read_links(const File& file, const std::vector<Message>& messages,
                             std::uint64_t& links);

// ------------------------------------------------------------ chunks (hdf5_chunks.cpp)

// The grid of a chunked dataset: its chunk dimensions and how many chunks each dimension has
// (ceil(dims / chunk)), C order.
struct ChunkGrid {
  std::vector<std::uint64_t> chunk;   // elements per dimension
  std::vector<std::uint64_t> counts;  // chunks per dimension
  std::uint64_t total = 0;            // chunks in all
  std::uint64_t chunk_bytes = 0;      // of one chunk decoded
};

// Where each chunk of the grid is stored (ChunkSpec::Chunk: absolute offsets in the file's
// source, `missing` for chunks never written), read from the layout's chunk index: a version 1
// B-tree, a single chunk, implicit, a fixed array or a version 2 B-tree (`max_dims` places the
// fixed array's and the implicit index's entries). Every chunk is checked to lie in the file, at
// a place of the grid no other chunk has, with a stored size a decoder can take (the decoded
// size when `filtered` is false). `chunks` counts them against limits().max_chunks. Throws
// Error(bad_checkpoint) naming what is wrong, an extensible array index too (the caller marks
// the tensor broken), and Error(unsupported) past the limits.
std::vector<ChunkSpec::Chunk> read_chunk_index(const File& file, const Layout& layout,
                                               const ChunkGrid& grid,
                                               const std::vector<std::uint64_t>& dims,
                                               const std::vector<std::uint64_t>& max_dims,
                                               bool filtered, std::uint64_t& chunks);

}  // namespace ckptfs::hdf5
