#include "server/convert.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"

#include "core/status_macros.h"
#include "core/validate.h"

namespace arbiter::server {
namespace {

absl::Status UnknownEnum(absl::string_view field, int value) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": unknown enum value ", value));
}

}  // namespace

google::protobuf::Timestamp TimestampOf(absl::Time t) {
  return google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(t));
}

absl::StatusOr<core::WorkloadRun> WorkloadRunFromProto(const v1::ReleaseAllocationRequest& req) {
  if (!req.has_workload_started_at() && !req.has_workload_ended_at()) return core::WorkloadRun{};
  absl::Time started = absl::InfinitePast();
  absl::Time ended = absl::InfinitePast();
  if (req.has_workload_started_at()) {
    ARBITER_ASSIGN_OR_RETURN(started,
                             TimeFromProto(true, req.workload_started_at(), "workload_started_at"));
  }
  if (req.has_workload_ended_at()) {
    ARBITER_ASSIGN_OR_RETURN(ended,
                             TimeFromProto(true, req.workload_ended_at(), "workload_ended_at"));
  }
  return core::WorkloadRun{started, ended};
}

absl::StatusOr<core::CapacityRequestSpec> SpecFromProto(const v1::RequestCapacityRequest& req) {
  core::CapacityRequestSpec spec;
  spec.idempotency_key = req.idempotency_key();
  spec.team = req.team();
  spec.pool = req.pool();
  if (!v1::WorkloadClass_IsValid(req.workload_class())) {
    return UnknownEnum("workload_class", req.workload_class());
  }
  spec.workload_class = static_cast<core::WorkloadClass>(req.workload_class());
  spec.members = req.members();
  if (!v1::Topology_IsValid(req.topology())) return UnknownEnum("topology", req.topology());
  spec.topology = static_cast<core::Topology>(req.topology());
  const v1::MemberShape& shape = req.shape();
  switch (shape.gpu_case()) {
    case v1::MemberShape::kWholeGpus:
      spec.shape.gpu = shape.whole_gpus();
      break;
    case v1::MemberShape::kModelProfile: {
      const v1::ModelProfile& m = shape.model_profile();
      spec.model_profile = core::ModelProfile{
          m.parameters(), m.bytes_per_parameter_milli(),  m.layers(),       m.kv_heads(),
          m.head_dim(),   m.kv_bytes_per_element_milli(), m.token_budget(), m.overhead_mib()};
      break;
    }
    case v1::MemberShape::kMigProfile:
      spec.shape.gpu = core::MigShape{shape.mig_profile(), 0};
      break;
    case v1::MemberShape::kFraction:
      spec.shape.gpu =
          core::GpuFraction{shape.fraction().gpu_milli(), shape.fraction().memory_mib()};
      break;
    default:
      return absl::InvalidArgumentError(
          "shape: set one of shape.whole_gpus, shape.fraction, shape.mig_profile or "
          "shape.model_profile");
  }
  spec.shape.cpu_milli = shape.cpu_milli();
  spec.shape.memory_mib = shape.memory_mib();
  spec.gpu_models.assign(req.gpu_models().begin(), req.gpu_models().end());
  spec.description = req.description();
  spec.priority = req.priority();
  spec.preemptible = req.preemptible();
  spec.checkpoint_seconds = req.checkpoint_seconds();
  spec.checkpoint_interval_seconds = req.checkpoint_interval_seconds();
  spec.guaranteed = req.guaranteed();
  spec.spot = req.spot();
  spec.burst_seconds = req.burst_seconds();
  if (!req.recurrence().empty()) {
    ARBITER_ASSIGN_OR_RETURN(spec.recurrence,
                             core::ParseRecurringWindow(req.recurrence(), "recurrence"));
  }
  if (req.has_start_time()) {
    const google::protobuf::Timestamp& t = req.start_time();
    if (t.nanos() < 0 || t.nanos() > 999'999'999) {
      return absl::InvalidArgumentError("start_time.nanos: must be in 0..999999999");
    }
    // Validation bounds the seconds; out-of-range values fail there.
    spec.start_at = absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
  }
  if (req.duration_seconds() < 0 || req.duration_seconds() > core::kMaxDurationSeconds) {
    return absl::InvalidArgumentError(absl::StrCat("duration_seconds: must be in 0..",
                                                   core::kMaxDurationSeconds, ", got ",
                                                   req.duration_seconds()));
  }
  spec.duration = absl::Seconds(req.duration_seconds());
  return spec;
}

