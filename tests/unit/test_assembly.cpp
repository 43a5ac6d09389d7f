// SPDX-License-Identifier: MIT
// Unit tests of tensors assembled from pieces: validation (boxes inside the shape, no overlap, no
// gap, views inside their storages, one byte order, a bounded grid), the runs a read is cut into,
// and every view over them (data, tensor.npy, tensor.pt, model.safetensors and its shards,
// -o dtype, a big-endian checkpoint, pack), each byte compared with the tensor built by brute
// force from the pieces.
#include "support/temp_dir.hpp"

#include <ckptfs/format/safetensors/safetensors_reader.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/model/assembly.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/pack/pack.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/convert.hpp>
#include <ckptfs/view/npy.hpp>
#include <ckptfs/view/safetensors_export.hpp>
#include <ckptfs/view/served.hpp>
#include <ckptfs/view/tree.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

using namespace ckptfs;

namespace {

using Dims = std::vector<std::int64_t>;

struct PieceSpec {
  Dims offset;
  Dims length;
  Dims stride = {};  // empty: C order
  std::int64_t storage_offset = 0;
};

// The most elements a test storage holds (the tests use a few hundred).
constexpr std::int64_t max_test_elements = 1 << 16;

// One source holding a storage per piece, each of float32 values that say where they are
// (storage s, element i: s * 1000 + i), and one tensor assembled from them.
struct Assembled {
  std::string bytes;
  std::unique_ptr<MemorySource> source;
  Model model;

  Assembled(Dims shape, const std::vector<PieceSpec>& pieces,
            Assembly::Grid grid = Assembly::Grid::shape, bool big_endian = false) {
    model.format = Format::zip;
    model.sources = {"pieces.bin"};
    Tensor t;
    t.dtype = DType::float32;
    t.shape = shape;
    t.stride = Dims(shape.size(), 1);
    for (std::size_t d = shape.size(); d-- > 1;) t.stride[d - 1] = t.stride[d] * shape[d];
    Assembly a(grid, shape.size());
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const PieceSpec& p = pieces[i];
      // The storage holds more elements than the view reaches (the strides used here stay
      // within 4 × the box's elements), after a guard no view reaches.
      // A piece too large to hold (the tests of boxes and views that must be refused) gets a
      // storage of a few elements: its tensor is refused before any of them is read.
      std::int64_t elements = 1;
      for (auto l : p.length) {
        if (__builtin_mul_overflow(elements, std::max<std::int64_t>(l, 1), &elements) ||
            elements > max_test_elements) {
          elements = max_test_elements;
        }
      }
      const std::int64_t span =
          std::min<std::int64_t>(p.storage_offset, max_test_elements) + 1 + elements * 4;
      bytes += std::string(8, '\x7f');  // a guard no view reaches
      Storage s;
      s.source = 0;
      s.key = std::to_string(i);
      s.file_offset = bytes.size();
      s.nbytes = static_cast<std::uint64_t>(span) * 4;
      s.big_endian = big_endian;
      for (std::int64_t e = 0; e < span; ++e) {
        float f = static_cast<float>(static_cast<std::int64_t>(i) * 1000 + e);
        char raw[4];
        std::memcpy(raw, &f, 4);
        if (big_endian) std::reverse(raw, raw + 4);
        bytes.append(raw, 4);
      }
      model.storages.push_back(s);
      const Piece piece{i, p.storage_offset};
      if (p.stride.empty()) {
        a.add_contiguous(piece, p.offset, p.length);
      } else {
        a.add(piece, p.offset, p.length, p.stride);
      }
    }
    bytes += std::string(8, '\x7f');
    source = std::make_unique<MemorySource>(bytes, "pieces.bin");
    model.assemblies.push_back(std::move(a));
    t.assembly = 0;
    model.tensors.push_back(t);
    Entry e;
    e.key = "w";
    e.kind = Entry::Kind::tensor;
    e.tensor = 0;
    model.entries.push_back(e);
    tensor().broken = index_assembly(model, model.tensors[0], model.assemblies[0]);
  }

  Tensor& tensor() { return model.tensors[0]; }
  const Assembly& assembly() const { return model.assemblies[0]; }
  Sources sources() const {
    static thread_local const ByteSource* one[1];
    one[0] = source.get();
    return {one, 1};
  }

