// SPDX-License-Identifier: MIT
// A test-only stand-in for libcurl.so.4 that says it is libcurl 7.61.1, older than ckptfs needs
// and without the rest of curl's functions: test_remote.py copies it to a directory of its own
// as libcurl.so.4 and runs ckptfs with LD_LIBRARY_PATH naming that directory, so that ckptfs's
// dlopen() finds it instead of the system's libcurl.
#include <curl/curl.h>

extern "C" curl_version_info_data* curl_version_info(CURLversion) {
  static curl_version_info_data data = [] {
    curl_version_info_data d{};
    d.age = CURLVERSION_NOW;
    d.version = "7.61.1";
    d.version_num = 0x073d01;
    return d;
  }();
  return &data;
}
