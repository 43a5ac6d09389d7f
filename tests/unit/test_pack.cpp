// SPDX-License-Identifier: MIT
// Unit tests of the pieces of `ckptfs pack`: the output file (nothing under its name before
// commit, never an existing file replaced without Overwrite::yes, copies and CRCs), the
// selection (patterns, what each format leaves out, broken tensors, unique keys), and whole packs
// of a model built by hand, read back by ckptfs's own readers (torch.load reads them in
// tests/integration/test_pack.py): storages shared, views kept, values, conversions.
#include "support/temp_dir.hpp"

#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/safetensors/safetensors_reader.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/pack/output_file.hpp>
#include <ckptfs/pack/pack.hpp>
#include <ckptfs/pack/selection.hpp>
#include <ckptfs/pack/structure.hpp>
#include <ckptfs/pack/torch_pack.hpp>
#include <ckptfs/view/safetensors_export.hpp>

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace ckptfs;
using ckptfs::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// 8 float32 values 0..7 in one storage, and entries over it: "full" (all of it), "view" (a
// transposed 2x2 view at offset 2), "tied" (the same tensor as "full"), a value "epoch", and a
// complex128 tensor "z" of its own storage.
struct Fixture {
  std::string bytes;
  Model model;
  std::vector<std::unique_ptr<ByteSource>> owned;
  std::vector<const ByteSource*> sources;

  Fixture() {
    for (int i = 0; i < 8; ++i) {
      float f = static_cast<float>(i);
      bytes.append(reinterpret_cast<const char*>(&f), 4);
    }
    bytes += std::string(16, 'z');  // the complex128 element
    model.format = Format::zip;
    model.sources = {"memory"};
    Storage s;
    s.key = "0";
    s.nbytes = 32;
    model.storages.push_back(s);
    s.key = "1";
    s.file_offset = 32;
    s.nbytes = 16;
    model.storages.push_back(s);
    Tensor full;
    full.shape = {8};
    full.stride = {1};
    full.storage = 0;
    Tensor view = full;
    view.shape = {2, 2};
    view.stride = {1, 2};
    view.storage_offset = 2;
    view.requires_grad = true;
    Tensor z;
    z.dtype = DType::complex128;
    z.shape = {1};
    z.stride = {1};
    z.storage = 1;
    model.tensors = {full, view, z};
    model.entries = {{"full", "", Entry::Kind::tensor, 0, "", nullptr, ""},
                     {"view", "", Entry::Kind::tensor, 1, "", nullptr, ""},
                     {"epoch", "", Entry::Kind::value, 0, "7", nullptr, ""},
                     {"tied", "", Entry::Kind::tensor, 0, "", nullptr, ""},
                     {"z", "", Entry::Kind::tensor, 2, "", nullptr, ""}};
    owned.push_back(std::make_unique<MemorySource>(bytes));
    sources.push_back(owned.back().get());
  }
};

std::pair<ExitCode, std::string> refusal(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ExitCode::ok, ""};
}

// The Fixture's entries nested: {"model": OrderedDict(full=, view=), "epoch": 7,
// "opt": {"state": {0: {"t": tied}}}, "lst": [None, z]}.
void nest(Fixture& f) {
  f.model.root = ContainerKind::dict;
  auto set = [&](std::size_t i, std::string key, std::string path, std::string containers) {
    f.model.entries[i].key = std::move(key);
    f.model.entries[i].key_path = std::move(path);
    f.model.entries[i].containers = std::move(containers);
  };
  set(0, "model.full", R"(["model","full"])", "do");
  set(1, "model.view", R"(["model","view"])", "do");
  set(3, "opt.state.0.t", R"(["opt","state",0,"t"])", "dddd");
  set(4, "lst.1", R"(["lst",1])", "dl");
}

std::string refusal_of_structure(const Model& model) {
  try {
    nested_structure(model, select_entries(model, {}, PackFormat::torch, std::nullopt));
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::bad_checkpoint);
    return e.what();
  }
  return {};
}

}  // namespace

