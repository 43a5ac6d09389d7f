// SPDX-License-Identifier: MIT
// Tests of the torch writers: tensor.pt for every dtype, quantized tensors, shared storages, the
// archive's records and CRCs, map.pt and value files, all read back by our own torch reader.
#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/pickle/pickle_machine.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/format/torch/torch_writer.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/pickle_builder.hpp"

using namespace ckptfs;
using ckptfs::test::PickleBuilder;

TEST_SUITE_BEGIN("torch_writer");

namespace {

// The archive's bytes, storage i's payload being payloads[i].
std::string file_of(const TorchArchive& archive, const std::vector<std::string>& payloads) {
  std::string out;
  archive.write([&](std::string_view b) { out += b; },
                [&](std::size_t storage, ZipStreamWriter& w) { w.write(payloads.at(storage)); });
  CHECK(out.size() == archive.plan().size());
  return out;
}

std::string pattern(std::size_t n) {
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i * 7 + 1);
  return out;
}

std::vector<std::string> record_names(const TorchArchive& archive) {
  std::vector<std::string> out;
  for (const TorchRecord& r : archive.records()) out.push_back(r.name);
  return out;
}

std::string data_pkl(const TorchArchive& archive) { return archive.record(0).literal; }

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

const DType non_quantized[] = {DType::float32,
                               DType::float64,
                               DType::float16,
                               DType::bfloat16,
                               DType::float8_e5m2,
                               DType::float8_e4m3fn,
                               DType::float8_e5m2fnuz,
                               DType::float8_e4m3fnuz,
                               DType::float8_e8m0fnu,
                               DType::float4_e2m1fn_x2,
                               DType::int8,
                               DType::int16,
                               DType::int32,
                               DType::int64,
                               DType::uint8,
                               DType::uint16,
                               DType::uint32,
                               DType::uint64,
                               DType::boolean,
                               DType::complex32,
                               DType::complex64,
                               DType::complex128,
                               DType::bits8,
                               DType::bits16,
                               DType::bits1x8,
                               DType::bits2x4,
                               DType::bits4x2,
                               DType::bcomplex32};

}  // namespace

TEST_CASE("tensor.pt of every dtype reads back as that tensor, contiguous, its data aligned") {
  for (const DType dtype : non_quantized) {
    const DTypeInfo& type = info(dtype);
    CAPTURE(type.name);
    const TensorFileSpec spec{dtype, {2, 3}, false, std::nullopt};
    const TorchArchive archive = tensor_file(spec, {.prefix = "tensor"});
    CHECK(record_names(archive) == std::vector<std::string>{"tensor/data.pkl", "tensor/byteorder",
                                                            "tensor/data/0", "tensor/version"});
    const std::string data = pattern(6 * type.element_size);
    const std::string file = file_of(archive, {data});

    const MemorySource source(file);
    const Model model = read_torch(source, "tensor.pt");
    REQUIRE(model.entries.size() == 1);
    CHECK(model.entries[0].key == "tensor");
    const Tensor& t = model.tensors.at(model.entries[0].tensor);
    CHECK(t.dtype == dtype);
    CHECK(t.shape == std::vector<std::int64_t>{2, 3});
    CHECK(t.stride == std::vector<std::int64_t>{3, 1});
    CHECK(t.storage_offset == 0);
    CHECK_FALSE(t.requires_grad);
    CHECK(t.broken.empty());
    const auto offset = model.file_offset(t);
    REQUIRE(offset.has_value());
    CHECK(*offset % 64 == 0);
    CHECK(file.substr(*offset, data.size()) == data);
    CHECK(model.byteorder() == "little");

    // The legacy storage class where the dtype has one (v2), else v3 over UntypedStorage.
    const std::string pkl = data_pkl(archive);
    if (!type.storage_class.empty()) {
      CHECK(contains(pkl, "_rebuild_tensor_v2"));
      CHECK(contains(pkl, fmt::format("ctorch\n{}\n", type.storage_class)));
    } else {
      CHECK(contains(pkl, "_rebuild_tensor_v3"));
      CHECK(contains(pkl, "ctorch.storage\nUntypedStorage\n"));
      CHECK(contains(pkl, fmt::format("ctorch\n{}\n", type.name)));
    }
  }
}

