// SLOs, incidents and externality attribution: when a serving team's p99
// breaches its objective, who exerted pressure on it, and how the incident's
// cost is split among them.
//
// Pure: no I/O, no clock reads. docs/chargeback.md states the method.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include "core/model.h"
#include "core/telemetry.h"

namespace arbiter::core {

// A serving team's latency objective for one service in one pool.
struct Slo {
  std::string team;
  std::string service;
  std::string pool;
  int64_t p99_target_us = 0;  // > 0.
  // Reported windows are this long: 1 minute to 1 day.
  absl::Duration window = absl::Minutes(5);
  // The incident's cost per minute of breach; 0: the team's reserved cost
  // in the pool over the window.
  int64_t penalty_micros_per_minute = 0;
  bool operator==(const Slo&) const = default;
};

// What a serving platform observed over one window of a service.
struct LatencyWindow {
  std::string team;
  std::string service;
  absl::Time start;
  absl::Time end;
  int64_t p50_us = 0;
  int64_t p99_us = 0;
  int64_t requests_milli_per_second = 0;  // Request rate x 1000.
};

// The fields of an SLO, each named in INVALID_ARGUMENT (e.g. "slo.window").
// The longest service name an SLO names.
inline constexpr size_t kMaxServiceNameLength = 128;
// The largest latency a target or a report may give: one hour, in us.
inline constexpr int64_t kMaxLatencyMicros = int64_t{3'600'000'000};
// The largest request rate a report may give: a billion requests a second.
inline constexpr int64_t kMaxRequestsMilliPerSecond = int64_t{1'000'000'000'000};

// The team and service a window names: INVALID_ARGUMENT naming
// window.team or window.service.
absl::Status ValidateLatencyWindowNames(const LatencyWindow& w);

absl::Status ValidateSlo(const Slo& slo);
// A window for `slo`: INVALID_ARGUMENT naming the field (p50 above p99, a
// window that is not `slo.window` long, ...).
absl::Status ValidateLatencyWindow(const LatencyWindow& w, const Slo& slo);

// A request of the victim team that waited for admission in the SLO's pool
// over [from, until).
struct WaitingRequest {
  int64_t request_id = 0;
  int64_t gpu_milli = 0;  // The whole gang's.
  int32_t priority = 0;
  absl::Time from;
  absl::Time until = absl::InfiniteFuture();
};

// How an allocation pressed on the victim (docs/chargeback.md):
//   kBorrowed: borrowed capacity in the victim's pool (a team's use beyond
//     its nominal quota there, or, where more, what a serving pool lent it:
//     its members of classes other than inference) while the victim held
//     less than its own nominal, capped at the victim's shortfall;
//   kCoTenancy: soft-shared (MPS or time-sliced) milli on the GPUs the
//     victim's soft-shared members ran on;
//   kAdmissionDelay: lower-priority holds in the pool while a victim request
//     waited for admission (capped at what waited, less the borrowed part).
enum class PressureKind { kBorrowed = 0, kCoTenancy = 1, kAdmissionDelay = 2 };
absl::string_view PressureKindName(PressureKind k);  // "borrowed", ...

// One causing team's interference, in milli-GPU seconds per kind.
struct Interference {
  std::string team;
  int64_t borrowed_milli_seconds = 0;
  int64_t co_tenancy_milli_seconds = 0;
  int64_t admission_delay_milli_seconds = 0;
  std::vector<int64_t> request_ids;  // The allocations that pressed, sorted.
  int64_t total() const {
    return borrowed_milli_seconds + co_tenancy_milli_seconds + admission_delay_milli_seconds;
  }
};

// The method identifier stored with every charge.
inline constexpr char kAttributionMethod[] = "interference-gpu-seconds/v1";

// What the attribution reads.
struct AttributionInputs {
  Slo slo;
  LatencyWindow window;
  // Members of every team holding capacity in the SLO's pool at some time
  // in the window (members of other pools change nothing).
  std::vector<HeldMember> held;
  // The victim's requests that waited in the SLO's pool during the window.
  std::vector<WaitingRequest> waiting;
  // Nominal quota in the SLO's pool per team (all GPU models).
  std::map<std::string, int64_t> nominal_milli;
  // The classes the SLO's pool takes only as borrowers (LentClasses): what
  // it lends them counts as borrowed.
  uint32_t lent_classes = 0;
  // Price per GPU-hour of each GPU model in the SLO's pool (the price in
  // force at the window's start); models without a price cost nothing.
  std::map<std::string, int64_t> micros_per_gpu_hour;
};

struct Attribution {
  int64_t cost_micros = 0;
  std::string cost_basis;  // "penalty" or "reserved_cost".
  // Causing teams (never the victim), by name; empty when nobody pressed.
  std::vector<Interference> causes;
  // charges[i] is what causes[i] pays; they sum to cost_micros when there
  // is a cause, and the victim is credited that sum.
  std::vector<int64_t> charges_micros;
  int64_t attributed_micros() const;
};

// The incident's cost and its split. REQUIRES: inputs.window breaches
// inputs.slo (p99 over target).
Attribution AttributeIncident(const AttributionInputs& inputs);

// Splits `total` in proportion to `weights` (>= 0, not all 0) with the
// largest-remainder method: the parts sum to `total` exactly; ties go to
// the lower index.
std::vector<int64_t> SplitProRata(int64_t total, absl::Span<const int64_t> weights);

// Milli-GPU seconds of borrowed capacity (as for kBorrowed) each team held in
// `pool` over [from, to), from `held` (members of any pool).
std::map<std::string, int64_t> BorrowedMilliSeconds(
    absl::Span<const HeldMember> held, const std::string& pool, uint32_t lent_classes,
    const std::map<std::string, int64_t>& nominal_milli, absl::Time from, absl::Time to);

// Milli-GPU seconds `m` held in [from, to): milli x GPUs x whole microseconds
// of overlap / 1,000,000, rounded down.
int64_t HeldMilliSeconds(const HeldMember& m, absl::Time from, absl::Time to);

// An incident recorded in the ledger: a breached window and its cost split.
struct Incident {
  int64_t id = 0;
  Slo slo;
  LatencyWindow window;
  absl::Time recorded_at;
  Attribution attribution;
};

// One line of an incident's split: a charge (micros > 0) to a causing team
// or the credit (micros < 0) to the victim.
struct ExternalityCharge {
  int64_t incident_id = 0;
  std::string team;
  int64_t micros = 0;
  Interference interference;  // Zero for the credit.
  absl::Time booked_at;
};

// The charges and the credit of `incident`, in the order of its causes,
// credit last; empty when nobody pressed.
std::vector<ExternalityCharge> ChargesOf(const Incident& incident);

}  // namespace arbiter::core
