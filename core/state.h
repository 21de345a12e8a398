// `State`: the in-memory arbitration state, made of parts that each keep
// one concept with its indexes and its change types:
//   - the inventory (core/inventory.h): catalog, clusters, pools, nodes and
//     per-GPU accounting, reservations' holds, the placement index;
//   - the quota book (core/quota_book.h): teams, quotas, cohorts and usage;
//   - the request book (core/request_book.h): live requests, the queue,
//     timers, victims and idempotency keys;
//   - the packing model (core/packing_model.h): the demand mix and what the
//     packer learns from it;
//   - the authority book (core/authority_book.h), the finances
//     (core/finances.h) and the chargeback records (core/chargeback_records.h).
// State checks what one part names against the others (a quota's pool, a
// price's model), keeps the parts consistent with each other (an admitted
// request charges the inventory and the quota book), and keeps the API the
// arbitration functions use. It is loaded from the store at start-up and
// mutated only by the arbitration functions in core/arbitration.h, which
// record every change in a `ChangeSet` for the store to make durable.
//
// Thread-compatible: one owner (the arbiter thread) serializes all access.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/authority_book.h"
#include "core/chargeback_records.h"
#include "core/coexistence.h"
#include "core/demand_profile.h"
#include "core/externality.h"
#include "core/finances.h"
#include "core/fragmentation.h"
#include "core/inventory.h"
#include "core/inventory_index.h"
#include "core/model.h"
#include "core/packing_model.h"
#include "core/power.h"
#include "core/quota_book.h"
#include "core/request_book.h"
#include "core/serving_forecast.h"
#include "core/share_prices.h"
#include "core/telemetry.h"

namespace arbiter::core {

// One durable change, each type declared next to what it changes.
// GpuModel is an upsert; NodeWrite an update of a node;
// Cluster, Pool, Node, Team, Price, IncidentWrite,
// ExternalityCharge and PeriodClose are inserts; Quota, ClassRule, Budget,
// Slo, IdlePolicy and PowerBudget are upserts.
using Change =
    std::variant<GpuModel, Cluster, Pool, Node, NodeWrite, Team, Quota, RequestWrite, ClassRule,
                 RoleBindingWrite, AuthorityRuleWrite, Price, Budget, DelegationWrite, Slo,
                 IncidentWrite, ExternalityCharge, PeriodClose, IdlePolicy, PowerBudget>;

// The changes of one or more arbitration calls, in order.
struct ChangeSet {
  std::vector<Change> changes;
  // Queued requests whose explanation (reason code and text) changed and
  // nothing else: the explanation is state, not history. They are not
  // written to the store nor ledgered (the store holds a queued request's
  // reason as of its first queueing and its decision); watchers see them.
  struct Explanation {
    size_t after;  // The number of `changes` made before it.
    CapacityRequest request;
  };
  std::vector<Explanation> explained;  // In the order they were made.
  // Serving demand profiles that observations changed: persisted with the
  // changes, never ledgered (a forecast is state; the reclaims it causes
  // are decisions, in `changes`).
  std::vector<DemandSlotWrite> demand;
  // Nothing to commit (there may be explanations to publish).
  bool empty() const { return changes.empty() && demand.empty(); }
};

class State {
 public:
  State() = default;
  State(State&&) = default;
  State& operator=(State&&) = default;
  // A deep copy, for what-if planning (preemption, reservations). Explicit
  // so that nothing copies a state by accident.
  State Clone() const { return State(*this); }
  // A deep copy whose live requests are only those of `pool`, for what-if
  // placement confined to `pool` (preemption plans): its nodes and their
  // holders, and the quota, power and hold charges of every pool, are as in
  // the whole state. Requests of other pools are not found in it.
  State CloneForPool(const std::string& pool) const {
    return State(*this, requests_.CopyOfPool(pool));
  }

