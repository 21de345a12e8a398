#include "store/memory/memory_store.h"

#include <algorithm>
#include <climits>
#include <map>
#include <utility>
#include <variant>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/civil_time.h"

#include "core/budget.h"
#include "core/mig.h"
#include "core/status_macros.h"
#include "ledger/entries.h"
#include "store/node_listing.h"

namespace arbiter::store {

using core::RequestState;

namespace {

std::string Name(absl::string_view s) { return std::string(s); }

// A time as a timestamptz column keeps it: microseconds; the infinities
// (NULL columns) as they are.
absl::Time Micros(absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) return t;
  return absl::FromUnixMicros(absl::ToUnixMicros(t));
}

bool IsLive(RequestState s) {
  return s == RequestState::kAdmitted || s == RequestState::kQueued ||
         s == RequestState::kPreempting || s == RequestState::kReserved ||
         s == RequestState::kPendingApproval;
}

bool Holds(RequestState s) {
  return s == RequestState::kAdmitted || s == RequestState::kPreempting;
}

// Held at some time: admitted, then perhaps ended (kSelectHeldMembers).
bool WasHeld(RequestState s) {
  return Holds(s) || s == RequestState::kReleased || s == RequestState::kPreempted ||
         s == RequestState::kCancelled;
}

// "a,b" -> {"a", "b"}; "" -> {}: how a comma-joined column reads back.
std::vector<std::string> ListColumn(const std::vector<std::string>& values) {
  const std::string text = absl::StrJoin(values, ",");
  if (text.empty()) return {};
  return absl::StrSplit(text, ',');
}

// A request as its row reads back (pg_rows.cc RequestFromRow), without
// placements.
core::CapacityRequest Persisted(const core::CapacityRequest& in) {
  core::CapacityRequest r;
  r.id = in.id;
  r.spec.idempotency_key = in.spec.idempotency_key;
  r.body_hash = in.body_hash;
  r.spec.team = in.spec.team;
  r.spec.pool = in.spec.pool;
  r.spec.workload_class = in.spec.workload_class;
  r.spec.members = in.spec.members;
  const core::MemberShape& shape = in.spec.shape;
  const int32_t whole = shape.is_whole() ? shape.whole_gpus() : 0;
  if (whole > 0) {
    r.spec.shape.gpu = whole;
  } else if (shape.is_mig() && !shape.mig().profile.empty()) {
    r.spec.shape.gpu = core::MigShape{shape.mig().profile, shape.gpu_milli()};
  } else if (shape.is_fraction()) {
    r.spec.shape.gpu = core::GpuFraction{shape.fraction().gpu_milli, shape.fraction().memory_mib};
  } else {
    r.spec.shape.gpu = core::GpuFraction{0, 0};
  }
  r.spec.shape.cpu_milli = shape.cpu_milli;
  r.spec.shape.memory_mib = shape.memory_mib;
  r.spec.gpu_models = in.spec.gpu_models;
  r.spec.description = in.spec.description;
  r.spec.topology = in.spec.topology;
  if (in.spec.model_profile.has_value() && in.spec.model_profile->parameters > 0) {
    r.spec.model_profile = in.spec.model_profile;
  }
  r.spec.priority = in.spec.priority;
  r.spec.preemptible = in.spec.preemptible;
  r.spec.checkpoint_seconds = in.spec.checkpoint_seconds;
  r.spec.checkpoint_interval_seconds = in.spec.checkpoint_interval_seconds;
  r.spec.guaranteed = in.spec.guaranteed;
  r.spec.spot = in.spec.spot;
  r.spec.burst_seconds = in.spec.burst_seconds;
  r.spec.recurrence = in.spec.recurrence;
  r.spec.start_at = Micros(in.spec.start_at);
  r.spec.duration = absl::Seconds(absl::ToInt64Seconds(in.spec.duration));
  r.state = in.state;
  r.reason_code = in.reason_code;
  r.reason = in.reason;
  r.created_at = Micros(in.created_at);
  r.updated_at = Micros(in.updated_at);
  r.admitted_at = Micros(in.admitted_at);
  r.quota_model = in.quota_model;
  r.preempt_deadline = Micros(in.preempt_deadline);
  r.preempted_by = in.preempted_by;
  r.holds = in.holds;
  r.approvals = ListColumn(in.approvals);
  r.approvers = ListColumn(in.approvers);
  r.approval_deadline = Micros(in.approval_deadline);
  r.cost_micros = in.cost_micros;
  r.run_started_at = Micros(in.run_started_at);
  r.run_ended_at = Micros(in.run_ended_at);
  r.burst_until = Micros(in.burst_until);
  for (const core::Claim& c : in.claims) {
    // As the row keeps it: renewals are not stored (core::GraceLeases).
    r.claims.push_back(core::Claim{c.member, c.holder, Micros(c.claimed_at), Micros(c.claimed_at)});
  }
  return r;
}

// A placement as its row reads back (pg_rows.cc PlacementFromRow).
core::Placement PersistedPlacement(const core::Placement& in) {
  core::Placement p;
  p.member = in.member;
  p.node_id = in.node_id;
  p.gpu_indices = in.gpu_indices;
  p.gpu_milli = in.gpu_milli;
  p.gpu_memory_mib = in.gpu_memory_mib;
  p.cpu_milli = in.cpu_milli;
  p.memory_mib = in.memory_mib;
  p.exclusive = in.exclusive;
  p.mig_profile = in.mig_profile;
  p.mig_start = in.mig_start;
  (void)core::ParseMigLayout(core::FormatMigLayout(in.mig_new_layout), &p.mig_new_layout);
  p.mig_layout_cleared = in.mig_layout_cleared;
  return p;
}

absl::Status Duplicate(absl::string_view what) {
  return absl::AlreadyExistsError(absl::StrCat("commit: duplicate key: ", what));
}

absl::Status Missing(absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat("commit: no such ", what));
}

absl::Status NegativeLimit() { return absl::InternalError("LIMIT must not be negative"); }

// "YYYY-MM-DD" of the UTC day of `t` (a sample partition).
std::string DayOf(absl::Time t) {
  return absl::FormatCivilTime(absl::ToCivilDay(t, absl::UTCTimeZone()));
}

}  // namespace

struct MemoryStore::Tables {
  struct Node {
    int64_t id = 0;
    std::string cluster, name, pool, topology_domain;
    int64_t cpu_milli = 0, memory_mib = 0;
    // Lifecycle, as the nodes table keeps it (times at microseconds).
    bool cordoned = false;
    core::NodeHealth health = core::NodeHealth::kHealthy;
    absl::Time drain_deadline = absl::InfinitePast();
    absl::Time failed_at = absl::InfinitePast();
    absl::Time last_heartbeat = absl::InfinitePast();
    bool removed = false;
  };
  struct Gpu {
    std::string model;
    std::string mig_layout;      // FormatMigLayout.
    std::string mig_placements;  // FormatMigReports.
    std::string uuid;
  };
  struct Request {
    core::CapacityRequest request;  // Persisted(), no placements.
    int64_t gpu_milli_per_member = 0;
  };
  struct Incident {
    core::Incident incident;  // As written; read through IncidentOf.
  };

  std::map<std::string, core::GpuModel> gpu_models;
  std::map<std::string, core::Cluster> clusters;
  std::map<std::string, core::Pool> pools;
  std::map<int64_t, Node> nodes;
  std::map<std::pair<int64_t, int32_t>, Gpu> gpus;
  std::map<std::string, core::Team> teams;
  std::map<std::tuple<std::string, std::string, std::string>, core::Quota> quotas;
  std::map<int64_t, Request> requests;
  std::map<std::pair<int64_t, int32_t>, core::Placement> placements;
  std::map<std::pair<std::string, std::string>, core::CoexistenceRule> class_rules;
  // (subject, role, scope kind, scope) by name.
  std::map<std::tuple<std::string, std::string, std::string, std::string>, core::RoleBinding>
      role_bindings;
  // (pool, action name, approver, limits...) -> rule.
  std::map<std::tuple<std::string, std::string, std::string, int64_t, int64_t, int64_t, int64_t,
                      int64_t>,
           core::AuthorityRule>
      authority_rules;
  std::map<std::tuple<std::string, std::string, absl::Time>, core::Price> prices;
  std::map<std::string, core::Budget> budgets;
  std::map<std::pair<core::PowerScope, std::string>, core::PowerBudget> power_budgets;
  // Serving demand profiles, by pool and quarter hour of the week.
  std::map<std::pair<std::string, int32_t>, core::DemandSlot> demand;
  std::map<std::pair<std::string, std::string>, core::Delegation> delegations;
  std::map<std::pair<std::string, std::string>, core::Slo> slos;
  std::map<int64_t, core::Incident> incidents;
  std::map<std::tuple<std::string, std::string, absl::Time>, int64_t> incident_keys;
  std::map<std::pair<int64_t, std::string>, core::ExternalityCharge> charges;
  std::map<absl::Time, core::PeriodClose> periods;
  std::map<std::string, core::IdlePolicy> idle_policies;
  std::vector<ledger::Entry> ledger;
  std::vector<LedgerCheckpoint> checkpoints;

