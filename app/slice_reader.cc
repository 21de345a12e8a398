#include "app/slice_reader.h"

#include <iterator>
#include <utility>

namespace arbiter::app {

absl::StatusOr<std::vector<core::GpuSample>> SliceReader::Read(absl::Time from, absl::Time to,
                                                               const ReadFn& read) {
  const bool carried = carried_to_ == from;
  absl::StatusOr<std::vector<core::GpuSample>> taken = read(carried ? from : from - before_, to);
  if (!taken.ok()) {
    carried_to_ = absl::InfinitePast();
    last_.clear();
    return taken.status();
  }
  std::vector<core::GpuSample> out;
  if (carried) {
    for (const auto& [series, s] : last_) {
      if (s.at >= from - before_) out.push_back(s);
    }
  } else {
    last_.clear();
  }
  for (const core::GpuSample& s : *taken) {
    auto [it, fresh] = last_.try_emplace({s.node_id, s.gpu_index, s.mig_instance}, s);
    if (!fresh && it->second.at < s.at) it->second = s;
  }
  for (auto it = last_.begin(); it != last_.end();) {
    if (it->second.at < to - before_) {
      last_.erase(it++);  // Leaves the other iterators valid.
    } else {
      ++it;
    }
  }
  carried_to_ = to;
  out.insert(out.end(), std::make_move_iterator(taken->begin()),
             std::make_move_iterator(taken->end()));
  return out;
}

}  // namespace arbiter::app