  // --- Loading (used by the store and tests). Each returns
  // FAILED_PRECONDITION if the value contradicts what is already loaded
  // (duplicate name, unknown reference, capacity overcommitted).
  [[nodiscard]] absl::Status LoadGpuModel(GpuModel model);
  [[nodiscard]] absl::Status LoadCluster(Cluster cluster);
  [[nodiscard]] absl::Status LoadPool(Pool pool);
  // REQUIRES: node.id > 0. GPU memory is taken from the catalog.
  [[nodiscard]] absl::Status LoadNode(Node node);
  [[nodiscard]] absl::Status LoadTeam(Team team);
  [[nodiscard]] absl::Status LoadQuota(Quota quota);
  // FAILED_PRECONDITION for a duplicate or a scope that does not exist.
  [[nodiscard]] absl::Status LoadRoleBinding(RoleBinding binding);
  // Removes a binding; false when there was none.
  bool RemoveRoleBinding(const RoleBinding& binding) {
    return authority_.RemoveRoleBinding(binding);
  }
  const std::set<RoleBinding>& role_bindings() const { return authority_.role_bindings(); }
  // FAILED_PRECONDITION for a duplicate or an unknown pool.
  [[nodiscard]] absl::Status LoadAuthorityRule(AuthorityRule rule);
  bool RemoveAuthorityRule(const AuthorityRule& rule) {
    return authority_.RemoveAuthorityRule(rule);
  }
  const std::set<AuthorityRule>& authority_rules() const { return authority_.authority_rules(); }
  // Delegations of approval authority, one per (from, to), replaced when
  // granted again.
  void LoadDelegation(const Delegation& d) { authority_.PutDelegation(d); }
  bool RemoveDelegation(const Delegation& d) { return authority_.RemoveDelegation(d); }
  const std::set<Delegation>& delegations() const { return authority_.delegations(); }
  // The price book. FAILED_PRECONDITION for a second price of the same
  // model and class from the same time, or an unknown model.
  [[nodiscard]] absl::Status LoadPrice(const Price& price);
  // Prices of `model` in `latency_class` pools by the time they take effect;
  // nullptr when none.
  const std::map<absl::Time, int64_t>* PriceHistory(const std::string& model,
                                                    LatencyClass latency_class) const {
    return finances_.PriceHistory(model, latency_class);
  }
  const std::map<absl::Time, int64_t>* BurstPriceHistory(const std::string& model,
                                                         LatencyClass latency_class) const {
    return finances_.BurstPriceHistory(model, latency_class);
  }
  // Watt budgets per pool, rack and site (core/power.h), one per scope and
  // name, replaced when set again. The first one starts the running draws,
  // from every allocation that holds capacity.
  void LoadPowerBudget(PowerBudget budget);
  const PowerBook& power() const { return power_; }
  // What `placements` of work in `pool` draw, by scope: the pool, each
  // node's rack (topology domain, when it has one) and site (cluster).
  std::vector<ScopeDraw> PowerDraws(const std::string& pool,
                                    const std::vector<Placement>& placements) const;
  // Budgets, one per team (replaced when set again).
  [[nodiscard]] absl::Status LoadBudget(Budget budget);
  const Budget* FindBudget(const std::string& team) const { return finances_.FindBudget(team); }
  // Spend charged to `team` for the month starting at `month_start`.
  int64_t Spend(const std::string& team, absl::Time month_start) const {
    return finances_.Spend(team, month_start);
  }
  void AddSpend(const std::string& team, absl::Time month_start, int64_t micros) {
    finances_.AddSpend(team, month_start, micros);
  }
  // SLOs by (team, service), replaced when declared again.
  // FAILED_PRECONDITION for an unknown team or pool.
  [[nodiscard]] absl::Status LoadSlo(const Slo& slo);
  const Slo* FindSlo(const std::string& team, const std::string& service) const {
    return chargeback_.FindSlo(team, service);
  }
  const std::map<std::pair<std::string, std::string>, Slo>& slos() const {
    return chargeback_.slos();
  }
  // Incidents recorded, by (team, service, window start): one per window.
  void LoadIncident(const std::string& team, const std::string& service, absl::Time start,
                    int64_t id) {
    chargeback_.LoadIncident(team, service, start, id);
  }
  // The incident recorded for that window; 0 when none is.
  int64_t FindIncident(const std::string& team, const std::string& service,
                       absl::Time start) const {
    return chargeback_.FindIncident(team, service, start);
  }
  int64_t TakeIncidentId() { return chargeback_.TakeIncidentId(); }
  // Busy milli-GPU seconds each team used recently, as telemetry measured
  // them (arbiterd: the last 24 hours of rollups, refreshed by each telemetry
  // pass; not stored). Fair share breaks ties with it (AdmitQueued).
  void SetMeasuredUsage(std::map<std::string, int64_t> usage) {
    measured_usage_ = std::move(usage);
  }
  int64_t MeasuredUsage(const std::string& team) const {
    auto it = measured_usage_.find(team);
    return it == measured_usage_.end() ? 0 : it->second;
  }
  // Closed chargeback periods, as [from, to).
  void LoadClosedPeriod(absl::Time from, absl::Time to) { chargeback_.LoadClosedPeriod(from, to); }
  // The closed period overlapping [from, to), if any, as (from, to).
  std::optional<std::pair<absl::Time, absl::Time>> FindClosedOverlap(absl::Time from,
                                                                     absl::Time to) const {
    return chargeback_.FindClosedOverlap(from, to);
  }
  // How long a request may wait for approval. Default: 24 hours.
  absl::Duration approval_timeout() const { return approval_timeout_; }
  void set_approval_timeout(absl::Duration d) { approval_timeout_ = d; }
  // How long an ended request's idempotency key is remembered after it
  // ended (default 24 h): within it, a replay of the key answers with the
  // request; past it, the key is forgotten and starts a new request. Keys
  // of live requests are always remembered.
  absl::Duration idempotency_window() const { return idempotency_window_; }
  void set_idempotency_window(absl::Duration d) { idempotency_window_ = d; }
  // How long this state itself remembers an ended request's key (default:
  // for the whole window). Set shorter, the keys that ended earlier in the
  // window are the caller's to look up in the store before each new
  // request (RequestCapacity's `ended_keys_checked_at`, at most
  // key_lookup_max_age old): memory then holds the live keys and those of
  // the last `d`, not a day of decisions; or, once the caller reports its
  // commits (NoteKeysStored), those not yet stored for key_lookup_max_age.
  absl::Duration ended_key_memory() const { return ended_key_memory_; }
  void set_ended_key_memory(absl::Duration d) { ended_key_memory_ = d; }
  // How old the lookup of a new request's key may be: half the memory.
  absl::Duration key_lookup_max_age() const { return ended_key_memory_ / 2; }
  // Whether every key of the window is in memory (ended_key_memory covers
  // the window), so that no lookup in the store is needed.
  bool RemembersWholeWindow() const { return ended_key_memory_ >= idempotency_window_; }
  // How many ended requests' keys were put in this state so far: the
  // position NoteKeysStored takes. Arbiter thread: read after a batch.
  uint64_t ended_keys_put() const { return requests_.ended_keys_put(); }
  // Reports that the keys of the requests that ended before position
  // `keys_put` are committed since `stored_at`, so that any lookup started
  // since finds them. From the first report on, an ended key is forgotten
  // once its report is older than key_lookup_max_age (every lookup still
  // accepted then started after its commit), not after the memory: memory
  // holds what the rate makes in the commit's time and the lookup's age.
  // Ignored while the state remembers the whole window.
  // REQUIRES: reports come in the order of their positions.
  void NoteKeysStored(uint64_t keys_put, absl::Time stored_at) {
    if (!RemembersWholeWindow()) requests_.NoteKeysStored(keys_put, stored_at);
  }
  // Forgets the keys of requests that ended before `now` less the window;
  // and those stored for longer than a lookup's age (after NoteKeysStored),
  // or else ended before `now` less the memory.
  void ForgetExpiredKeys(absl::Time now) {
    if (RemembersWholeWindow() || !requests_.notes_stores()) {
      requests_.ForgetKeysEndedBefore(now - std::min(idempotency_window_, ended_key_memory_));
      return;
    }
    requests_.ForgetKeysEndedBefore(now - idempotency_window_);
    requests_.ForgetKeysStoredBefore(now - key_lookup_max_age());
  }
  // Indexes a request of any state; live ones (queued, admitted) are kept in
  // full and admitted ones charge their placements to the inventory. An
  // ended one only has its idempotency key remembered (until its
  // `updated_at` leaves the window), and a non-zero `cost_micros` counts
  // against the month of `admitted_at`: a store loads the ended requests
  // of the window, oldest first, and the spend of ended requests as sums
  // (AddSpend). FAILED_PRECONDITION for an id or key already live.
  [[nodiscard]] absl::Status LoadRequest(CapacityRequest request);