  int64_t head_seq() const { return ledger.empty() ? 0 : ledger.back().seq; }
  std::string head_hash() const {
    return ledger.empty() ? std::string(ledger::kGenesisHash) : ledger.back().hash;
  }
  // The model of GPU (node, index); "" when there is none.
  std::string ModelOf(int64_t node_id, const std::vector<int32_t>& indices) const {
    if (indices.empty()) return "";
    auto it = gpus.find({node_id, indices[0]});
    return it == gpus.end() ? "" : it->second.model;
  }
  // Placements of request `id`, by member.
  std::vector<core::Placement> PlacementsOf(int64_t id) const {
    std::vector<core::Placement> out;
    for (auto it = placements.lower_bound({id, INT32_MIN});
         it != placements.end() && it->first.first == id; ++it) {
      out.push_back(it->second);
    }
    return out;
  }
  core::CapacityRequest WithPlacements(const Request& row) const {
    core::CapacityRequest r = row.request;
    r.placements = PlacementsOf(r.id);
    return r;
  }
};

struct MemoryStore::Telemetry {
  // (node, GPU, instance, time) -> sample.
  std::map<std::tuple<int64_t, int32_t, int32_t, absl::Time>, core::GpuSample> samples;
  std::set<std::string> partitions;  // Days with a partition.
  struct Usage {
    core::HeldMember member;
    core::MemberUsage usage;
    absl::Time computed_at;
  };
  // (hour, request, member) -> rollup.
  std::map<std::tuple<absl::Time, int64_t, int32_t>, Usage> usage;
  std::map<absl::Time, absl::Time> rolled_to;  // Hour -> end of its last slice.
  std::map<std::tuple<std::string, std::string, absl::Time>, core::LatencyWindow> windows;
};

namespace {

using Tables = MemoryStore::Tables;

// Applies the rarer changes at once (as the SQL statements of ChangeWriter
// do) and gathers request writes as BatchWriter does.
struct Applier {
  Tables& t;
  struct Pending {
    const core::CapacityRequest* last = nullptr;
    bool is_new = false;
  };
  std::vector<int64_t> order;
  std::map<int64_t, Pending> requests;
  std::map<std::pair<int64_t, int32_t>, const core::Placement*> placements;
  std::map<std::pair<int64_t, int32_t>, std::string> layouts;

