// daysim's contract: the latency model's queue matches queueing theory
// where it has closed forms; the same seed gives the same week; every
// milli-GPU second the jobs held is one the core's inventory held; the
// report's columns add up; a small scenario gives, under each policy, the
// figures worked out by hand below; and a bad scenario is refused naming
// its field.
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "bench/sim/report.h"
#include "bench/sim/scenario.h"
#include "bench/sim/simulator.h"

namespace arbiter::daysim {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGpuSecond = 1000;  // Milli-GPU seconds of one GPU for one second.
constexpr uint64_t kSeed = 20261102;

// Mean and p99 of the responses of `intervals` 15-second intervals of one
// queue, from a fresh queue and generator.
struct Responses {
  double mean = 0;
  double p99 = 0;
  size_t count = 0;
};

Responses RunQueue(const ReplicaQueue::Interval& in, int32_t servers, int intervals) {
  ReplicaQueue queue(servers);
  Rng rng(kSeed);
  std::vector<double> all;
  for (int k = 0; k < intervals; ++k) queue.Run(in, rng, all);
  Responses r;
  r.count = all.size();
  r.mean = std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(all.size());
  std::vector<WeightedSample> samples;
  for (double x : all) samples.push_back({x, 1.0});
  r.p99 = WeightedQuantile(samples, 0.99);
  return r;
}

ReplicaQueue::Interval Exponential(double arrivals_per_second, double mean_service_seconds) {
  ReplicaQueue::Interval in;
  in.seconds = 15;
  in.arrivals_per_second = arrivals_per_second;
  in.mean_service_seconds = mean_service_seconds;
  in.service_cv = 1.0;
  return in;
}

// M/M/1: the response time is exponential with rate mu - lambda, so its mean
// is 1 / (mu - lambda) and its p99 ln(100) / (mu - lambda). Over 20 seeds,
// with 1.6 million requests, the p99's standard deviation is 0.5% at rho
// 0.5 and 1.3% at rho 0.8 (the queue is strongly autocorrelated); the
// tolerances are over 3 of them.
TEST(ReplicaQueueTest, MM1MatchesClosedForm) {
  const double mu = 10;
  for (const auto& [lambda, requests, tolerance] :
       {std::tuple{5.0, 1'600'000, 0.03}, std::tuple{8.0, 1'600'000, 0.05}}) {
    SCOPED_TRACE(lambda);
    const Responses r =
        RunQueue(Exponential(lambda, 1 / mu), 1, static_cast<int>(requests / (lambda * 15)));
    EXPECT_GT(r.count, requests * 0.98);
    EXPECT_NEAR(r.mean, 1 / (mu - lambda), tolerance / (mu - lambda));
    EXPECT_NEAR(r.p99, std::log(100.0) / (mu - lambda),
                tolerance * std::log(100.0) / (mu - lambda));
  }
}

// M/M/4 at rho 0.75: Erlang C gives the probability of waiting; the mean
// wait is C / (c mu - lambda). The mean's standard deviation over 20 seeds
// is 0.008 s.
TEST(ReplicaQueueTest, MMcMatchesErlangC) {
  const double mu = 1, lambda = 3, a = lambda / mu;
  const int c = 4;
  double sum = 0, term = 1;
  for (int k = 0; k < c; ++k) {
    sum += term;
    term *= a / (k + 1);
  }
  const double tail = term * c / (c - a);  // a^c / c! x c / (c - a)
  const double erlang_c = tail / (sum + tail);
  EXPECT_NEAR(erlang_c, 0.5094, 0.0001);
  const Responses r = RunQueue(Exponential(lambda, 1 / mu), c, 10'000);
  EXPECT_NEAR(r.mean, 1 / mu + erlang_c / (c * mu - lambda), 0.03);
}

// Round robin over k replicas: each sees Erlang-k gaps. For GI/M/1 the
// response is exponential with rate mu (1 - sigma), where sigma solves
// sigma = A*(mu (1 - sigma)) and A*(s) = (k lambda / (k lambda + s))^k.
// 1.44 million requests: the p99's standard deviation is about 1.3%.
TEST(ReplicaQueueTest, RoundRobinMatchesGIM1) {
  const double mu = 10, lambda = 8;
  const int k = 4;
  double sigma = 0.5;
  for (int it = 0; it < 200; ++it)
    sigma = std::pow(k * lambda / (k * lambda + mu * (1 - sigma)), k);
  const double rate = mu * (1 - sigma);
  ReplicaQueue::Interval in = Exponential(lambda, 1 / mu);
  in.gap_shape = k;
  const Responses r = RunQueue(in, 1, 12'000);
  EXPECT_NEAR(r.mean, 1 / rate, 0.04 / rate);
  EXPECT_NEAR(r.p99, std::log(100.0) / rate, 0.05 * std::log(100.0) / rate);
  // Smoother arrivals wait less than Poisson ones at the same load.
  EXPECT_LT(r.mean, 1 / (mu - lambda) * 0.8);
}

// Twice the arrivals it can serve: the backlog grows by about one second
// per second and carries into the next interval, where a light load still
// waits behind it; with a timeout, the backlog stops at the timeout.
TEST(ReplicaQueueTest, SaturatedBacklogGrowsAndCarriesOver) {
  ReplicaQueue queue(1);
  Rng rng(kSeed);
  std::vector<double> responses;
  double last = 0;
  for (int k = 1; k <= 4; ++k) {
    queue.Run(Exponential(20, 0.1), rng, responses);
    EXPECT_GT(queue.WaitSeconds(), last);
    last = queue.WaitSeconds();
  }
  EXPECT_NEAR(last, 60, 8);
  responses.clear();
  queue.Run(Exponential(1, 0.1), rng, responses);
  ASSERT_FALSE(responses.empty());
  EXPECT_GT(responses.front(), 40);  // Behind the backlog, not the 0.1 s of an idle queue.

  ReplicaQueue bounded(1);
  ReplicaQueue::Interval in = Exponential(20, 0.1);
  in.timeout_seconds = 5;
  int64_t refused = 0;
  for (int k = 0; k < 4; ++k) refused += bounded.Run(in, rng, responses);
  EXPECT_LT(bounded.WaitSeconds(), 5 + 2);
  EXPECT_GT(refused, 400);
}

TEST(ReplicaQueueTest, SameSeedSameResponses) {
  ReplicaQueue::Interval in = Exponential(30, 0.02);
  in.service_cv = 0.6;
  in.gap_shape = 7;
  in.slowdown = 1.5;
  std::vector<double> a, b, c;
  ReplicaQueue qa(2), qb(2), qc(2);
  Rng ra(1), rb(1), rc(2);
  for (int k = 0; k < 10; ++k) {
    qa.Run(in, ra, a);
    qb.Run(in, rb, b);
    qc.Run(in, rc, c);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// The weighted p99 is the smallest response with 99% of the weight at or
// below it.
TEST(WeightedQuantileTest, HandWorkedCases) {
  std::vector<WeightedSample> equal;
  for (int k = 100; k >= 1; --k) equal.push_back({static_cast<double>(k), 1});
  EXPECT_EQ(WeightedQuantile(equal, 0.99), 99);
  std::vector<WeightedSample> light_tail = {{100, 1}, {1, 98}, {10, 1}};
  EXPECT_EQ(WeightedQuantile(light_tail, 0.99), 10);
  std::vector<WeightedSample> heavy_tail = {{10, 0.5}, {100, 1.5}, {1, 98}};
  EXPECT_EQ(WeightedQuantile(heavy_tail, 0.99), 100);
  std::vector<WeightedSample> none;
  EXPECT_EQ(WeightedQuantile(none, 0.99), 0);
}

Scenario DefaultScenario(int32_t days) {
  auto s = LoadScenario(ARBITER_SOURCE_DIR "/bench/scenarios/mixed-week.yaml");
  EXPECT_TRUE(s.ok()) << s.status();
  s->days = days;
  return *s;
}

constexpr Policy kPolicies[] = {Policy::kStatic, Policy::kQuotaOnly, Policy::kArbiterReactive,
                                Policy::kArbiter};

TEST(DaysimTest, SameSeedSameWeek) {
  const Scenario s = DefaultScenario(1);
  for (Policy p : kPolicies) {
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
  const Scenario s = DefaultScenario(1);
  for (Policy p : kPolicies) {
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

// The default services, alone at their target utilization with their peak
// replica count (round robin over them), have the p99 their base_p99_ms
// states: the scenario's service-time CVs are calibrated to it.
TEST(DaysimTest, ServiceTimesCalibratedToBaseP99) {
  const Scenario s = DefaultScenario(1);
  for (const ServiceSpec& v : s.services) {
    SCOPED_TRACE(v.name);
    const double per_replica = v.replica_rps * v.target_utilization_permille / 1000.0;
    ReplicaQueue::Interval in;
    in.seconds = 15;
    in.arrivals_per_second = per_replica;
    in.gap_shape = static_cast<int32_t>(std::ceil(v.peak_rps / per_replica));
    in.mean_service_seconds = static_cast<double>(v.replica_concurrency) / v.replica_rps;
    in.service_cv = v.service_cv_permille / 1000.0;
    const Responses r = RunQueue(in, v.replica_concurrency, 200'000 / (per_replica * 15));
    EXPECT_NEAR(r.p99 * 1000, v.base_p99_ms, 0.1 * v.base_p99_ms);
  }
}

// The report's new columns are there and consistent: breach minutes by
// cause add up, the formula's minutes are measured on the same minutes,
// the teams' energy and the unallocated GPUs' add up to the total within
// its physical bounds, and lost progress is part of lost GPU time.
TEST(DaysimTest, ReportColumnsAddUp) {
  const Scenario s = DefaultScenario(1);
  std::vector<Result> results;
  for (Policy p : kPolicies) {
    results.push_back(Simulate(s, p));
    const Result& r = results.back();
    SCOPED_TRACE(PolicyName(p));
    for (const ServiceResult& v : r.services) {
      int64_t by_cause = 0;
      for (const auto& [cause, minutes] : v.breach_minutes_by_cause) by_cause += minutes;
      EXPECT_EQ(by_cause, v.breach_minutes) << v.name;
      EXPECT_EQ(v.p99_ms_by_minute.size(), 1440u);
      EXPECT_EQ(v.formula_p99_ms_by_minute.size(), v.p99_ms_by_minute.size());
    }
    int64_t teams = 0;
    for (const TeamResult& t : r.teams) teams += t.energy_wh;
    EXPECT_EQ(teams + r.unallocated_energy_wh, r.energy_wh);
    const int64_t gpu_hours = r.capacity_milli_seconds / (1000 * 3600);
    EXPECT_GE(r.energy_wh, gpu_hours * s.cluster.gpu_idle_watts);
    EXPECT_LE(r.energy_wh, gpu_hours * s.cluster.gpu_tdp_watts);
    EXPECT_LE(r.lost_progress_milli_seconds, r.lost_milli_seconds);
  }
  EXPECT_THAT(SummaryCsv(results), HasSubstr("arbiter,chat.formula_breach_minutes,"));
  EXPECT_THAT(SummaryCsv(results), HasSubstr("arbiter,energy_wh,"));
  EXPECT_THAT(SummaryCsv(results), HasSubstr("arbiter,lost_progress_milli_gpu_seconds,"));
  EXPECT_THAT(SummaryCsv(results), HasSubstr("arbiter-reactive,max_draw_watts,"));
  EXPECT_THAT(HourlyCsv(s, results), HasSubstr("used_permille,max_draw_watts,"));
  EXPECT_EQ(PowerCsv(results), "");  // No budget in the default scenario.
  EXPECT_THAT(TeamsCsv(results), HasSubstr(",energy_wh\n"));
  EXPECT_THAT(HourlyCsv(s, results), HasSubstr(",chat_formula_p99_ms\n"));
  EXPECT_THAT(ComparisonTable(s, results), HasSubstr("breach minutes, cause "));
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
// Energy: b's 8 GPUs busy for the hour at 700 W (5,600 Wh); the other 376
// GPU-hours of the day idle at 100 W (37,600 Wh).
TEST(DaysimTest, TwoTeamsStatic) {
  const Result r = Simulate(TwoTeams(), Policy::kStatic);
  EXPECT_EQ(r.jobs_denied, 1);
  EXPECT_EQ(r.jobs_completed, 1);
  EXPECT_EQ(r.used_milli_seconds, 8 * 3600 * kGpuSecond);
  EXPECT_EQ(r.delay_by_class.at("training").p95_seconds, 0);
  EXPECT_EQ(r.preemptions, 0);
  EXPECT_EQ(r.teams[0].energy_wh, 0);
  EXPECT_EQ(r.teams[1].energy_wh, 5'600);
  EXPECT_EQ(r.unallocated_energy_wh, 37'600);
  EXPECT_EQ(r.energy_wh, 43'200);
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
  EXPECT_EQ(r.lost_progress_milli_seconds, 16 * 60 * kGpuSecond);  // No checkpoint: all of it.
  EXPECT_EQ(r.used_milli_seconds, (16 * (60 + 3600) + 8 * 3600) * kGpuSecond);
  EXPECT_EQ(r.delay_by_class.at("training").p95_seconds, 60);  // b's wait.
  EXPECT_EQ(r.held_by_jobs_milli_seconds, r.held_by_inventory_milli_seconds);
}

// a checkpoints every 40 s (30 s of work, then 10 s writing; rate 750
// permille) and is reclaimed at its 60 s deadline. With a checkpoint on
// notice it writes from 50 s and keeps 50 x 0.75 = 37 s of work: no progress
// lost, 60 - 37 / 0.75 = 11 s of GPU time (its final checkpoint). With
// periodic checkpoints only it keeps the 30 s of the first interval and
// loses the 20 s it worked since (GPU time lost: 60 - 40 = 20 s).
TEST(DaysimTest, LostProgressIsWorkSinceTheLastCheckpoint) {
  for (bool on_notice : {true, false}) {
    SCOPED_TRACE(on_notice);
    Scenario s = TwoTeams();
    s.streams[0].checkpoint_seconds = 10;
    s.streams[0].checkpoint_interval_seconds = 40;
    s.streams[0].checkpoint_on_notice = on_notice;
    const Result r = Simulate(s, Policy::kArbiter);
    EXPECT_EQ(r.preemptions, 1);
    EXPECT_EQ(r.lost_progress_milli_seconds, (on_notice ? 0 : 16 * 20) * kGpuSecond);
    EXPECT_EQ(r.lost_milli_seconds, 16 * (on_notice ? 11 : 20) * kGpuSecond);
  }
}

// A serving team s and a batch team t, one node each. At 00:00 t asks for
// a 16-GPU gang (an hour of work) and s's autoscaler for its two replicas.
// Static: t is denied; s's first minute has no ready replica (60 s cold
// start): one breach minute, cold_start. Quota-only: t borrows s's node and,
// never reclaimed early, keeps it for its hour while s's replicas wait: the
// hour's 60 minutes breach, held by training, and so does the minute of the
// replicas' cold start after it, which continues the breach.
Scenario ServingAndTraining() {
  auto s = ParseScenario(R"(
name: serving-and-training
days: 1
warmup_days: 0
cluster: {nodes: 2, gpus_per_node: 8}
teams:
  - {name: s, gpus: 8, pool_class: serving}
  - {name: t, gpus: 8, pool_class: batch}
services:
  - {name: api, team: s, peak_rps: 100, replica_rps: 50, min_replicas: 2,
     cold_start_seconds: 60, base_p99_ms: 50, slo_p99_ms: 150, service_cv_permille: 500}
streams:
  - {name: gang, team: t, class: training, kind: daily, count: 1, members: 2,
     gpus_per_member: 8, min_work_seconds: 3600, max_work_seconds: 3600}
)");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(DaysimTest, BreachCausesNameWhatHeldTheCapacity) {
  const Result fixed = Simulate(ServingAndTraining(), Policy::kStatic);
  EXPECT_EQ(fixed.services[0].breach_minutes, 1);
  EXPECT_EQ(fixed.services[0].breach_minutes_by_cause.at("cold_start"), 1);

  const Result quota = Simulate(ServingAndTraining(), Policy::kQuotaOnly);
  const ServiceResult& api = quota.services[0];
  EXPECT_EQ(api.breach_minutes, 61);
  EXPECT_EQ(api.breach_minutes_by_cause.at("held:training"), 61);
  EXPECT_EQ(api.breach_minutes_by_cause.size(), 1u);
  EXPECT_EQ(api.formula_breach_minutes, 61);
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

// Breach minutes of all services, of `cause` when given.
int64_t BreachMinutes(const Result& r, const std::string& cause = "") {
  int64_t minutes = 0;
  for (const ServiceResult& v : r.services) {
    if (cause.empty()) {
      minutes += v.breach_minutes;
    } else if (auto it = v.breach_minutes_by_cause.find(cause);
               it != v.breach_minutes_by_cause.end()) {
      minutes += it->second;
    }
  }
  return minutes;
}

// The default week shows the claims docs/economics.md quotes; if a change to
// the core or the model moves them, the doc must be revisited.
TEST(DaysimTest, DefaultWeekShowsTheClaims) {
  const Scenario s = DefaultScenario(7);
  const Result fixed = Simulate(s, Policy::kStatic);
  const Result quota = Simulate(s, Policy::kQuotaOnly);
  const Result reactive = Simulate(s, Policy::kArbiterReactive);
  const Result arbiter = Simulate(s, Policy::kArbiter);
  const double waste = 1.0 - static_cast<double>(fixed.used_milli_seconds) /
                                 static_cast<double>(fixed.capacity_milli_seconds);
  EXPECT_GE(waste, 0.40);
  EXPECT_LE(waste, 0.60);
  EXPECT_GE(arbiter.used_milli_seconds * 10, fixed.used_milli_seconds * 17);
  EXPECT_GE(reactive.used_milli_seconds * 10, fixed.used_milli_seconds * 17);
  int64_t worst_morning = 0, formula_quota = 0, formula_arbiter = 0;
  for (size_t i = 0; i < s.services.size(); ++i) {
    worst_morning = std::max(worst_morning, quota.services[i].morning_p99_permille);
    formula_quota += quota.services[i].formula_breach_minutes;
    formula_arbiter += arbiter.services[i].formula_breach_minutes;
  }
  // Quota-only: the serving teams' minutes lost to the training that
  // borrowed their GPUs and is never reclaimed early: the largest cause.
  EXPECT_GE(worst_morning, 1000);
  EXPECT_GE(BreachMinutes(quota, "held:training") * 2, BreachMinutes(quota));
  EXPECT_GT(quota.externality_micros, 0);
  // Arbiter: no minute lost to training or spot work, a tenth of
  // quota-only's at most, and no more than static's but for the minutes a
  // spike's replicas wait for the work borrowing the serving pool to be
  // reclaimed.
  for (const Result* r : {&reactive, &arbiter}) {
    SCOPED_TRACE(PolicyName(r->policy));
    EXPECT_EQ(BreachMinutes(*r, "held:training"), 0);
    EXPECT_EQ(BreachMinutes(*r, "held:spot"), 0);
    EXPECT_LT(BreachMinutes(*r) * 5, BreachMinutes(quota));
    EXPECT_LE(BreachMinutes(*r) - BreachMinutes(*r, "held:batch_analytics"), BreachMinutes(fixed));
  }
  // Issue 24's targets for the full policy: at least 1.8x static's used
  // GPU-hours, no breach minute held by batch or spot work (whatever the
  // class: "held:" is only ever work other than inference), and at most
  // half the work arbiter-reactive loses to preemption, with fewer
  // preemptions.
  EXPECT_GE(arbiter.used_milli_seconds * 10, fixed.used_milli_seconds * 18);
  for (const ServiceResult& v : arbiter.services) {
    for (const auto& [cause, minutes] : v.breach_minutes_by_cause) {
      EXPECT_EQ(cause.rfind("held:", 0), std::string::npos) << v.name << " " << cause;
    }
  }
  EXPECT_LT(arbiter.preemptions, reactive.preemptions);
  EXPECT_LE(arbiter.lost_milli_seconds * 2, reactive.lost_milli_seconds);
  // The formula, as a cross-check, ranks the policies the same way.
  EXPECT_LE(formula_arbiter, formula_quota);
}

// A serving team s and a batch team t, one node each. s's load rises from
// a night trough to an afternoon peak of 8 replicas; t's training (4 GPUs,
// an hour, checkpointing) arrives all day and borrows s's idle GPUs. After
// the warm-up day (a Monday) has taught it the curve, Arbiter asks for the replicas
// ahead of the rise, so the borrowers are preempted earlier than under the
// reactive policy; the replicas' capacity is then ready in time.
Scenario RisingServing() {
  auto s = ParseScenario(R"(
name: rising-serving
days: 1
warmup_days: 1
start: "2026-11-03T00:00:00Z"  # A Tuesday: the warm-up day is a weekday like it.
cluster: {nodes: 2, gpus_per_node: 8}
teams:
  - {name: s, gpus: 8, pool_class: serving}
  - {name: t, gpus: 8, pool_class: batch}
services:
  - {name: api, team: s, peak_rps: 200, replica_rps: 50, min_replicas: 2,
     cold_start_seconds: 60, base_p99_ms: 50, slo_p99_ms: 150, service_cv_permille: 500}
streams:
  - {name: train, team: t, class: training, kind: poisson, per_day: 96, gpus_per_member: 4,
     min_work_seconds: 3600, max_work_seconds: 3600, checkpoint_seconds: 60,
     checkpoint_interval_seconds: 600, max_pending: 4}
)");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(DaysimTest, ProactiveReclaimStartsAheadOfTheRise) {
  const Scenario s = RisingServing();
  const Result reactive = Simulate(s, Policy::kArbiterReactive);
  const Result arbiter = Simulate(s, Policy::kArbiter);
  // The first preemption after the 04:00 trough.
  auto first_after_trough = [](const Result& r) {
    for (int64_t at : r.preempted_at) {
      if (at >= 4 * 3600) return at;
    }
    return int64_t{-1};
  };
  const int64_t ahead = first_after_trough(arbiter), late = first_after_trough(reactive);
  ASSERT_GT(late, 0);
  ASSERT_GT(ahead, 0);
  EXPECT_LT(ahead, late);
  EXPECT_EQ(arbiter.core_errors, 0);
  EXPECT_EQ(arbiter.held_by_jobs_milli_seconds, arbiter.held_by_inventory_milli_seconds);
  // Its replicas waited less for the borrowers to go.
  EXPECT_LE(BreachMinutes(arbiter), BreachMinutes(reactive));
}

// With headroom for its replicas, the serving pool's replicas never wait
// for the work it lends to: no breach minute is caused by batch or spot
// work, under either Arbiter policy.
TEST(DaysimTest, HeadroomKeepsBorrowersFromCausingBreaches) {
  Scenario s = ServingAndTraining();
  s.serving_headroom_milli = 2000;  // The two replicas' GPUs.
  for (Policy p : {Policy::kArbiterReactive, Policy::kArbiter}) {
    SCOPED_TRACE(PolicyName(p));
    const Result r = Simulate(s, p);
    for (const auto& [cause, minutes] : r.services[0].breach_minutes_by_cause) {
      EXPECT_EQ(cause.rfind("held:", 0), std::string::npos) << cause << " " << minutes;
    }
  }
}

// Two batch teams of one node each. The owner o runs an 8-GPU job of two
// hours at 10:00 every day, within its nominal; at 08:00 b asks for a
// 16-GPU gang of four hours without checkpoints, 8 GPUs beyond its nominal
// (o's idle node). Arbiter-reactive starts it at once and o takes its node
// back at 10:00 with the 30 s grace: the gang loses 2 h 30 s of 16 GPUs and
// runs again when o is done, at 12:00:30. After the warm-up Monday has taught it o's demand
// (8 GPUs from 10:00 to 12:00), Arbiter does not start what o would take
// back: the gang waits until the profile, interpolated between the centres
// of its quarter hours, has no demand of o left over its four hours, at
// 12:07:30 (the centre of the 12:00 quarter hour), and runs to its end.
Scenario LenderReturns() {
  auto s = ParseScenario(R"(
name: lender-returns
days: 1
warmup_days: 1
start: "2026-11-03T00:00:00Z"  # A Tuesday: the warm-up day is a weekday like it.
cluster: {nodes: 2, gpus_per_node: 8}
teams:
  - {name: o, gpus: 8, pool_class: batch}
  - {name: b, gpus: 8, pool_class: batch}
streams:
  - {name: own, team: o, class: training, kind: daily, count: 1, from_hour: 10, gpus_per_member: 8,
     min_work_seconds: 7200, max_work_seconds: 7200, busy_permille: 1000}
  - {name: report, team: b, class: batch_analytics, kind: daily, count: 1, from_hour: 8, members: 2,
     gpus_per_member: 8, min_work_seconds: 14400, max_work_seconds: 14400, busy_permille: 1000}
)");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(DaysimTest, BorrowerNotStartedWhereTheOwnerReturns) {
  const Scenario s = LenderReturns();
  const Result reactive = Simulate(s, Policy::kArbiterReactive);
  EXPECT_EQ(reactive.preemptions, 1);
  EXPECT_EQ(reactive.lost_progress_milli_seconds, 16 * (7200 + 30) * kGpuSecond);
  EXPECT_EQ(reactive.delay_by_class.at("batch_analytics").p50_seconds, 0);
  EXPECT_EQ(reactive.delay_by_class.at("training").p50_seconds, 30);  // o's wait for the grace.

  const Result arbiter = Simulate(s, Policy::kArbiter);
  EXPECT_EQ(arbiter.core_errors, 0);
  EXPECT_EQ(arbiter.preemptions, 0);
  EXPECT_EQ(arbiter.lost_milli_seconds, 0);
  EXPECT_EQ(arbiter.delay_by_class.at("batch_analytics").p50_seconds, 4 * 3600 + 450);
  EXPECT_EQ(arbiter.delay_by_class.at("training").p50_seconds, 0);
  EXPECT_EQ(arbiter.jobs_completed, 4);  // Both jobs, each day (the warm-up counts).
  // o's two hours and the gang's four, on 16 GPUs.
  EXPECT_EQ(arbiter.used_milli_seconds, (8 * 7200 + 16 * 14400) * kGpuSecond);
  EXPECT_EQ(arbiter.held_by_jobs_milli_seconds, arbiter.held_by_inventory_milli_seconds);
}

// A spot job and a job that is not spot both wait for the one node that a
// first job holds until 02:00. Arbiter-reactive queues the spot job in the
// pool, where the core admits it first at 02:00 (it is older) and the other
// job preempts it at once. Arbiter does not start spot work where work that
// is not spot waits: the spot job runs after the other, and nothing is
// preempted.
TEST(DaysimTest, SpotNotStartedWhereWaitingWorkTakesItBack) {
  auto s = ParseScenario(R"(
name: spot-behind-waiting-work
days: 1
warmup_days: 0
cluster: {nodes: 1, gpus_per_node: 8}
arbiter_spot_grace_seconds: 30
teams:
  - {name: a, gpus: 8, pool_class: batch}
streams:
  - {name: first, team: a, class: training, kind: daily, count: 1, gpus_per_member: 8,
     min_work_seconds: 7200, max_work_seconds: 7200, busy_permille: 1000}
  - {name: backfill, team: a, class: batch_analytics, kind: daily, count: 1, from_hour: 1,
     gpus_per_member: 8, min_work_seconds: 3600, max_work_seconds: 3600, checkpoint_seconds: 30,
     checkpoint_interval_seconds: 1800, spot: true, busy_permille: 1000}
  - {name: next, team: a, class: training, kind: daily, count: 1, from_hour: 1, gpus_per_member: 8,
     min_work_seconds: 3600, max_work_seconds: 3600, busy_permille: 1000}
)");
  ASSERT_TRUE(s.ok()) << s.status();
  const Result reactive = Simulate(*s, Policy::kArbiterReactive);
  EXPECT_EQ(reactive.preemptions, 1);
  EXPECT_EQ(reactive.delay_by_class.at("spot").p50_seconds, 3600);  // Started at 02:00, evicted.

  const Result arbiter = Simulate(*s, Policy::kArbiter);
  EXPECT_EQ(arbiter.preemptions, 0);
  EXPECT_EQ(arbiter.lost_milli_seconds, 0);
  EXPECT_EQ(arbiter.delay_by_class.at("spot").p50_seconds, 2 * 3600);  // After next: 03:00.
  EXPECT_EQ(arbiter.delay_by_class.at("training").p95_seconds, 3600);  // next, at 02:00.
  EXPECT_EQ(arbiter.jobs_completed, 3);
}

// A serving team with two nodes and a service of 2 replicas (whole GPUs)
// whose load triples within 30 s about four times a day; spot work of a
// batch team borrows the serving pool. Arbiter-reactive lends all it can, so
// a spike's replicas wait for spot work to vacate (held:spot). Arbiter
// learns the spikes (a rise within the reclaim's lead time that falls back
// within 15 minutes) on the warm-up day and keeps their room free: no
// replica waits for a borrower, and no borrower is evicted.
TEST(DaysimTest, LearntBurstsKeepTheirRoomFree) {
  auto s = ParseScenario(R"(
name: serving-bursts
days: 1
warmup_days: 1
start: "2026-11-03T00:00:00Z"
cluster: {nodes: 3, gpus_per_node: 8}
teams:
  - {name: s, gpus: 16, pool_class: serving}
  - {name: t, gpus: 8, pool_class: batch}
services:
  - {name: api, team: s, peak_rps: 50, trough_permille: 1000, replica_rps: 50, min_replicas: 2,
     cold_start_seconds: 60, base_p99_ms: 50, slo_p99_ms: 150, service_cv_permille: 500,
     spikes_per_week: 28, spike_factor: 3, spike_ramp_seconds: 30, spike_minutes: 5}
streams:
  - {name: backfill, team: t, class: batch_analytics, kind: poisson, per_day: 48, gpus_per_member: 4,
     min_work_seconds: 7200, max_work_seconds: 7200, checkpoint_seconds: 30,
     checkpoint_interval_seconds: 1800, spot: true, max_pending: 8}
)");
  ASSERT_TRUE(s.ok()) << s.status();
  auto held = [](const Result& r) {
    int64_t minutes = 0;
    for (const auto& [cause, m] : r.services[0].breach_minutes_by_cause) {
      if (cause.rfind("held:", 0) == 0) minutes += m;
    }
    return minutes;
  };
  const Result reactive = Simulate(*s, Policy::kArbiterReactive);
  EXPECT_GT(held(reactive), 0);
  EXPECT_GT(reactive.preemptions, 0);
  const Result arbiter = Simulate(*s, Policy::kArbiter);
  EXPECT_EQ(held(arbiter), 0);
  EXPECT_EQ(arbiter.preemptions, 0);
  EXPECT_GT(arbiter.services[0].breach_minutes, 0);  // The spikes' cold starts remain.
  EXPECT_GT(arbiter.used_milli_seconds, 0);
}

// Under the power-capped scenario's site budget the allocated draw, by the
// core's accounting, never exceeds it under any policy, minute by minute,
// and the budget binds (the draw comes within 5% of it).
TEST(DaysimTest, PowerNeverOverBudget) {
  auto s = LoadScenario(ARBITER_SOURCE_DIR "/bench/scenarios/power-capped-week.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  s->days = 1;
  ASSERT_GT(s->site_power_budget_watts, 0);
  const int64_t full =
      int64_t{s->cluster.nodes} * s->cluster.gpus_per_node * s->cluster.gpu_tdp_watts;
  EXPECT_LT(s->site_power_budget_watts, full);
  std::vector<Result> results;
  for (Policy p : {Policy::kQuotaOnly, Policy::kArbiter}) {
    SCOPED_TRACE(PolicyName(p));
    results.push_back(Simulate(*s, p));
    const Result& r = results.back();
    EXPECT_EQ(r.core_errors, 0);
    EXPECT_EQ(r.power_budget_watts, s->site_power_budget_watts);
    EXPECT_LE(r.max_draw_watts, r.power_budget_watts);
    EXPECT_GE(r.max_draw_watts * 100, r.power_budget_watts * 95);
    EXPECT_EQ(r.draw_watts_by_minute.size(), 1440u);
    for (int64_t w : r.draw_watts_by_minute) ASSERT_LE(w, r.power_budget_watts);
  }
  EXPECT_THAT(PowerCsv(results), HasSubstr("minute,quota-only_draw_watts,arbiter_draw_watts,"
                                           "budget_watts\n"));
}

}  // namespace
}  // namespace arbiter::daysim
