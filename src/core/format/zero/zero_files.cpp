// SPDX-License-Identifier: MIT
// Files: the tag directory found (itself, or through `latest`), listed locally in zero_to_fp32's
// natural order, and its files opened beneath the directory or beside the URL.
#include "zero_files.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/source/location.hpp>

#include <fmt/format.h>

#include <sys/stat.h>
#include <algorithm>
#include <cerrno>

namespace ckptfs::zero {
namespace {

constexpr std::string_view model_suffix = "_model_states.pt";
constexpr std::string_view optim_suffix = "_optim_states.pt";

// Python's str.strip() of ASCII text: space, \t \n \v \f \r and the separators \x1c-\x1f.
bool is_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

// glob's "*_suffix": a name that ends so, longer than the suffix, not hidden.
bool globbed(std::string_view name, std::string_view suffix) {
  return name.size() > suffix.size() && name.ends_with(suffix) && !name.starts_with('.');
}

// A tag directory's states files of one kind, in natural order.
std::vector<std::string> states_files(const std::vector<DirectoryEntry>& entries,
                                      std::string_view suffix) {
  std::vector<std::string> names;
  for (const DirectoryEntry& e : entries) {
    // A link leading out is listed: opening it says so (glob would list it too).
    if (e.file_or_way_out() && globbed(e.name, suffix)) names.push_back(e.name);
  }
  std::sort(names.begin(), names.end(), natural_less);
  return names;
}

// Whether opening a file failed because it is not there (or may be not there: S3's 403).
bool not_there(const Error& e) {
  return e.code() == ExitCode::io || e.code() == ExitCode::access_denied;
}

bool has_model_states(const std::vector<DirectoryEntry>& entries) {
  return std::any_of(entries.begin(), entries.end(), [](const DirectoryEntry& e) {
    return e.file_or_way_out() && globbed(e.name, model_suffix);
  });
}

std::string read_latest(const ByteSource& latest, const ZeroLimits& limits) {
  if (latest.size() > limits.max_latest_bytes) {
    throw Error(ExitCode::bad_checkpoint, fmt::format("latest: {} bytes, more than a tag's {}",
                                                      latest.size(), limits.max_latest_bytes));
  }
  try {
    return tag_of_latest(latest.read_string(0, latest.size()));
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("latest: {}", e.what()));
  }
}

}  // namespace

std::string tag_of_latest(std::string text) {
  std::size_t begin = 0, end = text.size();
  while (begin < end && is_space(text[begin])) ++begin;
  while (end > begin && is_space(text[end - 1])) --end;
  std::string tag = text.substr(begin, end - begin);
  auto refuse = [&](const char* why) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("the tag {} {}: it must name a directory beneath the checkpoint's",
                            quote(tag), why));
  };
  if (tag.empty()) refuse("is empty");
  if (tag.starts_with('/')) refuse("is absolute");
  if (tag.find('\0') != std::string::npos) refuse("holds a NUL byte");
  if (tag.find('\\') != std::string::npos) refuse("holds a backslash");
  for (std::size_t at = 0; at <= tag.size();) {
    auto slash = tag.find('/', at);
    if (slash == std::string::npos) slash = tag.size();
    const std::string_view part = std::string_view(tag).substr(at, slash - at);
    if (part.empty() || part == "." || part == "..") refuse("has an empty, '.' or '..' part");
    at = slash + 1;
  }
  for (unsigned char c : tag) {
    if (c < 0x20 || c == 0x7f) refuse("holds a control character");
  }
  return tag;
}

Files Files::local(const std::string& directory, const ZeroLimits& limits) {
  Files f;
  f.directory_ = std::make_shared<const Directory>(directory);
  std::vector<DirectoryEntry> entries = f.directory_->list("", limits.max_directory_entries);
  if (!has_model_states(entries) && f.directory_->has("latest", FileKind::regular)) {
    const DirectoryFileSource latest(f.directory_, "latest");
    f.times_ = latest.times();
    f.permissions_ = permission_bits(latest);
    const std::string tag = read_latest(latest, limits);
    struct stat st {};
    if (const int error = f.directory_->look(tag, st); error != 0 || !S_ISDIR(st.st_mode)) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("latest names the tag {}, {}: name the tag directory that holds "
                              "the *_model_states.pt files, or write its name into latest",
                              quote(tag),
                              error == ENOENT ? "which does not exist here"
                              : error == 0    ? "which is no directory"
                                              : "which is no directory beneath this one"));
    }
    f.prefix_ = tag + "/";
    try {
      entries = f.directory_->list(tag, limits.max_directory_entries);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: {}", quote(tag), e.what()));
    }
  }
  f.model_states_ = states_files(entries, model_suffix);
  f.optim_states_ = states_files(entries, optim_suffix);
  if (f.model_states_.empty()) {
    if (f.prefix_.empty()) {
      throw Error(ExitCode::io, "no *_model_states.pt in it: not a DeepSpeed checkpoint directory");
    }
    throw Error(ExitCode::io,
                fmt::format("latest names the tag {}, which holds no *_model_states.pt: not a "
                            "DeepSpeed checkpoint directory",
                            quote(f.prefix_.substr(0, f.prefix_.size() - 1))));
  }
  return f;
}

Files Files::remote(const std::string& location, const ZeroOpener& open, const ZeroLimits& limits) {
  Files f;
  f.location_ = location;
  f.open_ = open;
  std::unique_ptr<ByteSource> latest;
  const std::string latest_location = sibling_location(location, "latest");
  if (latest_location == location || location.ends_with("/latest")) {
    latest = open(latest_location);  // named: it must be there
  } else {
    try {
      latest = open(latest_location);
    } catch (const Error& e) {
      // Not there: the directory is the tag directory (whose files say whether it is one).
      if (!not_there(e)) throw Error(e.code(), fmt::format("latest: {}", e.what()));
    }
  }
  if (latest) {
    f.times_ = latest->times();
    f.permissions_ = permission_bits(*latest);
    f.prefix_ = read_latest(*latest, limits) + "/";
  }
  return f;
}

std::optional<Files::Found> Files::open_first(const std::vector<std::string>& names,
                                              std::string& why) const {
  why.clear();
  for (const std::string& name : names) {
    try {
      return Found{name, open(name)};
    } catch (const Error& e) {
      if (!not_there(e)) {
        throw Error(e.code(), fmt::format("{}: {}", quote(prefix_ + name, 300), e.what()));
      }
      why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", quote(prefix_ + name, 300), e.what());
    }
  }
  return std::nullopt;
}

std::unique_ptr<ByteSource> Files::open(const std::string& name) const {
  if (directory_) return std::make_unique<DirectoryFileSource>(directory_, prefix_ + name);
  return open_(sibling_location(location_, prefix_ + name));
}

}  // namespace ckptfs::zero
