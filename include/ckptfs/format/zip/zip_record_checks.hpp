// SPDX-License-Identifier: MIT
// The zip records of a model's storages whose CRC-32 is checked as they are read
// (Storage::record_check), as the RecordChecks of the source that holds them.
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/source/record_checks.hpp>

#include <cstdint>
#include <memory>

namespace ckptfs {

// The checks of the records of `model`'s storages in source `source` (each record once, a
// storage's broken or not: a record's bytes are its own whoever reads them); null when none has a
// record_check. A record located on first use (Storage::locator) is found by its locator once
// located. For ByteSource::check_records() of that source.
std::shared_ptr<const RecordChecks> zip_record_checks(const Model& model, std::uint32_t source);

}  // namespace ckptfs
