// IdleTracker: idle detection that does not re-read its window of samples.
// The usage of each request's members over consecutive slices of time (what
// core::RollUp gives for each slice) is summed into buckets, and a request's
// usage over a policy window is the sum of the buckets the window spans. A
// check then costs what arrived since the last one, not hours of samples
// (core::FindIdle over the raw samples is the reference it is tested
// against).
//
// Windows are counted in whole buckets and end where the last slice added
// ends (`tracked_to`): a window of W spans the buckets from the one holding
// `tracked_to - W` on, so at least W. Buckets are a 48th of the longest
// policy window wide, at least a minute: 5 minutes for the default 4 hours.
// A request is judged only when the tracker has seen its whole window.
//
// Memory: a few dozen bytes per bucket of each live request that held
// capacity in the longest window. A request that ended (a member whose
// `until` is finite) is dropped when a slice names it ended: it will never
// be judged, and keeping it would cost the rate of decisions times the
// longest window (4 hours by default).
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include "core/telemetry.h"

namespace arbiter::core {

class IdleTracker {
 public:
  // REQUIRES: longest_window > 0.
  explicit IdleTracker(absl::Duration longest_window);

  absl::Duration longest_window() const { return longest_window_; }
  absl::Duration bucket() const { return bucket_; }
  // Where the slices added so far begin and end; both InfinitePast before
  // the first.
  absl::Time tracked_from() const { return tracked_from_; }
  absl::Time tracked_to() const { return tracked_to_; }

  // The start and the end of the bucket holding `t`.
  absl::Time BucketStart(absl::Time t) const;
  absl::Time BucketEnd(absl::Time t) const { return BucketStart(t) + bucket_; }

  // Requests whose buckets are kept.
  size_t tracked_requests() const { return by_request_.size(); }

  // Adds usage[i], the usage of members[i] over [from, to), and drops the
  // requests of the members that ended (finite `until`). A slice may come in
  // parts: calls with the [from, to) of the last call add further members of
  // that slice (each member in one part). Otherwise a `from` other than
  // tracked_to() starts tracking again from `from` (what came before is
  // forgotten). Buckets that no window can reach any more are dropped.
  // REQUIRES: from < to <= BucketEnd(from); members.size() == usage.size().
  void Add(absl::Time from, absl::Time to, absl::Span<const HeldMember> members,
           absl::Span<const MemberUsage> usage);

  // Forgets what was added from `t` on (late samples arrived for it): the
  // next Add starts at BucketStart(t), or, when that is before
  // tracked_from(), tracking starts again.
  void Rewind(absl::Time t);

  // The requests of `live` (their members, any order) held for the whole of
  // their class's window ending at tracked_to(), seen whole by the tracker,
  // and idle under core::JudgeIdle; by request id.
  std::vector<IdleFinding> FindIdle(absl::Span<const HeldMember> live,
                                    absl::Span<const IdlePolicy> policies) const;

 private:
  struct Bucket {
    int64_t index = 0;  // BucketStart = epoch + index * bucket_.
    int64_t allocated = 0;
    int64_t sampled = 0;
    int32_t peak = 0;
  };

  int64_t IndexOf(absl::Time t) const;
  // Drops the buckets before `first_index`, and requests left with none.
  void DropBefore(int64_t first_index);

  const absl::Duration longest_window_;
  const absl::Duration bucket_;
  absl::Time tracked_from_ = absl::InfinitePast();
  absl::Time tracked_to_ = absl::InfinitePast();
  absl::Time last_from_ = absl::InfinitePast();  // The last Add's `from`.
  int64_t dropped_before_ = 0;                   // The first bucket index kept at the last drop.
  // Per request, its buckets in index order.
  absl::flat_hash_map<int64_t, std::vector<Bucket>> by_request_;
};

}  // namespace arbiter::core