  // The tensor's C-order elements as stored, built element by element from the boxes.
  std::string expected() const {
    const Tensor& t = model.tensors[0];
    const Assembly& a = assembly();
    const std::uint64_t n = t.numel();
    std::string out;
    const bool flat = a.grid() == Assembly::Grid::flat;
    const Dims sizes = flat ? Dims{static_cast<std::int64_t>(n)} : t.shape;
    for (std::uint64_t e = 0; e < n; ++e) {
      Dims index(sizes.size());
      std::uint64_t rest = e;
      for (std::size_t d = sizes.size(); d-- > 0;) {
        index[d] = static_cast<std::int64_t>(rest % static_cast<std::uint64_t>(sizes[d]));
        rest /= static_cast<std::uint64_t>(sizes[d]);
      }
      int found = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        bool inside = true;
        std::int64_t element = a.piece(i).storage_offset;
        for (std::size_t d = 0; d < sizes.size(); ++d) {
          const std::int64_t local = index[d] - a.offset(i)[d];
          inside = inside && local >= 0 && local < a.length(i)[d];
          element += local * a.stride(i)[d];
        }
        if (!inside) continue;
        ++found;
        const Storage& s = model.storages[a.piece(i).storage];
        out += bytes.substr(s.file_offset + static_cast<std::uint64_t>(element) * 4, 4);
      }
      REQUIRE(found == 1);
    }
    return out;
  }

  // Bytes [offset, offset + length) as read_served() gives them, and how many pieces were staged.
  std::string read(const ServedTensor& served, std::uint64_t offset, std::size_t length,
                   std::size_t* staged = nullptr) const {
    ReadBuffer buffer;
    read_served(model, model.tensors[0], served, offset, length, sources(), buffer);
    std::string out;
    std::size_t memory = 0;
    for (const ReadPiece& p : buffer.pieces()) {
      if (p.memory) {
        ++memory;
        out.append(p.memory, p.length);
      } else {
        out += source->read_string(p.source_offset, p.length);
      }
    }
    if (staged) *staged = memory;
    return out;
  }
};

