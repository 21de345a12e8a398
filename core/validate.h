// Input validation of domain values, independent of state. Each function
// returns OK or INVALID_ARGUMENT whose message starts with the offending
// field's API path (e.g. "shape.fraction.gpu_milli: ..."), so callers can
// surface it unchanged. Checks that need state (unknown team, memory beyond
// the GPU model) are made by the arbitration functions.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "core/model.h"
#include "core/power.h"

namespace arbiter::core {

inline constexpr size_t kMaxNameLength = 64;
inline constexpr size_t kMaxNodeNameLength = 128;
inline constexpr size_t kMaxIdempotencyKeyLength = 128;
// What an occurrence of a recurring reservation adds to its series' key:
// '@' and the occurrence's start in Unix seconds (up to 11 characters).
inline constexpr size_t kOccurrenceKeySuffix = 12;
inline constexpr size_t kMaxDescriptionLength = 256;
inline constexpr int32_t kMaxGangMembers = 1024;
inline constexpr int32_t kMaxWholeGpusPerMember = 64;
inline constexpr int32_t kMaxGpusPerNode = 64;
inline constexpr size_t kMaxAllowedModels = 16;
inline constexpr int64_t kMaxHostQuantity = int64_t{1} << 40;  // milli-CPU or MiB.
inline constexpr int64_t kMaxQuotaMilli = int64_t{1} << 50;
inline constexpr int32_t kMaxPriority = 1000;
inline constexpr int64_t kMaxGraceSeconds = 86'400;
// The longest burst above quota a pool may allow.
inline constexpr int64_t kMaxBurstSeconds = 86'400;
// A week: a starvation limit longer than that is a pool without one (0).
inline constexpr int64_t kMaxStarvationSeconds = 7 * 86'400;
inline constexpr int64_t kMaxDurationSeconds = 366 * 86'400;
inline constexpr int64_t kMaxUnixSeconds = 4'102'444'800;  // 2100-01-01.
// How far in the past a request's start_time may lie and still mean "now"
// (the caller's clock may run behind the arbiter's).
inline constexpr int64_t kMaxStartSkewSeconds = 300;

// Validates an identifier: 1..max_length characters of [A-Za-z0-9._-],
// starting with a letter or digit. `field` names it in the error.
[[nodiscard]] absl::Status ValidateName(absl::string_view field, absl::string_view value,
                                        size_t max_length = kMaxNameLength);
// INVALID_ARGUMENT "<field>: must be in [min, max], got v" unless
// min <= value <= max.
[[nodiscard]] absl::Status ValidateRange(absl::string_view field, int64_t value, int64_t min,
                                         int64_t max);
// Validates free text: at most kMaxDescriptionLength bytes of valid UTF-8
// without control characters.
[[nodiscard]] absl::Status ValidateDescription(absl::string_view field, absl::string_view value);

// Validates a claim's holder, the identity of a workload: 1..kMaxHolderLength
// characters of [A-Za-z0-9._:/@-], e.g. "pod:<namespace>/<name>" or "slurm:1234.0".
inline constexpr size_t kMaxHolderLength = 253;
[[nodiscard]] absl::Status ValidateHolder(absl::string_view field, absl::string_view holder);

// Validates a MIG profile name: 1..32 characters of [a-z0-9.+].
[[nodiscard]] absl::Status ValidateMigProfileName(absl::string_view field, absl::string_view value);
[[nodiscard]] absl::Status ValidateCluster(const Cluster& cluster);
[[nodiscard]] absl::Status ValidatePool(const Pool& pool);
// Validates a node registration; GPU allocation fields are ignored.
[[nodiscard]] absl::Status ValidateNode(const Node& node);
// Validates a request's time window against `now`: a start_time more than
// kMaxStartSkewSeconds in the past is refused (a window is never clamped to
// now), and so is a window that has already ended. Errors name start_time.
[[nodiscard]] absl::Status ValidateWindow(const CapacityRequestSpec& spec, absl::Time now);
[[nodiscard]] absl::Status ValidateTeam(const Team& team);
[[nodiscard]] absl::Status ValidateQuota(const Quota& quota);
[[nodiscard]] absl::Status ValidateRequestSpec(const CapacityRequestSpec& spec);
inline constexpr size_t kMaxSubjectLength = 256;
// A subject is 1..256 printable ASCII characters without spaces; "group:"
// must be followed by a valid name. Fields under "binding.".
[[nodiscard]] absl::Status ValidateRoleBinding(const RoleBinding& binding);
// A principal or "group:NAME", as for role bindings; `field` names it.
[[nodiscard]] absl::Status ValidateSubject(absl::string_view field, absl::string_view subject);
// Fields under "rule.".
[[nodiscard]] absl::Status ValidateAuthorityRule(const AuthorityRule& rule);
inline constexpr int64_t kMaxMicros = int64_t{1} << 53;
// Fields under "price." and "budget.".
[[nodiscard]] absl::Status ValidatePrice(const Price& price);
[[nodiscard]] absl::Status ValidateBudget(const Budget& budget);
// A watt budget: a scope, a name, 0..kMaxBudgetWatts watts.
[[nodiscard]] absl::Status ValidatePowerBudget(const PowerBudget& budget);

}  // namespace arbiter::core