TEST_CASE("0-d, empty and strided-by-zero shapes, requires_grad, big-endian bytes") {
  struct Case {
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> stride;
    std::uint64_t numel;
  };
  const Case cases[] = {{{}, {}, 1},
                        {{0}, {1}, 0},
                        {{0, 3}, {3, 1}, 0},
                        {{3, 0}, {1, 1}, 0},
                        {{2, 0, 4}, {4, 4, 1}, 0},
                        {{1, 1, 5}, {5, 5, 1}, 5}};
  for (const Case& c : cases) {
    CAPTURE(c.shape.size());
    const TorchArchive archive =
        tensor_file({DType::float32, c.shape, true, std::nullopt}, {.big_endian = true});
    const std::string file = file_of(archive, {pattern(c.numel * 4)});
    const MemorySource source(file);
    const Model model = read_torch(source, "t.pt");
    const Tensor& t = model.tensors.at(0);
    CHECK(t.shape == c.shape);
    CHECK(t.stride == c.stride);
    CHECK(t.requires_grad);
    CHECK(t.nbytes() == c.numel * 4);
    CHECK(model.byteorder() == "big");
    CHECK(t.broken.empty());
  }
}

TEST_CASE("quantized tensors: per tensor and per channel, their parameters as torch saves them") {
  SUBCASE("per tensor") {
    QuantizationSpec q;
    q.scale = 0.5;
    q.zero_point = 3;
    const TorchArchive archive = tensor_file({DType::quint8, {3}, false, q}, {.prefix = "qt"});
    CHECK(archive.storages().size() == 1);
    const MemorySource source(file_of(archive, {"abc"}));
    const Model model = read_torch(source, "qt.pt");
    const Tensor& t = model.tensors.at(model.entries.at(0).tensor);
    CHECK(t.dtype == DType::quint8);
    CHECK(t.shape == std::vector<std::int64_t>{3});
    CHECK(t.broken.empty());
    // As torch 1.13 wrote it (tests/integration compares whole files).
    PickleBuilder p;
    p.proto(2).global("torch._utils", "_rebuild_qtensor").binput(0).mark().mark();
    p.binunicode("storage").binput(1).global("torch", "QUInt8Storage").binput(2);
    p.binunicode("0").binput(3).binunicode("cpu").binput(4).binint1(3).tuple().binput(5);
    p.binpersid().binint1(0).binint1(3).tuple1().binput(6).binint1(1).tuple1().binput(7);
    p.global("torch", "per_tensor_affine").binput(8).binfloat(0.5).binint1(3).tuple3().binput(9);
    p.newfalse().global("collections", "OrderedDict").binput(10).empty_tuple().reduce().binput(11);
    p.tuple().binput(12).reduce().binput(13).stop();
    CHECK(data_pkl(archive) == p.bytes());
  }
  SUBCASE("per channel: scales and zero points are storages 1 and 2") {
    QuantizationSpec q;
    q.scheme = QScheme::per_channel_affine;
    q.axis = 1;
    const TorchArchive archive = tensor_file({DType::qint8, {2, 3}, false, q});
    REQUIRE(archive.storages().size() == 3);
    CHECK(archive.storages()[1].id == 1);
    CHECK(archive.storages()[1].nbytes == 24);
    CHECK(archive.storages()[2].nbytes == 24);
    const std::string pkl = data_pkl(archive);
    const MemorySource source(file_of(archive, {pattern(6), pattern(24), pattern(24)}));
    const Model model = read_torch(source, "qc.pt");
    const Tensor& t = model.tensors.at(model.entries.at(0).tensor);
    CHECK(t.dtype == DType::qint8);
    CHECK(t.broken.empty());
    CHECK(record_names(archive) == std::vector<std::string>{"archive/data.pkl", "archive/byteorder",
                                                            "archive/data/0", "archive/data/1",
                                                            "archive/data/2", "archive/version"});

    // qparams: (torch.per_channel_affine, scales, zero_points, 1), the scales and zero points
    // tensors over storages "1" and "2".
    const MemorySource pkl_source(pkl);
    const pickle::ParseResult parsed = pickle::parse(pkl_source, 0, pkl.size());
    const pickle::Graph& g = parsed.graph;
    const pickle::Object& call = g.object(g.root());
    CHECK(g.global(call.callable).name == "_rebuild_qtensor");
    const pickle::NodeId qparams = g.items(call.args).at(4);
    REQUIRE(g.items(qparams).size() == 4);
    CHECK(g.global(g.items(qparams)[0]).dotted() == "torch.per_channel_affine");
    CHECK(g.global(g.object(g.items(qparams)[1]).callable).name == "_rebuild_tensor_v2");
    CHECK(g.integer(g.items(qparams)[3]) == 1);
    CHECK(contains(pkl, "ctorch\nDoubleStorage\n"));
    CHECK(contains(pkl, "ctorch\nLongStorage\n"));

    // tensor_file_spec() of a model tensor quantized so gives back the same file.
    Model m;
    m.tensors.push_back({DType::qint8,
                         {2, 3},
                         {3, 1},
                         0,
                         false,
                         std::nullopt,
                         Quantization{"per_channel_affine", 0, 0, 1, 1, 2},
                         {},
                         std::nullopt});
    m.tensors.push_back(
        {DType::float64, {3}, {1}, 0, false, std::nullopt, std::nullopt, {}, std::nullopt});
    m.tensors.push_back(
        {DType::int64, {3}, {1}, 0, false, std::nullopt, std::nullopt, {}, std::nullopt});
    const TensorFileSpec again = tensor_file_spec(m, m.tensors[0]);
    CHECK(again.dtype == DType::qint8);
    REQUIRE(again.quantization.has_value());
    CHECK(again.quantization->scheme == QScheme::per_channel_affine);
    CHECK(again.quantization->axis == 1);
    CHECK(data_pkl(tensor_file(again)) == pkl);
    m.tensors[1].shape = {2};
    CHECK_THROWS_AS(tensor_file_spec(m, m.tensors[0]), Error);
    m.tensors[0].quantization->scheme = "per_tensor_symmetric";
    CHECK_THROWS_AS(tensor_file_spec(m, m.tensors[0]), Error);
  }
  SUBCASE("packed below a byte: a storage of torch's rows of packed bytes, read back whole") {
    // (shape, k, the bytes torch 2.14 and 1.13 store it in)
    struct Case {
      DType dtype;
      std::vector<std::int64_t> shape;
      std::uint64_t nbytes;
    };
    for (const Case& c : {Case{DType::quint4x2, {3, 5}, 9}, Case{DType::quint4x2, {2, 3, 5}, 18},
                          Case{DType::quint4x2, {}, 1}, Case{DType::quint4x2, {0, 4}, 0},
                          Case{DType::quint2x4, {3, 5}, 6}, Case{DType::quint2x4, {2, 1}, 2}}) {
      CAPTURE(c.nbytes);
      QuantizationSpec q;
      q.scale = 0.25;
      q.zero_point = 2;
      const TorchArchive archive = tensor_file({c.dtype, c.shape, false, q}, {.prefix = "p"});
      REQUIRE(archive.storages().size() == 1);
      CHECK(archive.storages()[0].nbytes == c.nbytes);
      const MemorySource source(file_of(archive, {pattern(c.nbytes)}));
      const Model model = read_torch(source, "p.pt");
      const Tensor& t = model.tensors.at(model.entries.at(0).tensor);
      CHECK(t.dtype == c.dtype);
      CHECK(t.shape == c.shape);
      CHECK(t.broken.empty());
      CHECK(t.nbytes() == c.nbytes);
      CHECK(t.quantization->scale == 0.25);
      CHECK(contains(data_pkl(archive),
                     std::string("ctorch\n") + std::string(info(c.dtype).storage_class) + "\n"));
    }
  }
  SUBCASE("refusals") {
    CHECK_THROWS_AS(tensor_file({DType::qint8, {2}, false, std::nullopt}), Error);
    CHECK_THROWS_AS(tensor_file({DType::quint4x2, {2}, false, std::nullopt}), Error);
    QuantizationSpec bad_axis;
    bad_axis.scheme = QScheme::per_channel_affine;
    bad_axis.axis = 2;
    CHECK_THROWS_AS(tensor_file({DType::qint8, {2, 3}, false, bad_axis}), Error);
  }
}

