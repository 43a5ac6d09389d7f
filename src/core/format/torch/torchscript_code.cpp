// SPDX-License-Identifier: MIT
// read_class_declarations(): the first lines of TorchScript classes, matched as text in code
// records that are read by offset or inflated on the way, within a budget of bytes.
#include <ckptfs/base/hash.hpp>
#include <ckptfs/format/torch/torchscript_code.hpp>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <unordered_set>

namespace ckptfs {
namespace {

bool is_identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The length of the run of identifier characters at the start of `text`.
std::size_t identifier_length(std::string_view text) {
  std::size_t n = 0;
  while (n < text.size() && is_identifier_char(text[n])) ++n;
  return n;
}

// Parses `["a", "b", ]` (the whole of `text`); nullopt unless it has exactly that form.
std::optional<std::vector<std::string>> parse_name_list(std::string_view text) {
  auto skip_spaces = [&](std::size_t& i) {
    while (i < text.size() && text[i] == ' ') ++i;
  };
  std::vector<std::string> names;
  std::size_t i = 0;
  if (text.empty() || text[i++] != '[') return std::nullopt;
  for (;;) {
    skip_spaces(i);
    if (i == text.size()) return std::nullopt;
    if (text[i] == ']') {
      ++i;
      break;
    }
    if (text[i++] != '"') return std::nullopt;
    std::string name;
    for (;;) {
      if (i == text.size()) return std::nullopt;
      char c = text[i++];
      if (c == '"') break;
      if (c != '\\') {
        name += c;
        continue;
      }
      if (i == text.size()) return std::nullopt;
      char e = text[i++];
      switch (e) {
        case '\\':
          name += '\\';
          break;
        case '\'':
          name += '\'';
          break;
        case '"':
          name += '"';
          break;
        case 'a':
          name += '\a';
          break;
        case 'b':
          name += '\b';
          break;
        case 'f':
          name += '\f';
          break;
        case 'n':
          name += '\n';
          break;
        case 'r':
          name += '\r';
          break;
        case 't':
          name += '\t';
          break;
        case 'v':
          name += '\v';
          break;
        default: {
          if (e < '0' || e > '7') return std::nullopt;
          unsigned value = static_cast<unsigned>(e - '0');
          for (int digits = 1; digits < 3 && i < text.size() && text[i] >= '0' && text[i] <= '7';
               ++digits) {
            value = value * 8 + static_cast<unsigned>(text[i++] - '0');
          }
          if (value > 0xff) return std::nullopt;
          name += static_cast<char>(value);
        }
      }
    }
    names.push_back(std::move(name));
    skip_spaces(i);
    if (i < text.size() && text[i] == ',') {
      ++i;
    } else if (i < text.size() && text[i] == ']') {
      ++i;
      break;
    } else {
      return std::nullopt;
    }
  }
  if (i != text.size()) return std::nullopt;
  return names;
}

// Matches the lines of one code record against the classes wanted from it (simple names).
class Scanner {
 public:
  Scanner(const TextSet& wanted, std::size_t max_line) : wanted_(wanted), max_line_(max_line) {}

  // Takes the next bytes of the record; false once every wanted class is settled.
  bool feed(std::string_view bytes) {
    while (!bytes.empty()) {
      auto newline = bytes.find('\n');
      std::string_view piece = bytes.substr(0, newline);
      if (!overlong_ && partial_.size() + piece.size() > max_line_) {
        overlong_ = true;  // kept out: no declaration line is that long
        partial_.clear();
      }
      if (!overlong_) partial_.append(piece);
      if (newline == std::string_view::npos) break;
      end_line();
      if (settled_ == wanted_.size()) return false;
      bytes.remove_prefix(newline + 1);
    }
    return true;
  }

  // The record ended: `complete` when it was read to its end (its last line, even without a
  // newline, is a line), false when it was cut (budget, corrupt stream): a class whose header
  // was being read then has no declaration.
  void finish(bool complete) {
    if (complete) {
      if (!partial_.empty() || overlong_) end_line();
      close_class();
    } else if (current_ != nullptr) {
      drop_class();
    }
  }

  TextMap<ClassDeclaration> take() { return std::move(found_); }

 private:
  void end_line() {
    if (overlong_) {
      // Too long to be read: where a header line may still come, the class is dropped rather
      // than declared without it; elsewhere it is just another line.
      if (current_ != nullptr && !(parameters_seen_ && buffers_seen_)) {
        drop_class();
      } else {
        close_class();
      }
    } else {
      line(partial_);
    }
    partial_.clear();
    overlong_ = false;
  }

  void close_class() {
    if (current_ != nullptr) {
      ++settled_;
      current_ = nullptr;
    }
  }

  void drop_class() {
    found_.erase(current_name_);  // no declaration rather than a wrong one
    close_class();
  }

  void line(std::string_view text) {
    if (text.starts_with("class ")) {
      close_class();
      std::string_view rest = text.substr(6);
      std::size_t n = identifier_length(rest);
      if (n == 0) return;
      std::string name(rest.substr(0, n));
      rest.remove_prefix(n);
      bool module = false;
      if (rest.starts_with("(")) {
        std::size_t b = identifier_length(rest.substr(1));
        if (b == 0 || rest.substr(1 + b) != "):") return;
        module = rest.substr(1, b) == "Module";
      } else if (rest != ":") {
        return;
      }
      if (!wanted_.contains(name) || seen_.contains(name)) return;
      seen_.insert(name);
      current_ = &found_[name];
      current_->module = module;
      current_name_ = std::move(name);
      parameters_seen_ = buffers_seen_ = false;
      return;
    }
    if (current_ == nullptr) return;
    static constexpr std::string_view parameters = "  __parameters__ = ";
    static constexpr std::string_view buffers = "  __buffers__ = ";
    bool is_parameters = !parameters_seen_ && text.starts_with(parameters);
    bool is_buffers = !buffers_seen_ && text.starts_with(buffers);
    if (!is_parameters && !is_buffers) {
      close_class();  // the header is over: the first other line of the body, or a def
      return;
    }
    auto names = parse_name_list(text.substr(is_parameters ? parameters.size() : buffers.size()));
    if (!names) {
      drop_class();
      return;
    }
    (is_parameters ? current_->parameters : current_->buffers) = std::move(*names);
    (is_parameters ? parameters_seen_ : buffers_seen_) = true;
  }

