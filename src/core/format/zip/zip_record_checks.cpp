// SPDX-License-Identifier: MIT
// zip_record_checks(): a model's checked records of one source, located now or by their locator.
#include <ckptfs/format/zip/zip_record_checks.hpp>

#include <vector>

namespace ckptfs {

std::shared_ptr<const RecordChecks> zip_record_checks(const Model& model, std::uint32_t source) {
  std::vector<CheckedRecord> records;
  for (const Storage& s : model.storages) {
    if (s.source != source || !s.record_check) continue;
    const Storage::RecordCheck& c = *s.record_check;
    CheckedRecord r{s.record, c.crc32, c.size, s.file_offset - c.before, nullptr};
    if (s.locator) {
      r.offset = c.header_offset;
      r.located = [locator = s.locator, index = s.locator_index,
                   before = c.before]() -> std::optional<std::uint64_t> {
        const auto at = locator->located(index);
        if (!at) return std::nullopt;
        return *at - before;
      };
    }
    records.push_back(std::move(r));
  }
  if (records.empty()) return nullptr;
  return std::make_shared<const RecordChecks>(std::move(records));
}

}  // namespace ckptfs
