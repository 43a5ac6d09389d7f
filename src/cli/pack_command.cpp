// SPDX-License-Identifier: MIT
// run_pack(): options, the model opened, pack() run, what was left out told on stderr.
#include "pack_command.hpp"

#include "messages.hpp"
#include "options.hpp"
#include "progress.hpp"
#include "remote_open.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/pack/pack.hpp>
#include <ckptfs/source/location.hpp>

#include <fmt/format.h>

#include <unistd.h>
#include <chrono>
#include <map>

namespace ckptfs::cli {
namespace {

constexpr const char* pack_usage =
    R"(usage: ckptfs pack SRC OUT [--keys GLOB]... [--dtype NAME] [--names hf] [--flat] [--force]
                [--progress|--quiet] [-o OPT,...]

Writes SRC back as one file, OUT, streaming: memory stays bounded whatever the size of the
tensors, bytes are copied from file to file by the kernel where they can be. OUT appears only
once complete (a failed or killed pack leaves nothing under its name).

SRC  anything ckptfs reads (a .pth/.pt/.bin file, a safetensors file, a sharded set, a
     TorchScript archive, a GGUF file or split set, an .npz, a URL), or
     a split directory: key directories copied out of a mount (meta.json and data, or
     value.json), with or without the mount's .ckptfs/index.json, e.g. after
     rsync -a /mnt/model/decoder.* dest/  (or a whole mount: rsync -a /mnt/model/ dest/)
     an RFC directory: map.pt (torch.save of the list of keys) and one <name>.pt per key
OUT  gets SRC's permission bits under the umask, as cp gives them; its suffix, in any case,
     picks the format:
     .pth .pt .bin .ckpt  torch.save's zip format: what torch.load of SRC gives (nested
                          dicts, lists, tuples rebuilt; a DCP checkpoint as
                          dcp_to_torch_save writes it), in order, shared storages shared,
                          views kept, plain values kept, a byteorder record
     .safetensors         safetensors: the tensors, each its own contiguous bytes (tied
                          ones too), {"format": "pt"} in __metadata__

  --keys GLOB   pack only the keys GLOB matches (fnmatch: * ? [seq] [!seq]; '*' takes '.' too);
                repeatable: a key any of them matches; a GLOB matching no key is an error
  --dtype NAME  float16, bfloat16 or float32: floating-point tensors converted as torch's .to()
  --names hf    a GGUF file's tensors under transformers' names, with the values transformers'
                GGUF loader gives them (Q and K rows un-permuted...), float32 unless --dtype, as
                a mount's -o names=hf serves them (see ckptfs --help)
  --flat        a .pth holds one OrderedDict of the flattened keys (model.fc.weight...), not
                SRC's nesting
  --force       replace OUT if it exists (else: refused, exit 1); it keeps its mode bits
  --progress    show progress even when stderr is no terminal (a line every 2 s); on a
                terminal it is shown anyway, one line redrawn: bytes, rate, ETA, tensors
  --quiet, -q   no progress and no summary: only errors and what was left out
  -o OPT,...    remote options for a URL (timeout=, cache_size=, cacert=, insecure...)

When done, one line on stderr (unless --quiet): what was written, how much, how fast:
  ckptfs: OUT: packed 480 tensors, 2 values (1.6 GiB) in 2.4 s (680.5 MiB/s)

Left out, each said on stderr: values that are no plain Python value (objects ckptfs never
builds), quantized tensors ckptfs does not write (quint4x2, quint2x4), a GGUF's quantized
tensors of a type without a reference dequantization (Q8_K...; the others are written
dequantized, float32 or --dtype), and for safetensors every value and every tensor of a dtype
it lacks. A broken tensor is an error (leave it out with --keys). What a .pth cannot nest is
said too: an object of a class (a pickled nn.Module, an argparse.Namespace holding tensors) is
an OrderedDict of the flattened keys below it; a tuple key is its text. Keys of equal text (the
int 0 and the str "0" with --flat): the n-th is written <key>%#<n>, as the mount names it, said
on stderr (and in safetensors keys that are not UTF-8, written U+FFFD).

exit status: 0 written; 1 usage (the command line, OUT's suffix, OUT exists, a GLOB matching
nothing); 2 SRC, a file in it, or OUT cannot be opened, read or written; 3 an invalid zip;
4 an invalid or inconsistent SRC (a meta.json that disagrees with its data, a key claimed
twice, a link leading out of SRC, a broken tensor); 5 what pack does not write; 7, 8 a server
refused or did not answer.
)";

