// SPDX-License-Identifier: MIT
// RemoteSource and RemoteContext: opening an object by URL, range fetches with retries and
// identity checks, readahead, and the memory and disk caches behind reads.
#include <ckptfs/source/remote.hpp>

#include <ckptfs/base/error.hpp>
#include <ckptfs/source/block_cache.hpp>
#include <ckptfs/source/disk_cache.hpp>
#include <ckptfs/source/http_headers.hpp>
#include <ckptfs/source/location.hpp>
#include <ckptfs/source/open_file.hpp>

#include "http_transport.hpp"

#include <fmt/format.h>

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

namespace ckptfs {
namespace detail {
namespace {

constexpr std::uint64_t block_size = remote_block_size;
// An answer whose framing breaks (bytes past what it declared, fewer than it declared, bytes
// that are not HTTP where an answer should start, a Content-Range other than asked) is discarded
// with its connection and asked again on a fresh one, this many times in all; then the request
// fails with what was seen. A good server that once misbehaves costs a retry; one that always
// does, an error (never its bytes).
constexpr unsigned max_protocol_attempts = 3;
// The range check at open (RangeFetch::Mode::check): these bytes asked alone must be those that
// the first request's answer, from byte 0, holds at the same place. Not at a round offset: a
// server that answers from a round offset other than asked is caught too.
constexpr std::uint64_t range_check_first = 4099;
constexpr std::uint64_t range_check_end = 8192;
// Readahead on sequential reads: the window is as large as what the stream has read so far,
// from 4 blocks (1 MiB) up to 64 MiB (less with a small cache), so that a reader that stops
// never leaves more unread than it read; fetched by requests of up to 16 MiB. Each request
// costs a server a lookup besides its bytes: Ceph's RGW sent a 1.5 GB object in 1.6 s as
// 16 MiB ranges 8 at a time, in 2.8 s as 4 MiB ones (curl), and ckptfs's whole-model load
// from it took 10% less time with 16 MiB requests than with 4 MiB ones.
constexpr std::uint64_t first_window = 4;
constexpr std::uint64_t largest_window = 256;
constexpr std::uint64_t blocks_per_request = 64;
constexpr std::size_t max_error_body = 4096;
// A request slower than minimum_rate() over this long (a third of the timeout, 1 to 10 s) is
// abandoned and retried on a new connection: a stalled server, or one that trickles bytes.
constexpr long stall_seconds_max = 10;
// How long one attempt may take to connect (a slower connect is retried on a new one); the
// request's deadline ends it sooner (the transport ends every job at its deadline).
constexpr long connect_timeout_ms = 10'000;
// A block whose fetch failed stays failed this long: the kernel retries a failed read at once,
// page by page, and that retry must not wait for the server again.
constexpr auto failure_memory = std::chrono::seconds(1);
// unchanged(check_path) asks the server again at most this often (in the background).
constexpr auto revalidate_every = std::chrono::seconds(5);
// How long the transport waits for room in the disk cache's write queue before a block is
// skipped (RemoteShared::queue_disk_write).
constexpr auto disk_room_wait = std::chrono::seconds(1);
// How often the claims of blocks that another mount of the disk cache fetches are looked at.
constexpr auto claim_poll = std::chrono::milliseconds(2);
// SigV4 signs the payload's hash: a GET has none, this is SHA-256 of nothing.
constexpr const char* empty_sha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

// A random number in [0, most], for spreading retries out. The engine is seeded once per thread
// and only when a request is retried: a std::random_device per request cost 0.5% of a
// sequential read's samples.
int jitter(int most) {
  thread_local std::minstd_rand engine{std::random_device{}()};
  return std::uniform_int_distribution<int>(0, most)(engine);
}

// The slowest transfer worth waiting for: one that brings a block within the timeout. A server
// that sends less (2 bytes a second, say) can never answer a read in time.
long minimum_rate(std::chrono::milliseconds timeout) {
  return static_cast<long>(
      std::max<std::uint64_t>(1, block_size * 1000 / static_cast<std::uint64_t>(timeout.count())));
}

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

// One object at one URL, as pinned when it was opened.
struct Object {
  ~Object() { curl().slist_free_all(headers); }

  std::string request_url;           // what is fetched: may hold credentials, never shown
  std::string name;                  // display_location(): shown
  std::vector<std::string> secrets;  // texts never to show in a message
  bool follow_redirects = false;
  std::string redirect_protocols;
  std::string sigv4;  // CURLOPT_AWS_SIGV4 for signed S3 requests; empty: none
  std::string user, password;
  std::vector<std::string> header_lines;  // fixed request headers (x-amz-*, If-Match)
  curl_slist* headers = nullptr;          // the same, for curl; built once the identity is known

  // Identity at open.
  std::uint64_t size = 0;
  std::string etag;
  std::string last_modified;
  SourceTimes times;
  std::uint32_t id = 0;
  std::shared_ptr<const DiskCache::Folder> disk_folder;  // null: no disk cache

  std::atomic<bool> changed{false};
  std::mutex reason_mutex;
  std::string change_reason;
  std::atomic<bool> validating{false};
  std::atomic<std::int64_t> validated_at{0};  // steady_ms() of the last identity seen

  void mark_changed(const std::string& why) {
    {
      std::lock_guard lock(reason_mutex);
      if (change_reason.empty()) change_reason = why;
    }
    changed.store(true, std::memory_order_release);
  }
  std::string reason() {
    std::lock_guard lock(reason_mutex);
    return change_reason;
  }
  std::string scrub(std::string message) const {
    for (const std::string& secret : secrets) {
      if (secret.size() < 4) continue;
      for (auto at = message.find(secret); at != std::string::npos; at = message.find(secret, at)) {
        message.replace(at, secret.size(), "***");
      }
    }
    return message;
  }
  void build_headers() {
    curl().slist_free_all(headers);
    headers = nullptr;
    for (const auto& line : header_lines) headers = curl().slist_append(headers, line.c_str());
  }
};

struct DiskWrite {
  std::shared_ptr<Object> object;
  std::uint64_t index;
  std::shared_ptr<Block> block;
};

// A block that another mount of the same disk cache is fetching (DiskCache::claim), waited for.
struct DiskWait {
  std::shared_ptr<Object> object;
  std::uint64_t index;
  std::shared_ptr<Block> block;  // pending, in the memory cache
  Clock::time_point give_up;     // then fetched here, claimed or not: that mount may be stopped
  Clock::time_point deadline;    // the read's: failed then
};

struct RemoteShared {
  RemoteShared(RemoteOptions o, S3Settings s)
      : options(std::move(o)),
        s3(std::move(s)),
        cache(options.cache_size),
        transport(TransportOptions{options.insecure, options.cacert, options.max_connections}) {
    if (!options.cache_dir.empty()) {
      disk = std::make_unique<DiskCache>(options.cache_dir, options.cache_dir_size, options.warn);
    }
    window_limit =
        std::clamp<std::uint64_t>(options.cache_size / 4 / block_size, 1, largest_window);
    max_in_flight =
        std::max<std::uint64_t>(options.cache_size / 2, block_size * blocks_per_request);
    disk_queue_limit = static_cast<std::size_t>(
        std::max<std::uint64_t>(disk_queue_limit, options.cache_size / 4 / block_size));
  }
  ~RemoteShared() {
    stop_disk_waiter();
    transport.quiesce();
    stop_disk_writer();
  }

  // On the transport's thread. When writing lags behind the network by the whole queue, the
  // transport waits for room (its transfers pause; the server is held back by TCP) rather
  // than skip the block: a skipped block is fetched again by every other mount of the cache
  // that wants it (its claim freed, its file missing), and eight mounts reading one object on
  // a busy machine sent 1.05-1.24x it that way, the writer starved of CPU. A block is skipped
  // only when the queue stays full for disk_room_wait (a disk that cannot keep up at all).
  void queue_disk_write(DiskWrite write) {
    std::unique_lock lock(disk_mutex);
    if (disk_queue.size() >= disk_queue_limit && !disk_room.wait_for(lock, disk_room_wait, [&] {
          return disk_queue.size() < disk_queue_limit || disk_stopping;
        })) {
      // Writing lags behind the network even so: this block is skipped (a mount waiting for
      // it fetches it itself once the claim is free).
      disk->release(*write.object->disk_folder, write.index);
      return;
    }
    disk_queue.push_back(std::move(write));
    if (!disk_thread.joinable()) {
      disk_thread = std::thread([this] { disk_writer(); });
    }
    disk_wake.notify_one();
  }
  void disk_writer() {
    // Named for `top -H` and the tests (test_disk_cache starves it on purpose).
    (void)::pthread_setname_np(::pthread_self(), "disk-cache");
    std::unique_lock lock(disk_mutex);
    while (true) {
      disk_wake.wait(lock, [&] { return disk_stopping || !disk_queue.empty(); });
      if (disk_queue.empty()) return;  // stopping, with everything written
      DiskWrite w = std::move(disk_queue.front());
      disk_queue.pop_front();
      lock.unlock();
      disk_room.notify_one();
      disk->store(*w.object->disk_folder, w.index,
                  std::span<const std::byte>(w.block->data(), w.block->length()));
      disk->release(*w.object->disk_folder, w.index);  // written (or not): others may look
      lock.lock();
    }
  }
  // Writes what is queued, then stops the thread (the next block queued starts it again).
  void stop_disk_writer() {
    std::thread thread;
    {
      std::lock_guard lock(disk_mutex);
      disk_stopping = true;
      thread = std::move(disk_thread);
    }
    disk_wake.notify_all();
    disk_room.notify_all();
    if (thread.joinable()) thread.join();
    std::lock_guard lock(disk_mutex);
    disk_queue.clear();
    disk_stopping = false;
  }

