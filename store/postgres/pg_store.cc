#include "store/postgres/pg_store.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <pqxx/pqxx>

#include "core/status_macros.h"
#include "ledger/entries.h"
#include "store/node_listing.h"
#include "store/postgres/batch_writer.h"
#include "store/postgres/pg_errors.h"
#include "store/postgres/pg_lease.h"
#include "store/postgres/pg_rows.h"
#include "store/postgres/statements.h"

namespace arbiter::store {
namespace {

using core::RequestState;

std::string StateName(RequestState s) { return std::string(core::RequestStateName(s)); }

// Writes rare changes at once, in order; gathers request writes for the
// batch's multi-row statements.
struct ChangeWriter {
  pqxx::transaction_base& tx;
  BatchWriter& batch;
  absl::Time at;  // When the changes were decided.
  void operator()(const core::GpuModel& m) const {
    tx.exec_prepared(sql::kUpsertGpuModel, m.name, m.memory_mib, m.sm_count, m.tdp_watts,
                     m.mig_capable, m.vendor, m.nvlink_domain_size,
                     core::FormatMigProfiles(m.mig_profiles));
  }
  void operator()(const core::Cluster& c) const {
    tx.exec_prepared(sql::kInsertCluster, c.name, c.description);
  }
  void operator()(const core::Pool& p) const {
    tx.exec_prepared(sql::kInsertPool, p.name, std::string(core::LatencyClassName(p.latency_class)),
                     p.description, rows::ClassesLiteral(p.lends_to), p.reclaim_grace_seconds,
                     std::string(core::QueueingPolicyName(p.queueing)), p.starvation_limit_seconds,
                     p.claim_deadline_seconds, p.lease_seconds,
                     rows::ClassRulesLiteral(p.class_rules), p.spot_grace_seconds.value_or(-1),
                     rows::HeadroomLiteral(p.headroom), p.max_burst_seconds, p.proactive_reclaim,
                     p.cold_start_seconds);
  }
  void operator()(const core::Node& n) const {
    tx.exec_prepared(sql::kInsertNode, n.id, n.cluster, n.name, n.pool, n.topology_domain,
                     n.cpu_milli, n.memory_mib);
    for (const core::Gpu& g : n.gpus) {
      tx.exec_prepared(sql::kInsertGpu, n.id, g.index, g.model,
                       core::FormatMigReports(g.reported_mig), g.uuid);
    }
  }
  void operator()(const core::NodeWrite& w) const {
    const core::Node& n = w.node;
    if (w.event == core::NodeEvent::kRemove) {
      tx.exec_prepared(sql::kRemoveNode, n.id, rows::ToMicros(at));
      tx.exec_prepared(sql::kClearGpuUuids, n.id);
      return;
    }
    if (w.event == core::NodeEvent::kUpdate) {
      tx.exec_prepared(sql::kUpdateNodeFacts, n.id, n.topology_domain, n.cpu_milli, n.memory_mib);
      for (const core::Gpu& g : n.gpus) {
        tx.exec_prepared(sql::kUpdateGpuFacts, n.id, g.index, g.uuid,
                         core::FormatMigReports(g.reported_mig));
      }
    }
    tx.exec_prepared(sql::kUpdateNodeLifecycle, n.id, n.cordoned,
                     std::string(core::NodeHealthName(n.health)),
                     rows::ToMicrosOrMin(n.drain_deadline), rows::ToMicrosOrMin(n.failed_at),
                     rows::ToMicrosOrMin(n.last_heartbeat));
  }
  void operator()(const core::Team& t) const {
    tx.exec_prepared(sql::kInsertTeam, t.name, t.parent, t.weight_milli);
  }
  void operator()(const core::Quota& q) const {
    tx.exec_prepared(sql::kUpsertQuota, q.team, q.pool, q.nominal_milli, q.gpu_model,
                     q.borrowing_limit_milli, q.lending_limit_milli, q.cohort_lending_limit_milli,
                     q.cohort_borrowing_limit_milli);
  }
  void operator()(const core::RequestWrite& w) const { batch.Add(w); }
  void operator()(const core::RoleBindingWrite& w) const {
    const core::RoleBinding& b = w.binding;
    tx.exec_prepared(w.revoke ? sql::kDeleteRoleBinding : sql::kInsertRoleBinding, b.subject,
                     std::string(core::RoleName(b.role)),
                     std::string(core::ScopeKindName(b.scope_kind)), b.scope);
  }
  void operator()(const core::DelegationWrite& w) const {
    if (w.revoke) {
      tx.exec_prepared(sql::kDeleteDelegation, w.delegation.from, w.delegation.to);
    } else {
      tx.exec_prepared(sql::kUpsertDelegation, w.delegation.from, w.delegation.to,
                       rows::ToMicros(w.delegation.expires_at));
    }
  }
  void operator()(const core::Price& p) const {
    tx.exec_prepared(sql::kInsertPrice, p.gpu_model,
                     std::string(core::LatencyClassName(p.latency_class)), p.micros_per_gpu_hour,
                     rows::ToMicros(p.effective_from), p.burst_micros_per_gpu_hour);
  }
  void operator()(const core::PowerBudget& b) const {
    tx.exec_prepared(sql::kUpsertPowerBudget, std::string(core::PowerScopeName(b.scope)), b.name,
                     b.watts, b.reclaim);
  }
  void operator()(const core::Budget& b) const {
    tx.exec_prepared(sql::kUpsertBudget, b.team, b.soft_limit_micros, b.hard_limit_micros,
                     std::string(b.over == core::OverBudget::kApproval ? "approval" : "deny"));
  }
  void operator()(const core::AuthorityRuleWrite& w) const {
    const core::AuthorityRule& r = w.rule;
    tx.exec_prepared(w.remove ? sql::kDeleteAuthorityRule : sql::kInsertAuthorityRule, r.pool,
                     std::string(core::ApprovalActionName(r.action)), r.approver, r.limit_milli,
                     r.threshold_milli, r.threshold_seconds, r.limit_seconds, r.limit_micros);
  }
  void operator()(const core::IdlePolicy& p) const {
    tx.exec_prepared(sql::kUpsertIdlePolicy, std::string(core::WorkloadClassName(p.workload_class)),
                     p.threshold_milli, absl::ToInt64Seconds(p.window),
                     std::string(core::IdleActionName(p.action)), absl::ToInt64Seconds(p.notice));
  }
  void operator()(const core::Slo& s) const {
    tx.exec_prepared(sql::kUpsertSlo, s.team, s.service, s.pool, s.p99_target_us,
                     absl::ToInt64Seconds(s.window), s.penalty_micros_per_minute);
  }
  void operator()(const core::IncidentWrite& w) const {
    const core::Incident& i = w.incident;
    tx.exec_prepared(sql::kInsertIncident, i.id, i.slo.team, i.slo.service, i.slo.pool,
                     rows::ToMicros(i.window.start), rows::ToMicros(i.window.end), i.window.p50_us,
                     i.window.p99_us, i.slo.p99_target_us, i.attribution.cost_micros,
                     i.attribution.cost_basis, i.attribution.attributed_micros(),
                     rows::ToMicros(i.recorded_at));
  }
  void operator()(const core::ExternalityCharge& c) const {
    const core::Interference& f = c.interference;
    tx.exec_prepared(sql::kInsertExternalityCharge, c.incident_id, c.team, c.micros,
                     f.borrowed_milli_seconds, f.co_tenancy_milli_seconds,
                     f.admission_delay_milli_seconds, rows::BigintArrayLiteral(f.request_ids),
                     std::string(core::kAttributionMethod), rows::ToMicros(c.booked_at));
  }
  void operator()(const core::PeriodClose& p) const {
    tx.exec_prepared(sql::kInsertChargebackPeriod, rows::ToMicros(p.from), rows::ToMicros(p.to),
                     rows::ToMicros(p.closed_at), p.statements_json, p.hash, p.teams,
                     p.net_cost_micros);
  }
  void operator()(const core::ClassRule& r) const {
    tx.exec_prepared(sql::kUpsertClassRule, std::string(core::WorkloadClassName(r.a)),
                     std::string(core::WorkloadClassName(r.b)),
                     std::string(core::IsolationName(r.rule.gpu)), r.rule.same_node);
  }
};

// Attaches placements (ordered by request id) to `requests` (any order).
absl::Status AttachPlacements(const pqxx::result& placements,
                              std::vector<core::CapacityRequest>& requests) {
  std::map<int64_t, core::CapacityRequest*> by_id;
  for (auto& r : requests) by_id[r.id] = &r;
  for (const pqxx::row& row : placements) {
    int64_t request_id = 0;
    core::Placement p = rows::PlacementFromRow(row, &request_id);
    auto it = by_id.find(request_id);
    if (it == by_id.end()) continue;
    it->second->placements.push_back(std::move(p));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<core::CapacityRequest>> RequestsFromResult(const pqxx::result& res) {
  std::vector<core::CapacityRequest> out;
  out.reserve(res.size());
  for (const pqxx::row& row : res) {
    ARBITER_ASSIGN_OR_RETURN(core::CapacityRequest r, rows::RequestFromRow(row));
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<core::GpuModel> GpuModelFromRow(const pqxx::row& row) {
  core::GpuModel m;
  m.name = row[0].as<std::string>();
  m.memory_mib = row[1].as<int64_t>();
  m.sm_count = row[2].as<int32_t>();
  m.tdp_watts = row[3].as<int32_t>();
  m.mig_capable = row[4].as<bool>();
  m.vendor = row[5].as<std::string>();
  m.nvlink_domain_size = row[6].as<int32_t>();
  ARBITER_RETURN_IF_ERROR(core::ParseMigProfiles(row[7].as<std::string>(), &m.mig_profiles));
  core::AttachBuiltinMigProfiles(m);
  return m;
}

absl::Status LoadCatalogAndInventory(pqxx::transaction_base& tx, core::State& state) {
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectGpuModels)) {
    ARBITER_ASSIGN_OR_RETURN(core::GpuModel model, GpuModelFromRow(row));
    ARBITER_RETURN_IF_ERROR(state.LoadGpuModel(std::move(model)));
  }
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectClusters)) {
    ARBITER_RETURN_IF_ERROR(
        state.LoadCluster(core::Cluster{row[0].as<std::string>(), row[1].as<std::string>()}));
  }
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectPools)) {
    ARBITER_ASSIGN_OR_RETURN(core::Pool pool, rows::PoolFromRow(row));
    ARBITER_RETURN_IF_ERROR(state.LoadPool(std::move(pool)));
  }
  std::map<int64_t, std::vector<core::Gpu>> gpus;
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectGpus, "", "")) {
    core::Gpu g;
    g.index = row[1].as<int32_t>();
    g.model = row[2].as<std::string>();
    ARBITER_RETURN_IF_ERROR(core::ParseMigLayout(row[3].as<std::string>(), &g.mig_layout));
    ARBITER_RETURN_IF_ERROR(core::ParseMigReports(row[4].as<std::string>(), &g.reported_mig));
    g.uuid = row[5].as<std::string>();
    gpus[row[0].as<int64_t>()].push_back(std::move(g));
  }
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectNodes, "", "")) {
    core::Node n;
    n.id = row[0].as<int64_t>();
    n.cluster = row[1].as<std::string>();
    n.name = row[2].as<std::string>();
    n.pool = row[3].as<std::string>();
    n.topology_domain = row[4].as<std::string>();
    n.cpu_milli = row[5].as<int64_t>();
    n.memory_mib = row[6].as<int64_t>();
    n.cordoned = row[7].as<bool>();
    n.health = core::NodeHealthFromName(row[8].as<std::string>());
    n.drain_deadline = rows::FromMicrosOrMin(row[9].as<int64_t>());
    n.failed_at = rows::FromMicrosOrMin(row[10].as<int64_t>());
    n.last_heartbeat = rows::FromMicrosOrMin(row[11].as<int64_t>());
    n.gpus = std::move(gpus[n.id]);
    ARBITER_RETURN_IF_ERROR(state.LoadNode(std::move(n)));
  }
  state.SeeNodeId(tx.exec_prepared1(sql::kSelectMaxNodeId)[0].as<int64_t>());
  return absl::OkStatus();
}

