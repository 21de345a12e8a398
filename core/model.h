// The domain model of Arbiter: catalog, inventory, governance and capacity
// requests, as plain value types. Quantities are integers in milli-units
// (1000 milli-GPU = one GPU, 1000 milli-CPU = one core) or MiB.
//
// Thread-compatible value types; no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "core/mig.h"
#include "core/recurrence.h"

namespace arbiter::core {

inline constexpr int64_t kMilliPerGpu = 1000;

enum class LatencyClass { kUnspecified = 0, kServing = 1, kBatch = 2, kSpot = 3, kDev = 4 };
enum class WorkloadClass {
  kUnspecified = 0,
  kTraining = 1,
  kInference = 2,
  kBatchAnalytics = 3,
  kExperimentation = 4,
};
// Where a gang's members must sit relative to each other.
enum class Topology { kAny = 0, kSameNode = 1, kSameDomain = 2 };

enum class RequestState {
  kUnspecified = 0,
  kAdmitted = 1,
  kQueued = 2,
  kDenied = 3,
  kReleased = 4,
  kCancelled = 5,
  // Admitted work told to vacate by `CapacityRequest::preempt_deadline`; it
  // holds its capacity until it releases or the deadline passes.
  kPreempting = 6,
  kPreempted = 7,
  // An advance reservation: holds its GPUs for [start_at, start_at +
  // duration) and is decided as a new request when start_at comes.
  kReserved = 8,
  // Needs an approval that an eligible authority has not given yet; holds
  // nothing. Expires at `approval_deadline`.
  kPendingApproval = 9,
};

// Stable lower-case names, used in the database and in logs.
absl::string_view LatencyClassName(LatencyClass c);
absl::string_view WorkloadClassName(WorkloadClass c);
absl::string_view RequestStateName(RequestState s);
absl::string_view TopologyName(Topology t);  // "any", "same_node", "same_domain".
// Inverse of the above; kUnspecified for an unknown name.
LatencyClass LatencyClassFromName(absl::string_view name);
WorkloadClass WorkloadClassFromName(absl::string_view name);
RequestState RequestStateFromName(absl::string_view name);
// kAny for an unknown name.
Topology TopologyFromName(absl::string_view name);

// True for states that hold no capacity and never change again.
bool IsFinal(RequestState s);
// True for states whose placements are charged to the inventory.
bool HoldsCapacity(RequestState s);

// A GPU model of the catalog (docs/catalog.md): data, set through the API
// (SetGpuModel) from the shipped catalog file or by an administrator.
struct GpuModel {
  std::string name;
  int64_t memory_mib = 0;
  int32_t sm_count = 0;  // Streaming multiprocessors (or compute units).
  int32_t tdp_watts = 0;
  bool mig_capable = false;
  // MIG profiles with their placement rules. A model stored before the
  // catalog was data (an empty table) gets the built-in table (core/mig.h)
  // when loaded.
  std::vector<MigProfile> mig_profiles;
  std::string vendor = "nvidia";  // "nvidia", "amd", ...
  // GPUs in one NVLink (or Infinity Fabric) domain; 0: unknown or none.
  int32_t nvlink_domain_size = 0;

