// Proactive reclaim (core/proactive_reclaim.cc, core/serving_forecast.h):
// the forecast learns per quarter hour of the week, and a pool reclaims lent
// capacity ahead of a learnt rise, least lost work first, and keeps borrowed
// work out of what the forecast needs.
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "core/serving_forecast.h"
#include "tests/core/test_state.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::AddNode;
using ::arbiter::testing::kT0;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::MakeState;
using ::arbiter::testing::WholeSpec;

constexpr absl::Duration kWeek = absl::Hours(7 * 24);

// kT0 is Friday 2027-01-15 08:00 UTC: Friday is day 4 from Monday, and
// 08:00 is quarter hour 32 of the day.
TEST(ServingForecastTest, QuarterHoursOfTheWeekAreCountedFromMondayUtc) {
  EXPECT_EQ(QuarterHourOfWeek(kT0), 4 * 96 + 32);
  EXPECT_EQ(QuarterHourOfWeek(kT0 + absl::Minutes(14)), 4 * 96 + 32);
  EXPECT_EQ(QuarterHourOfWeek(kT0 + absl::Minutes(15)), 4 * 96 + 33);
  EXPECT_EQ(QuarterHourOfWeek(kT0 + 3 * absl::Hours(24) - absl::Hours(8)), 0);  // Monday 00:00.
  EXPECT_EQ(QuarterHourOfWeek(kT0 + 3 * absl::Hours(24) - absl::Hours(8) - absl::Seconds(1)),
            kQuarterHoursPerWeek - 1);
  EXPECT_EQ(WeekOf(kT0 + kWeek), WeekOf(kT0) + 1);
  EXPECT_EQ(QuarterHourStart(kT0 + absl::Minutes(22)), kT0 + absl::Minutes(15));
  // Before 1970 too (floor, not truncation): Wednesday 1969-12-31 23:59:59.
  EXPECT_EQ(QuarterHourOfWeek(absl::FromUnixSeconds(-1)), 2 * 96 + 95);
}

// A rise is learnt in one week; a fall halves the gap each week; the
// current quarter hour forecasts at least what it has seen so far.
TEST(ServingForecastTest, LearnsRisesAtOnceAndFallsByHalves) {
  ServingForecast f;
  EXPECT_FALSE(f.observed());
  f.Observe(kT0, 2000);
  f.Observe(kT0 + absl::Minutes(5), 4000);
  f.Observe(kT0 + absl::Minutes(10), 1000);
  EXPECT_EQ(f.At(kT0, kT0 + absl::Minutes(10)), 4000);  // The current quarter hour's peak.
  EXPECT_EQ(f.At(kT0 + absl::Minutes(15), kT0 + absl::Minutes(10)), 0);  // Never observed.
  // A week on, before the quarter hour comes round: last week's peak.
  EXPECT_EQ(f.At(kT0 + kWeek, kT0 + kWeek - absl::Minutes(5)), 4000);
  f.Observe(kT0 + kWeek, 1000);  // Folds 4000 in; this week's peak so far is 1000.
  EXPECT_EQ(f.slot(QuarterHourOfWeek(kT0)).learnt_milli, 4000);
  EXPECT_EQ(f.At(kT0 + 2 * kWeek, kT0 + 2 * kWeek - absl::Minutes(1)), 2500);  // Halved gap.
  f.Observe(kT0 + 2 * kWeek, 6000);
  EXPECT_EQ(f.At(kT0 + 3 * kWeek, kT0 + 3 * kWeek - absl::Minutes(1)), 6000);  // A rise: at once.

  const ServingForecast::Peak peak =
      f.PeakWithin(kT0 + 3 * kWeek - absl::Minutes(20), kT0 + 3 * kWeek + absl::Minutes(1));
  EXPECT_EQ(peak.milli, 6000);
  EXPECT_EQ(peak.at, kT0 + 3 * kWeek);
  EXPECT_EQ(f.PeakWithin(kT0 + absl::Hours(1), kT0 + absl::Hours(2)).at, absl::InfiniteFuture());

  ServingForecast restored;
  for (int q = 0; q < kQuarterHoursPerWeek; ++q) restored.Load(f.slot(q));
  const absl::Time later = kT0 + 3 * kWeek - absl::Minutes(1);
  EXPECT_EQ(restored.At(kT0 + 3 * kWeek, later), f.At(kT0 + 3 * kWeek, later));
}

