// Chargeback statements: per team and period, what it reserved and used,
// what that cost, what it borrowed, the energy it drew, the externality
// charges it paid and the credits it received, against its budget.
//
// Pure: no I/O, no clock reads. Every number is defined in
// docs/chargeback.md. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"

#include "core/externality.h"
#include "core/model.h"
#include "core/telemetry.h"

namespace arbiter::core {

// The price book as stored: every version of every price.
class PriceBook {
 public:
  explicit PriceBook(absl::Span<const Price> prices);
  // The burst price of `model` in `latency_class` pools in force at `at`.
  std::optional<int64_t> BurstAt(const std::string& model, LatencyClass latency_class,
                                 absl::Time at) const;
  // The price of `model` in `latency_class` pools in force at `at`.
  std::optional<int64_t> At(const std::string& model, LatencyClass latency_class,
                            absl::Time at) const;

 private:
  std::map<std::pair<std::string, LatencyClass>, std::map<absl::Time, int64_t>> prices_;
  std::map<std::pair<std::string, LatencyClass>, std::map<absl::Time, int64_t>> burst_prices_;
};

// One team's use of one GPU model in one pool by one workload class.
struct StatementLine {
  std::string pool;
  std::string gpu_model;
  WorkloadClass workload_class = WorkloadClass::kUnspecified;
  bool spot = false;                   // Spot work, priced at the model's SPOT price.
  bool burst = false;                  // Bursts above quota, at the burst price.
  int64_t reserved_milli_seconds = 0;  // Held, from the allocations.
  int64_t sampled_milli_seconds = 0;   // Of that, covered by telemetry.
  int64_t used_milli_seconds = 0;      // Busy, from telemetry.
  int64_t reserved_cost_micros = 0;    // Reserved time at the prices in force.
  int64_t idle_cost_micros = 0;        // The part of that cost sampled and not used.
  // Energy, milliwatt-hours: measured by telemetry over the sampled time,
  // estimated at the GPU model's TDP (by milli-GPU) over the rest; energy_mwh
  // is their sum.
  int64_t energy_mwh = 0;
  int64_t energy_measured_mwh = 0;
  int64_t energy_estimated_mwh = 0;
};

struct Statement {
  std::string team;
  absl::Time from;
  absl::Time to;
  std::vector<StatementLine> lines;  // By pool, model, class.
  // Sums of the lines.
  int64_t reserved_milli_seconds = 0;
  int64_t sampled_milli_seconds = 0;
  int64_t used_milli_seconds = 0;
  int64_t reserved_cost_micros = 0;
  int64_t idle_cost_micros = 0;
  int64_t energy_mwh = 0;
  int64_t energy_measured_mwh = 0;
  int64_t energy_estimated_mwh = 0;
  // Borrowed: held beyond the team's nominal quota, or lent by a serving
  // pool to a class other than inference, summed over pools.
  int64_t borrowed_milli_seconds = 0;
  // Externality charges booked in the period: paid as a causing team,
  // received as a victim (both >= 0).
  int64_t externality_charged_micros = 0;
  int64_t externality_credited_micros = 0;
  int64_t incidents_caused = 0;
  int64_t incidents_suffered = 0;
  // reserved cost + charges - credits.
  int64_t net_cost_micros = 0;
  // The hard monthly limit pro rata over the period; -1 without a budget.
  int64_t budget_micros = -1;
  int64_t remainder_micros = 0;  // budget - net cost; 0 without a budget.
};

struct ChargebackInputs {
  absl::Time from;
  absl::Time to;
  std::vector<HeldMember> held;  // Every member held at some time in [from, to).
  // Telemetry per (request, member) over [from, to): from the hourly
  // rollups, so REQUIRES from and to on whole hours.
  std::map<std::pair<int64_t, int32_t>, MemberUsage> usage;
  std::map<std::string, LatencyClass> pool_classes;
  // Per pool, the classes it takes only as borrowers (LentClasses).
  std::map<std::string, uint32_t> lent_classes;
  std::vector<Price> prices;
  // TDP per GPU model, watts: the energy estimate where telemetry is absent.
  std::map<std::string, int64_t> tdp_watts;
  // Nominal quota per (pool, team), all GPU models.
  std::map<std::pair<std::string, std::string>, int64_t> nominal_milli;
  std::vector<ExternalityCharge> charges;  // Booked in [from, to).
  std::vector<Budget> budgets;
  std::vector<std::string> teams;  // Every team gets a statement.
};

// The statement of every team in `inputs.teams` (and of any team found in
// the allocations or charges), by team name.
std::vector<Statement> BuildStatements(const ChargebackInputs& inputs);

// The hard monthly `limit` pro rata over [from, to): each calendar month
// (UTC) contributes its share of the limit by the seconds it overlaps.
int64_t ProRataBudget(int64_t monthly_limit_micros, absl::Time from, absl::Time to);

// One hour of the cluster (or a team): what was held and what was used.
struct HourPoint {
  absl::Time hour;
  int64_t reserved_milli_seconds = 0;
  int64_t used_milli_seconds = 0;
};

// Reserved milli-seconds per hour of [from, to) from `held` (`team` "" for
// all); used_milli_seconds left 0 for the caller to fill from rollups.
std::vector<HourPoint> HourlyReserved(absl::Span<const HeldMember> held, const std::string& team,
                                      absl::Time from, absl::Time to);

}  // namespace arbiter::core
