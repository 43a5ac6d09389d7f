// SPDX-License-Identifier: MIT
// Unit tests of the source layer: open_file() (never waits, refuses every other kind of file),
// FileSource's bounds and short files, and unchanged() (what the mount checks at each open and
// read to refuse a checkpoint replaced, truncated or rewritten under it).
#include <ckptfs/base/error.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/open_file.hpp>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "ckptfs-source-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() { fs::remove_all(path); }
};

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Moves the file's mtime and ctime forward, as a later write would.
void touch_later(const fs::path& path) {
  struct timespec times[2] = {{0, UTIME_OMIT}, {0, 0}};
  ::clock_gettime(CLOCK_REALTIME, &times[1]);
  times[1].tv_sec += 10;
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

// Runs `open` in a child process and returns what it threw ("" when it returned), or "timed out"
// when it had not returned after 5 seconds (the child is then killed): a call that waits cannot
// hang the test run.
std::string outcome_within_5s(const std::function<void()>& open) {
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(out[0]);
    std::string message;
    try {
      open();
    } catch (const ckptfs::Error& e) {
      message = e.code() == ckptfs::ExitCode::io ? e.what() : "wrong exit code";
    } catch (...) {
      message = "not a ckptfs::Error";
    }
    (void)!::write(out[1], message.data(), message.size());
    ::_exit(0);
  }
  ::close(out[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      ::close(out[0]);
      return "timed out";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::string message;
  char buffer[256];
  ssize_t n;
  while ((n = ::read(out[0], buffer, sizeof buffer)) > 0) message.append(buffer, n);
  ::close(out[0]);
  return message;
}

}  // namespace

TEST_SUITE_BEGIN("byte_source");

TEST_CASE("open_file: every kind of file but the one asked for is refused, without waiting") {
  TempDir dir;
  const fs::path file = dir.path / "model.pth";
  write_file(file, "bytes");
  const fs::path fifo = dir.path / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const fs::path socket_path = dir.path / "socket";
  const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(socket_path.string().size() < sizeof address.sun_path);
  std::strcpy(address.sun_path, socket_path.c_str());
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener, 1) == 0);

  struct Case {
    const char* what;
    fs::path path;
    const char* as_file;       // open_file(path, regular): "" for success, else the message
    const char* as_directory;  // open_file(path, directory)
  };
  const Case cases[] = {
      {"regular file", file, "", "not a directory"},
      {"FIFO without a writer", fifo, "not a regular file", "not a directory"},
      {"listening socket", socket_path, "not a regular file", "not a directory"},
      {"character device", "/dev/zero", "not a regular file", "not a directory"},
      {"directory", dir.path, "is a directory", ""},
      {"missing", dir.path / "missing", "No such file or directory", "No such file or directory"},
  };
  for (const Case& c : cases) {
    for (const bool through_symlink : {false, true}) {
      fs::path path = c.path;
      if (through_symlink) {
        path = dir.path / (std::string("link-to-") + c.path.filename().string());
        fs::create_symlink(c.path, path);
      }
      CAPTURE(c.what);
      CAPTURE(through_symlink);
      CHECK(outcome_within_5s([&] { (void)ckptfs::open_file(path, ckptfs::FileKind::regular); }) ==
            c.as_file);
      CHECK(outcome_within_5s([&] {
              (void)ckptfs::open_file(path, ckptfs::FileKind::directory);
            }) == c.as_directory);
      CHECK(outcome_within_5s([&] { ckptfs::FileSource source(path.string()); }) == c.as_file);
    }
  }
  ::close(listener);
}

TEST_CASE("open_file: the descriptor reads, blocking, and is closed with its owner") {
  TempDir dir;
  const fs::path file = dir.path / "model.pth";
  write_file(file, "0123456789");
  int fd;
  {
    ckptfs::OpenedFile opened = ckptfs::open_file(file, ckptfs::FileKind::regular);
    fd = opened.fd.get();
    REQUIRE(fd >= 0);
    CHECK(S_ISREG(opened.st.st_mode));
    CHECK(opened.st.st_size == 10);
    const int flags = ::fcntl(fd, F_GETFL);
    CHECK((flags & O_NONBLOCK) == 0);
    CHECK((flags & O_ACCMODE) == O_RDONLY);
    CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    char buffer[4];
    CHECK(::pread(fd, buffer, 4, 3) == 4);
    CHECK(std::string(buffer, 4) == "3456");
  }
  CHECK(::fcntl(fd, F_GETFD) == -1);  // closed
}

TEST_CASE("reads are bounds-checked and a file that shrank is an I/O error") {
  TempDir dir;
  const fs::path file = dir.path / "a.bin";
  write_file(file, "0123456789");
  ckptfs::FileSource source(file.string());
  CHECK(source.size() == 10);
  CHECK(source.read_string(2, 3) == "234");
  CHECK_THROWS_AS(source.read_string(8, 3), ckptfs::Error);
  REQUIRE(::truncate(file.c_str(), 4) == 0);
  try {
    source.read_string(2, 5);
    FAIL("no error for a file that shrank");
  } catch (const ckptfs::Error& e) {
    CHECK(e.code() == ckptfs::ExitCode::io);
  }
}