core::CoexistenceMatrix CoexistenceFrom(pqxx::transaction_base& tx) {
  core::CoexistenceMatrix matrix = core::CoexistenceMatrix::Defaults();
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectClassRules)) {
    matrix.Set(core::WorkloadClassFromName(row[0].as<std::string>()),
               core::WorkloadClassFromName(row[1].as<std::string>()),
               core::CoexistenceRule{core::IsolationFromName(row[2].as<std::string>()),
                                     row[3].as<bool>()});
  }
  return matrix;
}

std::vector<core::RoleBinding> RoleBindingsFrom(pqxx::transaction_base& tx) {
  std::vector<core::RoleBinding> out;
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectRoleBindings)) {
    out.push_back(core::RoleBinding{
        row[0].as<std::string>(), core::RoleFromName(row[1].as<std::string>()),
        core::ScopeKindFromName(row[2].as<std::string>()), row[3].as<std::string>()});
  }
  return out;
}

std::vector<core::Delegation> DelegationsFrom(pqxx::transaction_base& tx) {
  std::vector<core::Delegation> out;
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectDelegations)) {
    out.push_back(core::Delegation{row[0].as<std::string>(), row[1].as<std::string>(),
                                   absl::FromUnixMicros(row[2].as<int64_t>())});
  }
  return out;
}