  // Blocks that another mount of the disk cache is fetching are waited for by one thread of
  // this mount (disk_waiter(), started by the first), which looks at their claims every
  // claim_poll: a block whose claim is free is loaded from its file, or, when the other
  // mount's fetch left none (it failed, or its write was skipped), fetched here under this
  // mount's claim; one still claimed at its give_up time is fetched here too, and one not
  // there at its deadline fails. So no read waits on another mount for longer than its own
  // timeout, and a stopped or stalled mount delays the others by half of it at most.
  void wait_for_disk(DiskWait wait) {
    std::lock_guard lock(wait_mutex);
    waits.push_back(std::move(wait));
    if (!wait_thread.joinable()) wait_thread = std::thread([this] { disk_waiter(); });
    wait_wake.notify_one();
  }
  void disk_waiter();
  // Fetches the blocks `ready` holds (their claims free or given up on), in runs.
  void fetch_waited(std::vector<DiskWait>& ready);
  // Stops the thread; the blocks it waited for fail (their reads fail, the next ones try again).
  void stop_disk_waiter() {
    std::thread thread;
    {
      std::lock_guard lock(wait_mutex);
      wait_stopping = true;
      thread = std::move(wait_thread);
    }
    wait_wake.notify_all();
    if (thread.joinable()) thread.join();
    std::lock_guard lock(wait_mutex);
    for (DiskWait& w : waits) {
      w.block->set_failed(ExitCode::io, "the request was cancelled");
      cache.erase(BlockKey{w.object->id, w.index}, w.block.get());
    }
    waits.clear();
    wait_stopping = false;
  }

  RemoteOptions options;
  S3Settings s3;
  BlockCache cache;
  std::unique_ptr<DiskCache> disk;
  std::uint64_t window_limit = largest_window;  // blocks
  std::uint64_t max_in_flight = 0;              // bytes of readahead requested, not yet there
  std::atomic<std::uint64_t> in_flight{0};
  std::atomic<std::uint32_t> next_id{0};

  // The server is taken as failing until failing_until (steady_ms()), from the moment a request
  // gave up for want of it, or a read waited the whole timeout for its bytes. Meanwhile reads
  // take what the caches hold and fail at once for the rest, without waiting: the kernel retries
  // a failed read at once, page by page, and the reads queued behind the serving threads that
  // waited would each wait again (a read would then end long after its timeout). One request
  // at a time (`recovering`) asks the server again in the background for blocks a read wanted,
  // with retries; once a read request succeeds, reads fetch again.
  std::atomic<std::int64_t> failing_until{0};
  std::atomic<bool> recovering{false};
  std::mutex failure_mutex;
  std::string failure;          // why the server is taken as failing
  std::int64_t failure_at = 0;  // steady_ms() of it

  bool failing() const noexcept {
    return steady_ms() < failing_until.load(std::memory_order_relaxed);
  }
  void server_failed(const std::string& why) {
    const std::int64_t now = steady_ms();
    {
      std::lock_guard lock(failure_mutex);
      failure = why;
      failure_at = now;
    }
    failing_until.store(now + options.timeout.count(), std::memory_order_relaxed);
  }
  void server_answered() noexcept { failing_until.store(0, std::memory_order_relaxed); }
  // The error of a read that needs the server while it is taken as failing.
  Error not_waited_for() {
    std::lock_guard lock(failure_mutex);
    return Error(ExitCode::unreachable,
                 fmt::format("not waited for: {}, {:.1f} s ago; reads fail at once until the "
                             "server answers again",
                             failure, static_cast<double>(steady_ms() - failure_at) / 1000.0));
  }

  std::mutex disk_mutex;
  std::condition_variable disk_wake;
  std::condition_variable disk_room;  // a block left the queue
  std::deque<DiskWrite> disk_queue;
  std::size_t disk_queue_limit = 64;  // blocks; a quarter of the memory cache, when larger
  bool disk_stopping = false;
  std::thread disk_thread;

  std::mutex wait_mutex;
  std::condition_variable wait_wake;
  std::vector<DiskWait> waits;
  bool wait_stopping = false;
  std::thread wait_thread;

  // Last: destroyed first, so that the jobs it finishes on the way still find the rest.
  HttpTransport transport;
};

namespace {

// A failure of one attempt, and whether trying again may help.
struct Failure {
  ExitCode code = ExitCode::io;
  std::string message;
  bool retry = false;
  bool changed = false;  // the object is no longer the one pinned
  // The answer's framing broke: discarded with its connection, asked again on a fresh one up to
  // max_protocol_attempts answers in all (retry says whether it may be).
  bool protocol = false;
};

// One ranged GET, retried with backoff until it succeeds, fails for good, or its deadline (the
// transport ends it there, in whichever state it is).
//   probe: the first request at open, learning size and identity (and block 0);
//   check: at open too, beside the probe, bytes that do not start at 0 which the probe's answer
//     also holds (range_check_first..range_check_end): whether the server answers such ranges
//     with the object's bytes (RemoteContext::open compares them);
//   validate: a one-byte request checking that the identity still holds;
//   read: blocks of the cache, filled in order, all made ready once the answer ended well (an
//     answer found to be more or less than it declared is discarded whole).
class RangeFetch final : public Job, public std::enable_shared_from_this<RangeFetch> {
 public:
  enum class Mode { probe, check, validate, read };

  RangeFetch(RemoteShared& shared, std::shared_ptr<Object> object, Mode mode, std::uint64_t offset,
             std::uint64_t length, unsigned max_attempts, Clock::time_point until)
      : shared_(shared),
        object_(std::move(object)),
        mode_(mode),
        offset_(offset),
        length_(length),
        max_attempts_(max_attempts) {
    deadline = until;
  }

  // read: the blocks [first, first + blocks.size()) the fetch fills (offset_ = first's start).
  void set_blocks(std::uint64_t first, std::vector<std::shared_ptr<Block>> blocks) {
    first_block_ = first;
    blocks_ = std::move(blocks);
  }
  void count_in_flight(std::uint64_t bytes) { in_flight_ = bytes; }
  // The one request that asks a failing server again (RemoteShared::recovering).
  void set_recovery() { recovery_ = true; }

  // probe, check: waits for the outcome. Returns the failure, if any.
  std::optional<Failure> wait() {
    std::unique_lock lock(done_mutex_);
    done_cv_.wait(lock, [&] { return done_; });
    return final_failure_;
  }
  std::string& body() { return body_; }
  std::uint64_t total() const { return total_; }
  const std::string& etag() const { return etag_; }
  const std::string& last_modified() const { return last_modified_; }

