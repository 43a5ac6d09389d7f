// SPDX-License-Identifier: MIT
// Remote sources: a model's bytes read by HTTP(S) range requests (S3 too, signed with SigV4),
// through a memory block cache shared by every file of a mount, an optional cache on disk,
// readahead on sequential reads, and bounded retries. open_location() opens local paths and
// URLs alike.
#pragma once

#include <ckptfs/source/byte_source.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ckptfs {

namespace detail {
struct RemoteShared;
}

// Bytes per cached block: the unit of fetching and caching. A small random read fetches the
// block(s) it touches, never more.
inline constexpr std::uint64_t remote_block_size = 256 * 1024;  // == Block::pooled_length

struct RemoteOptions {
  bool insecure = false;  // -o insecure: no TLS certificate or host name verification
  std::string cacert;     // -o cacert=FILE: CA certificates to verify servers with
  std::uint64_t cache_size = 256ull << 20;  // -o cache_size=: memory cache, bytes
  std::string cache_dir;                    // -o cache_dir=DIR: persistent block cache; empty: none
  std::uint64_t cache_dir_size = 32ull << 30;  // -o cache_dir_size=: its bound, bytes
  // -o timeout=: how long a read (or the mount's first request) may take, retries included,
  // before it fails (EIO for a read, an error at mount).
  std::chrono::milliseconds timeout{30'000};
  unsigned max_connections = 8;  // range requests in flight per server (HTTP/1.1 connections)
  // Where something worth saying once while reads go on is said (cache_dir holding a file the
  // cache did not make); empty: nowhere. Called from any thread.
  std::function<void(const std::string&)> warn;
};

// How s3:// URLs are reached, from the usual AWS variables (read once):
//   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (both or neither), AWS_SESSION_TOKEN; without
//   them, aws_access_key_id, aws_secret_access_key and aws_session_token of profile
//   AWS_PROFILE (default "default") in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials), else
//   in AWS_CONFIG_FILE (~/.aws/config); without any, unsigned requests (public buckets).
//   AWS_REGION, else AWS_DEFAULT_REGION, else the profile's region, else us-east-1.
//   AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else the profile's endpoint_url: a custom
//   endpoint, addressed path-style (ENDPOINT/bucket/key); without one,
//   https://BUCKET.s3.REGION.amazonaws.com/KEY (path-style on s3.REGION.amazonaws.com when the
//   bucket name has a dot).
struct S3Settings {
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  std::string region = "us-east-1";
  std::string endpoint;  // without a trailing '/'; empty: AWS
  // Throws Error(usage) when only one of the key variables is set, the endpoint is not an
  // http(s) URL, or a settings file is there but is not a regular file (a FIFO is never waited
  // on) or is over 1 MiB.
  static S3Settings from_environment();
};

// The remote side of one mount (or one inspect): the connection pool, the block cache and its
// budget, the disk cache, and the threads that fetch. Every source it opens shares them and
// keeps them alive. Thread-safe.
class RemoteContext {
 public:
  // Loads libcurl (libcurl.so.4, not linked: a process that never makes a RemoteContext never
  // maps it). Throws Error(io) when it cannot be loaded or is older than 7.85, Error(usage) for
  // an unusable cache_dir.
  explicit RemoteContext(RemoteOptions options, S3Settings s3 = {});
  ~RemoteContext();
  RemoteContext(const RemoteContext&) = delete;
  RemoteContext& operator=(const RemoteContext&) = delete;

  // Opens the object at `url` (http, https or s3): one request for its size, its identity
  // (ETag, else Last-Modified and size) and its first block. Throws Error naming the problem
  // without the URL (the caller names it with display_location()):
  //   access_denied (HTTP 401, 403: credentials, S3 signature); io (HTTP 404 and other
  //   answers that are not the object; a server that ignores Range requests); unreachable
  //   (DNS, connection, TLS verification, timeout, HTTP 5xx after retries); usage (a URL that
  //   does not parse).
  // The source's name() is the URL without credentials; fd() is -1; times() are its
  // Last-Modified; reads go through the cache and throw Error (io, unreachable, access_denied)
  // once the timeout has passed without the bytes. Once a response shows another identity (the
  // object was replaced, truncated or deleted), every read throws Error(io) and unchanged() is
  // false. unchanged(true), asked at each open, also asks the server again in the background
  // when the identity was last seen more than 5 s before (it never waits for the answer).
  std::unique_ptr<ByteSource> open(const std::string& url);

  // Stops the threads and closes the connections, for fork(): they start again on the next
  // request, in whichever process makes it. Not concurrently with reads.
  void quiesce() noexcept;

  // Ends every transfer in flight, for good: reads waiting for one fail now (Error(io)), and
  // every read that needs the network from then on fails at once. For a mount being stopped
  // (SIGTERM), which must not wait for a slow server. Thread-safe; concurrently with reads too.
  void cancel() noexcept;

 private:
  std::shared_ptr<detail::RemoteShared> shared_;
};

// Opens `location`: a URL through `remote`, anything else as a local file (FileSource). Throws
// what FileSource and RemoteContext::open throw; Error(usage) for a URL without `remote`.
std::unique_ptr<ByteSource> open_location(const std::string& location, RemoteContext* remote);

}  // namespace ckptfs