std::vector<core::Price> PricesFrom(pqxx::transaction_base& tx) {
  std::vector<core::Price> out;
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectPrices)) {
    out.push_back(core::Price{
        row[0].as<std::string>(), core::LatencyClassFromName(row[1].as<std::string>()),
        row[2].as<int64_t>(), absl::FromUnixMicros(row[3].as<int64_t>()), row[4].as<int64_t>()});
  }
  return out;
}

std::vector<core::PowerBudget> PowerBudgetsFrom(pqxx::transaction_base& tx) {
  std::vector<core::PowerBudget> out;
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectPowerBudgets)) {
    out.push_back(core::PowerBudget{core::PowerScopeFromName(row[0].as<std::string>()),
                                    row[1].as<std::string>(), row[2].as<int64_t>(),
                                    row[3].as<bool>()});
  }
  return out;
}

std::vector<core::Budget> BudgetsFrom(pqxx::transaction_base& tx) {
  std::vector<core::Budget> out;
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectBudgets)) {
    out.push_back(core::Budget{row[0].as<std::string>(), row[1].as<int64_t>(), row[2].as<int64_t>(),
                               row[3].as<std::string>() == "approval" ? core::OverBudget::kApproval
                                                                      : core::OverBudget::kDeny});
  }
  return out;
}

std::vector<core::AuthorityRule> AuthorityRulesFrom(pqxx::transaction_base& tx) {
  std::vector<core::AuthorityRule> out;
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectAuthorityRules)) {
    core::AuthorityRule r;
    r.pool = row[0].as<std::string>();
    r.action = core::ApprovalActionFromName(row[1].as<std::string>());
    r.approver = row[2].as<std::string>();
    r.limit_milli = row[3].as<int64_t>();
    r.threshold_milli = row[4].as<int64_t>();
    r.threshold_seconds = row[5].as<int64_t>();
    r.limit_seconds = row[6].as<int64_t>();
    r.limit_micros = row[7].as<int64_t>();
    out.push_back(std::move(r));
  }
  return out;
}

// A LoadScope bound as microseconds that PostgreSQL can add to its epoch:
// the infinite past becomes the year 1.
int64_t LoadBoundMicros(absl::Time t) {
  constexpr int64_t kYearOneMicros = -62135596800LL * 1000000;
  return std::max(absl::ToUnixMicros(t), kYearOneMicros);
}

