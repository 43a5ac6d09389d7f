// SPDX-License-Identifier: MIT
// Assembled tensors: the pieces' validation into a grid of cells, and the runs a read is cut into.
#include <ckptfs/model/assembly.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace ckptfs {
namespace {

constexpr std::uint32_t no_piece = 0xffffffff;

// "[2, 0]" for a point or a box's offsets; "4×8" for its lengths.
std::string point_text(std::span<const std::int64_t> at) {
  return fmt::format("[{}]", fmt::join(at, ", "));
}
std::string lengths_text(std::span<const std::int64_t> lengths) {
  return lengths.empty() ? std::string("1 element") : fmt::format("{}", fmt::join(lengths, "×"));
}

// The grid's dimensions: the tensor's shape, or its element count when the grid is flat.
std::vector<std::int64_t> grid_sizes(const Tensor& tensor, const Assembly& a) {
  if (a.grid() == Assembly::Grid::flat) {
    return {static_cast<std::int64_t>(tensor.numel())};
  }
  return tensor.shape;
}

// Why piece i's box or view is unusable, or "".
std::string check_piece(const Model& model, const Tensor& tensor, const Assembly& a,
                        std::span<const std::int64_t> sizes, std::size_t i) {
  const Piece& p = a.piece(i);
  if (p.storage >= model.storages.size()) return fmt::format("piece {} has no storage", i);
  const Storage& storage = model.storages[p.storage];
  if (!storage.broken.empty()) return fmt::format("piece {}: {}", i, storage.broken);
  const auto offset = a.offset(i), length = a.length(i), stride = a.stride(i);
  bool empty = false;
  for (std::size_t d = 0; d < a.rank(); ++d) {
    if (offset[d] < 0 || length[d] < 0 || stride[d] < 0 || offset[d] > sizes[d] ||
        length[d] > sizes[d] - offset[d]) {
      return fmt::format("piece {}'s box at {} of {} is not inside the tensor's {}", i,
                         point_text(offset), lengths_text(length), lengths_text(sizes));
    }
    empty = empty || length[d] == 0;
  }
  if (p.storage_offset < 0) return fmt::format("piece {} has a negative storage offset", i);
  if (empty) return {};
  // The view's last element, and its end in bytes, inside the storage.
  std::uint64_t last = static_cast<std::uint64_t>(p.storage_offset);
  for (std::size_t d = 0; d < a.rank(); ++d) {
    std::uint64_t step = 0;
    if (__builtin_mul_overflow(static_cast<std::uint64_t>(length[d] - 1),
                               static_cast<std::uint64_t>(stride[d]), &step) ||
        __builtin_add_overflow(last, step, &last)) {
      return fmt::format("piece {}'s view overflows", i);
    }
  }
  std::uint64_t end = 0;
  if (__builtin_add_overflow(last, 1, &end) ||
      __builtin_mul_overflow(end, tensor.stored_element_size(), &end)) {
    return fmt::format("piece {}'s view overflows", i);
  }
  if (end > storage.nbytes) {
    return fmt::format("piece {}'s view of {} bytes does not fit its storage's {}", i, end,
                       storage.nbytes);
  }
  if (storage.big_endian != model.storages[a.piece(0).storage].big_endian) {
    return fmt::format("pieces 0 and {} are of different byte orders", i);
  }
  return {};
}

}  // namespace

void Assembly::add(Piece piece, std::span<const std::int64_t> offset,
                   std::span<const std::int64_t> length, std::span<const std::int64_t> stride) {
  pieces_.push_back(piece);
  numbers_.insert(numbers_.end(), offset.begin(), offset.end());
  numbers_.insert(numbers_.end(), length.begin(), length.end());
  numbers_.insert(numbers_.end(), stride.begin(), stride.end());
  indexed_ = false;
}

