// SPDX-License-Identifier: MIT
// Where a model lives: a local path or a URL (http, https, s3), how to name it without its
// credentials, and how to find a file beside it (the shards next to a sharded set's index).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ckptfs {

// A URL split into its parts, as written (nothing decoded). `scheme` is lower-case.
//   "https://user:pw@host:8443/a/b.pth?X-Amz-Signature=..." ->
//   {scheme "https", userinfo "user:pw", host "host", port "8443", path "/a/b.pth",
//    query "X-Amz-Signature=..."}
// An IPv6 host keeps its brackets ("[::1]"). s3 URLs name a bucket as host: "s3://bucket/key".
struct Url {
  std::string scheme;
  std::string userinfo;  // without the '@'; empty when absent
  std::string host;
  std::string port;   // digits, empty when absent
  std::string path;   // starts with '/' (or is empty)
  std::string query;  // without the '?'; empty when absent
  bool has_query = false;
};

// Whether `location` names a remote object: it starts with http://, https:// or s3://
// (scheme case-insensitive). Anything else is a local path.
bool is_url(std::string_view location) noexcept;

// Splits an http, https or s3 URL. nullopt when it is not one, or is malformed: no host, a
// port that is not 1-65535, a fragment, or a control character, space or byte >= 0x80 (a URL
// must arrive percent-encoded; s3 keys are the exception: "s3://b/my file" is the key "my file").
std::optional<Url> parse_url(std::string_view location);

// What `location` is called in messages, logs, /proc/mounts and index.json: a local path as is;
// a URL without its userinfo and with its query (a presigned URL's signature, credential and
// token) replaced by "?...": "https://u:p@h/m.pth?X-Amz-Signature=s" -> "https://h/m.pth?...".
// A string that looks like a URL but does not parse is shown as its scheme and "://...".
std::string display_location(std::string_view location);

// What names the object a URL gives access to, whoever signed it and until when: the URL as
// written (userinfo, host, port, path, and the query's other parameters in their order) without
// the query parameters known to sign a request: X-Amz-* (S3 presigned, SigV4), X-Goog-* (GCS
// V4), and Signature, Expires, AWSAccessKeyId, GoogleAccessId, Key-Pair-Id, Policy (S3 and GCS
// V2, CloudFront), matched case-sensitively as those services write them. Two presigned URLs of
// one object give one text; URLs that differ in any other parameter ("dl?f=a" and "dl?f=b") give
// two. The disk cache's key (hashed: it may still hold a token). nullopt when `location` is not
// a URL that parses.
//   "https://h/m.pth?X-Amz-Signature=s&versionId=3&X-Amz-Date=d" -> "https://h/m.pth?versionId=3"
std::optional<std::string> url_without_signature(std::string_view location);

// The same string with the credential characters of every URL (userinfo, query) overwritten by
// '*' in place, its length unchanged: for argv, so that ps(1) does not show them.
void mask_credentials(char* text) noexcept;

// The location of the file `name` beside `location` (a local path or URL): `location`'s last
// path component replaced by `name`, a URL's query dropped.
//   ("https://h/m/llama/model.safetensors.index.json", "model-00001-of-00002.safetensors")
//     -> "https://h/m/llama/model-00001-of-00002.safetensors"
//   ("/data/llama/index.json", "shard.safetensors") -> "/data/llama/shard.safetensors"
//   ("s3://bucket/dir/index.json", "a b.bin") -> "s3://bucket/dir/a b.bin" (s3 keys are raw)
// `name` is untrusted (it comes from the file at `location`): it may name a file in a
// subdirectory ("sub/x.bin") but must be relative, with no empty, "." or ".." component and no
// NUL or backslash, so that it never leaves the directory of `location`. Its bytes are
// percent-encoded into an http(s) URL (RFC 3986 unreserved characters and '/' stay as they are).
// Throws Error(bad_checkpoint) naming `name` (quoted) when it is not such a name.
std::string sibling_location(std::string_view location, std::string_view name);

// `text` with every byte outside RFC 3986's unreserved set (A-Z a-z 0-9 - . _ ~) written %XX,
// except '/' when `keep_slash`. What SigV4 requires of an S3 key, and what a raw file name
// needs to become part of an http(s) URL path.
std::string percent_encode(std::string_view text, bool keep_slash);

}  // namespace ckptfs