// Every range [a, b) of the tensor's bytes (small tensors), read every way, equals the expected.
void check_every_range(const Assembled& t) {
  const std::string want = t.expected();
  const ServedTensor served = serve(t.model, t.model.tensors[0]);
  REQUIRE(served.way == ServedTensor::Way::pieces);
  REQUIRE(served.nbytes == want.size());
  for (std::size_t a = 0; a <= want.size(); ++a) {
    for (std::size_t b = a; b <= want.size(); b += (b - a < 9 ? 1 : 5)) {
      CHECK(t.read(served, a, b - a) == want.substr(a, b - a));
      std::string stored(b - a, '\0');
      read_stored(t.model, t.model.tensors[0], a, t.sources(), stored);
      CHECK(stored == want.substr(a, b - a));
    }
  }
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("rows, columns, a grid of uneven boxes: every range of every layout is the tensor") {
  SUBCASE("Shard(0): two row blocks") {
    Assembled t({4, 3}, {{{0, 0}, {1, 3}}, {{1, 0}, {3, 3}}});
    REQUIRE(t.tensor().broken == "");
    check_every_range(t);
  }
  SUBCASE("Shard(1): three column blocks, uneven") {
    Assembled t({3, 5}, {{{0, 0}, {3, 2}}, {{0, 2}, {3, 2}}, {{0, 4}, {3, 1}}});
    REQUIRE(t.tensor().broken == "");
    check_every_range(t);
  }
  SUBCASE("a 2x2 grid of a 3-d tensor, uneven, pieces given out of order") {
    Assembled t({5, 4, 2}, {{{3, 0, 0}, {2, 1, 2}},
                            {{0, 1, 0}, {3, 3, 2}},
                            {{0, 0, 0}, {3, 1, 2}},
                            {{3, 1, 0}, {2, 3, 2}}});
    REQUIRE(t.tensor().broken == "");
    check_every_range(t);
  }
  SUBCASE("pieces laid like bricks: no grid, a few more cells") {
    Assembled t({4, 6}, {{{0, 0}, {2, 2}}, {{0, 2}, {2, 4}}, {{2, 0}, {2, 5}}, {{2, 5}, {2, 1}}});
    REQUIRE(t.tensor().broken == "");
    check_every_range(t);
  }
  SUBCASE("a transposed piece and one at a storage offset: gathered and cut") {
    Assembled t({4, 3}, {{{0, 0}, {2, 3}, {1, 2}, 1}, {{2, 0}, {2, 3}, {}, 5}});
    REQUIRE(t.tensor().broken == "");
    check_every_range(t);
  }
  SUBCASE("FSDP's empty chunks (offset at the end, length 0) and a whole-tensor piece") {
    Assembled t({3, 2}, {{{3, 0}, {0, 2}}, {{0, 0}, {3, 2}}, {{3, 0}, {0, 2}}});
    REQUIRE(t.tensor().broken == "");
    check_every_range(t);
  }
  SUBCASE("a 0-d tensor: one piece of one element") {
    Assembled t({}, {{{}, {}}});
    REQUIRE(t.tensor().broken == "");
    check_every_range(t);
  }
  SUBCASE("flat: ZeRO's ranges of the elements in C order, across rows") {
    Assembled t({3, 5}, {{{4}, {7}, {}, 3}, {{0}, {4}}, {{11}, {4}, {}, 1}}, Assembly::Grid::flat);
    REQUIRE(t.tensor().broken == "");
    check_every_range(t);
  }
}

TEST_CASE("contiguous pieces are spliced from the source, never staged") {
  Assembled rows({4, 3}, {{{0, 0}, {1, 3}}, {{1, 0}, {3, 3}}});
  const ServedTensor served = serve(rows.model, rows.tensor());
  std::size_t staged = 99;
  CHECK(rows.read(served, 0, 48, &staged) == rows.expected());
  CHECK(staged == 0);
  // A read inside one piece is one range of its source.
  ReadBuffer buffer;
  read_served(rows.model, rows.tensor(), served, 14, 20, rows.sources(), buffer);
  REQUIRE(buffer.pieces().size() == 1);
  CHECK(buffer.pieces()[0].memory == nullptr);
  CHECK(buffer.pieces()[0].length == 20);

  Assembled columns({2, 4}, {{{0, 0}, {2, 2}}, {{0, 2}, {2, 2}}});
  CHECK(columns.read(serve(columns.model, columns.tensor()), 0, 32, &staged) == columns.expected());
  CHECK(staged == 0);
  // One row's run of each piece, in turn.
  ReadBuffer rows_of_columns;
  read_served(columns.model, columns.tensor(), serve(columns.model, columns.tensor()), 0, 32,
              columns.sources(), rows_of_columns);
  CHECK(rows_of_columns.pieces().size() == 4);

  // A transposed piece is gathered: staged, attributed to its source.
  Assembled transposed({2, 2}, {{{0, 0}, {2, 2}, {1, 2}}});
  CHECK(transposed.read(serve(transposed.model, transposed.tensor()), 0, 16, &staged) ==
        transposed.expected());
  CHECK(staged == 1);
}

TEST_CASE("runs: each as long as the piece allows, its first element in the piece's C order") {
  Assembled t({4, 6}, {{{0, 0}, {4, 2}}, {{0, 2}, {1, 4}}, {{1, 2}, {3, 4}}});
  REQUIRE(t.tensor().broken == "");
  PieceRun r = run_at(t.tensor(), t.assembly(), 0, 100);
  CHECK((r.piece == 0 && r.local == 0 && r.count == 2));
  r = run_at(t.tensor(), t.assembly(), 3, 100);  // [0, 3]: piece 1, its element 1, to row end
  CHECK((r.piece == 1 && r.local == 1 && r.count == 3));
  r = run_at(t.tensor(), t.assembly(), 8, 100);  // [1, 2]: piece 2 spans columns 2..5 only
  CHECK((r.piece == 2 && r.local == 0 && r.count == 4));
  r = run_at(t.tensor(), t.assembly(), 8, 3);  // clipped
  CHECK(r.count == 3);
  Assembled rows({4, 3}, {{{0, 0}, {1, 3}}, {{1, 0}, {3, 3}}});
  r = run_at(rows.tensor(), rows.assembly(), 4, 100);  // [1, 1]: to the end of the row block
  CHECK((r.piece == 1 && r.local == 1 && r.count == 8));
}

TEST_CASE("hostile pieces: one reason each, and the tensor is not indexed") {
  auto why = [](Dims shape, std::vector<PieceSpec> pieces,
                Assembly::Grid grid = Assembly::Grid::shape) {
    Assembled t(std::move(shape), pieces, grid);
    CHECK(t.assembly().indexed() == t.tensor().broken.empty());
    return t.tensor().broken;
  };
  CHECK(why({4, 4}, {{{0, 0}, {3, 4}}, {{2, 0}, {2, 4}}}) == "pieces 0 and 1 overlap at [2, 0]");
  CHECK(why({4, 4}, {{{0, 0}, {4, 4}}, {{0, 0}, {4, 4}}}) == "pieces 0 and 1 overlap at [0, 0]");
  CHECK(why({4, 4}, {{{0, 0}, {2, 4}}, {{3, 0}, {1, 4}}}) ==
        "no piece holds the elements at [2, 0] (1×4)");
  CHECK(why({4, 4}, {}) == "no piece holds the elements at [0, 0] (4×4)");
  CHECK(why({4, 4}, {{{0, 0}, {4, 4}}, {{2, 3}, {2, 2}}}) ==
        "piece 1's box at [2, 3] of 2×2 is not inside the tensor's 4×4");
  CHECK(why({4, 4}, {{{-1, 0}, {4, 4}}}).find("not inside") != std::string::npos);
  CHECK(why({4, 4}, {{{0, 0}, {INT64_MAX, 4}}}).find("not inside") != std::string::npos);
  CHECK(why({4, 4}, {{{1, 0}, {INT64_MAX, 4}}}).find("not inside") != std::string::npos);
  CHECK(why({4, 4}, {{{0, 0}, {4, 4}, {4, -1}}}).find("not inside") != std::string::npos);
  CHECK(why({4, 4}, {{{0, 0}, {4, 4}, {1 << 20, 1}}}).find("does not fit its storage") !=
        std::string::npos);
  CHECK(why({4, 4}, {{{0, 0}, {4, 4}, {INT64_MAX, INT64_MAX}}}) == "piece 0's view overflows");
  CHECK(why({4}, {{{0}, {17}}}, Assembly::Grid::flat).find("not inside") != std::string::npos);

  // A piece of another rank, another storage, a broken storage, another byte order.
  Assembled rank({4, 4}, {{{0, 0}, {4, 4}}});
  Assembly other(Assembly::Grid::shape, 1);
  other.add_contiguous({0, 0}, Dims{0}, Dims{16});
  CHECK(index_assembly(rank.model, rank.tensor(), other) ==
        "its pieces have 1 dimensions, the tensor 2");
  Assembly far(Assembly::Grid::shape, 2);
  far.add_contiguous({0, INT64_MAX}, Dims{0, 0}, Dims{4, 4});
  CHECK(index_assembly(rank.model, rank.tensor(), far) == "piece 0's view overflows");
  Assembly missing(Assembly::Grid::shape, 2);
  missing.add_contiguous({7, 0}, Dims{0, 0}, Dims{4, 4});
  CHECK(index_assembly(rank.model, rank.tensor(), missing) == "piece 0 has no storage");
  rank.model.storages[0].broken = "record archive/data/0 is missing";
  CHECK(index_assembly(rank.model, rank.tensor(), rank.model.assemblies[0]) ==
        "piece 0: record archive/data/0 is missing");
  Assembled mixed({4, 4}, {{{0, 0}, {2, 4}}, {{2, 0}, {2, 4}}});
  mixed.model.storages[1].big_endian = true;
  CHECK(index_assembly(mixed.model, mixed.tensor(), mixed.model.assemblies[0]) ==
        "pieces 0 and 1 are of different byte orders");
  // A tensor whose size overflows (2^64 elements: 0 once wrapped; 2^64 + 2: 2) is refused,
  // never indexed as an empty or a two-element tensor.
  for (const Dims& huge :
       {Dims{std::int64_t{1} << 32, std::int64_t{1} << 32}, Dims{3, 6148914691236517206}}) {
    Tensor t = rank.tensor();
    t.shape = huge;
    Assembly a(Assembly::Grid::flat, 1);
    a.add_contiguous({0, 0}, Dims{0}, Dims{2});
    CHECK(index_assembly(rank.model, t, a).find("has more elements than 64 bits count") !=
          std::string::npos);
    CHECK(!a.indexed());
  }
}

TEST_CASE("bounded: a layout that is no grid stops at its cell budget, a million pieces index") {
  // Columns 1..n each a piece spanning every row, column 0 cut into n one-row pieces: n × n cells
  // for 2n pieces.
  const int n = 600;
  Model model;
  model.sources = {"none"};
  Tensor t;
  t.shape = {n, n + 1};
  t.stride = {n + 1, 1};
  Assembly a(Assembly::Grid::shape, 2);
  Storage s;
  s.nbytes = std::uint64_t{4} * n * (n + 1);
  model.storages.push_back(s);
  for (int i = 0; i < n; ++i) a.add_contiguous({0, 0}, Dims{i, 0}, Dims{1, 1});
  for (int i = 0; i < n; ++i) a.add_contiguous({0, 0}, Dims{0, i + 1}, Dims{n, 1});
  const auto start = std::chrono::steady_clock::now();
  CHECK(index_assembly(model, t, a) ==
        "its 1200 pieces are not laid out as a grid (more than 70336 cells)");
  CHECK_FALSE(a.indexed());

  // A million one-element pieces of a flat grid, given in reverse: indexed, then read.
  const std::int64_t m = 1'000'000;
  Model big;
  big.sources = {"memory"};
  Storage whole;
  whole.nbytes = std::uint64_t{4} * m;
  big.storages.push_back(whole);
  Tensor bt;
  bt.shape = {m};
  bt.stride = {1};
  Assembly flat(Assembly::Grid::flat, 1);
  for (std::int64_t i = m; i-- > 0;) flat.add_contiguous({0, m - 1 - i}, Dims{i}, Dims{1});
  CHECK(index_assembly(big, bt, flat) == "");
  CHECK(flat.indexed());
  const PieceRun r = run_at(bt, flat, 123456, 10);
  CHECK((r.piece == m - 1 - 123456 && r.local == 0 && r.count == 1));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 30);  // n log n: well under a second in a release build
}

