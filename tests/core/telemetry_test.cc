#include "core/telemetry.h"

#include "gtest/gtest.h"

#include "core/mig.h"

namespace arbiter::core {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);
constexpr absl::Duration kEvery = absl::Seconds(10);

HeldMember Member(int64_t request, int64_t milli, std::vector<int32_t> gpus = {0}) {
  HeldMember m;
  m.request_id = request;
  m.team = "t";
  m.pool = "p";
  m.workload_class = WorkloadClass::kTraining;
  m.gpu_model = "A100-80GB";
  m.node_id = 1;
  m.gpu_indices = std::move(gpus);
  m.gpu_milli = milli;
  m.gpu_memory_mib = 8000;
  m.exclusive = milli == 1000;
  m.from = kT0;
  return m;
}

// One GPU-level reading every 10 s over [from, from + span).
std::vector<GpuSample> Readings(absl::Time from, absl::Duration span, int32_t busy,
                                int64_t power_mw = -1, int64_t fb_used = 1000, int32_t gpu = 0) {
  std::vector<GpuSample> out;
  for (absl::Time t = from; t < from + span; t += kEvery) {
    GpuSample s;
    s.at = t;
    s.node_id = 1;
    s.gpu_index = gpu;
    s.interval = kEvery;
    s.util_milli = busy;
    s.power_mw = power_mw;
    s.fb_used_mib = fb_used;
    out.push_back(s);
  }
  return out;
}

std::vector<GpuSample> InstanceReadings(int32_t instance, const std::string& profile,
                                        int32_t busy) {
  std::vector<GpuSample> out = Readings(kT0, absl::Hours(1), -1);
  for (GpuSample& s : out) {
    s.mig_instance = instance;
    s.mig_profile = profile;
    s.engine_active_milli = busy;
  }
  return out;
}