  absl::Status operator()(const core::Cluster& c) {
    if (t.clusters.contains(c.name)) return Duplicate(absl::StrCat("cluster ", c.name));
    t.clusters[c.name] = core::Cluster{c.name, c.description};
    return absl::OkStatus();
  }
  absl::Status operator()(const core::Pool& p) {
    if (t.pools.contains(p.name)) return Duplicate(absl::StrCat("pool ", p.name));
    core::Pool row;
    row.name = p.name;
    row.latency_class = p.latency_class;
    row.description = p.description;
    row.lends_to = p.lends_to;
    row.reclaim_grace_seconds = p.reclaim_grace_seconds;
    row.queueing = p.queueing;
    row.starvation_limit_seconds = p.starvation_limit_seconds;
    row.claim_deadline_seconds = p.claim_deadline_seconds;
    row.lease_seconds = p.lease_seconds;
    row.class_rules = p.class_rules;
    row.spot_grace_seconds = p.spot_grace_seconds;
    row.headroom = p.headroom;
    row.max_burst_seconds = p.max_burst_seconds;
    row.proactive_reclaim = p.proactive_reclaim;
    row.cold_start_seconds = p.cold_start_seconds;
    t.pools[p.name] = std::move(row);
    return absl::OkStatus();
  }
  absl::Status operator()(const core::GpuModel& m) {
    t.gpu_models[m.name] = m;
    return absl::OkStatus();
  }
  absl::Status operator()(const core::Node& n) {
    if (t.nodes.contains(n.id)) return Duplicate(absl::StrCat("node id ", n.id));
    for (const auto& [id, row] : t.nodes) {
      if (!row.removed && row.cluster == n.cluster && row.name == n.name) {
        return Duplicate(absl::StrCat("node ", n.cluster, "/", n.name));
      }
    }
    if (!t.clusters.contains(n.cluster)) return Missing(absl::StrCat("cluster ", n.cluster));
    if (!t.pools.contains(n.pool)) return Missing(absl::StrCat("pool ", n.pool));
    t.nodes[n.id] =
        Tables::Node{n.id, n.cluster, n.name, n.pool, n.topology_domain, n.cpu_milli, n.memory_mib};
    for (const core::Gpu& g : n.gpus) {
      if (t.gpus.contains({n.id, g.index})) {
        return Duplicate(absl::StrCat("gpu ", n.id, "/", g.index));
      }
      if (!g.uuid.empty()) {
        for (const auto& [key, row] : t.gpus) {
          if (row.uuid == g.uuid) return Duplicate(absl::StrCat("gpu uuid ", g.uuid));
        }
      }
      if (!t.gpu_models.contains(g.model)) return Missing(absl::StrCat("gpu model ", g.model));
      t.gpus[{n.id, g.index}] =
          Tables::Gpu{g.model, "", core::FormatMigReports(g.reported_mig), g.uuid};
    }
    return absl::OkStatus();
  }
  absl::Status operator()(const core::NodeWrite& w) {
    const core::Node& n = w.node;
    auto it = t.nodes.find(n.id);
    if (it == t.nodes.end() || it->second.removed) {
      return Missing(absl::StrCat("node id ", n.id));
    }
    Tables::Node& row = it->second;
    if (w.event == core::NodeEvent::kRemove) {
      row.removed = true;
      for (auto g = t.gpus.lower_bound({n.id, INT32_MIN});
           g != t.gpus.end() && g->first.first == n.id; ++g) {
        g->second.uuid.clear();
      }
      return absl::OkStatus();
    }
    if (w.event == core::NodeEvent::kUpdate) {
      for (const core::Gpu& g : n.gpus) {
        auto gpu = t.gpus.find({n.id, g.index});
        if (gpu == t.gpus.end()) return Missing(absl::StrCat("gpu ", n.id, "/", g.index));
        for (const auto& [key, other] : t.gpus) {
          if (!g.uuid.empty() && other.uuid == g.uuid && key != gpu->first) {
            return Duplicate(absl::StrCat("gpu uuid ", g.uuid));
          }
        }
        gpu->second.uuid = g.uuid;
        gpu->second.mig_placements = core::FormatMigReports(g.reported_mig);
      }
      row.topology_domain = n.topology_domain;
      row.cpu_milli = n.cpu_milli;
      row.memory_mib = n.memory_mib;
    }
    row.cordoned = n.cordoned;
    row.health = n.health;
    row.drain_deadline = Micros(n.drain_deadline);
    row.failed_at = Micros(n.failed_at);
    row.last_heartbeat = Micros(n.last_heartbeat);
    return absl::OkStatus();
  }
  absl::Status operator()(const core::Team& team) {
    if (t.teams.contains(team.name)) return Duplicate(absl::StrCat("team ", team.name));
    if (!team.parent.empty() && !t.teams.contains(team.parent)) {
      return Missing(absl::StrCat("team ", team.parent));
    }
    t.teams[team.name] = core::Team{team.name, team.parent, team.weight_milli};
    return absl::OkStatus();
  }
  absl::Status operator()(const core::Quota& q) {
    if (!t.teams.contains(q.team)) return Missing(absl::StrCat("team ", q.team));
    if (!t.pools.contains(q.pool)) return Missing(absl::StrCat("pool ", q.pool));
    core::Quota row;
    row.team = q.team;
    row.pool = q.pool;
    row.nominal_milli = q.nominal_milli;
    row.gpu_model = q.gpu_model;
    row.borrowing_limit_milli = q.borrowing_limit_milli;
    row.lending_limit_milli = q.lending_limit_milli;
    row.cohort_lending_limit_milli = q.cohort_lending_limit_milli;
    row.cohort_borrowing_limit_milli = q.cohort_borrowing_limit_milli;
    t.quotas[{q.team, q.pool, q.gpu_model}] = std::move(row);
    return absl::OkStatus();
  }
  absl::Status operator()(const core::RequestWrite& w) {
    const core::CapacityRequest& r = w.request;
    auto [it, first] = requests.try_emplace(r.id);
    if (first) order.push_back(r.id);
    it->second.last = &r;
    it->second.is_new |= w.is_new;
    if (r.state != RequestState::kAdmitted) return absl::OkStatus();
    for (const core::Placement& p : r.placements) {
      placements.try_emplace({r.id, p.member}, &p);
      if (p.mig_layout_cleared || !p.mig_new_layout.empty()) {
        for (int32_t g : p.gpu_indices) {
          layouts[{p.node_id, g}] = core::FormatMigLayout(p.mig_new_layout);
        }
      }
    }
    return absl::OkStatus();
  }
  absl::Status operator()(const core::RoleBindingWrite& w) {
    const core::RoleBinding& b = w.binding;
    const auto key = std::make_tuple(b.subject, Name(core::RoleName(b.role)),
                                     Name(core::ScopeKindName(b.scope_kind)), b.scope);
    if (w.revoke) {
      t.role_bindings.erase(key);
      return absl::OkStatus();
    }
    if (t.role_bindings.contains(key)) return Duplicate(absl::StrCat("role binding ", b.subject));
    t.role_bindings[key] = b;
    return absl::OkStatus();
  }
  absl::Status operator()(const core::AuthorityRuleWrite& w) {
    const core::AuthorityRule& r = w.rule;
    const auto key =
        std::make_tuple(r.pool, Name(core::ApprovalActionName(r.action)), r.approver, r.limit_milli,
                        r.threshold_milli, r.threshold_seconds, r.limit_seconds, r.limit_micros);
    if (w.remove) {
      t.authority_rules.erase(key);
      return absl::OkStatus();
    }
    if (t.authority_rules.contains(key)) {
      return Duplicate(absl::StrCat("authority rule ", r.pool, "/", r.approver));
    }
    t.authority_rules[key] = r;
    return absl::OkStatus();
  }
  absl::Status operator()(const core::Price& p) {
    const auto key = std::make_tuple(p.gpu_model, Name(core::LatencyClassName(p.latency_class)),
                                     Micros(p.effective_from));
    if (t.prices.contains(key)) return Duplicate(absl::StrCat("price ", p.gpu_model));
    if (!t.gpu_models.contains(p.gpu_model))
      return Missing(absl::StrCat("gpu model ", p.gpu_model));
    t.prices[key] = core::Price{p.gpu_model, p.latency_class, p.micros_per_gpu_hour,
                                Micros(p.effective_from), p.burst_micros_per_gpu_hour};
    return absl::OkStatus();
  }
  absl::Status operator()(const core::Budget& b) {
    if (!t.teams.contains(b.team)) return Missing(absl::StrCat("team ", b.team));
    core::Budget row = b;
    row.over = b.over == core::OverBudget::kApproval ? core::OverBudget::kApproval
                                                     : core::OverBudget::kDeny;
    t.budgets[b.team] = row;
    return absl::OkStatus();
  }
  absl::Status operator()(const core::PowerBudget& b) {
    t.power_budgets[{b.scope, b.name}] = b;
    return absl::OkStatus();
  }
  absl::Status operator()(const core::DelegationWrite& w) {
    const core::Delegation& d = w.delegation;
    if (w.revoke) {
      t.delegations.erase({d.from, d.to});
    } else {
      t.delegations[{d.from, d.to}] = core::Delegation{d.from, d.to, Micros(d.expires_at)};
    }
    return absl::OkStatus();
  }
  absl::Status operator()(const core::Slo& s) {
    if (!t.teams.contains(s.team)) return Missing(absl::StrCat("team ", s.team));
    if (!t.pools.contains(s.pool)) return Missing(absl::StrCat("pool ", s.pool));
    core::Slo row;
    row.team = s.team;
    row.service = s.service;
    row.pool = s.pool;
    row.p99_target_us = s.p99_target_us;
    row.window = absl::Seconds(absl::ToInt64Seconds(s.window));
    row.penalty_micros_per_minute = s.penalty_micros_per_minute;
    t.slos[{s.team, s.service}] = std::move(row);
    return absl::OkStatus();
  }
  absl::Status operator()(const core::IncidentWrite& w) {
    const core::Incident& i = w.incident;
    if (t.incidents.contains(i.id)) return Duplicate(absl::StrCat("incident ", i.id));
    const auto key = std::make_tuple(i.slo.team, i.slo.service, Micros(i.window.start));
    if (t.incident_keys.contains(key)) {
      return Duplicate(absl::StrCat("incident window of ", i.slo.team, "/", i.slo.service));
    }
    if (!t.teams.contains(i.slo.team)) return Missing(absl::StrCat("team ", i.slo.team));
    if (!t.pools.contains(i.slo.pool)) return Missing(absl::StrCat("pool ", i.slo.pool));
    core::Incident row;
    row.id = i.id;
    row.slo.team = row.window.team = i.slo.team;
    row.slo.service = row.window.service = i.slo.service;
    row.slo.pool = i.slo.pool;
    row.window.start = Micros(i.window.start);
    row.window.end = Micros(i.window.end);
    row.window.p50_us = i.window.p50_us;
    row.window.p99_us = i.window.p99_us;
    row.slo.p99_target_us = i.slo.p99_target_us;
    row.attribution.cost_micros = i.attribution.cost_micros;
    row.attribution.cost_basis = i.attribution.cost_basis;
    row.recorded_at = Micros(i.recorded_at);
    t.incidents[i.id] = std::move(row);
    t.incident_keys[key] = i.id;
    return absl::OkStatus();
  }
  absl::Status operator()(const core::ExternalityCharge& c) {
    if (t.charges.contains({c.incident_id, c.team})) {
      return Duplicate(absl::StrCat("charge of incident ", c.incident_id, " to ", c.team));
    }
    if (!t.incidents.contains(c.incident_id)) {
      return Missing(absl::StrCat("incident ", c.incident_id));
    }
    if (!t.teams.contains(c.team)) return Missing(absl::StrCat("team ", c.team));
    core::ExternalityCharge row;
    row.incident_id = c.incident_id;
    row.team = c.team;
    row.micros = c.micros;
    row.interference.team = c.team;
    row.interference.borrowed_milli_seconds = c.interference.borrowed_milli_seconds;
    row.interference.co_tenancy_milli_seconds = c.interference.co_tenancy_milli_seconds;
    row.interference.admission_delay_milli_seconds = c.interference.admission_delay_milli_seconds;
    row.interference.request_ids = c.interference.request_ids;
    row.booked_at = Micros(c.booked_at);
    t.charges[{c.incident_id, c.team}] = std::move(row);
    return absl::OkStatus();
  }
  absl::Status operator()(const core::PeriodClose& p) {
    const absl::Time from = Micros(p.from);
    if (t.periods.contains(from)) return Duplicate("chargeback period");
    core::PeriodClose row = p;
    row.from = from;
    row.to = Micros(p.to);
    row.closed_at = Micros(p.closed_at);
    t.periods[from] = std::move(row);
    return absl::OkStatus();
  }
  absl::Status operator()(const core::IdlePolicy& p) {
    core::IdlePolicy row;
    row.workload_class = p.workload_class;
    row.threshold_milli = p.threshold_milli;
    row.window = absl::Seconds(absl::ToInt64Seconds(p.window));
    row.action = p.action;
    row.notice = absl::Seconds(absl::ToInt64Seconds(p.notice));
    t.idle_policies[Name(core::WorkloadClassName(p.workload_class))] = row;
    return absl::OkStatus();
  }
  absl::Status operator()(const core::ClassRule& r) {
    std::string a = Name(core::WorkloadClassName(r.a));
    std::string b = Name(core::WorkloadClassName(r.b));
    if (b < a) std::swap(a, b);
    t.class_rules[{a, b}] = r.rule;
    return absl::OkStatus();
  }

