// The arbitration functions: every mutation of `State` goes through one of
// these. Each validates first and changes nothing when it returns an error;
// on success it mutates `state` and appends what must be made durable to
// `changes`. Pure: time comes in as `now`, nothing is read or written outside
// the arguments.
//
// Status codes (stated per function): INVALID_ARGUMENT names the offending
// field; NOT_FOUND names the unknown referenced entity and its field;
// ALREADY_EXISTS for a taken name; FAILED_PRECONDITION for a wrong state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "core/model.h"
#include "core/state.h"

namespace arbiter::core {

struct RequestOutcome {
  // The request with its decision. For a replay only `id` is meaningful: the
  // caller reads the stored request, which may have moved on since.
  CapacityRequest request;
  bool replayed = false;
};

// Decides a capacity request: PENDING_APPROVAL (it needs approvals that
// declared authority may give; see core/approval.h), ADMITTED (placed and charged), QUEUED (may fit
// later; the reason says which limit holds it back, and when it waits for
// victims of a preemption it started, WAITING_FOR_PREEMPTION), RESERVED
// (starts later; its GPUs are held for its window) or DENIED (no quota could
// ever allow it, no node could ever hold it, or the pool does not take its
// class). Victims of a preemption become PREEMPTING with a deadline and are
// recorded in `changes` after the request. A known idempotency key with the
// same body is a replay and changes nothing.
// Errors: INVALID_ARGUMENT (bad field, fraction memory beyond every allowed
// GPU model, a start_time more than five minutes past or a window that has
// ended: ValidateWindow), NOT_FOUND (team, pool, gpu_models[i]), FAILED_PRECONDITION
// (idempotency key reused with a different body).
//
// When the state remembers ended keys for less than its window
// (!State::RemembersWholeWindow), the caller looked the key up at
// `ended_keys_checked_at` among the requests stored as ended within the
// window, and found none (app/ended_keys.h). A key whose request ended
// since is still in memory as long as the lookup is no older than
// State::key_lookup_max_age; an older one (or none: the infinite past) is
// refused UNAVAILABLE, to be looked up again.
absl::StatusOr<RequestOutcome> RequestCapacity(
    State& state, const CapacityRequestSpec& spec, absl::Time now, ChangeSet& changes,
    absl::Time ended_keys_checked_at = absl::InfinitePast());

// FAILED_PRECONDITION: idempotency key `key` was used for request
// `request_id` with a different body.
absl::Status KeyUsedForAnotherBody(const std::string& key, int64_t request_id);

// The request `spec`'s idempotency key already names, as the keys stand (a
// key past its window is forgotten at the next RequestCapacity): its id,
// the replay RequestCapacity would answer; nullopt for a new key.
// INVALID_ARGUMENT for a bad spec (as RequestCapacity); FAILED_PRECONDITION
// when the key was used for a different body. For a preview, which decides
// on a State::Clone, and a clone starts without the keys.
absl::StatusOr<std::optional<int64_t>> SeenIdempotencyKey(const State& state,
                                                          const CapacityRequestSpec& spec);

// Releases an admitted or preempting request, or cancels a queued or
// reserved one, then admits what now fits from the pool's queue. With a
// reported `run`, the allocation is charged for the run (its cost, and its
// held interval in chargeback: CapacityRequest::run_started_at).
// Errors: INVALID_ARGUMENT (id <= 0; a run with one end only, for a request
// that holds nothing, ending before it starts, starting more than a second
// before the admission or ending more than a second after `now`: naming
// workload_started_at or workload_ended_at), NOT_FOUND (no such request),
// FAILED_PRECONDITION (already released, cancelled or denied).
absl::StatusOr<CapacityRequest> ReleaseRequest(State& state, int64_t id, absl::Time now,
                                               ChangeSet& changes, const WorkloadRun& run = {});

// Claims members of admitted allocation `id` for the workload `holder`
// (docs/enforcement.md): `members` (empty: all of them). A member already
// claimed by `holder` is renewed (a claim is idempotent); a new claim is a
// decision (written and ledgered with the request). While claimed, a
// member's lease runs from its last renewal; in a pool with a lease, an
// allocation whose lease runs out ends LEASE_EXPIRED, and one whose members
// are not all claimed by the pool's claim deadline ends UNCLAIMED (Tick).
// Errors: INVALID_ARGUMENT (id <= 0, holder, members[i] out of range or
// given twice), NOT_FOUND (id), FAILED_PRECONDITION (not admitted, or
// members[i] claimed by another holder, who is named).
absl::StatusOr<CapacityRequest> ClaimAllocation(State& state, int64_t id, const std::string& holder,
                                                const std::vector<int32_t>& members, absl::Time now,
                                                ChangeSet& changes);
// Renews the leases of every claim `holder` holds on request `id`. A renewal
// is held in memory and not written (GraceLeases covers a reload).
// Errors: as ClaimAllocation, and FAILED_PRECONDITION when `holder` holds no
// claim on it (the holders are named).
absl::StatusOr<CapacityRequest> RenewLease(State& state, int64_t id, const std::string& holder,
                                           absl::Time now);
// Renews every lease at `now`: called on a state just loaded from the store,
// where renewals were not written, so that each lease runs a full period
// from the load before it can expire.
void GraceLeases(State& state, absl::Time now);

// Sets the coexistence rule of a pair of classes (both orders), then admits
// queued work it makes room for. Placements made under the old rule stay.
// Errors: INVALID_ARGUMENT (rule.class_a, rule.class_b unspecified).
absl::Status SetCoexistenceRule(State& state, const ClassRule& rule, absl::Time now,
                                ChangeSet& changes);

// Grants a role binding. Errors: INVALID_ARGUMENT (binding.*), NOT_FOUND
// (binding.scope: no such team or pool), ALREADY_EXISTS.
absl::Status GrantRole(State& state, const RoleBinding& binding, ChangeSet& changes);
// Revokes a role binding. Errors: INVALID_ARGUMENT, NOT_FOUND (binding).
absl::Status RevokeRole(State& state, const RoleBinding& binding, ChangeSet& changes);

// Adds a price to the book, in force from price.effective_from. Errors:
// INVALID_ARGUMENT (price.*), NOT_FOUND (price.gpu_model), ALREADY_EXISTS (a
// price of that model and class from that time).
absl::Status SetPrice(State& state, const Price& price, ChangeSet& changes);
// Sets (or replaces) a team's monthly budget. Errors: INVALID_ARGUMENT
// (budget.*), NOT_FOUND (budget.team).
absl::Status SetBudget(State& state, const Budget& budget, ChangeSet& changes);
// Sets (or replaces) a watt budget (docs/power.md). Work that runs is never
// ended by it; with `budget.reclaim`, preemptible work drawing in its scope
// (spot first, then least lost work) is told to vacate, POWER_RECLAIM, with
// its pool's grace, until the draw is within the budget once it has gone.
// INVALID_ARGUMENT naming the field for a bad budget; NOT_FOUND
// (power_budget.name) for an unknown pool or site (cluster).
absl::Status SetPowerBudget(State& state, const PowerBudget& budget, absl::Time now,
                            ChangeSet& changes);

// Gives idle preemptible work notice to vacate: PREEMPTING with reason
// IDLE_RECLAIM and a deadline `notice` from `now`, after which Tick takes the
// capacity back. Errors: NOT_FOUND (no live request `id`),
// FAILED_PRECONDITION (not admitted, not preemptible, or guaranteed).
absl::StatusOr<CapacityRequest> ReclaimIdle(State& state, int64_t id, absl::Duration notice,
                                            const std::string& why, absl::Time now,
                                            ChangeSet& changes);

// Sets the idle policy of a class. Errors: INVALID_ARGUMENT (policy.*).
absl::Status SetIdlePolicy(State& state, const IdlePolicy& policy, ChangeSet& changes);

// Declares (or replaces) a serving team's SLO. Errors: INVALID_ARGUMENT
// (slo.*), NOT_FOUND (slo.team, slo.pool).
absl::Status SetSlo(State& state, const Slo& slo, ChangeSet& changes);
// Records `incident` (its id unset) with its charges and the victim's credit,
// and returns its id. A window already recorded is not recorded again: its
// incident's id is returned and nothing is written. Errors: NOT_FOUND
// (window.service: no SLO).
absl::StatusOr<int64_t> RecordIncident(State& state, Incident incident, ChangeSet& changes);
// Closes the chargeback period [close.from, close.to), freezing its
// statements. Errors: INVALID_ARGUMENT (period.to: not after from, or after
// `now`), FAILED_PRECONDITION (period: overlaps a closed one).
absl::Status ClosePeriod(State& state, const PeriodClose& close, absl::Time now,
                         ChangeSet& changes);

// Lets `d.to` give the approvals `d.from` may give, until `d.expires_at`
// (replacing an earlier delegation between them). Only `from` itself
// delegates (`caller`), unless `caller` is empty (a platform admin).
// Errors: INVALID_ARGUMENT (delegation.*: bad subject, `to` equals `from`,
// expiry not after `now`), PERMISSION_DENIED (caller is not `from`).
absl::Status Delegate(State& state, const Delegation& d, const std::string& caller, absl::Time now,
                      ChangeSet& changes);
// Ends a delegation. Errors: as Delegate, NOT_FOUND (no such delegation).
absl::Status RevokeDelegation(State& state, const Delegation& d, const std::string& caller,
                              ChangeSet& changes);

// Declares or removes an authority rule. Errors: INVALID_ARGUMENT (rule.*),
// NOT_FOUND (rule.pool; on removal, rule), ALREADY_EXISTS.
absl::Status SetAuthorityRule(State& state, const AuthorityRule& rule, ChangeSet& changes);
absl::Status RemoveAuthorityRule(State& state, const AuthorityRule& rule, ChangeSet& changes);

// Gives `who`'s approval to a PENDING_APPROVAL request, for every approval
// it still needs that `who` may give; when none is left missing, the
// request is decided at once (admitted, queued, reserved or denied).
// Errors: INVALID_ARGUMENT (id), NOT_FOUND (id), FAILED_PRECONDITION (not
// pending approval), PERMISSION_DENIED (`who` may give none of them).
absl::StatusOr<CapacityRequest> ApproveRequest(State& state, int64_t id, const Approver& who,
                                               absl::Time now, ChangeSet& changes);
// Refuses a PENDING_APPROVAL request: DENIED, with `who` and `reason`.
// Errors: as ApproveRequest, and INVALID_ARGUMENT (reason: empty or too long).
absl::StatusOr<CapacityRequest> DenyRequest(State& state, int64_t id, const Approver& who,
                                            const std::string& reason, absl::Time now,
                                            ChangeSet& changes);

// Runs what is due at `now`: preempting requests past their deadline become
// PREEMPTED (their capacity is freed), reservations whose start has come
// are decided as requests, and approvals not given in time deny their
// requests; then the pools they touched admit what waits.
// A preempting allocation whose claims hold a lease (docs/enforcement.md)
// keeps its capacity past its deadline until its enforcer confirms by
// releasing it, or until its lease runs out (renewals stop at the
// deadline); it is then charged up to its last renewal. Nodes whose
// heartbeats stopped turn unreachable (MarkUnreachable). Ended requests'
// keys past the state's memory are forgotten (State::ForgetExpiredKeys).
// Pools with proactive reclaim observe their serving demand and reclaim
// ahead of their forecast (ObserveServingDemand).
// Call it whenever `now` reaches the first of state.timers(),
// state.heartbeat_check_at() or state.demand_sample_at().
void Tick(State& state, absl::Time now, ChangeSet& changes);

// Proactive reclaim (core/proactive_reclaim.cc, docs/pools.md).

// A pool's GPU capacity at a moment, in milli-GPU of schedulable nodes.
struct PoolFigures {
  int64_t capacity_milli = 0;
  int64_t free_milli = 0;
  int64_t own_milli = 0;      // Held by the classes it admits (not spot).
  int64_t lent_milli = 0;     // Held by borrowed or spot work it may take back.
  int64_t leaving_milli = 0;  // Held by work told to vacate.
  int64_t asked_milli = 0;    // Asked for by its own classes' queued requests.
};
PoolFigures FiguresOf(const State& state, const Pool& pool, absl::Time now);

// For each pool with proactive reclaim: notes its own classes' demand (held
// + asked) in its forecast (changes.demand gets the slot when it changed);
// when the peak forecast within its lead (reclaim grace + cold start)
// exceeds what its own classes hold plus what is free or returning, tells
// lent work to vacate (PROACTIVE_RECLAIM, at GraceOf), spot first and then
// least lost work, until the shortfall is on its way back; and lets in what
// waited for the forecast to fall. Sets the next observation a minute on.
void ObserveServingDemand(State& state, absl::Time now, ChangeSet& changes);

// A pool's forecast as arbctl shows it (InventoryService.GetServingForecast).
struct ForecastView {
  struct Slot {
    absl::Time start;
    int64_t forecast_milli = 0;
    bool observed = false;  // The quarter hour has been observed in some week.
  };
  std::string pool;
  int64_t lead_seconds = 0;
  PoolFigures figures;
  ServingForecast::Peak peak;            // Within the lead, from now.
  int64_t reclaim_milli = 0;             // What the next observation would take back.
  std::vector<Slot> slots;               // Quarter hours from the current one.
  std::vector<CapacityRequest> notices;  // Told to vacate by PROACTIVE_RECLAIM.
};
// `pool`'s forecast for the next `hours` (1..168) at `now`.
// INVALID_ARGUMENT naming `hours`; NOT_FOUND naming `pool`;
// FAILED_PRECONDITION when the pool has no proactive reclaim.
absl::StatusOr<ForecastView> ForecastOf(const State& state, const std::string& pool, absl::Time now,
                                        int32_t hours);

// Adds a GPU model to the catalog or changes one (core/catalog.cc,
// docs/catalog.md). Setting a model to what it is changes nothing (returns
// false: nothing to record). A model that nodes have GPUs of keeps its
// memory and MIG table; its other facts may change.
// Errors: INVALID_ARGUMENT (gpu_model.*: name, memory_mib, sm_count,
// tdp_watts, vendor, nvlink_domain_size, mig_profiles[i].*, mig_capable
// without profiles or profiles without it), FAILED_PRECONDITION (memory or
// MIG table of a model in use; the nodes are counted).
absl::StatusOr<bool> SetGpuModel(State& state, const GpuModel& model, ChangeSet& changes);

// Errors: INVALID_ARGUMENT, ALREADY_EXISTS.
absl::Status CreateCluster(State& state, const Cluster& cluster, ChangeSet& changes);
// Errors: INVALID_ARGUMENT, ALREADY_EXISTS.
absl::Status CreatePool(State& state, const Pool& pool, ChangeSet& changes);
// Registers a node (a fresh id is assigned) and admits queued work it makes
// room for. Errors: INVALID_ARGUMENT, NOT_FOUND (node.cluster, node.pool,
// node.gpus[i].model), ALREADY_EXISTS.
absl::StatusOr<Node> RegisterNode(State& state, const Node& node, absl::Time now,
                                  ChangeSet& changes);
// --- Node lifecycle (core/nodes.cc, docs/nodes.md). A node is named by
// cluster and name; each function returns INVALID_ARGUMENT (cluster, name)
// or NOT_FOUND (name: no such node, or it was removed) for a bad reference.

struct NodeRef {
  std::string cluster;
  std::string name;
};

// Replaces what may change about a node in use: its topology domain, host
// capacity, GPU UUIDs and reported MIG placements; then admits queued work
// it makes room for. Its pool and its GPUs' models stay. Facts that are
// already so record nothing (an agent refreshes them).
// Errors: INVALID_ARGUMENT (node.*), NOT_FOUND, FAILED_PRECONDITION (pool or
// GPUs changed, host capacity below what is allocated, a MIG layout in use
// that the reported placements no longer hold), ALREADY_EXISTS (a UUID on
// another GPU).
absl::StatusOr<Node> UpdateNode(State& state, const Node& facts, absl::Time now,
                                ChangeSet& changes);
// Cordons a node (no new placements; what runs stays) or uncordons it:
// uncordoning also ends a drain and clears a failure, and admits queued
// work. Repeating either is a no-op that records nothing.
absl::StatusOr<Node> CordonNode(State& state, const NodeRef& ref, bool cordon, absl::Time now,
                                ChangeSet& changes);

struct DrainOutcome {
  Node node;
  std::vector<int64_t> notified;  // Requests given notice, by id.
};
// Cordons a node and gives every allocation on it notice to vacate within
// `grace_seconds` (0: the pool's reclaim grace): PREEMPTING with reason
// NODE_DRAIN, ended by its enforcer's release or by Tick (see Tick for
// claimed allocations). A gang is noticed whole. An allocation already
// vacating by an earlier deadline keeps it.
// Errors: INVALID_ARGUMENT (grace_seconds outside 0..7 days), NOT_FOUND,
// FAILED_PRECONDITION (the node has failed).
absl::StatusOr<DrainOutcome> DrainNode(State& state, const NodeRef& ref, int64_t grace_seconds,
                                       absl::Time now, ChangeSet& changes);

struct FailOutcome {
  Node node;
  std::vector<int64_t> ended;  // Requests ended NODE_FAILED, by id.
};
// Marks a node failed at `failed_at` (InfinitePast: `now`): every allocation
// with a member on it ends RELEASED with reason NODE_FAILED, charged up to
// the failure (a gang ends whole: its one policy), its capacity returns and
// the pools touched admit what waits. Nothing is placed on the node until it
// is uncordoned. Failing a failed node is a no-op.
// Errors: INVALID_ARGUMENT (failed_at in the future), NOT_FOUND.
absl::StatusOr<FailOutcome> FailNode(State& state, const NodeRef& ref, absl::Time failed_at,
                                     absl::Time now, ChangeSet& changes);
// Removes a node that holds nothing. Its history (placements, telemetry,
// ledger) stays; its name and GPU UUIDs may be registered again.
// Errors: NOT_FOUND, FAILED_PRECONDITION (it holds allocations, named).
absl::Status RemoveNode(State& state, const NodeRef& ref, ChangeSet& changes);
// Records a heartbeat of a node's agent. The first one, and one that brings
// an unreachable node back, is a decision (recorded, and an unreachable
// node's pool admits what waits); the others are held in memory only.
// A failed node stays failed. Errors: NOT_FOUND.
absl::StatusOr<Node> NodeHeartbeat(State& state, const NodeRef& ref, absl::Time now,
                                   ChangeSet& changes);
// Turns healthy nodes whose last heartbeat is older than
// state.node_heartbeat_timeout() unreachable (recorded). Called by Tick.
void MarkUnreachable(State& state, absl::Time now, ChangeSet& changes);
// Counts each heartbeating node's silence from `now`: called on a state
// just loaded, where heartbeats were not written (like GraceLeases).
void GraceHeartbeats(State& state, absl::Time now);

// Errors: INVALID_ARGUMENT, NOT_FOUND (team.parent), ALREADY_EXISTS.
absl::Status CreateTeam(State& state, const Team& team, ChangeSet& changes);
// Creates or replaces a quota, then admits queued work it makes room for.
// Lowering a quota below what the team holds preempts nothing; the team
// admits no more until it is back within its limits.
// Errors: INVALID_ARGUMENT, NOT_FOUND (quota.team, quota.pool, quota.gpu_model).
absl::Status SetQuota(State& state, const Quota& quota, absl::Time now, ChangeSet& changes);

// A whole organisation's teams and quotas, registered at once.
struct Organisation {
  std::vector<Team> teams;  // A parent before its children.
  std::vector<Quota> quotas;
};
// What an import changed and what it found already in force.
struct ImportCounts {
  int64_t teams_created = 0;
  int64_t teams_unchanged = 0;
  int64_t quotas_set = 0;
  int64_t quotas_unchanged = 0;
};
// The most teams plus quotas one import may carry.
inline constexpr size_t kMaxImportEntries = 50'000;
// Creates the teams of `org` that do not exist and sets its quotas, all or
// nothing, then admits queued work once per pool whose quotas changed. A team
// that exists with the same parent and weight, and a quota equal to the one
// in force, are left as they are: importing the same organisation twice
// changes nothing. Its cost grows with the import, not with what is already
// registered. Errors name the entry (e.g. "quotas[17].pool") and change
// nothing: INVALID_ARGUMENT (teams[i].*, quotas[i].*; a quota given twice;
// no entries, or more than kMaxImportEntries), ALREADY_EXISTS (teams[i].name:
// given twice, or existing with another parent or weight), NOT_FOUND
// (teams[i].parent, quotas[i].team, quotas[i].pool, quotas[i].gpu_model).
absl::StatusOr<ImportCounts> ImportOrganisation(State& state, const Organisation& org,
                                                absl::Time now, ChangeSet& changes);

// The positions of requests `ids` in their pools' queue orders, the order
// AdmitQueued decides them in (1 = first), as of `state`; 0 for an id that
// is not a queued request. Costs O(n log k) per pool of n queued requests
// asked k times.
std::vector<int64_t> QueuePositions(const State& state, const std::vector<int64_t>& ids);

}  // namespace arbiter::core
