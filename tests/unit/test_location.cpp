// SPDX-License-Identifier: MIT
// Unit tests of locations: URL parsing, names without credentials, argv masking, sibling files
// beside a sharded set's index (hostile names refused), URLs without their signatures, opening by
// location, and the AWS settings.
#include <ckptfs/base/error.hpp>
#include <ckptfs/source/location.hpp>
#include <ckptfs/source/remote.hpp>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <string>
#include <utility>
#include <vector>

using namespace ckptfs;

TEST_SUITE_BEGIN("location");

TEST_CASE("is_url(): http, https and s3 only, scheme in any case") {
  CHECK(is_url("http://h/x"));
  CHECK(is_url("HTTPS://h/x"));
  CHECK(is_url("s3://bucket/key"));
  CHECK_FALSE(is_url("/data/model.pth"));
  CHECK_FALSE(is_url("model.pth"));
  CHECK_FALSE(is_url("ftp://h/x"));
  CHECK_FALSE(is_url("file:///x"));
  CHECK_FALSE(is_url("http:/h"));
  CHECK_FALSE(is_url("./http://h"));
}

TEST_CASE("parse_url() splits a URL as written") {
  auto u = parse_url("https://user:p%40ss@Host.example:8443/a/b.pth?X-Amz-Signature=abc&y=1");
  REQUIRE(u);
  CHECK(u->scheme == "https");
  CHECK(u->userinfo == "user:p%40ss");
  CHECK(u->host == "Host.example");
  CHECK(u->port == "8443");
  CHECK(u->path == "/a/b.pth");
  CHECK(u->query == "X-Amz-Signature=abc&y=1");
  CHECK(u->has_query);

  auto v6 = parse_url("http://[::1]:8080/x");
  REQUIRE(v6);
  CHECK(v6->host == "[::1]");
  CHECK(v6->port == "8080");

  auto s3 = parse_url("s3://bucket/dir/my file ü.pth");
  REQUIRE(s3);
  CHECK(s3->host == "bucket");
  CHECK(s3->path == "/dir/my file ü.pth");

  CHECK_FALSE(parse_url("http:///x"));     // no host
  CHECK_FALSE(parse_url("http://h:0/x"));  // port out of range
  CHECK_FALSE(parse_url("http://h:65536/x"));
  CHECK_FALSE(parse_url("http://h:8a/x"));
  CHECK_FALSE(parse_url("http://h/x#frag"));
  CHECK_FALSE(parse_url("http://h/a b"));  // must arrive encoded
  CHECK_FALSE(parse_url("http://h/\x01"));
  CHECK_FALSE(parse_url("s3://user@bucket/key"));  // no userinfo or port on s3
  CHECK_FALSE(parse_url("s3://bucket:1/key"));
  CHECK_FALSE(parse_url("http://[::1/x"));
}

TEST_CASE("display_location() never shows credentials") {
  CHECK(display_location("/data/m.pth") == "/data/m.pth");
  CHECK(display_location("https://u:secret@h:1/m.pth?X-Amz-Signature=s&X-Amz-Credential=AK") ==
        "https://h:1/m.pth?...");
  CHECK(display_location("http://h/m.pth") == "http://h/m.pth");
  CHECK(display_location("s3://b/k") == "s3://b/k");
  // Not parseable: only the scheme is shown.
  CHECK(display_location("https://u:secret@h/a b") == "https://...");
}

TEST_CASE("url_without_signature(): the URL less the parameters that sign it, nothing else") {
  // Signatures of every scheme named, wherever they are in the query: left out.
  CHECK(url_without_signature("https://h/m.pth?X-Amz-Algorithm=A&X-Amz-Credential=K%2F1&"
                              "X-Amz-Date=D&X-Amz-Expires=600&X-Amz-SignedHeaders=host&"
                              "X-Amz-Signature=abc&X-Amz-Security-Token=T") == "https://h/m.pth?");
  CHECK(url_without_signature("https://h/m.pth?X-Goog-Signature=s&alt=media&X-Goog-Date=d") ==
        "https://h/m.pth?alt=media");
  CHECK(url_without_signature("http://h/m?AWSAccessKeyId=K&Expires=1&Signature=s%3D") ==
        "http://h/m?");
  CHECK(url_without_signature("https://cdn/m?Policy=p&Key-Pair-Id=k&Signature=s&v=2") ==
        "https://cdn/m?v=2");
  CHECK(url_without_signature("https://h/m?GoogleAccessId=g&Expires=2&Signature=s") ==
        "https://h/m?");
  // Two signatures of one object: one text. Two objects of one endpoint: two.
  CHECK(url_without_signature("https://h/m?versionId=3&X-Amz-Signature=a&X-Amz-Date=1") ==
        url_without_signature("https://h/m?X-Amz-Date=2&versionId=3&X-Amz-Signature=b"));
  CHECK(url_without_signature("http://h/dl?f=a.pth") == "http://h/dl?f=a.pth");
  CHECK(url_without_signature("http://h/dl?f=a.pth") !=
        url_without_signature("http://h/dl?f=b.pth"));
  // Everything else is kept as written: userinfo, port, order, case, empty values, "?" alone.
  CHECK(url_without_signature("http://u:p@h:81/a/b?z=1&a=2&signature=x&x-amz-date=d&k=") ==
        "http://u:p@h:81/a/b?z=1&a=2&signature=x&x-amz-date=d&k=");
  CHECK(url_without_signature("http://h/m?") == "http://h/m?");
  CHECK(url_without_signature("http://h/m") == "http://h/m");
  CHECK(url_without_signature("http://h/m?Signatures=1&X-Amz=2") ==
        "http://h/m?Signatures=1&X-Amz=2");
  CHECK(url_without_signature("s3://b/k?Signature=1") == "s3://b/k?");
  CHECK_FALSE(url_without_signature("/data/m.pth"));
  CHECK_FALSE(url_without_signature("http:///m"));
}

