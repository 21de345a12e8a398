#include "ledger/entries.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#include "core/mig.h"

namespace arbiter::ledger {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

Entry Make(std::string action, std::string subject, Fields fields) {
  Entry e;
  e.action = std::move(action);
  e.subject = std::move(subject);
  e.payload = Payload(std::move(fields));
  return e;
}

std::string Str(absl::string_view s) { return std::string(s); }

// Placements as a request entry records them: "node:i+j", comma separated.
std::string PlacementsField(const std::vector<core::Placement>& placements) {
  std::vector<std::string> where;
  where.reserve(placements.size());
  for (const core::Placement& p : placements) {
    where.push_back(absl::StrCat(p.node_id, ":", absl::StrJoin(p.gpu_indices, "+")));
  }
  return absl::StrJoin(where, ",");
}

// PlacementsField's inverse, over the placements of the stored row.
std::vector<core::Placement> PlacementsAsOf(absl::string_view field,
                                            const std::vector<core::Placement>& stored) {
  std::vector<core::Placement> out;
  if (field.empty()) return out;
  int32_t member = 0;
  for (absl::string_view one : absl::StrSplit(field, ',')) {
    std::pair<absl::string_view, absl::string_view> node_gpus = absl::StrSplit(one, ':');
    core::Placement p;
    p.member = member++;
    if (!absl::SimpleAtoi(node_gpus.first, &p.node_id)) continue;
    for (absl::string_view gpu : absl::StrSplit(node_gpus.second, '+', absl::SkipEmpty())) {
      int32_t index = 0;
      if (absl::SimpleAtoi(gpu, &index)) p.gpu_indices.push_back(index);
    }
    auto same = std::find_if(stored.begin(), stored.end(), [&](const core::Placement& s) {
      return s.node_id == p.node_id && s.gpu_indices == p.gpu_indices;
    });
    out.push_back(same != stored.end() ? *same : std::move(p));
  }
  return out;
}

struct EntryOf {
  Entry operator()(const core::GpuModel& m) const {
    return Make("gpu_model.set", absl::StrCat("gpu_model/", m.name),
                {{"memory_mib", absl::StrCat(m.memory_mib)},
                 {"sm_count", absl::StrCat(m.sm_count)},
                 {"tdp_watts", absl::StrCat(m.tdp_watts)},
                 {"vendor", m.vendor},
                 {"nvlink_domain_size", absl::StrCat(m.nvlink_domain_size)},
                 {"mig_profiles", core::FormatMigProfiles(m.mig_profiles)}});
  }
  Entry operator()(const core::Cluster& c) const {
    return Make("cluster.create", absl::StrCat("cluster/", c.name),
                {{"description", c.description}});
  }
  Entry operator()(const core::Pool& p) const {
    std::vector<std::string> lends;
    for (core::WorkloadClass c : p.lends_to) lends.push_back(Str(core::WorkloadClassName(c)));
    Fields f = {{"latency_class", Str(core::LatencyClassName(p.latency_class))},
                {"lends_to", absl::StrJoin(lends, ",")},
                {"reclaim_grace_seconds", absl::StrCat(p.reclaim_grace_seconds)},
                {"queueing", Str(core::QueueingPolicyName(p.queueing))},
                {"starvation_limit_seconds", absl::StrCat(p.starvation_limit_seconds)}};
    // The class rules only when set: pools without them read as they did.
    std::vector<std::string> rules;
    for (const core::PoolClassRule& r : p.class_rules) {
      std::string rule = absl::StrCat(core::WorkloadClassName(r.workload_class), "=",
                                      core::ClassAdmissionName(r.admission));
      if (r.window.has_value()) absl::StrAppend(&rule, "@", core::FormatRecurringWindow(*r.window));
      rules.push_back(std::move(rule));
    }
    if (!rules.empty()) f.emplace_back("class_rules", absl::StrJoin(rules, ";"));
    return Make("pool.create", absl::StrCat("pool/", p.name), std::move(f));
  }
  Entry operator()(const core::Node& n) const {
    std::vector<std::string> models;
    for (const core::Gpu& g : n.gpus) models.push_back(g.model);
    return Make("node.register", absl::StrCat("node/", n.cluster, "/", n.name),
                {{"id", absl::StrCat(n.id)},
                 {"pool", n.pool},
                 {"gpus", absl::StrJoin(models, ",")},
                 {"cpu_milli", absl::StrCat(n.cpu_milli)},
                 {"memory_mib", absl::StrCat(n.memory_mib)},
                 {"topology_domain", n.topology_domain}});
  }
  Entry operator()(const core::NodeWrite& w) const {
    const core::Node& n = w.node;
    Fields f = {{"id", absl::StrCat(n.id)}};
    switch (w.event) {
      case core::NodeEvent::kUpdate:
        f.push_back({"cpu_milli", absl::StrCat(n.cpu_milli)});
        f.push_back({"memory_mib", absl::StrCat(n.memory_mib)});
        f.push_back({"topology_domain", n.topology_domain});
        break;
      case core::NodeEvent::kDrain:
        f.push_back({"drain_deadline_us", absl::StrCat(absl::ToUnixMicros(n.drain_deadline))});
        break;
      case core::NodeEvent::kFail:
        f.push_back({"failed_at_us", absl::StrCat(absl::ToUnixMicros(n.failed_at))});
        break;
      case core::NodeEvent::kReachable:
      case core::NodeEvent::kUnreachable:
        f.push_back({"last_heartbeat_us", absl::StrCat(absl::ToUnixMicros(n.last_heartbeat))});
        break;
      default:
        break;
    }
    return Make(absl::StrCat("node.", core::NodeEventName(w.event)),
                absl::StrCat("node/", n.cluster, "/", n.name), std::move(f));
  }
  Entry operator()(const core::Team& t) const {
    return Make("team.create", absl::StrCat("team/", t.name),
                {{"parent", t.parent}, {"weight_milli", absl::StrCat(t.weight_milli)}});
  }
  Entry operator()(const core::Quota& q) const {
    Fields f = {{"nominal_milli", absl::StrCat(q.nominal_milli)},
                {"borrowing_limit_milli", absl::StrCat(q.borrowing_limit_milli)},
                {"lending_limit_milli", absl::StrCat(q.lending_limit_milli)}};
    // Cohort limits only when set: quotas without them read as they did.
    if (q.cohort_lending_limit_milli != core::kUnlimited) {
      f.emplace_back("cohort_lending_limit_milli", absl::StrCat(q.cohort_lending_limit_milli));
    }
    if (q.cohort_borrowing_limit_milli != core::kUnlimited) {
      f.emplace_back("cohort_borrowing_limit_milli", absl::StrCat(q.cohort_borrowing_limit_milli));
    }
    return Make("quota.set", absl::StrCat("quota/", q.team, "/", q.pool, "/", q.gpu_model),
                std::move(f));
  }
  Entry operator()(const core::RequestWrite& w) const {
    const core::CapacityRequest& r = w.request;
    Fields f = {{"team", r.spec.team},
                {"pool", r.spec.pool},
                {"class", Str(core::WorkloadClassName(r.spec.workload_class))},
                {"members", absl::StrCat(r.spec.members)},
                {"gpu_milli", absl::StrCat(r.spec.total_gpu_milli())},
                {"priority", absl::StrCat(r.spec.priority)},
                {"reason_code", r.reason_code},
                {"placements", PlacementsField(r.placements)}};
    if (r.spec.guaranteed) f.emplace_back("guaranteed", "true");
    if (r.spec.spot) f.emplace_back("spot", "true");
    if (r.spec.recurrence.has_value()) {
      f.emplace_back("recurrence", core::FormatRecurringWindow(*r.spec.recurrence));
    }
    if (r.burst_until != absl::InfinitePast()) {
      // A burst above quota into the pool's headroom, charged at the burst price.
      f.emplace_back("burst_until_us", absl::StrCat(absl::ToUnixMicros(r.burst_until)));
    }
    if (!r.approvals.empty()) f.emplace_back("approvals", absl::StrJoin(r.approvals, ","));
    if (!r.approvers.empty()) f.emplace_back("approvers", absl::StrJoin(r.approvers, ","));
    if (!r.reason.empty()) f.emplace_back("reason", r.reason);
    if (r.cost_micros != 0) f.emplace_back("cost_micros", absl::StrCat(r.cost_micros));
    if (r.run_started_at != absl::InfinitePast()) {
      // The workload's run its enforcer reported, which the cost is for.
      f.emplace_back("run_started_us", absl::StrCat(absl::ToUnixMicros(r.run_started_at)));
      f.emplace_back("run_ended_us", absl::StrCat(absl::ToUnixMicros(r.run_ended_at)));
    }
    if (!r.claims.empty()) {
      std::vector<std::string> claims;
      for (const core::Claim& c : r.claims) claims.push_back(absl::StrCat(c.member, ":", c.holder));
      f.emplace_back("claims", absl::StrJoin(claims, ","));
    }
    if (r.state == core::RequestState::kPreempting || r.state == core::RequestState::kPreempted) {
      f.emplace_back("preempted_by", absl::StrCat(r.preempted_by));
      f.emplace_back("deadline_us", absl::StrCat(absl::ToUnixMicros(r.preempt_deadline)));
    }
    return Make(absl::StrCat("request.", core::RequestStateName(r.state)),
                absl::StrCat("request/", r.id), std::move(f));
  }
  Entry operator()(const core::ClassRule& c) const {
    return Make("coexistence.set",
                absl::StrCat("coexistence/", core::WorkloadClassName(c.a), "/",
                             core::WorkloadClassName(c.b)),
                {{"gpu", Str(core::IsolationName(c.rule.gpu))},
                 {"same_node", c.rule.same_node ? "true" : "false"}});
  }
  Entry operator()(const core::DelegationWrite& w) const {
    return Make(w.revoke ? "delegation.revoke" : "delegation.grant",
                absl::StrCat("delegation/", w.delegation.from, "/", w.delegation.to),
                {{"expires_at_us", absl::StrCat(absl::ToUnixMicros(w.delegation.expires_at))}});
  }
  Entry operator()(const core::Price& p) const {
    return Make("price.set",
                absl::StrCat("price/", p.gpu_model, "/", core::LatencyClassName(p.latency_class)),
                {{"micros_per_gpu_hour", absl::StrCat(p.micros_per_gpu_hour)},
                 {"effective_from_us", absl::StrCat(absl::ToUnixMicros(p.effective_from))}});
  }
  Entry operator()(const core::PowerBudget& b) const {
    return Make("power_budget.set",
                absl::StrCat("power_budget/", core::PowerScopeName(b.scope), "/", b.name),
                {{"watts", absl::StrCat(b.watts)}, {"reclaim", b.reclaim ? "true" : "false"}});
  }
  Entry operator()(const core::Budget& b) const {
    return Make("budget.set", absl::StrCat("budget/", b.team),
                {{"soft_limit_micros", absl::StrCat(b.soft_limit_micros)},
                 {"hard_limit_micros", absl::StrCat(b.hard_limit_micros)},
                 {"over", b.over == core::OverBudget::kApproval ? "approval" : "deny"}});
  }
  Entry operator()(const core::IdlePolicy& p) const {
    return Make("idle_policy.set",
                absl::StrCat("idle_policy/", core::WorkloadClassName(p.workload_class)),
                {{"threshold_milli", absl::StrCat(p.threshold_milli)},
                 {"window_seconds", absl::StrCat(absl::ToInt64Seconds(p.window))},
                 {"action", Str(core::IdleActionName(p.action))},
                 {"notice_seconds", absl::StrCat(absl::ToInt64Seconds(p.notice))}});
  }
  Entry operator()(const core::Slo& s) const {
    return Make("slo.set", absl::StrCat("slo/", s.team, "/", s.service),
                {{"pool", s.pool},
                 {"p99_target_us", absl::StrCat(s.p99_target_us)},
                 {"window_seconds", absl::StrCat(absl::ToInt64Seconds(s.window))},
                 {"penalty_micros_per_minute", absl::StrCat(s.penalty_micros_per_minute)}});
  }
  Entry operator()(const core::IncidentWrite& w) const {
    const core::Incident& i = w.incident;
    std::vector<std::string> causes;
    for (const core::Interference& f : i.attribution.causes) causes.push_back(f.team);
    return Make("incident.recorded", absl::StrCat("incident/", i.id),
                {{"team", i.slo.team},
                 {"service", i.slo.service},
                 {"pool", i.slo.pool},
                 {"window_start_us", absl::StrCat(absl::ToUnixMicros(i.window.start))},
                 {"window_end_us", absl::StrCat(absl::ToUnixMicros(i.window.end))},
                 {"p99_us", absl::StrCat(i.window.p99_us)},
                 {"p99_target_us", absl::StrCat(i.slo.p99_target_us)},
                 {"cost_micros", absl::StrCat(i.attribution.cost_micros)},
                 {"cost_basis", i.attribution.cost_basis},
                 {"attributed_micros", absl::StrCat(i.attribution.attributed_micros())},
                 {"causes", absl::StrJoin(causes, ",")}});
  }
  Entry operator()(const core::ExternalityCharge& c) const {
    const core::Interference& f = c.interference;
    return Make(c.micros > 0 ? "externality.charge" : "externality.credit",
                absl::StrCat("team/", c.team),
                {{"incident", absl::StrCat(c.incident_id)},
                 {"micros", absl::StrCat(c.micros)},
                 {"method", core::kAttributionMethod},
                 {"borrowed_milli_seconds", absl::StrCat(f.borrowed_milli_seconds)},
                 {"co_tenancy_milli_seconds", absl::StrCat(f.co_tenancy_milli_seconds)},
                 {"admission_delay_milli_seconds", absl::StrCat(f.admission_delay_milli_seconds)},
                 {"requests", absl::StrJoin(f.request_ids, ",")}});
  }
  Entry operator()(const core::PeriodClose& p) const {
    return Make(
        "chargeback.close",
        absl::StrCat("chargeback/", absl::ToUnixMicros(p.from), "-", absl::ToUnixMicros(p.to)),
        {{"from_us", absl::StrCat(absl::ToUnixMicros(p.from))},
         {"to_us", absl::StrCat(absl::ToUnixMicros(p.to))},
         {"sha256", p.hash},
         {"teams", absl::StrCat(p.teams)},
         {"net_cost_micros", absl::StrCat(p.net_cost_micros)}});
  }
  Entry operator()(const core::AuthorityRuleWrite& w) const {
    const core::AuthorityRule& r = w.rule;
    return Make(w.remove ? "authority.remove" : "authority.set",
                absl::StrCat("authority/", r.pool, "/", core::ApprovalActionName(r.action)),
                {{"approver", r.approver},
                 {"limit_milli", absl::StrCat(r.limit_milli)},
                 {"threshold_milli", absl::StrCat(r.threshold_milli)},
                 {"threshold_seconds", absl::StrCat(r.threshold_seconds)},
                 {"limit_seconds", absl::StrCat(r.limit_seconds)},
                 {"limit_micros", absl::StrCat(r.limit_micros)}});
  }
  Entry operator()(const core::RoleBindingWrite& w) const {
    return Make(w.revoke ? "role.revoke" : "role.grant", absl::StrCat("role/", w.binding.subject),
                {{"role", Str(core::RoleName(w.binding.role))},
                 {"scope_kind", Str(core::ScopeKindName(w.binding.scope_kind))},
                 {"scope", w.binding.scope}});
  }
};

}  // namespace