TEST_SUITE_BEGIN("pack");

TEST_CASE("the output has no name until commit, and never replaces a file unasked") {
  TempDir t;
  const std::string path = t.path("out.pth");
  {
    OutputFile out(path, Overwrite::no);
    out.write("hello ");
    const MemorySource memory("0123456789");
    out.copy(memory, 2, 3);
    CHECK(out.copy_with_crc(memory, 0, 4) == crc32("0123"));
    CHECK(out.size() == 13);
    CHECK(names_in(t.path()).empty());  // nothing under any name while it is written
  }
  CHECK(names_in(t.path()).empty());  // dropped without commit()

  t.write("source", std::string(3u << 20, 'x') + "tail");
  const FileSource file(t.path("source"));
  {
    OutputFile out(path, Overwrite::no);
    out.copy(file, 1, (3u << 20) + 3);  // copy_file_range, more than the buffer
    out.commit();
  }
  CHECK(contents(path) == std::string((3u << 20) - 1, 'x') + "tail");
  CHECK(names_in(t.path()) == std::vector<std::string>{"out.pth", "source"});

  auto [code, message] = refusal([&] { OutputFile(path, Overwrite::no); });
  CHECK(code == ExitCode::usage);
  CHECK(message == "exists: pack does not overwrite it without --force");
  {
    // A file that appears under the name while the output is written is not replaced either.
    TempDir u;
    OutputFile out(u.path("late.pth"), Overwrite::no);
    out.write("mine");
    u.write("late.pth", "theirs");
    CHECK(refusal([&] { out.commit(); }).first == ExitCode::usage);
    CHECK(contents(u.path("late.pth")) == "theirs");
    CHECK(names_in(u.path()) == std::vector<std::string>{"late.pth"});
  }
  {
    OutputFile out(path, Overwrite::yes);
    out.write("new");
    out.commit();
  }
  CHECK(contents(path) == "new");
  CHECK(names_in(t.path()) == std::vector<std::string>{"out.pth", "source"});
  CHECK(refusal([&] { OutputFile(t.path("missing/out.pth"), Overwrite::no); }).first ==
        ExitCode::io);
  // A source shorter than the range asked.
  OutputFile out(t.path("short.pth"), Overwrite::no);
  CHECK(refusal([&] { out.copy(file, 10, 4u << 20); }).first == ExitCode::bad_checkpoint);
}

TEST_CASE("the output's mode: the sources' bits under the umask, a replaced file keeps its own") {
  TempDir t;
  auto mode_of = [](const std::string& path) {
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return st.st_mode & 07777;
  };
  // permissions_of(): the bits every local source grants; 0666 without a local file.
  const std::string a = t.write("a", "a"), b = t.write("b", "b");
  ::chmod(a.c_str(), 0640);
  ::chmod(b.c_str(), 0604);
  const FileSource fa(a), fb(b);
  const MemorySource memory("m");
  CHECK(permissions_of(std::vector<const ByteSource*>{&fa}) == 0640);
  CHECK(permissions_of(std::vector<const ByteSource*>{&fa, &memory, &fb}) == 0600);
  CHECK(permissions_of(std::vector<const ByteSource*>{&memory}) == 0666);
  ::chmod(a.c_str(), 04755);  // setuid is never passed on
  const FileSource setuid(a);
  CHECK(permissions_of(std::vector<const ByteSource*>{&setuid}) == 0755);

  const mode_t old_mask = ::umask(022);
  auto made = [&](const std::string& name, mode_t mode, Overwrite overwrite) {
    OutputFile out(t.path(name), overwrite, mode);
    out.write("x");
    out.commit();
    return mode_of(t.path(name));
  };
  CHECK(made("new-0600", 0600, Overwrite::no) == 0600);
  CHECK(made("new-0666", 0666, Overwrite::no) == 0644);  // the umask applies to a new file
  ::umask(077);
  CHECK(made("new-0644", 0644, Overwrite::no) == 0600);
  ::umask(022);
  // A file replaced keeps its mode bits, owner and group, whatever `mode` and the umask say.
  for (const mode_t existing : {mode_t{0600}, mode_t{0640}, mode_t{0444}, mode_t{0664}}) {
    const std::string path = t.write("existing", "old");
    ::chmod(path.c_str(), existing);
    CHECK(made("existing", 0666, Overwrite::yes) == existing);
    CHECK(contents(path) == "x");
  }
  if (::geteuid() == 0) {  // only root may give a file to another owner
    const std::string path = t.write("theirs", "old");
    REQUIRE(::chown(path.c_str(), 4242, 4343) == 0);
    ::chmod(path.c_str(), 0640);
    CHECK(made("theirs", 0666, Overwrite::yes) == 0640);
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK(st.st_uid == 4242);
    CHECK(st.st_gid == 4343);
  }
  ::umask(old_mask);
}

