// `State`: the in-memory arbitration state (catalog, inventory with per-GPU
// accounting, teams, quotas, live requests, the queue and the idempotency
// index; and, as parts of their own, the authority book
// (core/authority_book.h), the finances (core/finances.h) and the
// chargeback records (core/chargeback_records.h)). It is loaded from the store at start-up and
// mutated only by the arbitration functions in core/arbitration.h, which record every change in a
// `ChangeSet` for the store to make durable.
//
// Thread-compatible: one owner (the arbiter thread) serializes all access.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "core/authority_book.h"
#include "core/chargeback_records.h"
#include "core/coexistence.h"
#include "core/demand_profile.h"
#include "core/externality.h"
#include "core/finances.h"
#include "core/fragmentation.h"
#include "core/inventory_index.h"
#include "core/model.h"
#include "core/share_prices.h"
#include "core/telemetry.h"

namespace arbiter::core {

// A request row to write: inserted when new, otherwise its state, reason,
// placements and `updated_at` are updated.
struct RequestWrite {
  CapacityRequest request;
  bool is_new = false;
};

// One durable change, each type declared next to what it changes.
// Cluster, Pool, Node, Team, Price, IncidentWrite,
// ExternalityCharge and PeriodClose are inserts; Quota, ClassRule, Budget,
// Slo and IdlePolicy are upserts.
using Change = std::variant<Cluster, Pool, Node, Team, Quota, RequestWrite, ClassRule,
                            RoleBindingWrite, AuthorityRuleWrite, Price, Budget, DelegationWrite,
                            Slo, IncidentWrite, ExternalityCharge, PeriodClose, IdlePolicy>;

// The changes of one or more arbitration calls, in order.
struct ChangeSet {
  std::vector<Change> changes;
  bool empty() const { return changes.empty(); }
};

struct IdempotencyEntry {
  int64_t request_id = 0;
  uint64_t body_hash = 0;
};

class State {
 public:
  State() = default;
  State(State&&) = default;
  State& operator=(State&&) = default;
  // A deep copy, for what-if planning (preemption, reservations). Explicit
  // so that nothing copies a state by accident.
  State Clone() const { return State(*this); }

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
  // Indexes a request of any state; live ones (queued, admitted) are kept in
  // full and admitted ones charge their placements to the inventory.
  [[nodiscard]] absl::Status LoadRequest(CapacityRequest request);

  // --- Lookups. Pointers are valid until the next mutation.
  const GpuModel* FindGpuModel(const std::string& name) const;
  const Pool* FindPool(const std::string& name) const;
  const Team* FindTeam(const std::string& name) const;
  bool HasCluster(const std::string& name) const { return clusters_.contains(name); }
  const Node* FindNode(int64_t id) const;
  const Node* FindNode(const std::string& cluster, const std::string& name) const;
  // (node id, GPU index) of the GPU registered with `uuid`; nullptr when
  // none is, and for "".
  const std::pair<int64_t, int32_t>* FindGpuByUuid(const std::string& uuid) const;
  const CapacityRequest* FindLiveRequest(int64_t id) const;
  const IdempotencyEntry* FindIdempotencyKey(const std::string& key) const;
  // The quota of `team` in `pool` for `gpu_model` ("" the pool-wide one),
  // or nullptr when none is set.
  const Quota* FindQuota(const std::string& team, const std::string& pool,
                         const std::string& gpu_model = "") const;
  // Every quota of `team` in `pool`: per-model ones by model name, then the
  // pool-wide one.
  std::vector<const Quota*> QuotasOf(const std::string& team, const std::string& pool) const;
  // Every quota set for `pool` and `gpu_model`, of any team.
  std::vector<const Quota*> QuotasFor(const std::string& pool, const std::string& gpu_model) const;
  // Milli-GPU held (admitted or preempting) by `team` in `pool`: in all, or
  // charged to its quota for `gpu_model`.
  int64_t UsedMilli(const std::string& team, const std::string& pool) const;
  int64_t UsedMilli(const std::string& team, const std::string& pool,
                    const std::string& gpu_model) const;
  // The cohort `team` belongs to: the name of its root team.
  const std::string& CohortOf(const std::string& team) const;

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::map<std::string, GpuModel>& gpu_models() const { return gpu_models_; }
  const std::map<std::string, Team>& teams() const { return teams_; }
  const absl::flat_hash_map<int64_t, CapacityRequest>& live_requests() const {
    return live_requests_;
  }
  // Indices into nodes() of the nodes in `pool`, in registration order.
  const std::vector<size_t>& PoolNodes(const std::string& pool) const;
  // The inventory indexed for placement (see core/inventory_index.h).
  const InventoryIndex& inventory() const { return inventory_; }
  // How many candidate nodes the packer scores per member before it looks
  // further (0: every node of the pool). Default: kDefaultPlacementCandidates.
  static constexpr size_t kDefaultPlacementCandidates = 128;
  size_t placement_candidates() const { return placement_candidates_; }
  void set_placement_candidates(size_t n) { placement_candidates_ = n; }
  // How the packer scores the places a member fits (core/placement.cc).
  //   kArbiter: share prices (fractions), then fragmentation growth with the
  //             host term, then best fit. The default.
  //   kFgd:     FGD's fragmentation step term alone, then best fit: the
  //             published policy, kept as a baseline for benchmarks.
  //   kBestFit: least GPU capacity left free.
  // REQUIRES: set before any demand is observed.
  enum class PackingPolicy { kArbiter, kFgd, kBestFit };
  PackingPolicy packing_policy() const { return packing_policy_; }
  void set_packing_policy(PackingPolicy p) { packing_policy_ = p; }
  // Queued request ids of `pool`, oldest first.
  const std::set<int64_t>& QueuedIn(const std::string& pool) const;
  // Ids of the requests that hold capacity (admitted or preempting) in
  // `pool`, oldest first.
  const std::set<int64_t>& HoldingIn(const std::string& pool) const;
  // Ids of the PREEMPTING requests that vacate for `preemptor`.
  const std::set<int64_t>& VictimsOf(int64_t preemptor) const;
  // Timed events, earliest first: preemption deadlines, reservation starts
  // and approval deadlines, as (time, request id).
  const std::set<std::pair<absl::Time, int64_t>>& timers() const { return timers_; }