absl::Status LoadGovernanceAndRequests(pqxx::transaction_base& tx, const store::LoadScope& scope,
                                       core::State& state) {
  state.set_coexistence(CoexistenceFrom(tx));
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectTeams)) {
    ARBITER_RETURN_IF_ERROR(state.LoadTeam(
        core::Team{row[0].as<std::string>(), row[1].as<std::string>(), row[2].as<int64_t>()}));
  }
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectQuotas)) {
    ARBITER_RETURN_IF_ERROR(state.LoadQuota(rows::QuotaFromRow(row)));
  }
  for (core::RoleBinding& b : RoleBindingsFrom(tx)) {
    ARBITER_RETURN_IF_ERROR(state.LoadRoleBinding(std::move(b)));
  }
  for (core::AuthorityRule& r : AuthorityRulesFrom(tx)) {
    ARBITER_RETURN_IF_ERROR(state.LoadAuthorityRule(std::move(r)));
  }
  for (const core::Price& p : PricesFrom(tx)) ARBITER_RETURN_IF_ERROR(state.LoadPrice(p));
  for (const core::Delegation& d : DelegationsFrom(tx)) state.LoadDelegation(d);
  for (core::Budget& b : BudgetsFrom(tx)) ARBITER_RETURN_IF_ERROR(state.LoadBudget(std::move(b)));
  for (core::PowerBudget& b : PowerBudgetsFrom(tx)) state.LoadPowerBudget(std::move(b));
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectDemandSlots)) {
    core::DemandSlot slot;
    slot.slot = row[1].as<int32_t>();
    slot.learnt_milli = row[2].as<int64_t>();
    slot.peak_milli = row[3].as<int64_t>();
    slot.week = row[4].as<int64_t>();
    state.LoadDemandSlot(row[0].as<std::string>(), slot);
  }
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectSlos, std::string())) {
    core::Slo slo;
    slo.team = row[0].as<std::string>();
    slo.service = row[1].as<std::string>();
    slo.pool = row[2].as<std::string>();
    slo.p99_target_us = row[3].as<int64_t>();
    slo.window = absl::Seconds(row[4].as<int64_t>());
    slo.penalty_micros_per_minute = row[5].as<int64_t>();
    ARBITER_RETURN_IF_ERROR(state.LoadSlo(slo));
  }
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectIncidentKeys)) {
    state.LoadIncident(row[0].as<std::string>(), row[1].as<std::string>(),
                       absl::FromUnixMicros(row[2].as<int64_t>()), row[3].as<int64_t>());
  }
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectChargebackPeriods)) {
    state.LoadClosedPeriod(absl::FromUnixMicros(row[0].as<int64_t>()),
                           absl::FromUnixMicros(row[1].as<int64_t>()));
  }
  // Of the ended requests, the keys of the window, oldest first (a key used
  // again once forgotten is remembered for its latest request), and what
  // they cost in the months that still count (ended_spend, migration 0022).
  // Ids go on after the highest ever given, which the requests loaded
  // need not hold.
  state.SeeRequestId(tx.exec_prepared1(sql::kSelectMaxRequestId)[0].as<int64_t>());
  const int64_t keys_since = LoadBoundMicros(scope.keys_ended_since);
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectEndedKeys, keys_since)) {
    core::CapacityRequest r;
    r.id = row[0].as<int64_t>();
    r.spec.idempotency_key = row[1].as<std::string>();
    r.body_hash = static_cast<uint64_t>(row[2].as<int64_t>());
    r.state = core::RequestStateFromName(row[3].as<std::string>());
    r.updated_at = absl::FromUnixMicros(row[4].as<int64_t>());
    ARBITER_RETURN_IF_ERROR(state.LoadRequest(std::move(r)));
  }
  const int64_t spend_since = LoadBoundMicros(scope.spend_since);
  for (const pqxx::row& row : tx.exec_prepared(sql::kSelectEndedSpend, spend_since)) {
    state.AddSpend(row[0].as<std::string>(), absl::FromUnixMicros(row[1].as<int64_t>()),
                   row[2].as<int64_t>());
  }
  ARBITER_ASSIGN_OR_RETURN(auto live,
                           RequestsFromResult(tx.exec_prepared(sql::kSelectLiveRequests)));
  ARBITER_RETURN_IF_ERROR(AttachPlacements(tx.exec_prepared(sql::kSelectLivePlacements), live));
  for (core::CapacityRequest& r : live) {
    // `requests` keeps no foreign keys (migration 0020); the state refuses a
    // placement on an unknown node, and this a team or pool it does not know.
    if (!state.teams().contains(r.spec.team) || state.FindPool(r.spec.pool) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("live request ", r.id, " of unknown team ",
                                                        r.spec.team, " or pool ", r.spec.pool));
    }
    ARBITER_RETURN_IF_ERROR(state.LoadRequest(std::move(r)));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

std::string DsnOf(const PgStoreOptions& options) {
  if (options.replica.empty()) return options.dsn;
  return AppendDsnOptions(options.dsn,
                          absl::StrCat("application_name=", ApplicationName(options.replica)));
}

}  // namespace

