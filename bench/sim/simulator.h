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

namespace arbiter::daysim {

enum class Policy {
  // One pool per team, holding its partition; no borrowing.
  kStatic = 0,
  // One shared pool, nominal quotas with cohort borrowing, no latency
  // classes or coexistence rules (every class may time-slice with every
  // other), and borrowers never reclaimed early (their grace is a day: they
  // run to completion, as with Kueue's default reclaimWithinCohort: Never).
  kQuotaOnly = 1,
  // Latency-class pools (serving lends to batch analytics only), the default
  // coexistence rules, reclaim with the scenario's grace, idle reclaim of
  // interactive sessions, and guarantees as nominal quota instead of
  // standing reservations.
  kArbiter = 2,
};
absl::string_view PolicyName(Policy p);  // "static", "quota-only", "arbiter".

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
  int64_t breach_minutes = 0;  // Minutes whose p99 was over the SLO.
  // Breach minutes while a replica the autoscaler asked for was waiting for
  // admission, or a replica ran next to another tenant: contention, as
  // opposed to the service's own load outrunning its cold start.
  int64_t contention_breach_minutes = 0;
  // The worst weekday morning: the median of the minutes' p99 over 07:00 to
  // 11:00, over base_p99_ms, in permille.
  int64_t morning_p99_permille = 0;
  std::vector<int32_t> p99_ms_by_minute;  // One per simulated minute.
  int64_t incidents = 0;                  // Breached SLO windows.
};

struct TeamResult {
  std::string name;
  int64_t allocated_milli_seconds = 0;
  int64_t used_milli_seconds = 0;
  int64_t reserved_cost_micros = 0;  // Allocated GPU-hours at the scenario's price.
  int64_t externality_charged_micros = 0;
  int64_t externality_credited_micros = 0;
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
  int64_t lost_milli_seconds = 0;  // Work lost to preemptions (and restore time).
  int64_t idle_reclaims = 0;
  int64_t incidents = 0;
  int64_t externality_micros = 0;  // Charged to causing teams, all incidents.
  std::vector<TeamResult> teams;
  int64_t jobs_completed = 0;
  int64_t jobs_denied = 0;
  int64_t core_calls = 0;
  int64_t core_errors = 0;  // Calls the core refused (a simulator bug if any).
};

// Runs `scenario` under `policy`. REQUIRES: ValidateScenario(scenario).ok().
Result Simulate(const Scenario& scenario, Policy policy);

}  // namespace arbiter::daysim
