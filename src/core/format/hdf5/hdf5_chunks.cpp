// SPDX-License-Identifier: MIT
// A chunked dataset's chunk index read into one entry per chunk of its grid: version 1 B-trees
// (HDF5's default), and layout version 4's single chunk, implicit, fixed array and version 2
// B-tree indexes (libver='latest').
#include "hdf5_file.hpp"

#include <ckptfs/base/error.hpp>

#include <fmt/format.h>

#include <optional>
#include <span>

namespace ckptfs::hdf5 {
namespace {

std::string hex(std::uint64_t address) { return fmt::format("{:#x}", address); }

// Collects chunks into their places of the grid, checking each.
class Placer {
 public:
  Placer(const File& file, const ChunkGrid& grid, bool filtered, std::uint64_t& chunks)
      : file_(file), grid_(grid), filtered_(filtered), chunks_(chunks) {
    out_.resize(static_cast<std::size_t>(grid.total));
  }

  // The chunk at grid coordinates `scaled` (in chunks).
  void place(std::span<const std::uint64_t> scaled, std::uint64_t address, std::uint64_t size,
             std::uint32_t mask) {
    std::uint64_t index = 0;
    for (std::size_t d = 0; d < grid_.counts.size(); ++d) {
      if (scaled[d] >= grid_.counts[d]) return;  // past the dataset (it shrank): never read
      index = index * grid_.counts[d] + scaled[d];
    }
    place_at(index, address, size, mask);
  }

  void place_at(std::uint64_t index, std::uint64_t address, std::uint64_t size,
                std::uint32_t mask) {
    const std::uint64_t max_chunks = file_.limits().max_chunks;
    if (++chunks_ > max_chunks) {
      throw Error(ExitCode::unsupported,
                  fmt::format("more than {} chunks: ckptfs stops there (Hdf5Limits)", max_chunks));
    }
    ChunkSpec::Chunk& c = out_[static_cast<std::size_t>(index)];
    if (c.offset != ChunkSpec::Chunk::missing) fail(fmt::format("two chunks at chunk {}", index));
    if (address == undefined) return;  // allocated nowhere: the fill value
    // A filtered chunk's stored size: what deflate can make of it (at worst a few bytes per 16
    // KiB more) and a Fletcher-32 checksum; an unfiltered one's, exactly its decoded size (or
    // more: bytes past it are never read).
    const std::uint64_t most = grid_.chunk_bytes + grid_.chunk_bytes / 64 + 1024;
    if (filtered_ ? (size == 0 || size > most) : size < grid_.chunk_bytes) {
      fail(fmt::format("chunk {} stored in {} bytes, for {} decoded", index, size,
                       grid_.chunk_bytes));
    }
    if (!filtered_) size = grid_.chunk_bytes;
    if (!file_.contains(address, size)) {
      fail(fmt::format("chunk {} ({} bytes at {}) lies outside the file", index, size,
                       hex(address)));
    }
    c.offset = file_.absolute(address);
    c.size = size;
    c.filter_mask = mask;
  }

  std::vector<ChunkSpec::Chunk> take() { return std::move(out_); }