  bool start(CURL* easy) override {
    reset_response();
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (remaining.count() <= 0) return false;
    const Object& o = *object_;
    easy_setopt(easy, CURLOPT_URL, o.request_url.c_str());
    const std::string range = fmt::format("{}-{}", offset_, offset_ + length_ - 1);
    easy_setopt(easy, CURLOPT_RANGE, range.c_str());  // copied by curl
    if (o.headers != nullptr) easy_setopt(easy, CURLOPT_HTTPHEADER, o.headers);
    if (!o.sigv4.empty()) {
      easy_setopt(easy, CURLOPT_AWS_SIGV4, o.sigv4.c_str());
      easy_setopt(easy, CURLOPT_USERNAME, o.user.c_str());
      easy_setopt(easy, CURLOPT_PASSWORD, o.password.c_str());
    }
    if (o.follow_redirects) {
      easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
      easy_setopt(easy, CURLOPT_MAXREDIRS, 5L);
      easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, o.redirect_protocols.c_str());
    }
    easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    // The transport ends the request at its deadline; curl's own limit, a second later, only
    // backs it up (curl before 8.8 never applies it to a request waiting for a connection).
    easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(remaining.count() + 1000));
    easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout_ms);
    // After a protocol error: not on a connection the pool kept (it may hold what spoilt it).
    easy_setopt(easy, CURLOPT_FRESH_CONNECT, fresh_connection_ ? 1L : 0L);
    const long stall = std::clamp<long>(static_cast<long>(shared_.options.timeout.count() / 3000),
                                        1, stall_seconds_max);
    easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, minimum_rate(shared_.options.timeout));
    easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, stall);
    easy_setopt(easy, CURLOPT_HEADERFUNCTION, &RangeFetch::on_header);
    easy_setopt(easy, CURLOPT_HEADERDATA, this);
    easy_setopt(easy, CURLOPT_WRITEFUNCTION, &RangeFetch::on_body);
    easy_setopt(easy, CURLOPT_WRITEDATA, this);
    error_buffer_[0] = '\0';
    easy_setopt(easy, CURLOPT_ERRORBUFFER, error_buffer_);
    ++attempt_;
    return true;
  }

  void finish(CURLcode result, CURL* easy) override {
    if (easy != nullptr) {
      easy_setopt(easy, CURLOPT_ERRORBUFFER, nullptr);
      easy_setopt(easy, CURLOPT_HTTPHEADER, nullptr);
    }
    if (not_needed_ && !cancelled) {
      succeed();
      return;
    }
    // Every byte asked is here: the transfer ended, or was cut after them (cut_ below), and
    // nothing came after the answer's end on its connection.
    if (accepted_ && received_ == wanted_ && !surplus &&
        (result == CURLE_OK || (result == CURLE_WRITE_ERROR && cut_))) {
      succeed();
      return;
    }
    Failure f = failure_ ? *failure_ : describe(result);
    if (surplus && !failure_ && accepted_ && received_ == wanted_) {
      f = Failure{ExitCode::io,
                  fmt::format("the server sent more bytes than its answer declared ({} bytes): "
                              "the answer and its connection were discarded",
                              declared_),
                  true, false, true};
    }
    if (status_ >= 400) add_error_code(f);
    if (result == CURLE_OPERATION_TIMEDOUT && Clock::now() >= deadline && !failure_) {
      // Ended by the transport at the deadline (or by curl's backup a second later).
      f = Failure{
          ExitCode::unreachable,
          fmt::format(
              "no answer within the timeout ({} s{})", shared_.options.timeout.count() / 1000.0,
              last_cause_.empty() ? std::string{} : fmt::format("; before: {}", last_cause_)),
          false};
      server_failed_ = true;
    }
    if (cancelled) f = {ExitCode::io, "the request was cancelled", false, false};
    if (f.changed) object_->mark_changed(f.message);
    if (f.protocol) {
      // Discarded with its connection; asked again on a fresh one, a bounded number of times.
      fresh_connection_ = true;
      if (++protocol_errors_ >= max_protocol_attempts) {
        f.retry = false;
        f.message += fmt::format(" ({} answers, each on a fresh connection after the first)",
                                 protocol_errors_);
      }
    } else {
      server_failed_ = server_failed_ || f.retry;
    }
    if (f.retry && attempt_ < max_attempts_) {
      auto backoff = std::chrono::milliseconds(100 << std::min(attempt_ - 1, 4u));
      backoff += std::chrono::milliseconds(jitter(static_cast<int>(backoff.count() / 2)));
      if (retry_after_) {
        // Capped: a hostile value must not overflow the clock (a day is past any timeout).
        const auto asked = std::chrono::seconds(std::min<std::uint64_t>(*retry_after_, 86400));
        if (Clock::now() + asked >= deadline) {
          f.message += fmt::format(" (the server asked to retry after {} s, past the timeout)",
                                   *retry_after_);
          fail(f);
          return;
        }
        backoff = std::max<std::chrono::milliseconds>(backoff, asked);
      }
      if (Clock::now() + backoff < deadline && !cancelled) {
        last_cause_ = f.message;
        not_before = Clock::now() + backoff;
        shared_.transport.submit(shared_from_this());
        return;
      }
    }
    if (f.retry && attempt_ > 1) f.message += fmt::format(" ({} tries)", attempt_);
    fail(f);
  }

 private:
  void reset_response() {
    status_ = 0;
    accepted_ = false;
    cut_ = false;
    wanted_ = 0;
    declared_ = 0;
    received_ = 0;
    failure_.reset();
    retry_after_.reset();
    content_range_.reset();
    content_length_.reset();
    response_etag_.clear();
    response_last_modified_.clear();
    content_encoding_.clear();
    error_body_.clear();
    if (mode_ != Mode::read) body_.clear();
  }

  static std::size_t on_header(char* data, std::size_t size, std::size_t count, void* self) {
    auto* f = static_cast<RangeFetch*>(self);
    const std::size_t n = size * count;
    const std::string_view line(data, n);
    if (auto status = http::parse_status_line(line)) {
      // A new response (after a redirect, or a 100 Continue): forget the previous one's fields.
      const auto keep_attempt_state = f->received_;
      f->reset_response();
      f->received_ = keep_attempt_state;
      f->status_ = *status;
      return n;
    }
    if (auto field = http::parse_header_line(line)) {
      if (field->name == "content-range") {
        f->content_range_ = http::parse_content_range(field->value);
      } else if (field->name == "content-length") {
        f->content_length_ = http::parse_content_length(field->value);
      } else if (field->name == "etag") {
        f->response_etag_ = field->value;
      } else if (field->name == "last-modified") {
        f->response_last_modified_ = field->value;
      } else if (field->name == "retry-after") {
        const auto date = curl().getdate(field->value.c_str(), nullptr);
        f->retry_after_ =
            http::parse_retry_after(field->value, static_cast<std::int64_t>(::time(nullptr)),
                                    date >= 0 ? std::optional<std::int64_t>(date) : std::nullopt);
      } else if (field->name == "content-encoding") {
        f->content_encoding_ = lower(field->value);
      }
      return n;
    }
    // The empty line that ends the header: judge the response before any body byte.
    if (f->status_ >= 100 && f->status_ < 200) return n;
    if (f->status_ >= 300 && f->status_ < 400 && f->object_->follow_redirects) return n;
    f->judge();
    // A failure with nothing to learn from the body stops the transfer now (a 200 to a range
    // would otherwise download the whole object); so does a check that is not needed.
    if ((f->failure_ && !f->want_error_body()) || f->not_needed_) return 0;
    return n;
  }

  static std::size_t on_body(char* data, std::size_t size, std::size_t count, void* self) {
    auto* f = static_cast<RangeFetch*>(self);
    const std::size_t n = size * count;
    if (!f->accepted_) {
      // An error's body, kept for its <Code>; a server that goes on past that is cut off.
      const std::size_t room = max_error_body - std::min(max_error_body, f->error_body_.size());
      if (room == 0) return 0;
      f->error_body_.append(data, std::min(n, room));
      return n;
    }
    if (n > f->declared_ - f->received_) {
      f->failure_ = Failure{ExitCode::io, "the server sent more bytes than its answer declared",
                            true, false, true};
      return 0;
    }
    // Of an answer that holds more than asked (judge_range()), only the bytes asked are taken:
    // returning fewer than `n` ends the transfer there, and what follows is never read.
    const std::size_t take =
        static_cast<std::size_t>(std::min<std::uint64_t>(n, f->wanted_ - f->received_));
    if (take > 0) {
      if (f->mode_ != Mode::read) {
        f->body_.append(data, take);
        f->received_ += take;
      } else {
        f->store(reinterpret_cast<const std::byte*>(data), take);
      }
    }
    if (take < n) f->cut_ = true;
    return take;
  }

  // Copies body bytes into the blocks (made ready by succeed(), once the answer ended well).
  void store(const std::byte* data, std::size_t n) {
    std::uint64_t position = offset_ - first_block_ * block_size + received_;
    received_ += n;
    while (n > 0) {
      const std::size_t k = static_cast<std::size_t>(position / block_size);
      const std::size_t within = static_cast<std::size_t>(position % block_size);
      Block& block = *blocks_[k];
      const std::size_t take = std::min<std::size_t>(n, block.length() - within);
      std::memcpy(block.data() + within, data, take);
      data += take;
      n -= take;
      position += take;
    }
  }

  void block_done(std::size_t k) {
    Block& block = *blocks_[k];
    if (block.state() != Block::State::pending) return;
    block.set_ready();
    if (in_flight_ > 0) {
      const std::uint64_t part = std::min<std::uint64_t>(in_flight_, block.length());
      in_flight_ -= part;
      shared_.in_flight.fetch_sub(part, std::memory_order_relaxed);
    }
    if (shared_.disk && object_->disk_folder) {
      shared_.queue_disk_write({object_, first_block_ + k, blocks_[k]});
    }
  }

  bool want_error_body() const { return status_ >= 400 && !failure_->changed; }
  // The requests at open, before the object's identity is known.
  bool opening() const { return mode_ == Mode::probe || mode_ == Mode::check; }

  // The verdict on a response's status and header fields, before its body.
  void judge() {
    const Object& o = *object_;
    auto fail_with = [&](ExitCode code, std::string message, bool retry, bool changed = false,
                         bool protocol = false) {
      failure_ = Failure{code, std::move(message), retry, changed, protocol};
    };
    if (mode_ == Mode::check && content_range_ && content_range_->total &&
        *content_range_->total <= block_size) {
      // An object of one block: every later request is one from byte 0. Nothing to check.
      not_needed_ = true;
      return;
    }
    if (!content_encoding_.empty() && content_encoding_ != "identity") {
      return fail_with(
          ExitCode::io,
          fmt::format("the server sent the bytes encoded ({})", quote(content_encoding_)), false);
    }
    if (status_ == 206 || status_ == 200) {
      // What the answer holds, by the one rule for answers other than the range asked.
      auto verdict = http::judge_range(status_, content_range_, content_length_,
                                       {offset_, length_, mode_ == Mode::probe}, block_size);
      if (auto* why = std::get_if<std::string>(&verdict)) {
        // A 200 to the first request says that the server ignores ranges, which asking again
        // does not change; any other answer than the range asked is a protocol error.
        const bool ignores_ranges = status_ == 200 && mode_ == Mode::probe;
        return fail_with(ExitCode::io, std::move(*why), !ignores_ranges, false, !ignores_ranges);
      }
      const auto& answer = std::get<http::RangeAnswer>(verdict);
      if (!opening() && answer.total != o.size) {
        return fail_with(ExitCode::io,
                         fmt::format("its size is now {} bytes, not {}: it changed on the "
                                     "server since it was opened",
                                     answer.total, o.size),
                         false, true);
      }
      total_ = answer.total;
      wanted_ = answer.take;
      declared_ = answer.declared;
      if (mode_ == Mode::probe) length_ = wanted_;
      etag_ = response_etag_;
      last_modified_ = response_last_modified_;
      if (!opening()) {
        if (auto why = identity_broken()) return fail_with(ExitCode::io, *why, false, true);
      }
      accepted_ = true;
      return;
    }
    if (status_ == 416 && mode_ == Mode::probe && content_range_ && content_range_->total &&
        *content_range_->total == 0) {
      total_ = 0;  // an empty object: no byte to ask for
      etag_ = response_etag_;
      last_modified_ = response_last_modified_;
      accepted_ = true;
      return;
    }
    if (!opening() && (status_ == 404 || status_ == 410 || status_ == 412 || status_ == 416)) {
      return fail_with(
          ExitCode::io,
          fmt::format("it changed on the server since it was opened (HTTP {})", status_), false,
          true);
    }
    if (status_ == 401 || status_ == 403) {
      return fail_with(ExitCode::access_denied, fmt::format("access denied (HTTP {})", status_),
                       false);
    }
    if (status_ == 404 || status_ == 410) {
      return fail_with(ExitCode::io, fmt::format("not found (HTTP {})", status_), false);
    }
    if (status_ == 408 || status_ == 425 || status_ == 429 || status_ == 500 || status_ == 502 ||
        status_ == 503 || status_ == 504) {
      return fail_with(ExitCode::unreachable, fmt::format("the server answered HTTP {}", status_),
                       true);
    }
    if (status_ == 0) return fail_with(ExitCode::unreachable, "no HTTP status line", true);
    return fail_with(ExitCode::io, fmt::format("the server answered HTTP {}", status_), false);
  }

  // Why this answer is not known to come from the object pinned at open, or nothing. The
  // validator pinned (the ETag, else Last-Modified) must come back the same: an answer without
  // it (a server behind a balancer whose other backends send none, or ignore If-Match) cannot be
  // told from another object's, and is refused like a changed one.
  std::optional<std::string> identity_broken() const {
    const Object& o = *object_;
    const bool by_etag = !o.etag.empty();
    if (!by_etag && o.last_modified.empty()) return std::nullopt;  // the size alone, checked above
    const char* name = by_etag ? "ETag" : "Last-Modified";
    const std::string& pinned = by_etag ? o.etag : o.last_modified;
    const std::string& now = by_etag ? response_etag_ : response_last_modified_;
    if (now.empty()) {
      return fmt::format(
          "the server answered without the {} it gave when the object was opened "
          "({}): the answer cannot be told from another object's",
          name, quote(pinned));
    }
    if (now != pinned) {
      return fmt::format("it changed on the server since it was opened ({} {} then, {} now)", name,
                         quote(pinned), quote(now));
    }
    return std::nullopt;
  }

  // S3 and its kin say why in an XML body: <Code>SignatureDoesNotMatch</Code>.
  void add_error_code(Failure& f) const {
    const auto open = error_body_.find("<Code>");
    const auto close = error_body_.find("</Code>");
    if (open != std::string::npos && close != std::string::npos && close > open) {
      f.message += fmt::format(": {}", quote(error_body_.substr(open + 6, close - open - 6), 64));
    }
  }

  Failure describe(CURLcode result) {
    if (status_ >= 400 || (result == CURLE_OK && !accepted_)) {
      return {ExitCode::io, fmt::format("HTTP {}", status_), false};
    }
    if (result == CURLE_OK) {
      // Its Content-Length said less than its Content-Range.
      return {
          ExitCode::io,
          fmt::format("the answer ended after {} of the {} bytes it declared", received_, wanted_),
          true, false, true};
    }
    std::string what = error_buffer_[0] != '\0' ? error_buffer_ : curl().easy_strerror(result);
    what = object_->scrub(what);
    if (result == CURLE_PARTIAL_FILE) {
      return {ExitCode::unreachable,
              fmt::format("the answer ended after {} of the {} bytes it declared ({})", received_,
                          declared_, what),
              true, false, true};
    }
    // Where an answer should begin, bytes that are not one ("Received HTTP/0.9 when not
    // allowed": what an earlier answer sent past its end, on a connection kept for reuse).
    // A redirect to a protocol other than HTTP(S) is refused with the same code, after a 3xx.
    if (result == CURLE_WEIRD_SERVER_REPLY ||
        (result == CURLE_UNSUPPORTED_PROTOCOL && (status_ < 300 || status_ >= 400))) {
      return {ExitCode::io, fmt::format("the server's answer is not HTTP ({})", what), true, false,
              true};
    }
    switch (result) {
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CERTPROBLEM:
      case CURLE_SSL_ISSUER_ERROR:
        return {ExitCode::unreachable,
                fmt::format("TLS: {} (-o cacert=FILE names the CA to trust; -o insecure skips "
                            "the check)",
                            what),
                false};
      case CURLE_URL_MALFORMAT:
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_TOO_MANY_REDIRECTS:
      case CURLE_OUT_OF_MEMORY:
        return {ExitCode::io, what, false};
      case CURLE_ABORTED_BY_CALLBACK:  // not started: the deadline had passed
        return {ExitCode::unreachable,
                fmt::format("no answer within the timeout ({} s)",
                            shared_.options.timeout.count() / 1000.0),
                false};
      default:
        return {ExitCode::unreachable, what, true};
    }
  }

 public:
  // The job could not be submitted: its blocks fail now.
  void abandon(const std::string& why) {
    cancelled = true;  // not the server's failure: nothing to remember of it
    fail(Failure{ExitCode::io, "cannot start a request: " + why, false});
  }

 private:
  void succeed() {
    if (mode_ == Mode::read) {
      // Only bytes read say the server serves again: a one-byte check gets through a server
      // that trickles.
      shared_.server_answered();
      for (std::size_t k = 0; k < blocks_.size(); ++k) block_done(k);
    } else {
      object_->validated_at = steady_ms();
      object_->validating = false;
    }
    if (recovery_) shared_.recovering = false;
    release_in_flight();
    complete(std::nullopt);
  }

  void fail(Failure f) {
    f.message = object_->scrub(std::move(f.message));
    // The last attempt may have been one the deadline stopped before it started: the server
    // failed all the same. Only a read's request says so: a background check of the identity
    // makes one attempt, and one lost answer must not fail the reads that come after it.
    if ((f.retry || server_failed_) && !cancelled && mode_ == Mode::read) {
      shared_.server_failed(f.message);
    }
    if (mode_ == Mode::read) {
      for (std::size_t k = 0; k < blocks_.size(); ++k) {
        auto& block = blocks_[k];
        if (block->state() != Block::State::pending) continue;
        block->set_failed(f.code, f.message);
        // A failure of the server's stays in the cache for failure_memory (RemoteSource::block());
        // a cancelled request's blocks are fetched again by the next read.
        if (cancelled) shared_.cache.erase(BlockKey{object_->id, first_block_ + k}, block.get());
        // Another mount waiting for it fetches it itself.
        if (shared_.disk && object_->disk_folder) {
          shared_.disk->release(*object_->disk_folder, first_block_ + k);
        }
      }
    }
    if (mode_ == Mode::validate) object_->validating = false;
    if (recovery_) shared_.recovering = false;
    release_in_flight();
    complete(std::move(f));
  }

  void release_in_flight() {
    if (in_flight_ > 0) shared_.in_flight.fetch_sub(in_flight_, std::memory_order_relaxed);
    in_flight_ = 0;
  }

  void complete(std::optional<Failure> f) {
    {
      std::lock_guard lock(done_mutex_);
      final_failure_ = std::move(f);
      done_ = true;
    }
    done_cv_.notify_all();
  }

  RemoteShared& shared_;
  std::shared_ptr<Object> object_;
  Mode mode_;
  std::uint64_t offset_;
  std::uint64_t length_;
  unsigned max_attempts_;
  unsigned attempt_ = 0;
  bool server_failed_ = false;     // an attempt failed in a way a retry may mend
  unsigned protocol_errors_ = 0;   // answers discarded for their framing
  bool fresh_connection_ = false;  // since the first of them, each attempt on a new connection
  std::string last_cause_;         // why the previous attempt failed
  bool recovery_ = false;
  std::uint64_t first_block_ = 0;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::uint64_t in_flight_ = 0;

  // The current attempt's response.
  int status_ = 0;
  bool accepted_ = false;
  bool cut_ = false;            // the answer held more than asked: cut after the bytes asked
  bool not_needed_ = false;     // check: the object is of one block, nothing to check
  std::uint64_t wanted_ = 0;    // bytes taken from the body (judge_range())
  std::uint64_t declared_ = 0;  // bytes the body says it holds
  std::uint64_t received_ = 0;
  std::optional<Failure> failure_;
  std::optional<std::uint64_t> retry_after_;
  std::optional<http::ContentRange> content_range_;
  std::optional<std::uint64_t> content_length_;
  std::string response_etag_;
  std::string response_last_modified_;
  std::string content_encoding_;
  std::string error_body_;
  char error_buffer_[CURL_ERROR_SIZE] = {};

  // What the probe learnt.
  std::uint64_t total_ = 0;
  std::string etag_;
  std::string last_modified_;
  std::string body_;

  std::mutex done_mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::optional<Failure> final_failure_;
};