TEST_CASE("mask_credentials() overwrites userinfo and query in place") {
  std::string a = "https://user:secret@h/m.pth?sig=abc";
  mask_credentials(a.data());
  CHECK(a == "https://***********@h/m.pth?*******");
  std::string b = "/data/x?y";  // a path is left alone
  mask_credentials(b.data());
  CHECK(b == "/data/x?y");
  std::string c = "http://h/p";
  mask_credentials(c.data());
  CHECK(c == "http://h/p");
  mask_credentials(nullptr);
}

TEST_CASE("percent_encode(): RFC 3986 unreserved characters stay, '/' when asked") {
  CHECK(percent_encode("a-b_c.d~e", false) == "a-b_c.d~e");
  CHECK(percent_encode("a b/c?d%", true) == "a%20b/c%3Fd%25");
  CHECK(percent_encode("a/b", false) == "a%2Fb");
  CHECK(percent_encode("\xc3\xbc", true) == "%C3%BC");
}

TEST_CASE("sibling_location(): the file beside a path or URL") {
  CHECK(sibling_location("https://h/m/llama/model.safetensors.index.json",
                         "model-00001-of-00002.safetensors") ==
        "https://h/m/llama/model-00001-of-00002.safetensors");
  CHECK(sibling_location("https://u:p@h:8/a/i.json?sig=1", "b c.bin") ==
        "https://u:p@h:8/a/b%20c.bin");  // the query is for the index only
  CHECK(sibling_location("http://h/i.json", "x.bin") == "http://h/x.bin");
  CHECK(sibling_location("http://h", "x.bin") == "http://h/x.bin");
  CHECK(sibling_location("s3://bucket/dir/index.json", "a b.bin") == "s3://bucket/dir/a b.bin");
  CHECK(sibling_location("/data/llama/index.json", "shard.safetensors") ==
        "/data/llama/shard.safetensors");
  CHECK(sibling_location("index.json", "shard.bin") == "shard.bin");
  CHECK(sibling_location("/index.json", "sub/shard.bin") == "/sub/shard.bin");
}

TEST_CASE("sibling_location() refuses names that would leave the index's directory") {
  for (const char* bad : {"", "/etc/passwd", "../x.bin", "a/../../x", "a//b", "./x", "a/.",
                          "http://evil/x", "s3://b/k", "a\\b"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(sibling_location("https://h/a/index.json", bad), Error);
    CHECK_THROWS_AS(sibling_location("/data/index.json", bad), Error);
  }
  CHECK_THROWS_AS(sibling_location("/data/index.json", std::string_view("a\0b", 3)), Error);
  CHECK_THROWS_AS(sibling_location("https://h/index.json", "a\nb"), Error);
  try {
    sibling_location("/d/index.json", "../../etc/passwd");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::bad_checkpoint);
    CHECK(std::string(e.what()).find("\"../../etc/passwd\"") != std::string::npos);
  }
}

TEST_CASE("open_location(): local files as FileSource, URLs need a remote context") {
  CHECK_THROWS_AS(open_location("/nonexistent/ckptfs/x.pth", nullptr), Error);
  try {
    open_location("https://h/x.pth", nullptr);
    FAIL("a URL opened without a remote context");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::usage);
  }
  auto self = open_location("/proc/self/exe", nullptr);
  CHECK(self->size() > 0);
  CHECK(self->fd() >= 0);
}