TEST_CASE(
    "selection for safetensors: float4_e2m1fn_x2 as the mount's export has it (F4), but 0-d") {
  // A 2-D and a 0-d float4_e2m1fn_x2 over storage 0's bytes (one byte each: a pair of F4).
  Fixture f;
  Tensor pairs;
  pairs.dtype = DType::float4_e2m1fn_x2;
  pairs.shape = {2, 4};
  pairs.stride = {4, 1};
  pairs.storage = 0;
  Tensor half = pairs;
  half.shape = {};
  half.stride = {};
  f.model.tensors.push_back(pairs);
  f.model.tensors.push_back(half);
  f.model.entries = {{"pairs", "", Entry::Kind::tensor, 3, "", nullptr, ""},
                     {"half", "", Entry::Kind::tensor, 4, "", nullptr, ""}};
  const Selection st = select_entries(f.model, {}, PackFormat::safetensors, std::nullopt);
  CHECK(st.entries == std::vector<std::size_t>{0});
  REQUIRE(st.left_out.size() == 1);
  CHECK(st.left_out[0].entry == 1);
  CHECK(st.left_out[0].why == "a 0-d float4_e2m1fn_x2: safetensors' F4 holds no half byte");
  // The one rule, which the export's layout follows too.
  CHECK(safetensors_dtype(pairs, DType::float4_e2m1fn_x2) == "F4");
  CHECK(safetensors_dtype(half, DType::float4_e2m1fn_x2).empty());
  CHECK(SafetensorsExport(f.model, 0).tensors().size() == 1);
}