  // Identifier the next new request (node) will get; ids are dense from 1.
  int64_t next_request_id() const { return next_request_id_; }
  int64_t next_node_id() const { return next_node_id_; }

  // The milli-GPU one instance of `spec`'s MIG profile is charged: the
  // largest SM share among the allowed models (all models when none is
  // named) that have the profile. NOT_FOUND (field shape.mig_profile) when
  // none has it. REQUIRES: spec.shape.is_mig().
  absl::StatusOr<int64_t> MigMilli(const CapacityRequestSpec& spec) const;
  // The MIG profiles `gpu` offers: those its node reported, else its model's
  // table. REQUIRES: the GPU's model is in the catalog.
  const std::vector<MigProfile>& MigProfilesOf(const Gpu& gpu) const;
  // Profiles to fill an empty GPU of `model` with, after the one asked for:
  // the MIG profiles seen most in requests first, then larger before smaller.
  std::vector<std::string> MigFillOrder(const GpuModel& model) const;

  // --- Mutations used by arbitration. Each keeps every index consistent.
  // Charges (`sign` = +1) or frees (-1) one placement on its node and GPUs.
  // Charging applies the placement's MIG layout change; freeing leaves the
  // layout as it is (an empty MIG GPU keeps its layout until reused).
  // REQUIRES: the placement fits (charging) or was charged (freeing).
  void ApplyPlacement(const Placement& p, int sign);
  // Puts back a node copied before a failed gang placement.
  // REQUIRES: a node with `node.id` exists.
  void RestoreNode(Node node);
  // Stores a new or changed request: updates the live set, the queue, the
  // idempotency index and the team's usage.
  // REQUIRES: admitted placements were already applied with ApplyPlacement.
  void PutRequest(const CapacityRequest& request);
  int64_t TakeRequestId() { return next_request_id_++; }
  // Lifts the holds of live request `id` (a reservation's, or the claim of a
  // request waiting for its victims) and clears them in its stored copy.
  void ReleaseHolds(int64_t id);
  // Counts `spec`'s members in the demand mix. The packer's fragmentation
  // model and share prices are refreshed from the mix in growing epochs
  // (every max(32, min(1024, total / 8)) members), so that its cached scores
  // stay valid in between and the cost of learning stays small.
  void ObserveDemand(const CapacityRequestSpec& spec);
  const FragmentationModel& fragmentation() const { return fragmentation_; }
  const SharePrices& share_prices() const { return share_prices_; }
  // Which classes may share a GPU or a node. Default: CoexistenceMatrix::Defaults().
  const CoexistenceMatrix& coexistence() const { return coexistence_; }
  void set_coexistence(const CoexistenceMatrix& matrix) { coexistence_ = matrix; }
  const DemandProfile& demand() const { return demand_; }
  int64_t TakeNodeId() { return next_node_id_++; }

 private:
  std::map<std::string, GpuModel> gpu_models_;
  std::map<std::string, Cluster> clusters_;
  std::map<std::string, Pool> pools_;
  std::map<std::string, Team> teams_;
  State(const State&) = default;
  // Removes `old` from the usage, queue, timer and hold indexes.
  void Unindex(const CapacityRequest& old);
  // Adds (`sign` +1) or removes (-1) the holds of a reserved or queued
  // request on its GPUs; other states hold nothing.
  void SetHolds(const CapacityRequest& request, int sign);

  using QuotaKey = std::tuple<std::string, std::string, std::string>;  // Team, pool, model.
  std::map<QuotaKey, Quota> quotas_;
  std::map<QuotaKey, int64_t> used_milli_;
  std::map<std::pair<std::string, std::string>, int64_t> used_pool_milli_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<int64_t, size_t> node_index_;
  std::map<std::pair<std::string, std::string>, size_t> node_by_name_;
  std::map<std::string, std::vector<size_t>> pool_nodes_;
  absl::flat_hash_map<std::string, std::pair<int64_t, int32_t>> gpu_by_uuid_;
  InventoryIndex inventory_;
  size_t placement_candidates_ = kDefaultPlacementCandidates;
  PackingPolicy packing_policy_ = PackingPolicy::kArbiter;
  absl::flat_hash_map<int64_t, CapacityRequest> live_requests_;
  std::map<std::string, std::set<int64_t>> queued_;
  std::map<std::string, std::set<int64_t>> holding_;
  std::set<std::pair<absl::Time, int64_t>> timers_;
  AuthorityBook authority_;
  Finances finances_;
  ChargebackRecords chargeback_;
  absl::Duration approval_timeout_ = absl::Hours(24);
  std::map<std::string, int64_t> measured_usage_;
  absl::flat_hash_map<int64_t, std::set<int64_t>> victims_;  // Preemptor -> victims.
  absl::flat_hash_map<std::string, IdempotencyEntry> by_key_;
  int64_t next_request_id_ = 1;
  int64_t next_node_id_ = 1;
  DemandProfile demand_;
  std::map<std::string, int64_t> mig_demand_;  // Profile name -> members asked.
  FragmentationModel fragmentation_;
  SharePrices share_prices_;
  int64_t observed_since_refresh_ = 0;
  CoexistenceMatrix coexistence_ = CoexistenceMatrix::Defaults();
};

}  // namespace arbiter::core