void Assembly::add_contiguous(Piece piece, std::span<const std::int64_t> offset,
                              std::span<const std::int64_t> length) {
  std::vector<std::int64_t> stride(length.size());
  std::int64_t step = 1;
  for (std::size_t d = length.size(); d-- > 0;) {
    stride[d] = step;
    // Saturated: a box too large for its strides is refused by index_assembly() anyway.
    if (__builtin_mul_overflow(step, std::max<std::int64_t>(length[d], 1), &step)) {
      step = INT64_MAX;
    }
  }
  add(piece, offset, length, stride);
}

std::uint64_t Assembly::elements(std::size_t i) const noexcept {
  std::uint64_t n = 1;
  for (const std::int64_t l : length(i)) n *= static_cast<std::uint64_t>(l);
  return n;
}

bool Assembly::contiguous(std::size_t i) const noexcept {
  const auto length = this->length(i), stride = this->stride(i);
  std::uint64_t expected = 1;
  for (std::size_t d = rank_; d-- > 0;) {
    if (length[d] == 0) return true;
    if (length[d] != 1 && static_cast<std::uint64_t>(stride[d]) != expected) return false;
    expected *= static_cast<std::uint64_t>(length[d]);
  }
  return true;
}

std::string index_assembly(const Model& model, const Tensor& tensor, Assembly& a) {
  a.indexed_ = false;
  a.cuts_.clear();
  a.cells_.clear();
  if (a.grid_ == Assembly::Grid::shape && a.rank_ != tensor.shape.size()) {
    return fmt::format("its pieces have {} dimensions, the tensor {}", a.rank_,
                       tensor.shape.size());
  }
  if (a.size() > max_pieces) return fmt::format("more than {} pieces", max_pieces);
  if (std::string why = size_problem(tensor); !why.empty()) return why;
  const std::vector<std::int64_t> sizes = grid_sizes(tensor, a);
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::string why = check_piece(model, tensor, a, sizes, i); !why.empty()) return why;
  }
  const std::size_t rank = a.rank_;
  if (tensor.numel() == 0) {
    a.indexed_ = true;  // nothing to read: every box is empty
    return {};
  }

  // The cuts: every non-empty box's edges, per dimension.
  a.cuts_.resize(rank);
  std::uint64_t pieces = 0;
  for (std::size_t d = 0; d < rank; ++d) a.cuts_[d] = {0, sizes[d]};
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a.elements(i) == 0) continue;
    ++pieces;
    for (std::size_t d = 0; d < rank; ++d) {
      a.cuts_[d].push_back(a.offset(i)[d]);
      a.cuts_[d].push_back(a.offset(i)[d] + a.length(i)[d]);
    }
  }
  std::uint64_t cells = 1;
  const std::uint64_t max_cells = 4 * pieces + max_extra_cells;
  for (auto& cuts : a.cuts_) {
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    if (__builtin_mul_overflow(cells, cuts.size() - 1, &cells) || cells > max_cells) {
      return fmt::format("its {} pieces are not laid out as a grid (more than {} cells)", pieces,
                         max_cells);
    }
  }

  // Each cell gets the piece whose box covers it: a second piece there is an overlap.
  a.cells_.assign(cells, no_piece);
  std::vector<std::size_t> lo(rank), hi(rank), at(rank);
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a.elements(i) == 0) continue;
    for (std::size_t d = 0; d < rank; ++d) {
      const auto& cuts = a.cuts_[d];
      lo[d] = static_cast<std::size_t>(std::lower_bound(cuts.begin(), cuts.end(), a.offset(i)[d]) -
                                       cuts.begin());
      hi[d] = static_cast<std::size_t>(
          std::lower_bound(cuts.begin(), cuts.end(), a.offset(i)[d] + a.length(i)[d]) -
          cuts.begin());
    }
    at = lo;
    while (true) {
      std::size_t cell = 0;
      for (std::size_t d = 0; d < rank; ++d) cell = cell * (a.cuts_[d].size() - 1) + at[d];
      if (a.cells_[cell] != no_piece) {
        std::vector<std::int64_t> point(rank);
        for (std::size_t d = 0; d < rank; ++d) point[d] = a.cuts_[d][at[d]];
        const std::uint32_t other = a.cells_[cell];
        a.cells_.clear();
        return fmt::format("pieces {} and {} overlap at {}", other, i, point_text(point));
      }
      a.cells_[cell] = static_cast<std::uint32_t>(i);
      std::size_t d = rank;
      while (d-- > 0 && ++at[d] == hi[d]) at[d] = lo[d];
      if (d == static_cast<std::size_t>(-1)) break;
    }
  }

  // A cell no piece covers is a gap: named by its first element and its extent.
  for (std::size_t cell = 0; cell < a.cells_.size(); ++cell) {
    if (a.cells_[cell] != no_piece) continue;
    std::vector<std::int64_t> point(rank), extent(rank);
    std::size_t rest = cell;
    for (std::size_t d = rank; d-- > 0;) {
      const std::size_t n = a.cuts_[d].size() - 1;
      point[d] = a.cuts_[d][rest % n];
      extent[d] = a.cuts_[d][rest % n + 1] - point[d];
      rest /= n;
    }
    a.cells_.clear();
    return fmt::format("no piece holds the elements at {} ({})", point_text(point),
                       lengths_text(extent));
  }
  a.indexed_ = true;
  return {};
}

