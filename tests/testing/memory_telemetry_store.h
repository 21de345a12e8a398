// A store::TelemetryStore for application tests: the in-memory store's
// telemetry, every call passed on to it, for a test to override the calls it
// watches or gates (MemoryStore itself is final).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/memory/memory_store.h"
#include "store/telemetry_store.h"

namespace arbiter::testing {

class MemoryTelemetryStore : public store::TelemetryStore {
 public:
  absl::StatusOr<std::vector<int64_t>> InsertSampleBatches(
      absl::Span<const std::vector<core::GpuSample>> batches) override {
    return memory_.InsertSampleBatches(batches);
  }
  absl::StatusOr<int32_t> DropSamplesBefore(absl::Time day) override {
    return memory_.DropSamplesBefore(day);
  }
  absl::StatusOr<std::vector<core::GpuSample>> ListSamples(absl::Time from,
                                                           absl::Time to) override {
    return memory_.ListSamples(from, to);
  }
  absl::StatusOr<std::vector<core::HeldMember>> ListHeldMembers(absl::Time from,
                                                                absl::Time to) override {
    return memory_.ListHeldMembers(from, to);
  }
  absl::StatusOr<std::vector<core::HeldMember>> ListLiveMembers() override {
    return memory_.ListLiveMembers();
  }
  absl::StatusOr<absl::Time> UsageRolledTo(absl::Time hour) override {
    return memory_.UsageRolledTo(hour);
  }
  absl::Status AddUsageSlice(const store::UsageSlice& slice) override {
    return memory_.AddUsageSlice(slice);
  }
  absl::Status ResetUsageHour(absl::Time hour) override { return memory_.ResetUsageHour(hour); }
  absl::StatusOr<std::vector<store::UtilizationRow>> ListUtilization(
      absl::Time from, absl::Time to, const std::string& team) override {
    return memory_.ListUtilization(from, to, team);
  }
  absl::StatusOr<std::vector<core::MemberUsage>> ListMemberUsage(absl::Time from,
                                                                 absl::Time to) override {
    return memory_.ListMemberUsage(from, to);
  }
  absl::StatusOr<std::vector<core::HourPoint>> ListUsedByHour(absl::Time from, absl::Time to,
                                                              const std::string& team) override {
    return memory_.ListUsedByHour(from, to, team);
  }

  // The whole store behind it, for what is not telemetry.
  store::MemoryStore& memory() { return memory_; }

 private:
  store::MemoryStore memory_;
};

}  // namespace arbiter::testing
