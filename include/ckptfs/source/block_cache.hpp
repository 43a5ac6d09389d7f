// SPDX-License-Identifier: MIT
// The memory cache of a mount's remote bytes: fixed-size blocks of every remote source, bounded
// in bytes, shared by all of them, with blocks that readers can wait for while they are fetched.
#pragma once

#include <ckptfs/base/error.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ckptfs {

// One block of one source: `length` bytes (the block size, less at the end of the source),
// pending until its bytes are all there (ready) or its fetch gave up (failed). Filled by one
// writer (the fetch), then read-only: readers copy from data() only once wait_until() said
// ready. Thread-safe.
class Block {
 public:
  enum class State : int { pending, ready, failed };
  // Buffers of this many bytes are kept for reuse (up to 32 MiB of them).
  static constexpr std::size_t pooled_length = 256 * 1024;

  // Allocates `length` bytes (a buffer of `pooled_length` bytes freed by an earlier block
  // when there is one: fresh memory costs page faults on every first write). Throws
  // std::bad_alloc.
  explicit Block(std::size_t length);
  ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  std::byte* data() noexcept { return bytes_.get(); }
  const std::byte* data() const noexcept { return bytes_.get(); }
  std::size_t length() const noexcept { return length_; }
  State state() const noexcept { return state_.load(std::memory_order_acquire); }

  // pending -> ready or failed, once (later calls do nothing); wakes every waiter.
  void set_ready();
  void set_failed(ExitCode code, std::string message);

  // Waits until the block is no longer pending or `deadline` passes; returns its state then
  // (pending on a timeout).
  State wait_until(std::chrono::steady_clock::time_point deadline) const;

  // Why and when it failed (set before the state becomes failed, never changed after).
  ExitCode error_code() const noexcept { return error_code_; }
  const std::string& error() const noexcept { return error_; }
  std::chrono::steady_clock::time_point failed_at() const noexcept { return failed_at_; }

 private:
  void finish(State state);
  std::unique_ptr<std::byte[]> bytes_;
  std::size_t length_;
  std::atomic<State> state_{State::pending};
  ExitCode error_code_ = ExitCode::io;
  std::string error_;
  std::chrono::steady_clock::time_point failed_at_{};
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
};

struct BlockKey {
  std::uint32_t source = 0;  // a number the cache's user gives each source
  std::uint64_t index = 0;   // offset / block size
  bool operator==(const BlockKey&) const = default;
};

// Blocks by key, least recently used evicted first once the ready blocks held exceed the
// capacity. Pending blocks and blocks a reader still holds are never evicted (the cache may
// then hold more than its capacity for a while: its users bound what they fetch at once).
// Split into shards with a mutex each, so that readers of different blocks seldom wait on each
// other; a lookup holds its shard's mutex only to find and touch the entry. Thread-safe.
class BlockCache {
 public:
  // `capacity`: bytes of blocks to keep (at least one block per shard is always allowed).
  explicit BlockCache(std::uint64_t capacity);

  // The cached block at `key`, or nullptr. Marks it recently used. A block nobody holds may be
  // evicted at any moment by another thread's acquire(): a reader keeps the block acquire()
  // gave it rather than finding it again (which may find nothing, however large the cache).
  std::shared_ptr<Block> find(BlockKey key);

  // The cached block at `key`, or a new pending block of `length` bytes inserted there; the
  // bool is true when it is new: the caller must then fill it (set_ready) or fail it
  // (set_failed, then erase). Throws std::bad_alloc.
  std::pair<std::shared_ptr<Block>, bool> acquire(BlockKey key, std::size_t length);

  // Removes the entry at `key` when it still holds `block` (a failed block: the next read
  // fetches it again).
  void erase(BlockKey key, const Block* block);

  // Bytes of the blocks held (pending ones included).
  std::uint64_t resident_bytes() const noexcept {
    return resident_.load(std::memory_order_relaxed);
  }
  std::uint64_t capacity() const noexcept { return capacity_; }

 private:
  static constexpr std::size_t shard_count = 16;
  struct Entry {
    std::shared_ptr<Block> block;
    std::list<BlockKey>::iterator position;  // in the shard's recency list
  };
  struct KeyHash {
    std::size_t operator()(const BlockKey& k) const noexcept;
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<BlockKey, Entry, KeyHash> entries;
    std::list<BlockKey> recency;  // most recent first
    std::uint64_t bytes = 0;
  };
  Shard& shard_of(BlockKey key) noexcept;
  void evict(Shard& shard);  // with shard.mutex held

  std::uint64_t capacity_;
  std::uint64_t shard_capacity_;
  std::atomic<std::uint64_t> resident_{0};
  std::vector<Shard> shards_;
};

}  // namespace ckptfs