  bool operator==(const GpuModel&) const = default;
};

// Fills `model.mig_profiles` from the built-in table when the model is
// MIG-capable and has none.
void AttachBuiltinMigProfiles(GpuModel& model);

struct Cluster {
  std::string name;
  std::string description;
};

inline constexpr int64_t kDefaultReclaimGraceSeconds = 30;
// One hour: longer than a queue pass ever takes, short enough that a gang
// passed over by smaller work is noticed within a working day's hour.
inline constexpr int64_t kDefaultStarvationLimitSeconds = 3600;

// How a pool's queue is admitted (see AdmitQueued in core/arbitration.cc and
// docs/queueing.md). Every policy walks the queue in the same order.
enum class QueueingPolicy {
  kUnspecified = 0,
  // The head (the first request in order that waits for capacity, or one
  // waiting longer than the starvation limit) is planned a start from the
  // known ends of what holds the pool, and the GPUs it will take are held
  // for it from then; work behind it is admitted only where it does not
  // delay that start. The default.
  kBackfill = 1,
  // Whatever fits is admitted; a head that does not fit is passed over.
  kBestEffort = 2,
  // Nothing behind a head that waits for capacity is admitted.
  kStrict = 3,
};
absl::string_view QueueingPolicyName(QueueingPolicy p);  // "backfill", ...
// kUnspecified for an unknown name.
QueueingPolicy QueueingPolicyFromName(absl::string_view name);

// How a pool takes the work of one workload class (docs/pools.md).
enum class ClassAdmission {
  kUnspecified = 0,
  kAdmit = 1,   // As the pool's own work.
  kBorrow = 2,  // Only as preemptible work that the pool's own classes take back.
  kDeny = 3,
};
absl::string_view ClassAdmissionName(ClassAdmission a);  // "admit", "borrow", "deny".
// kUnspecified for an unknown name.
ClassAdmission ClassAdmissionFromName(absl::string_view name);

// One entry of a pool's class-to-pool matrix.
struct PoolClassRule {
  WorkloadClass workload_class = WorkloadClass::kUnspecified;
  ClassAdmission admission = ClassAdmission::kUnspecified;
  // When set, the rule holds only while the window is open ("weekdays
  // 01:00-06:00 Europe/Berlin"); outside it the class takes the pool's
  // default. Work a windowed rule let in that the default would not admit
  // is reclaimed when its occurrence closes (LENDING_WINDOW_CLOSED).
  std::optional<RecurringWindow> window;
  bool operator==(const PoolClassRule&) const = default;
};

// Capacity of one GPU model that a SERVING pool keeps free for the classes
// it admits (docs/pools.md): work of other classes, and spot work, may take
// a GPU of the model only while the pool's free milli-GPU of it stays at
// least `milli`. A MIG instance or fraction counts by its milli-GPU.
struct Headroom {
  std::string gpu_model;
  int64_t milli = 0;
  bool operator==(const Headroom&) const = default;
};

struct Pool {
  std::string name;
  LatencyClass latency_class = LatencyClass::kUnspecified;
  std::string description;
  // SERVING pools only: the other workload classes they lend to, always as
  // preemptible capacity (the same as a kBorrow rule for each).
  std::vector<WorkloadClass> lends_to;
  // The class-to-pool rules set for this pool, at most one per class; a
  // class without one takes the default of the pool's latency class (see
  // AdmissionOf).
  std::vector<PoolClassRule> class_rules;
  // Least time a victim of preemption or reclaim gets to vacate.
  int64_t reclaim_grace_seconds = kDefaultReclaimGraceSeconds;
  // The time spot work gets to vacate when preempted, 0..86400 (0: at
  // once); unset: reclaim_grace_seconds. Spot work's checkpoint seconds are
  // not added: spot capacity may go at this notice.
  std::optional<int64_t> spot_grace_seconds;
  // SERVING pools only: the burst headroom, at most one entry per model.
  std::vector<Headroom> headroom;
  // The longest burst above quota into the headroom a request may ask for
  // (CapacityRequestSpec::burst_seconds); 0: bursting is not allowed.
  int64_t max_burst_seconds = 0;
  // SERVING pools only: learn the demand of the pool's own classes per
  // quarter hour of the week and reclaim lent capacity ahead of a forecast
  // rise, by reclaim_grace_seconds + cold_start_seconds (docs/pools.md,
  // "Proactive reclaim").
  bool proactive_reclaim = false;
  // Seconds a serving replica needs from getting its GPU to serving, 0..86400.
  int64_t cold_start_seconds = 0;
  QueueingPolicy queueing = QueueingPolicy::kBackfill;
  // kBackfill: a request queued for capacity longer than this becomes the
  // head; 0: never (the head is always the first in order).
  int64_t starvation_limit_seconds = kDefaultStarvationLimitSeconds;
  // Enforcement (docs/enforcement.md). An admitted allocation whose members
  // are not all claimed this long after admission ends UNCLAIMED; 0: claims
  // are not required.
  int64_t claim_deadline_seconds = 0;
  // A claim's lease: an allocation one of whose claims has not been renewed
  // for this long ends LEASE_EXPIRED; 0: claims do not expire.
  int64_t lease_seconds = 0;
};

// How `pool` takes work of class `c`: its rule for `c` if it has one, else
// kBorrow for a class in `lends_to`, else the default of its latency class:
// a SERVING pool admits inference and denies the rest; every other pool
// denies inference and admits the rest.
ClassAdmission AdmissionOf(const Pool& pool, WorkloadClass c);
// As AdmissionOf at time `now`: a windowed rule holds only while its window
// is open, the default otherwise.
ClassAdmission AdmissionAt(const Pool& pool, WorkloadClass c, absl::Time now);
// The pool's rule for `c`, or nullptr when it has none (lends_to aside).
const PoolClassRule* ClassRuleOf(const Pool& pool, WorkloadClass c);
// The default admission of `c` on `pool`'s latency class, rules aside.
ClassAdmission DefaultAdmission(const Pool& pool, WorkloadClass c);
struct CapacityRequest;
// When admitted `request` must give back what a windowed rule of `pool`
// lent it: the end of the occurrence it was admitted in (its admission time
// when it was admitted outside one, as after a rule change).
// InfiniteFuture when no windowed rule lent it.
absl::Time LendingEnds(const Pool& pool, const CapacityRequest& request);
// The headroom `pool` keeps of `model`, in milli-GPU; 0 when none.
int64_t HeadroomOf(const Pool& pool, const std::string& model);
// The classes `pool` takes only as borrowers (kBorrow): bit c for
// WorkloadClass c. Their work counts as borrowed in chargeback and
// attribution.
uint32_t LentClasses(const Pool& pool);
// Whether `c`'s admission on `pool` is its rule (true) or a default.
bool HasClassRule(const Pool& pool, WorkloadClass c);
// The time a victim of class `spot` gets in `pool`, before its own
// checkpoint seconds (added to non-spot victims only).
int64_t VictimGraceSeconds(const Pool& pool, bool spot);

// A GPU as registered (its model), plus what is allocated on it.
struct Gpu {
  int32_t index = 0;
  std::string model;
  std::string uuid;                  // "GPU-..." as NVML reports it; "" when not registered.
  int64_t memory_mib = 0;            // From the catalog at registration.
  int64_t allocated_milli = 0;       // 0..1000.
  int64_t allocated_memory_mib = 0;  // 0..memory_mib.
  int32_t tenants = 0;               // Allocations on this GPU.
  bool exclusive = false;            // Held whole by one allocation.
  // MIG layout; empty when the GPU is not partitioned. Changes only while
  // `tenants` is 0.
  std::vector<MigInstance> mig_layout;
  // MIG placements the node reported for this GPU; empty: the model's table.
  std::vector<MigPlacementReport> reported_mig;
  // The profiles this GPU offers when it has reports (set at registration);
  // see State::MigProfilesOf.
  std::vector<MigProfile> mig_profiles;
  // Allocations on this GPU by workload class (index: WorkloadClass).
  std::array<int32_t, 5> class_tenants{};
  // Windows [start, end) for which advance reservations hold this GPU whole;
  // work may use it only if it ends before each of them starts.
  std::vector<std::pair<absl::Time, absl::Time>> held;

