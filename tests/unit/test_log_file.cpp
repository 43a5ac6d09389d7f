// SPDX-License-Identifier: MIT
// Tests of the opener of -o log=FILE (src/fuse/log_file.cpp): a new file is created 0600 where
// the name is, an existing one of the user's is appended to, and every other thing a name can
// lead to (a link, dangling or not; a FIFO, a device, a directory; another user's file; a file
// of several names) is refused without being written, created or waited on.
#include "fuse/log_file.hpp"

#include <ckptfs/base/error.hpp>

#include "support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

using ckptfs::Error;
using ckptfs::ExitCode;
using ckptfs::fuse::open_log_file;
using ckptfs::test::TempDir;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("log_file");

namespace {

constexpr uid_t other_user = 65534;  // chown needs root: the tests run as root
bool can_chown() { return ::geteuid() == 0; }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Why open_log_file() refuses `path` ("" when it opens it), in a thread: a refusal that waits
// (a FIFO's open) fails the test instead of hanging it.
std::string refusal(const std::string& path) {
  auto attempt = std::async(std::launch::async, [&]() -> std::string {
    try {
      (void)open_log_file(path);
      return "";
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::usage);
      return e.what();
    }
  });
  REQUIRE(attempt.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  return attempt.get();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("log=: a new file is created 0600, an existing one of the user's appended to") {
  TempDir dir;
  const std::string path = dir.path("new.log");
  {
    ckptfs::UniqueFd fd = open_log_file(path);
    REQUIRE(fd.get() >= 0);
    CHECK((::fcntl(fd.get(), F_GETFL) & (O_APPEND | O_NONBLOCK)) == O_APPEND);
    CHECK((::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC) != 0);
    CHECK(::write(fd.get(), "one\n", 4) == 4);
  }
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  {
    ckptfs::UniqueFd fd = open_log_file(path);
    CHECK(::write(fd.get(), "two\n", 4) == 4);
  }
  CHECK(read_text(path) == "one\ntwo\n");
  // The user's own file stays as it is, mode included (others may write it: the user's choice).
  REQUIRE(::chmod(path.c_str(), 0666) == 0);
  CHECK(refusal(path) == "");
  // The directories above may be links: the user named them.
  dir.symlink(dir.path(""), "via");
  CHECK(refusal(dir.path("via/new.log")) == "");
  // A missing directory: the system's reason.
  CHECK(contains(refusal(dir.path("no/such/x.log")), "No such file or directory"));
}

TEST_CASE("log=: a link, dangling or not, is never followed nor created through") {
  TempDir dir;
  const std::string precious = dir.write("precious", "root only\n");
  REQUIRE(::chmod(precious.c_str(), 0600) == 0);
  dir.symlink(precious, "link.log");
  CHECK(contains(refusal(dir.path("link.log")), "a symbolic link"));
  CHECK(read_text(precious) == "root only\n");
  dir.symlink(dir.path("nowhere"), "dangling.log");
  CHECK(contains(refusal(dir.path("dangling.log")), "a symbolic link"));
  CHECK_FALSE(fs::exists(dir.path("nowhere")));
  dir.mkdir("d");
  dir.symlink(dir.path("d"), "dir-link.log");
  CHECK(contains(refusal(dir.path("dir-link.log")), "a symbolic link"));
  CHECK(fs::is_empty(dir.path("d")));
}

TEST_CASE("log=: a FIFO, a device or a directory is refused, never opened") {
  TempDir dir;
  const std::string fifo = dir.path("fifo.log");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(contains(refusal(fifo), "a FIFO, not a regular file"));
  CHECK(contains(refusal("/dev/null"), "a character device, not a regular file"));
  CHECK(contains(refusal(dir.mkdir("d")), "a directory, not a regular file"));
  CHECK(contains(refusal(dir.path("d/")), "a directory"));
}

TEST_CASE("log=: another user's file, or a file of several names, is refused") {
  TempDir dir;
  const std::string mine = dir.write("mine", "mine\n");
  const std::string linked = dir.path("hard.log");
  REQUIRE(::link(mine.c_str(), linked.c_str()) == 0);
  CHECK(contains(refusal(linked), "has 2 hard links"));
  CHECK(read_text(mine) == "mine\n");
  if (can_chown()) {
    const std::string theirs = dir.write("theirs.log", "theirs\n");
    REQUIRE(::chown(theirs.c_str(), other_user, other_user) == 0);
    CHECK(contains(refusal(theirs), "owned by uid 65534"));
    CHECK(read_text(theirs) == "theirs\n");
  } else {
    MESSAGE("not root: the other-user case is left out");
  }
}

TEST_SUITE_END();
