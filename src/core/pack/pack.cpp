// SPDX-License-Identifier: MIT
// pack(): the entries selected, the file laid out for its format, written, named.
#include <ckptfs/base/error.hpp>
#include <ckptfs/pack/pack.hpp>
#include <ckptfs/pack/torch_pack.hpp>
#include <ckptfs/view/safetensors_export.hpp>
#include <ckptfs/view/served.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace ckptfs {
namespace {

// A tensor that is not one range of a source (gathered, converted, swapped) is staged this much
// at a time: the bound on memory.
constexpr std::size_t chunk_bytes = 1 << 20;

// The model with only the selected entries, under their output keys: what SafetensorsExport
// lays out (its tensors and storages unchanged: entries index them).
Model selected_model(const Model& model, const Selection& selection) {
  Model sub;
  sub.format = model.format;
  sub.sources = model.sources;
  sub.storages = model.storages;
  sub.tensors = model.tensors;
  sub.assemblies = model.assemblies;
  sub.derivations = model.derivations;
  sub.metadata = model.metadata;
  sub.entries.reserve(selection.entries.size());
  for (std::size_t i = 0; i < selection.entries.size(); ++i) {
    Entry e = model.entries[selection.entries[i]];
    e.key = selection.keys[i];
    sub.entries.push_back(std::move(e));
  }
  return sub;
}

void write_safetensors(const Model& sub, const SafetensorsExport& layout, Sources sources,
                       std::optional<DType> convert_to, OutputFile& out) {
  const SafetensorsExport::File& file = layout.files().at(0);
  out.write(file.header);
  ReadBuffer buffer;
  for (const SafetensorsExport::Tensor& st : layout.tensors()) {
    const Tensor& t = sub.tensors[sub.entries[st.entry].tensor];
    // safetensors is little-endian: a big-endian checkpoint's elements are swapped on the way
    // (Way::swap), a chunk at a time as every other way that is not one range.
    const ServedTensor served = serve(sub, t, convert_to, ByteOrder::little);
    if (served.way == ServedTensor::Way::range) {
      // One range of a source: copied in the kernel, in one call for the whole tensor.
      const Storage& s = sub.storages[served.storage];
      out.copy(*sources[s.source], data_offset(s) + served.begin, served.nbytes);
      continue;
    }
    for (std::uint64_t at = 0; at < served.nbytes; at += chunk_bytes) {
      const auto n =
          static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes, served.nbytes - at));
      buffer.clear();
      read_served(sub, t, served, at, n, sources, buffer);
      for (const ReadPiece& piece : buffer.pieces()) {
        if (piece.memory) {
          out.write({piece.memory, piece.length});
        } else {
          out.copy(*sources[piece.source], piece.source_offset, piece.length);
        }
      }
    }
  }
  if (out.size() != file.size) {
    throw std::logic_error(
        fmt::format("write_safetensors: {} bytes written, {} planned", out.size(), file.size));
  }
}

// Where each tensor of `sub` ends in the safetensors file write_safetensors() writes, and the
// file's size.
std::pair<std::vector<std::uint64_t>, std::uint64_t> safetensors_tensor_ends(
    const Model& sub, std::optional<DType> convert_to) {
  const SafetensorsExport layout(sub, 0, convert_to);
  std::vector<std::uint64_t> ends;
  const std::uint64_t data_start = layout.files().at(0).header.size();
  for (const auto& st : layout.tensors()) ends.push_back(data_start + st.begin + st.nbytes);
  return {std::move(ends), layout.files().at(0).size};
}

// Where each selected tensor's bytes end in a torch file: the end of the record of its storage
// (or of its own bytes, converted or gathered).
std::vector<std::uint64_t> torch_tensor_ends(const Model& model, const Selection& selection,
                                             const TorchPack& torch) {
  const TorchArchive& archive = torch.archive();
  std::map<std::size_t, std::uint64_t> by_storage, by_tensor;
  for (std::size_t i = 0; i < archive.plan().record_count(); ++i) {
    const TorchRecord& r = archive.record(i);
    if (r.source != TorchRecord::Source::storage) continue;
    const ZipRecordLayout& layout = archive.plan().layout(i);
    const std::uint64_t end = layout.data_offset + layout.size;
    const StoragePayload& p = torch.payload(r.storage);
    (p.way == StoragePayload::Way::storage ? by_storage[p.storage] : by_tensor[p.tensor]) = end;
  }
  std::vector<std::uint64_t> ends;
  for (const std::size_t i : selection.entries) {
    const Entry& e = model.entries[i];
    if (e.kind != Entry::Kind::tensor) continue;
    const Tensor& t = model.tensors[e.tensor];
    std::uint64_t end = 0;  // no bytes of its own: done from the start
    if (auto it = by_tensor.find(e.tensor); it != by_tensor.end()) {
      end = it->second;
    } else if (t.storage) {
      if (auto s = by_storage.find(*t.storage); s != by_storage.end()) end = s->second;
    }
    ends.push_back(end);
  }
  return ends;
}