  int64_t free_milli() const { return kMilliPerGpu - allocated_milli; }
  int64_t free_memory_mib() const { return memory_mib - allocated_memory_mib; }
  bool empty() const { return tenants == 0; }
  // The workload classes on this GPU: bit c for WorkloadClass c.
  uint32_t class_mask() const {
    uint32_t mask = 0;
    for (size_t c = 0; c < class_tenants.size(); ++c) {
      if (class_tenants[c] > 0) mask |= uint32_t{1} << c;
    }
    return mask;
  }
};

// Whether a node can run work, as the arbiter last learned it
// (docs/nodes.md).
enum class NodeHealth {
  kHealthy = 0,
  // Its agent's heartbeats stopped for longer than the heartbeat timeout;
  // its allocations stand (their leases decide), nothing new is placed.
  kUnreachable = 1,
  // Marked failed by an operator or a controller: its allocations ended
  // NODE_FAILED at `failed_at`; nothing is placed until it is uncordoned.
  kFailed = 2,
};
// A heartbeating node turns unreachable after this long without a heartbeat
// (arbiterd --node_heartbeat_timeout).
inline constexpr absl::Duration kDefaultNodeHeartbeatTimeout = absl::Seconds(60);

absl::string_view NodeHealthName(NodeHealth h);         // "healthy", ...
NodeHealth NodeHealthFromName(absl::string_view name);  // kHealthy if unknown.

struct Node {
  int64_t id = 0;  // Assigned by the arbiter; stable across restarts.
  std::string cluster;
  std::string name;
  std::string pool;
  std::string topology_domain;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  // Lifecycle. A cordoned node takes no new placements; a draining one is
  // cordoned and its allocations have notice to vacate by `drain_deadline`
  // (InfinitePast: not draining).
  bool cordoned = false;
  NodeHealth health = NodeHealth::kHealthy;
  absl::Time drain_deadline = absl::InfinitePast();
  absl::Time failed_at = absl::InfinitePast();  // kFailed: when it failed.
  // The last heartbeat of its agent; InfinitePast for a node no agent
  // heartbeats for (it never turns unreachable). Durable only as "has
  // heartbeats": a new leader counts each such node's time from its start.
  absl::Time last_heartbeat = absl::InfinitePast();
  // Removed nodes keep their slot in State::nodes() until the next reload
  // and are in no pool, index or lookup.
  bool removed = false;
  int64_t allocated_cpu_milli = 0;
  int64_t allocated_memory_mib = 0;
  std::vector<Gpu> gpus;
  // Gang members on this node by workload class (index: WorkloadClass).
  std::array<int32_t, 5> class_members{};
  // Host capacity advance reservations hold on this node, each for its
  // window [start, end): work whose run overlaps a window may use only what
  // is left beside it (placement sums every overlapping hold).
  struct HostHold {
    absl::Time start;
    absl::Time end;
    int64_t cpu_milli = 0;
    int64_t memory_mib = 0;
    bool operator==(const HostHold&) const = default;
  };
  std::vector<HostHold> host_held;

