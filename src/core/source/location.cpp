// SPDX-License-Identifier: MIT
// URL parsing, credential-free names and sibling locations for local paths and URLs alike.
#include <ckptfs/base/error.hpp>
#include <ckptfs/source/location.hpp>

#include <fmt/format.h>

#include <cstring>

namespace ckptfs {
namespace {

constexpr std::string_view schemes[] = {"http", "https", "s3"};

// The scheme of `text` when it is one of ours followed by "://", lower-cased.
std::optional<std::string> our_scheme(std::string_view text) {
  const auto colon = text.find("://");
  if (colon == std::string_view::npos || colon > 5) return std::nullopt;
  std::string scheme(text.substr(0, colon));
  for (char& c : scheme) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (auto s : schemes) {
    if (scheme == s) return scheme;
  }
  return std::nullopt;
}

bool is_unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

// The end of the authority (userinfo, host, port) that starts at `from`.
std::size_t authority_end(std::string_view text, std::size_t from) {
  const auto end = text.find_first_of("/?#", from);
  return end == std::string_view::npos ? text.size() : end;
}

}  // namespace

bool is_url(std::string_view location) noexcept {
  try {
    return our_scheme(location).has_value();
  } catch (...) {
    return false;
  }
}

std::optional<Url> parse_url(std::string_view text) {
  auto scheme = our_scheme(text);
  if (!scheme) return std::nullopt;
  const bool s3 = *scheme == "s3";
  for (unsigned char c : text) {
    // s3 keys are written raw ("s3://b/my file"); only control characters are refused there.
    if (c < 0x20 || c == 0x7f || (!s3 && (c == ' ' || c >= 0x80))) return std::nullopt;
  }
  Url url;
  url.scheme = *scheme;
  std::size_t at = text.find("://") + 3;
  const std::size_t end = authority_end(text, at);
  std::string_view authority = text.substr(at, end - at);
  if (const auto arobase = authority.rfind('@'); arobase != std::string_view::npos) {
    url.userinfo = authority.substr(0, arobase);
    authority.remove_prefix(arobase + 1);
  }
  std::string_view host = authority;
  std::string_view port;
  if (host.starts_with('[')) {
    const auto close = host.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    port = host.substr(close + 1);
    host = host.substr(0, close + 1);
    if (!port.empty() && !port.starts_with(':')) return std::nullopt;
    if (!port.empty()) port.remove_prefix(1);
  } else if (const auto colon = host.rfind(':'); colon != std::string_view::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  if (host.empty()) return std::nullopt;
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) {
      return std::nullopt;
    }
    const int number = std::stoi(std::string(port));
    if (number < 1 || number > 65535) return std::nullopt;
  }
  if (s3 && (!url.userinfo.empty() || !port.empty())) return std::nullopt;
  url.host = host;
  url.port = port;
  std::string_view rest = text.substr(end);
  if (rest.find('#') != std::string_view::npos) return std::nullopt;
  if (const auto question = rest.find('?'); question != std::string_view::npos) {
    url.query = rest.substr(question + 1);
    url.has_query = true;
    rest = rest.substr(0, question);
  }
  url.path = rest;
  return url;
}

std::string display_location(std::string_view location) {
  if (!is_url(location)) return std::string(location);
  auto url = parse_url(location);
  if (!url) return fmt::format("{}://...", *our_scheme(location));
  std::string out = url->scheme + "://" + url->host;
  if (!url->port.empty()) out += ":" + url->port;
  out += url->path;
  if (url->has_query) out += "?...";
  return out;
}

std::optional<std::string> url_without_signature(std::string_view location) {
  auto url = parse_url(location);
  if (!url) return std::nullopt;
  auto signs = [](std::string_view name) {
    static constexpr std::string_view exact[] = {"Signature",      "Expires",     "AWSAccessKeyId",
                                                 "GoogleAccessId", "Key-Pair-Id", "Policy"};
    if (name.starts_with("X-Amz-") || name.starts_with("X-Goog-")) return true;
    for (auto e : exact) {
      if (name == e) return true;
    }
    return false;
  };
  std::string out = url->scheme + "://";
  if (!url->userinfo.empty()) out += url->userinfo + "@";
  out += url->host;
  if (!url->port.empty()) out += ":" + url->port;
  out += url->path;
  if (!url->has_query) return out;
  std::string kept;
  std::string_view query = url->query;
  while (true) {
    const auto amp = query.find('&');
    const std::string_view parameter = query.substr(0, amp);
    if (!signs(parameter.substr(0, parameter.find('=')))) {
      if (!kept.empty()) kept += '&';
      kept += parameter;
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  // "?" alone stays: "m.pth?" and "m.pth" may be two objects to a server.
  return out + "?" + kept;
}

void mask_credentials(char* text) noexcept {
  if (text == nullptr || !is_url(text)) return;
  const std::size_t length = std::strlen(text);
  std::string_view view(text, length);
  const std::size_t start = view.find("://") + 3;
  const std::size_t end = authority_end(view, start);
  const auto arobase = view.substr(start, end - start).rfind('@');
  if (arobase != std::string_view::npos) std::memset(text + start, '*', arobase);
  if (const auto question = view.find('?', end); question != std::string_view::npos) {
    std::memset(text + question + 1, '*', length - question - 1);
  }
}

std::string percent_encode(std::string_view text, bool keep_slash) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (is_unreserved(c) || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string sibling_location(std::string_view location, std::string_view name) {
  auto refuse = [&](const char* why) -> std::string {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("file name {} {}: it must be a relative name beside the index",
                            quote(name), why));
  };
  if (name.empty()) refuse("is empty");
  if (name.starts_with('/')) refuse("is absolute");
  if (name.find('\0') != std::string_view::npos) refuse("holds a NUL byte");
  if (name.find('\\') != std::string_view::npos) refuse("holds a backslash");
  if (is_url(name) || name.find("://") != std::string_view::npos) refuse("is a URL");
  for (std::size_t at = 0; at <= name.size();) {
    auto slash = name.find('/', at);
    if (slash == std::string_view::npos) slash = name.size();
    const std::string_view part = name.substr(at, slash - at);
    if (part.empty()) refuse("has an empty component");
    if (part == "." || part == "..") refuse("has a '.' or '..' component");
    at = slash + 1;
  }
  if (!is_url(location)) {
    const auto slash = location.rfind('/');
    if (slash == std::string_view::npos) return std::string(name);
    return std::string(location.substr(0, slash + 1)) + std::string(name);
  }
  auto url = parse_url(location);
  if (!url)
    throw Error(ExitCode::usage, fmt::format("{} is not a valid URL", display_location(location)));
  const auto slash = url->path.rfind('/');
  const std::string directory = slash == std::string::npos ? "/" : url->path.substr(0, slash + 1);
  if (url->scheme != "s3") {
    for (unsigned char c : name) {
      if (c < 0x20 || c == 0x7f) refuse("holds a control character");
    }
  }
  std::string out = url->scheme + "://";
  if (!url->userinfo.empty()) out += url->userinfo + "@";
  out += url->host;
  if (!url->port.empty()) out += ":" + url->port;
  out += directory;
  out += url->scheme == "s3" ? std::string(name) : percent_encode(name, true);
  return out;
}

}  // namespace ckptfs
