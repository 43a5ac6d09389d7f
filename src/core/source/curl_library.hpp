// SPDX-License-Identifier: MIT
// libcurl, loaded with dlopen() when the first remote source is opened: a local mount never maps
// it nor the thirty libraries it needs. The only file that includes <curl/curl.h> (for its types
// and constants); curl's functions are called through curl(), never by name (the executable
// does not link libcurl). Private to the source layer.
#pragma once

#include <curl/curl.h>

#include <type_traits>

namespace ckptfs::detail {

// The functions of libcurl that the source layer calls, with the signatures of curl's headers.
struct CurlLibrary {
  decltype(&::curl_global_init) global_init;
  decltype(&::curl_version_info) version_info;
  decltype(&::curl_easy_init) easy_init;
  decltype(&::curl_easy_cleanup) easy_cleanup;
  decltype(&::curl_easy_reset) easy_reset;
  decltype(&::curl_easy_setopt) easy_setopt;  // variadic
  decltype(&::curl_easy_strerror) easy_strerror;
  decltype(&::curl_easy_getinfo) easy_getinfo;  // variadic
  decltype(&::curl_multi_init) multi_init;
  decltype(&::curl_multi_add_handle) multi_add_handle;
  decltype(&::curl_multi_remove_handle) multi_remove_handle;
  decltype(&::curl_multi_perform) multi_perform;
  decltype(&::curl_multi_poll) multi_poll;
  decltype(&::curl_multi_wakeup) multi_wakeup;
  decltype(&::curl_multi_info_read) multi_info_read;
  decltype(&::curl_multi_cleanup) multi_cleanup;
  decltype(&::curl_multi_setopt) multi_setopt;  // variadic
  decltype(&::curl_slist_append) slist_append;
  decltype(&::curl_slist_free_all) slist_free_all;
  decltype(&::curl_getdate) getdate;
};

// libcurl.so.4, loaded and curl_global_init()ed by the first call (thread-safe; a call after a
// failure tries again). Throws Error(io), one line, when it cannot be loaded, lacks a function
// or is older than CMakeLists.txt's CKPTFS_CURL_MINIMUM (7.85: CURLOPT_PROTOCOLS_STR).
const CurlLibrary& curl();

// curl_easy_setopt and curl_multi_setopt with what their variadic argument may be: a long (or
// curl_off_t), or a pointer (data, string, callback), never an int that curl would read as a long.
template <class T>
inline constexpr bool curl_option_value =
    std::is_same_v<T, long> || std::is_same_v<T, curl_off_t> || std::is_pointer_v<T> ||
    std::is_null_pointer_v<T>;

template <class T>
CURLcode easy_setopt(CURL* easy, CURLoption option, T value) {
  static_assert(curl_option_value<T>, "curl options take a long, a curl_off_t or a pointer");
  return curl().easy_setopt(easy, option, value);
}

template <class T>
CURLMcode multi_setopt(CURLM* multi, CURLMoption option, T value) {
  static_assert(curl_option_value<T>, "curl options take a long, a curl_off_t or a pointer");
  return curl().multi_setopt(multi, option, value);
}

// curl_easy_getinfo into what `info` returns: a long, a curl_socket_t, a char* (curl's own)...
template <class T>
CURLcode easy_getinfo(CURL* easy, CURLINFO info, T* out) {
  return curl().easy_getinfo(easy, info, out);
}

}  // namespace ckptfs::detail