  int64_t free_cpu_milli() const { return cpu_milli - allocated_cpu_milli; }
  int64_t free_memory_mib() const { return memory_mib - allocated_memory_mib; }
  // Whether new work may be placed here.
  bool schedulable() const { return !removed && !cordoned && health == NodeHealth::kHealthy; }
  bool draining() const { return drain_deadline != absl::InfinitePast(); }
  // The model of all its GPUs; empty when they are of several models, or
  // when it has none.
  const std::string& gpu_model() const {
    static const std::string kNone;
    if (gpus.empty()) return kNone;
    for (const Gpu& g : gpus) {
      if (g.model != gpus.front().model) return kNone;
    }
    return gpus.front().model;
  }
  // Whether anything is allocated on it.
  bool busy() const {
    if (allocated_cpu_milli > 0 || allocated_memory_mib > 0) return true;
    for (const Gpu& g : gpus) {
      if (!g.empty()) return true;
    }
    return false;
  }
};

// A change to a registered node (a registration itself is a Node change).
enum class NodeEvent {
  kUpdate = 0,  // Topology domain, host capacity, GPU UUIDs and MIG reports.
  kCordon = 1,
  kUncordon = 2,  // Also clears a drain and a failure.
  kDrain = 3,
  kFail = 4,
  kUnreachable = 5,  // Heartbeats stopped.
  kReachable = 6,    // Heartbeats again (or the first one).
  kRemove = 7,
};
absl::string_view NodeEventName(NodeEvent e);  // "update", "cordon", ...

struct NodeWrite {
  Node node;  // The node after the event.
  NodeEvent event = NodeEvent::kUpdate;
};

struct Team {
  std::string name;
  std::string parent;  // Empty for a root.
  int64_t weight_milli = 1000;

  bool operator==(const Team&) const = default;
};

// Limits meaning "no limit" (borrowing) or "all of nominal" (lending).
inline constexpr int64_t kUnlimited = -1;

// A team's quota in a pool for one GPU model, or for every model of the pool
// that has no quota of its own (`gpu_model` empty).
//
// Teams under the same root team form a cohort. Of its nominal quota a team
// keeps `nominal - lending_limit` for itself alone and lends the rest to the
// cohort while it does not use it; a team may use up to `nominal +
// borrowing_limit`, as long as the cohort's total use beyond what its teams
// keep for themselves stays within what they lend. A team that wants its
// lent quota back reclaims it from borrowers by preemption.
//
// Cohorts nest: every team heads the cohort of its subtree (itself and the
// teams under it), and the cohort limits bound that subtree as a whole
// (core/quota_book.h has the arithmetic):
// - `cohort_lending_limit`: of what the subtree's teams lend, at most this
//   much goes to teams outside the subtree; the rest stays lent within it.
// - `cohort_borrowing_limit`: the subtree's use beyond what its teams keep
//   stays within what they lend plus this much borrowed from outside.
// Unset (kUnlimited), a subtree lends all and borrows without a limit of its
// own: a tree without cohort limits is one flat cohort at its root.
struct Quota {
  std::string team;
  std::string pool;
  int64_t nominal_milli = 0;
  std::string gpu_model;                              // Empty: every model without its own quota.
  int64_t borrowing_limit_milli = 0;                  // kUnlimited: no limit.
  int64_t lending_limit_milli = kUnlimited;           // kUnlimited: all of nominal.
  int64_t cohort_borrowing_limit_milli = kUnlimited;  // kUnlimited: no limit.
  int64_t cohort_lending_limit_milli = kUnlimited;    // kUnlimited: all of it.

  // What the team keeps for itself and what it lends.
  int64_t lendable_milli() const;
  int64_t guaranteed_milli() const { return nominal_milli - lendable_milli(); }
  // Most the team may hold; kUnlimited when borrowing is unlimited.
  int64_t ceiling_milli() const;

  bool operator==(const Quota&) const = default;
};

// The one workload that holds a member of an admitted allocation: an
// enforcer's claim, under a lease the enforcer renews (ClaimAllocation,
// RenewLease).
struct Claim {
  int32_t member = 0;
  // The workload's identity: "pod:<namespace>/<name>" (Kubernetes),
  // "slurm:<job>.<step>" or an opaque id (ValidateHolder).
  std::string holder;
  absl::Time claimed_at = absl::InfinitePast();
  // The last renewal (claimed_at at first). Held in memory, not written: a
  // state loaded from the store renews every lease at the load (GraceLeases).
  absl::Time renewed_at = absl::InfinitePast();

