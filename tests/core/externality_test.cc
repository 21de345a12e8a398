// Externality attribution and chargeback statements (core/externality.h,
// core/chargeback.h): the split is exact, each kind of pressure is found
// and bounded, and the statements add up.
#include "core/externality.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/chargeback.h"

namespace arbiter::core {
namespace {

using ::testing::ElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1'795'000'000);  // On a whole hour.

absl::Time At(int64_t seconds) { return kT0 + absl::Seconds(seconds); }

HeldMember Member(int64_t request, const std::string& team, int64_t node, std::vector<int32_t> gpus,
                  int64_t milli, int64_t from, int64_t until, WorkloadClass cls) {
  HeldMember m;
  m.request_id = request;
  m.team = team;
  m.pool = "serving";
  m.workload_class = cls;
  m.gpu_model = "L4";
  m.node_id = node;
  m.gpu_indices = std::move(gpus);
  m.gpu_milli = milli;
  m.exclusive = milli == 1000;
  m.from = At(from);
  m.until = until < 0 ? absl::InfiniteFuture() : At(until);
  return m;
}

AttributionInputs Inputs() {
  AttributionInputs in;
  in.slo = {"web", "chat", "serving", 200'000, absl::Minutes(5), 0};
  in.window = {"web", "chat", At(0), At(300), 100'000, 450'000, 50'000};
  in.nominal_milli = {{"web", 4000}, {"batch", 0}, {"ml", 1000}};
  in.lent_classes = (1u << static_cast<int>(WorkloadClass::kTraining)) |
                    (1u << static_cast<int>(WorkloadClass::kBatchAnalytics)) |
                    (1u << static_cast<int>(WorkloadClass::kExperimentation));
  in.micros_per_gpu_hour = {{"L4", 3'600'000}};  // 1,000 micros per GPU-second.
  return in;
}

TEST(SplitProRataTest, PartsSumToTheTotalAndTiesGoToTheLowerIndex) {
  EXPECT_THAT(SplitProRata(100, std::vector<int64_t>{1, 1, 1}), ElementsAre(34, 33, 33));
  EXPECT_THAT(SplitProRata(7, std::vector<int64_t>{2, 0, 5}), ElementsAre(2, 0, 5));
  EXPECT_THAT(SplitProRata(0, std::vector<int64_t>{2, 5}), ElementsAre(0, 0));
  EXPECT_THAT(SplitProRata(10, std::vector<int64_t>{0, 0}), ElementsAre(0, 0));
  const std::vector<int64_t> weights = {999'999'999'999, 1, 3};
  int64_t sum = 0;
  for (int64_t p : SplitProRata(1'000'000'007, weights)) sum += p;
  EXPECT_EQ(sum, 1'000'000'007);
}

TEST(AttributeIncidentTest, BorrowedServingCapacityIsChargedUpToTheVictimsShortfall) {
  AttributionInputs in = Inputs();
  // The victim holds 2 of its 4 nominal GPUs; batch holds 3 lent GPUs, ml
  // one within its nominal (inference: not lent).
  in.held = {Member(1, "web", 1, {0, 1}, 1000, -3600, -1, WorkloadClass::kInference),
             Member(2, "batch", 1, {2, 3}, 1000, -3600, -1, WorkloadClass::kBatchAnalytics),
             Member(3, "batch", 2, {0}, 1000, -3600, 150, WorkloadClass::kBatchAnalytics),
             Member(4, "ml", 2, {1}, 1000, -3600, -1, WorkloadClass::kInference)};
  in.slo.penalty_micros_per_minute = 1'000'000;
  const Attribution a = AttributeIncident(in);
  EXPECT_EQ(a.cost_basis, "penalty");
  EXPECT_EQ(a.cost_micros, 5'000'000);
  ASSERT_EQ(a.causes.size(), 1u);
  EXPECT_EQ(a.causes[0].team, "batch");
  // Capped at the shortfall: 2000 milli for 300 s, not 3000 for 150 s.
  EXPECT_EQ(a.causes[0].borrowed_milli_seconds, 600'000);
  EXPECT_EQ(a.causes[0].co_tenancy_milli_seconds, 0);
  EXPECT_THAT(a.causes[0].request_ids, ElementsAre(2, 3));
  EXPECT_THAT(a.charges_micros, ElementsAre(5'000'000));
}

TEST(AttributeIncidentTest, NoShortfallNoBorrowedPressure) {
  AttributionInputs in = Inputs();
  in.held = {Member(1, "web", 1, {0, 1, 2, 3}, 1000, -3600, -1, WorkloadClass::kInference),
             Member(2, "batch", 2, {0, 1}, 1000, -3600, -1, WorkloadClass::kBatchAnalytics)};
  const Attribution a = AttributeIncident(in);
  EXPECT_TRUE(a.causes.empty());
  EXPECT_EQ(a.attributed_micros(), 0);
  // The default cost: the victim's reserved cost over the window, 4 GPUs x
  // 300 s at 3.6 units per GPU-hour.
  EXPECT_EQ(a.cost_basis, "reserved_cost");
  EXPECT_EQ(a.cost_micros, 4 * 300 * 1000);
}

TEST(AttributeIncidentTest, SoftCoTenantsOnTheVictimsGpusArePressure) {
  AttributionInputs in = Inputs();
  in.nominal_milli["web"] = 500;
  in.held = {Member(1, "web", 1, {0}, 500, -60, -1, WorkloadClass::kInference),
             Member(2, "dev", 1, {0}, 250, -60, 100, WorkloadClass::kExperimentation),
             Member(3, "ml", 1, {0}, 250, 200, -1, WorkloadClass::kInference),
             Member(4, "ml", 1, {1}, 500, -60, -1, WorkloadClass::kInference)};  // Other GPU.
  in.nominal_milli["dev"] = 250;
  const Attribution a = AttributeIncident(in);
  ASSERT_EQ(a.causes.size(), 2u);
  EXPECT_EQ(a.causes[0].team, "dev");
  EXPECT_EQ(a.causes[0].co_tenancy_milli_seconds, 250 * 100);
  EXPECT_EQ(a.causes[1].team, "ml");
  EXPECT_EQ(a.causes[1].co_tenancy_milli_seconds, 250 * 100);
  EXPECT_THAT(a.causes[1].request_ids, ElementsAre(3));
  EXPECT_EQ(a.charges_micros[0] + a.charges_micros[1], a.cost_micros);
}

TEST(AttributeIncidentTest, LowerPriorityHoldsThatDelayAWaitingRequestArePressure) {
  AttributionInputs in = Inputs();
  in.held = {Member(1, "web", 1, {0, 1}, 1000, -3600, -1, WorkloadClass::kInference),
             Member(2, "ml", 1, {2}, 1000, -3600, -1, WorkloadClass::kInference),
             Member(3, "ops", 1, {3}, 1000, -3600, -1, WorkloadClass::kInference)};
  in.held[1].priority = 1;
  in.held[2].priority = 9;  // Above the waiting request: not a blocker.
  in.nominal_milli["ml"] = 1000;
  in.nominal_milli["ops"] = 1000;
  in.waiting = {{7, 2000, 5, At(60), At(240)}};
  const Attribution a = AttributeIncident(in);
  ASSERT_EQ(a.causes.size(), 1u);
  EXPECT_EQ(a.causes[0].team, "ml");
  EXPECT_EQ(a.causes[0].admission_delay_milli_seconds, 1000 * 180);
  EXPECT_EQ(a.causes[0].borrowed_milli_seconds, 0);
}

TEST(ChargesOfTest, ChargesAndTheCreditSumToZero) {
  Incident incident;
  incident.id = 3;
  incident.slo.team = "web";
  incident.attribution.cost_micros = 10;
  incident.attribution.causes = {Interference{"a"}, Interference{"b"}, Interference{"c"}};
  incident.attribution.charges_micros = {7, 0, 3};
  const std::vector<ExternalityCharge> charges = ChargesOf(incident);
  ASSERT_EQ(charges.size(), 3u);
  EXPECT_EQ(charges[0].team, "a");
  EXPECT_EQ(charges[1].team, "c");
  EXPECT_EQ(charges[2].team, "web");
  EXPECT_EQ(charges[2].micros, -10);
}

TEST(BuildStatementsTest, ReservedUsedIdleBorrowedChargesAndBudget) {
  ChargebackInputs in;
  in.from = At(0);
  in.to = At(7200);
  in.held = {Member(1, "web", 1, {0, 1}, 1000, -3600, -1, WorkloadClass::kInference),
             Member(2, "batch", 1, {2}, 1000, 1800, 5400, WorkloadClass::kBatchAnalytics)};
  in.usage[{1, 0}] = MemberUsage{1, 0, 14'400'000, 7'200'000, 3'600'000, 900, 100, 500};
  in.pool_classes = {{"serving", LatencyClass::kServing}};
  in.prices = {Price{"L4", LatencyClass::kServing, 3'600'000, At(-86400)}};
  in.tdp_watts = {{"L4", 72}};
  in.nominal_milli = {{{"serving", "web"}, 4000}};
  in.charges = {ExternalityCharge{5, "batch", 900, {}, At(60)},
                ExternalityCharge{5, "web", -900, {}, At(60)}};
  in.budgets = {Budget{"batch", 0, 1'000'000'000, OverBudget::kDeny}};
  in.teams = {"batch", "idle-team", "web"};
  const std::vector<Statement> s = BuildStatements(in);
  ASSERT_EQ(s.size(), 3u);
  const Statement& batch = s[0];
  EXPECT_EQ(batch.team, "batch");
  EXPECT_EQ(batch.reserved_milli_seconds, 3'600'000);
  EXPECT_EQ(batch.borrowed_milli_seconds, 3'600'000);  // Lent by the serving pool.
  EXPECT_EQ(batch.reserved_cost_micros, 3'600'000);
  EXPECT_EQ(batch.externality_charged_micros, 900);
  EXPECT_EQ(batch.incidents_caused, 1);
  EXPECT_EQ(batch.net_cost_micros, 3'600'900);
  // No telemetry: one L4-hour at its TDP of 72 W, all of it estimated.
  EXPECT_EQ(batch.energy_measured_mwh, 0);
  EXPECT_EQ(batch.energy_estimated_mwh, 72'000);
  EXPECT_EQ(batch.energy_mwh, 72'000);
  EXPECT_EQ(batch.budget_micros, ProRataBudget(1'000'000'000, in.from, in.to));
  EXPECT_EQ(batch.remainder_micros, batch.budget_micros - batch.net_cost_micros);
  EXPECT_EQ(s[1].team, "idle-team");
  EXPECT_EQ(s[1].reserved_milli_seconds, 0);
  const Statement& web = s[2];
  EXPECT_EQ(web.reserved_milli_seconds, 14'400'000);
  EXPECT_EQ(web.used_milli_seconds, 3'600'000);
  EXPECT_EQ(web.reserved_cost_micros, 14'400'000);
  // Half the reserved time was sampled, a quarter used: a quarter idle.
  EXPECT_EQ(web.idle_cost_micros, 3'600'000);
  // Measured over the sampled half; the other half (two L4-hours) at TDP.
  EXPECT_EQ(web.energy_measured_mwh, 500);
  EXPECT_EQ(web.energy_estimated_mwh, 144'000);
  EXPECT_EQ(web.energy_mwh, 144'500);
  ASSERT_EQ(web.lines.size(), 1u);
  EXPECT_EQ(web.lines[0].energy_estimated_mwh, 144'000);
  EXPECT_EQ(web.borrowed_milli_seconds, 0);
  EXPECT_EQ(web.externality_credited_micros, 900);
  EXPECT_EQ(web.incidents_suffered, 1);
  EXPECT_EQ(web.budget_micros, -1);
  const std::vector<HourPoint> hours = HourlyReserved(in.held, "", in.from, in.to);
  ASSERT_EQ(hours.size(), 2u);
  EXPECT_EQ(hours[0].reserved_milli_seconds, 7'200'000 + 1'800'000);
  EXPECT_EQ(hours[1].reserved_milli_seconds, 7'200'000 + 1'800'000);
}

TEST(ProRataBudgetTest, SplitsAcrossMonthsBySeconds) {
  const absl::Time nov = absl::FromCivil(absl::CivilSecond(2026, 11, 1), absl::UTCTimeZone());
  const absl::Time dec = absl::FromCivil(absl::CivilSecond(2026, 12, 1), absl::UTCTimeZone());
  EXPECT_EQ(ProRataBudget(3'000, nov, dec), 3'000);
  EXPECT_EQ(ProRataBudget(3'000, nov, nov + absl::Hours(24 * 10)), 1'000);
  // Half of December (31 days) and all of November.
  EXPECT_EQ(ProRataBudget(3'100, nov, dec + absl::Hours(12 * 31)), 3'100 + 1'550);
}

}  // namespace
}  // namespace arbiter::core
