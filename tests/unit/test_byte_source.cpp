// SPDX-License-Identifier: MIT
// Unit tests of FileSource: bounds, short files, and unchanged() (what the mount checks at each
// open and read to refuse a checkpoint replaced, truncated or rewritten under it).
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/base/error.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace

TEST_SUITE_BEGIN("byte_source");

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
    // The descriptor still reads the old file, but unlinking it changed its ctime.
    CHECK_FALSE(source.unchanged(false));
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
