// daysim's contract: the same seed gives the same week; every milli-GPU
// second the jobs held is one the core's inventory held; a small scenario
// gives, under each policy, the figures worked out by hand below; and a bad
// scenario is refused naming its field.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "bench/sim/report.h"
#include "bench/sim/scenario.h"
#include "bench/sim/simulator.h"

namespace arbiter::daysim {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGpuSecond = 1000;  // Milli-GPU seconds of one GPU for one second.

Scenario DefaultScenario(int32_t days) {
  auto s = LoadScenario(ARBITER_SOURCE_DIR "/bench/scenarios/mixed-week.yaml");
  EXPECT_TRUE(s.ok()) << s.status();
  s->days = days;
  return *s;
}

TEST(DaysimTest, SameSeedSameWeek) {
  const Scenario s = DefaultScenario(2);
  for (Policy p : {Policy::kStatic, Policy::kQuotaOnly, Policy::kArbiter}) {
    const std::vector<Result> a = {Simulate(s, p)};
    const std::vector<Result> b = {Simulate(s, p)};
    EXPECT_EQ(SummaryCsv(a), SummaryCsv(b)) << PolicyName(p);
    EXPECT_EQ(HourlyCsv(s, a), HourlyCsv(s, b)) << PolicyName(p);
  }
  Scenario other = s;
  other.seed += 1;
  EXPECT_NE(SummaryCsv({Simulate(s, Policy::kArbiter)}),
            SummaryCsv({Simulate(other, Policy::kArbiter)}));
}

TEST(DaysimTest, GpuSecondsInEqualGpuSecondsOut) {
  const Scenario s = DefaultScenario(2);
  for (Policy p : {Policy::kStatic, Policy::kQuotaOnly, Policy::kArbiter}) {
    const Result r = Simulate(s, p);
    SCOPED_TRACE(PolicyName(p));
    EXPECT_EQ(r.core_errors, 0);
    EXPECT_GT(r.held_by_jobs_milli_seconds, 0);
    // Summed from each job's admissions and releases vs integrated from the
    // inventory's per-GPU charges between events: two independent books.
    EXPECT_EQ(r.held_by_jobs_milli_seconds, r.held_by_inventory_milli_seconds);
    EXPECT_LE(r.used_milli_seconds, r.allocated_milli_seconds);
    EXPECT_LE(r.allocated_milli_seconds, r.capacity_milli_seconds);
    int64_t by_hour = 0, by_team = 0;
    for (int64_t v : r.allocated_by_hour) by_hour += v;
    for (const TeamResult& t : r.teams) by_team += t.allocated_milli_seconds;
    EXPECT_EQ(by_hour, r.allocated_milli_seconds);
    EXPECT_EQ(by_team, r.allocated_milli_seconds);
  }
}

// Two teams of one 8-GPU node each. At 00:00 team a asks for a gang of two
// 8-GPU members (preemptible, no checkpoints, an hour of work), then team b
// for one 8-GPU member (not preemptible, an hour), within its nominal.
Scenario TwoTeams() {
  auto s = ParseScenario(R"(
name: two-teams
days: 1
warmup_days: 0
cluster: {nodes: 2, gpus_per_node: 8}
arbiter_grace_seconds: 60
teams:
  - {name: a, gpus: 8, pool_class: batch}
  - {name: b, gpus: 8, pool_class: batch}
streams:
  - {name: big, team: a, class: training, kind: daily, count: 1, members: 2,
     gpus_per_member: 8, min_work_seconds: 3600, max_work_seconds: 3600,
     busy_permille: 1000}
  - {name: own, team: b, class: training, kind: daily, count: 1, gpus_per_member: 8,
     min_work_seconds: 3600, max_work_seconds: 3600, preemptible: false,
     busy_permille: 1000}
)");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

// Static: a's 16 GPUs never fit its 8-GPU partition (denied); b runs its hour.
TEST(DaysimTest, TwoTeamsStatic) {
  const Result r = Simulate(TwoTeams(), Policy::kStatic);
  EXPECT_EQ(r.jobs_denied, 1);
  EXPECT_EQ(r.jobs_completed, 1);
  EXPECT_EQ(r.used_milli_seconds, 8 * 3600 * kGpuSecond);
  EXPECT_EQ(r.delay_by_class.at("training").p95_seconds, 0);
  EXPECT_EQ(r.preemptions, 0);
}

// Quota-only: a borrows b's node; b reclaims, but a borrower runs to the end
// (a day's grace), so b starts at 01:00 and ends at 02:00.
TEST(DaysimTest, TwoTeamsQuotaOnly) {
  const Result r = Simulate(TwoTeams(), Policy::kQuotaOnly);
  EXPECT_EQ(r.jobs_completed, 2);
  EXPECT_EQ(r.used_milli_seconds, (16 + 8) * 3600 * kGpuSecond);
  EXPECT_EQ(r.delay_by_class.at("training").p95_seconds, 3600);  // b's wait.
  EXPECT_EQ(r.preemptions, 0);
  EXPECT_EQ(r.lost_milli_seconds, 0);
}

// Arbiter: b reclaims with a 60 s grace; a (no checkpoints) loses its first
// minute, waits for b's hour (00:01-01:01) and runs again 01:01-02:01.
TEST(DaysimTest, TwoTeamsArbiter) {
  const Result r = Simulate(TwoTeams(), Policy::kArbiter);
  EXPECT_EQ(r.jobs_completed, 2);
  EXPECT_EQ(r.preemptions, 1);
  EXPECT_EQ(r.lost_milli_seconds, 16 * 60 * kGpuSecond);
  EXPECT_EQ(r.used_milli_seconds, (16 * (60 + 3600) + 8 * 3600) * kGpuSecond);
  EXPECT_EQ(r.delay_by_class.at("training").p95_seconds, 60);  // b's wait.
  EXPECT_EQ(r.held_by_jobs_milli_seconds, r.held_by_inventory_milli_seconds);
}

TEST(DaysimTest, BadScenarioNamesTheField) {
  auto bad = ParseScenario(R"(
teams: [{name: a, gpus: 8}]
cluster: {nodes: 1}
streams: [{name: s, team: nobody, gpus_per_member: 1}]
)");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("streams[0].team"));

  auto partitions = ParseScenario("teams: [{name: a, gpus: 8}]\ncluster: {nodes: 2}\n");
  ASSERT_FALSE(partitions.ok());
  EXPECT_THAT(partitions.status().message(), HasSubstr("teams: partitions add up to 8 GPUs"));

  auto type = ParseScenario("days: many\n");
  ASSERT_FALSE(type.ok());
  EXPECT_THAT(type.status().message(), HasSubstr("days: cannot read"));

  EXPECT_EQ(LoadScenario("/nonexistent.yaml").status().code(), absl::StatusCode::kNotFound);
}

// The default week shows the claims docs/economics.md quotes; if a change to
// the core or the model moves them, the doc must be revisited.
TEST(DaysimTest, DefaultWeekShowsTheClaims) {
  const Scenario s = DefaultScenario(7);
  const Result fixed = Simulate(s, Policy::kStatic);
  const Result quota = Simulate(s, Policy::kQuotaOnly);
  const Result arbiter = Simulate(s, Policy::kArbiter);
  const double waste = 1.0 - static_cast<double>(fixed.used_milli_seconds) /
                                 static_cast<double>(fixed.capacity_milli_seconds);
  EXPECT_GE(waste, 0.40);
  EXPECT_LE(waste, 0.60);
  int64_t worst_morning = 0, quota_breaches = 0, arbiter_contention = 0, static_breaches = 0,
          arbiter_breaches = 0;
  for (size_t i = 0; i < s.services.size(); ++i) {
    worst_morning = std::max(worst_morning, quota.services[i].morning_p99_permille);
    quota_breaches += quota.services[i].breach_minutes;
    static_breaches += fixed.services[i].breach_minutes;
    arbiter_breaches += arbiter.services[i].breach_minutes;
    arbiter_contention += arbiter.services[i].contention_breach_minutes;
  }
  EXPECT_GE(worst_morning, 3000);
  EXPECT_GE(arbiter.used_milli_seconds * 10, fixed.used_milli_seconds * 16);
  EXPECT_LE(arbiter_breaches, static_breaches);
  EXPECT_LT(arbiter_breaches * 10, quota_breaches);
  EXPECT_GT(quota.externality_micros, 0);
}

}  // namespace
}  // namespace arbiter::daysim
