// SPDX-License-Identifier: MIT
// Tests of the disk cache: blocks round trip and torn ones miss; a cache directory others may
// write is refused; below it nothing is followed, waited on or trusted unless the cache made it
// (links, FIFOs, other users' files, files others may write), and trimming deletes only blocks
// the cache wrote.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/sha256.hpp>
#include <ckptfs/source/disk_cache.hpp>

#include "support/temp_dir.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

using ckptfs::DiskCache;
using ckptfs::Error;
using ckptfs::ExitCode;
using ckptfs::test::TempDir;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("disk_cache");

namespace {

// A user id that is not the one running the tests (chown needs root: the tests run as root).
constexpr uid_t other_user = 65534;
bool can_chown() { return ::geteuid() == 0; }

std::vector<std::byte> bytes_of(std::size_t n, int seed) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((i * 31 + seed) & 255);
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The folder of `key` below `cache` (as DiskCache names it).
std::string folder_of(const std::string& cache, const std::string& key) {
  return cache + "/ckptfs-blocks-v1/" + ckptfs::sha256_hex(key).substr(0, 16);
}

// What the constructor throws for `directory`, or "" when it accepts it.
std::string refusal(const std::string& directory) {
  try {
    DiskCache cache(directory, 1 << 20);
    return "";
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::usage);
    return e.what();
  }
}

// Runs `f` in a thread; false when it is still running after 5 s (it hung).
template <typename F>
bool finishes(F&& f) {
  auto done = std::async(std::launch::async, std::forward<F>(f));
  return done.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
}

}  // namespace

TEST_CASE("blocks round trip, a torn, changed or misplaced block is a miss") {
  TempDir dir;
  DiskCache cache(dir.path("c"), 64 << 20);
  auto folder = cache.object_folder("https://h/m.pth\netag \"1\"\n");
  REQUIRE(folder);
  const auto block = bytes_of(5000, 1);
  std::vector<std::byte> out(block.size());
  CHECK_FALSE(cache.load(*folder, 3, out));
  cache.store(*folder, 3, block);
  CHECK(cache.load(*folder, 3, out));
  CHECK(out == block);
  // Another length, another index: misses.
  std::vector<std::byte> shorter(block.size() - 1);
  CHECK_FALSE(cache.load(*folder, 3, shorter));
  CHECK_FALSE(cache.load(*folder, 4, out));
  // A byte changed on disk: the CRC says no.
  const std::string file =
      folder_of(dir.path("c"), "https://h/m.pth\netag \"1\"\n") + "/0000000000000003.blk";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x55' ^ static_cast<char>(block[100 - 32]));
  }
  CHECK_FALSE(cache.load(*folder, 3, out));
  // The same folder again (a second mount), and another key's.
  auto again = cache.object_folder("https://h/m.pth\netag \"1\"\n");
  REQUIRE(again);
  cache.store(*again, 0, block);
  CHECK(cache.load(*folder, 0, out));
  auto other = cache.object_folder("https://h/m.pth\netag \"2\"\n");
  REQUIRE(other);
  CHECK_FALSE(cache.load(*other, 0, out));
}

TEST_CASE("the key is never written: only its SHA-256") {
  TempDir dir;
  DiskCache cache(dir.path("c"), 64 << 20);
  const std::string key = "https://h/dl?f=a.pth&token=SECRET-TOKEN-123\netag \"1\"\n";
  REQUIRE(cache.object_folder(key));
  const std::string folder = folder_of(dir.path("c"), key);
  CHECK(read_text(folder + "/key") == ckptfs::sha256_hex(key) + "\n");
  for (const auto& e : fs::recursive_directory_iterator(dir.path("c"))) {
    CHECK(e.path().string().find("SECRET") == std::string::npos);
    if (e.is_regular_file()) CHECK(read_text(e.path()).find("SECRET") == std::string::npos);
  }
  // A folder whose key file holds another digest (a collision of the first 64 bits, or a
  // stranger's folder) is not used.
  std::ofstream(folder + "/key") << ckptfs::sha256_hex("another key") << "\n";
  CHECK_FALSE(cache.object_folder(key));
}