// Checks, whole, every zip record and inflated member the written tensors' bytes came from
// (ByteSource::verify(): most were checked as they were copied; what a tensor left out of its
// record is read now), so that no output holds bytes of a corrupt one.
void verify_copied(const Model& model, const Selection& selection, Sources sources) {
  std::vector<bool> done(model.storages.size());
  auto verify = [&](std::size_t storage) {
    if (done[storage]) return;
    done[storage] = true;
    const Storage& s = model.storages[storage];
    const ByteSource& source = *sources[s.source];
    try {
      source.verify(data_offset(s), s.nbytes);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: {}", source.name(), e.what()));
    }
  };
  auto verify_tensor = [&](const Tensor& t) {
    if (!t.broken.empty()) return;
    if (t.storage) verify(*t.storage);
    if (t.assembly) {
      const Assembly& a = model.assemblies[*t.assembly];
      for (std::size_t i = 0; i < a.size(); ++i) verify(a.piece(i).storage);
    }
  };
  for (const std::size_t i : selection.entries) {
    const Entry& e = model.entries[i];
    if (e.kind != Entry::Kind::tensor) continue;
    const Tensor& t = model.tensors[e.tensor];
    verify_tensor(t);
    if (t.quantization && t.quantization->scales)
      verify_tensor(model.tensors[*t.quantization->scales]);
    if (t.quantization && t.quantization->zero_points) {
      verify_tensor(model.tensors[*t.quantization->zero_points]);
    }
  }
}

}  // namespace

PackResult pack(const Model& model, Sources sources, const PackOptions& options) {
  const auto format = pack_format_of(options.output);
  if (!format) {
    throw Error(ExitCode::usage, "OUT must end in .pth, .pt, .bin, .ckpt (torch) or .safetensors");
  }
  std::vector<KeyGlob> globs(options.keys.begin(), options.keys.end());
  const Selection selection = select_entries(model, globs, *format, options.dtype);

  PackResult result;
  result.format = *format;
  for (const auto& [entry, why] : selection.left_out) {
    result.left_out.emplace_back(model.entries[entry].key, why);
  }
  for (const std::size_t i : selection.entries) {
    (model.entries[i].kind == Entry::Kind::tensor ? result.tensors : result.values) += 1;
  }
  // Everything that can be refused is, before the output is created: the layout is made from
  // the model alone.
  std::optional<TorchPack> torch;
  std::optional<Model> sub;
  std::optional<SafetensorsExport> layout;
  // The key each selected entry is written under.
  std::vector<std::string_view> written(selection.keys.begin(), selection.keys.end());
  bool renamed_known = false;
  if (*format == PackFormat::torch) {
    Structure structure =
        options.flat ? flat_structure(selection) : nested_structure(model, selection);
    torch.emplace(model, selection, structure, torch_prefix_of(options.output), options.dtype);
    if (!options.flat) {
      // Keys are unique per container: only flattened ones may be renamed.
      result.renamed = std::move(structure.renamed);
      result.flattened = std::move(structure.flattened);
      renamed_known = true;
    }
  } else {
    sub = selected_model(model, selection);
    layout.emplace(*sub, 0, options.dtype);
    if (layout->tensors().size() != sub->entries.size()) {
      // select_entries() left out what the export leaves out; only a tensor larger than a file
      // can be (its own bytes and the header's) is left out here.
      throw Error(ExitCode::unsupported, "a tensor too large for a safetensors file");
    }
    // The header's keys: a byte that is not UTF-8 is U+FFFD, a tensor named __metadata__ and
    // texts that then become equal get "%#<n>" (the export's rule).
    for (const SafetensorsExport::Tensor& st : layout->tensors()) written[st.entry] = st.key;
  }
  for (std::size_t k = 0; k < selection.entries.size() && !renamed_known; ++k) {
    const std::string& key = model.entries[selection.entries[k]].key;
    if (written[k] != key) result.renamed.emplace_back(key, written[k]);
  }
  OutputFile out(options.output, options.overwrite, permissions_of(sources));
  if (options.progress) {
    // Where each selected tensor's bytes end in the file, sorted: the tensors done are those
    // that end at or before the bytes written.
    // Not a structured binding: clang before 16 (clang-tidy's here) cannot capture one.
    auto plan = torch ? std::pair(torch_tensor_ends(model, selection, *torch),
                                  torch->archive().plan().size())
                      : safetensors_tensor_ends(*sub, options.dtype);
    std::vector<std::uint64_t> ends = std::move(plan.first);
    const std::uint64_t total = plan.second;
    std::sort(ends.begin(), ends.end());
    out.watch([&options, ends = std::move(ends), total](std::uint64_t bytes) {
      const auto done = std::upper_bound(ends.begin(), ends.end(), bytes) - ends.begin();
      options.progress({bytes, total, static_cast<std::size_t>(done), ends.size()});
    });
    options.progress({0, total, 0, result.tensors});
  }
  if (torch) {
    torch->write(model, sources, out);
  } else {
    write_safetensors(*sub, *layout, sources, options.dtype, out);
  }
  verify_copied(model, selection, sources);
  result.bytes = out.size();
  out.commit();
  return result;
}

}  // namespace ckptfs
