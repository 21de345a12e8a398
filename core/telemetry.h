// Telemetry: what was used of what was allocated. Samples of GPUs and MIG
// instances (DCGM-exporter or NVML readings, resolved to the inventory) are
// attributed to the allocations holding them; the results feed usage
// reports, idle detection and right-sizing advice.
//
// Pure: no I/O, no clock reads (time is a parameter). See docs/chargeback.md
// for the attribution rules stated here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include "core/model.h"

namespace arbiter::core {

// One reading of a GPU, or of one MIG instance on it, resolved to a node and
// GPU index. Unreported fields are -1.
struct GpuSample {
  absl::Time at;
  int64_t node_id = 0;
  int32_t gpu_index = 0;
  int32_t mig_instance = -1;         // GPU instance id (GPU_I_ID); -1: the whole GPU.
  std::string mig_profile;           // As the source names it, e.g. "1g.10gb"; "" for a GPU.
  absl::Duration interval;           // How long the reading stands for (the scrape interval).
  int32_t util_milli = -1;           // DCGM_FI_DEV_GPU_UTIL, 0..1000.
  int32_t engine_active_milli = -1;  // DCGM_FI_PROF_GR_ENGINE_ACTIVE, 0..1000.
  int64_t fb_used_mib = -1;          // DCGM_FI_DEV_FB_USED.
  int64_t fb_free_mib = -1;          // DCGM_FI_DEV_FB_FREE.
  int64_t power_mw = -1;             // DCGM_FI_DEV_POWER_USAGE, milliwatts.
  std::string pod;
  std::string pod_namespace;