// Fetches the new blocks [first, first + blocks.size()) of `object` in requests of
// blocks_per_request, each ended at `deadline`; `recovery`: the one request that asks a failing
// server again (RemoteShared::recovering).
void fetch_blocks(RemoteShared& shared, const std::shared_ptr<Object>& object, std::uint64_t first,
                  std::vector<std::shared_ptr<Block>> blocks, bool readahead,
                  Clock::time_point deadline, bool recovery) {
  for (std::size_t at = 0; at < blocks.size(); at += blocks_per_request) {
    const std::size_t n = std::min<std::size_t>(blocks_per_request, blocks.size() - at);
    std::vector<std::shared_ptr<Block>> part(blocks.begin() + at, blocks.begin() + at + n);
    const std::uint64_t offset = (first + at) * block_size;
    std::uint64_t length = 0;
    for (const auto& b : part) length += b->length();
    auto job = std::make_shared<RangeFetch>(shared, object, RangeFetch::Mode::read, offset, length,
                                            ~0u, deadline);
    job->set_blocks(first + at, std::move(part));
    if (recovery) job->set_recovery();
    if (readahead) {
      shared.in_flight.fetch_add(length, std::memory_order_relaxed);
      job->count_in_flight(length);
    }
    try {
      shared.transport.submit(job);
    } catch (const std::exception& e) {
      job->abandon(e.what());  // no thread to fetch with: its blocks fail rather than wait
    }
  }
}

}  // namespace