core::Cluster ClusterFromProto(const v1::Cluster& c) { return {c.name(), c.description()}; }

absl::StatusOr<core::Pool> PoolFromProto(const v1::Pool& p) {
  if (!v1::LatencyClass_IsValid(p.latency_class())) {
    return UnknownEnum("pool.latency_class", p.latency_class());
  }
  core::Pool pool{p.name(), static_cast<core::LatencyClass>(p.latency_class()), p.description()};
  for (int i = 0; i < p.lends_to_size(); ++i) {
    if (!v1::WorkloadClass_IsValid(p.lends_to(i))) {
      return UnknownEnum(absl::StrCat("pool.lends_to[", i, "]"), p.lends_to(i));
    }
    pool.lends_to.push_back(static_cast<core::WorkloadClass>(p.lends_to(i)));
  }
  for (int i = 0; i < p.class_rules_size(); ++i) {
    const v1::PoolClassRule& r = p.class_rules(i);
    const std::string field = absl::StrCat("pool.class_rules[", i, "]");
    if (!v1::WorkloadClass_IsValid(r.workload_class())) {
      return UnknownEnum(field + ".workload_class", r.workload_class());
    }
    if (!v1::ClassAdmission_IsValid(r.admission())) {
      return UnknownEnum(field + ".admission", r.admission());
    }
    core::PoolClassRule rule{static_cast<core::WorkloadClass>(r.workload_class()),
                             static_cast<core::ClassAdmission>(r.admission())};
    if (!r.window().empty()) {
      ARBITER_ASSIGN_OR_RETURN(rule.window,
                               core::ParseRecurringWindow(r.window(), field + ".window"));
    }
    pool.class_rules.push_back(std::move(rule));
  }
  if (p.has_reclaim_grace_seconds()) pool.reclaim_grace_seconds = p.reclaim_grace_seconds();
  if (p.has_spot_grace_seconds()) pool.spot_grace_seconds = p.spot_grace_seconds();
  for (const v1::Headroom& h : p.headroom())
    pool.headroom.push_back({h.gpu_model(), h.milli_gpus()});
  pool.max_burst_seconds = p.max_burst_seconds();
  pool.proactive_reclaim = p.proactive_reclaim();
  pool.cold_start_seconds = p.cold_start_seconds();
  if (!v1::QueueingPolicy_IsValid(p.queueing())) {
    return UnknownEnum("pool.queueing", p.queueing());
  }
  if (p.queueing() != v1::QUEUEING_POLICY_UNSPECIFIED) {
    pool.queueing = static_cast<core::QueueingPolicy>(p.queueing());
  }
  if (p.has_starvation_limit_seconds()) {
    pool.starvation_limit_seconds = p.starvation_limit_seconds();
  }
  pool.claim_deadline_seconds = p.claim_deadline_seconds();
  pool.lease_seconds = p.lease_seconds();
  return pool;
}

absl::StatusOr<absl::Time> TimeFromProto(bool has, const google::protobuf::Timestamp& t,
                                         absl::string_view field) {
  if (!has) return absl::InvalidArgumentError(absl::StrCat(field, ": must be set"));
  if (t.nanos() < 0 || t.nanos() > 999'999'999) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".nanos: must be in 0..999999999"));
  }
  constexpr int64_t kYear2000 = 946'684'800;
  constexpr int64_t kYear2200 = 7'258'118'400;
  if (t.seconds() < kYear2000 || t.seconds() >= kYear2200) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".seconds: must be within the years 2000..2199"));
  }
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

