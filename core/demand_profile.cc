#include "core/demand_profile.h"

#include <algorithm>

#include "absl/strings/str_join.h"

namespace arbiter::core {

std::string ModelSetKey(std::vector<std::string> models) {
  std::sort(models.begin(), models.end());
  models.erase(std::unique(models.begin(), models.end()), models.end());
  return absl::StrJoin(models, "|");
}

void DemandProfile::Observe(const TaskShape& shape, int64_t count) {
  while (counts_.size() >= kMaxShapes && !counts_.contains(shape)) Decay();
  counts_[shape] += count;
  total_ += count;
}

void DemandProfile::Decay() {
  total_ = 0;
  for (auto it = counts_.begin(); it != counts_.end();) {
    it->second /= 2;
    if (it->second == 0) {
      it = counts_.erase(it);
    } else {
      total_ += it->second;
      ++it;
    }
  }
}

std::vector<DemandProfile::Entry> DemandProfile::Entries() const {
  std::vector<Entry> out;
  out.reserve(counts_.size());
  for (const auto& [shape, count] : counts_) out.push_back({shape, count});
  return out;
}

}  // namespace arbiter::core
