// SPDX-License-Identifier: MIT
// Loading libcurl: dlopen, dlsym of each function, the version check, curl_global_init.
#include "curl_library.hpp"

#include <ckptfs/base/error.hpp>

#include <fmt/format.h>

#include <dlfcn.h>

#include <string>
#include <string_view>

namespace ckptfs::detail {
namespace {

constexpr const char* soname = "libcurl.so.4";

// "MAJOR.MINOR.PATCH" as curl's version_num: 0xMMmmpp.
constexpr unsigned version_number(std::string_view text) {
  unsigned number = 0;
  unsigned part = 0;
  for (char c : text) {
    if (c == '.') {
      number = number << 8 | part;
      part = 0;
    } else {
      part = part * 10 + static_cast<unsigned>(c - '0');
    }
  }
  return number << 8 | part;
}

constexpr std::string_view minimum_text = CKPTFS_CURL_MINIMUM;  // from CMakeLists.txt
constexpr unsigned minimum = version_number(minimum_text);
static_assert(version_number("7.85.0") == 0x075500);
static_assert(LIBCURL_VERSION_NUM >= minimum,
              "the curl headers are older than CKPTFS_CURL_MINIMUM");

[[noreturn]] void unusable(const std::string& why) {
  throw Error(ExitCode::io, fmt::format("remote checkpoints need libcurl {} or newer ({}): {}",
                                        minimum_text, soname, why));
}

std::string last_dl_error() {
  const char* e = ::dlerror();
  return e != nullptr ? e : "unknown error";
}

template <class Function>
void resolve(void* handle, Function& to, const char* name) {
  ::dlerror();
  void* address = ::dlsym(handle, name);
  if (address == nullptr) unusable(last_dl_error());
  to = reinterpret_cast<Function>(address);
}

CurlLibrary resolve_all(void* handle) {
  CurlLibrary c{};
  resolve(handle, c.version_info, "curl_version_info");
  const curl_version_info_data* info = c.version_info(CURLVERSION_NOW);
  if (info == nullptr || info->version_num < minimum) {
    unusable(fmt::format("it is {}", info != nullptr && info->version != nullptr
                                         ? quote(info->version)
                                         : "of an unknown version"));
  }
  resolve(handle, c.global_init, "curl_global_init");
  resolve(handle, c.easy_init, "curl_easy_init");
  resolve(handle, c.easy_cleanup, "curl_easy_cleanup");
  resolve(handle, c.easy_reset, "curl_easy_reset");
  resolve(handle, c.easy_setopt, "curl_easy_setopt");
  resolve(handle, c.easy_strerror, "curl_easy_strerror");
  resolve(handle, c.easy_getinfo, "curl_easy_getinfo");
  resolve(handle, c.multi_init, "curl_multi_init");
  resolve(handle, c.multi_add_handle, "curl_multi_add_handle");
  resolve(handle, c.multi_remove_handle, "curl_multi_remove_handle");
  resolve(handle, c.multi_perform, "curl_multi_perform");
  resolve(handle, c.multi_poll, "curl_multi_poll");
  resolve(handle, c.multi_wakeup, "curl_multi_wakeup");
  resolve(handle, c.multi_info_read, "curl_multi_info_read");
  resolve(handle, c.multi_cleanup, "curl_multi_cleanup");
  resolve(handle, c.multi_setopt, "curl_multi_setopt");
  resolve(handle, c.slist_append, "curl_slist_append");
  resolve(handle, c.slist_free_all, "curl_slist_free_all");
  resolve(handle, c.getdate, "curl_getdate");
  const CURLcode init = c.global_init(CURL_GLOBAL_DEFAULT);
  if (init != CURLE_OK) unusable(fmt::format("curl_global_init failed: {}", c.easy_strerror(init)));
  return c;
}

CurlLibrary load() {
  void* handle = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) unusable(last_dl_error());
  try {
    return resolve_all(handle);  // the handle is never closed once this succeeds
  } catch (...) {
    ::dlclose(handle);
    throw;
  }
}

}  // namespace

const CurlLibrary& curl() {
  static const CurlLibrary library = load();
  return library;
}

}  // namespace ckptfs::detail