core::Node NodeFromProto(const v1::Node& n) {
  core::Node node;
  node.cluster = n.cluster();
  node.name = n.name();
  node.pool = n.pool();
  node.topology_domain = n.topology_domain();
  node.cpu_milli = n.cpu_milli();
  node.memory_mib = n.memory_mib();
  for (const v1::Gpu& g : n.gpus()) {
    core::Gpu gpu;
    gpu.index = g.index();
    gpu.model = g.model();
    gpu.uuid = g.uuid();
    for (const v1::MigPlacementReport& r : g.reported_mig_placements()) {
      gpu.reported_mig.push_back(
          core::MigPlacementReport{r.profile(), {r.start_slots().begin(), r.start_slots().end()}});
    }
    node.gpus.push_back(std::move(gpu));
  }
  return node;
}

core::Team TeamFromProto(const v1::Team& t) {
  return {t.name(), t.parent(), t.weight_milli() == 0 ? 1000 : t.weight_milli()};
}

core::Quota QuotaFromProto(const v1::Quota& q) {
  core::Quota quota{q.team(), q.pool(), q.nominal_milli()};
  quota.gpu_model = q.gpu_model();
  if (q.has_borrowing_limit_milli()) quota.borrowing_limit_milli = q.borrowing_limit_milli();
  if (q.has_lending_limit_milli()) quota.lending_limit_milli = q.lending_limit_milli();
  if (q.has_cohort_lending_limit_milli()) {
    quota.cohort_lending_limit_milli = q.cohort_lending_limit_milli();
  }
  if (q.has_cohort_borrowing_limit_milli()) {
    quota.cohort_borrowing_limit_milli = q.cohort_borrowing_limit_milli();
  }
  return quota;
}

absl::StatusOr<core::RequestState> RequestStateFromProto(int value, absl::string_view field) {
  if (!v1::RequestState_IsValid(value)) return UnknownEnum(field, value);
  return static_cast<core::RequestState>(value);
}

void ToProto(const core::MigInstance& inst, v1::MigInstance* out) {
  out->set_profile(inst.profile);
  out->set_start_slot(inst.start);
  out->set_allocated(inst.allocated);
}

core::GpuModel GpuModelFromProto(const v1::GpuModel& m) {
  core::GpuModel out;
  out.name = m.name();
  out.memory_mib = m.memory_mib();
  out.sm_count = m.sm_count();
  out.tdp_watts = m.tdp_watts();
  out.mig_capable = m.mig_capable();
  if (!m.vendor().empty()) out.vendor = m.vendor();
  out.nvlink_domain_size = m.nvlink_domain_size();
  for (const v1::MigProfile& p : m.mig_profiles()) {
    core::MigProfile profile;
    profile.name = p.name();
    profile.profile_id = p.profile_id();
    profile.memory_slices = p.memory_slices();
    profile.compute_slices = p.compute_slices();
    profile.sm_count = p.sm_count();
    profile.memory_mib = p.memory_mib();
    profile.max_instances = p.max_instances();
    profile.media_extensions = p.media_extensions();
    profile.start_slots.assign(p.start_slots().begin(), p.start_slots().end());
    out.mig_profiles.push_back(std::move(profile));
  }
  return out;
}

void ToProto(const core::GpuModel& m, v1::GpuModel* out) {
  out->set_name(m.name);
  out->set_memory_mib(m.memory_mib);
  out->set_sm_count(m.sm_count);
  out->set_tdp_watts(m.tdp_watts);
  out->set_mig_capable(m.mig_capable);
  out->set_vendor(m.vendor);
  out->set_nvlink_domain_size(m.nvlink_domain_size);
  for (const core::MigProfile& p : m.mig_profiles) {
    v1::MigProfile* profile = out->add_mig_profiles();
    profile->set_name(p.name);
    profile->set_profile_id(p.profile_id);
    profile->set_memory_slices(p.memory_slices);
    profile->set_compute_slices(p.compute_slices);
    profile->set_sm_count(p.sm_count);
    profile->set_memory_mib(p.memory_mib);
    profile->set_max_instances(p.max_instances);
    profile->set_media_extensions(p.media_extensions);
    for (int32_t s : p.start_slots) profile->add_start_slots(s);
  }
}