  // The batch's request rows, placements and layouts (kWriteDecisions).
  absl::Status Flush() {
    // All parts of the statement see the rows as they were before it.
    const std::map<int64_t, Tables::Request> before = t.requests;
    for (int64_t id : order) {
      const Pending& w = requests.at(id);
      const core::CapacityRequest& r = *w.last;
      if (w.is_new) {
        if (t.requests.contains(r.id)) return Duplicate(absl::StrCat("request ", r.id));
        // Keys are not unique: one may recur once forgotten (migration 0022).
        t.requests[r.id] = Tables::Request{Persisted(r), r.spec.shape.gpu_milli()};
        continue;
      }
      // An update finds the request's row among the live ones as it was
      // before the statement, or fails the whole commit (migration 0033).
      auto it = t.requests.find(r.id);
      auto was = before.find(r.id);
      if (it == t.requests.end() || was == before.end() ||
          core::IsFinal(was->second.request.state)) {
        return absl::InternalError(
            absl::StrCat("write decisions: the update of request ", r.id, " found no live row"));
      }
      const core::CapacityRequest p = Persisted(r);
      core::CapacityRequest& row = it->second.request;
      row.state = p.state;
      row.reason_code = p.reason_code;
      row.reason = p.reason;
      row.updated_at = p.updated_at;
      row.admitted_at = p.admitted_at;
      row.quota_model = p.quota_model;
      row.preempt_deadline = p.preempt_deadline;
      row.preempted_by = p.preempted_by;
      row.holds = p.holds;
      row.approvals = p.approvals;
      row.approvers = p.approvers;
      row.approval_deadline = p.approval_deadline;
      row.cost_micros = p.cost_micros;
      row.claims = Persisted(p).claims;
      row.run_started_at = p.run_started_at;
      row.run_ended_at = p.run_ended_at;
    }
    for (const auto& [key, p] : placements) {
      t.placements.try_emplace(key, PersistedPlacement(*p));  // ON CONFLICT DO NOTHING.
    }
    for (const auto& [gpu, text] : layouts) {
      auto it = t.gpus.find(gpu);
      if (it != t.gpus.end()) it->second.mig_layout = text;
    }
    return absl::OkStatus();
  }
};

// As the gpu_models row keeps it: a MIG table set through the API is
// stored; a seeded MIG model's is the built-in one.
core::GpuModel ModelRow(const core::GpuModel& m) {
  core::GpuModel out = m;
  core::AttachBuiltinMigProfiles(out);
  return out;
}

// Teams with parents before children (by depth, then name).
std::vector<core::Team> TeamsByDepth(const Tables& t) {
  std::vector<std::pair<int, core::Team>> rows;
  for (const auto& [name, team] : t.teams) {
    int depth = 0;
    for (std::string p = team.parent; !p.empty(); p = t.teams.at(p).parent) ++depth;
    rows.emplace_back(depth, team);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<core::Team> out;
  for (auto& [depth, team] : rows) out.push_back(std::move(team));
  return out;
}

absl::Status LoadCatalogAndInventory(const Tables& t, core::State& state) {
  for (const auto& [name, m] : t.gpu_models)
    ARBITER_RETURN_IF_ERROR(state.LoadGpuModel(ModelRow(m)));
  for (const auto& [name, c] : t.clusters) ARBITER_RETURN_IF_ERROR(state.LoadCluster(c));
  for (const auto& [name, p] : t.pools) ARBITER_RETURN_IF_ERROR(state.LoadPool(p));
  std::vector<const Tables::Node*> nodes;
  for (const auto& [id, n] : t.nodes) {
    if (!n.removed) nodes.push_back(&n);
    state.SeeNodeId(id);  // Removed nodes' ids are never handed out again.
  }
  std::sort(nodes.begin(), nodes.end(), [](const Tables::Node* a, const Tables::Node* b) {
    return std::tie(a->cluster, a->name) < std::tie(b->cluster, b->name);
  });
  for (const Tables::Node* row : nodes) {
    core::Node n;
    n.id = row->id;
    n.cluster = row->cluster;
    n.name = row->name;
    n.pool = row->pool;
    n.topology_domain = row->topology_domain;
    n.cpu_milli = row->cpu_milli;
    n.memory_mib = row->memory_mib;
    n.cordoned = row->cordoned;
    n.health = row->health;
    n.drain_deadline = row->drain_deadline;
    n.failed_at = row->failed_at;
    n.last_heartbeat = row->last_heartbeat;
    for (auto it = t.gpus.lower_bound({n.id, INT32_MIN});
         it != t.gpus.end() && it->first.first == n.id; ++it) {
      core::Gpu g;
      g.index = it->first.second;
      g.model = it->second.model;
      ARBITER_RETURN_IF_ERROR(core::ParseMigLayout(it->second.mig_layout, &g.mig_layout));
      ARBITER_RETURN_IF_ERROR(core::ParseMigReports(it->second.mig_placements, &g.reported_mig));
      g.uuid = it->second.uuid;
      n.gpus.push_back(std::move(g));
    }
    ARBITER_RETURN_IF_ERROR(state.LoadNode(std::move(n)));
  }
  return absl::OkStatus();
}

// Live requests by id, with the placements of those that hold capacity.
std::vector<core::CapacityRequest> LiveRequests(const Tables& t) {
  std::vector<core::CapacityRequest> out;
  for (const auto& [id, row] : t.requests) {
    if (!IsLive(row.request.state)) continue;
    core::CapacityRequest r = row.request;
    if (Holds(r.state)) r.placements = t.PlacementsOf(id);
    out.push_back(std::move(r));
  }
  return out;
}

core::CoexistenceMatrix CoexistenceOf(const Tables& t) {
  core::CoexistenceMatrix matrix = core::CoexistenceMatrix::Defaults();
  for (const auto& [key, rule] : t.class_rules) {
    matrix.Set(core::WorkloadClassFromName(key.first), core::WorkloadClassFromName(key.second),
               rule);
  }
  return matrix;
}

absl::Status LoadGovernanceAndRequests(const Tables& t, const LoadScope& scope,
                                       core::State& state) {
  state.set_coexistence(CoexistenceOf(t));
  for (core::Team& team : TeamsByDepth(t)) ARBITER_RETURN_IF_ERROR(state.LoadTeam(std::move(team)));
  for (const auto& [key, q] : t.quotas) ARBITER_RETURN_IF_ERROR(state.LoadQuota(q));
  for (const auto& [key, b] : t.role_bindings) ARBITER_RETURN_IF_ERROR(state.LoadRoleBinding(b));
  for (const auto& [key, r] : t.authority_rules) {
    ARBITER_RETURN_IF_ERROR(state.LoadAuthorityRule(r));
  }
  for (const auto& [key, p] : t.prices) ARBITER_RETURN_IF_ERROR(state.LoadPrice(p));
  for (const auto& [key, d] : t.delegations) state.LoadDelegation(d);
  for (const auto& [team, b] : t.budgets) ARBITER_RETURN_IF_ERROR(state.LoadBudget(b));
  for (const auto& [key, b] : t.power_budgets) state.LoadPowerBudget(b);
  for (const auto& [key, slot] : t.demand) state.LoadDemandSlot(key.first, slot);
  for (const auto& [key, s] : t.slos) ARBITER_RETURN_IF_ERROR(state.LoadSlo(s));
  for (const auto& [key, id] : t.incident_keys) {
    state.LoadIncident(std::get<0>(key), std::get<1>(key), std::get<2>(key), id);
  }
  for (const auto& [from, p] : t.periods) state.LoadClosedPeriod(p.from, p.to);
  // As kSelectEndedKeys and kSelectEndedSpend (ended_spend, which the
  // batch adds to as requests end): the ended requests of the window,
  // oldest first, and the spend of the months that still count.
  if (!t.requests.empty())
    state.SeeRequestId(t.requests.rbegin()->first);  // As kSelectMaxRequestId.
  std::vector<const core::CapacityRequest*> ended;
  std::map<std::pair<std::string, absl::Time>, int64_t> spend;
  for (const auto& [id, row] : t.requests) {
    const core::CapacityRequest& r = row.request;
    if (IsLive(r.state)) continue;
    if (r.updated_at >= scope.keys_ended_since) ended.push_back(&r);
    if (r.cost_micros != 0 && r.admitted_at != absl::InfinitePast() &&
        core::MonthStart(r.admitted_at) >= scope.spend_since) {
      spend[{r.spec.team, core::MonthStart(r.admitted_at)}] += r.cost_micros;
    }
  }
  std::stable_sort(ended.begin(), ended.end(),
                   [](const core::CapacityRequest* a, const core::CapacityRequest* b) {
                     return a->updated_at < b->updated_at;
                   });
  for (const core::CapacityRequest* e : ended) {
    core::CapacityRequest r;
    r.id = e->id;
    r.spec.idempotency_key = e->spec.idempotency_key;
    r.body_hash = e->body_hash;
    r.state = e->state;
    r.updated_at = e->updated_at;
    ARBITER_RETURN_IF_ERROR(state.LoadRequest(std::move(r)));
  }
  for (const auto& [team_month, micros] : spend) {
    state.AddSpend(team_month.first, team_month.second, micros);
  }
  for (core::CapacityRequest& r : LiveRequests(t)) {
    if (!state.teams().contains(r.spec.team) || state.FindPool(r.spec.pool) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("live request ", r.id, " of unknown team ",
                                                        r.spec.team, " or pool ", r.spec.pool));
    }
    ARBITER_RETURN_IF_ERROR(state.LoadRequest(std::move(r)));
  }
  return absl::OkStatus();
}

// The seeded catalog (migrations/0002_seed_gpu_catalog.sql).
void SeedCatalog(Tables& t) {
  const core::GpuModel models[] = {
      {"A100-40GB", 40960, 108, 400, true}, {"A100-80GB", 81920, 108, 400, true},
      {"H100-80GB", 81920, 132, 700, true}, {"H200-141GB", 144384, 132, 700, true},
      {"L4", 24576, 58, 72, false},         {"L40S", 49152, 142, 350, false},
      {"A10", 24576, 72, 150, false},       {"T4", 16384, 40, 70, false},
      {"V100M16", 16384, 80, 300, false},   {"V100M32", 32768, 80, 300, false},
      {"P100", 16384, 56, 250, false},
  };
  for (const core::GpuModel& m : models) t.gpu_models[m.name] = m;
}

// The interval an ended request is charged for: its reported run, or
// admission to its end (kSelectHeldMembers' COALESCE).
absl::Time ChargedFrom(const core::CapacityRequest& r) {
  return r.run_started_at != absl::InfinitePast() ? r.run_started_at : r.admitted_at;
}
absl::Time ChargedUntil(const core::CapacityRequest& r) {
  return r.run_started_at != absl::InfinitePast() ? r.run_ended_at : r.updated_at;
}

// Milli-GPU seconds of `p` held in [from, to) by request `r`
// (kSelectClusterReserved; division truncates as PostgreSQL's does).
int64_t HeldMilliSeconds(const core::CapacityRequest& r, const core::Placement& p, absl::Time from,
                         absl::Time to) {
  const absl::Time end = std::min(Holds(r.state) ? to : ChargedUntil(r), to);
  const absl::Time start = std::max(ChargedFrom(r), from);
  const int64_t micros = std::max<int64_t>(0, absl::ToUnixMicros(end) - absl::ToUnixMicros(start));
  return p.gpu_milli * static_cast<int64_t>(p.gpu_indices.size()) * micros / 1'000'000;
}

// Whether `r` held capacity at some time in [from, to) (kSelectHeldMembers).
bool HeldIn(const core::CapacityRequest& r, absl::Time from, absl::Time to) {
  return WasHeld(r.state) && r.admitted_at != absl::InfinitePast() && r.admitted_at < to &&
         (Holds(r.state) || r.updated_at > from);
}

}  // namespace

