// SPDX-License-Identifier: MIT
// Tensors assembled from pieces: a PyTorch DCP tensor's chunks (n-dimensional boxes of it, each
// in some .distcp file), a DeepSpeed ZeRO parameter's ranges of flat partitions (one per rank).
// Each piece is a strided view of one storage placed at a box of the tensor: of its shape, or of
// its elements in C order taken as one dimension. index_assembly() validates the pieces once,
// at mount, into a grid that says which piece holds each element; run_at() then cuts a read of
// the tensor's C-order elements into runs, each a range of one piece's elements in the piece's
// own C order (one range of its storage when the piece is contiguous there).
#pragma once

#include <ckptfs/model/model.hpp>

#include <cstdint>
#include <string>

namespace ckptfs {

// The most cells the grid of one tensor may have beyond four per piece: pieces that tile the
// tensor as a grid (every DCP sharding, every ZeRO partition) make one cell each; pieces laid
// like bricks make a few more. Past it the tensor is broken (never quadratic time or memory).
inline constexpr std::uint64_t max_extra_cells = 1 << 16;
// The most pieces one tensor may have (cells hold a piece's index in 32 bits).
inline constexpr std::uint64_t max_pieces = 0xfffffffe;

// Validates `tensor`'s assembly (tensor.assembly) and makes its grid: each piece's box lies in
// the grid's dimensions (the tensor's shape, or [numel] when flat), with non-negative offsets,
// lengths and strides; its view lies inside its storage (which is not broken); all pieces have
// one byte order; no two boxes overlap; every element is in a box. Empty boxes (a length 0,
// as FSDP writes for ranks that hold no rows: offset equal to the size) are accepted and never
// read. Time O(p log p + cells), memory O(p + cells), cells at most 4 p + max_extra_cells.
// Returns why the tensor cannot be served ("pieces 0 and 3 overlap at [2, 0]", "no piece holds
// the elements at [4, 0] (4×8)") — the caller marks it broken — or "" once indexed.
std::string index_assembly(const Model& model, const Tensor& tensor, Assembly& assembly);

// A run of the tensor's elements in C order that one piece holds, consecutive in the piece's own
// C order too.
struct PieceRun {
  std::uint32_t piece = 0;
  std::uint64_t local = 0;  // the run's first element, in the piece's C order
  std::uint64_t count = 0;  // elements
};

// The run that starts at element `first` of an indexed assembly's tensor (first < numel), of at
// most `max_count` elements (> 0). O(rank × log pieces).
PieceRun run_at(const Tensor& tensor, const Assembly& assembly, std::uint64_t first,
                std::uint64_t max_count);

}  // namespace ckptfs