absl::StatusOr<core::ClassRule> ClassRuleFromProto(const v1::CoexistenceRule& r) {
  core::ClassRule rule;
  const std::pair<int, const char*> classes[] = {{r.class_a(), "rule.class_a"},
                                                 {r.class_b(), "rule.class_b"}};
  for (const auto& [value, field] : classes) {
    if (!v1::WorkloadClass_IsValid(value) || value == v1::WORKLOAD_CLASS_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be TRAINING, INFERENCE, BATCH_ANALYTICS or EXPERIMENTATION"));
    }
  }
  rule.a = static_cast<core::WorkloadClass>(r.class_a());
  rule.b = static_cast<core::WorkloadClass>(r.class_b());
  switch (r.gpu_isolation()) {
    case v1::GPU_ISOLATION_FORBIDDEN:
      rule.rule.gpu = core::Isolation::kForbidden;
      break;
    case v1::GPU_ISOLATION_MIG_ONLY:
      rule.rule.gpu = core::Isolation::kMigOnly;
      break;
    case v1::GPU_ISOLATION_SOFT_SHARING:
      rule.rule.gpu = core::Isolation::kSoftSharing;
      break;
    default:
      return absl::InvalidArgumentError(
          "rule.gpu_isolation: must be FORBIDDEN, MIG_ONLY or SOFT_SHARING");
  }
  rule.rule.same_node = r.same_node();
  return rule;
}

void ToProto(const core::ClassRule& r, v1::CoexistenceRule* out) {
  out->set_class_a(static_cast<v1::WorkloadClass>(r.a));
  out->set_class_b(static_cast<v1::WorkloadClass>(r.b));
  switch (r.rule.gpu) {
    case core::Isolation::kForbidden:
      out->set_gpu_isolation(v1::GPU_ISOLATION_FORBIDDEN);
      break;
    case core::Isolation::kMigOnly:
      out->set_gpu_isolation(v1::GPU_ISOLATION_MIG_ONLY);
      break;
    case core::Isolation::kSoftSharing:
      out->set_gpu_isolation(v1::GPU_ISOLATION_SOFT_SHARING);
      break;
  }
  out->set_same_node(r.rule.same_node);
}

absl::StatusOr<core::RoleBinding> RoleBindingFromProto(const v1::RoleBinding& b) {
  if (!v1::Role_IsValid(b.role())) return UnknownEnum("binding.role", b.role());
  if (!v1::ScopeKind_IsValid(b.scope_kind())) {
    return UnknownEnum("binding.scope_kind", b.scope_kind());
  }
  return core::RoleBinding{b.subject(), static_cast<core::Role>(b.role()),
                           static_cast<core::ScopeKind>(b.scope_kind()), b.scope()};
}

void ToProto(const core::RoleBinding& b, v1::RoleBinding* out) {
  out->set_subject(b.subject);
  out->set_role(static_cast<v1::Role>(b.role));
  out->set_scope_kind(static_cast<v1::ScopeKind>(b.scope_kind));
  out->set_scope(b.scope);
}

absl::StatusOr<core::AuthorityRule> AuthorityRuleFromProto(const v1::AuthorityRule& r) {
  if (!v1::ApprovalAction_IsValid(r.action())) return UnknownEnum("rule.action", r.action());
  core::AuthorityRule rule;
  rule.pool = r.pool();
  rule.action = static_cast<core::ApprovalAction>(r.action());
  rule.approver = r.approver();
  rule.limit_milli = r.has_limit_milli() ? r.limit_milli() : core::kUnlimited;
  rule.threshold_milli = r.threshold_milli();
  rule.threshold_seconds = r.threshold_seconds();
  rule.limit_seconds = r.has_limit_seconds() ? r.limit_seconds() : core::kUnlimited;
  rule.limit_micros = r.has_limit_micros() ? r.limit_micros() : core::kUnlimited;
  return rule;
}