PieceRun run_at(const Tensor& tensor, const Assembly& a, std::uint64_t first,
                std::uint64_t max_count) {
  const std::size_t rank = a.rank();
  const std::int64_t numel = static_cast<std::int64_t>(tensor.numel());
  const std::span<const std::int64_t> sizes = a.grid() == Assembly::Grid::flat
                                                  ? std::span<const std::int64_t>(&numel, 1)
                                                  : std::span<const std::int64_t>(tensor.shape);
  // The element's index and its cell, dimension by dimension.
  thread_local std::vector<std::uint64_t> index;
  index.assign(rank, 0);
  std::uint64_t rest = first;
  for (std::size_t d = rank; d-- > 0;) {
    const auto size = static_cast<std::uint64_t>(sizes[d]);
    index[d] = rest % size;
    rest /= size;
  }
  std::size_t cell = 0;
  for (std::size_t d = 0; d < rank; ++d) {
    const auto& cuts = a.cuts()[d];
    const auto it = std::upper_bound(cuts.begin(), cuts.end(), static_cast<std::int64_t>(index[d]));
    cell = cell * (cuts.size() - 1) + static_cast<std::size_t>(it - cuts.begin() - 1);
  }
  PieceRun run;
  run.piece = a.piece_of_cell(cell);
  const auto offset = a.offset(run.piece), length = a.length(run.piece);

  // The dimensions after `j` the box spans whole: the run goes on across them, to the end of the
  // box along j. (j = rank: none spanned; the run ends with the box's row.)
  std::size_t j = rank;
  while (j > 0 && offset[j - 1] == 0 && length[j - 1] == sizes[j - 1]) --j;
  // j is now the first of the spanned trailing dimensions; the run is bounded along j - 1.
  std::uint64_t inner = 1, within = 0;
  for (std::size_t d = j; d < rank; ++d) {
    inner *= static_cast<std::uint64_t>(sizes[d]);
    within = within * static_cast<std::uint64_t>(sizes[d]) + index[d];
  }
  std::uint64_t count = inner - within;
  if (j > 0) {
    const std::size_t b = j - 1;
    const auto end = static_cast<std::uint64_t>(offset[b] + length[b]);
    count += (end - index[b] - 1) * inner;
  }
  run.count = std::min(count, max_count);
  for (std::size_t d = 0; d < rank; ++d) {
    run.local = run.local * static_cast<std::uint64_t>(length[d]) +
                (index[d] - static_cast<std::uint64_t>(offset[d]));
  }
  return run;
}

}  // namespace ckptfs