void RemoteShared::disk_waiter() {
  std::unique_lock lock(wait_mutex);
  while (!wait_stopping) {
    if (waits.empty()) {
      wait_wake.wait(lock, [&] { return wait_stopping || !waits.empty(); });
      continue;
    }
    wait_wake.wait_for(lock, claim_poll);
    if (wait_stopping) break;
    std::vector<DiskWait> current;
    current.swap(waits);
    lock.unlock();
    std::vector<DiskWait> still;
    std::vector<DiskWait> ready;
    const auto now = Clock::now();
    for (DiskWait& w : current) {
      const DiskCache::Folder& folder = *w.object->disk_folder;
      if (now >= w.deadline) {
        w.block->set_failed(
            ExitCode::unreachable,
            fmt::format("no answer from the server within {} s (bytes {}..{}, which another "
                        "mount of the cache was fetching)",
                        options.timeout.count() / 1000.0, w.index * block_size,
                        w.index * block_size + w.block->length()));
        cache.erase(BlockKey{w.object->id, w.index}, w.block.get());
        continue;
      }
      const bool mine = disk->claim(folder, w.index) == DiskCache::Claim::mine;
      if (!mine && now < w.give_up) {
        still.push_back(std::move(w));
        continue;
      }
      if (disk->load(folder, w.index, std::span<std::byte>(w.block->data(), w.block->length()))) {
        if (mine) disk->release(folder, w.index);
        w.block->set_ready();
        continue;
      }
      ready.push_back(std::move(w));  // the claim (when mine) held until written or failed
    }
    fetch_waited(ready);
    lock.lock();
    for (DiskWait& w : still) waits.push_back(std::move(w));
  }
}

void RemoteShared::fetch_waited(std::vector<DiskWait>& ready) {
  std::sort(ready.begin(), ready.end(), [](const DiskWait& a, const DiskWait& b) {
    return std::tie(a.object->id, a.index) < std::tie(b.object->id, b.index);
  });
  for (std::size_t i = 0; i < ready.size();) {
    std::size_t j = i + 1;
    while (j < ready.size() && ready[j].object == ready[i].object &&
           ready[j].index == ready[j - 1].index + 1) {
      ++j;
    }
    std::vector<std::shared_ptr<Block>> run;
    Clock::time_point deadline = ready[i].deadline;
    for (std::size_t k = i; k < j; ++k) {
      run.push_back(ready[k].block);
      deadline = std::min(deadline, ready[k].deadline);
    }
    fetch_blocks(*this, ready[i].object, ready[i].index, std::move(run), false, deadline, false);
    i = j;
  }
}

namespace {

// Sequential-read detection per source: a few streams, each where a reader has read up to and
// how far ahead of it blocks are fetched.
struct Stream {
  std::uint64_t start = 0;         // where the stream began, in bytes
  std::uint64_t end = 0;           // the end of the furthest read, in bytes
  std::uint64_t window = 0;        // blocks to keep fetched ahead of `end`; 0: none (random)
  std::uint64_t issued_until = 0;  // blocks below this were asked for
  std::uint64_t used = 0;          // for replacing the least recently used stream
  bool live = false;
};
// A read continues a stream when it starts at most this far behind or ahead of the stream's
// end: the kernel's readahead comes as several reads of up to 512 KiB, answered by several
// threads in any order.
constexpr std::uint64_t stream_slack = 1 << 20;
// Reads shorter than this never start or grow a readahead: a format's scattered header reads
// at mount stay requests of one block.
constexpr std::uint64_t min_sequential_read = 4096;
// How far the kernel's readahead may read past what a reader asked for (two windows of a URL's
// 256 KiB, main.cpp; a larger -o read_ahead_kb reads further, and is then taken for a reader
// that went on): a read unit counts as left behind only once the stream is this far past it.
constexpr std::uint64_t unit_slack = 1 << 20;

class RemoteSource final : public ByteSource {
 public:
  RemoteSource(std::shared_ptr<RemoteShared> shared, std::shared_ptr<Object> object)
      : shared_(std::move(shared)), object_(std::move(object)) {
    block_count_ = (object_->size + block_size - 1) / block_size;
  }

  std::uint64_t size() const override { return object_->size; }
  const std::string& name() const noexcept override { return object_->name; }
  SourceTimes times() const noexcept override { return object_->times; }
  bool remote() const noexcept override { return true; }
  std::string change_reason() const override { return object_->reason(); }

  // Kept sorted, without overlaps (of two that overlap, the first is kept), for unit_at().
  void set_read_units(ReadUnits units) override {
    std::sort(units.begin(), units.end());
    ReadUnits kept;
    for (const auto& u : units) {
      if (u.second > u.first && (kept.empty() || u.first >= kept.back().second)) {
        kept.push_back(u);
      }
    }
    std::lock_guard lock(streams_mutex_);
    units_ = std::move(kept);
  }

  bool unchanged(bool check_path) const noexcept override {
    if (object_->changed.load(std::memory_order_acquire)) return false;
    if (check_path &&
        steady_ms() - object_->validated_at.load() >
            std::chrono::duration_cast<std::chrono::milliseconds>(revalidate_every).count()) {
      revalidate();
    }
    return true;
  }

