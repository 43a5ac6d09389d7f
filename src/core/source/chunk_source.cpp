// SPDX-License-Identifier: MIT
// ChunkSource: each chunk read from its source, its filters reversed (Fletcher-32 checked,
// inflated, unshuffled) into a block of the model's chunk cache, served from there.
#include <ckptfs/base/error.hpp>
#include <ckptfs/source/chunk_source.hpp>

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

namespace ckptfs {

std::size_t ChunkCache::KeyHash::operator()(const Key& k) const noexcept {
  return std::hash<const void*>()(k.owner) ^
         (std::hash<std::uint64_t>()(k.index) * 0x9e3779b97f4a7c15ull);
}

ChunkCache::Block ChunkCache::find(const void* owner, std::uint64_t index) {
  const std::lock_guard lock(mutex_);
  const auto it = index_.find({owner, index});
  if (it == index_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second);  // now the most recent
  return it->second->second;
}

void ChunkCache::insert(const void* owner, std::uint64_t index, Block block) {
  const std::lock_guard lock(mutex_);
  const Key key{owner, index};
  if (index_.contains(key)) return;  // another read decoded it meanwhile
  size_ += block->size();
  order_.emplace_front(key, std::move(block));
  index_.emplace(key, order_.begin());
  // The least recent go first; a block a read still holds lives on in its pin until then.
  while (size_ > capacity_ && order_.size() > 1) {
    size_ -= order_.back().second->size();
    index_.erase(order_.back().first);
    order_.pop_back();
  }
}

std::uint64_t ChunkCache::size() const {
  const std::lock_guard lock(mutex_);
  return size_;
}

std::uint32_t hdf5_fletcher32(std::span<const std::byte> bytes) noexcept {
  std::uint32_t sum1 = 0;
  std::uint32_t sum2 = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  std::size_t words = bytes.size() / 2;
  while (words != 0) {
    // At most 360 words between reductions, so that neither sum overflows 32 bits.
    std::size_t n = std::min<std::size_t>(words, 360);
    words -= n;
    for (; n != 0; --n, data += 2) {
      sum1 += (std::uint32_t{data[0]} << 8) | data[1];
      sum2 += sum1;
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (bytes.size() % 2 != 0) {
    sum1 += std::uint32_t{*data} << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

namespace {

// zlib's format (not raw deflate: HDF5's filter calls compress2()), inflated into exactly `out`.
// Returns "" or what is wrong.
std::string inflate_exactly(const std::string& in, std::string& out) {
  z_stream z{};
  if (inflateInit(&z) != Z_OK) throw std::bad_alloc();
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());  // bounded by the reader (ChunkSpec's sizes)
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int status = inflate(&z, Z_FINISH);
  std::string why;
  if (status == Z_STREAM_END) {
    if (z.avail_out != 0)
      why = fmt::format("inflates to {} bytes, not {}", z.total_out, out.size());
  } else if (status == Z_BUF_ERROR && z.avail_out == 0) {
    why = fmt::format("inflates to more than {} bytes", out.size());
  } else if (status == Z_BUF_ERROR) {
    why = fmt::format("ends after {} bytes inflated", z.total_out);
  } else {
    why = fmt::format("corrupt deflated data ({})", z.msg ? z.msg : "zlib error");
  }
  inflateEnd(&z);
  return why;
}

// HDF5's shuffle undone: byte j of element i was stored at j × n + i (n elements); the bytes
// past the last whole element stay where they are.
std::string unshuffle(const std::string& in, std::size_t element_size) {
  if (element_size <= 1 || in.size() < element_size) return in;
  std::string out(in.size(), '\0');
  const std::size_t n = in.size() / element_size;
  for (std::size_t j = 0; j < element_size; ++j) {
    const char* from = in.data() + j * n;
    for (std::size_t i = 0; i < n; ++i) out[i * element_size + j] = from[i];
  }
  std::memcpy(out.data() + n * element_size, in.data() + n * element_size,
              in.size() - n * element_size);
  return out;
}

}  // namespace

ChunkSource::ChunkSource(const ByteSource& stored, ChunkSpec spec,
                         std::shared_ptr<ChunkCache> cache, std::string name)
    : stored_(stored), spec_(std::move(spec)), cache_(std::move(cache)), name_(std::move(name)) {
  if (__builtin_mul_overflow(std::uint64_t{spec_.chunks.size()}, spec_.chunk_bytes, &size_)) {
    throw Error(ExitCode::bad_checkpoint, fmt::format("{}: too many chunk bytes", name_));
  }
}

std::string ChunkSource::decode(std::uint64_t index) const {
  const ChunkSpec::Chunk& c = spec_.chunks[index];
  const auto chunk_bytes = static_cast<std::size_t>(spec_.chunk_bytes);
  if (c.offset == ChunkSpec::Chunk::missing) {
    std::string out(chunk_bytes, '\0');
    const std::size_t unit = spec_.fill.size();
    if (unit != 0 && spec_.fill.find_first_not_of('\0') != std::string::npos) {
      for (std::size_t at = 0; at + unit <= out.size(); at += unit) {
        std::memcpy(out.data() + at, spec_.fill.data(), unit);
      }
    }
    return out;
  }
  std::string bytes = stored_.read_string(c.offset, static_cast<std::size_t>(c.size));
  auto fail = [&](std::string_view why) {
    return Error(ExitCode::bad_checkpoint, fmt::format("{}: chunk {} (at byte {} of the file): {}",
                                                       name_, index, c.offset, why));
  };
  for (std::size_t k = spec_.filters.size(); k-- > 0;) {
    if (k < 32 && (c.filter_mask >> k & 1) != 0) continue;  // its writer skipped this filter
    switch (spec_.filters[k]) {
      case ChunkFilter::fletcher32: {
        if (bytes.size() < 4) throw fail("too short for its Fletcher-32 checksum");
        const auto* tail = reinterpret_cast<const unsigned char*>(bytes.data() + bytes.size() - 4);
        const std::uint32_t stored =
            tail[0] | tail[1] << 8 | tail[2] << 16 | static_cast<std::uint32_t>(tail[3]) << 24;
        bytes.resize(bytes.size() - 4);
        const std::uint32_t sum = hdf5_fletcher32(std::as_bytes(std::span(bytes)));
        // HDF5 before 1.6.3 stored the checksum with each 16-bit half byte-swapped; HDF5 still
        // accepts both.
        const std::uint32_t swapped = ((sum & 0x00ff00ff) << 8) | ((sum >> 8) & 0x00ff00ff);
        if (stored != sum && stored != swapped) {
          throw fail(
              fmt::format("its Fletcher-32 checksum is {:08x}, its bytes' {:08x}", stored, sum));
        }
        break;
      }
      case ChunkFilter::deflate: {
        std::string out(chunk_bytes, '\0');
        if (std::string why = inflate_exactly(bytes, out); !why.empty()) throw fail(why);
        bytes = std::move(out);
        break;
      }
      case ChunkFilter::shuffle:
        bytes = unshuffle(bytes, spec_.shuffle_element_size);
        break;
    }
  }
  if (bytes.size() != chunk_bytes) {
    throw fail(fmt::format("decodes to {} bytes, not {}", bytes.size(), chunk_bytes));
  }
  return bytes;
}

ChunkCache::Block ChunkSource::chunk(std::uint64_t index) const {
  if (ChunkCache::Block found = cache_->find(this, index)) return found;
  auto block = std::make_shared<const std::string>(decode(index));
  cache_->insert(this, index, block);
  return block;
}

void ChunkSource::read_in_range(std::uint64_t offset, std::span<std::byte> out) const {
  std::size_t done = 0;
  while (done < out.size()) {
    const std::uint64_t at = offset + done;
    const std::uint64_t index = at / spec_.chunk_bytes;
    const auto within = static_cast<std::size_t>(at % spec_.chunk_bytes);
    const ChunkCache::Block block = chunk(index);
    const std::size_t n = std::min(out.size() - done, block->size() - within);
    std::memcpy(out.data() + done, block->data() + within, n);
    done += n;
  }
}

bool ChunkSource::lend_in_range(std::uint64_t offset, std::size_t length,
                                std::vector<std::span<const std::byte>>& spans,
                                std::vector<Pin>& pins) const {
  std::size_t done = 0;
  while (done < length) {
    const std::uint64_t at = offset + done;
    const std::uint64_t index = at / spec_.chunk_bytes;
    const auto within = static_cast<std::size_t>(at % spec_.chunk_bytes);
    ChunkCache::Block block = chunk(index);
    const std::size_t n = std::min(length - done, block->size() - within);
    spans.emplace_back(reinterpret_cast<const std::byte*>(block->data()) + within, n);
    pins.push_back(std::move(block));
    done += n;
  }
  return true;
}

}  // namespace ckptfs