TEST_CASE("selection: patterns, what each format leaves out, broken tensors, unique keys") {
  Fixture f;
  const std::vector<KeyGlob> none;
  Selection all = select_entries(f.model, none, PackFormat::torch, std::nullopt);
  CHECK(all.entries == std::vector<std::size_t>{0, 1, 2, 3, 4});
  CHECK(all.keys == std::vector<std::string>{"full", "view", "epoch", "tied", "z"});
  CHECK(all.left_out.empty());

  Selection st = select_entries(f.model, none, PackFormat::safetensors, std::nullopt);
  CHECK(st.entries == std::vector<std::size_t>{0, 1, 3});
  REQUIRE(st.left_out.size() == 2);
  CHECK(st.left_out[0].why == "a value: safetensors holds tensors only");
  CHECK(st.left_out[1].why == "safetensors has no dtype complex128");

  const std::vector<KeyGlob> globs{KeyGlob("v*"), KeyGlob("[e]poch")};
  CHECK(select_entries(f.model, globs, PackFormat::torch, std::nullopt).entries ==
        std::vector<std::size_t>{1, 2});
  const std::vector<KeyGlob> typo{KeyGlob("full"), KeyGlob("decoder.*")};
  auto [code, message] =
      refusal([&] { select_entries(f.model, typo, PackFormat::torch, std::nullopt); });
  CHECK(code == ExitCode::usage);
  CHECK(message == "--keys \"decoder.*\" matches no key");

  f.model.entries[2].value_json = R"({"__class__":"argparse.Namespace"})";
  f.model.entries.push_back({"full", "[1]", Entry::Kind::tensor, 2, "", nullptr, ""});
  f.model.entries.push_back({"full%#2", "", Entry::Kind::tensor, 2, "", nullptr, ""});
  Selection odd = select_entries(f.model, none, PackFormat::torch, std::nullopt);
  CHECK(odd.keys == std::vector<std::string>{"full", "view", "tied", "z", "full%#3", "full%#2"});
  REQUIRE(odd.left_out.size() == 1);
  CHECK(odd.left_out[0].why ==
        "not a plain value: an instance of argparse.Namespace, which ckptfs never builds");
  // Each of value_json()'s forms for what it only describes says what it is, wherever it is.
  for (const auto& form : std::vector<std::pair<std::string, std::string>>{
           {R"([1,{"__global__":"os.system"}])", "a reference to a class or function"},
           {R"({"a":{"__truncated__":true,"bytes_limit":1048576}})",
            "a value cut at ckptfs's limits"},
           {R"({"s":[{"__persistent_id__":["storage"]}]})",
            "a reference to a storage outside a tensor"},
           {R"({"a":{"__recursion__":true}})", "a value that contains itself"},
           {R"({"__class__":{"__global__":"f"}})",
            "an object ckptfs never builds (a call or an instance)"},
           {"[1,", "its JSON is invalid (invalid JSON at byte 3: "}}) {
    // Not a structured binding: clang 14 cannot capture one in CAPTURE's lambda.
    const std::string& json = form.first;
    CAPTURE(json);
    f.model.entries[2].value_json = json;
    Selection s = select_entries(f.model, none, PackFormat::torch, std::nullopt);
    REQUIRE(s.left_out.size() == 1);
    CHECK(s.left_out[0].why.starts_with("not a plain value: " + form.second));
  }
  // A real key like a marker is written {"__dict__": [["__class__", 2]]}: this is no value.json
  // of a mount, and nothing made up.
  f.model.entries[2].value_json = R"({"a":1,"__class__":2})";
  const Selection like_marker = select_entries(f.model, none, PackFormat::torch, std::nullopt);
  REQUIRE(like_marker.left_out.size() == 1);
  CHECK(like_marker.left_out[0].why == "not a plain value: a form value_json() does not write");
  f.model.entries[2].value_json = R"({"__dict__":[["a",1],["__class__",2]]})";
  CHECK(select_entries(f.model, none, PackFormat::torch, std::nullopt).left_out.empty());
  f.model.entries[2].value_json = R"({"__class__":"argparse.Namespace"})";

  f.model.tensors[1].broken = "its record is missing";
  std::tie(code, message) =
      refusal([&] { select_entries(f.model, none, PackFormat::torch, std::nullopt); });
  CHECK(code == ExitCode::bad_checkpoint);
  CHECK(message ==
        "tensor \"view\" is broken (its record is missing): it cannot be packed; "
        "leave it out with --keys");
  const std::vector<KeyGlob> others{KeyGlob("[!v]*")};
  CHECK(select_entries(f.model, others, PackFormat::torch, std::nullopt).entries.size() == 5);
  // Several: the first named with why, and how many of those selected are, as a mount counts.
  f.model.tensors[f.model.entries[0].tensor].broken = "its record is missing";
  std::size_t tensors = 0, broken = 0;
  for (const Entry& e : f.model.entries) {
    if (e.kind != Entry::Kind::tensor) continue;
    ++tensors;
    if (!f.model.tensors[e.tensor].broken.empty()) ++broken;
  }
  REQUIRE(broken >= 2);
  std::tie(code, message) =
      refusal([&] { select_entries(f.model, none, PackFormat::safetensors, std::nullopt); });
  CHECK(code == ExitCode::bad_checkpoint);
  CHECK(message == "tensor \"full\" is broken (its record is missing), and " +
                       std::to_string(broken - 1) + " more: " + std::to_string(broken) +
                       " of the " + std::to_string(tensors) +
                       " tensors selected are broken (ckptfs inspect lists them); they cannot be "
                       "packed: leave them out with --keys");
}