MemoryStore::MemoryStore(MemoryStoreOptions options)
    : options_(std::move(options)),
      tables_(std::make_unique<Tables>()),
      telemetry_(std::make_unique<Telemetry>()) {
  SeedCatalog(*tables_);
}

MemoryStore::~MemoryStore() = default;

void MemoryStore::SetCurrentEpoch(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  current_epoch_ = epoch;
}

void MemoryStore::FailNextCommits(int n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  fail_commits_ = n;
  fail_status_ = std::move(status);
}

std::vector<AccessDenial> MemoryStore::AccessDenials() const {
  absl::MutexLock lock(&mu_);
  return denials_;
}

void MemoryStore::SetFencingEpoch(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  fencing_epoch_ = epoch;
}

absl::StatusOr<core::State> MemoryStore::LoadState(const LoadScope& scope) {
  absl::MutexLock lock(&mu_);
  core::State state;
  ARBITER_RETURN_IF_ERROR(LoadCatalogAndInventory(*tables_, state));
  ARBITER_RETURN_IF_ERROR(LoadGovernanceAndRequests(*tables_, scope, state));
  return state;
}

absl::Status MemoryStore::CheckFence() const {
  if (fencing_epoch_ == 0 || current_epoch_ == fencing_epoch_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("commit: fenced: this writer holds epoch ",
                                                    fencing_epoch_, ", the current epoch is ",
                                                    current_epoch_));
}