TEST_CASE("every view of an assembled tensor: data, tensor.npy, tensor.pt, model.safetensors") {
  // A 3x4 float32 tensor in a 2x2 grid, one piece transposed.
  Assembled t({3, 4}, {{{0, 0}, {2, 2}, {1, 2}}, {{0, 2}, {2, 2}}, {{2, 0}, {1, 4}}});
  REQUIRE(t.tensor().broken == "");
  const std::string want = t.expected();
  for (const std::uint64_t shard_size : {std::uint64_t{0}, std::uint64_t{1}}) {
    Model copy = t.model;
    Tree tree(std::move(copy), {.shard_size = shard_size});
    auto read = [&](Tree::Ino ino) {
      struct stat st {};
      REQUIRE(tree.stat(ino, st));
      ReadBuffer buffer;
      tree.read(ino, 0, static_cast<std::size_t>(st.st_size), t.sources(), buffer);
      std::string out;
      for (const ReadPiece& p : buffer.pieces()) {
        out += p.memory ? std::string(p.memory, p.length)
                        : t.source->read_string(p.source_offset, p.length);
      }
      return out;
    };
    const Tree::Ino dir = tree.lookup(Tree::root_ino, "w");
    REQUIRE(dir != 0);
    CHECK(read(tree.lookup(dir, "data")) == want);
    const std::string npy = read(tree.lookup(dir, "tensor.npy"));
    CHECK(npy == npy_header("<f4", {3, 4}) + want);

    // tensor.pt, read back by ckptfs's torch reader.
    MemorySource pt(read(tree.lookup(dir, "tensor.pt")));
    const Model back = read_torch(pt, "tensor.pt");
    REQUIRE(back.entries.size() == 1);
    const Tensor& bt = back.tensors[back.entries[0].tensor];
    CHECK(bt.shape == Dims{3, 4});
    CHECK(pt.read_string(*back.file_offset(bt), 48) == want);

    // meta.json: the pieces, their files and boxes.
    const auto meta = nlohmann::json::parse(read(tree.lookup(dir, "meta.json")));
    CHECK(meta["contiguous"] == false);
    CHECK(meta["source"].is_null());
    CHECK(meta["pieces"]["grid"] == "shape");
    CHECK(meta["pieces"]["count"] == 3);
    CHECK(meta["pieces"]["list"][0]["file_offset"].is_null());  // transposed: no one range
    CHECK(meta["pieces"]["list"][1]["file_offset"] == t.model.storages[1].file_offset);
    CHECK(meta["pieces"]["list"][1]["nbytes"] == 16);
    CHECK(meta["pieces"]["list"][2]["offsets"] == nlohmann::json::array({2, 0}));
    CHECK(meta["pieces"]["list"][2]["lengths"] == nlohmann::json::array({1, 4}));
    CHECK(meta["pieces"]["list"][2]["source"] == "pieces.bin");

    // The export (one file; with shard_size 1, the model fits one shard all the same).
    const Tree::Ino st_ino = tree.lookup(Tree::views_ino, "model.safetensors");
    REQUIRE(st_ino != 0);
    MemorySource st(read(st_ino));
    const Model exported = read_safetensors(st, "model.safetensors");
    const Tensor& et = exported.tensors[exported.entries[0].tensor];
    CHECK(st.read_string(*exported.file_offset(et), 48) == want);
  }
}