TEST_CASE("a state dict through TorchPickler: shared storages, views, keys in first-use order") {
  pickle::Writer w;
  TorchPickler torch(w);
  const std::vector<TensorArgs> tensors = {
      {DType::float32, 7, 40, 0, {2, 5}, {}, false},      // storage 7: key "0"
      {DType::float32, 7, 40, 5, {5}, {1}, false},        // a view of the same storage
      {DType::int64, 3, 16, 0, {2}, {}, false},           // storage 3: key "1"
      {DType::float32, 7, 40, 0, {5, 2}, {1, 5}, false},  // transposed view
  };
  pickle::MemoSlot first = pickle::no_slot;
  w.ordered_dict(tensors.size() + 1, [&](std::size_t i) {
    w.string(fmt::format("t{}", i));
    if (i == tensors.size()) {
      w.get(first);  // the first tensor again: one object under two keys (tied weights)
    } else {
      const pickle::MemoSlot slot = torch.tensor(tensors[i]);
      if (i == 0) first = slot;
    }
  });
  REQUIRE(torch.storages().size() == 2);
  CHECK(torch.storages()[0].key == "0");
  CHECK(torch.storages()[0].id == 7);
  CHECK(torch.storages()[1].key == "1");
  CHECK(torch.storages()[1].id == 3);
  const TorchArchive archive(std::move(w).finish(), torch.storages(), {.prefix = "model"});
  const MemorySource source(file_of(archive, {pattern(40), pattern(16)}));
  const Model model = read_torch(source, "model.pth");
  REQUIRE(model.entries.size() == 5);
  CHECK(model.storages.size() == 2);
  CHECK(model.entries[4].key == "t4");
  CHECK(model.entries[4].tensor == model.entries[0].tensor);
  CHECK(model.tensors.at(model.entries[1].tensor).storage_offset == 5);
  CHECK(model.tensors.at(model.entries[3].tensor).stride == std::vector<std::int64_t>{1, 5});
  CHECK(model.tensors.at(model.entries[0].tensor).storage ==
        model.tensors.at(model.entries[3].tensor).storage);

  pickle::Writer w2;
  TorchPickler clash(w2);
  clash.tensor({DType::float32, 1, 8, 0, {2}, {}, false});
  CHECK_THROWS_AS(clash.tensor({DType::int32, 1, 8, 0, {2}, {}, false}), Error);
  CHECK_THROWS_AS(clash.tensor({DType::float32, 1, 12, 0, {2}, {}, false}), std::invalid_argument);
  CHECK_THROWS_AS(clash.tensor({DType::float32, 2, 8, 1, {2}, {}, false}), Error);  // past the end
  CHECK_THROWS_AS(clash.tensor({DType::float32, 2, 6, 0, {1}, {}, false}), Error);  // 6 bytes
  CHECK_THROWS_AS(clash.tensor({DType::float32, 2, 8, 0, {2}, {1, 1}, false}), Error);
}

