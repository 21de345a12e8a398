#include "core/demand_profile.h"

namespace arbiter::core {

void DemandProfile::Observe(const TaskShape& shape, int64_t count) {
  counts_[shape] += count;
  total_ += count;
}

std::vector<DemandProfile::Entry> DemandProfile::Entries() const {
  std::vector<Entry> out;
  out.reserve(counts_.size());
  for (const auto& [shape, count] : counts_) out.push_back({shape, count});
  return out;
}

}  // namespace arbiter::core
