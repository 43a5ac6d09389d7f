// SPDX-License-Identifier: MIT
// `ckptfs inspect`: the entries of a checkpoint as a table or as JSON, without mounting.
#pragma once

#include <ckptfs/model/model.hpp>

#include <cstdio>

namespace ckptfs::cli {

void print_inspect_table(const Model& model, std::FILE* out);
void print_inspect_json(const Model& model, std::FILE* out);

}  // namespace ckptfs::cli