// The AWS variables (and HOME) unset for a test, and put back as they were after it.
class CleanAwsEnvironment {
 public:
  CleanAwsEnvironment() {
    for (const char* name : names_) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name);
    }
    ::setenv("HOME", "/nonexistent/ckptfs-home", 1);
  }
  ~CleanAwsEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  CleanAwsEnvironment(const CleanAwsEnvironment&) = delete;
  CleanAwsEnvironment& operator=(const CleanAwsEnvironment&) = delete;

 private:
  static constexpr const char* names_[] = {"AWS_ACCESS_KEY_ID",
                                           "AWS_SECRET_ACCESS_KEY",
                                           "AWS_SESSION_TOKEN",
                                           "AWS_REGION",
                                           "AWS_DEFAULT_REGION",
                                           "AWS_ENDPOINT_URL",
                                           "AWS_ENDPOINT_URL_S3",
                                           "AWS_PROFILE",
                                           "AWS_CONFIG_FILE",
                                           "AWS_SHARED_CREDENTIALS_FILE",
                                           "HOME"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_CASE("S3Settings::from_environment(): both keys or neither, an http(s) endpoint") {
  CleanAwsEnvironment clean;
  S3Settings none = S3Settings::from_environment();
  CHECK(none.access_key.empty());
  CHECK(none.region == "us-east-1");
  CHECK(none.endpoint.empty());

  ::setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
  CHECK_THROWS_AS(S3Settings::from_environment(), Error);
  ::setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
  ::setenv("AWS_DEFAULT_REGION", "eu-west-3", 1);
  ::setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
  S3Settings s = S3Settings::from_environment();
  CHECK(s.access_key == "AKID");
  CHECK(s.secret_key == "secret");
  CHECK(s.region == "eu-west-3");
  CHECK(s.endpoint == "http://127.0.0.1:9000");
  ::setenv("AWS_REGION", "ap-south-1", 1);
  ::setenv("AWS_ENDPOINT_URL_S3", "https://s3.example", 1);
  s = S3Settings::from_environment();
  CHECK(s.region == "ap-south-1");
  CHECK(s.endpoint == "https://s3.example");
  ::setenv("AWS_ENDPOINT_URL_S3", "s3://nope", 1);
  CHECK_THROWS_AS(S3Settings::from_environment(), Error);
}

TEST_CASE("S3Settings::from_environment(): the shared credentials and config files") {
  char pattern[] = "/tmp/ckptfs-aws-XXXXXX";
  REQUIRE(::mkdtemp(pattern) != nullptr);
  const std::string dir = pattern;
  const std::string credentials = dir + "/credentials";
  const std::string config = dir + "/config";
  {
    FILE* f = std::fopen(credentials.c_str(), "w");
    REQUIRE(f);
    std::fputs(
        "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = sdefault\n"
        "# a comment\n[work]\naws_access_key_id=AKWORK\naws_secret_access_key=swork\n"
        "aws_session_token = tokwork\n",
        f);
    std::fclose(f);
    f = std::fopen(config.c_str(), "w");
    REQUIRE(f);
    std::fputs(
        "[default]\nregion = eu-north-1\n[profile work]\nregion = ca-central-1\n"
        "endpoint_url = https://objects.example\n",
        f);
    std::fclose(f);
  }
  CleanAwsEnvironment clean;
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", credentials.c_str(), 1);
  ::setenv("AWS_CONFIG_FILE", config.c_str(), 1);
  S3Settings d = S3Settings::from_environment();
  CHECK(d.access_key == "AKDEFAULT");
  CHECK(d.secret_key == "sdefault");
  CHECK(d.session_token.empty());
  CHECK(d.region == "eu-north-1");
  ::setenv("AWS_PROFILE", "work", 1);
  S3Settings w = S3Settings::from_environment();
  CHECK(w.access_key == "AKWORK");
  CHECK(w.session_token == "tokwork");
  CHECK(w.region == "ca-central-1");
  CHECK(w.endpoint == "https://objects.example");
  // The environment wins over the files.
  ::setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "senv", 1);
  ::setenv("AWS_REGION", "us-west-2", 1);
  S3Settings e = S3Settings::from_environment();
  CHECK(e.access_key == "AKENV");
  CHECK(e.session_token.empty());
  CHECK(e.region == "us-west-2");
  std::remove(credentials.c_str());
  std::remove(config.c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE(
    "S3Settings::from_environment(): a settings file that is a FIFO is refused, not waited "
    "on") {
  char pattern[] = "/tmp/ckptfs-aws-XXXXXX";
  REQUIRE(::mkdtemp(pattern) != nullptr);
  const std::string dir = pattern;
  const std::string fifo = dir + "/config";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CleanAwsEnvironment clean;
  for (const char* variable : {"AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"}) {
    CAPTURE(variable);
    ::setenv(variable, fifo.c_str(), 1);
    // Run apart: a blocking open would never return (the test then fails instead of hanging,
    // after a writer is found for the FIFO).
    auto done = std::async(std::launch::async, [] {
      try {
        (void)S3Settings::from_environment();
        return std::string("accepted");
      } catch (const Error& e) {
        return std::string(e.what());
      }
    });
    const bool finished = done.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    if (!finished) {
      int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    REQUIRE(finished);
    const std::string why = done.get();
    CHECK(why.find("not a regular file") != std::string::npos);
    CHECK(why.find(fifo) != std::string::npos);
    ::unsetenv(variable);
  }
  // Missing files are no error: there are simply no settings in them.
  ::setenv("AWS_CONFIG_FILE", (dir + "/missing").c_str(), 1);
  CHECK(S3Settings::from_environment().region == "us-east-1");
  std::remove(fifo.c_str());
  ::rmdir(dir.c_str());
}

TEST_SUITE_END();