  // --- The parts.
  const Inventory& inventory() const { return inventory_; }
  const QuotaBook& quota_book() const { return quotas_; }
  const RequestBook& requests() const { return requests_; }
  const PackingModel& packing() const { return packing_; }

  // --- Lookups. Pointers are valid until the next mutation.
  const GpuModel* FindGpuModel(const std::string& name) const {
    return inventory_.FindGpuModel(name);
  }
  const Pool* FindPool(const std::string& name) const { return inventory_.FindPool(name); }
  const std::map<std::string, Pool>& pools() const { return inventory_.pools(); }
  const Team* FindTeam(const std::string& name) const { return quotas_.FindTeam(name); }
  bool HasCluster(const std::string& name) const { return inventory_.HasCluster(name); }
  const Node* FindNode(int64_t id) const { return inventory_.FindNode(id); }
  const Node* FindNode(const std::string& cluster, const std::string& name) const {
    return inventory_.FindNode(cluster, name);
  }
  const std::pair<int64_t, int32_t>* FindGpuByUuid(const std::string& uuid) const {
    return inventory_.FindGpuByUuid(uuid);
  }
  const CapacityRequest* FindLiveRequest(int64_t id) const { return requests_.FindLive(id); }
  const IdempotencyEntry* FindIdempotencyKey(const std::string& key) const {
    return requests_.FindIdempotencyKey(key);
  }
  const Quota* FindQuota(const std::string& team, const std::string& pool,
                         const std::string& gpu_model = "") const {
    return quotas_.FindQuota(team, pool, gpu_model);
  }
  std::vector<const Quota*> QuotasOf(const std::string& team, const std::string& pool) const {
    return quotas_.QuotasOf(team, pool);
  }
  // Milli-GPU held (admitted or preempting) by `team` in `pool`: in all, or
  // charged to its quota for `gpu_model`.
  int64_t UsedMilli(const std::string& team, const std::string& pool) const {
    return quotas_.UsedMilli(team, pool);
  }
  int64_t UsedMilli(const std::string& team, const std::string& pool,
                    const std::string& gpu_model) const {
    return quotas_.UsedMilli(team, pool, gpu_model);
  }
  const std::string& CohortOf(const std::string& team) const { return quotas_.CohortOf(team); }

