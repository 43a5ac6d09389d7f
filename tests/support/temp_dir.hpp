// SPDX-License-Identifier: MIT
// A fresh temporary directory for a unit test, removed with everything in it at the end: files,
// subdirectories and symbolic links made in one call each.
#pragma once

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

namespace ckptfs::test {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("ckptfs-unit-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `bytes` to `name` (a path below the directory), making its parents.
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::filesystem::path p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }
  // A directory `name`, with its parents.
  std::string mkdir(const std::string& name) const {
    std::filesystem::create_directories(path_ / name);
    return path(name);
  }
  // A symbolic link `name` whose text is `target`.
  std::string symlink(const std::string& target, const std::string& name) const {
    const std::filesystem::path p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::filesystem::create_symlink(target, p);
    return p.string();
  }
  void remove(const std::string& name) const { std::filesystem::remove_all(path_ / name); }
  std::string path(const std::string& name = "") const {
    return name.empty() ? path_.string() : (path_ / name).string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace ckptfs::test