absl::Status MemoryStore::Commit(const core::ChangeSet& changes, const CommitContext& context) {
  if (changes.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (fail_commits_ > 0) {
    --fail_commits_;
    return fail_status_.ok() ? absl::UnavailableError("commit: failure injected") : fail_status_;
  }
  if (changes.changes.empty()) {  // Demand profiles alone: nothing to ledger.
    ARBITER_RETURN_IF_ERROR(CheckFence());
    for (const core::DemandSlotWrite& w : changes.demand) {
      tables_->demand[{w.pool, w.slot.slot}] = w.slot;
    }
    return absl::OkStatus();
  }
  const std::vector<ledger::Entry> entries =
      ledger::ChainEntries(tables_->head_seq(), tables_->head_hash(), changes, context);
  const int64_t last_checkpoint =
      tables_->checkpoints.empty() ? 0 : tables_->checkpoints.back().seq;
  ARBITER_ASSIGN_OR_RETURN(
      const std::optional<ledger::Checkpoint> checkpoint,
      ledger::MaybeCheckpoint({options_.ledger_key_pem, options_.checkpoint_every}, last_checkpoint,
                              entries.back().seq, entries.back().hash, context.at));
  // All or nothing: the changes are applied to a copy that replaces the
  // tables only when every one was accepted.
  auto next = std::make_unique<Tables>(*tables_);
  Applier applier{*next};
  for (const core::Change& change : changes.changes) {
    ARBITER_RETURN_IF_ERROR(std::visit(applier, change));
  }
  ARBITER_RETURN_IF_ERROR(applier.Flush());
  // The fence is checked by the statement that writes the batch, last.
  ARBITER_RETURN_IF_ERROR(CheckFence());
  for (const core::DemandSlotWrite& w : changes.demand)
    next->demand[{w.pool, w.slot.slot}] = w.slot;
  next->ledger.insert(next->ledger.end(), entries.begin(), entries.end());
  if (checkpoint.has_value()) {
    next->checkpoints.push_back(
        LedgerCheckpoint{checkpoint->seq, checkpoint->hash, checkpoint->signature, checkpoint->at});
  }
  tables_ = std::move(next);
  return absl::OkStatus();
}

int64_t MemoryStore::LedgerHead() {
  absl::MutexLock lock(&mu_);
  return tables_->head_seq();
}

absl::StatusOr<std::vector<core::GpuModel>> MemoryStore::ListGpuModels() {
  absl::MutexLock lock(&mu_);
  std::vector<core::GpuModel> out;
  for (const auto& [name, m] : tables_->gpu_models) out.push_back(ModelRow(m));
  return out;
}

absl::StatusOr<std::vector<core::Cluster>> MemoryStore::ListClusters() {
  absl::MutexLock lock(&mu_);
  std::vector<core::Cluster> out;
  for (const auto& [name, c] : tables_->clusters) out.push_back(c);
  return out;
}

absl::StatusOr<std::vector<core::Pool>> MemoryStore::ListPools() {
  absl::MutexLock lock(&mu_);
  std::vector<core::Pool> out;
  for (const auto& [name, p] : tables_->pools) out.push_back(p);
  return out;
}

absl::StatusOr<std::vector<core::Node>> MemoryStore::ListNodes(const std::string& cluster,
                                                               const std::string& pool) {
  absl::MutexLock lock(&mu_);
  // As PgStore does: the allocations are rebuilt through core.
  core::State state;
  ARBITER_RETURN_IF_ERROR(LoadCatalogAndInventory(*tables_, state));
  for (core::CapacityRequest& r : LiveRequests(*tables_)) {
    ARBITER_RETURN_IF_ERROR(state.LoadRequest(std::move(r)));
  }
  return NodesMatching(state, cluster, pool);
}

absl::StatusOr<std::vector<core::Team>> MemoryStore::ListTeams() {
  absl::MutexLock lock(&mu_);
  std::vector<core::Team> out;
  for (const auto& [name, team] : tables_->teams) out.push_back(team);
  return out;
}

absl::StatusOr<std::vector<QuotaUsage>> MemoryStore::ListQuotas(const std::string& team) {
  absl::MutexLock lock(&mu_);
  std::vector<QuotaUsage> out;
  for (const auto& [key, q] : tables_->quotas) {
    if (!team.empty() && q.team != team) continue;
    int64_t used = 0;
    for (const auto& [id, row] : tables_->requests) {
      const core::CapacityRequest& r = row.request;
      if (Holds(r.state) && r.spec.team == q.team && r.spec.pool == q.pool &&
          r.quota_model == q.gpu_model) {
        used += int64_t{r.spec.members} * row.gpu_milli_per_member;
      }
    }
    out.push_back(QuotaUsage{q, used});
  }
  return out;
}

absl::StatusOr<core::CapacityRequest> MemoryStore::GetRequest(int64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = tables_->requests.find(id);
  if (it == tables_->requests.end())
    return absl::NotFoundError(absl::StrCat("id: no request ", id));
  return tables_->WithPlacements(it->second);
}

absl::StatusOr<std::vector<EndedKey>> MemoryStore::FindEndedKeys(
    const std::vector<std::string>& keys, absl::Time since) {
  const absl::flat_hash_set<std::string> wanted(keys.begin(), keys.end());
  absl::MutexLock lock(&mu_);
  std::map<std::string, EndedKey> latest;  // As kFindEndedKeys: the highest id.
  for (const auto& [id, row] : tables_->requests) {
    const core::CapacityRequest& r = row.request;
    if (IsLive(r.state) || r.updated_at < since) continue;
    if (!wanted.contains(r.spec.idempotency_key)) continue;
    latest[r.spec.idempotency_key] = EndedKey{r.spec.idempotency_key, r.id, r.body_hash};
  }
  std::vector<EndedKey> out;
  for (auto& [key, found] : latest) out.push_back(std::move(found));
  return out;
}

absl::StatusOr<std::vector<core::CapacityRequest>> MemoryStore::ListRequests(
    const RequestFilter& filter) {
  ARBITER_ASSIGN_OR_RETURN(RequestPage page, ListRequestPage(filter));
  return std::move(page.requests);
}

absl::StatusOr<RequestPage> MemoryStore::ListRequestPage(const RequestFilter& filter) {
  if (filter.limit < 0) return NegativeLimit();
  absl::MutexLock lock(&mu_);
  RequestPage page;
  page.revision = tables_->head_seq();
  for (auto it = tables_->requests.rbegin();
       it != tables_->requests.rend() && page.requests.size() < static_cast<size_t>(filter.limit);
       ++it) {
    const core::CapacityRequest& r = it->second.request;
    if (!filter.team.empty() && r.spec.team != filter.team) continue;
    if (filter.state != RequestState::kUnspecified && r.state != filter.state) continue;
    if (filter.before_id != 0 && r.id >= filter.before_id) continue;
    page.requests.push_back(tables_->WithPlacements(it->second));
  }
  return page;
}

absl::StatusOr<core::CoexistenceMatrix> MemoryStore::GetCoexistence() {
  absl::MutexLock lock(&mu_);
  return CoexistenceOf(*tables_);
}

absl::StatusOr<std::vector<core::RoleBinding>> MemoryStore::ListRoleBindings() {
  absl::MutexLock lock(&mu_);
  std::vector<core::RoleBinding> out;
  for (const auto& [key, b] : tables_->role_bindings) out.push_back(b);
  return out;
}

absl::StatusOr<std::vector<core::AuthorityRule>> MemoryStore::ListAuthorityRules() {
  absl::MutexLock lock(&mu_);
  std::vector<core::AuthorityRule> out;
  for (const auto& [key, r] : tables_->authority_rules) out.push_back(r);
  return out;
}

absl::StatusOr<std::vector<core::Price>> MemoryStore::ListPrices() {
  absl::MutexLock lock(&mu_);
  std::vector<core::Price> out;
  for (const auto& [key, p] : tables_->prices) out.push_back(p);
  return out;
}

absl::StatusOr<std::vector<core::Budget>> MemoryStore::ListBudgets() {
  absl::MutexLock lock(&mu_);
  std::vector<core::Budget> out;
  for (const auto& [team, b] : tables_->budgets) out.push_back(b);
  return out;
}

absl::StatusOr<std::vector<core::PowerBudget>> MemoryStore::ListPowerBudgets() {
  absl::MutexLock lock(&mu_);
  std::vector<core::PowerBudget> out;
  for (const auto& [key, b] : tables_->power_budgets) out.push_back(b);
  return out;
}

absl::StatusOr<std::vector<core::Delegation>> MemoryStore::ListDelegations() {
  absl::MutexLock lock(&mu_);
  std::vector<core::Delegation> out;
  for (const auto& [key, d] : tables_->delegations) out.push_back(d);
  return out;
}

absl::StatusOr<std::map<std::string, int64_t>> MemoryStore::SpendBetween(absl::Time from,
                                                                         absl::Time to) {
  absl::MutexLock lock(&mu_);
  from = Micros(from);
  to = Micros(to);
  std::map<std::string, int64_t> out;
  for (const auto& [id, row] : tables_->requests) {
    const core::CapacityRequest& r = row.request;
    if (r.admitted_at == absl::InfinitePast() || r.admitted_at < from || r.admitted_at >= to) {
      continue;
    }
    out[r.spec.team] += r.cost_micros;
  }
  return out;
}

absl::StatusOr<std::vector<core::IdlePolicy>> MemoryStore::ListIdlePolicies() {
  absl::MutexLock lock(&mu_);
  std::vector<core::IdlePolicy> out;
  for (const auto& [name, p] : tables_->idle_policies) out.push_back(p);
  return out;
}

absl::StatusOr<std::vector<ledger::Entry>> MemoryStore::ListLedger(const LedgerFilter& filter) {
  if (filter.limit < 0) return NegativeLimit();
  absl::MutexLock lock(&mu_);
  std::vector<ledger::Entry> out;
  for (const ledger::Entry& e : tables_->ledger) {
    if (out.size() >= static_cast<size_t>(filter.limit)) break;
    if (e.seq <= filter.after_seq) continue;
    if (!filter.subject.empty() && e.subject != filter.subject) continue;
    if (!filter.actor.empty() && e.actor != filter.actor) continue;
    if (!filter.action.empty() && e.action != filter.action) continue;
    out.push_back(e);
  }
  return out;
}

absl::StatusOr<std::vector<LedgerCheckpoint>> MemoryStore::ListCheckpoints(int64_t after_seq,
                                                                           int32_t limit) {
  absl::MutexLock lock(&mu_);
  std::vector<LedgerCheckpoint> out;
  for (const LedgerCheckpoint& c : tables_->checkpoints) {
    if (static_cast<int32_t>(out.size()) >= limit) break;
    if (c.seq > after_seq) out.push_back(c);
  }
  return out;
}

absl::StatusOr<MetricsSnapshot> MemoryStore::LoadMetricsSnapshot() {
  absl::MutexLock lock(&mu_);
  const Tables& t = *tables_;
  MetricsSnapshot out;
  using Key = std::tuple<std::string, std::string, std::string, std::string>;
  std::map<Key, int64_t> allocated;
  for (const auto& [id, row] : t.requests) {
    const core::CapacityRequest& r = row.request;
    if (Holds(r.state)) {
      for (const core::Placement& p : t.PlacementsOf(id)) {
        allocated[{r.spec.pool, Name(core::WorkloadClassName(r.spec.workload_class)), r.spec.team,
                   t.ModelOf(p.node_id, p.gpu_indices)}] +=
            p.gpu_milli * static_cast<int64_t>(p.gpu_indices.size());
      }
    }
    if (r.state == RequestState::kPendingApproval) ++out.pending_approvals;
    if (r.state == RequestState::kQueued) ++out.queued;
  }
  for (const auto& [k, milli] : allocated) {
    out.allocated.push_back(
        GpuGauge{std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k), milli, 0});
  }
  const auto& usage = telemetry_->usage;
  if (!usage.empty()) {
    const absl::Time last = std::get<0>(usage.rbegin()->first);
    std::map<Key, std::pair<int64_t, int64_t>> sums;
    for (auto it = usage.lower_bound({last, INT64_MIN, INT32_MIN}); it != usage.end(); ++it) {
      const core::HeldMember& m = it->second.member;
      auto& [a, u] =
          sums[{m.pool, Name(core::WorkloadClassName(m.workload_class)), m.team, m.gpu_model}];
      a += it->second.usage.allocated_milli_seconds;
      u += it->second.usage.used_milli_seconds;
    }
    // numeric / 3600 cast to bigint: rounded half away from zero.
    auto mean = [](int64_t s) { return s >= 0 ? (s + 1800) / 3600 : (s - 1800) / 3600; };
    for (const auto& [k, v] : sums) {
      out.last_hour.push_back(GpuGauge{std::get<0>(k), std::get<1>(k), std::get<2>(k),
                                       std::get<3>(k), mean(v.first), mean(v.second)});
    }
  }
  out.ledger_entries = t.head_seq();
  for (const auto& [id, i] : t.incidents) ++out.incidents_by_team[i.slo.team];
  return out;
}