 private:
  // In the background: opens are not held up by a slow server; a change seen marks the source.
  void revalidate() const noexcept {
    if (object_->validating.exchange(true)) return;
    try {
      auto job = std::make_shared<RangeFetch>(*shared_, object_, RangeFetch::Mode::validate, 0, 1,
                                              1, Clock::now() + shared_->options.timeout);
      if (object_->size == 0) {
        object_->validating = false;
        return;
      }
      shared_->transport.submit(std::move(job));
    } catch (...) {
      object_->validating = false;
    }
  }

  std::uint64_t block_length(std::uint64_t index) const {
    return std::min(block_size, object_->size - index * block_size);
  }

  // The block at `index` from the caches: ready, pending (fetched by someone), or new (to be
  // fetched by the caller: `created`).
  std::shared_ptr<Block> block(std::uint64_t index, bool& created) const {
    const BlockKey key{object_->id, index};
    const auto length = static_cast<std::size_t>(block_length(index));
    auto [b, is_new] = shared_->cache.acquire(key, length);
    if (!is_new && b->state() == Block::State::failed &&
        Clock::now() - b->failed_at() >= failure_memory) {
      shared_->cache.erase(key, b.get());  // failed a while ago: asked for again
      std::tie(b, is_new) = shared_->cache.acquire(key, length);
    }
    created = false;
    if (!is_new) return b;
    if (shared_->disk && object_->disk_folder) {
      DiskCache& disk = *shared_->disk;
      const DiskCache::Folder& folder = *object_->disk_folder;
      const std::span<std::byte> bytes(b->data(), b->length());
      if (disk.load(folder, index, bytes)) {
        b->set_ready();
        return b;
      }
      if (disk.claim(folder, index) == DiskCache::Claim::theirs) {
        // Another mount fetches it: waited for, and read from its file.
        const auto now = Clock::now();
        shared_->wait_for_disk({object_, index, b, now + shared_->options.timeout / 2,
                                now + shared_->options.timeout});
        return b;
      }
      // Claimed here; its file may have been written since it was looked for.
      if (disk.load(folder, index, bytes)) {
        disk.release(folder, index);
        b->set_ready();
        return b;
      }
    }
    created = true;  // claimed, when there is a disk cache: released once written or failed
    return b;
  }

  void fetch(std::uint64_t first, std::vector<std::shared_ptr<Block>> blocks, bool readahead,
             Clock::time_point deadline, bool recovery = false) const {
    fetch_blocks(*shared_, object_, first, std::move(blocks), readahead, deadline, recovery);
  }

  // New blocks that no request will fill (the server is taken as failing): failed, so that a
  // reader that found one meanwhile does not wait for it, and out of the cache, so that the
  // next read makes them anew.
  void drop(std::uint64_t first, const std::vector<std::shared_ptr<Block>>& blocks) const {
    const Error why = shared_->not_waited_for();
    for (std::size_t k = 0; k < blocks.size(); ++k) {
      blocks[k]->set_failed(why.code(), why.what());
      shared_->cache.erase(BlockKey{object_->id, first + k}, blocks[k].get());
      if (shared_->disk && object_->disk_folder) {
        shared_->disk->release(*object_->disk_folder, first + k);
      }
    }
  }

  // Readahead: asks for the blocks of [from, to) that no cache holds, in runs of consecutive
  // ones, while what is on its way stays under max_in_flight.
  void fetch_missing(std::uint64_t from, std::uint64_t to) const {
    const auto deadline = Clock::now() + shared_->options.timeout;
    std::vector<std::shared_ptr<Block>> run;
    std::uint64_t run_first = from;
    for (std::uint64_t i = from; i < to; ++i) {
      if (shared_->in_flight.load(std::memory_order_relaxed) >= shared_->max_in_flight) {
        break;  // enough is on its way: the next read asks for the rest
      }
      bool created = false;
      auto b = block(i, created);
      if (created) {
        if (run.empty()) run_first = i;
        run.push_back(std::move(b));
      } else if (!run.empty()) {
        fetch(run_first, std::move(run), true, deadline);
        run.clear();
      }
    }
    if (!run.empty()) fetch(run_first, std::move(run), true, deadline);
  }

  // The blocks [first, last] of one read, each held from the moment it is found in the memory
  // cache, loaded from the disk cache or made new, until the read has copied from it: a block
  // nobody holds may be evicted at any moment by another reader's acquire, so a read never
  // looks a block up twice (looking again, it found nothing: an EIO with a healthy server). New
  // ones are fetched, in requests ended at `deadline`; while the server is taken as failing,
  // only the first run of them is asked for, in the background (retried until the timeout), if
  // no such request is under way, and the others are dropped.
  std::vector<std::shared_ptr<Block>> read_blocks(std::uint64_t first, std::uint64_t last,
                                                  Clock::time_point deadline, bool failing) const {
    std::vector<std::shared_ptr<Block>> held;
    held.reserve(static_cast<std::size_t>(last - first + 1));
    std::vector<std::shared_ptr<Block>> run;
    std::uint64_t run_first = first;
    auto flush = [&] {
      if (run.empty()) return;
      if (!failing) {
        fetch(run_first, std::move(run), false, deadline);
      } else if (!shared_->recovering.exchange(true)) {
        if (run.size() > blocks_per_request) {
          drop(run_first + blocks_per_request,
               std::vector<std::shared_ptr<Block>>(run.begin() + blocks_per_request, run.end()));
          run.resize(blocks_per_request);
        }
        fetch(run_first, std::move(run), false, Clock::now() + shared_->options.timeout, true);
      } else {
        drop(run_first, run);
      }
      run.clear();
    };
    for (std::uint64_t i = first; i <= last; ++i) {
      bool created = false;
      held.push_back(block(i, created));
      if (created) {
        if (run.empty()) run_first = i;
        run.push_back(held.back());
      } else {
        flush();
      }
    }
    flush();
    return held;
  }

  // Sequential reads grow a readahead window; others fetch only what they read.
  void read_ahead(std::uint64_t offset, std::uint64_t length) const {
    const std::uint64_t end = offset + length;
    std::uint64_t from = 0;
    std::uint64_t to = 0;
    {
      std::lock_guard lock(streams_mutex_);
      ++tick_;
      Stream* match = nullptr;
      for (Stream& s : streams_) {
        if (s.live && offset + stream_slack >= s.end && offset <= s.end + stream_slack) {
          match = &s;
          break;
        }
      }
      if (match == nullptr) {
        // A small read (a zip's local header located on first use, a .npy header) is no
        // sequential reader: it starts no stream that the bytes read next would continue.
        if (length < min_sequential_read) return;
        Stream* oldest = &streams_[0];
        for (Stream& s : streams_) {
          if (!s.live || s.used < oldest->used) oldest = &s;
          if (!s.live) break;
        }
        *oldest = Stream{sibling_start(offset), end, 0, 0, tick_, true};
        return;
      }
      Stream& s = *match;
      s.used = tick_;
      if (end <= s.end || length < min_sequential_read) return;  // no progress: nothing to do
      s.end = end;
      s.window = std::clamp<std::uint64_t>((s.end - s.start) / block_size, first_window,
                                           std::max(first_window, shared_->window_limit));
      s.window = std::min(s.window, shared_->window_limit);
      const std::uint64_t next = (end + block_size - 1) / block_size;
      to = std::min(next + s.window, block_count_);
      // Readahead stops a sixteenth of what the stream had read before the read unit (a
      // tensor's bytes) the reader is in (at least first_window) past that unit's end: a reader
      // of one tensor is not sent the next, whatever its size, and one of every tensor still
      // has the next ones coming (its threads' streams count as one: sibling_start()). Between
      // units (a header, a pickle), it stops at the next unit's first block: a reader of the
      // header is not sent tensors. Where the reader is lags `end` by the kernel's own
      // readahead, which reads a little past the end of what the reader asked for.
      const std::uint64_t position = std::max(s.start, end > unit_slack ? end - unit_slack : 0);
      std::optional<std::uint64_t> limit;
      if (const auto* unit = unit_at(position)) {
        const std::uint64_t before = unit->first > s.start ? unit->first - s.start : 0;
        const std::uint64_t run_on = std::clamp<std::uint64_t>(
            before / 16 / block_size, first_window, std::max(first_window, shared_->window_limit));
        limit = (unit->second + block_size - 1) / block_size + run_on;
      } else if (const auto* after = unit_after(position)) {
        limit = after->first / block_size + 1;
      }
      if (limit && to > *limit) to = *limit;
      from = std::max(s.issued_until, next);
      if (to <= from) return;
      // Ask for half a window at once (a whole request's worth once it is wide), not a block
      // or two for each read the kernel sends, unless what is asked for ahead of the reader
      // runs below that: a load sent ~690 requests of mostly 1-2 MiB before.
      const std::uint64_t least =
          std::min(blocks_per_request, std::max<std::uint64_t>(1, s.window / 2));
      if (to - from < least && to < block_count_ && from >= next + least) return;
      s.issued_until = to;
    }
    fetch_missing(from, to);
  }