PgStore::PgStore(const PgStoreOptions& options)
    : reads_(DsnOf(options), options.read_connections, sql::PrepareAll),
      writer_(DsnOf(options), 1, sql::PrepareWriter),
      key_lookups_(DsnOf(options), 1, sql::PrepareKeyLookups),
      ledger_key_pem_(options.ledger_key_pem),
      checkpoint_every_(std::max<int64_t>(1, options.checkpoint_every)) {}

PgStore::~PgStore() = default;

absl::StatusOr<std::unique_ptr<PgStore>> PgStore::Create(const PgStoreOptions& options) {
  auto store = std::unique_ptr<PgStore>(new PgStore(options));
  // Open one connection now so that a wrong DSN fails at start-up.
  ARBITER_ASSIGN_OR_RETURN(auto lease, store->reads_.Acquire());
  (void)lease;
  return store;
}

absl::StatusOr<core::State> PgStore::LoadState(const LoadScope& scope) {
  return WithConnection("load state", [&](pqxx::connection& c) -> absl::StatusOr<core::State> {
    pqxx::work tx(c);
    // One consistent snapshot of everything.
    tx.exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY");
    core::State state;
    ARBITER_RETURN_IF_ERROR(LoadCatalogAndInventory(tx, state));
    ARBITER_RETURN_IF_ERROR(LoadGovernanceAndRequests(tx, scope, state));
    // The chain continues from the stored head.
    head_seq_ = 0;
    head_hash_ = ledger::kGenesisHash;
    for (const pqxx::row& row : tx.exec_prepared(sql::kSelectLedgerHead)) {
      head_seq_ = row[0].as<int64_t>();
      head_hash_ = row[1].as<std::string>();
    }
    checkpoint_seq_ = 0;
    for (const pqxx::row& row : tx.exec_prepared(sql::kSelectLastCheckpoint)) {
      checkpoint_seq_ = row[0].as<int64_t>();
    }
    tx.commit();
    return state;
  });
}

absl::Status PgStore::EnsureMonthPartitions(pqxx::connection& conn, const core::ChangeSet& changes,
                                            absl::Time at, bool* broken) {
  ARBITER_RETURN_IF_ERROR(EnsureMonthPartition(conn, at, broken));
  for (const core::Change& change : changes.changes) {
    const auto* write = std::get_if<core::RequestWrite>(&change);
    if (write == nullptr) continue;
    const core::CapacityRequest& r = write->request;
    // An ended request goes to the month it ended in; placements, written
    // when their request is admitted, to the month of its admission.
    if (core::IsFinal(r.state)) {
      ARBITER_RETURN_IF_ERROR(EnsureMonthPartition(conn, r.updated_at, broken));
    }
    if (r.state == core::RequestState::kAdmitted) {
      ARBITER_RETURN_IF_ERROR(EnsureMonthPartition(conn, PlacementTime(r), broken));
    }
  }
  return absl::OkStatus();
}

absl::Status PgStore::EnsureMonthPartition(pqxx::connection& conn, absl::Time at, bool* broken) {
  // Nearly every time a commit names is in the month last made sure of.
  if (at >= last_month_from_ && at < last_month_to_) return absl::OkStatus();
  const absl::CivilMonth civil_month = absl::ToCivilMonth(at, absl::UTCTimeZone());
  const absl::CivilDay first_day(civil_month);
  const int64_t month = first_day - absl::CivilDay(1970, 1, 1);
  if (!partitioned_months_.contains(month)) {
    ARBITER_RETURN_IF_ERROR(Guarded("ensure month partitions", broken, [&]() -> absl::Status {
      pqxx::nontransaction tx(conn);
      tx.exec_prepared(sql::kEnsureMonthPartitions, absl::FormatCivilTime(first_day));
      return absl::OkStatus();
    }));
    partitioned_months_.insert(month);
  }
  last_month_from_ = absl::FromCivil(civil_month, absl::UTCTimeZone());
  last_month_to_ = absl::FromCivil(civil_month + 1, absl::UTCTimeZone());
  return absl::OkStatus();
}

namespace {

void WriteDemand(pqxx::transaction_base& tx, const std::vector<core::DemandSlotWrite>& demand) {
  for (const core::DemandSlotWrite& w : demand) {
    tx.exec_prepared(sql::kUpsertDemandSlot, w.pool, w.slot.slot, w.slot.learnt_milli,
                     w.slot.peak_milli, w.slot.week);
  }
}

}  // namespace

absl::Status PgStore::CommitDemand(const std::vector<core::DemandSlotWrite>& demand) {
  ARBITER_ASSIGN_OR_RETURN(auto lease, writer_.Acquire());
  bool broken = false;
  const absl::Status status = Guarded("commit demand", &broken, [&]() -> absl::Status {
    pqxx::work tx(*lease);
    tx.exec_prepared(sql::kFence, fencing_epoch_);
    WriteDemand(tx, demand);
    tx.commit();
    return absl::OkStatus();
  });
  if (broken) lease.Discard();
  return status;
}

