// SPDX-License-Identifier: MIT
// HDF5's indexes: version 1 and 2 B-trees, local heaps, fractal heaps, and a group's links in
// them, each walked with an explicit stack and read at most once.
#include "hdf5_file.hpp"

#include <ckptfs/base/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <unordered_map>
#include <unordered_set>

namespace ckptfs::hdf5 {
namespace {

std::string hex(std::uint64_t address) { return fmt::format("{:#x}", address); }

void too_many(std::string_view what, std::uint64_t limit) {
  throw Error(ExitCode::unsupported,
              fmt::format("more than {} {}: ckptfs stops there (Hdf5Limits)", limit, what));
}

}  // namespace

// ------------------------------------------------------------------------ v1 B-trees

void walk_btree1(const File& file, std::uint64_t address, unsigned node_type, std::size_t key_size,
                 std::uint64_t max_children,
                 const std::function<void(std::string_view, std::uint64_t)>& visit) {
  const unsigned o = file.offset_size();
  struct Node {
    std::uint64_t address;
    int level;  // -1: the root, whose level its own header says
  };
  std::vector<Node> stack{{address, -1}};
  std::unordered_set<std::uint64_t> seen;
  std::uint64_t children = 0;
  while (!stack.empty()) {
    const Node n = stack.back();
    stack.pop_back();
    const std::string what = fmt::format("the B-tree node at {}", hex(n.address));
    if (!seen.insert(n.address).second) fail(what + ": reached twice (a cycle)");
    // "TREE", node type, level, entries used, left and right siblings; then keys and children.
    Cursor h(file.read(n.address, 8 + 2 * o, what), file, what);
    if (h.bytes(4) != "TREE") h.fail("no TREE signature");
    if (const unsigned type = h.u8(); type != node_type) {
      h.fail(fmt::format("node type {}, {} expected", type, node_type));
    }
    const int level = h.u8();
    const unsigned entries = h.u16();
    if (n.level >= 0 && level != n.level) {
      h.fail(fmt::format("level {} under a node of level {}", level, n.level + 1));
    }
    const std::uint64_t body = (entries + 1) * key_size + std::uint64_t{entries} * o;
    Cursor c(file.read(n.address + 8 + 2 * o, body, what), file, what);
    for (unsigned i = 0; i < entries; ++i) {
      const std::string_view key = c.bytes(key_size);
      const std::uint64_t child = c.offset();
      if (level == 0) {
        if (++children > max_children) too_many("chunks or symbol table nodes", max_children);
        visit(key, child);
      } else {
        stack.push_back({child, level - 1});
      }
    }
  }
}

// ------------------------------------------------------------------------ v2 B-trees

void walk_btree2(const File& file, std::uint64_t address, unsigned tree_type,
                 std::uint64_t max_records, const std::function<void(std::string_view)>& visit) {
  const unsigned o = file.offset_size();
  const unsigned l = file.length_size();
  std::string what = fmt::format("the v2 B-tree at {}", hex(address));
  const std::uint64_t header_size = 4 + 1 + 1 + 4 + 2 + 2 + 1 + 1 + o + 2 + l + 4;
  Cursor h(file.read_signed(address, header_size, "BTHD", what), file, what);
  h.skip(4);
  if (const unsigned version = h.u8(); version != 0) h.fail(fmt::format("version {}", version));
  if (const unsigned type = h.u8(); type != tree_type) {
    h.fail(fmt::format("type {}, {} expected", type, tree_type));
  }
  const std::uint32_t node_size = h.u32();
  const unsigned record_size = h.u16();
  const unsigned depth = h.u16();
  h.skip(2);  // split and merge percentages
  const std::uint64_t root = h.offset();
  const unsigned root_records = h.u16();
  const std::uint64_t total = h.length();
  if (total > max_records) too_many("records in a v2 B-tree", max_records);
  if (root == undefined) {
    if (total != 0) h.fail("records but no root node");
    return;
  }
  if (record_size == 0 || node_size < 10 + record_size || node_size > (1u << 24) || depth > 64) {
    h.fail(
        fmt::format("nodes of {} bytes, records of {}, depth {}", node_size, record_size, depth));
  }
  // What H5B2__hdr_init derives: each depth's most records per node and the widths of the
  // record counts in internal nodes' child pointers.
  std::vector<std::uint64_t> max_nrec(depth + 1);
  std::vector<std::uint64_t> cumulative(depth + 1);
  std::vector<unsigned> cumulative_size(depth + 1, 0);
  max_nrec[0] = (node_size - 10) / record_size;
  cumulative[0] = max_nrec[0];
  const unsigned nrec_size = bytes_to_hold(max_nrec[0]);
  for (unsigned d = 1; d <= depth; ++d) {
    const std::uint64_t pointer = o + nrec_size + cumulative_size[d - 1];
    if (node_size < 10 + pointer) h.fail("nodes too small for their child pointers");
    max_nrec[d] = (node_size - 10 - pointer) / (record_size + pointer);
    if (max_nrec[d] == 0) h.fail("internal nodes that hold no record");
    std::uint64_t cum = 0;
    if (__builtin_mul_overflow(max_nrec[d] + 1, cumulative[d - 1], &cum) ||
        __builtin_add_overflow(cum, max_nrec[d], &cum)) {
      cum = ~std::uint64_t{0};
    }
    cumulative[d] = cum;
    cumulative_size[d] = bytes_to_hold(cum);
  }
  struct Node {
    std::uint64_t address;
    unsigned records;
    unsigned depth;
  };
  std::vector<Node> stack{{root, root_records, depth}};
  std::unordered_set<std::uint64_t> seen;
  std::uint64_t visited = 0;
  while (!stack.empty()) {
    const Node n = stack.back();
    stack.pop_back();
    what = fmt::format("the v2 B-tree node at {}", hex(n.address));
    if (!seen.insert(n.address).second) fail(what + ": reached twice (a cycle)");
    if (n.records > max_nrec[n.depth]) {
      fail(fmt::format("{}: {} records, more than its {} bytes hold", what, n.records, node_size));
    }
    const std::uint64_t pointer =
        n.depth == 0 ? 0 : o + nrec_size + (n.depth > 1 ? cumulative_size[n.depth - 1] : 0);
    const std::uint64_t used = 6 + std::uint64_t{n.records} * record_size +
                               (n.depth == 0 ? 0 : (std::uint64_t{n.records} + 1) * pointer) + 4;
    Cursor c(file.read_signed(n.address, used, n.depth == 0 ? "BTLF" : "BTIN", what), file, what);
    c.skip(4);
    if (c.u8() != 0 || c.u8() != tree_type) c.fail("a version or type not the tree's");
    for (unsigned i = 0; i < n.records; ++i) {
      if (++visited > total) c.fail("more records than the tree's header counts");
      visit(c.bytes(record_size));
    }
    if (n.depth == 0) continue;
    for (unsigned i = 0; i <= n.records; ++i) {
      const std::uint64_t child = c.offset();
      const auto records = static_cast<unsigned>(c.uint(nrec_size));
      if (n.depth > 1) c.skip(cumulative_size[n.depth - 1]);
      stack.push_back({child, records, n.depth - 1});
    }
  }
  if (visited != total) {
    fail(fmt::format("the v2 B-tree at {}: {} records where its header counts {}", hex(address),
                     visited, total));
  }
}

// ---------------------------------------------------------------------- fractal heaps

namespace {

// A fractal heap's managed objects, found by their heap IDs (only what a group's dense links
// need: no filters, no huge objects).
class FractalHeap {
 public:
  FractalHeap(const File& file, std::uint64_t address) : file_(file), address_(address) {
    what_ = fmt::format("the fractal heap at {}", hex(address));
    const unsigned o = file.offset_size();
    const unsigned l = file.length_size();
    const std::uint64_t size =
        4 + 1 + 2 + 2 + 1 + 4 + l + o + l + o + 6 * l + l + l + 2 + l + l + 2 + 2 + o + 2;
    // The header's filter information comes before its checksum: read the fixed part first.
    Cursor c(file.read(address, size, what_), file, what_);
    if (c.bytes(4) != "FRHP" || c.u8() != 0) c.fail("no FRHP signature and version 0");
    id_length_ = c.u16();
    const unsigned filters_length = c.u16();
    flags_ = c.u8();
    max_managed_ = c.u32();
    c.skip(l + o + l + o + 8 * l);  // huge objects, free space, managed space, counts
    width_ = c.u16();
    start_ = c.length();
    max_direct_ = c.length();
    max_heap_bits_ = c.u16();
    c.skip(2);  // starting rows of the root indirect block
    root_ = c.offset();
    root_rows_ = c.u16();
    if (filters_length != 0) {
      throw Error(ExitCode::unsupported,
                  what_ + ": its objects are filtered, which ckptfs does not read");
    }
    (void)file.read_signed(address, size + 4, "FRHP", what_);
    if (!std::has_single_bit(width_) || width_ > 65536 || !std::has_single_bit(start_) ||
        !std::has_single_bit(max_direct_) || max_direct_ < start_ || max_direct_ > (1u << 30) ||
        max_heap_bits_ == 0 || max_heap_bits_ > 64 || root_rows_ > 64) {
      c.fail(fmt::format("a doubling table of width {}, blocks of {} to {} bytes, {} bits, {} rows",
                         width_, start_, max_direct_, max_heap_bits_, root_rows_));
    }
    offset_size_ = (max_heap_bits_ + 7) / 8;
    // H5HF_hdr_finish_init_phase1: the smaller of a direct block's offset size and the size
    // that holds the largest managed object.
    length_size_ = std::min(static_cast<unsigned>(std::bit_width(max_direct_) - 1 + 7) / 8,
                            bytes_to_hold(max_managed_));
    max_direct_rows_ =
        static_cast<unsigned>(std::bit_width(max_direct_) - std::bit_width(start_)) + 2;
  }