TEST_CASE(
    "cache_dir: only the last component is made, and only a directory of the user's own "
    "that nobody else can write is used") {
  TempDir dir;
  // Made when its parent exists, mode 0700; not when its parent is missing.
  CHECK(refusal(dir.path("made")) == "");
  struct stat st {};
  REQUIRE(::stat(dir.path("made").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(::stat(dir.path("made/ckptfs-blocks-v1").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  std::string why = refusal(dir.path("typo/deep/er"));
  CHECK(why.find("does not exist") != std::string::npos);
  CHECK(why.find("only the last component") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.path("typo")));
  // Writable by others: world (/tmp-like, sticky or not), or the group.
  for (mode_t mode : {01777, 0777, 0770, 0730, 0702}) {
    CAPTURE(mode);
    const std::string d = dir.mkdir("shared" + std::to_string(mode));
    REQUIRE(::chmod(d.c_str(), mode) == 0);
    why = refusal(d);
    CHECK(why.find("writable by") != std::string::npos);
    CHECK_FALSE(fs::exists(d + "/ckptfs-blocks-v1"));
  }
  // Not a directory.
  dir.write("file", "x");
  CHECK(refusal(dir.path("file")) != "");
  // ckptfs-blocks-v1 a link (to a directory of the user's own: never followed either), or
  // writable by others.
  dir.mkdir("elsewhere");
  dir.mkdir("linked");
  dir.symlink(dir.path("elsewhere"), "linked/ckptfs-blocks-v1");
  why = refusal(dir.path("linked"));
  CHECK(why.find("symbolic link") != std::string::npos);
  CHECK(fs::is_empty(dir.path("elsewhere")));
  dir.mkdir("open/ckptfs-blocks-v1");
  REQUIRE(::chmod(dir.path("open/ckptfs-blocks-v1").c_str(), 0777) == 0);
  CHECK(refusal(dir.path("open")).find("writable by every user") != std::string::npos);
  // DIR itself may be reached through a link: what is checked is the directory it leads to.
  dir.mkdir("target");
  dir.symlink(dir.path("target"), "via-link");
  CHECK(refusal(dir.path("via-link")) == "");
  CHECK(fs::is_directory(dir.path("target/ckptfs-blocks-v1")));
  if (can_chown()) {
    const std::string foreign = dir.mkdir("foreign");
    REQUIRE(::chown(foreign.c_str(), other_user, other_user) == 0);
    why = refusal(foreign);
    CHECK(why.find("owned by uid 65534") != std::string::npos);
    dir.mkdir("foreign-inside/ckptfs-blocks-v1");
    REQUIRE(::chown(dir.path("foreign-inside/ckptfs-blocks-v1").c_str(), other_user, 0) == 0);
    CHECK(refusal(dir.path("foreign-inside")).find("owned by uid 65534") != std::string::npos);
    // DIR a link another user made (as in /tmp) to a directory of the user's: not followed,
    // and nothing is made there; a dangling one makes nothing where it leads either.
    dir.mkdir("mine");
    for (const char* name : {"planted", "planted-dangling"}) {
      CAPTURE(name);
      const std::string target =
          std::string(name) == "planted" ? dir.path("mine") : dir.path("none");
      const std::string link = dir.symlink(target, name);
      REQUIRE(::lchown(link.c_str(), other_user, other_user) == 0);
      why = refusal(link);
      CHECK(why.find("a symbolic link owned by uid 65534") != std::string::npos);
    }
    CHECK(fs::is_empty(dir.path("mine")));
    CHECK_FALSE(fs::exists(dir.path("none")));
  } else {
    MESSAGE("not root: the other-user cases are left out");
  }
}

TEST_CASE("links below the root are never followed, written through or trusted") {
  TempDir dir;
  std::vector<std::string> warnings;
  DiskCache cache(dir.path("c"), 64 << 20, [&](const std::string& w) { warnings.push_back(w); });
  const std::string outside = dir.mkdir("outside");
  // An object folder that is a link to another directory: the object goes without a cache.
  const std::string key = "https://h/a.pth\netag \"1\"\n";
  fs::create_directory_symlink(outside, folder_of(dir.path("c"), key));
  CHECK_FALSE(cache.object_folder(key));
  CHECK(fs::is_empty(outside));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("a symbolic link") != std::string::npos);
  CHECK(warnings[0].find("said once") != std::string::npos);
  // A block file that is a link to a well-formed block elsewhere: a miss; storing the block
  // replaces the link, and the file it led to is left as it was.
  const std::string key2 = "https://h/b.pth\netag \"1\"\n";
  auto folder = cache.object_folder(key2);
  REQUIRE(folder);
  const auto block = bytes_of(3000, 2);
  cache.store(*folder, 7, block);
  const std::string path = folder_of(dir.path("c"), key2) + "/0000000000000007.blk";
  fs::rename(path, outside + "/real.blk");
  fs::create_symlink(outside + "/real.blk", path);
  std::vector<std::byte> out(block.size());
  CHECK_FALSE(cache.load(*folder, 7, out));
  const auto other = bytes_of(3000, 3);
  cache.store(*folder, 7, other);
  CHECK_FALSE(fs::is_symlink(path));
  CHECK(cache.load(*folder, 7, out));
  CHECK(out == other);
  CHECK(fs::file_size(outside + "/real.blk") == 32 + block.size());
  // A key file that is a link: the folder is not used.
  const std::string key3 = "https://h/c.pth\netag \"1\"\n";
  fs::create_directory(folder_of(dir.path("c"), key3));
  fs::create_symlink(folder_of(dir.path("c"), key2) + "/key",
                     folder_of(dir.path("c"), key3) + "/key");
  CHECK_FALSE(cache.object_folder(key3));
  CHECK(warnings.size() == 1);  // said once
}

TEST_CASE("a FIFO, a socket or a directory where a file is expected: a miss, never a wait") {
  TempDir dir;
  int warned = 0;
  DiskCache cache(dir.path("c"), 64 << 20, [&](const std::string&) { ++warned; });
  const std::string key = "https://h/a.pth\netag \"1\"\n";
  auto folder = cache.object_folder(key);
  REQUIRE(folder);
  const std::string base = folder_of(dir.path("c"), key);
  REQUIRE(::mkfifo((base + "/0000000000000001.blk").c_str(), 0600) == 0);
  fs::create_directory(base + "/0000000000000002.blk");
  std::vector<std::byte> out(100);
  bool loaded = true;
  const bool done = finishes([&] { loaded = cache.load(*folder, 1, out); });
  if (!done) {
    // Unblock the reader so that the test can end, failing.
    int fd = ::open((base + "/0000000000000001.blk").c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  REQUIRE(done);
  CHECK_FALSE(loaded);
  CHECK_FALSE(cache.load(*folder, 2, out));
  CHECK(warned == 1);
  // A FIFO as an object's key file: the folder is not used, at once.
  const std::string key2 = "https://h/b.pth\netag \"1\"\n";
  fs::create_directory(folder_of(dir.path("c"), key2));
  REQUIRE(::mkfifo((folder_of(dir.path("c"), key2) + "/key").c_str(), 0600) == 0);
  bool got = true;
  const bool key_done = finishes([&] { got = cache.object_folder(key2) != nullptr; });
  if (!key_done) {
    int fd = ::open((folder_of(dir.path("c"), key2) + "/key").c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  REQUIRE(key_done);
  CHECK_FALSE(got);
  // Trimming past them does not wait either, and leaves them.
  cache.store(*folder, 0, bytes_of(100, 1));
  REQUIRE(finishes([&] { cache.trim(); }));
  CHECK(fs::is_fifo(base + "/0000000000000001.blk"));
}

TEST_CASE("a block another user owns, or others may write, is a miss") {
  TempDir dir;
  DiskCache cache(dir.path("c"), 64 << 20);
  const std::string key = "https://h/a.pth\netag \"1\"\n";
  auto folder = cache.object_folder(key);
  REQUIRE(folder);
  const auto block = bytes_of(2000, 4);
  std::vector<std::byte> out(block.size());
  const std::string path = folder_of(dir.path("c"), key) + "/0000000000000000.blk";
  cache.store(*folder, 0, block);
  REQUIRE(cache.load(*folder, 0, out));
  for (mode_t mode : {0666, 0620, 0602}) {
    CAPTURE(mode);
    REQUIRE(::chmod(path.c_str(), mode) == 0);
    CHECK_FALSE(cache.load(*folder, 0, out));
  }
  REQUIRE(::chmod(path.c_str(), 0600) == 0);
  CHECK(cache.load(*folder, 0, out));
  if (can_chown()) {
    REQUIRE(::chown(path.c_str(), other_user, other_user) == 0);
    CHECK_FALSE(cache.load(*folder, 0, out));
    // An object folder of another user's: not used.
    const std::string key2 = "https://h/b.pth\netag \"1\"\n";
    REQUIRE(cache.object_folder(key2));
    REQUIRE(::chown(folder_of(dir.path("c"), key2).c_str(), other_user, other_user) == 0);
    CHECK_FALSE(cache.object_folder(key2));
  } else {
    MESSAGE("not root: the other-user cases are left out");
  }
}

TEST_CASE("trim deletes the least recently used blocks, and only blocks the cache wrote") {
  TempDir dir;
  constexpr std::size_t block = 100 * 1024;
  DiskCache cache(dir.path("c"), 10 * (block + 32));  // room for 10 blocks
  const std::string key = "https://h/a.pth\netag \"1\"\n";
  auto folder = cache.object_folder(key);
  REQUIRE(folder);
  const std::string base = folder_of(dir.path("c"), key);
  // Things that look like blocks but are not the cache's, planted first (the oldest).
  const std::string outside = dir.mkdir("outside");
  dir.write("outside/0000000000000063.blk", std::string(block + 32, 'x'));
  dir.write("outside/victim.blk", std::string(block + 32, 'v'));
  fs::create_symlink(outside + "/victim.blk", base + "/0000000000000062.blk");
  dir.write("c/ckptfs-blocks-v1/" + ckptfs::sha256_hex(key).substr(0, 16) + "/0000000000000061.blk",
            std::string(block + 32, 'n'));  // the user's own file, not a block
  fs::create_directory_symlink(outside, dir.path("c/ckptfs-blocks-v1/00000000000000aa"));
  std::string foreign;
  if (can_chown()) {
    foreign = base + "/0000000000000060.blk";
    std::ofstream(foreign) << std::string(block + 32, 'f');
    REQUIRE(::chown(foreign.c_str(), other_user, other_user) == 0);
  }
  auto old_time = [](const std::string& p, int seconds_ago) {
    const timespec times[2] = {{::time(nullptr) - seconds_ago, 0},
                               {::time(nullptr) - seconds_ago, 0}};
    REQUIRE(::utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0);
  };
  old_time(base + "/0000000000000061.blk", 5000);
  if (!foreign.empty()) old_time(foreign, 5000);
  // A temporary file of a writer that died an hour ago goes; a recent one stays.
  dir.write("c/ckptfs-blocks-v1/" + ckptfs::sha256_hex(key).substr(0, 16) + "/.tmp.1.1", "t");
  old_time(base + "/.tmp.1.1", 4000);
  dir.write("c/ckptfs-blocks-v1/" + ckptfs::sha256_hex(key).substr(0, 16) + "/.tmp.1.2", "t");
  // 20 blocks, the first ones least recently used.
  for (int i = 0; i < 20; ++i) {
    cache.store(*folder, static_cast<std::uint64_t>(i), bytes_of(block, i));
    old_time(base + fmt::format("/{:016x}.blk", i), 1000 - i);
  }
  cache.trim();
  std::vector<std::byte> out(block);
  int kept = 0;
  for (int i = 0; i < 20; ++i) kept += cache.load(*folder, static_cast<std::uint64_t>(i), out);
  CHECK(kept <= 9);  // 90% of the limit
  CHECK(kept >= 8);
  CHECK(cache.load(*folder, 19, out));  // the most recent stay
  CHECK_FALSE(cache.load(*folder, 0, out));
  // What the cache did not make is all still there.
  CHECK(fs::file_size(outside + "/0000000000000063.blk") == block + 32);
  CHECK(fs::file_size(outside + "/victim.blk") == block + 32);
  CHECK(fs::is_symlink(base + "/0000000000000062.blk"));
  CHECK(fs::exists(base + "/0000000000000061.blk"));
  if (!foreign.empty()) CHECK(fs::exists(foreign));
  CHECK_FALSE(fs::exists(base + "/.tmp.1.1"));
  CHECK(fs::exists(base + "/.tmp.1.2"));
}

TEST_CASE("a block one mount claims is another's to wait for, until released or closed") {
  TempDir dir;
  DiskCache cache(dir.path("c"), 64 << 20);
  const std::string key = "https://h/m.pth\netag \"1\"\n";
  // Two opens of the object (two mounts): two open file descriptions of its claims file.
  auto first = cache.object_folder(key);
  auto second = cache.object_folder(key);
  REQUIRE(first);
  REQUIRE(second);
  using Claim = DiskCache::Claim;
  CHECK(cache.claim(*first, 5) == Claim::mine);
  CHECK(cache.claim(*first, 5) == Claim::mine);  // its own, again
  CHECK(cache.claim(*second, 5) == Claim::theirs);
  CHECK(cache.claim(*second, 6) == Claim::mine);
  CHECK(cache.claim(*first, 6) == Claim::theirs);
  CHECK(cache.claim(*first, std::uint64_t{1} << 40) == Claim::mine);
  CHECK(cache.claim(*second, std::uint64_t{1} << 40) == Claim::theirs);
  cache.release(*first, 5);
  CHECK(cache.claim(*second, 5) == Claim::mine);
  cache.release(*first, 7);  // none held: nothing happens
  CHECK(cache.claim(*second, 7) == Claim::mine);
  // A folder closed (its mount ended, or died) holds nothing any more.
  second.reset();
  CHECK(cache.claim(*first, 5) == Claim::mine);
  CHECK(cache.claim(*first, 6) == Claim::mine);
  // A claims file the cache did not make (here a dangling link) is never used, nor made
  // through: nothing is shared, every claim is the mount's own.
  const std::string folder = folder_of(dir.path("c"), key);
  first.reset();
  fs::remove(folder + "/claims");
  dir.symlink(dir.path("elsewhere"),
              "c/ckptfs-blocks-v1/" + fs::path(folder).filename().string() + "/claims");
  auto third = cache.object_folder(key);
  auto fourth = cache.object_folder(key);
  REQUIRE(third);
  REQUIRE(fourth);
  CHECK(cache.claim(*third, 5) == Claim::mine);
  CHECK(cache.claim(*fourth, 5) == Claim::mine);
  CHECK_FALSE(fs::exists(dir.path("elsewhere")));
}

TEST_SUITE_END();