class ProactiveReclaimTest : public ::testing::Test {
 protected:
  // Pool "front" (SERVING, proactive, grace 60 s + cold start 240 s: a lead
  // of 300 s), lending to training, one node of 4 L4s; team t holds 8 GPUs
  // of quota in it.
  void SetUp() override {
    s_ = MakeState();
    Pool front{"front", LatencyClass::kServing, ""};
    front.lends_to = {WorkloadClass::kTraining};
    front.reclaim_grace_seconds = 60;
    front.proactive_reclaim = true;
    front.cold_start_seconds = 240;
    ChangeSet ch;
    ASSERT_TRUE(CreatePool(s_, front, ch).ok());
    ASSERT_TRUE(SetQuota(s_, {"t", "front", 8000}, kT0, ch).ok());
    AddNode(s_, MakeNode("f1", 4, "L4", "front"));
    EXPECT_EQ(s_.demand_sample_at(), absl::InfinitePast());
  }

  CapacityRequest Ask(const std::string& key, WorkloadClass c, int gpus, absl::Time at,
                      int64_t checkpoint_interval = 0) {
    CapacityRequestSpec spec = WholeSpec(key, 1, gpus);
    spec.pool = "front";
    spec.workload_class = c;
    spec.preemptible = c != WorkloadClass::kInference;
    spec.checkpoint_interval_seconds = checkpoint_interval;
    spec.checkpoint_seconds = checkpoint_interval > 0 ? 30 : 0;
    ChangeSet ch;
    absl::StatusOr<RequestOutcome> out = RequestCapacity(s_, spec, at, ch);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->request : CapacityRequest();
  }

  ChangeSet TickAt(absl::Time at) {
    ChangeSet ch;
    Tick(s_, at, ch);
    return ch;
  }

  const CapacityRequest& Live(int64_t id) { return *s_.FindLiveRequest(id); }

  State s_;
};

TEST_F(ProactiveReclaimTest, ReclaimsLentCapacityAheadOfALearntRiseLeastLostWorkFirst) {
  // Week 1, Friday 08:00: serving holds 2 GPUs; the observation learns it.
  const CapacityRequest serving = Ask("serve-1", WorkloadClass::kInference, 2, kT0);
  ASSERT_EQ(serving.state, RequestState::kAdmitted);
  ChangeSet observed = TickAt(kT0);
  ASSERT_EQ(observed.demand.size(), 1u);
  EXPECT_EQ(observed.demand[0].pool, "front");
  EXPECT_EQ(observed.demand[0].slot.slot, QuarterHourOfWeek(kT0));
  EXPECT_EQ(observed.demand[0].slot.peak_milli, 2000);
  EXPECT_TRUE(observed.changes.empty());  // An observation is not a decision.
  EXPECT_EQ(s_.demand_sample_at(), kT0 + kDemandSampleEvery);
  ChangeSet ch;
  ASSERT_TRUE(ReleaseRequest(s_, serving.id, kT0 + absl::Minutes(5), ch).ok());

  // 09:00: training borrows all four GPUs (nothing forecast for 09:00).
  const absl::Time nine = kT0 + absl::Hours(1);
  const CapacityRequest a = Ask("a", WorkloadClass::kTraining, 2, nine);  // No checkpoints.
  const CapacityRequest b = Ask("b", WorkloadClass::kTraining, 1, nine, 600);
  const CapacityRequest c = Ask("c", WorkloadClass::kTraining, 1, nine, 600);
  ASSERT_EQ(a.state, RequestState::kAdmitted);
  ASSERT_EQ(b.state, RequestState::kAdmitted);
  ASSERT_EQ(c.state, RequestState::kAdmitted);
  EXPECT_TRUE(TickAt(nine).changes.empty());

  // Week 2, Friday 07:54: the rise is beyond the lead; nothing is reclaimed.
  EXPECT_TRUE(TickAt(kT0 + kWeek - absl::Minutes(6)).changes.empty());
  // 07:56: 08:00 is within the lead of 300 s; the two checkpointing
  // borrowers lose least and cover the 2 GPUs.
  const absl::Time notice = kT0 + kWeek - absl::Minutes(4);
  const ChangeSet reclaimed = TickAt(notice);
  ASSERT_EQ(reclaimed.changes.size(), 2u);
  for (int64_t id : {b.id, c.id}) {
    const CapacityRequest& v = Live(id);
    EXPECT_EQ(v.state, RequestState::kPreempting);
    EXPECT_EQ(v.reason_code, kReasonProactiveReclaim);
    EXPECT_EQ(v.preempt_deadline, notice + absl::Seconds(60));
  }
  EXPECT_EQ(Live(b.id).reason,
            "pool front forecasts 2000 milli-GPU of serving demand from 2027-01-22T08:00:00Z "
            "(learnt from past weeks; its own classes hold 0, 0 are free and 0 returning); lent "
            "capacity is reclaimed ahead of it by its reclaim grace of 60 s + cold start of "
            "240 s; vacate within 60 s");
  EXPECT_EQ(Live(a.id).state, RequestState::kAdmitted);

  absl::StatusOr<ForecastView> view = ForecastOf(s_, "front", notice, 1);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->lead_seconds, 300);
  EXPECT_EQ(view->figures.capacity_milli, 4000);
  EXPECT_EQ(view->figures.lent_milli, 2000);
  EXPECT_EQ(view->figures.leaving_milli, 2000);
  EXPECT_EQ(view->peak.milli, 2000);
  EXPECT_EQ(view->reclaim_milli, 0);  // Already on its way back.
  ASSERT_EQ(view->slots.size(), 4u);
  EXPECT_EQ(view->slots[1].start, kT0 + kWeek);
  EXPECT_EQ(view->slots[1].forecast_milli, 2000);
  EXPECT_TRUE(view->slots[1].observed);
  EXPECT_EQ(view->notices.size(), 2u);

  // 07:58: the victims are gone. Borrowed work may not take what the
  // forecast needs; the pool's own class may.
  TickAt(notice + absl::Minutes(2));
  EXPECT_FALSE(s_.FindLiveRequest(b.id) != nullptr &&
               s_.FindLiveRequest(b.id)->state == RequestState::kPreempting);
  const CapacityRequest waits = Ask("d", WorkloadClass::kTraining, 1, notice + absl::Minutes(2));
  EXPECT_EQ(waits.state, RequestState::kQueued);
  EXPECT_EQ(waits.reason_code, kReasonForecast);
  EXPECT_EQ(waits.reason,
            "pool front keeps capacity for the 2000 milli-GPU of serving demand it forecasts from "
            "2027-01-22T08:00:00Z (its own classes hold 0); this work would leave 1000 free or "
            "returning, and may not take what the forecast needs");
  const CapacityRequest rise = Ask("serve-2", WorkloadClass::kInference, 2, kT0 + kWeek);
  EXPECT_EQ(rise.state, RequestState::kAdmitted);

  // 08:10: serving goes, but 08:00-08:15 still forecasts 2 GPUs: the
  // borrower waits. 08:20: nothing is forecast within the lead; the next
  // observation lets it in.
  ASSERT_TRUE(ReleaseRequest(s_, rise.id, kT0 + kWeek + absl::Minutes(10), ch).ok());
  EXPECT_EQ(Live(waits.id).state, RequestState::kQueued);
  const ChangeSet later = TickAt(kT0 + kWeek + absl::Minutes(20));
  EXPECT_EQ(Live(waits.id).state, RequestState::kAdmitted);
  EXPECT_FALSE(later.changes.empty());
}

