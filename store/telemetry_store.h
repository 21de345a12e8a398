// TelemetryStore: GPU samples and their hourly rollups. Samples and rollups
// are measurements, not decisions: written straight to the store by any
// replica, never to the ledger.
//
// Status codes, for every method: UNAVAILABLE when the store cannot be
// reached (retry the call); ABORTED on a serialization failure or deadlock
// (retry the whole operation); INTERNAL for anything else. Further codes are
// stated per method.
//
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include "core/chargeback.h"
#include "core/model.h"
#include "core/telemetry.h"

namespace arbiter::store {

// Rolled-up usage of one team, pool, workload class and GPU model.
struct UtilizationRow {
  std::string team;
  std::string pool;
  core::WorkloadClass workload_class = core::WorkloadClass::kUnspecified;
  std::string gpu_model;
  core::MemberUsage usage;  // request_id and member unset.
};

// The rollup of the members held in [from, to), a part of the hour starting
// at `hour`: usage[i] is what members[i] used in it.
struct UsageSlice {
  absl::Time hour;
  absl::Time from;
  absl::Time to;
  std::vector<core::HeldMember> members;
  std::vector<core::MemberUsage> usage;
  absl::Time computed_at;
};

class TelemetryStore {
 public:
  virtual ~TelemetryStore() = default;