Entry EntryFor(const core::Change& change) { return std::visit(EntryOf{}, change); }

absl::StatusOr<core::CapacityRequest> RequestAsOf(const core::CapacityRequest& stored,
                                                  const Entry& entry) {
  absl::string_view action = entry.action;
  core::RequestState state = core::RequestState::kUnspecified;
  if (absl::ConsumePrefix(&action, "request.")) state = core::RequestStateFromName(action);
  if (state == core::RequestState::kUnspecified ||
      entry.subject != absl::StrCat("request/", stored.id)) {
    return absl::InvalidArgumentError(absl::StrCat("ledger entry ", entry.seq, " (", entry.action,
                                                   " ", entry.subject, ") is not one of request ",
                                                   stored.id));
  }
  absl::StatusOr<Fields> fields = ParsePayload(entry.payload);
  if (!fields.ok()) return fields.status();
  absl::flat_hash_map<std::string, std::string> f(fields->begin(), fields->end());
  auto field = [&](const char* key) -> absl::string_view {
    auto it = f.find(key);
    return it == f.end() ? absl::string_view() : absl::string_view(it->second);
  };
  auto list = [&](const char* key) {
    return field(key).empty() ? std::vector<std::string>()
                              : std::vector<std::string>(absl::StrSplit(field(key), ','));
  };
  core::CapacityRequest r = stored;
  r.state = state;
  r.updated_at = entry.at;
  r.reason_code = std::string(field("reason_code"));
  r.reason = std::string(field("reason"));
  if (field("placements") != PlacementsField(stored.placements)) {
    r.placements = PlacementsAsOf(field("placements"), stored.placements);
  }
  if (r.placements.empty()) r.admitted_at = absl::InfinitePast();
  r.approvals = list("approvals");
  r.approvers = list("approvers");
  if (!absl::SimpleAtoi(field("cost_micros"), &r.cost_micros)) r.cost_micros = 0;
  int64_t run_started_us = 0, run_ended_us = 0;
  if (absl::SimpleAtoi(field("run_started_us"), &run_started_us) &&
      absl::SimpleAtoi(field("run_ended_us"), &run_ended_us)) {
    r.run_started_at = absl::FromUnixMicros(run_started_us);
    r.run_ended_at = absl::FromUnixMicros(run_ended_us);
  } else {
    r.run_started_at = r.run_ended_at = absl::InfinitePast();
  }
  int64_t burst_until_us = 0;
  r.burst_until = absl::SimpleAtoi(field("burst_until_us"), &burst_until_us)
                      ? absl::FromUnixMicros(burst_until_us)
                      : absl::InfinitePast();
  int64_t deadline_us = 0;
  if (absl::SimpleAtoi(field("deadline_us"), &deadline_us) &&
      absl::SimpleAtoi(field("preempted_by"), &r.preempted_by)) {
    r.preempt_deadline = absl::FromUnixMicros(deadline_us);
  } else {
    r.preempt_deadline = absl::InfinitePast();
    r.preempted_by = 0;
  }
  return r;
}