  std::uint32_t id_length() const { return id_length_; }

  // The object a heap ID names (managed or tiny).
  std::string object(std::string_view id) {
    Cursor c(id, file_, what_ + " (a heap ID)");
    const unsigned head = c.u8();
    if ((head >> 6) != 0) c.fail(fmt::format("heap ID version {}", head >> 6));
    const unsigned type = (head >> 4) & 3;
    if (type == 2) {  // tiny: the object is in the ID itself
      const std::size_t length = (head & 0x0f) + 1;
      return std::string(c.bytes(length));
    }
    if (type != 0) {
      throw Error(ExitCode::unsupported, what_ + ": a huge object, which ckptfs does not read");
    }
    const std::uint64_t offset = c.uint(static_cast<unsigned>(offset_size_));
    const std::uint64_t length = c.uint(static_cast<unsigned>(length_size_));
    return managed(offset, length);
  }

 private:
  // Rows whose blocks' offsets fit 64 bits: log2(width × start) + rows - 1 < 64.
  void check_rows(unsigned rows, const std::string& what) const {
    if (rows == 0) return;
    const unsigned bits = static_cast<unsigned>(std::bit_width(std::uint64_t{width_}) - 1 +
                                                std::bit_width(start_) - 1) +
                          rows - 1;
    if (bits >= 63) fail(fmt::format("{}: {} rows, more than 64-bit offsets hold", what, rows));
  }
  std::uint64_t row_size(unsigned row) const { return row == 0 ? start_ : start_ << (row - 1); }
  std::uint64_t row_offset(unsigned row) const {
    return row == 0 ? 0 : std::uint64_t{width_} * start_ << (row - 1);
  }

