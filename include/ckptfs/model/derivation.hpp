// SPDX-License-Identifier: MIT
// Derived tensors (model.hpp's Derivation): checked once, when the model is made, so that every
// read of one can trust its runs.
#pragma once

#include <ckptfs/model/model.hpp>

#include <string>

namespace ckptfs {

// The most runs one derivation may have (a Llama's Q rows un-permuted: two per head).
inline constexpr std::size_t max_derivation_runs = 1 << 20;

// Why derived `tensor` (tensor.derivation indexes model.derivations) cannot be served, or "" when
// it can: its dtype is float32 and its stride C order; every run's source is a tensor of the
// model that is neither derived nor broken nor a meta tensor, whose elements split into rows of
// row_length (> 0), and the run's rows lie in it; each run starts (`at`) where the ones before
// it end, and together they are the tensor's elements, row_length each. A transpose has one run,
// whose source is 2-d and the tensor's shape reversed. At most max_derivation_runs runs. Time
// O(runs); no I/O. Whether the sources' values can be read as float32 is the view's to say
// (view/derived.hpp).
std::string check_derivation(const Model& model, const Tensor& tensor);

}  // namespace ckptfs