 private:
  const File& file_;
  const ChunkGrid& grid_;
  bool filtered_;
  std::uint64_t& chunks_;
  std::vector<ChunkSpec::Chunk> out_;
};

// The chunk counts of the grid the fixed array and implicit indexes number: the maximum
// dimensions'.
std::vector<std::uint64_t> max_counts(const ChunkGrid& grid,
                                      const std::vector<std::uint64_t>& max_dims) {
  std::vector<std::uint64_t> counts;
  for (std::size_t d = 0; d < grid.chunk.size(); ++d) {
    if (max_dims[d] == undefined) fail("an unlimited dimension in a fixed-size chunk index");
    counts.push_back(max_dims[d] / grid.chunk[d] + (max_dims[d] % grid.chunk[d] != 0));
  }
  return counts;
}

// Calls place(scaled coordinates, linear index) for entry i of an index numbered over `counts`.
void for_each_entry(const std::vector<std::uint64_t>& counts, std::uint64_t entries,
                    const std::function<void(std::span<const std::uint64_t>, std::uint64_t)>& f) {
  std::vector<std::uint64_t> scaled(counts.size(), 0);
  for (std::uint64_t i = 0; i < entries; ++i) {
    f(scaled, i);
    for (std::size_t d = counts.size(); d-- > 0;) {
      if (++scaled[d] < counts[d]) break;
      scaled[d] = 0;
    }
  }
}

// The fixed array index (FAHD, FADB and its pages).
void read_fixed_array(const File& file, const Layout& layout, const ChunkGrid& grid,
                      const std::vector<std::uint64_t>& max_dims, bool filtered, Placer& placer) {
  const unsigned o = file.offset_size();
  const unsigned l = file.length_size();
  std::string what = fmt::format("the fixed array chunk index at {}", hex(layout.address));
  Cursor h(file.read_signed(layout.address, 4 + 4 + l + o + 4, "FAHD", what), file, what);
  h.skip(4);
  if (h.u8() != 0) h.fail("a version other than 0");
  const unsigned client = h.u8();
  const unsigned entry_size = h.u8();
  const unsigned page_bits = h.u8();
  const std::uint64_t entries = h.length();
  const std::uint64_t data_block = h.offset();
  if (client != (filtered ? 1u : 0u)) h.fail(fmt::format("client {} for this dataset", client));
  const unsigned size_width = filtered ? entry_size - o - 4 : 0;
  if (entry_size != (filtered ? o + size_width + 4 : o) || size_width > 8 ||
      (filtered && size_width == 0) || page_bits == 0 || page_bits > 32) {
    h.fail(fmt::format("entries of {} bytes, pages of 2^{}", entry_size, page_bits));
  }
  const std::vector<std::uint64_t> counts = max_counts(grid, max_dims);
  std::uint64_t expected = 1;
  for (std::uint64_t n : counts) {
    if (__builtin_mul_overflow(expected, n, &expected)) expected = ~std::uint64_t{0};
  }
  if (entries != expected) {
    h.fail(fmt::format("{} entries for a grid of {} chunks", entries, expected));
  }
  if (data_block == undefined) return;  // no chunk written
  what = fmt::format("the fixed array data block at {}", hex(data_block));
  const std::uint64_t page_entries = std::uint64_t{1} << page_bits;
  const bool paged = entries > page_entries;
  const std::uint64_t pages = paged ? (entries + page_entries - 1) / page_entries : 0;
  const std::uint64_t bitmap = (pages + 7) / 8;
  const std::uint64_t prefix = 4 + 1 + 1 + o;
  const std::uint64_t block_size = prefix + (paged ? bitmap : entries * entry_size) + 4;
  const std::string block = file.read_signed(data_block, block_size, "FADB", what);
  Cursor b(block, file, what);
  b.skip(4);
  if (b.u8() != 0 || b.u8() != client) b.fail("a version or client not the index's");
  if (b.offset() != layout.address) b.fail("it belongs to another index");
  auto decode = [&](Cursor& c, std::span<const std::uint64_t> scaled) {
    const std::uint64_t address = c.offset();
    std::uint64_t size = grid.chunk_bytes;
    std::uint32_t mask = 0;
    if (filtered) {
      size = c.uint(size_width);
      mask = c.u32();
    }
    placer.place(scaled, address, size, mask);
  };
  if (!paged) {
    for_each_entry(counts, entries, [&](std::span<const std::uint64_t> scaled, std::uint64_t) {
      decode(b, scaled);
    });
    return;
  }
  const std::string_view initialized = b.bytes(static_cast<std::size_t>(bitmap));
  // Pages follow the data block, each its entries and a checksum (the last one shorter).
  std::uint64_t page_address = data_block + block_size;
  std::uint64_t page = 0;
  std::uint64_t first = 0;
  std::string page_bytes;
  std::optional<Cursor> p;
  for_each_entry(counts, entries, [&](std::span<const std::uint64_t> scaled, std::uint64_t i) {
    if (i == first) {
      const std::uint64_t n = std::min(page_entries, entries - i);
      const std::uint64_t length = n * entry_size + 4;
      const bool used =
          (static_cast<unsigned char>(initialized[page / 8]) & (0x80 >> page % 8)) != 0;
      const std::string page_what = fmt::format("{} (its page {})", what, page);
      page_bytes = used ? file.read(page_address, length, page_what) : std::string();
      if (used) {
        const auto* tail = reinterpret_cast<const unsigned char*>(page_bytes.data() + length - 4);
        const std::uint32_t stored =
            tail[0] | tail[1] << 8 | tail[2] << 16 | static_cast<std::uint32_t>(tail[3]) << 24;
        if (lookup3(std::string_view(page_bytes).substr(0, length - 4)) != stored) {
          fail(page_what + ": its checksum does not match its bytes");
        }
      }
      p.emplace(page_bytes, file, page_what);
      page_address += length;
      first += n;
      ++page;
    }
    if (!page_bytes.empty()) decode(*p, scaled);
  });
}

}  // namespace

std::vector<ChunkSpec::Chunk> read_chunk_index(const File& file, const Layout& layout,
                                               const ChunkGrid& grid,
                                               const std::vector<std::uint64_t>& dims,
                                               const std::vector<std::uint64_t>& max_dims,
                                               bool filtered, std::uint64_t& chunks) {
  (void)dims;
  const std::size_t rank = grid.chunk.size();
  Placer placer(file, grid, filtered, chunks);
  const unsigned o = file.offset_size();
  switch (layout.index_type) {
    case 0: {
      // Version 1 B-tree: each key the chunk's stored size, filter mask and element offsets (one
      // per dimension, and a last 0 for the element's bytes).
      std::vector<std::uint64_t> scaled(rank);
      walk_btree1(
          file, layout.address, 1, 8 + 8 * (rank + 1), file.limits().max_chunks,
          [&](std::string_view key, std::uint64_t child) {
            Cursor k(key, file, "a chunk B-tree key");
            const std::uint32_t size = k.u32();
            const std::uint32_t mask = k.u32();
            for (std::size_t d = 0; d < rank; ++d) {
              const std::uint64_t offset = k.u64();
              if (offset % grid.chunk[d] != 0) {
                k.fail(fmt::format("chunk offset {} not a multiple of {}", offset, grid.chunk[d]));
              }
              scaled[d] = offset / grid.chunk[d];
            }
            placer.place(scaled, child, size, mask);
          });
      break;
    }
    case 1: {  // a single chunk: the whole dataset
      if (grid.total != 1) fail("a single chunk index for several chunks");
      const std::uint64_t size =
          (layout.chunk_flags & 2) != 0 ? layout.single_size : grid.chunk_bytes;
      placer.place_at(0, layout.address, size, layout.single_mask);
      break;
    }
    case 2: {  // implicit: every chunk, in the grid's order, one after the other
      if (filtered) fail("an implicit chunk index of filtered chunks");
      if (layout.address == undefined) break;
      const std::vector<std::uint64_t> counts = max_counts(grid, max_dims);
      std::uint64_t entries = 1;
      for (std::uint64_t n : counts) {
        if (__builtin_mul_overflow(entries, n, &entries)) fail("an implicit index too large");
      }
      std::uint64_t end = 0;
      if (__builtin_mul_overflow(entries, grid.chunk_bytes, &end) ||
          !file.contains(layout.address, end)) {
        fail(fmt::format("{} implicit chunks of {} bytes at {} lie outside the file", entries,
                         grid.chunk_bytes, hex(layout.address)));
      }
      for_each_entry(counts, entries, [&](std::span<const std::uint64_t> scaled, std::uint64_t i) {
        placer.place(scaled, layout.address + i * grid.chunk_bytes, grid.chunk_bytes, 0);
      });
      break;
    }
    case 3:
      if (layout.address != undefined) {
        read_fixed_array(file, layout, grid, max_dims, filtered, placer);
      }
      break;
    case 4:
      fail(
          "an extensible array chunk index (a dataset with one unlimited dimension, written "
          "with libver='latest'), which ckptfs does not read");
    case 5: {
      // Records: the chunk's address, [its stored size and filter mask], its scaled offsets.
      if (layout.address == undefined) break;
      std::vector<std::uint64_t> scaled(rank);
      walk_btree2(file, layout.address, filtered ? 11 : 10, file.limits().max_chunks,
                  [&](std::string_view record) {
                    const std::size_t fixed = o + 8 * rank + (filtered ? 4 : 0);
                    if (record.size() < fixed + (filtered ? 1 : 0) ||
                        record.size() > fixed + (filtered ? 8 : 0)) {
                      fail(fmt::format("chunk records of {} bytes", record.size()));
                    }
                    Cursor r(record, file, "a chunk record");
                    const std::uint64_t address = r.offset();
                    std::uint64_t size = grid.chunk_bytes;
                    std::uint32_t mask = 0;
                    if (filtered) {
                      size = r.uint(static_cast<unsigned>(record.size() - fixed));
                      mask = r.u32();
                    }
                    for (std::size_t d = 0; d < rank; ++d) scaled[d] = r.u64();
                    placer.place(scaled, address, size, mask);
                  });
      break;
    }
    default:
      fail(fmt::format("chunk index type {}", layout.index_type));
  }
  return placer.take();
}

}  // namespace ckptfs::hdf5