TEST_CASE("torch: one record per storage, views kept, the tied tensor memoized, values kept") {
  Fixture f;
  TempDir t;
  const std::string path = t.path("model.pth");
  PackResult r = pack(f.model, f.sources, {path, {}, std::nullopt, Overwrite::no});
  CHECK(r.format == PackFormat::torch);
  CHECK(r.tensors == 4);
  CHECK(r.values == 1);
  CHECK(r.bytes == fs::file_size(path));
  const FileSource file(path);
  const Model back = read_torch(file, "model.pth");
  REQUIRE(back.entries.size() == 5);
  CHECK(back.entries[2].value_json == "7");
  const Tensor& full = back.tensors[back.entries[0].tensor];
  const Tensor& view = back.tensors[back.entries[1].tensor];
  const Tensor& tied = back.tensors[back.entries[3].tensor];
  CHECK(back.storages.size() == 2);
  CHECK(full.storage == view.storage);
  CHECK(full.storage == tied.storage);
  CHECK(view.storage_offset == 2);
  CHECK(view.stride == std::vector<std::int64_t>{1, 2});
  CHECK(view.requires_grad);
  const Storage& s = back.storages[*full.storage];
  CHECK(s.record == "model/data/0");
  CHECK(file.read_string(data_offset(s), 32) == f.bytes.substr(0, 32));
  CHECK(data_offset(s) % 64 == 0);
  CHECK(s.record_crc32 == crc32(f.bytes.substr(0, 32)));
  CHECK(back.tensors[back.entries[4].tensor].dtype == DType::complex128);

  // Converted: each floating tensor its own record, in C order.
  const std::string half = t.path("half.pt");
  pack(f.model, f.sources, {half, {"view"}, DType::float16, Overwrite::no});
  const FileSource half_file(half);
  const Model h = read_torch(half_file, "half.pt");
  REQUIRE(h.entries.size() == 1);
  const Tensor& hv = h.tensors[h.entries[0].tensor];
  CHECK(hv.dtype == DType::float16);
  CHECK(hv.stride == std::vector<std::int64_t>{2, 1});
  // The view's elements in C order: 2, 4, 3, 5 as float16.
  CHECK(half_file.read_string(*h.file_offset(hv), 8) ==
        std::string("\x00\x40\x00\x44\x00\x42\x00\x45", 8));
}

TEST_CASE("torch: every record little-endian, big-endian storages swapped, both orders in one") {
  Fixture f;
  f.model.storages[1].big_endian = true;  // z: one complex128, two 8-byte halves
  TempDir t;
  auto little = [](const std::string& bytes, std::size_t unit) {
    std::string out;
    for (std::size_t i = 0; i < bytes.size(); i += unit) {
      out.append(bytes.rbegin() + static_cast<std::ptrdiff_t>(bytes.size() - i - unit),
                 bytes.rbegin() + static_cast<std::ptrdiff_t>(bytes.size() - i));
    }
    return out;
  };
  for (const bool convert : {false, true}) {
    // Both orders, converted tensors beside unconverted big-endian ones: one little-endian file.
    CAPTURE(convert);
    f.model.storages[0].big_endian = convert;
    const std::string path = t.path(convert ? "converted.pth" : "both.pth");
    pack(f.model, f.sources,
         {path, {}, convert ? std::optional(DType::float16) : std::nullopt, Overwrite::no});
    const FileSource file(path);
    const Model back = read_torch(file, "both.pth");
    for (const Storage& s : back.storages) CHECK_FALSE(s.big_endian);
    const Tensor& z = back.tensors[back.entries[4].tensor];
    CHECK(file.read_string(*back.file_offset(z), 16) == little(f.bytes.substr(32, 16), 8));
    const Tensor& full = back.tensors[back.entries[0].tensor];
    if (!convert) {
      CHECK(file.read_string(*back.file_offset(full), 32) == f.bytes.substr(0, 32));
    } else {
      CHECK(full.dtype == DType::float16);  // converted, little-endian as every conversion
    }
  }
  f.model.storages[0].big_endian = false;
  // A big-endian storage shared by two tensors stays one record, swapped.
  f.model.storages[0].big_endian = true;
  pack(f.model, f.sources, {t.path("shared.pth"), {"full", "view"}, std::nullopt});
  const FileSource shared(t.path("shared.pth"));
  const Model sb = read_torch(shared, "shared.pth");
  CHECK(sb.storages.size() == 1);
  CHECK(shared.read_string(*sb.file_offset(sb.tensors[sb.entries[0].tensor]), 32) ==
        little(f.bytes.substr(0, 32), 4));
  // safetensors is little-endian: big-endian elements are swapped, a view's after its gather.
  pack(f.model, f.sources, {t.path("le.safetensors"), {"full", "view"}, std::nullopt});
  const FileSource le(t.path("le.safetensors"));
  const Model back = read_safetensors(le, "le.safetensors");
  auto swapped = [&](std::initializer_list<int> elements) {
    std::string out;
    for (int i : elements) {
      std::string e = f.bytes.substr(static_cast<std::size_t>(i) * 4, 4);
      out.append(e.rbegin(), e.rend());
    }
    return out;
  };
  CHECK(le.read_string(*back.file_offset(back.tensors[back.entries[0].tensor]), 32) ==
        swapped({0, 1, 2, 3, 4, 5, 6, 7}));
  CHECK(le.read_string(*back.file_offset(back.tensors[back.entries[1].tensor]), 16) ==
        swapped({2, 4, 3, 5}));
}