  // Calls take(block, from, to) with bytes [from, to) of each block of [offset, offset +
  // length), in order, once that block is ready (fetched now, or by a fetch under way). Waits
  // for the server until the read's deadline, which is also its requests' (the transport ends
  // them there); while the server is taken as failing, not at all.
  template <typename Take>
  void each_ready_block(std::uint64_t offset, std::uint64_t length, Take&& take) const {
    if (object_->changed.load(std::memory_order_acquire)) {
      throw Error(ExitCode::io, object_->reason());
    }
    const std::uint64_t first = offset / block_size;
    const std::uint64_t last = (offset + length - 1) / block_size;
    const auto deadline = Clock::now() + shared_->options.timeout;
    const bool failing = shared_->failing();
    // What this read needs first, then what a sequential reader will need next.
    const std::vector<std::shared_ptr<Block>> blocks = read_blocks(first, last, deadline, failing);
    if (!failing) read_ahead(offset, length);
    for (std::uint64_t i = first; i <= last; ++i) {
      const std::shared_ptr<Block>& b = blocks[static_cast<std::size_t>(i - first)];
      const Block::State state = failing ? b->state() : b->wait_until(deadline);
      if (state == Block::State::pending) {
        if (failing) throw shared_->not_waited_for();
        const std::string why = fmt::format("no answer from the server within {} s (bytes {}..{})",
                                            shared_->options.timeout.count() / 1000.0,
                                            i * block_size, i * block_size + b->length());
        shared_->server_failed(why);  // the next reads do not wait for it again
        throw Error(ExitCode::unreachable, why);
      }
      if (state == Block::State::failed) throw Error(b->error_code(), b->error());
      const std::uint64_t block_start = i * block_size;
      const std::uint64_t from = std::max(offset, block_start) - block_start;
      const std::uint64_t to =
          std::min<std::uint64_t>(offset + length, block_start + b->length()) - block_start;
      take(b, static_cast<std::size_t>(from), static_cast<std::size_t>(to));
    }
    if (object_->changed.load(std::memory_order_acquire)) {
      throw Error(ExitCode::io, object_->reason());
    }
  }

  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override {
    std::size_t done = 0;
    each_ready_block(offset, out.size(),
                     [&](const std::shared_ptr<Block>& b, std::size_t from, std::size_t to) {
                       std::memcpy(out.data() + done, b->data() + from, to - from);
                       done += to - from;
                     });
  }

  // The cached blocks themselves: a reply points into them instead of a copy.
  bool lend_in_range(std::uint64_t offset, std::size_t length,
                     std::vector<std::span<const std::byte>>& spans,
                     std::vector<Pin>& pins) const override {
    each_ready_block(offset, length,
                     [&](const std::shared_ptr<Block>& b, std::size_t from, std::size_t to) {
                       spans.emplace_back(b->data() + from, to - from);
                       pins.push_back(b);
                     });
    return true;
  }

  std::shared_ptr<RemoteShared> shared_;
  std::shared_ptr<Object> object_;
  std::uint64_t block_count_ = 0;
  using Unit = ReadUnits::value_type;

  // The first read unit that starts after byte `offset` (units_.end(): none); under
  // streams_mutex_.
  ReadUnits::const_iterator first_unit_after(std::uint64_t offset) const {
    return std::upper_bound(units_.begin(), units_.end(), offset,
                            [](std::uint64_t o, const Unit& u) { return o < u.first; });
  }

  // The read unit holding byte `offset`, or null; under streams_mutex_.
  const Unit* unit_at(std::uint64_t offset) const {
    auto it = first_unit_after(offset);
    if (it == units_.begin()) return nullptr;
    --it;
    return offset < it->second ? &*it : nullptr;
  }

  // Where a new stream at `offset` counts from: the start of a live stream that is reading the
  // same read unit before it, if any (torch copies a tensor in parts, a thread each: the
  // threads' streams are one load, and the window and the run past the unit's end grow with
  // all it has read, not from 1 MiB at each part), else `offset`. Under streams_mutex_.
  std::uint64_t sibling_start(std::uint64_t offset) const {
    const Unit* unit = unit_at(offset);
    if (unit == nullptr) return offset;
    const std::uint64_t from = unit->first > unit_slack ? unit->first - unit_slack : 0;
    std::uint64_t start = offset;
    for (const Stream& s : streams_) {
      if (s.live && s.end >= from && s.end <= offset) start = std::min(start, s.start);
    }
    return start;
  }

  // The first read unit that starts after byte `offset`, or null; under streams_mutex_.
  const Unit* unit_after(std::uint64_t offset) const {
    auto it = first_unit_after(offset);
    return it == units_.end() ? nullptr : &*it;
  }

  mutable std::mutex streams_mutex_;
  ReadUnits units_;  // set_read_units()'s, under streams_mutex_
  mutable std::array<Stream, 8> streams_{};
  mutable std::uint64_t tick_ = 0;
};

// The range check (RemoteContext::open), for an object of more than one block (a smaller one is
// only ever asked for from byte 0): the check's bytes, asked alone, must be the probe's at the
// same place, under the same identity. A server that answers a range not starting at 0 with
// other bytes of the object (the plain dbstore RGW answers any range from byte 1024 on with the
// object from byte 1024, and one starting below with its first 1024 bytes) is refused here,
// before the format reads anything from it. Throws Error.
void judge_range_check(RangeFetch& probe, RangeFetch& check,
                       const std::optional<Failure>& failure) {
  if (failure) {
    throw Error(failure->code,
                fmt::format("{} (asking for bytes {}-{}, to check that the server answers ranges "
                            "that do not start at 0)",
                            failure->message, range_check_first, range_check_end - 1));
  }
  if (check.total() != probe.total() || check.etag() != probe.etag() ||
      check.last_modified() != probe.last_modified()) {
    throw Error(ExitCode::io, "it changed on the server while it was opened");
  }
  const std::string& from_zero = probe.body();
  if (from_zero.size() < range_check_end ||
      check.body() != std::string_view(from_zero).substr(range_check_first,
                                                         range_check_end - range_check_first)) {
    throw Error(ExitCode::io,
                fmt::format("the server answered a request for bytes {}-{} with other bytes than "
                            "its answer from byte 0 holds there: it does not serve ranges that "
                            "start elsewhere than at 0 right, and ckptfs reads objects by range",
                            range_check_first, range_check_end - 1));
  }
}

// Where an s3:// URL is fetched from, and how it is signed.
void target_s3(const Url& url, const S3Settings& s3, Object& o) {
  const std::string& bucket = url.host;
  std::string key = url.path.empty() ? std::string{} : url.path.substr(1);
  if (url.has_query) key += "?" + url.query;  // a '?' in an s3:// URL is part of the key
  if (key.empty()) throw Error(ExitCode::usage, "an s3:// URL needs a key: s3://BUCKET/KEY");
  for (unsigned char c : bucket) {
    if (!std::isalnum(c) && c != '.' && c != '-' && c != '_') {
      throw Error(ExitCode::usage, fmt::format("invalid bucket name {}", quote(bucket)));
    }
  }
  const std::string encoded = percent_encode(key, true);
  if (!s3.endpoint.empty()) {
    o.request_url = s3.endpoint + "/" + bucket + "/" + encoded;
  } else if (bucket.find('.') == std::string::npos) {
    o.request_url = fmt::format("https://{}.s3.{}.amazonaws.com/{}", bucket, s3.region, encoded);
  } else {
    o.request_url = fmt::format("https://s3.{}.amazonaws.com/{}/{}", s3.region, bucket, encoded);
  }
  o.name = "s3://" + bucket + "/" + key;
  o.header_lines.push_back(std::string("x-amz-content-sha256: ") + empty_sha256);
  if (!s3.access_key.empty()) {
    o.sigv4 = "aws:amz:" + s3.region + ":s3";
    o.user = s3.access_key;
    o.password = s3.secret_key;
    o.secrets = {s3.secret_key, s3.access_key};
  }
  if (!s3.session_token.empty()) {
    o.header_lines.push_back("x-amz-security-token: " + s3.session_token);
    o.secrets.push_back(s3.session_token);
  }
}

}  // namespace
}  // namespace detail