  const std::vector<Node>& nodes() const { return inventory_.nodes(); }
  const std::map<std::string, GpuModel>& gpu_models() const { return inventory_.gpu_models(); }
  const std::map<std::string, Team>& teams() const { return quotas_.teams(); }
  const absl::flat_hash_map<int64_t, CapacityRequest>& live_requests() const {
    return requests_.live();
  }
  const std::vector<size_t>& PoolNodes(const std::string& pool) const {
    return inventory_.PoolNodes(pool);
  }
  static constexpr size_t kDefaultPlacementCandidates = PackingModel::kDefaultCandidates;
  size_t placement_candidates() const { return packing_.candidates(); }
  void set_placement_candidates(size_t n) { packing_.set_candidates(n); }
  using PackingPolicy = PackingModel::Policy;
  PackingPolicy packing_policy() const { return packing_.policy(); }
  void set_packing_policy(PackingPolicy p) { packing_.set_policy(p); }
  using MigPackingPolicy = PackingModel::MigPolicy;
  MigPackingPolicy mig_packing_policy() const { return packing_.mig_policy(); }
  void set_mig_packing_policy(MigPackingPolicy p) { packing_.set_mig_policy(p); }
  const std::set<int64_t>& QueuedIn(const std::string& pool) const {
    return requests_.QueuedIn(pool);
  }
  const std::set<int64_t>& HoldingIn(const std::string& pool) const {
    return requests_.HoldingIn(pool);
  }
  int64_t HeadOf(const std::string& pool) const { return requests_.HeadOf(pool); }
  // A strict pool's head: the request its last pass stopped at (it waits
  // for capacity, and nothing behind it is admitted); 0 when none.
  int64_t StrictHeadOf(const std::string& pool) const {
    auto it = strict_heads_.find(pool);
    return it == strict_heads_.end() ? 0 : it->second;
  }
  void SetStrictHead(const std::string& pool, int64_t id) {
    if (id == 0) {
      strict_heads_.erase(pool);
    } else {
      strict_heads_[pool] = id;
    }
  }
  const std::set<int64_t>& VictimsOf(int64_t preemptor) const {
    return requests_.VictimsOf(preemptor);
  }
  const std::set<std::pair<absl::Time, int64_t>>& timers() const { return requests_.timers(); }
  // How AdmitQueued (core/arbitration.cc) re-decides a pool's queue:
  //   kGrouped: one decision per group of alike requests until the state
  //             changes; the default.
  //   kScan:    every queued request, each time: the oracle the tests hold
  //             kGrouped to. Both admit the same requests at the same moments.
  enum class Admission { kGrouped, kScan };
  Admission admission() const { return admission_; }
  void set_admission(Admission a) { admission_ = a; }
  int64_t next_request_id() const { return requests_.next_id(); }
  int64_t next_node_id() const { return inventory_.next_node_id(); }