TEST_CASE("storage records sorted as strings (torch <= 2.6) or in key order (>= 2.7)") {
  pickle::Writer w;
  TorchPickler torch(w);
  w.list(12, [&](std::size_t i) { torch.tensor({DType::uint8, i, 1, 0, {1}, {}, false}); });
  const std::string pkl = std::move(w).finish();
  const TorchArchive sorted(pkl, torch.storages(), {.byteorder_record = false});
  const std::vector<std::string> names = record_names(sorted);
  CHECK(names[1] == "archive/data/0");
  CHECK(names[2] == "archive/data/1");
  CHECK(names[3] == "archive/data/10");
  CHECK(names[4] == "archive/data/11");
  CHECK(names[5] == "archive/data/2");
  CHECK(names.back() == "archive/version");
  const TorchArchive ordered(pkl, torch.storages(), {.sort_storage_keys = false});
  CHECK(record_names(ordered)[2 + 10] == "archive/data/10");
  CHECK(ordered.record(2 + 10).storage == 10);
}

TEST_CASE("CRCs: literal records known at once, the others from the storages' CRCs") {
  const TorchArchive archive =
      tensor_file({DType::int16, {4}, false, std::nullopt}, {.serialization_id = true});
  const std::vector<std::string> names = record_names(archive);
  REQUIRE(names.size() == 5);
  CHECK(names[4] == "archive/.data/serialization_id");
  CHECK(archive.known_crc(0) == crc32(archive.record(0).literal));
  CHECK(archive.known_crc(1) == crc32("little"));
  CHECK_FALSE(archive.known_crc(2).has_value());
  CHECK(archive.known_crc(3) == crc32("3\n"));
  CHECK_FALSE(archive.known_crc(4).has_value());

  const std::string data = pattern(8);
  const std::vector<std::uint32_t> storage_crcs{crc32(data)};
  const std::vector<std::uint32_t> crcs = archive.crcs(storage_crcs);
  const std::string id = archive.serialization_id(crcs);
  CHECK(id.size() == 40);
  CHECK(id.find_first_not_of("0123456789") == std::string::npos);
  CHECK(crcs[4] == crc32(id));
  CHECK(archive.serialization_id(archive.crcs(std::vector<std::uint32_t>{crc32("other")})) != id);

  // The streamed file holds the same CRCs and id, and its trailer is plan().trailer(crcs).
  const std::string file = file_of(archive, {data});
  const MemorySource source(file);
  const ZipArchive zip(source);
  for (std::size_t i = 0; i < crcs.size(); ++i) CHECK(zip.entries()[i].crc32 == crcs[i]);
  CHECK(file.substr(archive.plan().layout(4).data_offset, 40) == id);
  CHECK(file.substr(archive.plan().trailer_offset()) == archive.plan().trailer(crcs));
  CHECK_THROWS_AS(archive.crcs({}), std::invalid_argument);
  CHECK_THROWS_AS(archive.bytes(), std::logic_error);
}

