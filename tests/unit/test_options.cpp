// SPDX-License-Identifier: MIT
// Tests of the command line's option parser (src/cli/options.cpp): every number and size
// option at its limits (refused past them, never wrapped), and every path option made absolute
// as it is parsed.
#include "cli/options.hpp"

#include <doctest/doctest.h>

#include <unistd.h>
#include <climits>
#include <filesystem>
#include <string>
#include <vector>

using ckptfs::cli::parse_mount_options;
using ckptfs::cli::parse_size;
using ckptfs::cli::ParseResult;

TEST_SUITE_BEGIN("options");

namespace {

constexpr std::uint64_t two_63 = std::uint64_t{1} << 63;
constexpr std::uint64_t tib = std::uint64_t{1} << 40;

// parse_mount_options() of "-o OPTION A B".
ParseResult with(const std::string& option) {
  return parse_mount_options({"-o", option, "model.pth", "mnt"});
}
bool accepted(const std::string& option) { return with(option).error.empty(); }

}  // namespace

TEST_CASE("parse_size(): units, fractions, and every limit") {
  CHECK(parse_size("1") == 1u);
  CHECK(parse_size("4096") == 4096u);
  CHECK(parse_size("1b") == 1u);
  CHECK(parse_size("256M") == 256u << 20);
  CHECK(parse_size("5GB") == 5'000'000'000u);
  CHECK(parse_size("1.5GiB") == 1610612736u);
  CHECK(parse_size("0.5k") == 512u);
  CHECK(parse_size(".5K") == 512u);
  CHECK(parse_size("5.") == 5u);
  CHECK(parse_size("0.001K") == 1u);        // 1.024 bytes, rounded down
  CHECK(parse_size("1.0000000001") == 1u);  // digits finer than a byte
  CHECK(parse_size("2.5tb") == 2'500'000'000'000u);
  // The largest size: 2^63 - 1, in any unit; 2^63 and past it refused, never wrapped.
  CHECK(parse_size("9223372036854775807") == two_63 - 1);
  CHECK_FALSE(parse_size("9223372036854775808"));
  CHECK_FALSE(parse_size("18446744073709551615"));
  CHECK_FALSE(parse_size("18446744073709551616"));
  CHECK_FALSE(parse_size("99999999999999999999999999"));
  CHECK(parse_size("8388607T") == two_63 - tib);
  CHECK_FALSE(parse_size("8388608T"));
  CHECK(parse_size("8388607.5TiB") == two_63 - tib / 2);
  CHECK(parse_size("9223372.036854775807TB") == two_63 - 1);  // exact to the byte
  CHECK_FALSE(parse_size("9223372.036854775808TB"));
  CHECK_FALSE(parse_size("18446744.1TB"));  // issue 20: wrapped to ~26 GB
  CHECK_FALSE(parse_size("18446744073709551615.9"));
  CHECK_FALSE(parse_size("16777215.99999999999999999999T"));
  CHECK_FALSE(parse_size("17179869184G"));  // 2^64 bytes
  // Not sizes.
  for (const char* bad : {"", "0", "0.0", "0.0001", ".", "K", "-1", "+1", "1..5", "1.5.5", "1 K",
                          "1KBB", "1e3", "0x10", "1.5X", "nan", "inf", " 1"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_size(bad));
  }
}

TEST_CASE("every size option uses parse_size() within its own bounds") {
  CHECK(with("shard_size=18446744.1TB").error.find("invalid shard_size") != std::string::npos);
  CHECK(with("shard_size=8388607T").options.shard_size == two_63 - tib);
  CHECK(accepted("cache_size=4M"));
  CHECK_FALSE(accepted("cache_size=4194303"));
  CHECK(accepted("cache_size=1T"));
  CHECK_FALSE(accepted("cache_size=1.000001T"));
  CHECK_FALSE(accepted("cache_size=18446744.1TB"));
  CHECK(accepted("cache_dir_size=1M"));
  CHECK_FALSE(accepted("cache_dir_size=1048575"));
  CHECK(with("cache_dir_size=8388607T").options.remote.cache_dir_size == two_63 - tib);
  CHECK_FALSE(accepted("cache_dir_size=18446744.1TB"));
}

TEST_CASE("every number option at its limits") {
  // uid, gid: 0 to 2^32 - 2 (2^32 - 1 is chown(2)'s "unchanged", no user).
  CHECK(with("uid=0").options.uid == 0u);
  CHECK(with("uid=4294967294").options.uid == 4294967294u);
  CHECK_FALSE(accepted("uid=4294967295"));
  CHECK_FALSE(accepted("uid=4294967296"));
  CHECK_FALSE(accepted("uid=-1"));
  CHECK(with("gid=4294967294").options.gid == 4294967294u);
  CHECK_FALSE(accepted("gid=4294967295"));
  CHECK_FALSE(accepted("gid=18446744073709551616"));
  // umask: octal, up to 0777.
  CHECK(with("umask=0777").options.umask == 0777u);
  CHECK_FALSE(accepted("umask=1000"));
  CHECK_FALSE(accepted("umask=8"));
  // notify_fd: a non-negative int.
  CHECK(with("notify_fd=2147483647").options.notify_fd == INT_MAX);
  CHECK_FALSE(accepted("notify_fd=2147483648"));
  CHECK_FALSE(accepted("notify_fd=-1"));
  CHECK_FALSE(accepted("notify_fd=4294967299"));  // would wrap to 3
  // read_ahead_kb: 0 to 1048576; busy_poll_us: 0 to 1000000; max_read: 4096 to 2^32 - 1.
  CHECK(with("read_ahead_kb=1048576").options.read_ahead_kb == 1048576u);
  CHECK_FALSE(accepted("read_ahead_kb=1048577"));
  CHECK_FALSE(accepted("read_ahead_kb=4294967296"));
  CHECK(with("busy_poll_us=1000000").options.busy_poll_us == 1000000u);
  CHECK_FALSE(accepted("busy_poll_us=1000001"));
  CHECK(with("max_read=4096").options.max_read == 4096u);
  CHECK(with("max_read=4294967295").options.max_read == 4294967295u);
  CHECK_FALSE(accepted("max_read=4095"));
  CHECK_FALSE(accepted("max_read=4294967296"));
  // timeout: 0.1 to 3600 seconds.
  CHECK(with("timeout=0.1").options.remote.timeout.count() == 100);
  CHECK(with("timeout=3600").options.remote.timeout.count() == 3'600'000);
  for (const char* bad : {"0.09", "3600.001", "0", "-1", "1e400", "nan", "inf", "0x10", "1s", ""}) {
    CAPTURE(bad);
    CHECK_FALSE(accepted(std::string("timeout=") + bad));
  }
}

TEST_CASE("every path option is made absolute as it is parsed") {
  const std::string cwd = std::filesystem::current_path().string();
  auto r = with("cacert=ca.pem,cache_dir=crel");
  REQUIRE(r.error.empty());
  CHECK(r.options.remote.cacert == cwd + "/ca.pem");
  CHECK(r.options.remote.cache_dir == cwd + "/crel");
  r = with("cacert=/etc/ssl/ca.pem,cache_dir=/var/cache/ckptfs/");
  CHECK(r.options.remote.cacert == "/etc/ssl/ca.pem");
  CHECK(r.options.remote.cache_dir == "/var/cache/ckptfs");
  r = with("cache_dir=../up/./x");  // as the kernel would resolve it from here: not rewritten
  CHECK(r.options.remote.cache_dir == cwd + "/../up/./x");
  CHECK_FALSE(accepted("cacert="));
  CHECK_FALSE(accepted("cache_dir="));
  // The remote options of inspect and pack go through the same parser.
  ckptfs::RemoteOptions remote;
  std::string error;
  REQUIRE(ckptfs::cli::take_remote_option("cache_dir=c", remote, error));
  CHECK(error.empty());
  CHECK(remote.cache_dir == cwd + "/c");
}

TEST_SUITE_END();