TEST(RollUpTest, WholeGpuUsedEqualsBusyTimesTime) {
  std::vector<HeldMember> members = {Member(1, 1000)};
  auto usage =
      RollUp(members, Readings(kT0, absl::Hours(1), 500, 300'000), kT0, kT0 + absl::Hours(1));
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0].allocated_milli_seconds, 3'600'000);
  EXPECT_EQ(usage[0].sampled_milli_seconds, 3'600'000);
  EXPECT_EQ(usage[0].used_milli_seconds, 1'800'000);
  EXPECT_EQ(usage[0].peak_busy_milli, 500);
  EXPECT_EQ(usage[0].peak_memory_mib, 1000);
  EXPECT_EQ(usage[0].energy_mwh, 300'000);  // 300 W for one hour.
}

TEST(RollUpTest, SharedGpuSplitsBusyTimeAndEnergyByMilli) {
  std::vector<HeldMember> members = {Member(1, 300), Member(2, 600)};
  auto usage =
      RollUp(members, Readings(kT0, absl::Hours(1), 900, 300'000), kT0, kT0 + absl::Hours(1));
  EXPECT_EQ(usage[0].used_milli_seconds, 1'080'000);
  EXPECT_EQ(usage[1].used_milli_seconds, 2'160'000);
  // Conservation: the members' used time is the GPU's busy time.
  EXPECT_EQ(usage[0].used_milli_seconds + usage[1].used_milli_seconds, 900 * 3600);
  EXPECT_EQ(usage[0].energy_mwh + usage[1].energy_mwh, 300'000);
  EXPECT_EQ(usage[0].allocated_milli_seconds, 300 * 3600);
}

TEST(RollUpTest, CountsOnlyWhileHeldAndInsideTheWindow) {
  HeldMember m = Member(1, 1000, {0, 1});
  m.from = kT0 + absl::Minutes(30);
  m.until = kT0 + absl::Minutes(45);
  std::vector<GpuSample> samples = Readings(kT0, absl::Hours(2), 1000);
  std::vector<GpuSample> other = Readings(kT0, absl::Hours(2), 1000, -1, 1000, 1);
  samples.insert(samples.end(), other.begin(), other.end());
  auto usage = RollUp({m}, samples, kT0, kT0 + absl::Hours(1));
  EXPECT_EQ(usage[0].allocated_milli_seconds, 2 * 1000 * 900);
  EXPECT_EQ(usage[0].used_milli_seconds, 2 * 1000 * 900);
  // A reading that starts 5 s before the window ends counts for 5 s.
  HeldMember whole = Member(2, 1000);
  auto cut = RollUp({whole}, Readings(kT0 + absl::Seconds(55), absl::Seconds(10), 1000), kT0,
                    kT0 + absl::Minutes(1));
  EXPECT_EQ(cut[0].used_milli_seconds, 5000);
}

// The maintenance rolls an hour up in slices as it goes: the slices' sums
// are the hour's figures, even where readings straddle a slice's edge and
// members come and go on a shared GPU within it.
TEST(RollUpTest, SlicesOfAnHourAddUpToTheHour) {
  HeldMember a = Member(1, 500);
  a.from = kT0 - absl::Minutes(1);  // Held when the reading before the hour was taken.
  a.until = kT0 + absl::Minutes(23) + absl::Seconds(7);
  HeldMember b = Member(2, 250);
  b.from = kT0 + absl::Minutes(11) + absl::Seconds(3);
  HeldMember c = Member(3, 1000, {1});
  c.from = kT0 + absl::Minutes(40);
  std::vector<GpuSample> samples;
  for (int32_t gpu = 0; gpu < 2; ++gpu) {
    // Readings every 10 s, 3 s off the minute, so that each edge cuts one.
    std::vector<GpuSample> r =
        Readings(kT0 - absl::Seconds(7), absl::Hours(1), 300 + 200 * gpu, 200'000, 1000, gpu);
    samples.insert(samples.end(), r.begin(), r.end());
  }
  const absl::Time end = kT0 + absl::Hours(1);
  const std::vector<HeldMember> all = {a, b, c};
  const std::vector<MemberUsage> whole = RollUp(all, samples, kT0, end);
  std::vector<MemberUsage> summed(all.size());
  for (absl::Time from = kT0; from < end; from += absl::Seconds(97)) {
    const absl::Time to = std::min(end, from + absl::Seconds(97));
    const std::vector<MemberUsage> slice = RollUp(all, samples, from, to);
    for (size_t i = 0; i < all.size(); ++i) {
      summed[i].allocated_milli_seconds += slice[i].allocated_milli_seconds;
      summed[i].sampled_milli_seconds += slice[i].sampled_milli_seconds;
      summed[i].used_milli_seconds += slice[i].used_milli_seconds;
      summed[i].energy_mwh += slice[i].energy_mwh;
      summed[i].peak_busy_milli = std::max(summed[i].peak_busy_milli, slice[i].peak_busy_milli);
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_GT(whole[i].used_milli_seconds, 0);
    EXPECT_EQ(summed[i].allocated_milli_seconds, whole[i].allocated_milli_seconds);
    // Each of the 38 slices rounds down once.
    EXPECT_NEAR(summed[i].sampled_milli_seconds, whole[i].sampled_milli_seconds, 38);
    EXPECT_NEAR(summed[i].used_milli_seconds, whole[i].used_milli_seconds, 38);
    EXPECT_NEAR(summed[i].energy_mwh, whole[i].energy_mwh, 38);
    EXPECT_EQ(summed[i].peak_busy_milli, whole[i].peak_busy_milli);
  }
}

TEST(RollUpTest, ReadingsCloserThanTheirIntervalDoNotCountTimeTwice) {
  std::vector<GpuSample> samples = Readings(kT0, absl::Seconds(10), 1000);
  std::vector<GpuSample> early = Readings(kT0 + absl::Seconds(2), absl::Seconds(10), 0);
  samples.insert(samples.end(), early.begin(), early.end());
  auto usage = RollUp({Member(1, 1000)}, samples, kT0, kT0 + absl::Hours(1));
  EXPECT_EQ(usage[0].sampled_milli_seconds, 12'000);  // 2 s, then 10 s.
  EXPECT_EQ(usage[0].used_milli_seconds, 2'000);
}

TEST(RollUpTest, MigMembersReadTheirProfileAndAverageAmbiguousInstances) {
  const auto* profiles = BuiltinMigProfiles("A100-80GB");
  ASSERT_NE(profiles, nullptr);
  const int64_t milli = MigMilli(*profiles, *FindMigProfile(*profiles, "3g.40gb"));
  ASSERT_EQ(milli, 428);
  HeldMember a = Member(1, milli);
  a.mig_profile = "3g.40gb";
  HeldMember b = Member(2, milli);
  b.mig_profile = "3g.40gb";
  std::vector<GpuSample> samples = InstanceReadings(1, "3g.40gb", 1000);
  std::vector<GpuSample> idle = InstanceReadings(2, "3g.40gb", 0);
  samples.insert(samples.end(), idle.begin(), idle.end());
  auto usage = RollUp({a, b}, samples, kT0, kT0 + absl::Hours(1));
  EXPECT_EQ(usage[0].used_milli_seconds, 770'400);  // 500 x 428 / 1000 x 3600.
  EXPECT_EQ(usage[1].used_milli_seconds, 770'400);
  EXPECT_EQ(usage[0].sampled_milli_seconds, usage[0].allocated_milli_seconds);

  // DCGM names a 7g.80gb instance "7g.79gb"; a 1g instance is not a 7g one.
  HeldMember full = Member(3, 1000);
  full.mig_profile = "7g.80gb";
  std::vector<GpuSample> renamed = InstanceReadings(0, "7g.79gb", 250);
  std::vector<GpuSample> small = InstanceReadings(5, "1g.10gb", 1000);
  renamed.insert(renamed.end(), small.begin(), small.end());
  auto full_usage = RollUp({full}, renamed, kT0, kT0 + absl::Hours(1));
  EXPECT_EQ(full_usage[0].used_milli_seconds, 250 * 3600);
  EXPECT_EQ(full_usage[0].peak_busy_milli, 250);
}

TEST(FindIdleTest, ActsByClassAndByWhatTheAllocationAllows) {
  const absl::Time now = kT0 + absl::Hours(2);
  std::vector<GpuSample> samples = Readings(kT0, absl::Hours(2), 10);
  HeldMember preemptible = Member(1, 1000);
  preemptible.workload_class = WorkloadClass::kBatchAnalytics;
  preemptible.preemptible = true;
  HeldMember owned = preemptible;
  owned.request_id = 2;
  owned.preemptible = false;
  owned.gpu_indices = {1};
  HeldMember guaranteed = owned;
  guaranteed.request_id = 3;
  guaranteed.guaranteed = true;
  guaranteed.gpu_indices = {2};
  HeldMember busy = preemptible;
  busy.request_id = 4;
  busy.gpu_indices = {3};
  HeldMember young = preemptible;
  young.request_id = 5;
  young.gpu_indices = {4};
  young.from = now - absl::Minutes(10);
  for (int32_t gpu : {1, 2, 4}) {
    auto more = Readings(kT0, absl::Hours(2), 10, -1, 1000, gpu);
    samples.insert(samples.end(), more.begin(), more.end());
  }
  auto working = Readings(kT0, absl::Hours(2), 10, -1, 1000, 3);
  working[working.size() - 5].util_milli = 60;  // Once over 5% in the window.
  samples.insert(samples.end(), working.begin(), working.end());

  auto found = FindIdle({preemptible, owned, guaranteed, busy, young}, samples, {}, now);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].request_id, 1);
  EXPECT_EQ(found[0].action, IdleAction::kRelease);
  EXPECT_EQ(found[0].idle_milli_seconds, 1000 * 1800);
  EXPECT_EQ(found[1].request_id, 2);
  EXPECT_EQ(found[1].action, IdleAction::kNotify);
  EXPECT_EQ(found[2].request_id, 3);
  EXPECT_EQ(found[2].action, IdleAction::kReport);
}

TEST(FindIdleTest, GapsInTheSamplesAreNotIdleness) {
  const absl::Time now = kT0 + absl::Hours(2);
  HeldMember m = Member(1, 1000);
  m.workload_class = WorkloadClass::kBatchAnalytics;
  // Readings for only the last 20 of the 30 minutes.
  auto found = FindIdle({m}, Readings(now - absl::Minutes(20), absl::Minutes(20), 0), {}, now);
  EXPECT_TRUE(found.empty());
  IdlePolicy shorter{WorkloadClass::kBatchAnalytics, 50, absl::Minutes(15), IdleAction::kReport};
  found = FindIdle({m}, Readings(now - absl::Minutes(20), absl::Minutes(20), 0), {shorter}, now);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].action, IdleAction::kReport);
}

TEST(RightSizeTest, AdvisesTheSmallestMigProfileOrFractionThatFits) {
  GpuModel a100{"A100-80GB", 81920, 108, 400, true};
  AttachBuiltinMigProfiles(a100);
  HeldMember whole = Member(1, 1000);
  MemberUsage usage{1, 0, 3'600'000, 3'600'000, 700'000, 200, 9000, 0};
  RightSizeAdvice advice = AdviseRightSize(whole, usage, a100, 200);
  // 240 milli and 10,800 MiB with 20% headroom: 2g.20gb (285 milli).
  EXPECT_EQ(advice.advised_mig_profile, "2g.20gb");
  EXPECT_EQ(advice.advised_milli, 285);
  EXPECT_EQ(advice.saving_milli, 715);

  GpuModel l4{"L4", 23034, 58, 72, false};
  HeldMember on_l4 = whole;
  on_l4.gpu_model = "L4";
  usage.peak_busy_milli = 300;
  usage.peak_memory_mib = 8000;
  advice = AdviseRightSize(on_l4, usage, l4, 200);
  EXPECT_EQ(advice.advised_mig_profile, "");
  EXPECT_EQ(advice.advised_milli, 400);  // 360 rounded up to 50.
  EXPECT_EQ(advice.advised_memory_mib, 9600);

  usage.peak_busy_milli = 950;  // Needs the whole GPU: keep it.
  advice = AdviseRightSize(on_l4, usage, l4, 200);
  EXPECT_EQ(advice.advised_milli, 1000);
  EXPECT_EQ(advice.saving_milli, 0);

  usage.sampled_milli_seconds = 1'000'000;  // Under half sampled: no advice.
  usage.peak_busy_milli = 10;
  advice = AdviseRightSize(on_l4, usage, l4, 200);
  EXPECT_EQ(advice.saving_milli, 0);
}

}  // namespace
}  // namespace arbiter::core