void ToProto(const core::AuthorityRule& r, v1::AuthorityRule* out) {
  out->set_pool(r.pool);
  out->set_action(static_cast<v1::ApprovalAction>(r.action));
  out->set_approver(r.approver);
  out->set_limit_milli(r.limit_milli);
  out->set_threshold_milli(r.threshold_milli);
  out->set_threshold_seconds(r.threshold_seconds);
  out->set_limit_seconds(r.limit_seconds);
  out->set_limit_micros(r.limit_micros);
}

absl::StatusOr<core::Price> PriceFromProto(const v1::Price& p) {
  if (!v1::LatencyClass_IsValid(p.latency_class())) {
    return UnknownEnum("price.latency_class", p.latency_class());
  }
  absl::StatusOr<absl::Time> from =
      TimeFromProto(p.has_effective_from(), p.effective_from(), "price.effective_from");
  if (!from.ok()) return from.status();
  return core::Price{p.gpu_model(), static_cast<core::LatencyClass>(p.latency_class()),
                     p.micros_per_gpu_hour(), *from, p.burst_micros_per_gpu_hour()};
}

void ToProto(const core::Price& p, v1::Price* out) {
  out->set_gpu_model(p.gpu_model);
  out->set_latency_class(static_cast<v1::LatencyClass>(p.latency_class));
  out->set_micros_per_gpu_hour(p.micros_per_gpu_hour);
  *out->mutable_effective_from() = TimestampOf(p.effective_from);
  out->set_burst_micros_per_gpu_hour(p.burst_micros_per_gpu_hour);
}

absl::StatusOr<core::PowerBudget> PowerBudgetFromProto(const v1::PowerBudget& b) {
  if (!v1::PowerScope_IsValid(b.scope())) return UnknownEnum("power_budget.scope", b.scope());
  return core::PowerBudget{static_cast<core::PowerScope>(b.scope()), b.name(), b.watts(),
                           b.reclaim()};
}

void ToProto(const core::PowerBudget& b, v1::PowerBudget* out) {
  out->set_scope(static_cast<v1::PowerScope>(b.scope));
  out->set_name(b.name);
  out->set_watts(b.watts);
  out->set_reclaim(b.reclaim);
}

absl::StatusOr<core::Budget> BudgetFromProto(const v1::Budget& b) {
  if (!v1::OverBudget_IsValid(b.over())) return UnknownEnum("budget.over", b.over());
  return core::Budget{b.team(), b.soft_limit_micros(), b.hard_limit_micros(),
                      static_cast<core::OverBudget>(b.over())};
}

void ToProto(const core::Budget& b, v1::Budget* out) {
  out->set_team(b.team);
  out->set_soft_limit_micros(b.soft_limit_micros);
  out->set_hard_limit_micros(b.hard_limit_micros);
  out->set_over(static_cast<v1::OverBudget>(b.over));
}

absl::StatusOr<core::Delegation> DelegationFromProto(const v1::Delegation& d) {
  absl::StatusOr<absl::Time> expires =
      TimeFromProto(d.has_expires_at(), d.expires_at(), "delegation.expires_at");
  if (!expires.ok()) return expires.status();
  // Stored and compared to the second.
  return core::Delegation{d.from(), d.to(), absl::FromUnixSeconds(absl::ToUnixSeconds(*expires))};
}

void ToProto(const core::Delegation& d, v1::Delegation* out) {
  out->set_from(d.from);
  out->set_to(d.to);
  out->mutable_expires_at()->set_seconds(absl::ToUnixSeconds(d.expires_at));
}

void ToProto(const core::Cluster& c, v1::Cluster* out) {
  out->set_name(c.name);
  out->set_description(c.description);
}