absl::Status PgStore::Commit(const core::ChangeSet& changes, const CommitContext& context) {
  if (changes.empty()) return absl::OkStatus();
  if (changes.changes.empty()) return CommitDemand(changes.demand);
  ARBITER_ASSIGN_OR_RETURN(auto lease, writer_.Acquire());
  // The entries and the checkpoint are built before the transaction; the
  // chain advances in memory only once it commits.
  const std::vector<ledger::Entry> entries =
      ledger::ChainEntries(head_seq_, head_hash_, changes, context);
  const int64_t seq = entries.back().seq;
  const std::string& hash = entries.back().hash;
  ARBITER_ASSIGN_OR_RETURN(const std::optional<ledger::Checkpoint> checkpoint,
                           ledger::MaybeCheckpoint({ledger_key_pem_, checkpoint_every_},
                                                   checkpoint_seq_, seq, hash, context.at));
  bool broken = false;
  if (absl::Status ensured = EnsureMonthPartitions(*lease, changes, context.at, &broken);
      !ensured.ok()) {
    if (broken) lease.Discard();
    return ensured;
  }
  // A batch of request writes alone is one statement, committed on its own
  // (PostgreSQL answers it after the commit is flushed); rarer changes add
  // statements of their own, in one explicit transaction.
  const bool one_statement =
      changes.demand.empty() &&
      std::all_of(changes.changes.begin(), changes.changes.end(), [](const core::Change& c) {
        return std::holds_alternative<core::RequestWrite>(c);
      });
  auto write = [&](pqxx::transaction_base& tx) -> absl::Status {
    BatchWriter batch;
    ChangeWriter writer{tx, batch, context.at};
    for (const core::Change& change : changes.changes) std::visit(writer, change);
    WriteDemand(tx, changes.demand);
    for (const ledger::Entry& e : entries) batch.Add(e);
    if (checkpoint.has_value()) {
      batch.AddCheckpoint(checkpoint->seq, checkpoint->hash, checkpoint->signature, checkpoint->at);
    }
    batch.Flush(tx, fencing_epoch_);
    return absl::OkStatus();
  };
  absl::Status status;
  {
    SyncReplicationWatch sync(*lease);
    status = Guarded("commit", &broken, [&]() -> absl::Status {
      if (one_statement) {
        pqxx::nontransaction tx(*lease);
        return write(tx);
      }
      pqxx::work tx(*lease);
      ARBITER_RETURN_IF_ERROR(write(tx));
      tx.commit();
      return absl::OkStatus();
    });
    // Committed here but perhaps lost in a failover: not acknowledged. The
    // arbiter reloads its state (and so the chain head) after a failed commit.
    if (status.ok() && sync.unconfirmed()) status = sync.UnconfirmedError("commit");
  }
  if (broken) lease.Discard();
  if (status.ok()) {
    head_seq_ = seq;
    head_hash_ = hash;
    if (checkpoint.has_value()) checkpoint_seq_ = seq;
  }
  return status;
}

absl::StatusOr<std::vector<core::GpuModel>> PgStore::ListGpuModels() {
  return WithConnection("list gpu models",
                        [](pqxx::connection& c) -> absl::StatusOr<std::vector<core::GpuModel>> {
                          pqxx::read_transaction tx(c);
                          std::vector<core::GpuModel> out;
                          for (const pqxx::row& row : tx.exec_prepared(sql::kSelectGpuModels)) {
                            ARBITER_ASSIGN_OR_RETURN(core::GpuModel model, GpuModelFromRow(row));
                            out.push_back(std::move(model));
                          }
                          return out;
                        });
}

absl::StatusOr<std::vector<core::Cluster>> PgStore::ListClusters() {
  return WithConnection(
      "list clusters", [](pqxx::connection& c) -> absl::StatusOr<std::vector<core::Cluster>> {
        pqxx::read_transaction tx(c);
        std::vector<core::Cluster> out;
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectClusters)) {
          out.push_back(core::Cluster{row[0].as<std::string>(), row[1].as<std::string>()});
        }
        return out;
      });
}

absl::StatusOr<std::vector<core::Pool>> PgStore::ListPools() {
  return WithConnection("list pools",
                        [](pqxx::connection& c) -> absl::StatusOr<std::vector<core::Pool>> {
                          pqxx::read_transaction tx(c);
                          std::vector<core::Pool> out;
                          for (const pqxx::row& row : tx.exec_prepared(sql::kSelectPools)) {
                            ARBITER_ASSIGN_OR_RETURN(core::Pool pool, rows::PoolFromRow(row));
                            out.push_back(std::move(pool));
                          }
                          return out;
                        });
}

absl::StatusOr<std::vector<core::Node>> PgStore::ListNodes(const std::string& cluster,
                                                           const std::string& pool) {
  return WithConnection(
      "list nodes", [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::Node>> {
        pqxx::read_transaction tx(c);
        // Rebuild the allocations from the live placements through core, so
        // that listings account exactly as the arbiter does.
        core::State state;
        ARBITER_RETURN_IF_ERROR(LoadCatalogAndInventory(tx, state));
        ARBITER_ASSIGN_OR_RETURN(auto live,
                                 RequestsFromResult(tx.exec_prepared(sql::kSelectLiveRequests)));
        ARBITER_RETURN_IF_ERROR(
            AttachPlacements(tx.exec_prepared(sql::kSelectLivePlacements), live));
        for (core::CapacityRequest& r : live) {
          ARBITER_RETURN_IF_ERROR(state.LoadRequest(std::move(r)));
        }
        return NodesMatching(state, cluster, pool);
      });
}

absl::StatusOr<std::vector<core::Team>> PgStore::ListTeams() {
  return WithConnection(
      "list teams", [](pqxx::connection& c) -> absl::StatusOr<std::vector<core::Team>> {
        pqxx::read_transaction tx(c);
        std::vector<core::Team> out;
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectTeams)) {
          out.push_back(
              core::Team{row[0].as<std::string>(), row[1].as<std::string>(), row[2].as<int64_t>()});
        }
        std::sort(out.begin(), out.end(),
                  [](const core::Team& a, const core::Team& b) { return a.name < b.name; });
        return out;
      });
}