// A source that lends its bytes in spans of 3, like a remote source's cache blocks.
class LendingSource final : public ckptfs::ByteSource {
 public:
  std::uint64_t size() const override { return bytes_.size(); }
  const std::string& name() const noexcept override { return name_; }

 private:
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override {
    std::memcpy(out.data(), bytes_.data() + offset, out.size());
  }
  bool lend_in_range(std::uint64_t offset, std::size_t length,
                     std::vector<std::span<const std::byte>>& spans,
                     std::vector<Pin>& pins) const override {
    for (std::uint64_t at = offset; at < offset + length;) {
      const std::uint64_t end = std::min<std::uint64_t>((at / 3 + 1) * 3, offset + length);
      spans.emplace_back(reinterpret_cast<const std::byte*>(bytes_.data()) + at, end - at);
      pins.push_back(pin_);
      at = end;
    }
    return true;
  }
  std::string bytes_ = "0123456789";
  std::string name_ = "lending";
  Pin pin_ = std::make_shared<int>(0);
};

TEST_CASE("lend(): bounds-checked like read(), sources without memory lend nothing") {
  TempDir dir;
  const fs::path file = dir.path / "a.bin";
  write_file(file, "0123456789");
  ckptfs::FileSource file_source(file.string());
  std::vector<std::span<const std::byte>> spans;
  std::vector<ckptfs::ByteSource::Pin> pins;
  CHECK_FALSE(file_source.lend(2, 3, spans, pins));
  CHECK(spans.empty());
  CHECK(pins.empty());
  CHECK_THROWS_AS(file_source.lend(8, 3, spans, pins), ckptfs::Error);

  LendingSource lending;
  CHECK_THROWS_AS(lending.lend(8, 3, spans, pins), ckptfs::Error);
  CHECK(spans.empty());
  CHECK(lending.lend(10, 0, spans, pins));  // nothing to lend at the end: no span
  CHECK(spans.empty());
  REQUIRE(lending.lend(2, 6, spans, pins));
  std::string lent;
  for (auto span : spans) lent.append(reinterpret_cast<const char*>(span.data()), span.size());
  CHECK(lent == "234567");
  CHECK(spans.size() == 3);  // "2", "345", "67"
  CHECK(pins.size() == spans.size());
}

TEST_CASE("unchanged() until the file or its path changes") {
  TempDir dir;
  const fs::path file = dir.path / "model.pth";
  write_file(file, "checkpoint bytes");

  SUBCASE("unchanged, and read") {
    ckptfs::FileSource source(file.string());
    CHECK(source.unchanged(true));
    CHECK(source.read_string(0, 4) == "chec");
    CHECK(source.unchanged(true));
  }
  SUBCASE("another file renamed beside it") {
    ckptfs::FileSource source(file.string());
    write_file(dir.path / "x", "x");
    fs::rename(dir.path / "x", dir.path / "y");
    CHECK(source.unchanged(true));
  }
  SUBCASE("renamed over") {
    ckptfs::FileSource source(file.string());
    write_file(dir.path / "new", "checkpoint bytes");
    fs::rename(dir.path / "new", file);
    // The descriptor still reads the old file, whose content did not change (unlinking it moves
    // only its ctime, which is no part of the identity): the path's lookup finds the new one.
    CHECK(source.unchanged(false));
    CHECK_FALSE(source.unchanged(true));
  }
  SUBCASE("deleted") {
    ckptfs::FileSource source(file.string());
    fs::remove(file);
    CHECK_FALSE(source.unchanged(true));
  }
  SUBCASE("truncated") {
    ckptfs::FileSource source(file.string());
    REQUIRE(::truncate(file.c_str(), 3) == 0);
    CHECK_FALSE(source.unchanged(false));
    CHECK_FALSE(source.unchanged(true));
  }
  SUBCASE("appended to") {
    ckptfs::FileSource source(file.string());
    std::ofstream(file, std::ios::binary | std::ios::app) << "more";
    CHECK_FALSE(source.unchanged(false));
  }
  SUBCASE("rewritten in place with the same size") {
    ckptfs::FileSource source(file.string());
    write_file(file, "CHECKPOINT BYTES");
    touch_later(file);  // past the timestamp granularity, whatever the clock did
    CHECK(fs::file_size(file) == source.size());
    CHECK_FALSE(source.unchanged(false));
  }
  SUBCASE("a relative path, after the process changed directory") {
    const fs::path before = fs::current_path();
    fs::current_path(dir.path);
    ckptfs::FileSource source("model.pth");
    fs::current_path("/");
    CHECK(source.unchanged(true));
    write_file(dir.path / "new", "other");
    fs::rename(dir.path / "new", file);
    CHECK_FALSE(source.unchanged(true));
    fs::current_path(before);
  }
}

TEST_SUITE_END();
