#include "core/idle_tracker.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

namespace arbiter::core {
namespace {

// Buckets per longest window.
constexpr int64_t kBucketsPerWindow = 48;

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

IdleTracker::IdleTracker(absl::Duration longest_window)
    : longest_window_(longest_window),
      bucket_(std::max(absl::Minutes(1),
                       absl::Seconds(absl::ToInt64Seconds(longest_window) / kBucketsPerWindow))) {}

int64_t IdleTracker::IndexOf(absl::Time t) const {
  return FloorDiv(absl::ToUnixMicros(t), absl::ToInt64Microseconds(bucket_));
}

absl::Time IdleTracker::BucketStart(absl::Time t) const {
  return absl::FromUnixMicros(IndexOf(t) * absl::ToInt64Microseconds(bucket_));
}

void IdleTracker::Add(absl::Time from, absl::Time to, absl::Span<const HeldMember> members,
                      absl::Span<const MemberUsage> usage) {
  const bool next_part = from == last_from_ && to == tracked_to_;
  if (!next_part && from != tracked_to_) {
    by_request_.clear();
    tracked_from_ = from;
  }
  last_from_ = from;
  tracked_to_ = to;
  const int64_t index = IndexOf(from);
  for (size_t i = 0; i < members.size() && i < usage.size(); ++i) {
    if (members[i].until != absl::InfiniteFuture()) {
      // Ended: FindIdle judges live requests only, so its buckets would
      // never be read again.
      by_request_.erase(members[i].request_id);
      continue;
    }
    if (usage[i].allocated_milli_seconds == 0) continue;
    std::vector<Bucket>& buckets = by_request_[members[i].request_id];
    if (buckets.empty() || buckets.back().index != index) buckets.push_back(Bucket{index});
    Bucket& b = buckets.back();
    b.allocated += usage[i].allocated_milli_seconds;
    b.sampled += usage[i].sampled_milli_seconds;
    b.peak = std::max(b.peak, usage[i].peak_busy_milli);
  }
  // What the longest window ending at or after `to` can still span.
  const int64_t first_needed = IndexOf(to - longest_window_);
  if (first_needed >= dropped_before_ + 1) DropBefore(first_needed);
}

void IdleTracker::DropBefore(int64_t first_index) {
  dropped_before_ = first_index;
  for (auto it = by_request_.begin(); it != by_request_.end();) {
    std::vector<Bucket>& buckets = it->second;
    auto keep = std::lower_bound(buckets.begin(), buckets.end(), first_index,
                                 [](const Bucket& b, int64_t i) { return b.index < i; });
    buckets.erase(buckets.begin(), keep);
    if (buckets.empty()) {
      by_request_.erase(it++);
    } else {
      ++it;
    }
  }
}

void IdleTracker::Rewind(absl::Time t) {
  if (t >= tracked_to_) return;
  last_from_ = absl::InfinitePast();  // What is added next is no part of a slice.
  const absl::Time start = BucketStart(t);
  if (start <= tracked_from_) {
    by_request_.clear();
    tracked_from_ = tracked_to_ = absl::InfinitePast();
    return;
  }
  const int64_t index = IndexOf(start);
  for (auto& [id, buckets] : by_request_) {
    auto cut = std::lower_bound(buckets.begin(), buckets.end(), index,
                                [](const Bucket& b, int64_t i) { return b.index < i; });
    buckets.erase(cut, buckets.end());
  }
  tracked_to_ = start;
}

std::vector<IdleFinding> IdleTracker::FindIdle(absl::Span<const HeldMember> live,
                                               absl::Span<const IdlePolicy> policies) const {
  std::map<int64_t, std::vector<const HeldMember*>> by_request;
  for (const HeldMember& m : live) by_request[m.request_id].push_back(&m);
  std::vector<IdleFinding> out;
  if (tracked_to_ == absl::InfinitePast()) return out;
  for (const auto& [request_id, group] : by_request) {
    const HeldMember& first = *group.front();
    const IdlePolicy& policy = IdlePolicyFor(first.workload_class, policies);
    const absl::Time start = BucketStart(tracked_to_ - policy.window);
    if (start < tracked_from_) continue;  // Not seen whole.
    bool whole_window = true;
    for (const HeldMember* m : group) {
      whole_window = whole_window && m->from <= start && m->until >= tracked_to_;
    }
    if (!whole_window) continue;
    auto it = by_request_.find(request_id);
    if (it == by_request_.end()) continue;
    const int64_t first_index = IndexOf(start);
    int64_t allocated = 0;
    int64_t sampled = 0;
    int32_t peak = 0;
    for (const Bucket& b : it->second) {
      if (b.index < first_index) continue;
      allocated += b.allocated;
      sampled += b.sampled;
      peak = std::max(peak, b.peak);
    }
    std::optional<IdleFinding> f = JudgeIdle(first, policy, allocated, sampled, peak);
    if (f.has_value()) out.push_back(*std::move(f));
  }
  return out;
}

}  // namespace arbiter::core
