// SPDX-License-Identifier: MIT
// Unit tests of read_checkpoint(): layouts, rebuild calls, validation, flattening and refusals,
// on checkpoints assembled in C++.
#include "support/fake_checkpoint.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

Model read(const std::string& bytes) {
  MemorySource source(bytes);
  return read_torch(source, "test.pth");
}

ExitCode error_of(const std::string& bytes) {
  try {
    read(bytes);
  } catch (const Error& e) {
    return e.code();
  }
  return ExitCode::ok;
}

std::string message_of(const std::string& bytes) {
  try {
    read(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

std::vector<std::string> keys(const Model& c) {
  std::vector<std::string> out;
  for (const auto& e : c.entries) out.push_back(e.key);
  return out;
}

const Tensor& tensor(const Model& c, std::size_t entry) {
  REQUIRE(c.entries[entry].kind == Entry::Kind::tensor);
  return c.tensors[c.entries[entry].tensor];
}

}  // namespace

TEST_SUITE_BEGIN("checkpoint");

TEST_CASE("a state_dict: keys, dtypes, shapes and absolute offsets of the records") {
  std::string pkl = state_dict_pickle(
      {{"fc.weight", "0", 6, 0, {2, 3}, {3, 1}}, {"fc.bias", "1", 2, 0, {2}, {1}}});
  std::string file = torch_zip(pkl, {{"0", floats(6)}, {"1", floats(2)}}, "model");
  Model c = read(file);
  CHECK(c.format == Format::zip);
  CHECK(c.byteorder() == "little");
  CHECK(c.storages[0].record == "model/data/0");
  CHECK(keys(c) == std::vector<std::string>{"fc.weight", "fc.bias"});
  const Tensor& w = tensor(c, 0);
  CHECK(w.dtype == DType::float32);
  CHECK(w.shape == std::vector<std::int64_t>{2, 3});
  CHECK(w.broken.empty());
  CHECK(w.nbytes() == 24);
  CHECK(w.contiguous());
  MemorySource source(file);
  ZipArchive zip(source);
  CHECK(c.file_offset(w) == zip.find("model/data/0")->data_offset);
  CHECK(*c.file_offset(w) % 64 == 0);
  CHECK(c.storages.size() == 2);
  CHECK(c.storages[*w.storage].record == "model/data/0");
}

TEST_CASE("views: offsets, strides, shared storages") {
  std::string pkl = state_dict_pickle({{"a", "0", 12, 0, {3, 4}, {4, 1}},
                                       {"a_t", "0", 12, 0, {4, 3}, {1, 4}},
                                       {"row", "0", 12, 8, {4}, {1}},
                                       {"expanded", "0", 12, 0, {5, 4}, {0, 1}}});
  Model c = read(torch_zip(pkl, {{"0", floats(12)}}));
  REQUIRE(c.entries.size() == 4);
  CHECK(c.storages.size() == 1);
  CHECK(tensor(c, 1).broken.empty());
  CHECK_FALSE(tensor(c, 1).contiguous());
  CHECK_FALSE(c.file_offset(tensor(c, 1)));
  CHECK(*c.file_offset(tensor(c, 2)) == *c.file_offset(tensor(c, 0)) + 32);
  CHECK(tensor(c, 3).broken.empty());
  CHECK(tensor(c, 3).nbytes() == 80);  // the logical tensor, not the storage
}

TEST_CASE("a view that does not fit its storage is broken, the rest stays usable") {
  std::string pkl = state_dict_pickle({{"ok", "0", 4, 0, {4}, {1}},
                                       {"past_end", "0", 4, 2, {3}, {1}},
                                       {"huge_stride", "0", 4, 0, {2}, {1LL << 62}}});
  Model c = read(torch_zip(pkl, {{"0", floats(4)}}));
  CHECK(tensor(c, 0).broken.empty());
  CHECK(tensor(c, 1).broken == "its view needs 20 bytes of storage \"0\" but it has 16");
  CHECK_FALSE(tensor(c, 2).broken.empty());
  CHECK_FALSE(c.file_offset(tensor(c, 1)));
}

TEST_CASE("a record shorter or longer than the pickle declares breaks its tensors") {
  std::string pkl =
      state_dict_pickle({{"short", "0", 6, 0, {2}, {1}}, {"long", "1", 2, 0, {2}, {1}}});
  Model c = read(torch_zip(pkl, {{"0", floats(2)}, {"1", floats(3)}}));
  CHECK(tensor(c, 0).broken ==
        "storage \"0\" holds 8 bytes but the pickle declares 6 elements of 4 bytes");
  CHECK_FALSE(tensor(c, 1).broken.empty());
}

TEST_CASE("a missing storage record breaks its tensors only") {
  std::string pkl =
      state_dict_pickle({{"here", "0", 2, 0, {2}, {1}}, {"gone", "7", 2, 0, {2}, {1}}});
  Model c = read(torch_zip(pkl, {{"0", floats(2)}}));
  CHECK(tensor(c, 0).broken.empty());
  CHECK(tensor(c, 1).broken == "record \"archive/data/7\" is missing from the zip");
}

TEST_CASE("empty and 0-d tensors") {
  std::string pkl = state_dict_pickle({{"empty", "0", 0, 0, {0}, {1}},
                                       {"scalar", "1", 1, 0, {}, {}},
                                       {"slice_at_end", "2", 5, 5, {0}, {1}}});
  Model c = read(torch_zip(pkl, {{"0", ""}, {"1", floats(1)}, {"2", floats(5)}}));
  CHECK(tensor(c, 0).broken.empty());
  CHECK(tensor(c, 0).nbytes() == 0);
  CHECK(tensor(c, 1).nbytes() == 4);
  CHECK(tensor(c, 1).shape.empty());
  CHECK(tensor(c, 2).broken.empty());
}

TEST_CASE("byteorder record") {
  std::string pkl = state_dict_pickle({{"w", "0", 2, 0, {2}, {1}}});
  CHECK(read(torch_zip(pkl, {{"0", floats(2)}}, "archive", {{"byteorder", "big"}})).byteorder() ==
        "big");
  CHECK(
      read(torch_zip(pkl, {{"0", floats(2)}}, "archive", {{"byteorder", "little"}})).byteorder() ==
      "little");
  CHECK(error_of(torch_zip(pkl, {{"0", floats(2)}}, "archive", {{"byteorder", "middle"}})) ==
        ExitCode::bad_checkpoint);
}

TEST_CASE("refusals say what the file is") {
  std::string pkl = state_dict_pickle({{"w", "0", 2, 0, {2}, {1}}});
  SUBCASE("a compressed storage record") {
    ZipBuilder zip;
    zip.add("archive/data.pkl", pkl, torch_entry());
    zip.add("archive/data/0", floats(2), {.method = 8});
    CHECK(error_of(zip.build()) == ExitCode::unsupported);
    CHECK(message_of(zip.build()).find("\"archive/data/0\" is compressed") != std::string::npos);
  }
  SUBCASE("a compressed data.pkl") {
    ZipBuilder zip;
    zip.add("archive/data.pkl", pkl, {.method = 8});
    CHECK(error_of(zip.build()) == ExitCode::unsupported);
  }
  SUBCASE("TorchScript is read as such, not as torch.save") {
    CHECK(read(torch_zip(pkl, {{"0", floats(2)}}, "m", {{"constants.pkl", "\x80\x02)."}})).format ==
          Format::torchscript);
    CHECK(error_of(torch_zip(pkl, {{"0", floats(2)}}, "m", {{"constants.pkl", "x"}})) ==
          ExitCode::bad_checkpoint);
  }
  SUBCASE("a zip without data.pkl") {
    ZipBuilder zip;
    zip.add("archive/version", "3\n", torch_entry());
    CHECK(error_of(zip.build()) == ExitCode::bad_checkpoint);
    CHECK(message_of(zip.build()).find("incomplete") != std::string::npos);
  }
  SUBCASE("tar and preview formats, empty and random files") {
    // A tar header as tar writes it, its checksum at 148: an archive, or torch 0.1's format.
    auto tar = [](const std::string& first_member) {
      std::string header(1024, '\0');
      header.replace(0, first_member.size(), first_member);
      header.replace(257, 6, std::string("ustar\0", 6));
      header.replace(148, 8, std::string(8, ' '));
      unsigned sum = 0;
      for (std::size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(header[i]);
      const std::string octal = fmt::format("{:06o}", sum);
      header.replace(148, 7, octal + '\0');
      return header;
    };
    CHECK(error_of(tar("model.pth")) == ExitCode::unsupported);
    CHECK(message_of(tar("model.pth")).find("a tar archive") != std::string::npos);
    CHECK(message_of(tar("sys_info")).find("torch 0.1") != std::string::npos);
    // "ustar" at 257 without the checksum is no tar header: not a checkpoint, as any bytes.
    std::string ustar(1024, '\0');
    ustar.replace(257, 5, "ustar");
    CHECK(error_of(ustar) == ExitCode::bad_checkpoint);
    CHECK(error_of("PYTORCH1 and more") == ExitCode::unsupported);
    CHECK(error_of("") == ExitCode::bad_checkpoint);
    CHECK(error_of(std::string("\x13\x9a\x7f random bytes that mean nothing")) ==
          ExitCode::bad_checkpoint);
    CHECK(error_of(std::string("\x80\x02K\x07.")) == ExitCode::bad_checkpoint);  // pickle(7)
  }
}

TEST_CASE("flattening: nested training checkpoint, values, order") {
  // {"model": {"fc.weight": T}, "optimizer": {"state": {0: {"exp_avg": T2}},
  //  "param_groups": [{"lr": 0.1}]}, "epoch": 7}
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("model").empty_dict().binunicode("fc.weight");
  p.tensor_v2("FloatStorage", "0", "cpu", 2, 0, {2}, {1}).setitem();
  p.binunicode("optimizer").empty_dict().mark();
  p.binunicode("state").empty_dict().integer(0).empty_dict().binunicode("exp_avg");
  p.tensor_v2("FloatStorage", "1", "cpu", 2, 0, {2}, {1}).setitem().setitem();
  p.binunicode("param_groups").empty_list().empty_dict().binunicode("lr").binfloat(0.1).setitem();
  p.append().setitems();
  p.binunicode("epoch").integer(7).setitems().stop();
  Model c = read(torch_zip(p.bytes(), {{"0", floats(2)}, {"1", floats(2)}}));
  CHECK(keys(c) == std::vector<std::string>{"model.fc.weight", "optimizer.state.0.exp_avg",
                                            "optimizer.param_groups", "epoch"});
  CHECK(c.entries[2].value_json == "[{\"lr\":0.1}]");
  CHECK(c.entries[3].value_json == "7");
  // The Python keys and the containers along the way of every nested entry, for pack; "epoch",
  // one str key of the root, needs none.
  CHECK(c.root == ContainerKind::dict);
  CHECK(c.entries[0].key_path == R"(["model","fc.weight"])");
  CHECK(c.entries[0].containers == "dd");
  CHECK(c.entries[1].key_path == R"(["optimizer","state",0,"exp_avg"])");
  CHECK(c.entries[1].containers == "dddd");
  CHECK(c.entries[2].key_path == R"(["optimizer","param_groups"])");
  CHECK(c.entries[2].containers == "dd");
  CHECK(c.entries[3].key_path.empty());
  CHECK(c.entries[3].containers.empty());
}

TEST_CASE("containers: OrderedDicts, lists, tuples and objects along the key path, in order") {
  // OrderedDict(m=OrderedDict(w=T) with BUILD {"_metadata": {"": {"version": 1}}},
  //             l=[T, 3, (T,)], o=Namespace(t=T))
  PickleBuilder p;
  p.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().mark();
  p.binunicode("m").global("collections", "OrderedDict").empty_tuple().reduce();
  p.binunicode("w").tensor_v2("FloatStorage", "0", "cpu", 1, 0, {1}, {1}).setitem();
  p.empty_dict().binunicode("_metadata").empty_dict().binunicode("").empty_dict();
  p.binunicode("version").integer(1).setitem().setitem().setitem().build();
  p.binunicode("l").empty_list().mark().tensor_v2("FloatStorage", "1", "cpu", 1, 0, {1}, {1});
  p.integer(3).tensor_v2("FloatStorage", "2", "cpu", 1, 0, {1}, {1}).tuple1().appends();
  p.binunicode("o").global("argparse", "Namespace").empty_tuple().newobj().empty_dict();
  p.binunicode("t").tensor_v2("FloatStorage", "3", "cpu", 1, 0, {1}, {1}).setitem().build();
  p.setitems().stop();
  Model c = read(torch_zip(
      p.bytes(), {{"0", floats(1)}, {"1", floats(1)}, {"2", floats(1)}, {"3", floats(1)}}));
  CHECK(keys(c) == std::vector<std::string>{"m.w", "l.0", "l.1", "l.2.0", "o.t"});
  CHECK(c.root == ContainerKind::ordered_dict);
  CHECK(c.entries[0].containers == "oo");
  CHECK(c.entries[1].key_path == R"(["l",0])");
  CHECK(c.entries[1].containers == "ol");
  CHECK(c.entries[2].containers == "ol");
  CHECK(c.entries[3].key_path == R"(["l",2,0])");
  CHECK(c.entries[3].containers == "olt");
  CHECK(c.entries[4].key_path == R"(["o","t"])");
  CHECK(c.entries[4].containers == "ox");
  // The inner OrderedDict's attributes, by the path that leads to it.
  REQUIRE(c.container_states.size() == 1);
  CHECK(c.container_states[0].key_path == R"(["m"])");
  CHECK(c.container_states[0].containers == "oo");
  REQUIRE(c.container_states[0].state);
  CHECK(c.container_states[0].state->kind == PlainValue::Kind::dict);
}

TEST_CASE("a tensor reached twice is an entry under each key, keys with the same text all stay") {
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("a").tensor_v2("FloatStorage", "0", "cpu", 2, 0, {2}, {1}).binput(9);
  p.binunicode("b").binget(9);
  p.binunicode("x.y").integer(1);
  p.binunicode("x").empty_dict().binunicode("y").binget(9).setitem();
  p.setitems().stop();
  Model c = read(torch_zip(p.bytes(), {{"0", floats(2)}}));
  CHECK(keys(c) == std::vector<std::string>{"a", "b", "x.y", "x.y"});
  CHECK(c.entries[0].tensor == c.entries[1].tensor);
  CHECK(c.tensors.size() == 1);
  // The two "x.y" say which Python keys they came from; "a" and "b" need not.
  CHECK(c.entries[0].key_path.empty());
  CHECK(c.entries[2].key_path == R"(["x.y"])");
  CHECK(c.entries[3].key_path == R"(["x","y"])");
}

// {0: A, "0": B, b"x": C, "x": D, (1, 2): E, "(1, 2)": F, None: G, "None": H, True: I}, the
// case of the issue: keys that render alike are different Python keys, and every tensor stays.
TEST_CASE("distinct keys with the same text are all entries, with their key paths") {
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  auto tensor_value = [&](const char* key) {
    p.tensor_v2("FloatStorage", key, "cpu", 1, 0, {1}, {1});
  };
  p.integer(0), tensor_value("0");
  p.binunicode("0"), tensor_value("1");
  p.binbytes("x"), tensor_value("2");
  p.binunicode("x"), tensor_value("3");
  p.integer(1).integer(2).tuple2(), tensor_value("4");
  p.binunicode("(1, 2)"), tensor_value("5");
  p.none(), tensor_value("6");
  p.binunicode("None"), tensor_value("7");
  p.binbytes("\xff"), tensor_value("8");
  p.setitems().stop();
  std::vector<std::pair<std::string, std::string>> records;
  for (int i = 0; i < 9; ++i) records.emplace_back(std::to_string(i), floats(1));
  Model c = read(torch_zip(p.bytes(), records));
  REQUIRE(c.entries.size() == 9);
  CHECK(keys(c) == std::vector<std::string>{"0", "0", "b'x'", "x", "(1, 2)", "(1, 2)", "None",
                                            "None", "b'\\xff'"});
  CHECK(c.entries[0].key_path == "[0]");
  CHECK(c.entries[1].key_path == R"(["0"])");
  CHECK(c.entries[2].key_path == R"([{"__bytes__":"78"}])");
  CHECK(c.entries[3].key_path.empty());  // "x": its text says it
  CHECK(c.entries[4].key_path == R"x([{"__tuple__":"(1, 2)"}])x");
  CHECK(c.entries[5].key_path == R"x(["(1, 2)"])x");
  CHECK(c.entries[6].key_path == "[null]");
  CHECK(c.entries[7].key_path == R"(["None"])");
  CHECK(c.entries[8].key_path == R"([{"__bytes__":"ff"}])");
  for (std::size_t i = 0; i < 9; ++i) CHECK(tensor(c, i).storage == i);
}

TEST_CASE("keys Python finds equal are merged as Python merges them, others never") {
  // A hostile pickle may set a dict's key twice; torch.load keeps one (first place, last
  // value), and so 1, 1.0 and True are one key. 1 and "1" are not.
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.integer(1).integer(10);
  p.binunicode("1").integer(20);
  p.binfloat(1.0).integer(30);
  p.newtrue().integer(40);
  p.integer(2).integer(50);
  p.setitems().stop();
  Model c = read(torch_zip(p.bytes(), {}));
  CHECK(keys(c) == std::vector<std::string>{"1", "1", "2"});
  CHECK(c.entries[0].value_json == "40");
  CHECK(c.entries[0].key_path == "[1]");
  CHECK(c.entries[1].value_json == "20");
}

TEST_CASE("keys as Python's str() writes them: tuples, bytes, floats") {
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.integer(1).binunicode("a'b").tuple2().integer(1);
  p.binunicode("q\"'").binbytes(std::string("\x00'", 2)).tuple2().integer(2);
  p.binfloat(1e16).integer(3);
  p.binfloat(0.5).integer(4);
  p.integer(7).tuple1().integer(5);
  p.setitems().stop();
  Model c = read(torch_zip(p.bytes(), {}));
  CHECK(keys(c) == std::vector<std::string>{"(1, \"a'b\")", R"x(('q"\'', b"\x00'"))x", "1e+16",
                                            "0.5", "(7,)"});
}
TEST_CASE("a root tensor is the entry 'tensor', a root value is 'value'") {
  PickleBuilder p;
  p.proto(2).tensor_v2("HalfStorage", "0", "cpu", 3, 0, {3}, {1}).stop();
  Model c = read(torch_zip(p.bytes(), {{"0", std::string(6, '\0')}}));
  CHECK(keys(c) == std::vector<std::string>{"tensor"});
  CHECK(tensor(c, 0).dtype == DType::float16);
  CHECK(c.entries[0].key_path == "[]");  // the whole checkpoint
  CHECK(!c.root);

  PickleBuilder q;
  q.proto(2).global("argparse", "Namespace").empty_tuple().newobj().empty_dict();
  q.binunicode("lr").binfloat(0.5).setitem().build().stop();
  Model v = read(torch_zip(q.bytes(), {}));
  CHECK(keys(v) == std::vector<std::string>{"value"});
  CHECK(v.entries[0].key_path == "[]");
  CHECK(!v.root);
  CHECK(v.entries[0].value_json ==
        R"({"__class__":"argparse.Namespace","args":[],"state":{"lr":0.5}})");
}

TEST_CASE("objects: a pickled module's tensors are found in its state, calls stay inert") {
  PickleBuilder p;
  p.proto(2).global("mymodels", "Net").empty_tuple().newobj().empty_dict().mark();
  p.binunicode("training").newtrue();
  p.binunicode("_parameters").global("collections", "OrderedDict").empty_tuple().reduce();
  p.binunicode("weight").global("torch._utils", "_rebuild_parameter");
  p.tensor_v2("FloatStorage", "0", "cpu", 2, 0, {2}, {1}).newtrue();
  p.global("collections", "OrderedDict").empty_tuple().reduce().tuple3().reduce().setitem();
  p.binunicode("hook").global("os", "system").binunicode("touch /tmp/pwned").tuple1().reduce();
  p.setitems().build().stop();
  Model c = read(torch_zip(p.bytes(), {{"0", floats(2)}}));
  CHECK(keys(c) == std::vector<std::string>{"training", "_parameters.weight", "hook"});
  CHECK(tensor(c, 1).requires_grad);
  CHECK(c.entries[2].value_json == R"({"__class__":"os.system","args":["touch /tmp/pwned"]})");
}

TEST_CASE("_rebuild_tensor_v3: new dtypes over untyped storages") {
  PickleBuilder p;
  p.proto(2).empty_dict().binunicode("f8").global("torch._utils", "_rebuild_tensor_v3").mark();
  p.mark().binunicode("storage").global("torch.storage", "UntypedStorage").binunicode("0");
  p.binunicode("cpu").integer(6).tuple().binpersid();
  p.integer(1).int_tuple({5}).int_tuple({1}).newfalse();
  p.global("collections", "OrderedDict").empty_tuple().reduce();
  p.global("torch", "float8_e4m3fn").tuple().reduce().setitem().stop();
  Model c = read(torch_zip(p.bytes(), {{"0", "abcdef"}}));
  const Tensor& t = tensor(c, 0);
  CHECK(t.dtype == DType::float8_e4m3fn);
  CHECK(t.broken.empty());
  CHECK(t.nbytes() == 5);
  CHECK(c.file_offset(t) == c.storages[0].file_offset + 1);
}

TEST_CASE("the legacy stream: storages located from the pickles alone") {
  auto pickle_of = [](auto&& fill) {
    PickleBuilder p;
    p.proto(2);
    fill(p);
    return p.stop().bytes();
  };
  std::string file;
  file += pickle_of([](PickleBuilder& p) {
    p.long1(std::string("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10));
  });
  file += pickle_of([](PickleBuilder& p) { p.integer(1001); });
  file += pickle_of([](PickleBuilder& p) { p.empty_dict(); });
  file += pickle_of([](PickleBuilder& p) {
    p.empty_dict().mark();
    for (auto [key, storage, numel] : {std::tuple{"w", "140", 3}, std::tuple{"b", "99", 2}}) {
      p.binunicode(key).global("torch._utils", "_rebuild_tensor_v2").mark();
      p.mark().binunicode("storage").global("torch", "FloatStorage").binunicode(storage);
      p.binunicode("cpu").integer(numel).none().tuple().binpersid();
      p.integer(0).int_tuple({numel}).int_tuple({1}).newfalse();
      p.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce();
    }
    p.setitems();
  });
  file += pickle_of([](PickleBuilder& p) { p.mark().binunicode("140").binunicode("99").list(); });
  std::uint64_t first = file.size();
  auto count = [](std::uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), 8); };
  file += count(3) + floats(3) + count(2) + floats(2);
  Model c = read(file);
  CHECK(c.format == Format::legacy);
  CHECK(keys(c) == std::vector<std::string>{"w", "b"});
  CHECK(c.file_offset(tensor(c, 0)) == first + 8);
  CHECK(c.file_offset(tensor(c, 1)) == first + 8 + 12 + 8);
  CHECK(error_of(file.substr(0, file.size() - 1)) == ExitCode::bad_checkpoint);
}

TEST_CASE("hostile nesting: no recursion, clear limits") {
  const int depth = 2'000'000;
  SUBCASE("a deep list without tensors is one value, cut at the depth limit") {
    PickleBuilder p;
    p.proto(2).empty_dict().binunicode("deep");
    for (int i = 0; i < depth; ++i) p.empty_list();
    for (int i = 1; i < depth; ++i) p.append();
    p.setitem().stop();
    Model c = read(torch_zip(p.bytes(), {}));
    REQUIRE(c.entries.size() == 1);
    CHECK(c.entries[0].value_json.find("depth_limit") != std::string::npos);
  }
  SUBCASE("a tensor at the bottom of a deep list is found, its long key is legal") {
    PickleBuilder p;
    p.proto(2);
    for (int i = 0; i < depth; ++i) p.empty_list();
    p.tensor_v2("FloatStorage", "0", "cpu", 2, 0, {2}, {1});
    for (int i = 0; i < depth; ++i) p.append();
    p.stop();
    Model c = read(torch_zip(p.bytes(), {{"0", floats(2)}}));
    REQUIRE(c.entries.size() == 1);
    CHECK(c.entries[0].key.size() == 2 * depth - 1);       // "0.0. ... .0"
    CHECK(c.entries[0].key_path.size() == 2 * depth + 1);  // "[0,0, ... ,0]"
  }
  SUBCASE("the budget of all keys is the only limit on a key, and its message says so") {
    // One long str used as the key at every level (a memo GET): a key of depth x 100 KB.
    PickleBuilder p;
    p.proto(2).binunicode(std::string(100'000, 'k')).binput(1).pop();
    const int levels = 2000;
    for (int i = 0; i < levels; ++i) p.empty_dict().binget(1);
    p.tensor_v2("FloatStorage", "0", "cpu", 2, 0, {2}, {1});
    for (int i = 0; i < levels; ++i) p.setitem();
    p.stop();
    std::string message = message_of(torch_zip(p.bytes(), {{"0", floats(2)}}));
    CHECK(message.find("a flattened key is longer than") != std::string::npos);
    CHECK(message.find("the limit on all keys and values together") != std::string::npos);
  }
}

TEST_CASE("quantized tensors keep their quantization parameters") {
  // per-tensor: (torch.per_tensor_affine, 0.5, 3); per-channel: (torch.per_channel_affine,
  // scales tensor, zero points tensor, 0), the scales and zero points entries of their own.
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  auto qtensor = [&](const char* key, auto qparams) {
    p.global("torch._utils", "_rebuild_qtensor").mark();
    p.mark().binunicode("storage").global("torch", "QInt8Storage").binunicode(key);
    p.binunicode("cpu").integer(4).tuple().binpersid();
    p.integer(0).int_tuple({2, 2}).int_tuple({2, 1});
    qparams();
    p.newfalse().global("collections", "OrderedDict").empty_tuple().reduce();
    p.tuple().reduce();
  };
  p.binunicode("pt");
  qtensor("0", [&] { p.global("torch", "per_tensor_affine").binfloat(0.5).integer(3).tuple3(); });
  p.binunicode("pc");
  qtensor("1", [&] {
    p.mark().global("torch", "per_channel_affine");
    p.tensor_v2("DoubleStorage", "2", "cpu", 2, 0, {2}, {1});
    p.tensor_v2("LongStorage", "3", "cpu", 2, 0, {2}, {1});
    p.integer(1).tuple();
  });
  p.setitems().stop();
  Model c = read(torch_zip(p.bytes(), {{"0", std::string(4, '\1')},
                                       {"1", std::string(4, '\2')},
                                       {"2", std::string(16, '\0')},
                                       {"3", std::string(16, '\0')}}));
  CHECK(keys(c) == std::vector<std::string>{"pt", "pc", "pc.q_per_channel_scales",
                                            "pc.q_per_channel_zero_points"});
  const Tensor& pt = tensor(c, 0);
  CHECK(pt.dtype == DType::qint8);
  REQUIRE(pt.quantization);
  CHECK(pt.quantization->scheme == "per_tensor_affine");
  CHECK(pt.quantization->scale == 0.5);
  CHECK(pt.quantization->zero_point == 3);
  const Tensor& pc = tensor(c, 1);
  REQUIRE(pc.quantization);
  CHECK(pc.quantization->scheme == "per_channel_affine");
  CHECK(pc.quantization->axis == 1);
  REQUIRE(pc.quantization->scales);
  CHECK(c.tensors[*pc.quantization->scales].dtype == DType::float64);
  CHECK(*pc.quantization->scales == c.entries[2].tensor);
  CHECK(*pc.quantization->zero_points == c.entries[3].tensor);
  CHECK(c.entries[2].key_path == R"(["pc",{"__part__":"q_per_channel_scales"}])");
}

TEST_CASE(
    "quint4x2 and quint2x4: packed in torch's rows of bytes, served whole, other views broken") {
  // As torch 1.13 to 2.14 save quantize_per_tensor(x, s, z, torch.quint4x2) of shape (3, 5): a
  // QUInt4x2Storage of 9 bytes (3 rows of ceil(5 / 2)), its 15 elements packed flat in the first 8.
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  auto qtensor = [&](const char* key, const char* storage_class, const char* record,
                     std::int64_t numel, std::int64_t offset,
                     std::initializer_list<std::int64_t> shape,
                     std::initializer_list<std::int64_t> stride) {
    p.binunicode(key).global("torch._utils", "_rebuild_qtensor").mark();
    p.mark().binunicode("storage").global("torch", storage_class).binunicode(record);
    p.binunicode("cpu").integer(numel).tuple().binpersid();
    p.integer(offset).int_tuple(shape).int_tuple(stride);
    p.global("torch", "per_tensor_affine").binfloat(0.5).integer(3).tuple3();
    p.newfalse().global("collections", "OrderedDict").empty_tuple().reduce();
    p.tuple().reduce();
  };
  qtensor("q4", "QUInt4x2Storage", "0", 9, 0, {3, 5}, {5, 1});
  qtensor("q2", "QUInt2x4Storage", "1", 6, 0, {3, 5}, {5, 1});
  qtensor("scalar", "QUInt4x2Storage", "2", 1, 0, {}, {});
  qtensor("at_offset", "QUInt4x2Storage", "3", 12, 3, {3, 5}, {5, 1});
  qtensor("short", "QUInt4x2Storage", "4", 8, 0, {3, 5}, {5, 1});
  qtensor("transposed", "QUInt4x2Storage", "0", 9, 0, {5, 3}, {1, 5});
  qtensor("empty", "QUInt2x4Storage", "5", 0, 0, {0, 4}, {4, 1});
  p.setitems().stop();
  Model c = read(torch_zip(p.bytes(), {{"0", std::string(9, '\x21')},
                                       {"1", std::string(6, '\x22')},
                                       {"2", std::string(1, '\x23')},
                                       {"3", std::string(12, '\x24')},
                                       {"4", std::string(8, '\x25')},
                                       {"5", ""}}));
  const Tensor& q4 = tensor(c, 0);
  CHECK(q4.dtype == DType::quint4x2);
  CHECK(q4.broken.empty());
  CHECK(q4.nbytes() == 9);
  CHECK(q4.stored_nbytes() == 9);
  CHECK(c.file_offset(q4));
  CHECK(tensor(c, 1).dtype == DType::quint2x4);
  CHECK(tensor(c, 1).broken.empty());
  CHECK(tensor(c, 1).nbytes() == 6);
  CHECK(tensor(c, 2).broken.empty());
  CHECK(tensor(c, 2).nbytes() == 1);
  CHECK(tensor(c, 3).broken.empty());
  CHECK(c.offset_in_storage(tensor(c, 3)) == 3u);  // torch's offset: bytes of a packed storage
  CHECK(tensor(c, 4).broken == "its packed elements need 9 bytes of storage \"4\" but it has 8");
  CHECK(tensor(c, 5).broken.find("strides are not C order") != std::string::npos);
  CHECK(tensor(c, 6).broken.empty());
  CHECK(tensor(c, 6).nbytes() == 0);
}

TEST_CASE("a view too large for a file is broken, with the reason, none wraps") {
  // A stride-0 view of 2^62 float32 elements: 2^64 bytes.
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("huge").tensor_v2("FloatStorage", "0", "cpu", 1, 0, {1ll << 31, 1ll << 31}, {0, 0});
  p.binunicode("big").tensor_v2("FloatStorage", "0", "cpu", 1, 0, {1ll << 30, 1ll << 30}, {0, 0});
  p.binunicode("empty_far").tensor_v2("FloatStorage", "0", "cpu", 1, 1ll << 61, {0}, {1});
  // 2^64 + 2 elements, which would wrap to 2: its stride-0 view of 1 element fits.
  p.binunicode("wraps").tensor_v2("FloatStorage", "0", "cpu", 1, 0, {3, 6148914691236517206},
                                  {0, 0});
  p.setitems().stop();
  Model c = read(torch_zip(p.bytes(), {{"0", floats(1)}}));
  CHECK(tensor(c, 0).broken.find("holds more bytes than a file can") != std::string::npos);
  CHECK(tensor(c, 1).broken.empty());  // 2^62 bytes: served (as a stride-0 gather)
  CHECK(tensor(c, 1).nbytes() == (1ull << 62));
  CHECK(tensor(c, 2).broken.empty());
  CHECK_FALSE(c.file_offset(tensor(c, 2)));  // far past its storage: no offset, never wrapped
  CHECK(tensor(c, 3).broken.find("has more elements than 64 bits count") != std::string::npos);
  CHECK(tensor(c, 3).nbytes() == 0);
}

TEST_SUITE_END();