absl::StatusOr<std::vector<QuotaUsage>> PgStore::ListQuotas(const std::string& team) {
  return WithConnection(
      "list quotas", [&](pqxx::connection& c) -> absl::StatusOr<std::vector<QuotaUsage>> {
        pqxx::read_transaction tx(c);
        std::vector<QuotaUsage> out;
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectQuotaUsage, team)) {
          out.push_back(QuotaUsage{rows::QuotaFromRow(row), row[8].as<int64_t>()});
        }
        return out;
      });
}

absl::StatusOr<core::CapacityRequest> PgStore::GetRequest(int64_t id) {
  return WithConnection(
      "get request", [&](pqxx::connection& c) -> absl::StatusOr<core::CapacityRequest> {
        pqxx::read_transaction tx(c);
        ARBITER_ASSIGN_OR_RETURN(auto found,
                                 RequestsFromResult(tx.exec_prepared(sql::kSelectRequest, id)));
        if (found.empty()) return absl::NotFoundError(absl::StrCat("id: no request ", id));
        ARBITER_RETURN_IF_ERROR(AttachPlacements(
            tx.exec_prepared(sql::kSelectPlacementsOf, rows::BigintArrayLiteral({id})), found));
        return std::move(found[0]);
      });
}

absl::StatusOr<std::vector<EndedKey>> PgStore::FindEndedKeys(const std::vector<std::string>& keys,
                                                             absl::Time since) {
  if (keys.empty()) return std::vector<EndedKey>();
  return WithConnectionOf(
      key_lookups_, "find ended keys",
      [&](pqxx::connection& c) -> absl::StatusOr<std::vector<EndedKey>> {
        pqxx::nontransaction tx(c);  // One statement: no BEGIN and COMMIT around it.
        std::vector<EndedKey> out;
        for (const pqxx::row& row : tx.exec_prepared(
                 sql::kFindEndedKeys, rows::TextArrayLiteral(keys), LoadBoundMicros(since))) {
          out.push_back(EndedKey{row[0].as<std::string>(), row[1].as<int64_t>(),
                                 static_cast<uint64_t>(row[2].as<int64_t>())});
        }
        return out;
      });
}

absl::StatusOr<std::vector<core::CapacityRequest>> PgStore::ListRequests(
    const RequestFilter& filter) {
  ARBITER_ASSIGN_OR_RETURN(RequestPage page, ListRequestPage(filter));
  return std::move(page.requests);
}

absl::StatusOr<RequestPage> PgStore::ListRequestPage(const RequestFilter& filter) {
  return WithConnection("list requests", [&](pqxx::connection& c) -> absl::StatusOr<RequestPage> {
    pqxx::work tx(c);
    // One snapshot for the requests, their placements and the ledger head:
    // a request row and its ledger entry commit together.
    tx.exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY");
    const std::string state =
        filter.state == RequestState::kUnspecified ? std::string() : StateName(filter.state);
    RequestPage page;
    ARBITER_ASSIGN_OR_RETURN(
        page.requests, RequestsFromResult(tx.exec_prepared(sql::kSelectRequests, filter.team, state,
                                                           filter.before_id, filter.limit)));
    std::vector<int64_t> ids;
    for (const auto& r : page.requests) ids.push_back(r.id);
    ARBITER_RETURN_IF_ERROR(AttachPlacements(
        tx.exec_prepared(sql::kSelectPlacementsOf, rows::BigintArrayLiteral(ids)), page.requests));
    for (const pqxx::row& row : tx.exec_prepared(sql::kSelectLedgerHead)) {
      page.revision = row[0].as<int64_t>();
    }
    tx.commit();
    return page;
  });
}

absl::StatusOr<core::CoexistenceMatrix> PgStore::GetCoexistence() {
  return WithConnection("get coexistence",
                        [](pqxx::connection& c) -> absl::StatusOr<core::CoexistenceMatrix> {
                          pqxx::read_transaction tx(c);
                          return CoexistenceFrom(tx);
                        });
}

absl::StatusOr<std::vector<core::RoleBinding>> PgStore::ListRoleBindings() {
  return WithConnection("list role bindings",
                        [](pqxx::connection& c) -> absl::StatusOr<std::vector<core::RoleBinding>> {
                          pqxx::read_transaction tx(c);
                          return RoleBindingsFrom(tx);
                        });
}