  const TextSet& wanted_;
  const std::size_t max_line_;
  std::string partial_;
  bool overlong_ = false;
  TextSet seen_;
  TextMap<ClassDeclaration> found_;
  ClassDeclaration* current_ = nullptr;  // the class whose header is being read
  std::string current_name_;
  bool parameters_seen_ = false;
  bool buffers_seen_ = false;
  std::size_t settled_ = 0;
};

// Feeds a stored record to the scanner, by offset, within `budget` bytes; true when it was
// read to its end (or the scanner needed no more).
bool scan_stored(const ByteSource& source, const ZipEntry& entry, Scanner& scanner,
                 std::uint64_t& budget) {
  std::array<char, 1 << 16> chunk;
  std::uint64_t done = 0;
  while (done < entry.size) {
    if (budget == 0) return false;
    auto n = static_cast<std::size_t>(
        std::min<std::uint64_t>({chunk.size(), entry.size - done, budget}));
    source.read(payload_offset(source, entry) + done,
                std::as_writable_bytes(std::span(chunk.data(), n)));
    done += n;
    budget -= n;
    if (!scanner.feed(std::string_view(chunk.data(), n))) return true;
  }
  return true;
}

// Inflates a deflated record into the scanner as it goes, within `budget` bytes of output; true
// when the stream ended properly (or the scanner needed no more), false when it was cut: past
// the budget, corrupt, or claiming more input than the record has.
bool scan_deflated(const ByteSource& source, const ZipEntry& entry, Scanner& scanner,
                   std::uint64_t& budget) {
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return false;  // raw deflate, as zip stores it
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, inflateEnd);
  std::array<unsigned char, 1 << 16> in;
  std::array<unsigned char, 1 << 16> out;
  std::uint64_t read = 0;
  for (;;) {
    if (z.avail_in == 0 && read < entry.compressed_size) {
      auto n = static_cast<std::size_t>(
          std::min<std::uint64_t>(in.size(), entry.compressed_size - read));
      source.read(payload_offset(source, entry) + read,
                  std::as_writable_bytes(std::span(in.data(), n)));
      read += n;
      z.next_in = in.data();
      z.avail_in = static_cast<uInt>(n);
    }
    if (budget == 0) return false;
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(std::min<std::uint64_t>(out.size(), budget));
    int status = inflate(&z, Z_NO_FLUSH);
    if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) return false;
    auto produced = static_cast<std::size_t>(z.next_out - out.data());
    budget -= produced;
    if (!scanner.feed(std::string_view(reinterpret_cast<const char*>(out.data()), produced))) {
      return true;
    }
    if (status == Z_STREAM_END) return true;
    // No progress: the input is used up (the stream claims more than the record holds).
    if (produced == 0 && z.avail_in == 0 && read == entry.compressed_size) return false;
  }
}

}  // namespace

std::string code_record_of(std::string_view qualified_name) {
  std::vector<std::string_view> segments;
  for (std::size_t start = 0;;) {
    auto dot = qualified_name.find('.', start);
    std::string_view segment = qualified_name.substr(start, dot - start);
    if (segment.empty() || identifier_length(segment) != segment.size()) return {};
    segments.push_back(segment);
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (segments.size() < 2 || segments.front() != "__torch__") return {};
  std::string record = "code";
  for (std::size_t i = 0; i + 1 < segments.size(); ++i) record.append("/").append(segments[i]);
  return record + ".py";
}

TextMap<ClassDeclaration> read_class_declarations(const ByteSource& source, const ZipArchive& zip,
                                                  std::string_view prefix,
                                                  const std::vector<std::string>& classes,
                                                  const CodeLimits& limits) {
  struct Wanted {
    std::string qualifier;  // "__torch__.a.b"
    TextSet names;          // "C"
  };
  // By record; std::map: records are read in a fixed order, so that the budget runs out at the
  // same place every time.
  std::map<std::string, Wanted> wanted;
  for (const auto& name : classes) {
    std::string record = code_record_of(name);
    if (record.empty()) continue;
    auto dot = name.rfind('.');
    Wanted& w = wanted[std::string(prefix) + "/" + record];
    w.qualifier = name.substr(0, dot);
    w.names.insert(name.substr(dot + 1));
  }
  TextMap<ClassDeclaration> out;
  std::uint64_t budget = limits.max_code_bytes;
  for (const auto& [record, w] : wanted) {
    const ZipEntry* entry = zip.find(record);
    if (entry == nullptr || (entry->flags & 1) != 0) continue;  // missing or encrypted
    if (entry->method != 0 && entry->method != 8) continue;     // a method ckptfs cannot read
    Scanner scanner(w.names, limits.max_line);
    bool complete = entry->method == 0 ? scan_stored(source, *entry, scanner, budget)
                                       : scan_deflated(source, *entry, scanner, budget);
    scanner.finish(complete);
    for (auto& [name, declaration] : scanner.take()) {
      out.emplace(w.qualifier + "." + name, std::move(declaration));
    }
  }
  return out;
}

}  // namespace ckptfs
