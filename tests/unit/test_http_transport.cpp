// SPDX-License-Identifier: MIT
// Unit tests of the HTTP transport, against servers on loopback: a job ends at its deadline in
// whichever state it is (waiting for its start, waiting inside curl for a connection,
// transferring), against one that never answers; an answer followed by bytes past its end is
// said to be (Job::surplus), against one that sends them.
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
#include <thread>
#include <tuple>
#include <utility>

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

namespace {

// A server on 127.0.0.1 that answers one request per connection with `answer` (its bytes sent
// in one write, whatever they hold), then keeps the connection open until it is destroyed.
class OneAnswerServer {
 public:
  explicit OneAnswerServer(std::string answer) : answer_(std::move(answer)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener_, 4) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    url_ = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "/object";
    thread_ = std::thread([this] {
      const int connection = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (connection < 0) return;
      std::string request;
      char buffer[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(connection, buffer, sizeof buffer, 0);
        if (n <= 0) break;
        request.append(buffer, static_cast<std::size_t>(n));
      }
      (void)!::send(connection, answer_.data(), answer_.size(), MSG_NOSIGNAL);
      std::unique_lock lock(mutex_);
      stop_.wait(lock, [&] { return stopping_; });
      ::close(connection);
    });
  }
  ~OneAnswerServer() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    stop_.notify_all();
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }
  OneAnswerServer(const OneAnswerServer&) = delete;
  OneAnswerServer& operator=(const OneAnswerServer&) = delete;
  const std::string& url() const { return url_; }

 private:
  std::string answer_;
  int listener_ = -1;
  std::string url_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
};

// A GET that keeps the body and what the transport said of the connection.
class BodyGet final : public Job {
 public:
  explicit BodyGet(std::string url) : url_(std::move(url)) {}
  bool start(CURL* easy) override {
    easy_setopt(easy, CURLOPT_URL, url_.c_str());
    easy_setopt(easy, CURLOPT_WRITEFUNCTION, &BodyGet::write);
    easy_setopt(easy, CURLOPT_WRITEDATA, this);
    return true;
  }
  void finish(CURLcode result, CURL*) override {
    {
      std::lock_guard lock(mutex_);
      result_ = result;
      surplus_seen_ = surplus;
    }
    done_.notify_all();
  }
  // (result, body, surplus) once ended, within `most` (a bound for a hang).
  std::optional<std::tuple<CURLcode, std::string, bool>> ended(std::chrono::seconds most) {
    std::unique_lock lock(mutex_);
    done_.wait_for(lock, most, [&] { return result_.has_value(); });
    if (!result_) return std::nullopt;
    return std::tuple{*result_, body_, surplus_seen_};
  }

 private:
  static std::size_t write(char* data, std::size_t size, std::size_t count, void* self) {
    static_cast<BodyGet*>(self)->body_.append(data, size * count);
    return size * count;
  }
  std::string url_;
  std::string body_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::optional<CURLcode> result_;
  bool surplus_seen_ = false;
};

}  // namespace

TEST_CASE("an answer followed by bytes past its Content-Length is said to have surplus") {
  // curl reads past a small body with its header (and says "Excess found"); past a body larger
  // than its receive buffer it reads no more than the body, and the transport finds the rest
  // waiting on the connection.
  for (const std::size_t body_size : {std::size_t{5}, std::size_t{600'000}}) {
    const std::string body(body_size, 'b');
    const std::string head =
        "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body_size) + "\r\n\r\n";
    for (const auto& [extra, surplus] :
         {std::pair<std::string, bool>{"", false}, {"EXTRA BYTES", true}}) {
      CAPTURE(body_size);
      CAPTURE(extra);
      OneAnswerServer server(head + body + extra);
      HttpTransport transport(TransportOptions{});
      auto get = std::make_shared<BodyGet>(server.url());
      transport.submit(get);
      auto outcome = get->ended(std::chrono::seconds(30));
      REQUIRE(outcome);
      CHECK(std::get<0>(*outcome) == CURLE_OK);
      CHECK(std::get<1>(*outcome) == body);  // curl stops at the Content-Length
      CHECK(std::get<2>(*outcome) == surplus);
    }
  }
}