  // Stores batches of resolved samples in one transaction, creating the
  // daily partitions they need. Returns, for each batch in order, how many
  // of its samples were new; the rest were already stored (same node, GPU,
  // instance and time), by an earlier call, an earlier batch of this one or
  // earlier in the same batch. All or nothing: on an error none is stored.
  // REQUIRES: node ids exist.
  [[nodiscard]] virtual absl::StatusOr<std::vector<int64_t>> InsertSampleBatches(
      absl::Span<const std::vector<core::GpuSample>> batches) = 0;
  // One batch: how many of `samples` were new.
  [[nodiscard]] absl::StatusOr<int64_t> InsertSamples(const std::vector<core::GpuSample>& samples) {
    absl::StatusOr<std::vector<int64_t>> stored = InsertSampleBatches({samples});
    if (!stored.ok()) return stored.status();
    return stored->front();
  }
  // Drops the daily partitions of samples before `day` (UTC, rounded down);
  // returns how many.
  [[nodiscard]] virtual absl::StatusOr<int32_t> DropSamplesBefore(absl::Time day) = 0;
  // Samples taken in [from, to).
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::GpuSample>> ListSamples(absl::Time from,
                                                                                 absl::Time to) = 0;
  // Members of requests that held capacity at some time in [from, to),
  // ordered by request and member.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::HeldMember>> ListHeldMembers(
      absl::Time from, absl::Time to) = 0;
  // ListHeldMembers(from, to) of the requests of `pool` alone, in its order:
  // what an SLO incident's attribution reads. PgStore reads only the pool's
  // rows (a window's members are as many as the decisions made in it, in
  // every pool); this default, for stores that hold everything in memory,
  // filters the whole window.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::HeldMember>> ListHeldMembersInPool(
      const std::string& pool, absl::Time from, absl::Time to) {
    absl::StatusOr<std::vector<core::HeldMember>> members = ListHeldMembers(from, to);
    if (!members.ok()) return members.status();
    std::erase_if(*members, [&pool](const core::HeldMember& m) { return m.pool != pool; });
    return members;
  }
  // Members of the requests that hold capacity now (admitted or being
  // preempted), ordered by request and member: as many as the live state
  // holds, whatever the history.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::HeldMember>> ListLiveMembers() = 0;

  // One part of the members held in a window; a non-OK status stops the
  // scan and is returned by it.
  using HeldPart = std::function<absl::Status(absl::Span<const core::HeldMember>)>;
  // The members ListHeldMembers(from, to) returns, in its order, handed to
  // `part` at most `max_part` at a time: a window's members are as many as
  // the decisions made in it (240,000 in a minute at 4,000 decisions/s),
  // and PgStore holds one part in memory, not the window (this default,
  // for stores that hold everything in memory anyway, reads the window
  // whole). The parts are read in one snapshot. REQUIRES: max_part > 0.
  [[nodiscard]] virtual absl::Status ScanHeldMembers(absl::Time from, absl::Time to,
                                                     size_t max_part, const HeldPart& part) {
    absl::StatusOr<std::vector<core::HeldMember>> members = ListHeldMembers(from, to);
    if (!members.ok()) return members.status();
    const absl::Span<const core::HeldMember> all(*members);
    for (size_t at = 0; at < all.size(); at += max_part) {
      if (absl::Status s = part(all.subspan(at, max_part)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // How far the rollups of the hour starting at `hour` are computed: the
  // end of the last slice added since the hour was last reset, `hour` when
  // none was.
  [[nodiscard]] virtual absl::StatusOr<absl::Time> UsageRolledTo(absl::Time hour) = 0;
  // Adds slice.usage[i] of slice.members[i] (those that held nothing in it
  // are left out) to the rollups of slice.hour, summing times and energy and
  // keeping the highest peaks, and records that the hour is rolled up to
  // slice.to; all in one transaction. ABORTED when the hour is no longer
  // rolled up to slice.from (another replica added the slice, or reset the
  // hour: read UsageRolledTo again); INTERNAL when members and usage differ
  // in length. REQUIRES: slice.hour <= slice.from < slice.to.
  [[nodiscard]] virtual absl::Status AddUsageSlice(const UsageSlice& slice) = 0;

  // The usage over a slice of each member of one part (in its order).
  using RollPart =
      std::function<std::vector<core::MemberUsage>(absl::Span<const core::HeldMember>)>;
  // AddUsageSlice of the slice [from, to) of the hour starting at `hour`,
  // computed at `computed_at`, whose members are those held in it and whose
  // usage `roll` gives, part by part: as in ScanHeldMembers, PgStore holds
  // at most `max_part` members in memory at once. One transaction; errors as
  // AddUsageSlice's (INTERNAL when `roll` returns a usage per member of
  // another length). REQUIRES: hour <= from < to, max_part > 0.
  [[nodiscard]] virtual absl::Status RollUpSlice(absl::Time hour, absl::Time from, absl::Time to,
                                                 absl::Time computed_at, size_t max_part,
                                                 const RollPart& roll) {
    UsageSlice slice{hour, from, to, {}, {}, computed_at};
    absl::StatusOr<std::vector<core::HeldMember>> members = ListHeldMembers(from, to);
    if (!members.ok()) return members.status();
    slice.members = *std::move(members);
    const absl::Span<const core::HeldMember> all(slice.members);
    for (size_t at = 0; at < all.size(); at += max_part) {
      std::vector<core::MemberUsage> usage = roll(all.subspan(at, max_part));
      slice.usage.insert(slice.usage.end(), usage.begin(), usage.end());
    }
    return AddUsageSlice(slice);
  }
  // Drops the rollups of the hour starting at `hour`, so that it is rolled
  // up again from its start (late samples arrived).
  [[nodiscard]] virtual absl::Status ResetUsageHour(absl::Time hour) = 0;
  // Rollups of the hours starting in [from, to), summed by team, pool, class
  // and model (peaks: the highest), in that order; `team` "" for all.
  [[nodiscard]] virtual absl::StatusOr<std::vector<UtilizationRow>> ListUtilization(
      absl::Time from, absl::Time to, const std::string& team) = 0;
  // Rollups of the hours starting in [from, to), summed per member, by
  // request and member.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::MemberUsage>> ListMemberUsage(
      absl::Time from, absl::Time to) = 0;
  // Used milli-GPU seconds per hour of [from, to) from the rollups, for
  // `team` ("" for all); hours without rollups are left out.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::HourPoint>> ListUsedByHour(
      absl::Time from, absl::Time to, const std::string& team) = 0;
};

}  // namespace arbiter::store
