// TelemetryMaintenance on the in-memory store, pass by pass as its
// background thread runs them:
//   - the idle tracker's slices come from what the rollup read in the same
//     pass, so a pass reads the store's samples once, and the tracker finds
//     what a tracker that reads everything from the store finds;
//   - each pass's coverage shows a telemetry source that stopped, and that
//     it came back.
#include "app/telemetry_maintenance.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "store/memory/memory_store.h"
#include "tests/testing/memory_telemetry_store.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::app {
namespace {

using ::arbiter::testing::IsOk;

// An hour boundary.
const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);
constexpr absl::Duration kSettle = absl::Minutes(2);

// The in-memory store's telemetry, with the spans of each ListSamples call
// recorded.
class RecordingStore final : public ::arbiter::testing::MemoryTelemetryStore {
 public:
  // The spans read since the last call.
  std::vector<std::pair<absl::Time, absl::Time>> TakeReads() {
    absl::MutexLock lock(&mu_);
    return std::exchange(reads_, {});
  }

  absl::StatusOr<std::vector<core::GpuSample>> ListSamples(absl::Time from,
                                                           absl::Time to) override {
    {
      absl::MutexLock lock(&mu_);
      reads_.emplace_back(from, to);
    }
    return MemoryTelemetryStore::ListSamples(from, to);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<absl::Time, absl::Time>> reads_ ABSL_GUARDED_BY(mu_);
};

// Commits, through core as arbiterd does, node "n1" with one H100 and a
// preemptible batch-analytics request (30-minute idle window, "release")
// holding its GPU from an hour before kT0. Returns the request's id.
int64_t HoldTheGpu(store::MemoryStore& store) {
  absl::StatusOr<core::State> loaded = store.LoadState();
  EXPECT_THAT(loaded, IsOk());
  core::State s = std::move(*loaded);
  const absl::Time at = kT0 - absl::Hours(1);
  core::ChangeSet ch;
  EXPECT_THAT(core::CreateCluster(s, {"c", ""}, ch), IsOk());
  EXPECT_THAT(core::CreatePool(s, {"batch", core::LatencyClass::kBatch, ""}, ch), IsOk());
  EXPECT_THAT(core::CreateTeam(s, {"t", "", 1000}, ch), IsOk());
  EXPECT_THAT(core::SetQuota(s, {"t", "batch", 8000}, at, ch), IsOk());
  core::Node node;
  node.cluster = "c";
  node.name = "n1";
  node.pool = "batch";
  node.cpu_milli = 64'000;
  node.memory_mib = 512'000;
  core::Gpu gpu;
  gpu.index = 0;
  gpu.model = "H100-80GB";
  node.gpus.push_back(gpu);
  EXPECT_THAT(core::RegisterNode(s, node, at, ch), IsOk());
  core::CapacityRequestSpec spec;
  spec.idempotency_key = "idle";
  spec.team = "t";
  spec.pool = "batch";
  spec.workload_class = core::WorkloadClass::kBatchAnalytics;
  spec.preemptible = true;
  spec.members = 1;
  spec.shape.gpu = int32_t{1};
  absl::StatusOr<core::RequestOutcome> decided = core::RequestCapacity(s, spec, at, ch);
  EXPECT_THAT(decided, IsOk());
  EXPECT_THAT(store.Commit(ch), IsOk());
  EXPECT_EQ(decided->request.state, core::RequestState::kAdmitted);
  return decided->request.id;
}

// A minute of 10-second readings of GPU 0 of node 1 from `start`, `busy`
// permille busy.
std::vector<core::GpuSample> Minute(absl::Time start, int32_t busy) {
  std::vector<core::GpuSample> out;
  for (int s = 0; s < 60; s += 10) {
    core::GpuSample g;
    g.at = start + absl::Seconds(s);
    g.node_id = 1;
    g.gpu_index = 0;
    g.interval = absl::Seconds(10);
    g.util_milli = busy;
    g.engine_active_milli = busy;
    g.fb_used_mib = 1024;
    g.fb_free_mib = 80 * 1024;
    g.power_mw = 70'000;
    out.push_back(g);
  }
  return out;
}

TelemetryOptions Passes() {
  TelemetryOptions o;
  o.rollup_every = absl::ZeroDuration();  // The test runs the passes.
  o.settle = kSettle;
  return o;
}

// The pass at the end of minute `m` of the samples (`settle` later).
absl::Time PassAt(int m) { return kT0 + absl::Minutes(m + 1) + kSettle; }

TEST(TelemetryMaintenanceTest, TheTrackerReadsWhatTheRollupReadAndFindsWhatTheStoreShows) {
  RecordingStore store;
  const int64_t request = HoldTheGpu(store.memory());
  ::arbiter::testing::SimulatedClock clock(kT0);
  TelemetryMaintenance maintenance(&store, &store.memory(), &clock, Passes());
  // 45 minutes of an idle GPU, a pass after each minute settles.
  for (int m = 0; m < 45; ++m) {
    ASSERT_THAT(store.InsertSamples(Minute(kT0 + absl::Minutes(m), 10)), IsOk());
    ASSERT_THAT(maintenance.RunOnce(PassAt(m)), IsOk());
    const auto reads = store.TakeReads();
    if (m < 2) continue;  // The first passes read whole windows.
    // One read per pass: the rollup's minute; the tracker's slices lie
    // within it.
    ASSERT_EQ(reads.size(), 1u) << "pass " << m;
    EXPECT_EQ(reads[0].first, PassAt(m - 1) - kSettle) << "pass " << m;
    EXPECT_EQ(reads[0].second, PassAt(m) - kSettle) << "pass " << m;
  }
  absl::StatusOr<std::vector<core::IdleFinding>> idle = maintenance.FindIdle();
  ASSERT_THAT(idle, IsOk());
  ASSERT_EQ(idle->size(), 1u);
  EXPECT_EQ((*idle)[0].request_id, request);
  EXPECT_EQ((*idle)[0].peak_busy_milli, 10);
  EXPECT_EQ((*idle)[0].action, core::IdleAction::kRelease);

  // A late reading, 40 permille busy, inside the window: the next pass
  // rolls its hour up again from the start (none of those reads is kept for
  // the tracker, which had them) and the tracker from where it fell.
  std::vector<core::GpuSample> late = Minute(kT0 + absl::Minutes(30) + absl::Seconds(5), 40);
  late.resize(1);
  ASSERT_THAT(store.InsertSamples(late), IsOk());
  maintenance.MarkDirty(late);
  ASSERT_THAT(store.InsertSamples(Minute(kT0 + absl::Minutes(45), 10)), IsOk());
  ASSERT_THAT(maintenance.RunOnce(PassAt(45)), IsOk());
  idle = maintenance.FindIdle();
  ASSERT_THAT(idle, IsOk());
  ASSERT_EQ(idle->size(), 1u);
  EXPECT_EQ((*idle)[0].peak_busy_milli, 40);

  // A tracker that starts now reads its whole window from the store, and
  // finds the same.
  TelemetryMaintenance fresh(&store, &store.memory(), &clock, Passes());
  ASSERT_THAT(fresh.RunOnce(PassAt(45)), IsOk());
  absl::StatusOr<std::vector<core::IdleFinding>> from_store = fresh.FindIdle();
  ASSERT_THAT(from_store, IsOk());
  ASSERT_EQ(from_store->size(), 1u);
  EXPECT_EQ((*from_store)[0].request_id, (*idle)[0].request_id);
  EXPECT_EQ((*from_store)[0].peak_busy_milli, (*idle)[0].peak_busy_milli);
  EXPECT_EQ((*from_store)[0].idle_milli_seconds, (*idle)[0].idle_milli_seconds);
  EXPECT_EQ((*from_store)[0].action, (*idle)[0].action);
}

// Pass after pass, a minute at a time, the hour's rollups come to what
// RollUp makes of the raw samples at once, late readings included.
TEST(TelemetryMaintenanceTest, PassByPassTheRollupsAreWhatTheRawSamplesGive) {
  RecordingStore store;
  const int64_t request = HoldTheGpu(store.memory());
  ::arbiter::testing::SimulatedClock clock(kT0);
  TelemetryMaintenance maintenance(&store, &store.memory(), &clock, Passes());
  int m = 0;
  for (; m < 30; ++m) {
    const std::vector<core::GpuSample> minute = Minute(kT0 + absl::Minutes(m), 100 + 25 * m);
    ASSERT_THAT(store.InsertSamples(minute), IsOk());
    maintenance.MarkDirty(minute);
    if (m == 20) {
      // A reading of minute 5 that arrives late: the hour is rolled up again.
      std::vector<core::GpuSample> late = Minute(kT0 + absl::Minutes(5) + absl::Seconds(5), 990);
      late.resize(1);
      ASSERT_THAT(store.InsertSamples(late), IsOk());
      maintenance.MarkDirty(late);
    }
    ASSERT_THAT(maintenance.RunOnce(PassAt(m)), IsOk());
  }
  const absl::Time to = kT0 + absl::Minutes(m);
  auto members = store.ListHeldMembers(kT0, to);
  auto samples = store.ListSamples(kT0 - absl::Minutes(5), to);
  auto rolled = store.ListMemberUsage(kT0, kT0 + absl::Hours(1));
  ASSERT_THAT(members, IsOk());
  ASSERT_THAT(samples, IsOk());
  ASSERT_THAT(rolled, IsOk());
  const std::vector<core::MemberUsage> want = core::RollUp(*members, *samples, kT0, to);
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(rolled->size(), 1u);
  const core::MemberUsage& got = (*rolled)[0];
  EXPECT_EQ(got.request_id, request);
  EXPECT_EQ(got.allocated_milli_seconds, want[0].allocated_milli_seconds);
  EXPECT_EQ(got.sampled_milli_seconds, want[0].sampled_milli_seconds);
  EXPECT_EQ(got.used_milli_seconds, want[0].used_milli_seconds);
  EXPECT_EQ(got.peak_busy_milli, want[0].peak_busy_milli);
  EXPECT_EQ(got.peak_busy_milli, 990);
  EXPECT_EQ(got.peak_memory_mib, want[0].peak_memory_mib);
  // Each slice rounds its energy down to a whole mWh: at most one per pass.
  EXPECT_LE(got.energy_mwh, want[0].energy_mwh);
  EXPECT_GE(got.energy_mwh, want[0].energy_mwh - 2 * m);
}

TEST(TelemetryMaintenanceTest, CoverageShowsASourceThatStoppedAndCameBack) {
  RecordingStore store;
  HoldTheGpu(store.memory());
  ::arbiter::testing::SimulatedClock clock(kT0);
  TelemetryMaintenance maintenance(&store, &store.memory(), &clock, Passes());
  EXPECT_EQ(maintenance.coverage().passes, 0);
  EXPECT_EQ(maintenance.coverage().to, absl::InfinitePast());

  int m = 0;
  for (; m < 5; ++m) {
    ASSERT_THAT(store.InsertSamples(Minute(kT0 + absl::Minutes(m), 500)), IsOk());
    ASSERT_THAT(maintenance.RunOnce(PassAt(m)), IsOk());
  }
  TelemetryCoverage c = maintenance.coverage();
  EXPECT_EQ(c.passes, 5);
  EXPECT_EQ(c.failed_passes, 0);
  EXPECT_EQ(c.from, kT0 + absl::Minutes(4));
  EXPECT_EQ(c.to, kT0 + absl::Minutes(5));
  EXPECT_EQ(c.members, 1);
  EXPECT_EQ(c.unsampled_members, 0);
  EXPECT_EQ(c.allocated_milli_seconds, 60 * 1000);
  EXPECT_EQ(c.sampled_milli_seconds, 60 * 1000);

  // The source stops: two minutes without samples. The last reading stands
  // for its 10 s, so the first silent minute is sampled for none of it.
  for (; m < 7; ++m) ASSERT_THAT(maintenance.RunOnce(PassAt(m)), IsOk());
  c = maintenance.coverage();
  EXPECT_EQ(c.passes, 7);
  EXPECT_EQ(c.members, 1);
  EXPECT_EQ(c.unsampled_members, 1);
  EXPECT_EQ(c.allocated_milli_seconds, 60 * 1000);
  EXPECT_EQ(c.sampled_milli_seconds, 0);

  // It comes back.
  ASSERT_THAT(store.InsertSamples(Minute(kT0 + absl::Minutes(m), 500)), IsOk());
  ASSERT_THAT(maintenance.RunOnce(PassAt(m)), IsOk());
  c = maintenance.coverage();
  EXPECT_EQ(c.unsampled_members, 0);
  EXPECT_EQ(c.sampled_milli_seconds, 60 * 1000);

  // A second pass with nothing new to roll up keeps what the last one saw.
  ASSERT_THAT(maintenance.RunOnce(PassAt(m)), IsOk());
  EXPECT_EQ(maintenance.coverage().passes, 9);
  EXPECT_EQ(maintenance.coverage().sampled_milli_seconds, 60 * 1000);
}

}  // namespace
}  // namespace arbiter::app