  // Bytes [offset, offset + length) of the heap's managed space: in the direct block that holds
  // them, found from the root down through indirect blocks (a loop, one level per row group).
  std::string managed(std::uint64_t offset, std::uint64_t length) {
    const unsigned o = file_.offset_size();
    std::uint64_t block = root_;
    std::uint64_t block_offset = 0;
    unsigned rows = root_rows_;
    std::uint64_t block_size = start_;
    for (int hops = 0; rows != 0; ++hops) {
      if (hops > 64) fail(what_ + ": indirect blocks nested too deep");
      const std::string what = fmt::format("{}: the indirect block at {}", what_, hex(block));
      const unsigned direct_rows = std::min(rows, max_direct_rows_);
      const unsigned indirect_rows = rows - direct_rows;
      const std::uint64_t entries = std::uint64_t{width_} * (direct_rows + indirect_rows);
      const std::uint64_t size = 5 + o + offset_size_ + entries * o + 4;
      check_rows(rows, what);
      std::string& bytes = blocks_[block];
      if (bytes.empty()) bytes = file_.read_signed(block, size, "FHIB", what);
      Cursor c(bytes, file_, what);
      c.skip(5);
      if (c.offset() != address_) c.fail("it belongs to another heap");
      if (c.uint(offset_size_) != block_offset) c.fail("its block offset is not where it is");
      if (offset < block_offset) c.fail("an object before the block");
      const std::uint64_t rel = offset - block_offset;
      unsigned row = 0;
      while (row + 1 < rows && row_offset(row + 1) <= rel) ++row;
      const std::uint64_t column = (rel - row_offset(row)) / row_size(row);
      if (column >= width_) fail(fmt::format("{}: offset {} is past its rows", what, offset));
      c.skip(static_cast<std::size_t>((row * width_ + column) * o));
      const std::uint64_t child = c.offset();
      if (child == undefined) fail(fmt::format("{}: no block holds offset {}", what, offset));
      block = child;
      block_offset += row_offset(row) + column * row_size(row);
      block_size = row_size(row);
      rows = row < max_direct_rows_ ? 0
                                    : std::bit_width(block_size) - std::bit_width(start_) -
                                          (std::bit_width(std::uint64_t{width_}) - 1) + 1;
    }
    const std::string what = fmt::format("{}: the direct block at {}", what_, hex(block));
    std::string& bytes = blocks_[block];
    if (bytes.empty()) {
      bytes = file_.read(block, block_size, what);
      Cursor c(bytes, file_, what);
      if (c.bytes(4) != "FHDB" || c.u8() != 0) c.fail("no FHDB signature and version 0");
      if (c.offset() != address_) c.fail("it belongs to another heap");
      if (c.uint(offset_size_) != block_offset) c.fail("its block offset is not where it is");
      if ((flags_ & 2) != 0) {
        // Checksummed over the whole block, the checksum's own bytes taken as zeros.
        const std::size_t at = c.position();
        const std::uint32_t stored = c.u32();
        std::string zeroed = bytes;
        std::fill_n(zeroed.begin() + static_cast<std::ptrdiff_t>(at), 4, '\0');
        if (lookup3(zeroed) != stored) c.fail("its checksum does not match its bytes");
      }
    }
    if (offset < block_offset || offset - block_offset > bytes.size() ||
        length > bytes.size() - (offset - block_offset)) {
      fail(fmt::format("{}: an object of {} bytes at heap offset {} lies outside it", what, length,
                       offset));
    }
    return bytes.substr(static_cast<std::size_t>(offset - block_offset),
                        static_cast<std::size_t>(length));
  }

