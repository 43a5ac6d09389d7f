// SPDX-License-Identifier: MIT
// Block (a buffer readers can wait for) and BlockCache (sharded LRU of blocks).
#include <ckptfs/source/block_cache.hpp>

namespace ckptfs {

namespace {

// Buffers of freed blocks, for the next blocks.
class BufferPool {
 public:
  std::unique_ptr<std::byte[]> take() {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        auto buffer = std::move(free_.back());
        free_.pop_back();
        return buffer;
      }
    }
    return std::make_unique_for_overwrite<std::byte[]>(Block::pooled_length);
  }
  void give(std::unique_ptr<std::byte[]> buffer) noexcept {
    std::lock_guard lock(mutex_);
    if (free_.size() < kept) {
      try {
        free_.push_back(std::move(buffer));
      } catch (...) {
      }
    }
  }

 private:
  static constexpr std::size_t kept = (32u << 20) / Block::pooled_length;
  std::mutex mutex_;
  std::vector<std::unique_ptr<std::byte[]>> free_;
};

BufferPool& pool() {
  static BufferPool* p = new BufferPool;  // never destroyed: blocks may outlive static objects
  return *p;
}

}  // namespace

Block::Block(std::size_t length)
    : bytes_(length == pooled_length
                 ? pool().take()
                 : std::make_unique_for_overwrite<std::byte[]>(length == 0 ? 1 : length)),
      length_(length) {}

Block::~Block() {
  if (length_ == pooled_length) pool().give(std::move(bytes_));
}

void Block::finish(State state) {
  {
    std::lock_guard lock(mutex_);
    if (state_.load(std::memory_order_relaxed) != State::pending) return;
    state_.store(state, std::memory_order_release);
  }
  changed_.notify_all();
}

void Block::set_ready() { finish(State::ready); }

void Block::set_failed(ExitCode code, std::string message) {
  {
    std::lock_guard lock(mutex_);
    if (state_.load(std::memory_order_relaxed) != State::pending) return;
    error_code_ = code;
    error_ = std::move(message);
    failed_at_ = std::chrono::steady_clock::now();
  }
  finish(State::failed);
}

Block::State Block::wait_until(std::chrono::steady_clock::time_point deadline) const {
  State s = state();
  if (s != State::pending) return s;
  std::unique_lock lock(mutex_);
  changed_.wait_until(lock, deadline, [&] { return state() != State::pending; });
  return state();
}

std::size_t BlockCache::KeyHash::operator()(const BlockKey& k) const noexcept {
  // splitmix64's finalizer: consecutive indexes of one source spread over the shards.
  std::uint64_t x = k.index * 0x9e3779b97f4a7c15ull + k.source;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<std::size_t>(x ^ (x >> 31));
}

BlockCache::BlockCache(std::uint64_t capacity)
    : capacity_(capacity), shard_capacity_(capacity / shard_count), shards_(shard_count) {}

BlockCache::Shard& BlockCache::shard_of(BlockKey key) noexcept {
  return shards_[(KeyHash{}(key) >> 7) % shard_count];
}

std::shared_ptr<Block> BlockCache::find(BlockKey key) {
  Shard& shard = shard_of(key);
  std::lock_guard lock(shard.mutex);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) return nullptr;
  shard.recency.splice(shard.recency.begin(), shard.recency, it->second.position);
  return it->second.block;
}

std::pair<std::shared_ptr<Block>, bool> BlockCache::acquire(BlockKey key, std::size_t length) {
  Shard& shard = shard_of(key);
  std::lock_guard lock(shard.mutex);
  if (auto it = shard.entries.find(key); it != shard.entries.end()) {
    shard.recency.splice(shard.recency.begin(), shard.recency, it->second.position);
    return {it->second.block, false};
  }
  auto block = std::make_shared<Block>(length);
  shard.recency.push_front(key);
  try {
    shard.entries.emplace(key, Entry{block, shard.recency.begin()});
  } catch (...) {
    shard.recency.pop_front();
    throw;
  }
  shard.bytes += length;
  resident_.fetch_add(length, std::memory_order_relaxed);
  evict(shard);
  return {std::move(block), true};
}

void BlockCache::erase(BlockKey key, const Block* block) {
  Shard& shard = shard_of(key);
  std::lock_guard lock(shard.mutex);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end() || it->second.block.get() != block) return;
  shard.bytes -= block->length();
  resident_.fetch_sub(block->length(), std::memory_order_relaxed);
  shard.recency.erase(it->second.position);
  shard.entries.erase(it);
}

void BlockCache::evict(Shard& shard) {
  // From the least recently used end; the newest entry (front) always stays.
  auto it = shard.recency.end();
  while (shard.bytes > shard_capacity_ && it != shard.recency.begin()) {
    --it;
    if (it == shard.recency.begin()) break;
    auto entry = shard.entries.find(*it);
    const Block& block = *entry->second.block;
    // use_count 1: only the cache holds it (no reader copying from it, no fetch filling it).
    if (block.state() == Block::State::pending || entry->second.block.use_count() > 1) continue;
    shard.bytes -= block.length();
    resident_.fetch_sub(block.length(), std::memory_order_relaxed);
    shard.entries.erase(entry);
    it = shard.recency.erase(it);
  }
}

}  // namespace ckptfs