void ToProto(const core::Pool& p, v1::Pool* out) {
  out->set_name(p.name);
  out->set_latency_class(static_cast<v1::LatencyClass>(p.latency_class));
  out->set_description(p.description);
  for (core::WorkloadClass c : p.lends_to) out->add_lends_to(static_cast<v1::WorkloadClass>(c));
  for (const core::PoolClassRule& r : p.class_rules) {
    v1::PoolClassRule* rule = out->add_class_rules();
    rule->set_workload_class(static_cast<v1::WorkloadClass>(r.workload_class));
    rule->set_admission(static_cast<v1::ClassAdmission>(r.admission));
    if (r.window.has_value()) rule->set_window(core::FormatRecurringWindow(*r.window));
  }
  for (core::WorkloadClass c :
       {core::WorkloadClass::kTraining, core::WorkloadClass::kInference,
        core::WorkloadClass::kBatchAnalytics, core::WorkloadClass::kExperimentation}) {
    v1::PoolClassRule* rule = out->add_effective_class_rules();
    rule->set_workload_class(static_cast<v1::WorkloadClass>(c));
    rule->set_admission(static_cast<v1::ClassAdmission>(core::AdmissionOf(p, c)));
    const core::PoolClassRule* set = core::ClassRuleOf(p, c);
    if (set != nullptr && set->window.has_value()) {
      rule->set_window(core::FormatRecurringWindow(*set->window));
    }
  }
  out->set_reclaim_grace_seconds(p.reclaim_grace_seconds);
  if (p.spot_grace_seconds.has_value()) out->set_spot_grace_seconds(*p.spot_grace_seconds);
  for (const core::Headroom& h : p.headroom) {
    v1::Headroom* headroom = out->add_headroom();
    headroom->set_gpu_model(h.gpu_model);
    headroom->set_milli_gpus(h.milli);
  }
  out->set_max_burst_seconds(p.max_burst_seconds);
  out->set_proactive_reclaim(p.proactive_reclaim);
  out->set_cold_start_seconds(p.cold_start_seconds);
  out->set_queueing(static_cast<v1::QueueingPolicy>(p.queueing));
  out->set_starvation_limit_seconds(p.starvation_limit_seconds);
  out->set_claim_deadline_seconds(p.claim_deadline_seconds);
  out->set_lease_seconds(p.lease_seconds);
}

v1::NodeState NodeStateOf(const core::Node& n) {
  if (n.health == core::NodeHealth::kFailed) return v1::NODE_STATE_FAILED;
  if (n.health == core::NodeHealth::kUnreachable) return v1::NODE_STATE_UNREACHABLE;
  if (n.draining() && n.busy()) return v1::NODE_STATE_DRAINING;
  if (n.cordoned) return v1::NODE_STATE_CORDONED;
  return v1::NODE_STATE_READY;
}

void ToProto(const core::Node& n, v1::Node* out) {
  out->set_cluster(n.cluster);
  out->set_name(n.name);
  out->set_pool(n.pool);
  out->set_topology_domain(n.topology_domain);
  out->set_cpu_milli(n.cpu_milli);
  out->set_memory_mib(n.memory_mib);
  for (const core::Gpu& g : n.gpus) {
    v1::Gpu* gpu = out->add_gpus();
    gpu->set_index(g.index);
    gpu->set_model(g.model);
    gpu->set_uuid(g.uuid);
    gpu->set_allocated_milli(g.allocated_milli);
    gpu->set_allocated_memory_mib(g.allocated_memory_mib);
    gpu->set_exclusive(g.exclusive);
    for (const core::MigInstance& inst : g.mig_layout) ToProto(inst, gpu->add_mig_instances());
    for (const core::MigPlacementReport& r : g.reported_mig) {
      v1::MigPlacementReport* report = gpu->add_reported_mig_placements();
      report->set_profile(r.profile);
      for (int32_t s : r.start_slots) report->add_start_slots(s);
    }
  }
  out->set_state(NodeStateOf(n));
  if (n.draining()) *out->mutable_drain_deadline() = TimestampOf(n.drain_deadline);
  if (n.failed_at != absl::InfinitePast()) *out->mutable_failed_at() = TimestampOf(n.failed_at);
  out->set_heartbeats(n.last_heartbeat != absl::InfinitePast());
}

void ToProto(const core::Team& t, v1::Team* out) {
  out->set_name(t.name);
  out->set_parent(t.parent);
  out->set_weight_milli(t.weight_milli);
}

