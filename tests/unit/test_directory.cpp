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

TEST_CASE("a Hugging Face cache snapshot: links to its own repository's blobs are followed") {
  TempDir t;
  const std::string repo = "hub/models--org--name";
  t.write(repo + "/blobs/aaa", "weights");
  t.write(repo + "/blobs/bbb", "config");
  t.write(repo + "/refs/main", "rev");
  t.write(repo + "/snapshots/old/model.safetensors", "another revision");
  t.symlink("../../blobs/aaa", repo + "/snapshots/rev/model.safetensors");
  t.symlink("../../../blobs/bbb", repo + "/snapshots/rev/sub/config.json");  // nested
  auto dir = std::make_shared<const Directory>(t.path(repo + "/snapshots/rev"));
  CHECK(dir->in_hub_snapshot());
  DirectoryFileSource weights(dir, "model.safetensors");
  CHECK(read_all(weights) == "weights");
  CHECK(weights.unchanged(true));
  CHECK(read_all(DirectoryFileSource(dir, "sub/config.json")) == "config");
  CHECK(dir->has("model.safetensors", FileKind::regular));
  // A folder below the snapshot is in it too; and the snapshot named through a link of the
  // user's own (its real path counts).
  auto sub = std::make_shared<const Directory>(t.path(repo + "/snapshots/rev/sub"));
  CHECK(sub->in_hub_snapshot());
  CHECK(read_all(DirectoryFileSource(sub, "config.json")) == "config");
  t.symlink(t.path(repo + "/snapshots/rev"), "mine");
  CHECK(read_all(DirectoryFileSource(std::make_shared<const Directory>(t.path("mine")),
                                     "model.safetensors")) == "weights");
  // Listed as the regular files they lead to.
  auto entries = dir->list("", 10);
  std::sort(entries.begin(), entries.end(),
            [](const DirectoryEntry& a, const DirectoryEntry& b) { return a.name < b.name; });
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].name == "model.safetensors");
  CHECK(entries[0].regular);
  CHECK(entries[1].directory);
  // datasets-- and spaces-- repositories are laid out alike.
  t.write("hub/datasets--org--set/blobs/ccc", "rows");
  t.symlink("../../blobs/ccc", "hub/datasets--org--set/snapshots/r/data.safetensors");
  CHECK(read_all(DirectoryFileSource(
            std::make_shared<const Directory>(t.path("hub/datasets--org--set/snapshots/r")),
            "data.safetensors")) == "rows");
}

TEST_CASE("a Hugging Face cache snapshot: every other link out is refused") {
  TempDir outside;
  outside.write("secret", "shadow");
  TempDir t;
  const std::string repo = "models--org--name";
  const std::string rev = repo + "/snapshots/rev/";
  t.write(repo + "/blobs/aaa", "weights");
  t.write(repo + "/refs/main", "rev");
  t.write(repo + "/snapshots/old/file", "another revision");
  t.write("models--org--other/blobs/aaa", "another repository");
  t.symlink(outside.path("secret"), repo + "/blobs/linked");  // a blob that is a link
  t.symlink("aaa", repo + "/blobs/inside_link");              // even to a blob
  t.mkdir(repo + "/blobs/folder");
  t.symlink("../../snapshots/old/file", rev + "other_snapshot");  // another snapshot
  t.symlink("../../refs/main", rev + "ref");                      // refs/
  t.symlink("../../blobs/linked", rev + "link_to_linked_blob");
  t.symlink("../../blobs/inside_link", rev + "link_to_blob_link");
  t.symlink("../../blobs/folder", rev + "folder_blob");
  t.symlink(t.path(repo + "/blobs/aaa"), rev + "absolute");  // absolute, even inside
  t.symlink("../../../models--org--other/blobs/aaa", rev + "other_repo");
  t.symlink("../../blobs/../../../" + outside.path("secret").substr(1), rev + "climbs");
  t.symlink(outside.path("secret"), rev + "outside");
  t.symlink("/proc/self/fd/0", rev + "magic");
  t.symlink("../../blobs", rev + "blobs_dir");  // a folder link out
  t.symlink(outside.path(), rev + "out_dir");
  auto dir = std::make_shared<const Directory>(t.path(rev));
  REQUIRE(dir->in_hub_snapshot());
  for (const char* path : {"other_snapshot", "ref", "link_to_linked_blob", "link_to_blob_link",
                           "absolute", "other_repo", "climbs", "outside", "magic", "blobs_dir/aaa",
                           "out_dir/secret", "../../blobs/aaa", "../../refs/main"}) {
    CAPTURE(path);
    auto [code, message] = refusal([&] { DirectoryFileSource(dir, path); });
    CHECK(code == ExitCode::bad_checkpoint);
    CHECK(message.find("leads out of the directory") != std::string::npos);
    CHECK(message.find("only a link to a regular file of its own repository's blobs/") !=
          std::string::npos);
    CHECK_FALSE(dir->has(path, FileKind::regular));
  }
  CHECK(refusal([&] { DirectoryFileSource(dir, "folder_blob"); }).second == "is a directory");
  // blobs/ itself a link (to a folder of the same names elsewhere) is no repository's blobs.
  t.remove(repo + "/blobs");
  t.symlink(t.path("models--org--other/blobs"), repo + "/blobs");
  t.symlink("../../blobs/aaa", rev + "model.safetensors");
  CHECK(refusal([&] { DirectoryFileSource(dir, "model.safetensors"); }).first ==
        ExitCode::bad_checkpoint);
}

TEST_CASE("a snapshot is only a snapshot of a repository folder") {
  TempDir t;
  // snapshots/<rev> without a models--, datasets-- or spaces-- folder above it: links stay
  // refused.
  for (const std::string repo : {"cache", "models--", "model--org--name"}) {
    CAPTURE(repo);
    t.write(repo + "/blobs/aaa", "weights");
    t.symlink("../../blobs/aaa", repo + "/snapshots/rev/model.safetensors");
    auto dir = std::make_shared<const Directory>(t.path(repo + "/snapshots/rev"));
    CHECK_FALSE(dir->in_hub_snapshot());
    CHECK(refusal([&] { DirectoryFileSource(dir, "model.safetensors"); }).second ==
          "leads out of the directory (a symbolic link or \"..\")");
  }
  // The repository folder itself, or its snapshots/: no snapshot.
  CHECK_FALSE(Directory(t.path("models--")).in_hub_snapshot());
  t.mkdir("models--org--name/snapshots");
  CHECK_FALSE(Directory(t.path("models--org--name")).in_hub_snapshot());
  CHECK_FALSE(Directory(t.path("models--org--name/snapshots")).in_hub_snapshot());
}

TEST_CASE("a directory that is none is refused") {
  TempDir t;
  t.write("file", "x");
  CHECK(refusal([&] { Directory(t.path("file")); }).second == "not a directory");
  CHECK(refusal([&] { Directory(t.path("missing")); }).first == ExitCode::io);
}

TEST_SUITE_END();