absl::Status MemoryStore::RecordAccessDenial(const std::string& principal,
                                             const std::string& method, const std::string& code,
                                             const std::string& reason) {
  absl::MutexLock lock(&mu_);
  denials_.push_back(AccessDenial{principal, method, code, reason});
  return absl::OkStatus();
}

// --- Telemetry.

absl::StatusOr<std::vector<int64_t>> MemoryStore::InsertSampleBatches(
    absl::Span<const std::vector<core::GpuSample>> batches) {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> added;
  added.reserve(batches.size());
  for (const std::vector<core::GpuSample>& samples : batches) {
    int64_t new_in_batch = 0;
    for (const core::GpuSample& in : samples) {
      telemetry_->partitions.insert(DayOf(in.at));
      // Stored as PostgreSQL stores it: the time in microseconds, the
      // interval in milliseconds.
      core::GpuSample s = in;
      s.at = Micros(in.at);
      s.interval = absl::Milliseconds(absl::ToInt64Milliseconds(in.interval));
      if (telemetry_->samples.try_emplace({s.node_id, s.gpu_index, s.mig_instance, s.at}, s)
              .second) {
        ++new_in_batch;
      }
    }
    added.push_back(new_in_batch);
  }
  return added;
}

absl::StatusOr<int32_t> MemoryStore::DropSamplesBefore(absl::Time day) {
  absl::MutexLock lock(&mu_);
  const std::string first_kept = DayOf(day);
  int32_t dropped = 0;
  for (auto it = telemetry_->partitions.begin();
       it != telemetry_->partitions.end() && *it < first_kept;) {
    it = telemetry_->partitions.erase(it);
    ++dropped;
  }
  for (auto it = telemetry_->samples.begin(); it != telemetry_->samples.end();) {
    if (DayOf(std::get<3>(it->first)) < first_kept) {
      it = telemetry_->samples.erase(it);
    } else {
      ++it;
    }
  }
  return dropped;
}

absl::StatusOr<std::vector<core::GpuSample>> MemoryStore::ListSamples(absl::Time from,
                                                                      absl::Time to) {
  absl::MutexLock lock(&mu_);
  from = Micros(from);
  to = Micros(to);
  std::vector<core::GpuSample> out;
  for (const auto& [key, s] : telemetry_->samples) {
    if (s.at >= from && s.at < to) out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const core::GpuSample& a, const core::GpuSample& b) {
    return std::tie(a.at, a.node_id, a.gpu_index, a.mig_instance) <
           std::tie(b.at, b.node_id, b.gpu_index, b.mig_instance);
  });
  return out;
}