  // The busy fraction the rollups use: graphics-engine activity where the
  // source reports it (it is defined for MIG instances), else utilization;
  // -1 when neither is reported.
  int32_t busy_milli() const { return engine_active_milli >= 0 ? engine_active_milli : util_milli; }
};

// One member of an allocation over the time it held its GPUs.
struct HeldMember {
  int64_t request_id = 0;
  int32_t member = 0;
  std::string team;
  std::string pool;
  WorkloadClass workload_class = WorkloadClass::kUnspecified;
  std::string gpu_model;
  int64_t node_id = 0;
  std::vector<int32_t> gpu_indices;
  int64_t gpu_milli = 0;  // Per GPU, as charged.
  int64_t gpu_memory_mib = 0;
  std::string mig_profile;  // "" unless a MIG instance.
  bool exclusive = false;
  bool preemptible = false;
  bool guaranteed = false;
  bool spot = false;   // Priced at the model's SPOT price.
  bool burst = false;  // A burst above quota, priced at the burst price.
  int32_t priority = 0;
  absl::Time from;                            // Admitted at.
  absl::Time until = absl::InfiniteFuture();  // Released at; infinite while held.
};

// What one member used over a window. Quantities are integers: milli-GPU
// seconds (a whole GPU held for one second is 1000), MiB, milliwatt-hours.
struct MemberUsage {
  int64_t request_id = 0;
  int32_t member = 0;
  int64_t allocated_milli_seconds = 0;  // Held: milli per GPU x GPUs x seconds.
  int64_t sampled_milli_seconds = 0;    // Of that, the part covered by samples.
  int64_t used_milli_seconds = 0;       // Busy fraction x its share x seconds.
  int32_t peak_busy_milli = 0;          // Highest busy reading of its GPUs or instance.
  int64_t peak_memory_mib = 0;          // Highest memory used of its GPUs or instance.
  int64_t energy_mwh = 0;               // Its share of its GPUs' energy.
};

// The usage of each member of `members` over [from, to), in the order of
// `members`, from `samples` (any order). Attribution:
//   - a sample at t counts, for its interval cut at the next sample of the
//     same GPU or instance and at `to`, for each member holding its GPU at t
//     (a sample before `from`, for the part of that in the window: so the
//     figures of consecutive windows add up to those of the whole, up to
//     rounding down once per window, given the samples from a reading's
//     span before each; peaks are the highest, MIG series averaged over
//     those seen in each window);
//   - whole GPUs and fractions read the GPU's own samples; a member's share
//     of a shared GPU is its milli over the milli of all members on it then;
//   - a MIG member reads the samples of instances of its profile on its GPU
//     (the same compute slices where the source renames the memory part,
//     e.g. "7g.79gb" for "7g.80gb"), averaged when several members hold
//     instances of that profile there, and weighed by its own milli; its
//     energy share is its milli of the GPU's power;
//   - samples with no busy reading add coverage for memory and power only.
std::vector<MemberUsage> RollUp(absl::Span<const HeldMember> members,
                                absl::Span<const GpuSample> samples, absl::Time from,
                                absl::Time to);

// Adds `u` to `sum` as rollups add up: times and energy summed, peaks the
// highest. request_id and member are left as they are.
void AddUsage(MemberUsage& sum, const MemberUsage& u);

// What to do with an allocation that stays idle.
enum class IdleAction {
  kReport = 0,   // Shown on reports only.
  kNotify = 1,   // Reported and its team is notified.
  kRelease = 2,  // Preemptible work: released after a notice period.
};
absl::string_view IdleActionName(IdleAction a);         // "report", "notify", "release".
IdleAction IdleActionFromName(absl::string_view name);  // kReport when unknown.

// Idle: busy under `threshold_milli` on every reading for `window`.
struct IdlePolicy {
  WorkloadClass workload_class = WorkloadClass::kUnspecified;
  int32_t threshold_milli = 50;
  absl::Duration window = absl::Hours(1);
  IdleAction action = IdleAction::kReport;
  absl::Duration notice = absl::Minutes(15);  // Before a release.
  bool operator==(const IdlePolicy&) const = default;
};

// The defaults per class, used where none is stored.
std::vector<IdlePolicy> DefaultIdlePolicies();
// `stored` over the defaults: one policy per class, by class.
std::vector<IdlePolicy> IdlePoliciesInForce(absl::Span<const IdlePolicy> stored);
// INVALID_ARGUMENT naming the field (policy.threshold_milli, ...).
absl::Status ValidateIdlePolicy(const IdlePolicy& policy);

struct IdleFinding {
  int64_t request_id = 0;
  std::string team;
  std::string pool;
  WorkloadClass workload_class = WorkloadClass::kUnspecified;
  int32_t peak_busy_milli = 0;     // Over the window, all members.
  int64_t idle_milli_seconds = 0;  // Held over the window.
  // The class's action narrowed to what the allocation allows: release only
  // for preemptible work (the only kind that may hold borrowed or lent
  // capacity past a reclaim), notify otherwise; guaranteed work is always
  // reported.
  IdleAction action = IdleAction::kReport;
};

// The policy in force for class `c`: its entry in `policies`, else the
// built-in default.
const IdlePolicy& IdlePolicyFor(WorkloadClass c, absl::Span<const IdlePolicy> policies);

// The verdict on a request (`first`: any of its members) that was held for
// the whole of `policy`'s window: idle when something was held, samples
// covered at least 90% of it, and no reading reached the threshold. The
// finding's action is the policy's, narrowed by what the request allows.
std::optional<IdleFinding> JudgeIdle(const HeldMember& first, const IdlePolicy& policy,
                                     int64_t allocated, int64_t sampled, int32_t peak);

// Requests whose members were all held for the whole window ending at `now`,
// covered by samples for at least 90% of it, and never busy at or above their
// class's threshold. `samples` must cover [now - longest window, now).
std::vector<IdleFinding> FindIdle(absl::Span<const HeldMember> members,
                                  absl::Span<const GpuSample> samples,
                                  absl::Span<const IdlePolicy> policies, absl::Time now);

// Right-sizing: the smallest form that would have carried the observed peaks
// with headroom.
struct RightSizeAdvice {
  int64_t request_id = 0;
  int32_t member = 0;
  int64_t current_milli = 0;  // Per GPU.
  int32_t peak_busy_milli = 0;
  int64_t peak_memory_mib = 0;
  // The advice: a MIG profile (when the model has one that fits) or a
  // fraction; "" and the current milli when nothing smaller fits.
  std::string advised_mig_profile;
  int64_t advised_milli = 0;
  int64_t advised_memory_mib = 0;
  int64_t saving_milli = 0;  // Per GPU: current - advised, >= 0.
};

// REQUIRES: `usage` is `member`'s usage; `model` is its GPU model.
// `headroom_milli`: extra over the peaks, in milli of the peak (200: 20%).
// Fractions are advised in steps of 50 milli.
RightSizeAdvice AdviseRightSize(const HeldMember& member, const MemberUsage& usage,
                                const GpuModel& model, int32_t headroom_milli);

}  // namespace arbiter::core