  const File& file_;
  std::uint64_t address_;
  std::string what_;
  std::uint32_t id_length_ = 0;
  unsigned flags_ = 0;
  std::uint32_t max_managed_ = 0;
  std::uint32_t width_ = 0;
  std::uint64_t start_ = 0;
  std::uint64_t max_direct_ = 0;
  unsigned max_heap_bits_ = 0;
  std::uint64_t root_ = undefined;
  unsigned root_rows_ = 0;
  unsigned offset_size_ = 0;
  unsigned length_size_ = 0;
  unsigned max_direct_rows_ = 0;
  std::unordered_map<std::uint64_t, std::string> blocks_;  // each block read once
};

// A local heap's data segment (a symbol table's link names).
std::string local_heap(const File& file, std::uint64_t address) {
  const std::string what = fmt::format("the local heap at {}", hex(address));
  const unsigned l = file.length_size();
  Cursor c(file.read(address, 8 + 2 * l + file.offset_size(), what), file, what);
  if (c.bytes(4) != "HEAP" || c.u8() != 0) c.fail("no HEAP signature and version 0");
  c.skip(3);
  const std::uint64_t size = c.length();
  c.length();  // the free list
  return file.read(c.offset(), size, what + "'s data");
}

std::string heap_name(const std::string& heap, std::uint64_t offset, const std::string& what) {
  if (offset >= heap.size()) fail(fmt::format("{}: a name at {} past its heap", what, offset));
  const std::size_t end = heap.find('\0', static_cast<std::size_t>(offset));
  if (end == std::string::npos) fail(what + ": a name without its NUL");
  return heap.substr(static_cast<std::size_t>(offset), end - static_cast<std::size_t>(offset));
}

}  // namespace

std::vector<Link> read_links(const File& file, const std::vector<Message>& messages,
                             std::uint64_t& links) {
  const std::uint64_t max_links = file.limits().max_links;
  std::vector<Link> out;
  auto add = [&](Link link) {
    if (++links > max_links) too_many("links", max_links);
    out.push_back(std::move(link));
  };
  for (const Message& m : messages) {
    if (m.type == symbol_table) {
      const std::string what = fmt::format("the symbol table at {}", hex(m.address));
      Cursor c(m.data, file, what);
      const std::uint64_t tree = c.offset();
      const std::string heap = local_heap(file, c.offset());
      const unsigned o = file.offset_size();
      walk_btree1(
          file, tree, 0, file.length_size(), max_links, [&](std::string_view, std::uint64_t node) {
            const std::string node_what = fmt::format("the symbol table node at {}", hex(node));
            Cursor h(file.read(node, 8, node_what), file, node_what);
            if (h.bytes(4) != "SNOD" || h.u8() != 1) h.fail("no SNOD signature");
            h.skip(1);
            const unsigned count = h.u16();
            const std::uint64_t entry = 2 * o + 24;
            Cursor e(file.read(node + 8, count * entry, node_what), file, node_what);
            for (unsigned i = 0; i < count; ++i) {
              Link link;
              link.name = heap_name(heap, e.offset(), node_what);
              link.address = e.offset();
              const std::uint32_t cache = e.u32();
              e.skip(4 + 16);
              if (cache == 2) link.kind = Link::Kind::soft;
              add(std::move(link));
            }
          });
    } else if (m.type == link) {
      Cursor c(m.data, file, fmt::format("the link message at {}", hex(m.address)));
      add(decode_link(c));
    } else if (m.type == link_info) {
      const std::string what = fmt::format("the link info message at {}", hex(m.address));
      Cursor c(m.data, file, what);
      if (c.u8() != 0) c.fail("a version other than 0");
      const unsigned flags = c.u8();
      if ((flags & 1) != 0) c.skip(8);
      const std::uint64_t heap_address = c.offset();
      const std::uint64_t names = c.offset();
      if (heap_address == undefined) continue;  // no dense links
      FractalHeap heap(file, heap_address);
      const std::uint32_t id_length = heap.id_length();
      walk_btree2(file, names, 5, max_links, [&](std::string_view record) {
        // Type 5: the name's hash, then the link message's heap ID.
        if (record.size() < 4 + id_length) fail(what + ": link name records too short");
        const std::string bytes = heap.object(record.substr(4, id_length));
        Cursor l(bytes, file, what + " (a dense link)");
        add(decode_link(l));
      });
    }
  }
  return out;
}

}  // namespace ckptfs::hdf5
