// SPDX-License-Identifier: MIT
// Unit tests of the HTTP transport's deadlines, against a server on loopback that accepts
// connections and never answers: a job ends at its deadline in whichever state it is (waiting
// for its start, waiting inside curl for a connection, transferring).
#include "core/source/http_transport.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

using namespace ckptfs::detail;

TEST_SUITE_BEGIN("http_transport");

namespace {

// A listening socket on 127.0.0.1 that never accepts: the kernel completes connections into its
// backlog, and the requests sent on them get no answer.
class StalledServer {
 public:
  StalledServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    url_ = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "/object";
  }
  ~StalledServer() { ::close(fd_); }
  StalledServer(const StalledServer&) = delete;
  StalledServer& operator=(const StalledServer&) = delete;
  const std::string& url() const { return url_; }

 private:
  int fd_ = -1;
  std::string url_;
};

// A GET of `url` that records how it ended. It sets curl's own timeout to its deadline too, as
// the remote source did alone before: curl 7.88 never applies it to a transfer waiting for a
// connection.
class Get final : public Job {
 public:
  explicit Get(std::string url) : url_(std::move(url)) {}
  bool start(CURL* easy) override {
    started_ = true;
    easy_setopt(easy, CURLOPT_URL, url_.c_str());
    if (deadline != Clock::time_point::max()) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<long long>(ms, 1)));
    }
    return true;
  }
  void finish(CURLcode result, CURL*) override {
    {
      std::lock_guard lock(mutex_);
      result_ = result;
    }
    done_.notify_all();
  }
  // How it ended, once it did within `most` (a bound for a hang, not a measure); nullopt while
  // it has not.
  std::optional<CURLcode> ended(std::chrono::seconds most) {
    std::unique_lock lock(mutex_);
    done_.wait_for(lock, most, [&] { return result_.has_value(); });
    return result_;
  }
  bool started() const { return started_; }

 private:
  std::string url_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::optional<CURLcode> result_;
  std::atomic<bool> started_{false};
};

}  // namespace

TEST_CASE("a job ends at its deadline, even queued inside curl behind a stalled connection") {
  StalledServer server;
  HttpTransport transport(TransportOptions{false, "", 1});  // one connection to the server
  // Holds the only connection, for as long as the test lasts.
  auto holder = std::make_shared<Get>(server.url());
  transport.submit(holder);
  // Waits inside curl for that connection (curl's own timeout does not end it there).
  auto queued = std::make_shared<Get>(server.url());
  queued->deadline = Clock::now() + std::chrono::milliseconds(300);
  transport.submit(queued);
  // Not started before its deadline (a retry's backoff longer than what is left).
  auto later = std::make_shared<Get>(server.url());
  later->not_before = Clock::now() + std::chrono::hours(1);
  later->deadline = Clock::now() + std::chrono::milliseconds(300);
  transport.submit(later);

  CHECK(queued->ended(std::chrono::seconds(30)) == CURLE_OPERATION_TIMEDOUT);
  CHECK(later->ended(std::chrono::seconds(30)) == CURLE_OPERATION_TIMEDOUT);
  CHECK_FALSE(later->started());
  CHECK_FALSE(holder->ended(std::chrono::seconds(0)));  // no deadline: it still waits
  // A transferring job ends at its deadline too.
  auto transferring = std::make_shared<Get>(server.url());
  transferring->deadline = Clock::now() + std::chrono::milliseconds(300);
  transport.quiesce();  // frees the connection: `holder` ends (cancelled)
  CHECK(holder->ended(std::chrono::seconds(30)) == CURLE_ABORTED_BY_CALLBACK);
  transport.submit(transferring);
  CHECK(transferring->ended(std::chrono::seconds(30)) == CURLE_OPERATION_TIMEDOUT);
  CHECK(transferring->started());
}
