// SPDX-License-Identifier: MIT
// Unit tests of the TorchScript reader: class declarations read from code records (stored,
// deflated, missing, malformed, huge), the state_dict walk, constants, the other tensors, and
// hostile archives, on archives assembled in C++.
#include "support/fake_checkpoint.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/format/torch/torchscript_code.hpp>
#include <ckptfs/format/torch/torchscript_reader.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>

#include <doctest/doctest.h>
#include <zlib.h>

#include <chrono>
#include <stdexcept>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

// `text` as a raw deflate stream (what a zip's method 8 holds).
std::string deflate_raw(std::string_view text) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    throw std::runtime_error("deflateInit2");
  }
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int status = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (status != Z_STREAM_END) throw std::runtime_error("deflate");
  return out;
}

struct Record {
  std::string name;  // without the prefix
  std::string bytes;
  std::uint16_t method = 0;  // 8: `bytes` are deflated here; any other: recorded only
};

// A TorchScript archive the way torch.jit.save lays one out: data.pkl, code/, constants.pkl,
// data/<key>, constants/<key>, version.
std::string script_archive(const std::string& data_pkl, const std::vector<Record>& records,
                           const std::string& constants_pkl = "\x80\x02).",
                           const std::string& prefix = "m") {
  ZipBuilder zip;
  zip.add(prefix + "/data.pkl", data_pkl, torch_entry());
  std::vector<Record> code, storage;
  for (const auto& r : records) (r.name.starts_with("code/") ? code : storage).push_back(r);
  auto add = [&](const Record& r) {
    EntryOptions options = torch_entry();
    options.method = r.method;
    if (r.method == 8) {
      std::string packed = deflate_raw(r.bytes);
      options.size = r.bytes.size();
      options.compressed_size = packed.size();
      options.crc32 = static_cast<std::uint32_t>(crc32(
          0, reinterpret_cast<const Bytef*>(r.bytes.data()), static_cast<uInt>(r.bytes.size())));
      zip.add(prefix + "/" + r.name, packed, options);
    } else {
      zip.add(prefix + "/" + r.name, r.bytes, options);
    }
  };
  for (const auto& r : code) add(r);
  zip.add(prefix + "/constants.pkl", constants_pkl, torch_entry());
  for (const auto& r : storage) add(r);
  zip.add(prefix + "/version", "3\n", torch_entry());
  return zip.build({.zip64 = true});
}

// Pieces of TorchScript pickles: an object of class `__torch__.<module> <name>` is NEWOBJ then
// its dict state (begin_object, attributes, end_object); vec(): a float32 vector of `n`
// elements over storage `key`; training(): the attribute every module has.
PickleBuilder& begin_object(PickleBuilder& p, std::string_view module, std::string_view name) {
  return p.global(module, name).empty_tuple().newobj().empty_dict().mark();
}
PickleBuilder& end_object(PickleBuilder& p) { return p.setitems().build(); }
PickleBuilder& vec(PickleBuilder& p, std::string_view key, std::int64_t n) {
  return p.tensor_v2("FloatStorage", key, "cpu", n, 0, {n}, {1});
}
PickleBuilder& training(PickleBuilder& p, bool value = false) {
  p.binunicode("training");
  return value ? p.newtrue() : p.newfalse();
}

Model read_archive(const std::string& bytes) {
  MemorySource source(bytes);
  return read_torch(source, "model.pt");
}

ExitCode error_of(const std::string& bytes) {
  try {
    read_archive(bytes);
  } catch (const Error& e) {
    return e.code();
  }
  return ExitCode::ok;
}