  bool operator==(const Claim&) const = default;
};

// A fraction of one shared GPU.
struct GpuFraction {
  int64_t gpu_milli = 0;
  int64_t memory_mib = 0;
  bool operator==(const GpuFraction&) const = default;
};

// One MIG instance of a profile (e.g. "3g.40gb") on a MIG-capable GPU.
struct MigShape {
  std::string profile;
  // Milli-GPU charged per instance: the profile's SM share on the allowed
  // model where it is largest. Resolved from the catalog; not part of the
  // request's body.
  int64_t milli = 0;
};

// A model to serve, from which the arbiter computes the GPU memory a member
// needs and chooses its form (core/model_sizing.h). Byte sizes are in
// milli-bytes (2000 = FP16, 500 = 4-bit).
struct ModelProfile {
  int64_t parameters = 0;
  int64_t bytes_per_parameter_milli = 0;
  int32_t layers = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
  int64_t kv_bytes_per_element_milli = 0;
  int64_t token_budget = 0;  // Tokens held in the KV cache at once.
  int64_t overhead_mib = 0;  // Activations, CUDA context, fragmentation.
  bool operator==(const ModelProfile&) const = default;
};

// What one gang member needs: `whole_gpus` exclusive GPUs on one node, one
// `fraction` of a shared GPU, or one MIG instance; plus host CPU and memory
// on the same node.
struct MemberShape {
  std::variant<int32_t, GpuFraction, MigShape> gpu = int32_t{1};
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;

  bool is_whole() const { return std::holds_alternative<int32_t>(gpu); }
  int32_t whole_gpus() const { return std::get<int32_t>(gpu); }
  const GpuFraction& fraction() const { return std::get<GpuFraction>(gpu); }
  bool is_mig() const { return std::holds_alternative<MigShape>(gpu); }
  const MigShape& mig() const { return std::get<MigShape>(gpu); }
  bool is_fraction() const { return std::holds_alternative<GpuFraction>(gpu); }
  // Milli-GPU one member holds in total.
  int64_t gpu_milli() const;
};

// What a caller asks for. Everything needed to decide; nothing decided yet.
struct CapacityRequestSpec {
  std::string idempotency_key;
  std::string team;
  std::string pool;
  WorkloadClass workload_class = WorkloadClass::kUnspecified;
  int32_t members = 1;
  MemberShape shape;
  std::vector<std::string> gpu_models;  // Empty: any model in the pool.
  // kSameNode: every member on one node; kSameDomain: every member in one
  // topology domain (NVLink domain or rack; a node without one is its own).
  Topology topology = Topology::kAny;
  // When set, the request was made with a model profile: `shape.gpu` is the
  // form the arbiter chose for it, and the profile is what identifies the
  // request's body.
  std::optional<ModelProfile> model_profile;
  std::string description;
  // Higher runs first and may preempt lower of the same team.
  int32_t priority = 0;
  // Whether the work may be preempted (by reclaim, higher priority, or a
  // serving pool taking its capacity back). Borrowing and running on a
  // serving pool as another class require it.
  bool preemptible = false;
  // Seconds to checkpoint and restore the work; time between checkpoints
  // (0: the work does not checkpoint, so a preemption loses all of it).
  int64_t checkpoint_seconds = 0;
  int64_t checkpoint_interval_seconds = 0;
  // Executive-sponsored: never a victim of preemption.
  bool guaranteed = false;
  // Spot capacity (docs/pools.md): preemptible (set with it), charged at
  // the model's SPOT price, preempted before any other work of its pool by
  // any work that is not spot, with the pool's spot grace; it never
  // preempts anything itself: it waits. Every request on a SPOT pool is spot.
  bool spot = false;
  // Beyond its quota, the request may take the pool's headroom for at most
  // this many seconds (docs/pools.md), charged at the burst price; 0: no
  // burst. Only for a class the pool admits, never with `spot`.
  int64_t burst_seconds = 0;
  // A recurring reservation (docs/quotas-and-preemption.md, "Recurring reservations"):
  // one reservation per occurrence of the window, each for the whole
  // occurrence. As asked, start_at and duration are unset; the arbiter sets
  // them to the first occurrence that has not ended (from now when it is
  // under way), and books the next occurrence when one starts.
  std::optional<RecurringWindow> recurrence;
  // Advance reservation: when the work starts (InfinitePast: now).
  absl::Time start_at = absl::InfinitePast();
  // Declared run time; ZeroDuration: open-ended (until released). Work with
  // a declared end may backfill capacity that a reservation holds later.
  absl::Duration duration = absl::ZeroDuration();

