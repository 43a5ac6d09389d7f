// SPDX-License-Identifier: MIT
// HttpTransport: the curl multi loop, its queue of jobs, retries' start times and shutdown.
#include "http_transport.hpp"

#include <ckptfs/base/error.hpp>

#include <strings.h>
#include <sys/socket.h>
#include <algorithm>
#include <string_view>
#include <system_error>

namespace ckptfs::detail {
namespace {

// Large receive buffers: fewer callbacks and copies per byte on fast links (curl's maximum
// is 512 KiB; each connection has one).
constexpr long receive_buffer = 256 * 1024;

}  // namespace

HttpTransport::HttpTransport(TransportOptions options) : options_(std::move(options)) {}

HttpTransport::~HttpTransport() { quiesce(); }

int HttpTransport::progress(void* job, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<Job*>(job)->cancelled.load(std::memory_order_relaxed) ? 1 : 0;
}

// curl says what it finds past an answer's Content-Length only in its verbose text ("Excess found
// in a read" before 8.6, "Excess found writing body" since), and closes the connection: the
// answer itself ends as a success. The text is the one sign of it that curl gives.
int HttpTransport::debug(CURL*, curl_infotype type, char* data, std::size_t size, void* job) {
  if (type == CURLINFO_TEXT && std::string_view(data, size).starts_with("Excess found")) {
    static_cast<Job*>(job)->surplus = true;
  }
  return 0;
}

// After a transfer that ended well: bytes already waiting on its connection, when curl keeps it
// for the next request, are the end of an answer longer than it declared (plain HTTP/1 only:
// TLS sends records of its own, HTTP/2 frames every answer). The connection is shut down, so
// that no request is answered with them. But curl may have handed the connection to a request
// waiting for one already, within the same curl call that ended the transfer, and that
// request's answer may be arriving: bytes that start as an answer does ("HTTP/") are left to it
// (its own framing is checked: surplus that looks like an answer spoils it, a protocol error
// of its own, asked again). Not earlier, in the body callback: until a transfer ends, curl
// (7.88) names the handle's previous connection, not its current one. Left: the body of that
// next answer, already arriving, is taken for surplus (a retry of both, never a wrong byte).
void HttpTransport::check_connection(CURL* easy, Job& job) {
  curl_socket_t socket = CURL_SOCKET_BAD;
  long version = 0;
  char* scheme = nullptr;
  if (easy_getinfo(easy, CURLINFO_ACTIVESOCKET, &socket) != CURLE_OK || socket == CURL_SOCKET_BAD ||
      easy_getinfo(easy, CURLINFO_HTTP_VERSION, &version) != CURLE_OK ||
      (version != CURL_HTTP_VERSION_1_0 && version != CURL_HTTP_VERSION_1_1) ||
      easy_getinfo(easy, CURLINFO_SCHEME, &scheme) != CURLE_OK || scheme == nullptr ||
      ::strcasecmp(scheme, "http") != 0) {
    return;
  }
  char bytes[5] = {};
  const ssize_t n = ::recv(socket, bytes, sizeof bytes, MSG_PEEK | MSG_DONTWAIT);
  if (n <= 0 ||
      std::string_view("HTTP/").starts_with(std::string_view(bytes, static_cast<std::size_t>(n)))) {
    return;
  }
  job.surplus = true;
  ::shutdown(socket, SHUT_RDWR);  // curl closes it when it next looks at it
}

void HttpTransport::submit(std::shared_ptr<Job> job) {
  std::lock_guard lock(mutex_);
  if (closed_) throw Error(ExitCode::io, "ckptfs is stopping: no new request is made");
  incoming_.push_back(std::move(job));
  if (stopping_) return;  // a job finish_all() finishes, resubmitting itself: finished there too
  if (thread_.joinable()) {
    curl().multi_wakeup(multi_);
    return;
  }
  multi_ = curl().multi_init();
  if (multi_ == nullptr)
    throw std::system_error(std::make_error_code(std::errc::not_enough_memory));
  multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(options_.max_connections));
  multi_setopt(multi_, CURLMOPT_MAXCONNECTS, 2L * static_cast<long>(options_.max_connections));
  multi_setopt(multi_, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void HttpTransport::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  quiesce();
}

void HttpTransport::quiesce() {
  std::thread thread;
  {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    curl().multi_wakeup(multi_);
    thread = std::move(thread_);
  }
  thread.join();
  std::lock_guard lock(mutex_);
  curl().multi_cleanup(multi_);
  multi_ = nullptr;
  stopping_ = false;
}

void HttpTransport::end_overdue_jobs(CURLM* multi, std::vector<std::shared_ptr<Job>>& waiting) {
  const auto now = Clock::now();
  for (std::size_t i = 0; i < waiting.size();) {
    if (waiting[i]->deadline > now) {
      ++i;
      continue;
    }
    std::shared_ptr<Job> job = std::move(waiting[i]);
    waiting[i] = std::move(waiting.back());
    waiting.pop_back();
    job->finish(CURLE_OPERATION_TIMEDOUT, nullptr);
  }
  std::vector<CURL*> overdue;
  for (const auto& [easy, job] : active_) {
    if (job->deadline <= now) overdue.push_back(easy);
  }
  for (CURL* easy : overdue) {
    auto it = active_.find(easy);
    std::shared_ptr<Job> job = std::move(it->second);
    active_.erase(it);
    curl().multi_remove_handle(multi, easy);  // closes its connection when it was transferring
    job->finish(CURLE_OPERATION_TIMEDOUT, easy);
    idle_handles_.push_back(easy);
  }
}

void HttpTransport::start_ready_jobs(CURLM* multi, std::vector<std::shared_ptr<Job>>& waiting) {
  const auto now = Clock::now();
  for (std::size_t i = 0; i < waiting.size();) {
    if (waiting[i]->not_before > now && !waiting[i]->cancelled) {
      ++i;
      continue;
    }
    std::shared_ptr<Job> job = std::move(waiting[i]);
    waiting[i] = std::move(waiting.back());
    waiting.pop_back();
    CURL* easy = nullptr;
    if (!idle_handles_.empty()) {
      easy = idle_handles_.back();
      idle_handles_.pop_back();
      curl().easy_reset(easy);
    } else {
      easy = curl().easy_init();
    }
    if (easy == nullptr) {
      job->finish(CURLE_OUT_OF_MEMORY, nullptr);
      continue;
    }
    easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    easy_setopt(easy, CURLOPT_BUFFERSIZE, receive_buffer);
    easy_setopt(easy, CURLOPT_USERAGENT, "ckptfs/" CKPTFS_VERSION);
    easy_setopt(easy, CURLOPT_PIPEWAIT, 1L);  // HTTP/2: share a connection rather than open one
    easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, options_.insecure ? 0L : 1L);
    easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, options_.insecure ? 0L : 2L);
    if (!options_.cacert.empty()) easy_setopt(easy, CURLOPT_CAINFO, options_.cacert.c_str());
    easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
    easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, &HttpTransport::progress);
    easy_setopt(easy, CURLOPT_XFERINFODATA, job.get());
    // Verbose text goes to debug() only (never to stderr), for what it says of surplus bytes.
    easy_setopt(easy, CURLOPT_VERBOSE, 1L);
    easy_setopt(easy, CURLOPT_DEBUGFUNCTION, &HttpTransport::debug);
    easy_setopt(easy, CURLOPT_DEBUGDATA, job.get());
    job->surplus = false;
    if (job->cancelled || !job->start(easy) || curl().multi_add_handle(multi, easy) != CURLM_OK) {
      idle_handles_.push_back(easy);
      job->finish(CURLE_ABORTED_BY_CALLBACK, nullptr);
      continue;
    }
    active_.emplace(easy, std::move(job));
  }
}