TEST_CASE("safetensors: each tensor its own contiguous bytes, format pt") {
  Fixture f;
  f.model.metadata = {{"note", "kept"}};
  TempDir t;
  const std::string path = t.path("model.safetensors");
  PackResult r = pack(f.model, f.sources, {path, {}, std::nullopt, Overwrite::no});
  CHECK(r.format == PackFormat::safetensors);
  CHECK(r.tensors == 3);
  CHECK(r.left_out.size() == 2);
  const FileSource file(path);
  const Model back = read_safetensors(file, "model.safetensors");
  REQUIRE(back.entries.size() == 3);
  CHECK(back.entries[0].key == "full");
  CHECK(back.entries[1].key == "view");
  CHECK(back.entries[2].key == "tied");
  CHECK(back.metadata ==
        std::vector<std::pair<std::string, std::string>>{{"note", "kept"}, {"format", "pt"}});
  auto bytes_of = [&](std::size_t i) {
    const Tensor& tensor = back.tensors[back.entries[i].tensor];
    return file.read_string(*back.file_offset(tensor), tensor.nbytes());
  };
  CHECK(bytes_of(0) == f.bytes.substr(0, 32));
  CHECK(bytes_of(2) == f.bytes.substr(0, 32));
  // The view gathered: elements 2, 4, 3, 5.
  std::string view;
  for (int i : {2, 4, 3, 5}) view += f.bytes.substr(static_cast<std::size_t>(i) * 4, 4);
  CHECK(bytes_of(1) == view);
  // --force replaces; without it, an existing OUT stays as it is.
  CHECK(refusal([&] {
          pack(f.model, f.sources, {path, {"full"}, std::nullopt, Overwrite::no});
        }).first == ExitCode::usage);
  pack(f.model, f.sources, {path, {"full"}, std::nullopt, Overwrite::yes});
  CHECK(read_safetensors(FileSource(path), "x").entries.size() == 1);
  CHECK(refusal([&] {
          pack(f.model, f.sources, {t.path("m.npz"), {}, std::nullopt});
        }).first == ExitCode::usage);
}

TEST_CASE("torch_prefix_of() as torch.save names its records") {
  CHECK(torch_prefix_of("/data/model.pth") == "model");
  CHECK(torch_prefix_of("a.b.bin") == "a.b");
  CHECK(torch_prefix_of(".pt") == "archive");
  CHECK(torch_prefix_of("dir.x/noext") == "noext");
}