  // The milli-GPU one instance of `spec`'s MIG profile is charged: the
  // largest SM share among the allowed models (all models when none is
  // named) that have the profile. NOT_FOUND (field shape.mig_profile) when
  // none has it. REQUIRES: spec.shape.is_mig().
  absl::StatusOr<int64_t> MigMilli(const CapacityRequestSpec& spec) const;
  const std::vector<MigProfile>& MigProfilesOf(const Gpu& gpu) const {
    return inventory_.MigProfilesOf(gpu);
  }
  std::vector<std::string> MigFillOrder(const GpuModel& model) const {
    return packing_.MigFillOrder(model);
  }
  MigMix MigMixOf(const GpuModel& model) const { return packing_.MigMixOf(model); }

  // --- Mutations used by arbitration. Each keeps every part consistent.
  // See Inventory::ApplyPlacement. Freeing, or charging a placement that
  // lays out MIG instances anew, marks the node's pool loosened.
  void ApplyPlacement(const Placement& p, int sign);
  // Whether something happened in `pool` since its queue was last
  // re-decided that may let a queued request in: capacity freed, a claim
  // lifted, a GPU partitioned anew. AdmitQueued clears it; a cancel that
  // frees nothing re-decides the queue only when it is set.
  bool Loosened(const std::string& pool) const { return loosened_.contains(pool); }
  void MarkLoosened(const std::string& pool) { loosened_.insert(pool); }
  void ClearLoosened(const std::string& pool) { loosened_.erase(pool); }
  void RestoreNode(Node node) { inventory_.RestoreNode(std::move(node)); }
  // Node lifecycle (core/nodes.cc); see the Inventory methods of the same
  // names. Freeing capacity is not among them: a node that turns
  // schedulable again has its pool's queue re-decided by the caller.
  void SetNodeLifecycle(const Node& node) { inventory_.SetLifecycle(node); }
  // Replaces a model; running power draws follow a changed TDP or MIG table.
  void PutGpuModel(GpuModel model);
  void UpdateNodeFacts(const Node& node) { inventory_.UpdateFacts(node); }
  void RemoveNode(int64_t id) { inventory_.RemoveNode(id); }
  // Nodes whose agent heartbeats turn unreachable after this long without
  // one; zero: never.
  absl::Duration node_heartbeat_timeout() const { return node_heartbeat_timeout_; }
  void set_node_heartbeat_timeout(absl::Duration d) { node_heartbeat_timeout_ = d; }
  // No node can turn unreachable before this time (a lower bound, kept by
  // core/nodes.cc); Tick looks for unreachable nodes once it has come.
  absl::Time heartbeat_check_at() const { return heartbeat_check_at_; }
  void set_heartbeat_check_at(absl::Time t) { heartbeat_check_at_ = t; }
  // Serving forecasts of pools with proactive reclaim
  // (core/proactive_reclaim.cc). ForecastFor creates an empty one.
  ServingForecast& ForecastFor(const std::string& pool) { return forecasts_[pool]; }
  const ServingForecast* FindForecast(const std::string& pool) const {
    auto it = forecasts_.find(pool);
    return it == forecasts_.end() ? nullptr : &it->second;
  }
  void LoadDemandSlot(const std::string& pool, const DemandSlot& slot) {
    forecasts_[pool].Load(slot);
  }
  // When Tick next observes serving demand; InfiniteFuture while no pool
  // has proactive reclaim, InfinitePast (at once) after one is loaded.
  absl::Time demand_sample_at() const { return demand_sample_at_; }
  void set_demand_sample_at(absl::Time t) { demand_sample_at_ = t; }
  // Stores a new or changed request: updates the request book, charges the
  // quota book for what it holds and the inventory for its holds (undoing
  // what the copy it replaces charged).
  // REQUIRES: admitted placements were already applied with ApplyPlacement.
  // Its `enforce_at` is derived here from its pool (EnforceAt).
  void PutRequest(const CapacityRequest& request);
  // When admitted `request` ends unless claimed or renewed, by its pool's
  // claim deadline and lease; InfiniteFuture when never.
  absl::Time EnforceAt(const CapacityRequest& request) const;
  int64_t TakeRequestId() { return requests_.TakeId(); }
  // Lifts the holds of live request `id` (a reservation's, or the claim of a
  // request waiting for its victims) and clears them in its stored copy.
  void ReleaseHolds(int64_t id);
  // Counts `spec` in the packer's demand mix (PackingModel::Observe).
  void ObserveDemand(const CapacityRequestSpec& spec);
  const FragmentationModel& fragmentation() const { return packing_.fragmentation(); }
  const SharePrices& share_prices() const { return packing_.share_prices(); }
  const CoexistenceMatrix& coexistence() const { return packing_.coexistence(); }
  void set_coexistence(const CoexistenceMatrix& matrix) { packing_.set_coexistence(matrix); }
  const DemandProfile& demand() const { return packing_.demand(); }
  int64_t TakeNodeId() { return inventory_.TakeNodeId(); }
  void SeeNodeId(int64_t id) { inventory_.SeeNodeId(id); }
  // Request ids from `id` + 1 on are free: a store names its highest id,
  // since it loads the live requests and recent keys only, and ids of
  // ended requests are never handed out again.
  void SeeRequestId(int64_t id) { requests_.SeeId(id); }