TEST_CASE("-o dtype and byte order: assembled tensors converted and swapped like any other") {
  Assembled t({2, 3}, {{{0, 0}, {2, 1}}, {{0, 1}, {2, 2}, {1, 2}}});
  REQUIRE(t.tensor().broken == "");
  const std::string want = t.expected();
  const ServedTensor half = serve(t.model, t.tensor(), DType::float16);
  REQUIRE(half.way == ServedTensor::Way::convert);
  std::string want_half(12, '\0');
  convert(DType::float32, DType::float16, false, reinterpret_cast<const std::byte*>(want.data()),
          reinterpret_cast<std::byte*>(want_half.data()), 6);
  for (std::size_t a = 0; a < 12; ++a) CHECK(t.read(half, a, 12 - a) == want_half.substr(a));

  Assembled big({2, 3}, {{{0, 0}, {2, 1}}, {{0, 1}, {2, 2}, {1, 2}}}, Assembly::Grid::shape, true);
  REQUIRE(big.tensor().broken == "");
  CHECK(big_endian(big.model, big.tensor()));
  const ServedTensor swapped = serve(big.model, big.tensor(), std::nullopt, ByteOrder::little);
  REQUIRE(swapped.way == ServedTensor::Way::swap);
  for (std::size_t a = 0; a < 24; ++a) {
    CHECK(big.read(swapped, a, 24 - a) == want.substr(a));  // the same values, little-endian
  }
  const ServedTensor as_stored = serve(big.model, big.tensor());
  CHECK(as_stored.way == ServedTensor::Way::pieces);
  CHECK(as_stored.big_endian);
}

TEST_CASE("pack: an assembled tensor's bytes in a .pth and a .safetensors") {
  Assembled t({3, 4}, {{{0, 0}, {2, 2}, {1, 2}}, {{0, 2}, {2, 2}}, {{2, 0}, {1, 4}}});
  const std::string want = t.expected();
  test::TempDir dir;
  for (const char* name : {"out.pth", "out.safetensors"}) {
    const std::string path = dir.path(name);
    const PackResult result =
        pack(t.model, t.sources(), {.output = path, .keys = {}, .dtype = {}, .overwrite = {}});
    CHECK(result.tensors == 1);
    MemorySource file(contents(path));
    const Model back =
        std::string(name).ends_with(".pth") ? read_torch(file, name) : read_safetensors(file, name);
    const Tensor& bt = back.tensors[back.entries[0].tensor];
    CHECK(bt.shape == Dims{3, 4});
    CHECK(file.read_string(*back.file_offset(bt), 48) == want);
  }
}
