// SPDX-License-Identifier: MIT
// refuse_impostor(): a file's first bytes matched against the signatures of what people mount
// by mistake.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/impostor.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

namespace ckptfs {
namespace {

// Enough for a Git LFS pointer (about 130 bytes) and a tar header's magic (at 257).
constexpr std::uint64_t head_bytes = 512;

bool starts_with_bytes(std::string_view head, std::string_view magic) {
  return head.substr(0, magic.size()) == magic;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  return out;
}

// A Git LFS pointer: "version https://git-lfs.github.com/spec/v1\noid sha256:HEX\nsize N\n".
// The size it names, when it names one ("" otherwise).
std::string lfs_pointed_size(std::string_view head) {
  const auto at = head.find("\nsize ");
  if (at == std::string_view::npos) return {};
  const auto digits = head.substr(at + 6, 20);
  const auto end = digits.find_first_not_of("0123456789");
  return std::string(digits.substr(0, end));
}

[[noreturn]] void refuse(ExitCode code, const std::string& message) { throw Error(code, message); }

// A compressed stream: what compressed it, and the commands that undo it.
void refuse_compressed(std::string_view head) {
  // A safetensors file's 8-byte header length is followed by its JSON header: never one of
  // these (a header length's low bytes may spell a magic).
  if (head.size() > 8 && head[8] == '{') return;
  const auto u8 = [&](std::size_t i) { return static_cast<unsigned char>(head[i]); };
  // gzip: 1f 8b, deflate (8), no reserved flag, and an XFL a compressor writes (0, 2, 4).
  if (head.size() >= 10 && u8(0) == 0x1f && u8(1) == 0x8b && u8(2) == 8 && (u8(3) & 0xe0) == 0 &&
      (u8(8) == 0 || u8(8) == 2 || u8(8) == 4)) {
    refuse(ExitCode::unsupported,
           "a gzip-compressed file, not a checkpoint: decompress it first (gunzip; a .tar.gz: "
           "tar -xzf) and mount what it holds");
  }
  if (starts_with_bytes(head, std::string_view("\x28\xb5\x2f\xfd", 4))) {
    refuse(ExitCode::unsupported,
           "a zstd-compressed file, not a checkpoint: decompress it first (unzstd; a .tar.zst: "
           "tar --zstd -xf) and mount what it holds");
  }
  if (starts_with_bytes(head, std::string_view("\xfd"
                                               "7zXZ\x00",
                                               6))) {
    refuse(ExitCode::unsupported,
           "an xz-compressed file, not a checkpoint: decompress it first (unxz; a .tar.xz: "
           "tar -xJf) and mount what it holds");
  }
  if (head.size() >= 10 && starts_with_bytes(head, "BZh") && u8(3) >= '1' && u8(3) <= '9' &&
      head.substr(4, 6) == std::string_view("\x31\x41\x59\x26\x53\x59", 6)) {
    refuse(ExitCode::unsupported,
           "a bzip2-compressed file, not a checkpoint: decompress it first (bunzip2; a .tar.bz2: "
           "tar -xjf) and mount what it holds");
  }
  if (starts_with_bytes(head, std::string_view("7z\xbc\xaf\x27\x1c", 6))) {
    refuse(ExitCode::unsupported,
           "a 7-Zip archive, not a checkpoint: extract it first (7z x) and mount what it holds");
  }
  // A POSIX tar header. torch 0.1's tar format (its first member "sys_info") is a checkpoint,
  // which read_torch() names.
  if (is_tar_header(head)) {
    const std::string_view first = head.substr(0, std::min(head.find('\0'), std::size_t{100}));
    if (first == "sys_info" || first == "pickle" || first == "storages" || first == "tensors") {
      return;
    }
    refuse(ExitCode::unsupported,
           fmt::format("a tar archive (its first member {}), not a checkpoint: extract it first "
                       "(tar -xf) and mount the checkpoint it holds",
                       quote(first, 80)));
  }
}

std::string read_head(const ByteSource& source) {
  return source.read_string(0, static_cast<std::size_t>(std::min(source.size(), head_bytes)));
}

// Throws when `head`, the first bytes of a file of `size` bytes, are an impostor's.
void refuse_impostor_head(std::string_view head, std::uint64_t size, ImpostorCheck check) {
  if (size == 0) {
    refuse(ExitCode::bad_checkpoint, "an empty file (an interrupted download?): nothing to read");
  }
  if (starts_with_bytes(head, "version https://git-lfs.github.com/spec/")) {
    const std::string pointed = lfs_pointed_size(head);
    refuse(
        ExitCode::io,
        fmt::format("a Git LFS pointer, not the file it stands for{}: run `git lfs pull` in "
                    "its repository (or download the file itself)",
                    pointed.empty() ? "" : fmt::format(" ({} bytes, never downloaded)", pointed)));
  }
  // Markup: after a byte order mark and blank space.
  std::string_view text = head;
  if (text.starts_with("\xef\xbb\xbf")) text.remove_prefix(3);
  text.remove_prefix(std::min(text.size(), text.find_first_not_of(" \t\r\n")));
  const std::string opening = lower(text.substr(0, 14));
  if (opening.starts_with("<!doctype html") || opening.starts_with("<html")) {
    refuse(ExitCode::io,
           "an HTML page, not a checkpoint (a download that saved a login or error page?): "
           "download the file itself again");
  }
  if (check == ImpostorCheck::text_only) return;
  if (opening.starts_with("<?xml")) {
    refuse(ExitCode::io,
           "an XML document, not a checkpoint (a server's error reply, as S3's <Error>?): "
           "download the file itself again");
  }
  refuse_compressed(head);
}

}  // namespace

bool is_tar_header(std::string_view head) {
  constexpr std::size_t header_bytes = 512;
  if (head.size() < header_bytes || head.substr(257, 5) != "ustar") return false;
  // The checksum: octal digits between blanks, ended by a NUL or a blank (as tarfile's nti()).
  std::string_view field = head.substr(148, 8);
  field = field.substr(0, field.find('\0'));
  while (!field.empty() && field.front() == ' ') field.remove_prefix(1);
  while (!field.empty() && field.back() == ' ') field.remove_suffix(1);
  if (field.empty() || field.size() > 7) return false;
  std::uint32_t written = 0;
  for (const char c : field) {
    if (c < '0' || c > '7') return false;
    written = written * 8 + static_cast<std::uint32_t>(c - '0');
  }
  // The sum of the header's bytes with the checksum field as blanks; old tars summed them as
  // signed chars, which tarfile accepts too.
  std::uint32_t unsigned_sum = 8 * ' ';
  std::int32_t signed_sum = 8 * ' ';
  for (std::size_t i = 0; i < header_bytes; ++i) {
    if (i >= 148 && i < 156) continue;
    unsigned_sum += static_cast<unsigned char>(head[i]);
    signed_sum += static_cast<signed char>(head[i]);
  }
  return written == unsigned_sum || static_cast<std::int32_t>(written) == signed_sum;
}

void refuse_impostor(const ByteSource& source, ImpostorCheck check) {
  refuse_impostor_head(read_head(source), source.size(), check);
}

void refuse_impostor_after(const ByteSource& source, const Error& failure, ImpostorCheck check) {
  const ExitCode code = failure.code();
  if (code != ExitCode::bad_zip && code != ExitCode::bad_checkpoint &&
      code != ExitCode::unsupported) {
    return;  // a read error, a server's refusal: not about what the file holds
  }
  std::string head;
  try {
    head = read_head(source);
  } catch (const Error&) {
    return;  // the reader's own error says more than a second failed read
  }
  refuse_impostor_head(head, source.size(), check);
}

}  // namespace ckptfs