int usage_error(const std::string& message) {
  fmt::print(stderr, "ckptfs: pack: {} (try 'ckptfs pack --help')\n", message);
  return static_cast<int>(ExitCode::usage);
}

// What was left out, one line per reason, with its first keys.
void tell_left_out(const PackResult& result, const std::string& out) {
  std::map<std::string, std::vector<std::string>> by_why;
  std::vector<std::string> order;
  for (const auto& [key, why] : result.left_out) {
    auto [it, fresh] = by_why.try_emplace(why);
    if (fresh) order.push_back(why);
    it->second.push_back(key);
  }
  for (const std::string& why : order) {
    const auto& keys = by_why[why];
    std::string listed;
    for (std::size_t i = 0; i < keys.size() && i < 5; ++i) {
      listed += (i ? ", " : "") + quote(keys[i], 80);
    }
    fmt::print(stderr, "ckptfs: {}: left out {} {} ({}): {}{}\n", out, keys.size(),
               keys.size() == 1 ? "entry" : "entries", why, listed,
               keys.size() > 5 ? fmt::format(", and {} more", keys.size() - 5) : "");
  }
}

// What a nested .pth holds under flattened keys, one line per reason with its first places.
void tell_flattened(const PackResult& result, const std::string& out) {
  std::map<std::string, std::vector<std::string>> by_why;
  std::vector<std::string> order;
  for (const auto& [where, why] : result.flattened) {
    auto [it, fresh] = by_why.try_emplace(why);
    if (fresh) order.push_back(why);
    it->second.push_back(where.empty() ? std::string("the checkpoint itself") : quote(where, 80));
  }
  for (const std::string& why : order) {
    const auto& places = by_why[why];
    std::string listed;
    for (std::size_t i = 0; i < places.size() && i < 5; ++i) {
      listed += (i ? ", " : "") + places[i];
    }
    fmt::print(stderr, "ckptfs: {}: flattened {} {} ({}): {}{}\n", out, places.size(),
               places.size() == 1 ? "place" : "places", why, listed,
               places.size() > 5 ? fmt::format(", and {} more", places.size() - 5) : "");
  }
}

// "ckptfs: OUT: packed 480 tensors, 2 values (1.6 GiB) in 2.4 s (680.5 MiB/s), left out 3
// entries (above)".
void print_summary(const PackResult& result, const std::string& out,
                   std::chrono::steady_clock::duration took) {
  const double seconds = std::chrono::duration<double>(took).count();
  fmt::print(stderr, "ckptfs: {}: packed {} tensor{}, {} value{} ({}) in {:.1f} s ({}/s){}\n", out,
             result.tensors, result.tensors == 1 ? "" : "s", result.values,
             result.values == 1 ? "" : "s", human_size(result.bytes), seconds,
             human_size(seconds > 0 ? static_cast<std::uint64_t>(result.bytes / seconds) : 0),
             result.left_out.empty()
                 ? std::string()
                 : fmt::format(", left out {} entr{} (above)", result.left_out.size(),
                               result.left_out.size() == 1 ? "y" : "ies"));
}

// The keys written under another name, in one line: keys of equal text get "%#<n>"; in
// safetensors a byte that is not UTF-8 is U+FFFD.
void tell_renamed(const PackResult& result, const std::string& out) {
  if (result.renamed.empty()) return;
  std::string listed;
  for (std::size_t i = 0; i < result.renamed.size() && i < 5; ++i) {
    listed += fmt::format("{}{} -> {}", i ? ", " : "", quote(result.renamed[i].first, 80),
                          quote(result.renamed[i].second, 80));
  }
  const std::size_t n = result.renamed.size();
  fmt::print(stderr,
             "ckptfs: {}: renamed {} {} (a key an earlier entry has: the n-th of a text is "
             "written <key>%#<n>, as the mount names it{}): {}{}\n",
             out, n, n == 1 ? "entry" : "entries",
             result.format == PackFormat::safetensors
                 ? "; safetensors keys are Unicode: a byte that is not UTF-8 is U+FFFD"
                 : "",
             listed, n > 5 ? fmt::format(", and {} more", n - 5) : "");
}

}  // namespace