TEST_CASE("map.pt: a list of keys, read back as that list") {
  const std::vector<std::string> keys = {"encoder.weight", "", "h\xc3\xa9", "a\xed\xa0\x80"};
  const TorchArchive archive = keys_file(keys, {.prefix = "map"});
  const std::string file = archive.bytes();
  const MemorySource source(file);
  const Model model = read_torch(source, "map.pt");
  // Our reader walks a root list into one entry per item.
  REQUIRE(model.entries.size() == 4);
  CHECK(model.entries[0].value_json == R"("encoder.weight")");
  CHECK(model.entries[1].value_json == R"("")");
  CHECK(model.entries[2].value_json == R"("hé")");
  CHECK(model.entries[3].value_json == R"("a\udced\udca0\udc80")");
  CHECK(model.tensors.empty());
  // The list itself, with each key its own str.
  const MemorySource pkl(archive.record(0).literal);
  const pickle::ParseResult parsed = pickle::parse(pkl, 0, pkl.size());
  REQUIRE(parsed.graph.kind(parsed.graph.root()) == pickle::Kind::list);
  const auto& items = parsed.graph.items(parsed.graph.root());
  REQUIRE(items.size() == keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) CHECK(parsed.graph.text(items[i]) == keys[i]);
}

TEST_CASE("value files: plain values read back as their JSON") {
  const pickle::Value value = pickle::Value::dict({
      {pickle::Value::str("epoch"), pickle::Value::integer(7)},
      {pickle::Value::str("lr"), pickle::Value::real(0.5)},
      {pickle::Value::str("names"),
       pickle::Value::list({pickle::Value::str("a"), pickle::Value::none_value()})},
  });
  const MemorySource source(value_file(value).bytes());
  const Model model = read_torch(source, "v.pt");
  CHECK(model.entries.size() == 3);
  CHECK(model.entries[0].key == "epoch");
  CHECK(model.entries[0].value_json == "7");
  CHECK(model.entries[1].value_json == "0.5");
  CHECK(model.entries[2].value_json == R"(["a",null])");
}

TEST_CASE("archive prefixes: the file's name, never empty nor holding '/'") {
  CHECK(record_names(keys_file({}, {.prefix = "my.model"}))[0] == "my.model/data.pkl");
  for (const std::string& bad : {std::string(), std::string("a/b"), std::string("a\0b", 3)}) {
    CHECK_THROWS_AS(keys_file({}, {.prefix = bad}), Error);
  }
}

TEST_SUITE_END();