std::string message_of(const std::string& bytes) {
  try {
    read_archive(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

std::vector<std::string> keys(const Model& m) {
  std::vector<std::string> out;
  for (const auto& e : m.entries) out.push_back(e.key);
  return out;
}

const Tensor& tensor_of(const Model& m, std::string_view key) {
  for (const auto& e : m.entries) {
    if (e.key == key) {
      REQUIRE(e.kind == Entry::Kind::tensor);
      return m.tensors[e.tensor];
    }
  }
  FAIL("no entry " << key);
  throw std::logic_error("unreachable");
}

const Entry& entry_of(const Model& m, std::string_view key) {
  for (const auto& e : m.entries) {
    if (e.key == key) return e;
  }
  FAIL("no entry " << key);
  throw std::logic_error("unreachable");
}

// class Net(Module): parameters w, b; buffers running; a plain tensor attribute `plain`; a
// submodule `sub` of class Lin (parameter weight); attributes in the order torch would NOT put
// them (a buffer first), so that the walk must order parameters before buffers itself.
std::string net_pickle() {
  PickleBuilder p;
  begin_object(p.proto(2), "__torch__", "Net");
  vec(p.binunicode("running"), "0", 2);
  vec(p.binunicode("w"), "1", 3);
  training(p);
  vec(p.binunicode("plain"), "2", 1);
  vec(p.binunicode("b"), "3", 3);
  begin_object(p.binunicode("sub"), "__torch__.pkg.layers", "Lin");
  training(vec(p.binunicode("weight"), "4", 4));
  end_object(p);
  p.binunicode("count").integer(7);
  end_object(p).stop();
  return p.bytes();
}

const char* net_code =
    "class Net(Module):\n"
    "  __parameters__ = [\"w\", \"b\", ]\n"
    "  __buffers__ = [\"running\", ]\n"
    "  running : Tensor\n"
    "  w : Tensor\n"
    "  training : bool\n"
    "  plain : Tensor\n"
    "  b : Tensor\n"
    "  sub : __torch__.pkg.layers.Lin\n"
    "  count : int\n"
    "  def forward(self: __torch__.Net, x: Tensor) -> Tensor:\n"
    "    return x\n";

const char* lin_code =
    "class Other(Module):\n"
    "  __parameters__ = [\"weight\", ]\n"
    "  __buffers__ = []\n"
    "class Lin(Module):\n"
    "  __parameters__ = [\"weight\", ]\n"
    "  __buffers__ = []\n"
    "  weight : Tensor\n"
    "  training : bool\n";

std::vector<Record> net_storages() {
  return {{"data/0", floats(2)},
          {"data/1", floats(3)},
          {"data/2", floats(1)},
          {"data/3", floats(3)},
          {"data/4", floats(4)}};
}

std::vector<Record> with(std::vector<Record> a, const std::vector<Record>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_SUITE_BEGIN("torchscript");

TEST_CASE("code_record_of: qualified names to code records, nothing else") {
  CHECK(code_record_of("__torch__.M") == "code/__torch__.py");
  CHECK(code_record_of("__torch__.torch.nn.modules.conv.___torch_mangle_0.Conv1d") ==
        "code/__torch__/torch/nn/modules/conv/___torch_mangle_0.py");
  CHECK(code_record_of("__torch__") == "");
  CHECK(code_record_of("torch.M") == "");
  CHECK(code_record_of("__torch__..M") == "");
  CHECK(code_record_of("__torch__.a/b.M") == "");
  CHECK(code_record_of("__torch__.a.M.") == "");
  CHECK(code_record_of("__torch__.a-b.M") == "");
}

TEST_CASE("state_dict from the declarations: parameters, buffers, submodules, the rest apart") {
  for (std::uint16_t method : {0, 8}) {
    CAPTURE(method);
    std::string file =
        script_archive(net_pickle(), with({{"code/__torch__.py", net_code, method},
                                           {"code/__torch__/pkg/layers.py", lin_code, method}},
                                          net_storages()));
    Model m = read_archive(file);
    CHECK(m.format == Format::torchscript);
    CHECK(keys(m) ==
          std::vector<std::string>{"w", "b", "running", "sub.weight", "attributes.plain"});
    CHECK(entry_of(m, "w").key_path.empty());
    CHECK(entry_of(m, "attributes.plain").key_path == R"([{"__part__":"attributes"},"plain"])");
    CHECK(m.storages[*tensor_of(m, "w").storage].record == "m/data/1");
    CHECK(tensor_of(m, "sub.weight").shape == std::vector<std::int64_t>{4});
    MemorySource source(file);
    ZipArchive zip(source);
    CHECK(m.file_offset(tensor_of(m, "b")) == zip.find("m/data/3")->data_offset);
  }
}

TEST_CASE("without declarations: the tensor attributes before `training`") {
  SUBCASE("no code records") {
    Model m = read_archive(script_archive(net_pickle(), net_storages()));
    CHECK(keys(m) == std::vector<std::string>{"running", "w", "sub.weight", "attributes.plain",
                                              "attributes.b"});
  }
  SUBCASE("code compressed by a method ckptfs does not read is ignored") {
    Model m = read_archive(script_archive(
        net_pickle(),
        with({{"code/__torch__.py", net_code, 12}, {"code/__torch__/pkg/layers.py", lin_code, 14}},
             net_storages())));
    CHECK(keys(m) == std::vector<std::string>{"running", "w", "sub.weight", "attributes.plain",
                                              "attributes.b"});
  }
  SUBCASE("a declaration that is not of the printer's form") {
    for (const char* bad : {"  __parameters__ = [\"w\", \"b\"\n",         // no ]
                            "  __parameters__ = [w, b]\n",                // not strings
                            "  __parameters__ = [\"w\\q\"]\n",            // unknown escape
                            "  __parameters__ = [\"w\"] # comment\n"}) {  // trailing text
      CAPTURE(bad);
      std::string code = std::string("class Net(Module):\n") + bad + "  __buffers__ = []\n";
      Model m = read_archive(script_archive(
          net_pickle(),
          with({{"code/__torch__.py", code}, {"code/__torch__/pkg/layers.py", lin_code}},
               net_storages())));
      CHECK(keys(m).front() == "running");  // the fallback: state order before `training`
    }
  }
  SUBCASE("declarations below other lines are not declarations") {
    std::string code =
        "class Net(Module):\n"
        "  running : Tensor\n"
        "  __parameters__ = [\"w\", \"b\", ]\n";
    Model m = read_archive(
        script_archive(net_pickle(), with({{"code/__torch__.py", code}}, net_storages())));
    // Declared a module with no parameter or buffer: only the submodule's weight.
    CHECK(keys(m) == std::vector<std::string>{"sub.weight", "attributes.running", "attributes.w",
                                              "attributes.plain", "attributes.b"});
  }
}

TEST_CASE("read_class_declarations: escapes, first declaration, classes that are not modules") {
  std::string code =
      "class A(Module):\n"
      "  __parameters__ = [\"a\\\"q\", \"tab\\t\", \"\\101\\102\", \"0\", ]\n"
      "  __buffers__ = []\n"
      "class B:\n"
      "  t : Tensor\n"
      "class A(Module):\n"
      "  __parameters__ = [\"second\", ]\n"
      "class C(Enum):\n"
      "  __parameters__ = []\n"
      "  __buffers__ = [\"x\", ]";  // no newline at the end of the record
  ZipBuilder zip;
  zip.add("p/code/__torch__/q.py", code, torch_entry());
  MemorySource source(zip.build());
  ZipArchive archive(source);
  auto found = read_class_declarations(
      source, archive, "p", {"__torch__.q.A", "__torch__.q.B", "__torch__.q.C", "__torch__.q.D"});
  REQUIRE(found.size() == 3);
  CHECK(found["__torch__.q.A"].module);
  CHECK(found["__torch__.q.A"].parameters == std::vector<std::string>{"a\"q", "tab\t", "AB", "0"});
  CHECK_FALSE(found["__torch__.q.B"].module);
  CHECK(found["__torch__.q.B"].parameters.empty());
  CHECK_FALSE(found["__torch__.q.C"].module);
  CHECK(found["__torch__.q.C"].buffers == std::vector<std::string>{"x"});
}

TEST_CASE("read_class_declarations: huge, cut and corrupt code records stay bounded") {
  const std::string header = "class A(Module):\n  __parameters__ = [\"w\", ]\n  __buffers__ = []\n";
  SUBCASE("a declaration after 72 MiB of code: past the budget, not read") {
    std::string code(72u << 20, '#');
    for (std::size_t i = 100; i < code.size(); i += 100) code[i] = '\n';
    code += "\n" + header;
    ZipBuilder zip;
    EntryOptions options = torch_entry();
    std::string packed = deflate_raw(code);
    options.method = 8;
    options.size = code.size();
    options.compressed_size = packed.size();
    zip.add("p/code/__torch__/q.py", packed, options);
    MemorySource source(zip.build());
    ZipArchive archive(source);
    auto start = std::chrono::steady_clock::now();
    auto found = read_class_declarations(source, archive, "p", {"__torch__.q.A"},
                                         {.max_code_bytes = 64u << 20});
    CHECK(found.empty());
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  }
  SUBCASE("a declaration before a huge body is read without inflating the rest") {
    std::string code = header + "  def forward(self):\n" + std::string(16u << 20, ' ');
    ZipBuilder zip;
    EntryOptions options = torch_entry();
    std::string packed = deflate_raw(code);
    options.method = 8;
    options.size = code.size();
    options.compressed_size = packed.size();
    zip.add("p/code/__torch__/q.py", packed, options);
    MemorySource source(zip.build());
    ZipArchive archive(source);
    auto found = read_class_declarations(source, archive, "p", {"__torch__.q.A"},
                                         {.max_code_bytes = 1u << 20});
    REQUIRE(found.size() == 1);
    CHECK(found["__torch__.q.A"].parameters == std::vector<std::string>{"w"});
  }
  SUBCASE("a line longer than max_line where a header line may come: no declaration") {
    std::string code = "class A(Module):\n  __parameters__ = [\"" + std::string(5000, 'x') +
                       "\", ]\n  __buffers__ = []\n";
    ZipBuilder zip;
    zip.add("p/code/__torch__/q.py", code, torch_entry());
    MemorySource source(zip.build());
    ZipArchive archive(source);
    CHECK(read_class_declarations(source, archive, "p", {"__torch__.q.A"}, {.max_line = 1000})
              .empty());
    CHECK(read_class_declarations(source, archive, "p", {"__torch__.q.A"}).size() == 1);
  }
  SUBCASE("a stream cut in the middle of the header, or corrupt") {
    std::string packed = deflate_raw(header + "  w : Tensor\n");
    for (std::size_t cut : {std::size_t{4}, packed.size() / 2}) {
      ZipBuilder zip;
      EntryOptions options = torch_entry();
      options.method = 8;
      options.size = header.size() + 13;
      options.compressed_size = cut;
      zip.add("p/code/__torch__/q.py", packed.substr(0, cut), options);
      MemorySource source(zip.build());
      ZipArchive archive(source);
      CHECK(read_class_declarations(source, archive, "p", {"__torch__.q.A"}).empty());
    }
    std::string garbage(200, '\xff');
    ZipBuilder zip;
    EntryOptions options = torch_entry();
    options.method = 8;
    options.size = 1000;
    options.compressed_size = garbage.size();
    zip.add("p/code/__torch__/q.py", garbage, options);
    MemorySource source(zip.build());
    ZipArchive archive(source);
    CHECK(read_class_declarations(source, archive, "p", {"__torch__.q.A"}).empty());
  }
}

TEST_CASE("constants.pkl: its tensors as constants.N, their records under constants/") {
  PickleBuilder c;
  c.proto(2).mark();
  c.tensor_v2("FloatStorage", "0", "cpu", 2, 0, {2}, {1});
  c.binunicode("not a tensor");
  c.tensor_v2("LongStorage", "1", "cpu", 1, 0, {}, {});
  c.tuple().stop();
  std::string file = script_archive(
      net_pickle(),
      with(net_storages(), {{"constants/0", floats(2)}, {"constants/1", std::string(8, '\1')}}),
      c.bytes());
  Model m = read_archive(file);
  CHECK(keys(m) == std::vector<std::string>{"running", "w", "sub.weight", "constants.0",
                                            "constants.2", "attributes.plain", "attributes.b"});
  CHECK(entry_of(m, "constants.0").key_path == R"([{"__part__":"constants"},0])");
  CHECK(tensor_of(m, "constants.2").dtype == DType::int64);
  // constants/0 and data/0 are different storages with the same key.
  CHECK(m.storages[*tensor_of(m, "constants.0").storage].record == "m/constants/0");
  CHECK(m.storages[*tensor_of(m, "running").storage].record == "m/data/0");
  CHECK(tensor_of(m, "constants.0").storage != tensor_of(m, "running").storage);
  MemorySource source(file);
  ZipArchive zip(source);
  CHECK(m.file_offset(tensor_of(m, "constants.2")) == zip.find("m/constants/1")->data_offset);
}

TEST_CASE("hostile archives: broken tensors or clear refusals") {
  SUBCASE("a compressed tensor record: that tensor broken, saying why") {
    std::vector<Record> storages = net_storages();
    storages[1].method = 8;
    Model m = read_archive(script_archive(net_pickle(), storages));
    CHECK(tensor_of(m, "w").broken.find("\"m/data/1\" is compressed (method 8)") !=
          std::string::npos);
    CHECK(tensor_of(m, "running").broken.empty());
  }
  SUBCASE("a missing tensor record") {
    std::vector<Record> storages = net_storages();
    storages.erase(storages.begin() + 4);
    Model m = read_archive(script_archive(net_pickle(), storages));
    CHECK(tensor_of(m, "sub.weight").broken.find("missing") != std::string::npos);
  }
  SUBCASE("constants.pkl that is not a tuple") {
    for (const std::string constants : {"\x80\x02}.", "\x80\x02N.", "\x80\x02]."}) {
      std::string file = script_archive(net_pickle(), net_storages(), constants);
      CHECK(error_of(file) == ExitCode::bad_checkpoint);
      CHECK(message_of(file).find("not a tuple") != std::string::npos);
    }
  }
  SUBCASE("an invalid constants.pkl") {
    CHECK(error_of(script_archive(net_pickle(), net_storages(), "x")) == ExitCode::bad_checkpoint);
  }
  SUBCASE("no tensor at all") {
    PickleBuilder p;
    training(begin_object(p.proto(2), "__torch__", "Net")).binunicode("n").integer(1);
    end_object(p).stop();
    std::string file = script_archive(p.bytes(), {{"code/__torch__.py", net_code}});
    CHECK(error_of(file) == ExitCode::unsupported);
    CHECK(message_of(file).find("without tensors") != std::string::npos);
  }
  SUBCASE("a compressed data.pkl or constants.pkl") {
    ZipBuilder zip;
    zip.add("m/data.pkl", net_pickle(), {.method = 8});
    zip.add("m/constants.pkl", "\x80\x02).", torch_entry());
    CHECK(error_of(zip.build()) == ExitCode::unsupported);
    ZipBuilder zip2;
    zip2.add("m/data.pkl", net_pickle(), torch_entry());
    zip2.add("m/constants.pkl", "\x80\x02).", {.method = 8});
    CHECK(error_of(zip2.build()) == ExitCode::unsupported);
  }
  SUBCASE("an older layout without data.pkl") {
    ZipBuilder zip;
    zip.add("m/model.json", "{}", torch_entry());
    zip.add("m/constants.pkl", "\x80\x02).", torch_entry());
    CHECK(error_of(zip.build()) == ExitCode::unsupported);
    CHECK(message_of(zip.build()).find("older layout") != std::string::npos);
  }
  SUBCASE("an archive that lost data.pkl or constants.pkl") {
    ZipBuilder zip;
    zip.add("m/constants.pkl", "\x80\x02).", torch_entry());
    zip.add("m/data/0", floats(2), torch_entry());
    CHECK(error_of(zip.build()) == ExitCode::bad_checkpoint);
    CHECK(message_of(zip.build()).find("without data.pkl") != std::string::npos);
    ZipBuilder zip2;
    zip2.add("m/data.pkl", net_pickle(), torch_entry());
    zip2.add("m/code/__torch__.py", net_code, torch_entry());
    CHECK(error_of(zip2.build()) == ExitCode::bad_checkpoint);
    CHECK(message_of(zip2.build()).find("\"m/constants.pkl\"") != std::string::npos);
  }
  SUBCASE("a root that is not a module: every tensor an attribute") {
    std::string pkl = state_dict_pickle({{"w", "0", 2, 0, {2}, {1}}});
    Model m = read_archive(script_archive(pkl, {{"data/0", floats(2)}}));
    CHECK(keys(m) == std::vector<std::string>{"attributes.w"});
  }
}

TEST_CASE("modules shared, nested in themselves, with their own __getstate__, typed lists") {
  SUBCASE("one submodule under two names is listed under both (as state_dict does)") {
    PickleBuilder p;
    training(begin_object(p.proto(2), "__torch__", "Net"));
    begin_object(p.binunicode("a"), "__torch__.pkg.layers", "Lin");
    end_object(training(vec(p.binunicode("weight"), "4", 4)));
    p.binput(0);
    p.binunicode("b").binget(0);
    end_object(p).stop();
    Model m = read_archive(script_archive(
        p.bytes(), {{"code/__torch__/pkg/layers.py", lin_code}, {"data/4", floats(4)}}));
    CHECK(keys(m) == std::vector<std::string>{"a.weight", "b.weight"});
    CHECK(tensor_of(m, "a.weight").storage == tensor_of(m, "b.weight").storage);
  }
  SUBCASE("a module inside itself is walked once per path") {
    PickleBuilder p;
    p.proto(2).global("__torch__", "Net").empty_tuple().newobj().binput(0).empty_dict().mark();
    training(vec(p.binunicode("w"), "0", 2)).binunicode("self").binget(0);
    end_object(p).stop();
    Model m = read_archive(script_archive(p.bytes(), {{"data/0", floats(2)}}));
    CHECK(keys(m) == std::vector<std::string>{"w"});
  }
  SUBCASE("a module pickled through __getstate__: its state under attributes") {
    PickleBuilder p;
    training(begin_object(p.proto(2), "__torch__", "Net"));
    p.binunicode("packed").global("__torch__.q", "Packed").empty_tuple().newobj().mark();
    vec(vec(p, "0", 2), "1", 1).newfalse().integer(12).tuple().build();
    end_object(p).stop();
    std::string q_code = "class Packed(Module):\n  __parameters__ = []\n  __buffers__ = []\n";
    Model m = read_archive(script_archive(
        p.bytes(),
        {{"code/__torch__/q.py", q_code}, {"data/0", floats(2)}, {"data/1", floats(1)}}));
    CHECK(keys(m) == std::vector<std::string>{"attributes.packed.__state__.0",
                                              "attributes.packed.__state__.1"});
    CHECK(entry_of(m, "attributes.packed.__state__.1").key_path ==
          R"([{"__part__":"attributes"},"packed",{"__part__":"__state__"},1])");
  }
  SUBCASE("torch.jit._pickle's typed lists are the lists they wrap") {
    PickleBuilder p;
    training(begin_object(p.proto(2), "__torch__", "Net"));
    p.binunicode("tensors").global("torch.jit._pickle", "build_tensorlist").mark();
    vec(vec(p.empty_list().mark(), "0", 2), "1", 1).appends().tuple().reduce();
    p.binunicode("tagged").global("torch.jit._pickle", "restore_type_tag").mark().empty_dict();
    vec(p.binunicode("k"), "1", 1).setitem().binunicode("Dict[str, Tensor]").tuple().reduce();
    end_object(p).stop();
    Model m =
        read_archive(script_archive(p.bytes(), {{"data/0", floats(2)}, {"data/1", floats(1)}}));
    CHECK(keys(m) == std::vector<std::string>{"attributes.tensors.0", "attributes.tensors.1",
                                              "attributes.tagged.k"});
  }
}

TEST_CASE("byte order and requires_grad as saved") {
  PickleBuilder p;
  begin_object(p.proto(2), "__torch__", "Net");
  p.binunicode("w").global("torch._utils", "_rebuild_tensor_v2").mark();
  p.mark().binunicode("storage").global("torch", "FloatStorage").binunicode("0");
  p.binunicode("cpu").integer(2).tuple().binpersid();
  p.integer(0).int_tuple({2}).int_tuple({1}).newtrue();
  p.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce();
  end_object(training(p)).stop();
  ZipBuilder zip;
  zip.add("m/data.pkl", p.bytes(), torch_entry());
  zip.add("m/code/__torch__.py", "class Net(Module):\n  __parameters__ = [\"w\", ]\n",
          torch_entry());
  zip.add("m/constants.pkl", "\x80\x02).", torch_entry());
  zip.add("m/data/0", floats(2), torch_entry());
  zip.add("m/version", "3\n", torch_entry());
  zip.add("m/byteorder", "big", torch_entry());
  zip.add("m/.data/serialization_id", std::string(40, '1'), torch_entry());
  Model m = read_archive(zip.build({.zip64 = true}));
  CHECK(keys(m) == std::vector<std::string>{"w"});
  CHECK(tensor_of(m, "w").requires_grad);
  CHECK(m.byteorder() == "big");
}

TEST_SUITE_END();
