#include "core/model.h"

#include <algorithm>
#include <array>
#include <utility>

namespace arbiter::core {
namespace {

template <typename E, size_t N>
absl::string_view NameOf(const std::array<std::pair<E, absl::string_view>, N>& table, E value) {
  for (const auto& [e, name] : table) {
    if (e == value) return name;
  }
  return "unspecified";
}

template <typename E, size_t N>
E FromName(const std::array<std::pair<E, absl::string_view>, N>& table, absl::string_view name) {
  for (const auto& [e, n] : table) {
    if (n == name) return e;
  }
  return E::kUnspecified;
}

constexpr std::array<std::pair<LatencyClass, absl::string_view>, 4> kLatencyNames = {{
    {LatencyClass::kServing, "serving"},
    {LatencyClass::kBatch, "batch"},
    {LatencyClass::kSpot, "spot"},
    {LatencyClass::kDev, "dev"},
}};
constexpr std::array<std::pair<WorkloadClass, absl::string_view>, 4> kWorkloadNames = {{
    {WorkloadClass::kTraining, "training"},
    {WorkloadClass::kInference, "inference"},
    {WorkloadClass::kBatchAnalytics, "batch_analytics"},
    {WorkloadClass::kExperimentation, "experimentation"},
}};
constexpr std::array<std::pair<ApprovalAction, absl::string_view>, 5> kApprovalNames = {{
    {ApprovalAction::kBorrow, "borrow"},
    {ApprovalAction::kGuaranteed, "guaranteed"},
    {ApprovalAction::kLarge, "large"},
    {ApprovalAction::kOverBudget, "over_budget"},
    {ApprovalAction::kLong, "long"},
}};
constexpr std::array<std::pair<RequestState, absl::string_view>, 9> kStateNames = {{
    {RequestState::kAdmitted, "admitted"},
    {RequestState::kQueued, "queued"},
    {RequestState::kDenied, "denied"},
    {RequestState::kReleased, "released"},
    {RequestState::kCancelled, "cancelled"},
    {RequestState::kPreempting, "preempting"},
    {RequestState::kPreempted, "preempted"},
    {RequestState::kReserved, "reserved"},
    {RequestState::kPendingApproval, "pending_approval"},
}};

constexpr std::array<std::pair<Role, absl::string_view>, 7> kRoleNames = {{
    {Role::kPlatformAdmin, "platform_admin"},
    {Role::kPoolAuthority, "pool_authority"},
    {Role::kTeamAdmin, "team_admin"},
    {Role::kTeamMember, "team_member"},
    {Role::kFinance, "finance"},
    {Role::kAuditor, "auditor"},
    {Role::kAgent, "agent"},
}};
constexpr std::array<std::pair<ScopeKind, absl::string_view>, 3> kScopeNames = {{
    {ScopeKind::kOrg, "org"},
    {ScopeKind::kTeam, "team"},
    {ScopeKind::kPool, "pool"},
}};

constexpr std::array<std::pair<Topology, absl::string_view>, 3> kTopologyNames = {{
    {Topology::kAny, "any"},
    {Topology::kSameNode, "same_node"},
    {Topology::kSameDomain, "same_domain"},
}};

constexpr std::array<std::pair<QueueingPolicy, absl::string_view>, 4> kQueueingNames = {{
    {QueueingPolicy::kUnspecified, "unspecified"},
    {QueueingPolicy::kBackfill, "backfill"},
    {QueueingPolicy::kBestEffort, "best_effort"},
    {QueueingPolicy::kStrict, "strict"},
}};

constexpr std::array<std::pair<NodeHealth, absl::string_view>, 3> kHealthNames = {{
    {NodeHealth::kHealthy, "healthy"},
    {NodeHealth::kUnreachable, "unreachable"},
    {NodeHealth::kFailed, "failed"},
}};

constexpr std::array<std::pair<NodeEvent, absl::string_view>, 8> kNodeEventNames = {{
    {NodeEvent::kUpdate, "update"},
    {NodeEvent::kCordon, "cordon"},
    {NodeEvent::kUncordon, "uncordon"},
    {NodeEvent::kDrain, "drain"},
    {NodeEvent::kFail, "fail"},
    {NodeEvent::kUnreachable, "unreachable"},
    {NodeEvent::kReachable, "reachable"},
    {NodeEvent::kRemove, "remove"},
}};

constexpr std::array<std::pair<ClassAdmission, absl::string_view>, 3> kAdmissionNames = {{
    {ClassAdmission::kAdmit, "admit"},
    {ClassAdmission::kBorrow, "borrow"},
    {ClassAdmission::kDeny, "deny"},
}};

}  // namespace

absl::string_view ClassAdmissionName(ClassAdmission a) { return NameOf(kAdmissionNames, a); }
ClassAdmission ClassAdmissionFromName(absl::string_view n) { return FromName(kAdmissionNames, n); }

bool HasClassRule(const Pool& pool, WorkloadClass c) {
  for (const PoolClassRule& r : pool.class_rules) {
    if (r.workload_class == c) return true;
  }
  return std::find(pool.lends_to.begin(), pool.lends_to.end(), c) != pool.lends_to.end();
}

const PoolClassRule* ClassRuleOf(const Pool& pool, WorkloadClass c) {
  for (const PoolClassRule& r : pool.class_rules) {
    if (r.workload_class == c) return &r;
  }
  return nullptr;
}

ClassAdmission DefaultAdmission(const Pool& pool, WorkloadClass c) {
  const bool serving_pool = pool.latency_class == LatencyClass::kServing;
  const bool inference = c == WorkloadClass::kInference;
  return serving_pool == inference ? ClassAdmission::kAdmit : ClassAdmission::kDeny;
}

ClassAdmission AdmissionOf(const Pool& pool, WorkloadClass c) {
  if (const PoolClassRule* r = ClassRuleOf(pool, c)) return r->admission;
  if (std::find(pool.lends_to.begin(), pool.lends_to.end(), c) != pool.lends_to.end()) {
    return ClassAdmission::kBorrow;
  }
  return DefaultAdmission(pool, c);
}

ClassAdmission AdmissionAt(const Pool& pool, WorkloadClass c, absl::Time now) {
  const PoolClassRule* r = ClassRuleOf(pool, c);
  if (r != nullptr && r->window.has_value() && !Contains(*r->window, now)) {
    return DefaultAdmission(pool, c);
  }
  return AdmissionOf(pool, c);
}

absl::Time LendingEnds(const Pool& pool, const CapacityRequest& request) {
  const PoolClassRule* rule = ClassRuleOf(pool, request.spec.workload_class);
  if (rule == nullptr || !rule->window.has_value()) return absl::InfiniteFuture();
  if (DefaultAdmission(pool, request.spec.workload_class) == ClassAdmission::kAdmit) {
    return absl::InfiniteFuture();  // Outside the window it is admitted anyway.
  }
  const std::optional<Interval> occurrence = NextOccurrence(*rule->window, request.admitted_at);
  if (!occurrence.has_value() || occurrence->start > request.admitted_at) {
    return request.admitted_at;
  }
  return occurrence->end;
}

uint32_t LentClasses(const Pool& pool) {
  uint32_t mask = 0;
  for (WorkloadClass c : {WorkloadClass::kTraining, WorkloadClass::kInference,
                          WorkloadClass::kBatchAnalytics, WorkloadClass::kExperimentation}) {
    if (AdmissionOf(pool, c) == ClassAdmission::kBorrow) mask |= 1u << static_cast<int>(c);
  }
  return mask;
}

int64_t HeadroomOf(const Pool& pool, const std::string& model) {
  for (const Headroom& h : pool.headroom) {
    if (h.gpu_model == model) return h.milli;
  }
  return 0;
}

int64_t VictimGraceSeconds(const Pool& pool, bool spot) {
  if (spot && pool.spot_grace_seconds.has_value()) return *pool.spot_grace_seconds;
  return pool.reclaim_grace_seconds;
}

absl::string_view NodeHealthName(NodeHealth h) { return NameOf(kHealthNames, h); }

NodeHealth NodeHealthFromName(absl::string_view name) {
  for (const auto& [e, n] : kHealthNames) {
    if (n == name) return e;
  }
  return NodeHealth::kHealthy;
}

absl::string_view NodeEventName(NodeEvent e) { return NameOf(kNodeEventNames, e); }

absl::string_view QueueingPolicyName(QueueingPolicy p) { return NameOf(kQueueingNames, p); }
QueueingPolicy QueueingPolicyFromName(absl::string_view n) { return FromName(kQueueingNames, n); }

absl::string_view TopologyName(Topology t) {
  for (const auto& [e, name] : kTopologyNames) {
    if (e == t) return name;
  }
  return "any";
}

Topology TopologyFromName(absl::string_view name) {
  for (const auto& [e, n] : kTopologyNames) {
    if (n == name) return e;
  }
  return Topology::kAny;
}

absl::string_view LatencyClassName(LatencyClass c) { return NameOf(kLatencyNames, c); }
absl::string_view WorkloadClassName(WorkloadClass c) { return NameOf(kWorkloadNames, c); }
absl::string_view RequestStateName(RequestState s) { return NameOf(kStateNames, s); }
LatencyClass LatencyClassFromName(absl::string_view n) { return FromName(kLatencyNames, n); }
WorkloadClass WorkloadClassFromName(absl::string_view n) { return FromName(kWorkloadNames, n); }
RequestState RequestStateFromName(absl::string_view n) { return FromName(kStateNames, n); }
absl::string_view RoleName(Role r) { return NameOf(kRoleNames, r); }
absl::string_view ApprovalActionName(ApprovalAction a) { return NameOf(kApprovalNames, a); }
ApprovalAction ApprovalActionFromName(absl::string_view n) { return FromName(kApprovalNames, n); }
absl::string_view ScopeKindName(ScopeKind k) { return NameOf(kScopeNames, k); }
Role RoleFromName(absl::string_view n) { return FromName(kRoleNames, n); }
ScopeKind ScopeKindFromName(absl::string_view n) { return FromName(kScopeNames, n); }

void AttachBuiltinMigProfiles(GpuModel& model) {
  if (!model.mig_capable || !model.mig_profiles.empty()) return;
  if (const std::vector<MigProfile>* builtin = BuiltinMigProfiles(model.name)) {
    model.mig_profiles = *builtin;
  }
}

bool IsFinal(RequestState s) {
  return s == RequestState::kDenied || s == RequestState::kReleased ||
         s == RequestState::kCancelled || s == RequestState::kPreempted;
}

bool HoldsCapacity(RequestState s) {
  return s == RequestState::kAdmitted || s == RequestState::kPreempting;
}

void AppendHolds(const Placement& p, std::vector<GpuHold>& holds) {
  if (p.gpu_indices.empty()) {
    if (p.cpu_milli > 0 || p.memory_mib > 0) {
      holds.push_back(GpuHold{p.node_id, -1, p.cpu_milli, p.memory_mib});
    }
    return;
  }
  for (size_t i = 0; i < p.gpu_indices.size(); ++i) {
    GpuHold h{p.node_id, p.gpu_indices[i]};
    if (i == 0) {
      h.cpu_milli = p.cpu_milli;
      h.memory_mib = p.memory_mib;
    }
    holds.push_back(h);
  }
}

int64_t Quota::lendable_milli() const {
  if (lending_limit_milli == kUnlimited) return nominal_milli;
  return std::min(lending_limit_milli, nominal_milli);
}

int64_t Quota::ceiling_milli() const {
  if (borrowing_limit_milli == kUnlimited) return kUnlimited;
  return nominal_milli + borrowing_limit_milli;
}

absl::Time CapacityRequest::declared_end() const {
  if (!HoldsCapacity(state) || spec.duration == absl::ZeroDuration()) {
    return absl::InfiniteFuture();
  }
  return admitted_at + spec.duration;
}

int64_t MemberShape::gpu_milli() const {
  if (is_whole()) return int64_t{whole_gpus()} * kMilliPerGpu;
  return is_mig() ? mig().milli : fraction().gpu_milli;
}

int64_t CapacityRequestSpec::total_gpu_milli() const {
  return int64_t{members} * shape.gpu_milli();
}

bool CapacityRequestSpec::allows_model(const std::string& model) const {
  return gpu_models.empty() ||
         std::find(gpu_models.begin(), gpu_models.end(), model) != gpu_models.end();
}

}  // namespace arbiter::core