TEST_CASE("torch: the nesting the key paths say, read back as it was, --flat keeps one dict") {
  Fixture f;
  nest(f);
  TempDir t;
  const std::string path = t.path("nested.pth");
  const PackResult r = pack(f.model, f.sources, {path, {}, std::nullopt, Overwrite::no});
  CHECK(r.renamed.empty());
  CHECK(r.flattened.empty());
  const FileSource file(path);
  const Model back = read_torch(file, "nested.pth");
  CHECK(back.root == ContainerKind::dict);
  std::vector<std::tuple<std::string, std::string, std::string>> got;
  for (const Entry& e : back.entries) got.emplace_back(e.key, e.key_path, e.containers);
  using T = std::tuple<std::string, std::string, std::string>;
  CHECK(got == std::vector<T>{{"model.full", R"(["model","full"])", "do"},
                              {"model.view", R"(["model","view"])", "do"},
                              {"epoch", "", ""},
                              {"opt.state.0.t", R"(["opt","state",0,"t"])", "dddd"},
                              {"lst.0", R"(["lst",0])", "dl"},  // the position before z: None
                              {"lst.1", R"(["lst",1])", "dl"}});
  CHECK(back.entries[4].value_json == "null");
  // Still one storage for full, view and tied.
  CHECK(back.tensors[back.entries[0].tensor].storage ==
        back.tensors[back.entries[3].tensor].storage);

  // --keys prunes the containers to what is selected; --flat writes the flattened keys.
  const std::string some = t.path("some.pth");
  PackOptions options{some, {"opt.*"}, std::nullopt, Overwrite::no};
  pack(f.model, f.sources, options);
  const FileSource some_file(some);
  const Model pruned = read_torch(some_file, "some.pth");
  REQUIRE(pruned.entries.size() == 1);
  CHECK(pruned.entries[0].key_path == R"(["opt","state",0,"t"])");
  const std::string flat = t.path("flat.pth");
  options = {flat, {}, std::nullopt, Overwrite::no};
  options.flat = true;
  pack(f.model, f.sources, options);
  const FileSource flat_file(flat);
  const Model flattened = read_torch(flat_file, "flat.pth");
  CHECK(flattened.root == ContainerKind::ordered_dict);
  for (const Entry& e : flattened.entries) CHECK(e.key_path.empty());
  CHECK(flattened.entries[3].key == "opt.state.0.t");

  // The checkpoint that is one tensor is written as that tensor.
  Fixture one;
  one.model.root = std::nullopt;
  one.model.entries = {{"tensor", "[]", Entry::Kind::tensor, 1, "", nullptr, ""}};
  const std::string bare = t.path("bare.pth");
  pack(one.model, one.sources, {bare, {}, std::nullopt, Overwrite::no});
  const FileSource bare_file(bare);
  const Model b = read_torch(bare_file, "bare.pth");
  CHECK(!b.root);
  REQUIRE(b.entries.size() == 1);
  CHECK(b.entries[0].key_path == "[]");
  CHECK(b.tensors[b.entries[0].tensor].stride == std::vector<std::int64_t>{1, 2});
}