int run_pack(const std::vector<std::string>& args) {
  PackOptions options;
  RemoteOptions remote_options;
  Names names = Names::file;
  std::vector<std::string> positional;
  bool progress = false, quiet = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string_view name) -> std::optional<std::string> {
      if (a == name) {
        if (i + 1 == args.size()) return std::nullopt;
        return args[++i];
      }
      return a.substr(name.size() + 1);  // --name=value
    };
    if (a == "-h" || a == "--help") {
      fmt::print("{}", pack_usage);
      return 0;
    } else if (a == "--keys" || a.starts_with("--keys=")) {
      auto glob = value("--keys");
      if (!glob) return usage_error("--keys needs a GLOB");
      options.keys.push_back(std::move(*glob));
    } else if (a == "--dtype" || a.starts_with("--dtype=")) {
      auto name = value("--dtype");
      if (!name) return usage_error("--dtype needs a NAME");
      if (*name != "float16" && *name != "bfloat16" && *name != "float32") {
        return usage_error(
            fmt::format("invalid --dtype {} (float16, bfloat16 or float32)", quote(*name)));
      }
      options.dtype = dtype_from_name(*name);
    } else if (a == "--names" || a.starts_with("--names=")) {
      auto given = value("--names");
      if (!given) return usage_error("--names needs hf or file");
      const auto parsed = parse_names(*given);
      if (!parsed)
        return usage_error(fmt::format("invalid --names {} (hf or file)", quote(*given)));
      names = *parsed;
    } else if (a == "--flat") {
      options.flat = true;
    } else if (a == "--progress") {
      progress = true;
    } else if (a == "--quiet" || a == "-q") {
      quiet = true;
    } else if (a == "--force" || a == "-f") {
      options.overwrite = Overwrite::yes;
    } else if (a == "-o" || (a.starts_with("-o") && a.size() > 2)) {
      if (a == "-o" && i + 1 == args.size()) return usage_error("-o needs an argument");
      std::string_view list =
          a == "-o" ? std::string_view(args[++i]) : std::string_view(a).substr(2);
      while (true) {
        const auto comma = list.find(',');
        const std::string_view item = list.substr(0, comma);
        std::string error;
        if (!take_remote_option(item, remote_options, error)) {
          return usage_error(fmt::format("unknown option {}", quote(item)));
        }
        if (!error.empty()) return usage_error(error);
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
      }
    } else if (a.starts_with("-") && a != "-") {
      return usage_error(fmt::format("unknown option {}", quote(a)));
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) return usage_error("needs SRC and OUT");
  if (progress && quiet) return usage_error("--progress and --quiet say the opposite");
  const std::string& source = positional[0];
  options.output = positional[1];
  if (!pack_format_of(options.output)) {
    return usage_error(
        fmt::format("OUT {} must end in .pth, .pt, .bin, .ckpt (torch) or .safetensors (any case)",
                    quote(options.output)));
  }
  // Refused before SRC is read (which may take long, remote): checked again when OUT is named.
  try {
    (void)check_output_name(options.output, options.overwrite);
  } catch (const OutputError& e) {
    return fail(e.code(), fmt::format("{}: {}", options.output, e.what()));
  }
  const std::string shown = display_location(source);
  try {
    auto remote = remote_for(source, remote_options);
    OpenOptions how = open_options(remote.get());
    how.names = names;
    OpenedModel opened = open_model(source, how);
    tell_notes(opened.model(), shown);
    const auto start = std::chrono::steady_clock::now();
    // On a terminal, progress unless --quiet; elsewhere only with --progress.
    const bool tty = ::isatty(STDERR_FILENO) == 1;
    std::optional<ProgressLine> line;
    if (progress || (tty && !quiet)) {
      line.emplace(stderr, options.output, tty);
      options.progress = [&line](const PackProgress& p) { line->update(p); };
    }
    PackResult result;
    try {
      result = pack(opened.model(), opened.sources(), options);
    } catch (...) {
      if (line) line->finish();
      throw;
    }
    if (line) line->finish();
    tell_left_out(result, options.output);
    tell_flattened(result, options.output);
    tell_renamed(result, options.output);
    if (!quiet) print_summary(result, options.output, std::chrono::steady_clock::now() - start);
    return 0;
  } catch (const OutputError& e) {
    return fail(e.code(), fmt::format("{}: {}", options.output, e.what()));
  } catch (const Error& e) {
    return fail(e.code(), fmt::format("{}: {}", shown, e.what()));
  } catch (const std::bad_alloc&) {
    return fail(ExitCode::bad_checkpoint, fmt::format("{}: out of memory", shown));
  }
}

}  // namespace ckptfs::cli
