// SPDX-License-Identifier: MIT
// Unit tests of Directory and DirectoryFileSource: files opened beneath a directory, links that
// stay inside followed, links and ".." that lead out refused, FIFOs never opened, listings
// classified, and sources that notice a replaced file. On real files in a temporary directory.
#include "support/temp_dir.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/source/directory.hpp>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <filesystem>

using namespace ckptfs;
using ckptfs::test::TempDir;

namespace {

// The exit code and message of what `body` throws; ok and "" when it throws nothing.
template <class Body>
std::pair<ExitCode, std::string> refusal(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ExitCode::ok, ""};
}

std::string read_all(const ByteSource& s) { return s.read_string(0, s.size()); }

}  // namespace

TEST_SUITE_BEGIN("directory");

TEST_CASE("files beneath the directory are opened and read") {
  TempDir t;
  t.write("a/data", "0123456789");
  auto dir = std::make_shared<const Directory>(t.path());
  DirectoryFileSource s(dir, "a/data");
  CHECK(s.size() == 10);
  CHECK(s.read_string(3, 4) == "3456");
  CHECK(s.fd() >= 0);
  CHECK(s.name() == t.path() + "/a/data");
  CHECK(s.relative() == "a/data");
  CHECK(s.unchanged(true));
  CHECK(dir->has("a/data", FileKind::regular));
  CHECK(dir->has("a", FileKind::directory));
  CHECK_FALSE(dir->has("a", FileKind::regular));
  CHECK_FALSE(dir->has("missing", FileKind::regular));
}

TEST_CASE("links that stay inside are followed") {
  TempDir t;
  t.write("real/data", "abc");
  t.symlink("real", "alias");           // a directory link
  t.symlink("../real/data", "b/data");  // climbs, but stays inside
  auto dir = std::make_shared<const Directory>(t.path());
  CHECK(read_all(DirectoryFileSource(dir, "alias/data")) == "abc");
  CHECK(read_all(DirectoryFileSource(dir, "b/data")) == "abc");
  CHECK(read_all(DirectoryFileSource(dir, "real/../real/data")) == "abc");
}

TEST_CASE("links and .. that lead out of the directory are refused") {
  TempDir outside;
  outside.write("secret", "shadow");
  TempDir t;
  t.symlink(outside.path("secret"), "k/data");  // absolute, outside
  t.symlink("../../" + outside.path("secret").substr(1), "l/data");
  t.symlink(outside.path(), "m");  // a key directory that is a link outside
  t.symlink("/etc/passwd", "n/data");
  t.symlink("/proc/self/fd/0", "o/data");  // a magic link, absolute too
  t.write("p/data", "fine");
  // An absolute link is refused even to a file inside: resolving it starts outside.
  t.symlink(t.path("p/data"), "q/data");
  auto dir = std::make_shared<const Directory>(t.path());
  for (const char* path :
       {"k/data", "l/data", "m/secret", "n/data", "o/data", "../secret", "/etc/passwd", "q/data"}) {
    CAPTURE(path);
    auto [code, message] = refusal([&] { DirectoryFileSource(dir, path); });
    CHECK(code == ExitCode::bad_checkpoint);
    CHECK(message.find("leads out of the directory") != std::string::npos);
    CHECK_FALSE(dir->has(path, FileKind::regular));
  }
  // The same file through a path inside is fine.
  CHECK(read_all(DirectoryFileSource(dir, "p/data")) == "fine");
}

TEST_CASE("what is no regular file is refused without being opened") {
  TempDir t;
  REQUIRE(::mkfifo(t.path("fifo").c_str(), 0600) == 0);
  t.mkdir("sub");
  t.symlink("/dev/null", "dev");  // outside anyway
  auto dir = std::make_shared<const Directory>(t.path());
  auto [code, message] = refusal([&] { DirectoryFileSource(dir, "fifo"); });
  CHECK(code == ExitCode::io);
  CHECK(message == "not a regular file");
  CHECK(refusal([&] { DirectoryFileSource(dir, "sub"); }).second == "is a directory");
  CHECK(refusal([&] { DirectoryFileSource(dir, "missing"); }).second ==
        "No such file or directory");
  CHECK(refusal([&] { dir->open("sub", FileKind::regular); }).first == ExitCode::io);
  CHECK(refusal([&] { DirectoryFileSource(dir, std::string("a\0b", 3)); }).first ==
        ExitCode::bad_checkpoint);
  // Nothing ever opened the FIFO for reading: a writer finds no reader.
  const int w = ::open(t.path("fifo").c_str(), O_WRONLY | O_NONBLOCK);
  CHECK(w < 0);
  CHECK(errno == ENXIO);
}

TEST_CASE("listings say what each entry is, beneath the directory") {
  TempDir outside;
  outside.mkdir("d");
  TempDir t;
  t.write("file", "x");
  t.mkdir("dir");
  t.symlink("dir", "inside_link");
  t.symlink(outside.path("d"), "outside_link");
  t.symlink("nowhere", "dangling");
  t.symlink("loop", "loop");
  const Directory dir(t.path());
  auto entries = dir.list("", 100);
  std::sort(entries.begin(), entries.end(),
            [](const DirectoryEntry& a, const DirectoryEntry& b) { return a.name < b.name; });
  REQUIRE(entries.size() == 6);
  auto check = [&](std::size_t i, const char* name, bool directory, bool regular, int error) {
    CAPTURE(name);
    CHECK(entries[i].name == name);
    CHECK(entries[i].directory == directory);
    CHECK(entries[i].regular == regular);
    CHECK(entries[i].error == error);
  };
  check(0, "dangling", false, false, ENOENT);
  check(1, "dir", true, false, 0);
  check(2, "file", false, true, 0);
  check(3, "inside_link", true, false, 0);
  check(4, "loop", false, false, ELOOP);
  check(5, "outside_link", false, false, EXDEV);
  CHECK(dir.list("dir", 10).empty());
  CHECK(refusal([&] { dir.list("", 5); }).first == ExitCode::unsupported);
}

TEST_CASE("a source notices that its file was replaced") {
  TempDir t;
  t.write("data", "1234");
  auto dir = std::make_shared<const Directory>(t.path());
  DirectoryFileSource s(dir, "data");
  CHECK(s.unchanged(true));
  t.write("new", "1234");  // another file of the same size, renamed over it
  std::filesystem::rename(t.path("new"), t.path("data"));
  CHECK_FALSE(s.unchanged(true));
  CHECK(s.read_string(0, 4) == "1234");  // its own descriptor still reads the old file
}

TEST_CASE("a directory that is none is refused") {
  TempDir t;
  t.write("file", "x");
  CHECK(refusal([&] { Directory(t.path("file")); }).second == "not a directory");
  CHECK(refusal([&] { Directory(t.path("missing")); }).first == ExitCode::io);
}

TEST_SUITE_END();