TEST_CASE("nesting: what pack does not build is written under flattened keys, renamed apart") {
  Fixture f;
  f.model.root = ContainerKind::dict;
  auto set = [&](std::size_t i, std::string key, std::string path, std::string containers) {
    f.model.entries[i].key = std::move(key);
    f.model.entries[i].key_path = std::move(path);
    f.model.entries[i].containers = std::move(containers);
  };
  set(0, "ema.shadow.fc.bias", R"(["ema","shadow","fc.bias"])", "dxd");  // below an object
  set(1, "ema.decay", R"(["ema","decay"])", "dx");
  set(3, "(1, 2)", R"j([{"__tuple__":"(1, 2)"}])j", "d");  // a tuple key: its text
  set(4, "(1, 2)", R"j(["(1, 2)"])j", "d");                // the str key of that text keeps it
  const Selection all = select_entries(f.model, {}, PackFormat::torch, std::nullopt);
  const Structure s = nested_structure(f.model, all);
  REQUIRE(s.nodes[0].children.size() == 4);  // ema, epoch, (1, 2)%#2, (1, 2)
  const Structure::Node& ema = s.nodes[s.nodes[0].children[0]];
  CHECK(ema.kind == ContainerKind::object);  // an OrderedDict of the keys below it
  REQUIRE(ema.children.size() == 2);
  CHECK(s.nodes[ema.children[0]].key.text == "shadow.fc.bias");
  CHECK(s.nodes[ema.children[1]].key.text == "decay");
  CHECK(s.nodes[s.nodes[0].children[2]].key.text == "(1, 2)%#2");
  CHECK(s.nodes[s.nodes[0].children[3]].key.text == "(1, 2)");
  CHECK(s.renamed == std::vector<std::pair<std::string, std::string>>{{"(1, 2)", "(1, 2)%#2"}});
  REQUIRE(s.flattened.size() == 2);
  CHECK(s.flattened[0].first == "ema");
  CHECK(s.flattened[1].first == "(1, 2)");

  // Keys of every kind pack writes exactly, in a dict: int, bool, None, float, bytes.
  set(0, "1", "[1]", "d");
  set(1, "False", "[false]", "d");
  set(3, "None", "[null]", "d");
  set(4, "b'\\xff'.x", R"([{"__bytes__":"ff"},"x"])", "dd");
  const Structure k = nested_structure(f.model, all);
  std::vector<StructureKey::Kind> kinds;
  for (const std::uint32_t c : k.nodes[0].children) kinds.push_back(k.nodes[c].key.kind);
  CHECK(kinds == std::vector<StructureKey::Kind>{
                     StructureKey::Kind::integer, StructureKey::Kind::boolean,
                     StructureKey::Kind::str, StructureKey::Kind::none, StructureKey::Kind::bytes});
  CHECK(k.flattened.empty());
}

TEST_CASE("nesting: key paths that lie are refused, naming the entry") {
  Fixture f;
  nest(f);
  Model m = f.model;
  m.entries[0].key = "x.full";  // the text is not the key path's
  CHECK(refusal_of_structure(m) == R"(entry "x.full": its key_path does not spell its key)");
  m = f.model;
  m.entries[0].containers = "d";
  CHECK(refusal_of_structure(m) ==
        R"(entry "model.full": its key_path has 2 parts, its containers 1)");
  m = f.model;
  m.entries[1].containers = "dd";  // "model" a dict here, an OrderedDict for model.full
  CHECK(refusal_of_structure(m) ==
        R"(entry "model.view": its key_path puts it where entry "model.full" is too)");
  m = f.model;
  m.entries[2].key_path = R"(["model"])";  // a value where a container is
  m.entries[2].containers = "d";
  m.entries[2].key = "model";
  CHECK(refusal_of_structure(m) ==
        R"(entry "model": its key_path puts it where entry "model.full" is too)");
  m = f.model;
  m.entries[4].key_path = R"(["lst",40000000000])";
  m.entries[4].key = "lst.40000000000";
  CHECK(refusal_of_structure(m) ==
        R"(entry "lst.40000000000": its key_path puts an item at position 40000000000 of a list)");
  m = f.model;
  m.entries[4].key_path = R"(["lst","x"])";
  m.entries[4].key = "lst.x";
  CHECK(refusal_of_structure(m) == R"(entry "lst.x": its key_path puts the key "x" in a list)");
  m = f.model;
  m.entries[4].containers = "ll";
  CHECK(refusal_of_structure(m) ==
        R"(entry "lst.1": its key_path starts in list, but the checkpoint's root is dict)");
  m = f.model;
  m.entries[2].key_path = "[]";
  CHECK(refusal_of_structure(m) ==
        R"(entry "epoch": its key_path says it is the whole checkpoint, beside other entries)");
  m = f.model;
  m.entries[0].key_path = R"(["model",)";
  CHECK(refusal_of_structure(m).starts_with(R"(entry "model.full": its key_path is invalid)"));
}

TEST_SUITE_END();
