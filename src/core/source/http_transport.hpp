// SPDX-License-Identifier: MIT
// HttpTransport: one thread that runs every HTTP request of a mount through one libcurl multi
// handle (its connection pool: HTTP/1.1 keep-alive, HTTP/2 multiplexing where offered), so that
// many range requests are in flight at once without a thread each. Private to the source layer.
#pragma once

#include "curl_library.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace ckptfs::detail {

using Clock = std::chrono::steady_clock;

struct TransportOptions {
  bool insecure = false;         // no TLS peer or host verification
  std::string cacert;            // CA bundle file; empty: the system's
  unsigned max_connections = 8;  // per host: range requests in flight at once over HTTP/1.1
};

// One HTTP exchange as the transport runs it; subclasses say what is asked and what to do with
// the answer. Every virtual is called on the transport's thread.
class Job {
 public:
  virtual ~Job() = default;
  // Sets the request options of `easy` (URL, headers, range, callbacks with `this` as their
  // data; the transport has set its own common ones). Returns false to drop the job (it then
  // gets finish() with CURLE_ABORTED_BY_CALLBACK).
  virtual bool start(CURL* easy) = 0;
  // The transfer ended: `result` is curl's outcome. The job may resubmit itself.
  virtual void finish(CURLcode result, CURL* easy) = 0;

  // Not started before this time (a retry's backoff).
  Clock::time_point not_before{};
  // Ended by the transport at this time, in whichever state it is: waiting for its start,
  // waiting inside curl for a connection (curl before 8.8 never times out a transfer queued
  // behind CURLMOPT_MAX_HOST_CONNECTIONS: it waits until a connection frees), or transferring.
  // It then gets finish() with CURLE_OPERATION_TIMEDOUT. Set before submit(), never changed.
  Clock::time_point deadline = Clock::time_point::max();
  // Set to abort it: its transfer stops at the next progress callback, and finish() is called.
  std::atomic<bool> cancelled{false};
  // Set by the transport before finish(): the server sent more bytes than its answer declared,
  // found by curl in the read that ended the body, or waiting on the connection when the
  // transfer ended (HTTP/1 without TLS, where the next answer would start with them). The
  // connection is not reused either way: curl closes it, or the transport shuts it down.
  // Later surplus spoils the next answer on that connection instead (not HTTP: a protocol
  // error of that request). Reset at each start().
  bool surplus = false;
};

class HttpTransport {
 public:
  explicit HttpTransport(TransportOptions options);
  ~HttpTransport();  // cancels and finishes every job, then stops the thread
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Queues `job` (started once job->not_before has passed). Starts the thread when it is not
  // running (it is stopped by quiesce()). Thread-safe. Throws std::system_error when no thread
  // can be started, Error(io) once close() was called.
  void submit(std::shared_ptr<Job> job);

  // quiesce() for good: every later submit() throws. For a mount being stopped, whose reads must
  // not wait for a server. Thread-safe (not from the transport's thread).
  void close();

  // Cancels every job (each gets finish() with an error), closes every connection and stops the
  // thread; the next submit() starts again. For fork(): a child has no copy of the thread. Not
  // to be called from the transport's thread.
  void quiesce();

 private:
  void run();
  void start_ready_jobs(CURLM* multi, std::vector<std::shared_ptr<Job>>& waiting);
  void end_overdue_jobs(CURLM* multi, std::vector<std::shared_ptr<Job>>& waiting);
  void finish_all(CURLM* multi, std::vector<std::shared_ptr<Job>>& waiting);
  static int progress(void* job, curl_off_t, curl_off_t, curl_off_t, curl_off_t);
  static int debug(CURL*, curl_infotype type, char* data, std::size_t size, void* job);
  static void check_connection(CURL* easy, Job& job);

  TransportOptions options_;
  std::mutex mutex_;
  std::deque<std::shared_ptr<Job>> incoming_;  // submitted, not yet seen by the thread
  bool stopping_ = false;
  bool closed_ = false;
  CURLM* multi_ = nullptr;  // while the thread runs
  std::thread thread_;
  std::unordered_map<CURL*, std::shared_ptr<Job>> active_;  // the thread's own
  std::vector<CURL*> idle_handles_;                         // the thread's own, for reuse
};

}  // namespace ckptfs::detail