namespace {

// The largest AWS shared file read: `aws configure` writes a few hundred bytes.
constexpr std::size_t max_ini_size = 1 << 20;

// The keys of section `section` of an AWS shared INI file ("[default]", "[profile x]"...);
// empty when the file or the section is missing. Opened as any input (open_file()): a FIFO or
// a device there is refused, never waited on. Throws Error(usage) naming the file when it is not
// a regular file, or is larger than max_ini_size.
std::map<std::string, std::string> ini_section(const std::string& path,
                                               const std::string& section) {
  std::map<std::string, std::string> out;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return out;
  std::string text;
  try {
    OpenedFile file = open_file(path, FileKind::regular);
    if (static_cast<std::uint64_t>(file.st.st_size) > max_ini_size) {
      throw Error(ExitCode::usage, fmt::format("larger than {} bytes", max_ini_size));
    }
    text.resize(static_cast<std::size_t>(file.st.st_size));
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n =
          ::pread(file.fd.get(), text.data() + done, text.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    text.resize(done);
  } catch (const Error& e) {
    throw Error(ExitCode::usage, fmt::format("AWS settings file {}: {}", quote(path), e.what()));
  }
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  auto trim = [](const std::string& t) {
    const auto first = t.find_first_not_of(" \t\r");
    const auto last = t.find_last_not_of(" \t\r");
    return first == std::string::npos ? std::string{} : t.substr(first, last - first + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      inside = trim(line.substr(1, line.size() - 2)) == section;
      continue;
    }
    const auto equals = line.find('=');
    if (inside && equals != std::string::npos) {
      out[trim(line.substr(0, equals))] = trim(line.substr(equals + 1));
    }
  }
  return out;
}

}  // namespace

S3Settings S3Settings::from_environment() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  S3Settings s;
  s.access_key = env("AWS_ACCESS_KEY_ID");
  s.secret_key = env("AWS_SECRET_ACCESS_KEY");
  s.session_token = env("AWS_SESSION_TOKEN");
  // Without keys in the environment, those of the shared files that `aws configure` writes.
  const std::string profile = !env("AWS_PROFILE").empty() ? env("AWS_PROFILE") : "default";
  const std::string home = env("HOME");
  std::map<std::string, std::string> config;
  const std::string config_file = !env("AWS_CONFIG_FILE").empty() ? env("AWS_CONFIG_FILE")
                                  : home.empty()                  ? ""
                                                                  : home + "/.aws/config";
  if (!config_file.empty()) {
    config = ini_section(config_file, profile == "default" ? "default" : "profile " + profile);
  }
  if (s.access_key.empty() && s.secret_key.empty()) {
    const std::string credentials_file = !env("AWS_SHARED_CREDENTIALS_FILE").empty()
                                             ? env("AWS_SHARED_CREDENTIALS_FILE")
                                         : home.empty() ? ""
                                                        : home + "/.aws/credentials";
    auto keys = credentials_file.empty() ? std::map<std::string, std::string>{}
                                         : ini_section(credentials_file, profile);
    for (auto* source : {&keys, &config}) {
      if (source->contains("aws_access_key_id") && s.access_key.empty()) {
        s.access_key = (*source)["aws_access_key_id"];
        s.secret_key = (*source)["aws_secret_access_key"];
        s.session_token = (*source)["aws_session_token"];
      }
    }
  }
  if (s.access_key.empty() != s.secret_key.empty()) {
    throw Error(ExitCode::usage, s.access_key.empty()
                                     ? "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not"
                                     : "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not "
                                       "(or the profile of the shared credentials file has one "
                                       "without the other)");
  }
  if (!env("AWS_REGION").empty()) {
    s.region = env("AWS_REGION");
  } else if (!env("AWS_DEFAULT_REGION").empty()) {
    s.region = env("AWS_DEFAULT_REGION");
  } else if (!config["region"].empty()) {
    s.region = config["region"];
  }
  s.endpoint = !env("AWS_ENDPOINT_URL_S3").empty() ? env("AWS_ENDPOINT_URL_S3")
               : !env("AWS_ENDPOINT_URL").empty()  ? env("AWS_ENDPOINT_URL")
                                                   : config["endpoint_url"];
  while (s.endpoint.ends_with('/')) s.endpoint.pop_back();
  if (!s.endpoint.empty()) {
    auto url = parse_url(s.endpoint);
    if (!url || url->scheme == "s3" || url->has_query) {
      throw Error(ExitCode::usage, fmt::format("AWS_ENDPOINT_URL {} is not an http(s) URL",
                                               quote(display_location(s.endpoint))));
    }
  }
  return s;
}

RemoteContext::RemoteContext(RemoteOptions options, S3Settings s3) {
  detail::curl();  // loads libcurl: a context that cannot fetch is never made
  shared_ = std::make_shared<detail::RemoteShared>(std::move(options), std::move(s3));
}

RemoteContext::~RemoteContext() { quiesce(); }

void RemoteContext::quiesce() noexcept {
  shared_->stop_disk_waiter();
  shared_->transport.quiesce();
  shared_->stop_disk_writer();
}

void RemoteContext::cancel() noexcept {
  shared_->transport.close();
  shared_->stop_disk_waiter();  // the reads waiting for another mount's fetch fail now
}

std::unique_ptr<ByteSource> RemoteContext::open(const std::string& location) {
  using detail::Object;
  using detail::RangeFetch;
  auto url = parse_url(location);
  if (!url) throw Error(ExitCode::usage, "not a valid URL");
  auto object = std::make_shared<Object>();
  Object& o = *object;
  std::string cache_key;
  if (url->scheme == "s3") {
    detail::target_s3(*url, shared_->s3, o);
    cache_key = o.name + " at " +
                (shared_->s3.endpoint.empty() ? "aws:" + shared_->s3.region : shared_->s3.endpoint);
  } else {
    o.request_url = location;
    o.name = display_location(location);
    o.follow_redirects = true;
    // Never from https down to plain http on a redirect.
    o.redirect_protocols = url->scheme == "https" ? "https" : "http,https";
    if (!url->userinfo.empty()) o.secrets.push_back(url->userinfo);
    if (url->has_query) o.secrets.push_back(url->query);
    // The whole URL but its signature: "dl?f=a.pth" and "dl?f=b.pth" are two objects.
    cache_key = url_without_signature(location).value_or(location);
  }
  o.build_headers();

  // The first block, unless a disk cache may have it: then its first bytes, for size, identity
  // and the range check. Beside it, at once, the range check's bytes alone.
  const bool disk = shared_->disk != nullptr;
  const std::uint64_t probe_length = disk ? detail::range_check_end : detail::block_size;
  const auto deadline = detail::Clock::now() + shared_->options.timeout;
  auto probe = std::make_shared<RangeFetch>(*shared_, object, RangeFetch::Mode::probe, 0,
                                            probe_length, 4, deadline);
  auto check = std::make_shared<RangeFetch>(
      *shared_, object, RangeFetch::Mode::check, detail::range_check_first,
      detail::range_check_end - detail::range_check_first, 4, deadline);
  shared_->transport.submit(probe);
  try {
    shared_->transport.submit(check);
  } catch (...) {
    check->abandon("no thread to fetch with");
  }
  if (auto failure = probe->wait()) {
    check->cancelled = true;  // still in flight: ended now, its outcome unused
    check->wait();
    throw Error(failure->code, failure->message);
  }
  // Waited for before the object's headers change: its request uses them.
  const auto check_failure = check->wait();
  if (probe->total() > detail::block_size) detail::judge_range_check(*probe, *check, check_failure);

  o.size = probe->total();
  o.etag = probe->etag();
  o.last_modified = probe->last_modified();
  if (!o.last_modified.empty()) {
    const auto t = detail::curl().getdate(o.last_modified.c_str(), nullptr);
    if (t > 0) o.times = {t, 0, t, 0};
  }
  o.id = shared_->next_id.fetch_add(1);
  o.validated_at = detail::steady_ms();
  // Later requests ask the server to answer only while the object is the one opened (a strong
  // ETag; a weak one never matches If-Match); every answer is checked anyway.
  if (!o.etag.empty() && !o.etag.starts_with("W/")) o.header_lines.push_back("If-Match: " + o.etag);
  o.build_headers();
  // Kept on disk only with a validator that tells this version from the next one at the same
  // URL: a strong ETag, or Last-Modified (a weak ETag promises equivalent, not equal, bytes).
  if (disk && ((!o.etag.empty() && !o.etag.starts_with("W/")) || !o.last_modified.empty())) {
    o.disk_folder = shared_->disk->object_folder(fmt::format(
        "{}\netag {}\nlast-modified {}\nsize {}\n", cache_key, o.etag, o.last_modified, o.size));
  }
  // Block 0 whole (the probe asked for it, or the server sent the whole of a small object):
  // kept, with or without a disk cache.
  const std::string& body = probe->body();
  if (o.size > 0 && body.size() == std::min(o.size, detail::block_size)) {
    auto [b, created] = shared_->cache.acquire(BlockKey{o.id, 0}, body.size());
    if (created) {
      std::memcpy(b->data(), body.data(), body.size());
      b->set_ready();
    }
  }
  return std::make_unique<detail::RemoteSource>(shared_, std::move(object));
}

std::unique_ptr<ByteSource> open_location(const std::string& location, RemoteContext* remote) {
  if (!is_url(location)) return std::make_unique<FileSource>(location);
  if (remote == nullptr) throw Error(ExitCode::usage, "remote locations are not enabled here");
  return remote->open(location);
}

}  // namespace ckptfs