  // Milli-GPU of the whole gang.
  int64_t total_gpu_milli() const;
  // Whether the request may use GPUs of `model`.
  bool allows_model(const std::string& model) const;
};

// Where one gang member sits. For whole GPUs `gpu_milli` is 1000 per GPU and
// `gpu_memory_mib` each GPU's full memory; for fractions and MIG instances
// one GPU index.
struct Placement {
  int32_t member = 0;
  int64_t node_id = 0;
  std::vector<int32_t> gpu_indices;
  int64_t gpu_milli = 0;       // Per GPU.
  int64_t gpu_memory_mib = 0;  // Per GPU.
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  bool exclusive = false;  // Whole GPUs held alone.
  // MIG: the instance's profile and start slot, and, when this decision
  // (re)partitions the GPU, the new layout. Empty/-1 otherwise.
  std::string mig_profile;
  int32_t mig_start = -1;
  std::vector<MigInstance> mig_new_layout;
  // True when this decision removes the GPUs' MIG layouts (they were empty).
  bool mig_layout_cleared = false;
  // The class of the work placed (from its request; not stored separately).
  WorkloadClass workload_class = WorkloadClass::kUnspecified;
  bool operator==(const Placement&) const = default;
};

// Roles a principal may hold, each within a scope (see RoleBinding).
enum class Role {
  kUnspecified = 0,
  kPlatformAdmin = 1,  // Everything, everywhere.
  kPoolAuthority = 2,  // Quotas of a pool; approves what needs the pool's authority.
  kTeamAdmin = 3,      // A team (and its sub-teams): requests, sub-teams.
  kTeamMember = 4,     // A team (and its sub-teams): requests and releases.
  kFinance = 5,        // Reads usage, prices and budgets.
  kAuditor = 6,        // Reads everything, changes nothing.
  kAgent = 7,          // Telemetry only.
};
// What a binding applies to: the whole installation, a team and every team
// under it (a division is a team with sub-teams), or one pool.
enum class ScopeKind { kUnspecified = 0, kOrg = 1, kTeam = 2, kPool = 3 };

absl::string_view RoleName(Role r);            // "platform_admin", ...
absl::string_view ScopeKindName(ScopeKind k);  // "org", "team", "pool".
Role RoleFromName(absl::string_view name);     // kUnspecified when unknown.
ScopeKind ScopeKindFromName(absl::string_view name);

// Grants `role` within a scope to `subject`: a principal (as its certificate
// names it, e.g. "spiffe://arbiter.local/alice") or "group:NAME" (every
// principal whose certificate carries OU=NAME).
struct RoleBinding {
  std::string subject;
  Role role = Role::kUnspecified;
  ScopeKind scope_kind = ScopeKind::kUnspecified;
  std::string scope;  // Team or pool name; empty for kOrg.
  bool operator==(const RoleBinding&) const = default;
  auto operator<=>(const RoleBinding&) const = default;
};

// Actions that declared authority rules may put under approval.
enum class ApprovalAction {
  kUnspecified = 0,
  kBorrow = 1,      // Using quota beyond nominal (borrowing from the cohort).
  kGuaranteed = 2,  // Executive-sponsored, never-preempted work (org authority only).
  kLarge = 3,       // Requests above a size.
  kOverBudget = 4,  // Beyond the team's hard budget limit, where it asks for approval.
  kLong = 5,        // Requests that run longer than a time (or are open-ended).
};
absl::string_view ApprovalActionName(ApprovalAction a);  // "borrow", "guaranteed", "large".
ApprovalAction ApprovalActionFromName(absl::string_view name);

// Declares that `action` in `pool` ("" for every pool) needs approval, and
// that `approver` (a principal or "group:NAME") may give it for requests of
// up to `limit_milli`, running up to `limit_seconds`, projected to cost up
// to `limit_micros` (each kUnlimited: no limit; an open-ended request is
// within a time limit only when there is none). For kLarge, requests of more
// than `threshold_milli` need approval; for kLong, requests that run longer
// than `threshold_seconds` or are open-ended. Guaranteed work always needs
// approval, and only org-wide (pool "") rules may give it: with no such
// rule, guaranteed requests are denied.
struct AuthorityRule {
  std::string pool;
  ApprovalAction action = ApprovalAction::kUnspecified;
  std::string approver;
  int64_t limit_milli = kUnlimited;
  int64_t threshold_milli = 0;
  int64_t threshold_seconds = 0;
  int64_t limit_seconds = kUnlimited;
  int64_t limit_micros = kUnlimited;
  bool operator==(const AuthorityRule&) const = default;
  auto operator<=>(const AuthorityRule&) const = default;
};

// Money is in micros of the price book's currency (1'000'000 = one unit).
// A price of one GPU-hour of `gpu_model` in pools of `latency_class`, in
// force from `effective_from` until a later price of the same pair. MIG
// instances and fractions pay pro rata to their milli-GPU (an instance's SM
// share).
struct Price {
  std::string gpu_model;
  LatencyClass latency_class = LatencyClass::kUnspecified;
  int64_t micros_per_gpu_hour = 0;
  absl::Time effective_from;
  // The price of a GPU-hour taken by a burst above quota into a serving
  // pool's headroom; 0: micros_per_gpu_hour.
  int64_t burst_micros_per_gpu_hour = 0;
  bool operator==(const Price&) const = default;
};

// What to do with a request that would take its team beyond the hard limit.
enum class OverBudget { kUnspecified = 0, kDeny = 1, kApproval = 2 };

// A team's budget per calendar month (UTC): beyond `soft_limit_micros` a
// decision warns (recorded); beyond `hard_limit_micros` the request is
// denied, or needs an over-budget approval (`over`).
struct Budget {
  std::string team;
  int64_t soft_limit_micros = 0;
  int64_t hard_limit_micros = 0;
  OverBudget over = OverBudget::kDeny;
  bool operator==(const Budget&) const = default;
};

// `from` lets `to` give the approvals `from` may give, until `expires_at`.
// Subjects are principals (not groups).
struct Delegation {
  std::string from;
  std::string to;
  absl::Time expires_at;
  bool operator==(const Delegation&) const = default;
  auto operator<=>(const Delegation& o) const {
    return std::tie(from, to) <=> std::tie(o.from, o.to);
  }
};

// Who gives or refuses an approval.
struct Approver {
  std::string principal;
  std::vector<std::string> groups;
};

// Machine-readable reasons for QUEUED and DENIED.
inline constexpr char kReasonQuotaExceeded[] = "QUOTA_EXCEEDED";
inline constexpr char kReasonNoQuota[] = "NO_QUOTA";
inline constexpr char kReasonInsufficientCapacity[] = "INSUFFICIENT_CAPACITY";
// A strict pool: the request waits behind the head, which waits for capacity.
inline constexpr char kReasonQueuedBehind[] = "QUEUED_BEHIND";
inline constexpr char kReasonNoFeasibleNode[] = "NO_FEASIBLE_NODE";
inline constexpr char kReasonBorrowingLimit[] = "BORROWING_LIMIT";
inline constexpr char kReasonCohortExhausted[] = "COHORT_EXHAUSTED";
inline constexpr char kReasonCohortBorrowingLimit[] = "COHORT_BORROWING_LIMIT";
inline constexpr char kReasonNotPreemptible[] = "NOT_PREEMPTIBLE";
inline constexpr char kReasonPoolLending[] = "POOL_DOES_NOT_LEND";
inline constexpr char kReasonPreempting[] = "WAITING_FOR_PREEMPTION";
inline constexpr char kReasonReclaimed[] = "RECLAIMED";
inline constexpr char kReasonSpotReclaimed[] = "SPOT_RECLAIMED";
inline constexpr char kReasonBurstEnded[] = "BURST_ENDED";
inline constexpr char kReasonLendingWindowClosed[] = "LENDING_WINDOW_CLOSED";
// Queued: it would take a serving pool's headroom, which its class or spot
// work may not. Never the backfill head (it waits for capacity beyond the
// headroom, which no plan of the pool's ends can promise).
inline constexpr char kReasonHeadroom[] = "SERVING_HEADROOM";
// Queued: admitting it would exceed a watt budget (docs/power.md); the
// reason names the budget and the shortfall in watts.
inline constexpr char kReasonPower[] = "POWER";
// Told to vacate because a lowered watt budget reclaims preemptible work.
inline constexpr char kReasonPowerReclaim[] = "POWER_RECLAIM";
// Told to vacate ahead of the serving demand a pool forecasts
// (Pool::proactive_reclaim).
inline constexpr char kReasonProactiveReclaim[] = "PROACTIVE_RECLAIM";
// Queued: borrowed work would take capacity that a pool with proactive
// reclaim keeps free for the serving demand it forecasts within its lead.
inline constexpr char kReasonForecast[] = "SERVING_FORECAST";
inline constexpr char kReasonPreemptedByPriority[] = "PREEMPTED_BY_PRIORITY";
inline constexpr char kReasonReservationConflict[] = "RESERVATION_CONFLICT";
inline constexpr char kReasonReserved[] = "RESERVED";
inline constexpr char kReasonNeedsApproval[] = "NEEDS_APPROVAL";
inline constexpr char kReasonNoAuthority[] = "NO_AUTHORITY";
inline constexpr char kReasonDeniedByAuthority[] = "DENIED_BY_AUTHORITY";
inline constexpr char kReasonApprovalExpired[] = "APPROVAL_EXPIRED";
inline constexpr char kReasonBudgetExceeded[] = "BUDGET_EXCEEDED";
inline constexpr char kReasonIdleReclaim[] = "IDLE_RECLAIM";
inline constexpr char kReasonUnclaimed[] = "UNCLAIMED";
inline constexpr char kReasonLeaseExpired[] = "LEASE_EXPIRED";
inline constexpr char kReasonNodeDrain[] = "NODE_DRAIN";
inline constexpr char kReasonNodeFailed[] = "NODE_FAILED";

// One GPU held by an advance reservation, with the host capacity held
// beside it: a member's CPU and memory ride on the hold of its first GPU
// (a member without GPUs holds gpu_index -1).
struct GpuHold {
  int64_t node_id = 0;
  int32_t gpu_index = 0;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  bool operator==(const GpuHold&) const = default;
};

struct Placement;
// Appends the holds of `p`: one per GPU, its host part on the first.
void AppendHolds(const Placement& p, std::vector<GpuHold>& holds);

// A request with its decision and current state.
// A workload's run as its enforcer reports it at the release (both set,
// or both InfinitePast: none reported).
struct WorkloadRun {
  absl::Time started = absl::InfinitePast();
  absl::Time ended = absl::InfinitePast();
};

struct CapacityRequest {
  int64_t id = 0;
  CapacityRequestSpec spec;
  uint64_t body_hash = 0;  // Fingerprint of `spec` for idempotent replays.
  RequestState state = RequestState::kUnspecified;
  std::string reason_code;
  std::string reason;
  std::vector<Placement> placements;
  absl::Time created_at;
  absl::Time updated_at;
  // When the placements were charged; InfinitePast while not admitted.
  absl::Time admitted_at = absl::InfinitePast();
  // The quota charged: its GPU model, empty for the pool-wide one.
  std::string quota_model;
  // kPreempting/kPreempted: the deadline to vacate and the request that
  // preempts (0 when a reservation or the pool reclaims it).
  absl::Time preempt_deadline = absl::InfinitePast();
  int64_t preempted_by = 0;
  // GPUs held whole: for its window while kReserved; while kQueued waiting
  // for victims to vacate, the GPUs it will take (its claim).
  std::vector<GpuHold> holds;
  // Approvals given, as "action:principal" (e.g. "borrow:spiffe://.../carol").
  std::vector<std::string> approvals;
  // kPendingApproval: who may still approve, and until when.
  std::vector<std::string> approvers;
  absl::Time approval_deadline = absl::InfinitePast();
  // Cost charged to the team's budget: projected when admitted (to the
  // declared end, or for open-ended work to the end of the month), the cost
  // actually incurred once it ends. 0 without a price.
  int64_t cost_micros = 0;
  // The workload's run as its enforcer reported it at the release (a Slurm
  // job's start and end): the allocation is charged for it instead of
  // admission to release. InfinitePast both when none was reported.
  absl::Time run_started_at = absl::InfinitePast();
  absl::Time run_ended_at = absl::InfinitePast();
  // Admitted above its quota into the pool's headroom: when the burst ends
  // (the allocation is released BURST_ENDED then). InfinitePast when it is
  // not a burst.
  absl::Time burst_until = absl::InfinitePast();
  // The head of a backfill pool's queue (kQueued): when it is planned to
  // start, by the known ends of what holds the pool (InfiniteFuture: once
  // the GPUs in `holds`, held from now, drain of open-ended work), with
  // `holds` the GPUs it will take, held from then on. InfinitePast when it
  // is not the head. Derived state: kept in memory and streamed with the
  // explanation, never stored; planned again after a restart.
  absl::Time planned_start = absl::InfinitePast();
  // kQueued: its place in its pool's queue order (1 = decided first), as the
  // arbiter saw it when a read asked (QueuePositions); 0 when not known or
  // not queued. Derived state, never stored.
  int64_t queue_position = 0;
  // kAdmitted: its members' claims, by member (docs/enforcement.md).
  std::vector<Claim> claims;
  // kAdmitted in a pool that enforces claims: when it ends unless claimed
  // (claim deadline) or renewed (the earliest lease); InfiniteFuture
  // otherwise. Derived by State::PutRequest from the pool, never stored.
  absl::Time enforce_at = absl::InfiniteFuture();

  bool backfill_head() const { return planned_start != absl::InfinitePast(); }

  // The declared end (InfiniteFuture when open-ended or not admitted).
  absl::Time declared_end() const;
};

}  // namespace arbiter::core