void HttpTransport::run() {
  CURLM* multi = multi_;
  std::vector<std::shared_ptr<Job>> waiting;
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      for (auto& job : incoming_) waiting.push_back(std::move(job));
      incoming_.clear();
    }
    start_ready_jobs(multi, waiting);
    int running = 0;
    curl().multi_perform(multi, &running);
    int left = 0;
    while (CURLMsg* message = curl().multi_info_read(multi, &left)) {
      if (message->msg != CURLMSG_DONE) continue;
      CURL* easy = message->easy_handle;
      const CURLcode result = message->data.result;
      auto it = active_.find(easy);
      // Before the handle leaves the multi handle: its connection is known only while in it.
      if (it != active_.end() && result == CURLE_OK) check_connection(easy, *it->second);
      curl().multi_remove_handle(multi, easy);
      if (it == active_.end()) continue;
      std::shared_ptr<Job> job = std::move(it->second);
      active_.erase(it);
      job->finish(result, easy);
      idle_handles_.push_back(easy);
    }
    // Jobs past their deadline end now, wherever they are (finish() may resubmit none: its
    // deadline has passed).
    end_overdue_jobs(multi, waiting);
    // Sleep until a socket is ready, a job is submitted (wakeup), the first retry is due or the
    // first deadline passes.
    auto wait = std::chrono::milliseconds(1000);
    const auto now = Clock::now();
    auto until = [&](Clock::time_point due) {
      if (due == Clock::time_point::max()) return;
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(due - now);
      wait = std::max(std::chrono::milliseconds(0), std::min(wait, ms));
    };
    for (const auto& job : waiting) {
      until(job->not_before);
      until(job->deadline);
    }
    for (const auto& [easy, job] : active_) until(job->deadline);
    {
      std::lock_guard lock(mutex_);
      if (!incoming_.empty() || stopping_) wait = std::chrono::milliseconds(0);
    }
    curl().multi_poll(multi, nullptr, 0, static_cast<int>(wait.count()), nullptr);
  }
  finish_all(multi, waiting);
}

void HttpTransport::finish_all(CURLM* multi, std::vector<std::shared_ptr<Job>>& waiting) {
  // Cancelled jobs do not resubmit themselves; any that a finish() submits is finished too.
  while (true) {
    std::vector<std::shared_ptr<Job>> jobs = std::move(waiting);
    waiting.clear();
    {
      std::lock_guard lock(mutex_);
      for (auto& job : incoming_) jobs.push_back(std::move(job));
      incoming_.clear();
    }
    for (auto& [easy, job] : active_) {
      job->cancelled = true;
      curl().multi_remove_handle(multi, easy);
      job->finish(CURLE_ABORTED_BY_CALLBACK, easy);
      idle_handles_.push_back(easy);
    }
    active_.clear();
    if (jobs.empty()) break;
    for (auto& job : jobs) {
      job->cancelled = true;
      job->finish(CURLE_ABORTED_BY_CALLBACK, nullptr);
    }
  }
  for (CURL* easy : idle_handles_) curl().easy_cleanup(easy);
  idle_handles_.clear();
}

}  // namespace ckptfs::detail