namespace {

// The members of the requests that `held` accepts, by request and member.
template <typename Held>
std::vector<core::HeldMember> HeldMembers(const Tables& t, Held held) {
  std::vector<core::HeldMember> out;
  for (const auto& [id, row] : t.requests) {
    const core::CapacityRequest& r = row.request;
    if (!held(r)) continue;
    for (const core::Placement& p : t.PlacementsOf(id)) {
      core::HeldMember m;
      m.request_id = id;
      m.member = p.member;
      m.team = r.spec.team;
      m.pool = r.spec.pool;
      m.workload_class = r.spec.workload_class;
      m.gpu_model = t.ModelOf(p.node_id, p.gpu_indices);
      m.node_id = p.node_id;
      m.gpu_indices = p.gpu_indices;
      m.gpu_milli = p.gpu_milli;
      m.gpu_memory_mib = p.gpu_memory_mib;
      m.mig_profile = p.mig_profile;
      m.exclusive = p.exclusive;
      m.preemptible = r.spec.preemptible;
      m.guaranteed = r.spec.guaranteed;
      m.spot = r.spec.spot;
      m.burst = r.burst_until != absl::InfinitePast();
      m.from = ChargedFrom(r);
      m.until = Holds(r.state) ? absl::InfiniteFuture() : ChargedUntil(r);
      m.priority = r.spec.priority;
      out.push_back(std::move(m));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<core::HeldMember>> MemoryStore::ListHeldMembers(absl::Time from,
                                                                           absl::Time to) {
  absl::MutexLock lock(&mu_);
  from = Micros(from);
  to = Micros(to);
  return HeldMembers(*tables_, [&](const core::CapacityRequest& r) { return HeldIn(r, from, to); });
}

absl::StatusOr<std::vector<core::HeldMember>> MemoryStore::ListLiveMembers() {
  absl::MutexLock lock(&mu_);
  return HeldMembers(*tables_, [](const core::CapacityRequest& r) { return Holds(r.state); });
}

absl::StatusOr<absl::Time> MemoryStore::UsageRolledTo(absl::Time hour) {
  absl::MutexLock lock(&mu_);
  hour = Micros(hour);
  auto it = telemetry_->rolled_to.find(hour);
  return it == telemetry_->rolled_to.end() ? hour : it->second;
}

absl::Status MemoryStore::AddUsageSlice(const UsageSlice& slice) {
  if (slice.members.size() != slice.usage.size()) {
    return absl::InternalError("AddUsageSlice: members and usage differ in length");
  }
  absl::MutexLock lock(&mu_);
  const absl::Time hour = Micros(slice.hour);
  auto rolled = telemetry_->rolled_to.find(hour);
  if ((rolled == telemetry_->rolled_to.end() ? hour : rolled->second) != Micros(slice.from)) {
    return absl::AbortedError(
        "add usage slice: the hour is no longer rolled up to the slice's start");
  }
  for (const core::HeldMember& m : slice.members) {
    if (!tables_->requests.contains(m.request_id)) {
      return absl::FailedPreconditionError(
          absl::StrCat("add usage slice: no such request ", m.request_id));
    }
  }
  for (size_t i = 0; i < slice.members.size(); ++i) {
    const core::HeldMember& m = slice.members[i];
    const core::MemberUsage& u = slice.usage[i];
    if (u.allocated_milli_seconds == 0) continue;
    auto [it, fresh] = telemetry_->usage.try_emplace({hour, m.request_id, m.member});
    Telemetry::Usage& row = it->second;
    if (fresh) {
      row.member.request_id = m.request_id;
      row.member.member = m.member;
      row.member.team = m.team;
      row.member.pool = m.pool;
      row.member.workload_class = m.workload_class;
      row.member.gpu_model = m.gpu_model;
      row.usage.request_id = m.request_id;
      row.usage.member = m.member;
    }
    core::AddUsage(row.usage, u);
    row.computed_at = Micros(slice.computed_at);
  }
  telemetry_->rolled_to[hour] = Micros(slice.to);
  return absl::OkStatus();
}

absl::Status MemoryStore::ResetUsageHour(absl::Time hour) {
  absl::MutexLock lock(&mu_);
  hour = Micros(hour);
  auto& stored = telemetry_->usage;
  stored.erase(stored.lower_bound({hour, INT64_MIN, INT32_MIN}),
               stored.lower_bound({hour + absl::Microseconds(1), INT64_MIN, INT32_MIN}));
  telemetry_->rolled_to.erase(hour);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<UtilizationRow>> MemoryStore::ListUtilization(absl::Time from,
                                                                         absl::Time to,
                                                                         const std::string& team) {
  absl::MutexLock lock(&mu_);
  from = Micros(from);
  to = Micros(to);
  std::map<std::tuple<std::string, std::string, std::string, std::string>, UtilizationRow> groups;
  for (const auto& [key, row] : telemetry_->usage) {
    const absl::Time hour = std::get<0>(key);
    const core::HeldMember& m = row.member;
    if (hour < from || hour >= to || (!team.empty() && m.team != team)) continue;
    auto [it, first] = groups.try_emplace(
        {m.team, m.pool, Name(core::WorkloadClassName(m.workload_class)), m.gpu_model});
    UtilizationRow& g = it->second;
    if (first) {
      g.team = m.team;
      g.pool = m.pool;
      g.workload_class = m.workload_class;
      g.gpu_model = m.gpu_model;
      g.usage.peak_busy_milli = row.usage.peak_busy_milli;
      g.usage.peak_memory_mib = row.usage.peak_memory_mib;
    }
    core::AddUsage(g.usage, row.usage);
  }
  std::vector<UtilizationRow> out;
  for (auto& [key, g] : groups) out.push_back(std::move(g));
  return out;
}

absl::StatusOr<std::vector<core::MemberUsage>> MemoryStore::ListMemberUsage(absl::Time from,
                                                                            absl::Time to) {
  absl::MutexLock lock(&mu_);
  from = Micros(from);
  to = Micros(to);
  std::map<std::pair<int64_t, int32_t>, core::MemberUsage> groups;
  for (const auto& [key, row] : telemetry_->usage) {
    const absl::Time hour = std::get<0>(key);
    if (hour < from || hour >= to) continue;
    auto [it, first] = groups.try_emplace({std::get<1>(key), std::get<2>(key)});
    core::MemberUsage& g = it->second;
    if (first) {
      g.request_id = std::get<1>(key);
      g.member = std::get<2>(key);
      g.peak_busy_milli = row.usage.peak_busy_milli;
      g.peak_memory_mib = row.usage.peak_memory_mib;
    }
    core::AddUsage(g, row.usage);
  }
  std::vector<core::MemberUsage> out;
  for (auto& [key, g] : groups) out.push_back(g);
  return out;
}

absl::StatusOr<std::vector<core::HourPoint>> MemoryStore::ListUsedByHour(absl::Time from,
                                                                         absl::Time to,
                                                                         const std::string& team) {
  absl::MutexLock lock(&mu_);
  from = Micros(from);
  to = Micros(to);
  std::map<absl::Time, int64_t> hours;
  for (const auto& [key, row] : telemetry_->usage) {
    const absl::Time hour = std::get<0>(key);
    if (hour < from || hour >= to || (!team.empty() && row.member.team != team)) continue;
    hours[hour] += row.usage.used_milli_seconds;
  }
  std::vector<core::HourPoint> out;
  for (const auto& [hour, used] : hours) {
    core::HourPoint p;
    p.hour = hour;
    p.used_milli_seconds = used;
    out.push_back(p);
  }
  return out;
}

// --- SLOs, incidents and chargeback.

absl::StatusOr<std::vector<core::Slo>> MemoryStore::ListSlos(const std::string& team) {
  absl::MutexLock lock(&mu_);
  std::vector<core::Slo> out;
  for (const auto& [key, s] : tables_->slos) {
    if (team.empty() || s.team == team) out.push_back(s);
  }
  return out;
}

absl::StatusOr<Store::StoredWindow> MemoryStore::InsertLatencyWindow(const core::LatencyWindow& w,
                                                                     absl::Time reported_at) {
  absl::MutexLock lock(&mu_);
  const auto key = std::make_tuple(w.team, w.service, Micros(w.start));
  auto it = telemetry_->windows.find(key);
  if (it == telemetry_->windows.end()) {
    core::LatencyWindow row = w;
    row.start = Micros(w.start);
    row.end = Micros(w.end);
    telemetry_->windows.emplace(key, std::move(row));
    return StoredWindow{w, true};
  }
  StoredWindow out{w, false};
  out.window.end = it->second.end;
  out.window.p50_us = it->second.p50_us;
  out.window.p99_us = it->second.p99_us;
  out.window.requests_milli_per_second = it->second.requests_milli_per_second;
  return out;
}

absl::StatusOr<std::vector<core::WaitingRequest>> MemoryStore::ListWaitingRequests(
    const std::string& team, const std::string& pool, absl::Time from, absl::Time to) {
  absl::MutexLock lock(&mu_);
  from = Micros(from);
  to = Micros(to);
  std::vector<core::WaitingRequest> out;
  for (const auto& [id, row] : tables_->requests) {
    const core::CapacityRequest& r = row.request;
    if (r.spec.team != team || r.spec.pool != pool || r.created_at >= to) continue;
    const bool admitted = r.admitted_at != absl::InfinitePast();
    if (admitted && r.admitted_at <= from) continue;
    if (r.state == RequestState::kDenied || r.state == RequestState::kReserved) continue;
    core::WaitingRequest w;
    w.request_id = id;
    w.gpu_milli = row.gpu_milli_per_member * r.spec.members;
    w.priority = r.spec.priority;
    w.from = r.created_at;
    if (admitted) {
      w.until = r.admitted_at;
    } else if (r.state == RequestState::kQueued || r.state == RequestState::kPendingApproval) {
      w.until = absl::InfiniteFuture();
    } else {
      w.until = r.updated_at;
    }
    out.push_back(w);
  }
  return out;
}

absl::StatusOr<std::vector<core::Incident>> MemoryStore::ListIncidents(absl::Time from,
                                                                       absl::Time to,
                                                                       const std::string& team,
                                                                       int64_t id) {
  absl::MutexLock lock(&mu_);
  from = Micros(from);
  to = Micros(to);
  const Tables& t = *tables_;
  std::vector<core::Incident> out;
  for (const auto& [incident_id, row] : t.incidents) {
    if (row.recorded_at < from || row.recorded_at >= to) continue;
    if (id != 0 && incident_id != id) continue;
    if (!team.empty() && row.slo.team != team && !t.charges.contains({incident_id, team})) continue;
    core::Incident i = row;
    auto slo = t.slos.find({row.slo.team, row.slo.service});
    i.slo.window = slo == t.slos.end() ? absl::ZeroDuration() : slo->second.window;
    i.slo.penalty_micros_per_minute =
        slo == t.slos.end() ? 0 : slo->second.penalty_micros_per_minute;
    // Charges by team (the credit, micros < 0, is left out).
    for (auto c = t.charges.lower_bound({incident_id, std::string()});
         c != t.charges.end() && c->first.first == incident_id; ++c) {
      if (c->second.micros < 0) continue;
      i.attribution.causes.push_back(c->second.interference);
      i.attribution.charges_micros.push_back(c->second.micros);
    }
    out.push_back(std::move(i));
  }
  return out;
}

absl::StatusOr<std::vector<core::ExternalityCharge>> MemoryStore::ListCharges(absl::Time from,
                                                                              absl::Time to) {
  absl::MutexLock lock(&mu_);
  from = Micros(from);
  to = Micros(to);
  std::vector<core::ExternalityCharge> out;
  for (const auto& [key, c] : tables_->charges) {
    if (c.booked_at >= from && c.booked_at < to) out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::optional<core::PeriodClose>> MemoryStore::GetClosedPeriod(absl::Time from,
                                                                              absl::Time to) {
  absl::MutexLock lock(&mu_);
  auto it = tables_->periods.find(Micros(from));
  if (it == tables_->periods.end() || it->second.to != Micros(to)) {
    return std::optional<core::PeriodClose>();
  }
  core::PeriodClose p = it->second;
  p.from = from;
  p.to = to;
  return std::optional<core::PeriodClose>(std::move(p));
}

absl::StatusOr<int64_t> MemoryStore::ClusterReservedMilliSeconds(absl::Time from, absl::Time to) {
  absl::MutexLock lock(&mu_);
  from = Micros(from);
  to = Micros(to);
  int64_t total = 0;
  for (const auto& [id, row] : tables_->requests) {
    if (!HeldIn(row.request, from, to)) continue;
    for (const core::Placement& p : tables_->PlacementsOf(id)) {
      total += HeldMilliSeconds(row.request, p, from, to);
    }
  }
  return total;
}

}  // namespace arbiter::store