absl::Status PgStore::RecordAccessDenial(const std::string& principal, const std::string& method,
                                         const std::string& code, const std::string& reason) {
  return WithConnection("record access denial", [&](pqxx::connection& c) -> absl::Status {
    pqxx::work tx(c);
    tx.exec_prepared(sql::kInsertAccessDenial, principal, method, code, reason);
    tx.commit();
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<ledger::Entry>> PgStore::ListLedger(const LedgerFilter& filter) {
  return WithConnection("list ledger",
                        [&](pqxx::connection& c) -> absl::StatusOr<std::vector<ledger::Entry>> {
                          pqxx::read_transaction tx(c);
                          std::vector<ledger::Entry> out;
                          for (const pqxx::row& row :
                               tx.exec_prepared(sql::kSelectLedger, filter.after_seq, filter.limit,
                                                filter.subject, filter.actor, filter.action)) {
                            out.push_back(rows::LedgerEntryFromRow(row));
                          }
                          return out;
                        });
}

absl::StatusOr<std::vector<LedgerCheckpoint>> PgStore::ListCheckpoints(int64_t after_seq,
                                                                       int32_t limit) {
  return WithConnection(
      "list checkpoints",
      [after_seq, limit](pqxx::connection& c) -> absl::StatusOr<std::vector<LedgerCheckpoint>> {
        pqxx::read_transaction tx(c);
        std::vector<LedgerCheckpoint> out;
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectCheckpoints, after_seq, limit)) {
          out.push_back(LedgerCheckpoint{row[0].as<int64_t>(), row[1].as<std::string>(),
                                         row[2].as<std::string>(),
                                         absl::FromUnixMicros(row[3].as<int64_t>())});
        }
        return out;
      });
}

absl::StatusOr<MetricsSnapshot> PgStore::LoadMetricsSnapshot() {
  return WithConnection(
      "metrics snapshot", [](pqxx::connection& c) -> absl::StatusOr<MetricsSnapshot> {
        // Repeatable read: the four reads see one state.
        pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx(c);
        MetricsSnapshot out;
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectAllocatedGauges)) {
          out.allocated.push_back(GpuGauge{row[0].as<std::string>(), row[1].as<std::string>(),
                                           row[2].as<std::string>(), row[3].as<std::string>(),
                                           row[4].as<int64_t>(), 0});
        }
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectLastHourGauges)) {
          out.last_hour.push_back(GpuGauge{row[0].as<std::string>(), row[1].as<std::string>(),
                                           row[2].as<std::string>(), row[3].as<std::string>(),
                                           row[4].as<int64_t>(), row[5].as<int64_t>()});
        }
        const pqxx::row counts = tx.exec_prepared1(sql::kSelectStateCounts);
        out.pending_approvals = counts[0].as<int64_t>();
        out.queued = counts[1].as<int64_t>();
        out.ledger_entries = counts[2].as<int64_t>();
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectIncidentCounts)) {
          out.incidents_by_team[row[0].as<std::string>()] = row[1].as<int64_t>();
        }
        return out;
      });
}

absl::StatusOr<std::vector<core::AuthorityRule>> PgStore::ListAuthorityRules() {
  return WithConnection(
      "list authority rules",
      [](pqxx::connection& c) -> absl::StatusOr<std::vector<core::AuthorityRule>> {
        pqxx::read_transaction tx(c);
        return AuthorityRulesFrom(tx);
      });
}

absl::StatusOr<std::vector<core::Price>> PgStore::ListPrices() {
  return WithConnection("list prices",
                        [](pqxx::connection& c) -> absl::StatusOr<std::vector<core::Price>> {
                          pqxx::read_transaction tx(c);
                          return PricesFrom(tx);
                        });
}

absl::StatusOr<std::vector<core::PowerBudget>> PgStore::ListPowerBudgets() {
  return WithConnection("list power budgets",
                        [](pqxx::connection& c) -> absl::StatusOr<std::vector<core::PowerBudget>> {
                          pqxx::read_transaction tx(c);
                          return PowerBudgetsFrom(tx);
                        });
}

absl::StatusOr<std::vector<core::Budget>> PgStore::ListBudgets() {
  return WithConnection("list budgets",
                        [](pqxx::connection& c) -> absl::StatusOr<std::vector<core::Budget>> {
                          pqxx::read_transaction tx(c);
                          return BudgetsFrom(tx);
                        });
}

absl::StatusOr<std::map<std::string, int64_t>> PgStore::SpendBetween(absl::Time from,
                                                                     absl::Time to) {
  return WithConnection(
      "spend", [&](pqxx::connection& c) -> absl::StatusOr<std::map<std::string, int64_t>> {
        pqxx::read_transaction tx(c);
        std::map<std::string, int64_t> out;
        for (const pqxx::row& row :
             tx.exec_prepared(sql::kSelectSpend, rows::ToMicros(from), rows::ToMicros(to))) {
          out[row[0].as<std::string>()] = row[1].as<int64_t>();
        }
        return out;
      });
}

absl::StatusOr<std::map<std::string, int64_t>> PgStore::MonthSpend(absl::Time month_start) {
  return WithConnection(
      "month spend", [&](pqxx::connection& c) -> absl::StatusOr<std::map<std::string, int64_t>> {
        pqxx::read_transaction tx(c);
        std::map<std::string, int64_t> out;
        for (const pqxx::row& row :
             tx.exec_prepared(sql::kSelectMonthSpend, rows::ToMicros(month_start),
                              rows::ToMicros(core::NextMonthStart(month_start)))) {
          out[row[0].as<std::string>()] = row[1].as<int64_t>();
        }
        return out;
      });
}

absl::StatusOr<std::vector<core::Delegation>> PgStore::ListDelegations() {
  return WithConnection("list delegations",
                        [](pqxx::connection& c) -> absl::StatusOr<std::vector<core::Delegation>> {
                          pqxx::read_transaction tx(c);
                          return DelegationsFrom(tx);
                        });
}

}  // namespace arbiter::store
