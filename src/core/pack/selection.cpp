// SPDX-License-Identifier: MIT
// select_entries(): patterns, the entries each format can hold, parts that go inside their
// tensor, and unique keys.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/pickle/read_plain_value.hpp>
#include <ckptfs/format/pickle/value_json.hpp>
#include <ckptfs/pack/selection.hpp>
#include <ckptfs/view/safetensors_export.hpp>
#include <ckptfs/view/served.hpp>

#include <fmt/format.h>

namespace ckptfs {
namespace {

bool per_channel(const Tensor& t) {
  return t.quantization && (t.quantization->scales || t.quantization->zero_points);
}

// Why torch's writer cannot write a quantized tensor; empty when it can.
std::string quantized_problem(const Model& model, const Tensor& t) {
  if (!t.quantization) return "a quantized tensor without its quantization";
  const std::string& scheme = t.quantization->scheme;
  if (scheme != "per_tensor_affine" && scheme != "per_channel_affine" &&
      scheme != "per_channel_affine_float_qparams") {
    return fmt::format("torch saves no quantized tensor of scheme {}", quote(scheme));
  }
  if (per_channel(t)) {
    // One scale and one zero point per channel, as 1-D tensors that can be written.
    const auto& q = *t.quantization;
    if (!q.scales || !q.zero_points || q.axis < 0 ||
        static_cast<std::size_t>(q.axis) >= t.shape.size()) {
      return "per-channel quantization without its scales and zero points";
    }
    const std::vector<std::int64_t> channels{t.shape[static_cast<std::size_t>(q.axis)]};
    for (const std::size_t part : {*q.scales, *q.zero_points}) {
      const Tensor& p = model.tensors[part];
      if (p.shape != channels || !p.broken.empty() || is_quantized(p.dtype)) {
        return "per-channel scales or zero points that are not one per channel";
      }
    }
  }
  return {};
}

// Why plain_value() found no value in `value_json`: the first of value_json()'s forms for what
// it only describes, read token by token (no recursion), or what else is wrong with the text.
std::string why_not_plain(std::string_view value_json) {
  using Token = JsonReader::Token;
  JsonLimits limits;
  limits.max_depth = 3 * max_value_depth + 2;
  limits.surrogate_escapes = true;
  try {
    JsonReader json(value_json, limits);
    bool object_opened = false;
    for (Token t = json.next(); t != Token::end; t = json.next()) {
      if (t == Token::key && object_opened) {
        const std::string_view key = json.string();
        if (key == "__class__") {
          if (json.next() == Token::string) {
            return fmt::format("an instance of {}, which ckptfs never builds", json.string());
          }
          return "an object ckptfs never builds (a call or an instance)";
        }
        if (key == "__global__") return "a reference to a class or function";
        if (key == "__persistent_id__") return "a reference to a storage outside a tensor";
        if (key == "__truncated__") return "a value cut at ckptfs's limits";
        if (key == "__recursion__") return "a value that contains itself";
        if (key == "__dict__" || key == "__set__" || key == "__frozenset__") {
          // Read back only with hashable keys and items.
          return "a dict key or set item Python cannot hash";
        }
      }
      object_opened = t == Token::begin_object;
    }
  } catch (const Error& e) {
    return fmt::format("its JSON is invalid ({})", e.what());
  }
  return "a form value_json() does not write";
}

}  // namespace

std::optional<PackFormat> pack_format_of(std::string_view path) {
  // Any case, as open_model() reads a MODEL.PTH or a .CKPT (its bytes say what it is).
  std::string name(
      path.substr(path.rfind('/') == std::string_view::npos ? 0 : path.rfind('/') + 1));
  for (char& c : name) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  for (std::string_view suffix : {".pth", ".pt", ".bin", ".ckpt"}) {
    if (name.ends_with(suffix) && name.size() > suffix.size()) return PackFormat::torch;
  }
  if (name.ends_with(".safetensors") && name.size() > 12) return PackFormat::safetensors;
  return std::nullopt;
}

Selection select_entries(const Model& model, std::span<const KeyGlob> globs, PackFormat format,
                         std::optional<DType> convert_to) {
  std::vector<bool> selected(model.entries.size(), globs.empty());
  for (const KeyGlob& glob : globs) {
    bool any = false;
    for (std::size_t i = 0; i < model.entries.size(); ++i) {
      if (glob.matches(model.entries[i].key)) selected[i] = any = true;
    }
    if (!any) {
      throw Error(ExitCode::usage, fmt::format("--keys {} matches no key", quote(glob.pattern())));
    }
  }
  // Per-channel quantized tensors written: their scales' and zero points' entries go inside.
  TextSet inside;
  if (format == PackFormat::torch) {
    for (std::size_t i = 0; i < model.entries.size(); ++i) {
      const Entry& e = model.entries[i];
      if (!selected[i] || e.kind != Entry::Kind::tensor) continue;
      const Tensor& t = model.tensors[e.tensor];
      if (t.broken.empty() && per_channel(t) && quantized_problem(model, t).empty()) {
        inside.insert(e.key + ".q_per_channel_scales");
        inside.insert(e.key + ".q_per_channel_zero_points");
      }
    }
  }

  Selection out;
  // Broken tensors selected: refused once all are counted, as the mount counts them.
  std::size_t tensors_selected = 0, broken = 0, first_broken = 0;
  for (std::size_t i = 0; i < model.entries.size(); ++i) {
    if (!selected[i]) continue;
    const Entry& e = model.entries[i];
    std::shared_ptr<const PlainValue> value;
    if (e.kind == Entry::Kind::value) {
      if (format == PackFormat::safetensors) {
        out.left_out.push_back({i, "a value: safetensors holds tensors only"});
        continue;
      }
      value = entry_value(e);
      if (!value) {
        out.left_out.push_back({i, "not a plain value: " + why_not_plain(e.value_json)});
        continue;
      }
    } else {
      const Tensor& t = model.tensors[e.tensor];
      ++tensors_selected;
      if (!t.broken.empty()) {
        if (broken++ == 0) first_broken = i;
        continue;
      }
      if (const std::string_view why = values_not_served(model, t); !why.empty()) {
        out.left_out.push_back({i, fmt::format("{} blocks: {}", info(t.blocks).name, why)});
        continue;
      }
      if (format == PackFormat::safetensors) {
        if (std::string why = safetensors_omission(model, t, convert_to); !why.empty()) {
          out.left_out.push_back({i, std::move(why)});
          continue;
        }
      } else if (is_quantized(t.dtype)) {
        if (std::string problem = quantized_problem(model, t); !problem.empty()) {
          out.left_out.push_back({i, std::move(problem)});
          continue;
        }
      } else if (inside.contains(e.key) &&
                 (e.key_path.empty() ||  // formats without key paths (RFC directories)
                  e.key_path.ends_with(R"({"__part__":"q_per_channel_scales"}])") ||
                  e.key_path.ends_with(R"({"__part__":"q_per_channel_zero_points"}])"))) {
        continue;  // a part of a per-channel quantized tensor that is written: it is inside it
      }
    }
    out.entries.push_back(i);
    out.values.push_back(std::move(value));
  }

  if (broken != 0) {
    const Entry& e = model.entries[first_broken];
    const std::string first =
        fmt::format("tensor {} is broken ({})", quote(e.key), model.tensors[e.tensor].broken);
    if (broken == 1) {
      throw Error(ExitCode::bad_checkpoint,
                  first + ": it cannot be packed; leave it out with --keys");
    }
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("{}, and {} more: {} of the {} tensors selected are broken (ckptfs "
                            "inspect lists them); they cannot be packed: leave them out with "
                            "--keys",
                            first, broken - 1, broken, tensors_selected));
  }

  // Unique keys: the first of a text keeps it; later ones get the smallest "%#N" that is no
  // entry's own key.
  TextViewSet own;
  for (const std::size_t i : out.entries) own.insert(model.entries[i].key);
  TextSet used;
  out.keys.reserve(out.entries.size());
  for (const std::size_t i : out.entries) {
    const std::string& text = model.entries[i].key;
    std::string key = text;
    for (std::uint64_t n = 2; used.contains(key); ++n) {
      key = fmt::format("{}%#{}", text, n);
      if (own.contains(key)) key = text;  // another entry's own key: the next number
    }
    used.insert(key);
    out.keys.push_back(std::move(key));
  }
  return out;
}

}  // namespace ckptfs
