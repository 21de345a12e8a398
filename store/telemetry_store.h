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
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

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

class TelemetryStore {
 public:
  virtual ~TelemetryStore() = default;

  // Stores resolved samples in one transaction, creating the daily
  // partitions they need. Returns how many were new; the rest were already
  // stored (same node, GPU, instance and time). REQUIRES: node ids exist.
  [[nodiscard]] virtual absl::StatusOr<int64_t> InsertSamples(
      const std::vector<core::GpuSample>& samples) = 0;
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
  // Replaces the rollups of the hour starting at `hour` with usage[i] of
  // members[i] (members that held nothing in it are left out). INTERNAL
  // when the two differ in length.
  [[nodiscard]] virtual absl::Status ReplaceUsageHour(absl::Time hour,
                                                      const std::vector<core::HeldMember>& members,
                                                      const std::vector<core::MemberUsage>& usage,
                                                      absl::Time computed_at) = 0;
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
