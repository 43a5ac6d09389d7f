// SPDX-License-Identifier: MIT
// Unit tests of CheckpointMembers: a checkpoint's files opened by the names it gives them,
// beneath its local directory (links that lead out refused, a hub cache snapshot's links to its
// blobs followed) or beside its URL, names that could leave the directory refused either way,
// small files read whole within a bound. On real files in a temporary directory.
#include "support/temp_dir.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/source/members.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace ckptfs;
using ckptfs::test::TempDir;

namespace {

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

// An opener that must never be called: local members never go through it.
std::unique_ptr<ByteSource> no_opener(const std::string& location) {
  FAIL("opened through the opener: " << location);
  return nullptr;
}

}  // namespace

TEST_SUITE_BEGIN("members");

TEST_CASE("local members: beside what was named, beneath its directory") {
  TempDir outside;
  outside.write("secret.safetensors", "shadow");
  TempDir t;
  t.write("set/a.safetensors", "aaaa");
  t.write("set/sub/b.safetensors", "bb");
  t.symlink("a.safetensors", "set/alias.safetensors");  // inside: fine
  t.symlink(outside.path("secret.safetensors"), "set/out.safetensors");
  t.symlink(outside.path(), "set/outdir");
  t.symlink("../../" + outside.path("secret.safetensors").substr(1), "set/up.safetensors");
  const std::string index = t.write("set/model.safetensors.index.json", "{}");
  // The index named through a link of the user's: followed; its members are in the directory
  // it was named in.
  t.symlink(index, "named/model.safetensors.index.json");
  const CheckpointMembers members(t.path("set/model.safetensors.index.json"), no_opener);
  CHECK_FALSE(members.remote());
  CHECK(read_all(*members.open("a.safetensors")) == "aaaa");
  CHECK(read_all(*members.open("sub/b.safetensors")) == "bb");
  CHECK(read_all(*members.open("alias.safetensors")) == "aaaa");
  CHECK(members.open("a.safetensors")->name() == t.path("set") + "/a.safetensors");
  for (const char* name : {"out.safetensors", "outdir/secret.safetensors", "up.safetensors"}) {
    CAPTURE(name);
    auto [code, message] = refusal([&] { members.open(name); });
    CHECK(code == ExitCode::bad_checkpoint);
    CHECK(message == "leads out of the directory (a symbolic link or \"..\")");
  }
  // Names that could leave the directory are refused before any file is looked at.
  for (const char* name : {"../set/a.safetensors", "/etc/passwd", "sub/../a.safetensors", "a\\b",
                           "", "sub//b.safetensors", "https://h/x"}) {
    CAPTURE(name);
    auto [code, message] = refusal([&] { members.open(name); });
    CHECK(code == ExitCode::bad_checkpoint);
    CHECK(message.find("it must be a relative name") != std::string::npos);
  }
  CHECK(refusal([&] { members.open("missing.safetensors"); }).second ==
        "No such file or directory");
  const CheckpointMembers through_link(t.path("named/model.safetensors.index.json"), no_opener);
  CHECK(refusal([&] { through_link.open("a.safetensors"); }).first == ExitCode::io);
  // A bare name: the members are in the working directory.
  CHECK(CheckpointMembers("model.safetensors.index.json", no_opener).directory()->path() == ".");
}

TEST_CASE("a hub cache snapshot's members are its links to its blobs") {
  TempDir t;
  const std::string rev = "models--org--name/snapshots/0123/";
  t.write("models--org--name/blobs/s1", "shard one");
  t.write("models--org--name/blobs/ix", "{}");
  t.symlink("../../blobs/s1", rev + "model-00001-of-00001.safetensors");
  t.symlink("../../blobs/ix", rev + "model.safetensors.index.json");
  const CheckpointMembers members(t.path(rev + "model.safetensors.index.json"), no_opener);
  CHECK(read_all(*members.open("model-00001-of-00001.safetensors")) == "shard one");
  // The same from the directory.
  const CheckpointMembers in_dir(std::make_shared<const Directory>(t.path(rev)));
  CHECK(in_dir.read("model.safetensors.index.json", 2) == "{}");
}

TEST_CASE("small members read whole within a bound") {
  TempDir t;
  t.write("m/config.json", R"({"model_type": "gpt2"})");
  const CheckpointMembers members(std::make_shared<const Directory>(t.path("m")));
  CHECK(members.read("config.json", 1024) == R"({"model_type": "gpt2"})");
  CHECK(refusal([&] { members.read("config.json", 4); }) ==
        std::pair{ExitCode::unsupported, std::string("22 bytes, over the limit of 4")});
}

TEST_CASE("remote members: the URL beside, through the opener") {
  std::vector<std::string> asked;
  const CheckpointMembers members("https://h/m/model.safetensors.index.json?X-Amz-Signature=s",
                                  [&](const std::string& location) {
                                    asked.push_back(location);
                                    return std::make_unique<MemorySource>("bytes", location);
                                  });
  CHECK(members.remote());
  CHECK(read_all(*members.open("sub/a b.safetensors")) == "bytes");
  CHECK(asked == std::vector<std::string>{"https://h/m/sub/a%20b.safetensors"});
  CHECK(refusal([&] { members.open("../x.safetensors"); }).first == ExitCode::bad_checkpoint);
  CHECK(asked.size() == 1);
}

TEST_SUITE_END();