TEST_F(ProactiveReclaimTest, ForecastOfRefusesBadInput) {
  EXPECT_EQ(ForecastOf(s_, "front", kT0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ForecastOf(s_, "front", kT0, 169).status().message(),
            "hours: must be 1..168 (a week), got 169");
  EXPECT_EQ(ForecastOf(s_, "nope", kT0, 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ForecastOf(s_, "serving", kT0, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Before any observation: an empty forecast, nothing to reclaim.
  absl::StatusOr<ForecastView> view = ForecastOf(s_, "front", kT0, 2);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->slots.size(), 8u);
  EXPECT_EQ(view->peak.milli, 0);
  EXPECT_FALSE(view->slots[0].observed);
}

TEST(ProactiveReclaimValidationTest, OnlyServingPoolsForecastAndColdStartIsBounded) {
  State s = MakeState();
  ChangeSet ch;
  Pool batch{"b2", LatencyClass::kBatch, ""};
  batch.proactive_reclaim = true;
  EXPECT_EQ(CreatePool(s, batch, ch).message(),
            "pool.proactive_reclaim: only a SERVING pool forecasts serving demand and reclaims "
            "ahead of it");
  Pool serving{"s2", LatencyClass::kServing, ""};
  serving.cold_start_seconds = -1;
  const absl::Status negative = CreatePool(s, serving, ch);
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(negative.message(), "pool.cold_start_seconds: ")) << negative;
  EXPECT_TRUE(ch.changes.empty());
  EXPECT_EQ(s.FindPool("b2"), nullptr);
  // No pool forecasts: no observations are due.
  EXPECT_EQ(s.demand_sample_at(), absl::InfiniteFuture());
}

}  // namespace
}  // namespace arbiter::core