std::vector<Entry> ChainEntries(int64_t head_seq, absl::string_view head_hash,
                                const core::ChangeSet& changes, const CommitContext& context) {
  std::vector<Entry> out;
  out.reserve(changes.changes.size());
  const absl::Time at = absl::FromUnixMicros(absl::ToUnixMicros(context.at));
  int64_t seq = head_seq;
  std::string hash(head_hash);
  for (size_t i = 0; i < changes.changes.size(); ++i) {
    Entry e = EntryFor(changes.changes[i]);
    e.seq = ++seq;
    e.at = at;
    e.actor = i < context.actors.size() ? context.actors[i] : "system";
    e.prev_hash = hash;
    e.hash = HashOf(e.prev_hash, e);
    hash = e.hash;
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::optional<Checkpoint>> MaybeCheckpoint(const CheckpointPolicy& policy,
                                                          int64_t last_checkpoint_seq,
                                                          int64_t head_seq,
                                                          absl::string_view head_hash,
                                                          absl::Time at) {
  if (policy.key_pem.empty()) return std::optional<Checkpoint>();
  if (head_seq - last_checkpoint_seq < std::max<int64_t>(1, policy.every)) {
    return std::optional<Checkpoint>();
  }
  absl::StatusOr<std::string> signature =
      Sign(policy.key_pem, CheckpointMessage(head_seq, head_hash));
  if (!signature.ok()) return signature.status();
  return std::optional<Checkpoint>(Checkpoint{head_seq, std::string(head_hash),
                                              *std::move(signature),
                                              absl::FromUnixMicros(absl::ToUnixMicros(at))});
}

}  // namespace arbiter::ledger
