// SPDX-License-Identifier: MIT
// `ckptfs inspect`: the entries of a checkpoint as a table or as JSON, without mounting, or
// the CRC-32 of every record checked.
#pragma once

#include <ckptfs/format/open_model.hpp>
#include <ckptfs/model/model.hpp>

#include <cstdio>

namespace ckptfs::cli {

void print_inspect_table(const Model& model, std::FILE* out);
void print_inspect_json(const Model& model, std::FILE* out);

// `inspect --verify`: every record of every zip the checkpoint is read from, read once in order
// and compared with its CRC-32 (verify_zip_records()): a line per source (and per record not
// checked) on `out`, a line per corrupt record on stderr. Returns the exit status: 0, or 4 when
// a record is corrupt. Throws what reading throws.
int verify_checkpoint(const OpenedModel& opened, std::FILE* out);

}  // namespace ckptfs::cli