void ToProto(const core::Quota& q, v1::Quota* out) {
  out->set_team(q.team);
  out->set_pool(q.pool);
  out->set_nominal_milli(q.nominal_milli);
  out->set_gpu_model(q.gpu_model);
  out->set_borrowing_limit_milli(q.borrowing_limit_milli);
  out->set_lending_limit_milli(q.lendable_milli());
  if (q.cohort_lending_limit_milli != core::kUnlimited) {
    out->set_cohort_lending_limit_milli(q.cohort_lending_limit_milli);
  }
  if (q.cohort_borrowing_limit_milli != core::kUnlimited) {
    out->set_cohort_borrowing_limit_milli(q.cohort_borrowing_limit_milli);
  }
}

void ToProto(const core::CapacityRequest& r, const app::NodeDirectory& nodes,
             v1::CapacityRequest* out) {
  out->set_id(r.id);
  out->set_idempotency_key(r.spec.idempotency_key);
  out->set_team(r.spec.team);
  out->set_pool(r.spec.pool);
  out->set_workload_class(static_cast<v1::WorkloadClass>(r.spec.workload_class));
  out->set_members(r.spec.members);
  v1::MemberShape* shape = out->mutable_placed_shape();
  if (r.spec.shape.is_whole()) {
    shape->set_whole_gpus(r.spec.shape.whole_gpus());
  } else if (r.spec.shape.is_mig()) {
    shape->set_mig_profile(r.spec.shape.mig().profile);
  } else {
    shape->mutable_fraction()->set_gpu_milli(r.spec.shape.fraction().gpu_milli);
    shape->mutable_fraction()->set_memory_mib(r.spec.shape.fraction().memory_mib);
  }
  shape->set_cpu_milli(r.spec.shape.cpu_milli);
  shape->set_memory_mib(r.spec.shape.memory_mib);
  // The shape as asked: the model profile, or the placed shape itself.
  if (r.spec.model_profile.has_value()) {
    const core::ModelProfile& m = *r.spec.model_profile;
    v1::MemberShape* asked = out->mutable_shape();
    v1::ModelProfile* mp = asked->mutable_model_profile();
    mp->set_parameters(m.parameters);
    mp->set_bytes_per_parameter_milli(m.bytes_per_parameter_milli);
    mp->set_layers(m.layers);
    mp->set_kv_heads(m.kv_heads);
    mp->set_head_dim(m.head_dim);
    mp->set_kv_bytes_per_element_milli(m.kv_bytes_per_element_milli);
    mp->set_token_budget(m.token_budget);
    mp->set_overhead_mib(m.overhead_mib);
    asked->set_cpu_milli(r.spec.shape.cpu_milli);
    asked->set_memory_mib(r.spec.shape.memory_mib);
  } else {
    *out->mutable_shape() = *shape;
  }
  for (const std::string& m : r.spec.gpu_models) out->add_gpu_models(m);
  out->set_state(static_cast<v1::RequestState>(r.state));
  out->set_reason(r.reason);
  out->set_reason_code(r.reason_code);
  for (const core::Placement& p : r.placements) {
    v1::Placement* placement = out->add_placements();
    auto [cluster, node] = nodes.Get(p.node_id);
    placement->set_member(p.member);
    placement->set_cluster(cluster);
    placement->set_node(node);
    for (int32_t g : p.gpu_indices) placement->add_gpu_indices(g);
    placement->set_gpu_milli(p.gpu_milli);
    placement->set_mig_profile(p.mig_profile);
    placement->set_mig_start_slot(p.mig_profile.empty() ? 0 : p.mig_start);
    for (const core::MigInstance& inst : p.mig_new_layout) {
      ToProto(inst, placement->add_mig_new_layout());
    }
    placement->set_mig_layout_cleared(p.mig_layout_cleared);
  }
  *out->mutable_created_at() = TimestampOf(r.created_at);
  *out->mutable_updated_at() = TimestampOf(r.updated_at);
  out->set_total_gpu_milli(r.spec.total_gpu_milli());
  out->set_description(r.spec.description);
  out->set_topology(static_cast<v1::Topology>(r.spec.topology));
  out->set_priority(r.spec.priority);
  out->set_preemptible(r.spec.preemptible);
  out->set_checkpoint_seconds(r.spec.checkpoint_seconds);
  out->set_checkpoint_interval_seconds(r.spec.checkpoint_interval_seconds);
  out->set_spot(r.spec.spot);
  out->set_burst_seconds(r.spec.burst_seconds);
  if (r.spec.recurrence.has_value()) {
    out->set_recurrence(core::FormatRecurringWindow(*r.spec.recurrence));
  }
  if (r.burst_until != absl::InfinitePast())
    *out->mutable_burst_until() = TimestampOf(r.burst_until);
  out->set_guaranteed(r.spec.guaranteed);
  if (r.spec.start_at != absl::InfinitePast()) {
    *out->mutable_start_time() = TimestampOf(r.spec.start_at);
  }
  out->set_duration_seconds(absl::ToInt64Seconds(r.spec.duration));
  if (r.admitted_at != absl::InfinitePast())
    *out->mutable_admitted_at() = TimestampOf(r.admitted_at);
  out->set_quota_gpu_model(r.quota_model);
  if (r.preempt_deadline != absl::InfinitePast()) {
    *out->mutable_preempt_deadline() = TimestampOf(r.preempt_deadline);
  }
  out->set_preempted_by(r.preempted_by);
  out->set_cost_micros(r.cost_micros);
  for (const std::string& a : r.approvals) out->add_approvals(a);
  for (const std::string& a : r.approvers) out->add_approvers(a);
  if (r.backfill_head() && r.planned_start != absl::InfiniteFuture()) {
    *out->mutable_planned_start() = TimestampOf(r.planned_start);
  }
  if (r.approval_deadline != absl::InfinitePast()) {
    *out->mutable_approval_deadline() = TimestampOf(r.approval_deadline);
  }
  out->set_queue_position(r.queue_position);
  for (const core::Claim& c : r.claims) {
    v1::Claim* claim = out->add_claims();
    claim->set_member(c.member);
    claim->set_holder(c.holder);
    *claim->mutable_claimed_at() = TimestampOf(c.claimed_at);
    *claim->mutable_renewed_at() = TimestampOf(c.renewed_at);
  }
  if (r.run_started_at != absl::InfinitePast()) {
    *out->mutable_workload_started_at() = TimestampOf(r.run_started_at);
    *out->mutable_workload_ended_at() = TimestampOf(r.run_ended_at);
  }
  if (r.state == core::RequestState::kAdmitted && r.enforce_at != absl::InfiniteFuture()) {
    *out->mutable_enforce_at() = TimestampOf(r.enforce_at);
  }
  for (const core::GpuHold& h : r.holds) {
    v1::HeldGpu* held = out->add_holds();
    auto [cluster, node] = nodes.Get(h.node_id);
    held->set_cluster(cluster);
    held->set_node(node);
    held->set_gpu_index(h.gpu_index);
    held->set_cpu_milli(h.cpu_milli);
    held->set_memory_mib(h.memory_mib);
  }
}

v1::AllocationEventType ToProto(app::EventType type) {
  switch (type) {
    case app::EventType::kAdmitted:
      return v1::ALLOCATION_EVENT_TYPE_ADMITTED;
    case app::EventType::kQueued:
      return v1::ALLOCATION_EVENT_TYPE_QUEUED;
    case app::EventType::kDenied:
      return v1::ALLOCATION_EVENT_TYPE_DENIED;
    case app::EventType::kReleased:
      return v1::ALLOCATION_EVENT_TYPE_RELEASED;
    case app::EventType::kCancelled:
      return v1::ALLOCATION_EVENT_TYPE_CANCELLED;
    case app::EventType::kPreempting:
      return v1::ALLOCATION_EVENT_TYPE_PREEMPTING;
    case app::EventType::kPreempted:
      return v1::ALLOCATION_EVENT_TYPE_PREEMPTED;
    case app::EventType::kReserved:
      return v1::ALLOCATION_EVENT_TYPE_RESERVED;
    case app::EventType::kPendingApproval:
      return v1::ALLOCATION_EVENT_TYPE_PENDING_APPROVAL;
  }
  return v1::ALLOCATION_EVENT_TYPE_UNSPECIFIED;
}

}  // namespace arbiter::server