 private:
  State(const State&) = default;
  // A copy of `other` with `requests` for its request book. Copies every
  // other member: a member added below must be added to it.
  State(const State& other, RequestBook requests);
  // Charges (`sign` +1) or frees (-1) what `request` holds: its quota usage,
  // its holds on GPUs and, while any watt budget is set, its power draw.
  void Charge(const CapacityRequest& request, int sign);
  // Recounts every power draw from the allocations that hold capacity.
  void RecountPowerDraws();

  Inventory inventory_;
  QuotaBook quotas_;
  RequestBook requests_;
  PackingModel packing_;
  AuthorityBook authority_;
  Finances finances_;
  ChargebackRecords chargeback_;
  PowerBook power_;
  absl::Duration approval_timeout_ = absl::Hours(24);
  absl::Duration idempotency_window_ = kDefaultIdempotencyWindow;
  absl::Duration ended_key_memory_ = absl::InfiniteDuration();
  absl::Duration node_heartbeat_timeout_ = kDefaultNodeHeartbeatTimeout;
  absl::Time heartbeat_check_at_ = absl::InfiniteFuture();
  absl::Time demand_sample_at_ = absl::InfiniteFuture();
  std::map<std::string, ServingForecast> forecasts_;  // By pool.
  std::map<std::string, int64_t> measured_usage_;
  Admission admission_ = Admission::kGrouped;
  absl::flat_hash_set<std::string> loosened_;               // Pools; see Loosened.
  absl::flat_hash_map<std::string, int64_t> strict_heads_;  // See StrictHeadOf.
};

}  // namespace arbiter::core
