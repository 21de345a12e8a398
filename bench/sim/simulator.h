// daysim's simulator: drives the arbitration core (core/arbitration.h, the
// code arbiterd runs) through a scenario's week under one allocation policy,
// in simulated time, and measures what each policy delivers.
//
// Deterministic: the same scenario and seed give the same result, bit for
// bit. Thread-compatible; each Simulate call owns its own core::State.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "bench/sim/scenario.h"
#include "bench/sim/workload.h"

namespace arbiter::daysim {

enum class Policy {
  // One pool per team, holding its partition; no borrowing.
  kStatic = 0,
  // One shared pool, nominal quotas with cohort borrowing, no latency
  // classes or coexistence rules (every class may time-slice with every
  // other), and borrowers never reclaimed early (their grace is a day: they
  // run to completion, as with Kueue's default reclaimWithinCohort: Never).
  kQuotaOnly = 1,
  // Latency-class pools (serving lends to the scenario's classes, keeping
  // its headroom), the default coexistence rules, reclaim with the
  // scenario's grace, spot work, idle reclaim of interactive sessions,
  // guarantees as nominal quota instead of standing reservations, and
  // proactive reclaim: a demand profile of each service learnt from what it
  // asked for (never the future load), with its largest burst, and of each
  // team's demand in each pool; replicas asked for ahead of the predicted
  // rise by the grace plus their cold start; work started only where the
  // profiles say it will not be reclaimed before its time limit or next
  // checkpoint (else it waits with the arbiter), and spot work only on free
  // GPUs no waiting work takes (docs/economics.md).
  kArbiter = 2,
  // As kArbiter without the demand profile: replicas are asked for when the
  // load arrives, and lent capacity is reclaimed then.
  kArbiterReactive = 3,
};
// "static", "quota-only", "arbiter", "arbiter-reactive".
absl::string_view PolicyName(Policy p);
// Whether `p` is one of the Arbiter policies.
bool IsArbiter(Policy p);

struct DelayStats {
  int64_t jobs = 0;           // Arrived (replicas: requested).
  int64_t never_started = 0;  // Not admitted by the end (their wait so far counts).
  int64_t p50_seconds = 0;
  int64_t p95_seconds = 0;
};

struct ServiceResult {
  std::string name;
  std::string team;
  int64_t base_p99_ms = 0;
  int64_t slo_p99_ms = 0;
  // Minutes whose p99, by the queueing model, was over the SLO.
  int64_t breach_minutes = 0;
  // The breach minutes by cause; they add up to breach_minutes. Keys:
  // "held:<class>": a replica waited for capacity that work of that class
  // held in the service's pool (the class holding most of it);
  // "quota": a replica waited and only serving work held the pool (the
  // team's own quota or partition was full); "cold_start": replicas were
  // starting; "co_tenancy": a ready replica was slowed by a tenant of another
  // class on its GPU; "load": none of these. A minute that continues a
  // breach keeps the previous minute's cause unless a replica waits, since
  // the backlog outlives its cause.
  std::map<std::string, int64_t> breach_minutes_by_cause;
  // The worst weekday morning: the median of the minutes' p99 over 07:00 to
  // 11:00, over base_p99_ms, in permille.
  int64_t morning_p99_permille = 0;
  std::vector<int32_t> p99_ms_by_minute;  // One per simulated minute.
  int64_t incidents = 0;                  // Breached SLO windows.
  // The former p99 formula, kept as a cross-check on the same replicas:
  // base_p99_ms x max(0.5, (1 - target) / (1 - utilization)).
  int64_t formula_breach_minutes = 0;
  int64_t formula_morning_p99_permille = 0;
  std::vector<int32_t> formula_p99_ms_by_minute;
};

struct TeamResult {
  std::string name;
  int64_t allocated_milli_seconds = 0;
  int64_t used_milli_seconds = 0;
  int64_t reserved_cost_micros = 0;  // Allocated GPU-hours at the scenario's price.
  int64_t externality_charged_micros = 0;
  int64_t externality_credited_micros = 0;
  // Energy of the GPUs it held, at their busy share (ClusterSpec's power
  // model), watt-hours.
  int64_t energy_wh = 0;
};

struct Result {
  Policy policy = Policy::kStatic;
  int64_t capacity_milli_seconds = 0;
  // Sampled each minute over every allocation: held, and busy.
  int64_t allocated_milli_seconds = 0;
  int64_t used_milli_seconds = 0;
  // Conservation: what the jobs held, summed from their admissions and
  // releases, and what the core's inventory held, integrated over time.
  int64_t held_by_jobs_milli_seconds = 0;
  int64_t held_by_inventory_milli_seconds = 0;
  std::vector<int64_t> allocated_by_hour;  // Milli-GPU seconds per hour.
  std::vector<int64_t> used_by_hour;
  std::vector<ServiceResult> services;
  std::map<std::string, DelayStats> delay_by_class;  // By workload class name.
  int64_t preemptions = 0;
  // GPU time that preemptions made worthless: the progress lost since each
  // job's last checkpoint, and the restores and final checkpoints.
  int64_t lost_milli_seconds = 0;
  int64_t lost_progress_milli_seconds = 0;  // Of lost_milli_seconds: progress.
  // When each preemption took capacity back, seconds from the measured start.
  std::vector<int64_t> preempted_at;
  int64_t idle_reclaims = 0;
  int64_t incidents = 0;
  int64_t externality_micros = 0;  // Charged to causing teams, all incidents.
  std::vector<TeamResult> teams;
  // Energy of all GPUs over the measured days, watt-hours: the teams' plus
  // the idle power of what no one held.
  int64_t energy_wh = 0;
  int64_t unallocated_energy_wh = 0;
  // The allocated draw by the core's accounting (core/power.h: the TDP times
  // the allocated milli-GPU), watts: the highest at any instant of the
  // measured days, and the highest of each minute; the site's budget (0:
  // none).
  int64_t max_draw_watts = 0;
  std::vector<int64_t> draw_watts_by_minute;
  int64_t power_budget_watts = 0;
  int64_t jobs_completed = 0;
  int64_t jobs_denied = 0;
  int64_t core_calls = 0;
  int64_t core_errors = 0;  // Calls the core refused (a simulator bug if any).
};

// Runs `scenario` under `policy`. REQUIRES: ValidateScenario(scenario).ok().
Result Simulate(const Scenario& scenario, Policy policy);

// The latency model's queue: one replica, `servers` FIFO servers fed by one
// stream of requests. A request takes the server that frees first and waits
// for it while all are busy (M/G/c for exponential gaps). The state carries
// from one interval to the next: each server's backlog and the time to the
// next arrival. Seconds throughout. Thread-compatible.
class ReplicaQueue {
 public:
  struct Interval {
    double seconds = 0;
    double arrivals_per_second = 0;  // At this replica.
    // Gaps between arrivals are gamma distributed with this shape: 1 for a
    // Poisson stream, c for every c-th arrival of one (round robin over c).
    int32_t gap_shape = 1;
    // Service times at full speed: gamma, this mean and coefficient of
    // variation (1: exponential; 0: constant), stretched by `slowdown`.
    double mean_service_seconds = 0;
    double service_cv = 0;
    double slowdown = 1;
    // A request that would wait longer is refused and served by no one.
    double timeout_seconds = 1e9;
  };

  explicit ReplicaQueue(int32_t servers = 1) : free_at_(static_cast<size_t>(servers), 0.0) {}

  // Serves the requests arriving within `in`: appends each one's response
  // time (its wait plus its service; a refused one's: timeout_seconds) to
  // `responses`, and returns how many were refused.
  int64_t Run(const Interval& in, Rng& rng, std::vector<double>& responses);
  // How long a request arriving now would wait.
  double WaitSeconds() const;

 private:
  std::vector<double> free_at_;  // Per server: seconds from now until it is free.
  double next_arrival_ = -1;     // Seconds from now; negative: none drawn yet.
};

// A sampled response and the number of requests it stands for.
struct WeightedSample {
  double seconds = 0;
  double weight = 0;
};

// The weighted quantile: the smallest response with at least `q` of the
// samples' weight at or below it; 0 without samples. Reorders `samples`.
// REQUIRES: 0 < q < 1, weights > 0.
double WeightedQuantile(std::vector<WeightedSample>& samples, double q);

}  // namespace arbiter::daysim
