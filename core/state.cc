#include "core/state.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

#include "core/budget.h"
#include "core/status_macros.h"

namespace arbiter::core {
namespace {

absl::Status Conflict(absl::string_view what) { return absl::FailedPreconditionError(what); }

// The packer's view of one member of `spec`.
TaskShape ShapeOf(const CapacityRequestSpec& spec) {
  TaskShape shape;
  if (spec.shape.is_mig()) {
    // A MIG instance takes no part in whole/fraction fragmentation; only its
    // host demand counts.
    shape.cpu_milli = spec.shape.cpu_milli;
    shape.memory_mib = spec.shape.memory_mib;
    return shape;
  }
  shape.gpus = spec.shape.is_whole() ? spec.shape.whole_gpus() : 1;
  shape.gpu_milli = spec.shape.is_whole() ? kMilliPerGpu : spec.shape.fraction().gpu_milli;
  shape.cpu_milli = spec.shape.cpu_milli;
  shape.memory_mib = spec.shape.memory_mib;
  return shape;
}

}  // namespace

absl::Status State::LoadGpuModel(GpuModel model) {
  AttachBuiltinMigProfiles(model);
  const std::string name = model.name;
  if (!gpu_models_.emplace(name, std::move(model)).second) {
    return Conflict(absl::StrCat("duplicate GPU model ", name));
  }
  return absl::OkStatus();
}

absl::Status State::LoadCluster(Cluster cluster) {
  const std::string name = cluster.name;
  if (!clusters_.emplace(name, std::move(cluster)).second) {
    return Conflict(absl::StrCat("duplicate cluster ", name));
  }
  return absl::OkStatus();
}

absl::Status State::LoadPool(Pool pool) {
  const std::string name = pool.name;
  if (!pools_.emplace(name, std::move(pool)).second) {
    return Conflict(absl::StrCat("duplicate pool ", name));
  }
  return absl::OkStatus();
}

absl::Status State::LoadNode(Node node) {
  ARBITER_CHECK(node.id > 0);
  if (!clusters_.contains(node.cluster) || !pools_.contains(node.pool)) {
    return Conflict(absl::StrCat("node ", node.name, " references an unknown cluster or pool"));
  }
  if (node_index_.contains(node.id) || node_by_name_.contains({node.cluster, node.name})) {
    return Conflict(absl::StrCat("duplicate node ", node.cluster, "/", node.name));
  }
  for (Gpu& gpu : node.gpus) {
    const GpuModel* model = FindGpuModel(gpu.model);
    if (model == nullptr) return Conflict(absl::StrCat("unknown GPU model ", gpu.model));
    if (FindGpuByUuid(gpu.uuid) != nullptr) {
      return Conflict(
          absl::StrCat("node ", node.name, " GPU ", gpu.index, ": duplicate UUID ", gpu.uuid));
    }
    gpu.memory_mib = model->memory_mib;
    gpu.allocated_milli = 0;
    gpu.allocated_memory_mib = 0;
    gpu.tenants = 0;
    gpu.exclusive = false;
    for (MigInstance& inst : gpu.mig_layout) inst.allocated = false;
    gpu.class_tenants = {};
    gpu.mig_profiles.clear();
    if (!gpu.reported_mig.empty()) {
      absl::StatusOr<std::vector<MigProfile>> offered =
          ApplyReportedPlacements(model->mig_profiles, gpu.reported_mig, "reported_mig");
      if (!offered.ok()) {
        return Conflict(
            absl::StrCat("node ", node.name, " GPU ", gpu.index, ": ", offered.status().message()));
      }
      gpu.mig_profiles = std::move(*offered);
    }
    if (!gpu.mig_layout.empty()) {
      absl::Status valid = ValidateMigLayout(MigProfilesOf(gpu), gpu.mig_layout);
      if (!valid.ok()) {
        return Conflict(
            absl::StrCat("node ", node.name, " GPU ", gpu.index, ": ", valid.message()));
      }
    }
  }
  node.allocated_cpu_milli = 0;
  node.allocated_memory_mib = 0;
  node.class_members = {};
  const size_t index = nodes_.size();
  node_index_[node.id] = index;
  node_by_name_[{node.cluster, node.name}] = index;
  pool_nodes_[node.pool].push_back(index);
  for (const Gpu& gpu : node.gpus) {
    if (!gpu.uuid.empty()) gpu_by_uuid_[gpu.uuid] = {node.id, gpu.index};
  }
  if (node.id >= next_node_id_) next_node_id_ = node.id + 1;
  inventory_.Put(index, node);
  nodes_.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status State::LoadTeam(Team team) {
  if (!team.parent.empty() && !teams_.contains(team.parent)) {
    return Conflict(absl::StrCat("team ", team.name, " has unknown parent ", team.parent));
  }
  const std::string name = team.name;
  if (!teams_.emplace(name, std::move(team)).second) {
    return Conflict(absl::StrCat("duplicate team ", name));
  }
  return absl::OkStatus();
}

absl::Status State::LoadQuota(Quota quota) {
  if (!teams_.contains(quota.team) || !pools_.contains(quota.pool)) {
    return Conflict(
        absl::StrCat("quota references unknown team ", quota.team, " or pool ", quota.pool));
  }
  if (!quota.gpu_model.empty() && !gpu_models_.contains(quota.gpu_model)) {
    return Conflict(absl::StrCat("quota references unknown GPU model ", quota.gpu_model));
  }
  QuotaKey key{quota.team, quota.pool, quota.gpu_model};
  quotas_[std::move(key)] = std::move(quota);
  return absl::OkStatus();
}

absl::Status State::LoadRoleBinding(RoleBinding binding) {
  const bool known = binding.scope_kind == ScopeKind::kOrg    ? binding.scope.empty()
                     : binding.scope_kind == ScopeKind::kTeam ? teams_.contains(binding.scope)
                     : binding.scope_kind == ScopeKind::kPool ? pools_.contains(binding.scope)
                                                              : false;
  if (!known) return Conflict(absl::StrCat("role binding with unknown scope ", binding.scope));
  if (!authority_.AddRoleBinding(std::move(binding))) return Conflict("duplicate role binding");
  return absl::OkStatus();
}

absl::Status State::LoadAuthorityRule(AuthorityRule rule) {
  if (!rule.pool.empty() && !pools_.contains(rule.pool)) {
    return Conflict(absl::StrCat("authority rule for unknown pool ", rule.pool));
  }
  if (!authority_.AddAuthorityRule(std::move(rule))) return Conflict("duplicate authority rule");
  return absl::OkStatus();
}

absl::Status State::LoadPrice(const Price& price) {
  if (!gpu_models_.contains(price.gpu_model)) {
    return Conflict(absl::StrCat("price of unknown GPU model ", price.gpu_model));
  }
  if (!finances_.AddPrice(price)) {
    return Conflict(absl::StrCat("a price of ", price.gpu_model, " from that time exists"));
  }
  return absl::OkStatus();
}

absl::Status State::LoadBudget(Budget budget) {
  if (!teams_.contains(budget.team)) {
    return Conflict(absl::StrCat("budget of unknown team ", budget.team));
  }
  finances_.PutBudget(std::move(budget));
  return absl::OkStatus();
}

absl::Status State::LoadSlo(const Slo& slo) {
  if (!teams_.contains(slo.team)) return Conflict(absl::StrCat("SLO of unknown team ", slo.team));
  if (!pools_.contains(slo.pool)) return Conflict(absl::StrCat("SLO in unknown pool ", slo.pool));
  chargeback_.PutSlo(slo);
  return absl::OkStatus();
}

absl::Status State::LoadRequest(CapacityRequest request) {
  if (request.id <= 0 || by_key_.contains(request.spec.idempotency_key)) {
    return Conflict(absl::StrCat("bad or duplicate request ", request.id));
  }
  // A MIG request keeps the charge it was decided with; rows stored without
  // one are priced from the catalog.
  if (!IsFinal(request.state) && request.spec.shape.is_mig() &&
      request.spec.shape.mig().milli == 0) {
    absl::StatusOr<int64_t> milli = MigMilli(request.spec);
    if (!milli.ok())
      return Conflict(absl::StrCat("request ", request.id, ": ", milli.status().message()));
    std::get<MigShape>(request.spec.shape.gpu).milli = *milli;
  }
  if (request.id >= next_request_id_) next_request_id_ = request.id + 1;
  // What the request cost (or, while it runs, is projected to) counts
  // against the month it was admitted in.
  if (request.cost_micros != 0 && request.admitted_at != absl::InfinitePast()) {
    AddSpend(request.spec.team, MonthStart(request.admitted_at), request.cost_micros);
  }
  if (!IsFinal(request.state)) ObserveDemand(request.spec);
  for (Placement& p : request.placements) p.workload_class = request.spec.workload_class;
  if (HoldsCapacity(request.state)) {
    for (const Placement& placed : request.placements) {
      // The stored GPU layouts are the truth: a placement's layout change was
      // written to them when it was decided.
      Placement p = placed;
      p.mig_new_layout.clear();
      p.mig_layout_cleared = false;
      const Node* node = FindNode(p.node_id);
      if (node == nullptr) return Conflict(absl::StrCat("request ", request.id, ": unknown node"));
      for (int32_t g : p.gpu_indices) {
        if (g < 0 || g >= static_cast<int32_t>(node->gpus.size())) {
          return Conflict(absl::StrCat("request ", request.id, ": bad GPU index"));
        }
        const Gpu& gpu = node->gpus[g];
        bool fits = p.exclusive ? gpu.empty()
                                : !gpu.exclusive && gpu.free_milli() >= p.gpu_milli &&
                                      gpu.free_memory_mib() >= p.gpu_memory_mib;
        if (!p.mig_profile.empty()) {
          fits =
              fits &&
              std::any_of(gpu.mig_layout.begin(), gpu.mig_layout.end(), [&](const MigInstance& i) {
                return i.profile == p.mig_profile && i.start == p.mig_start && !i.allocated;
              });
        }
        if (!fits) {
          return Conflict(absl::StrCat("request ", request.id, ": GPU overcommitted"));
        }
      }
      ApplyPlacement(p, +1);
    }
  }
  PutRequest(request);
  return absl::OkStatus();
}

const GpuModel* State::FindGpuModel(const std::string& name) const {
  auto it = gpu_models_.find(name);
  return it == gpu_models_.end() ? nullptr : &it->second;
}

const Pool* State::FindPool(const std::string& name) const {
  auto it = pools_.find(name);
  return it == pools_.end() ? nullptr : &it->second;
}

const Team* State::FindTeam(const std::string& name) const {
  auto it = teams_.find(name);
  return it == teams_.end() ? nullptr : &it->second;
}

const Node* State::FindNode(int64_t id) const {
  auto it = node_index_.find(id);
  return it == node_index_.end() ? nullptr : &nodes_[it->second];
}

const std::pair<int64_t, int32_t>* State::FindGpuByUuid(const std::string& uuid) const {
  if (uuid.empty()) return nullptr;
  auto it = gpu_by_uuid_.find(uuid);
  return it == gpu_by_uuid_.end() ? nullptr : &it->second;
}

const Node* State::FindNode(const std::string& cluster, const std::string& name) const {
  auto it = node_by_name_.find({cluster, name});
  return it == node_by_name_.end() ? nullptr : &nodes_[it->second];
}

const CapacityRequest* State::FindLiveRequest(int64_t id) const {
  auto it = live_requests_.find(id);
  return it == live_requests_.end() ? nullptr : &it->second;
}

const IdempotencyEntry* State::FindIdempotencyKey(const std::string& key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &it->second;
}

const Quota* State::FindQuota(const std::string& team, const std::string& pool,
                              const std::string& gpu_model) const {
  auto it = quotas_.find(QuotaKey{team, pool, gpu_model});
  return it == quotas_.end() ? nullptr : &it->second;
}

std::vector<const Quota*> State::QuotasOf(const std::string& team, const std::string& pool) const {
  std::vector<const Quota*> out;
  const Quota* pool_wide = nullptr;
  for (auto it = quotas_.lower_bound(QuotaKey{team, pool, ""});
       it != quotas_.end() && std::get<0>(it->first) == team && std::get<1>(it->first) == pool;
       ++it) {
    if (it->second.gpu_model.empty()) {
      pool_wide = &it->second;
    } else {
      out.push_back(&it->second);
    }
  }
  if (pool_wide != nullptr) out.push_back(pool_wide);
  return out;
}

std::vector<const Quota*> State::QuotasFor(const std::string& pool,
                                           const std::string& gpu_model) const {
  std::vector<const Quota*> out;
  for (const auto& [key, quota] : quotas_) {
    if (quota.pool == pool && quota.gpu_model == gpu_model) out.push_back(&quota);
  }
  return out;
}

int64_t State::UsedMilli(const std::string& team, const std::string& pool) const {
  auto it = used_pool_milli_.find({team, pool});
  return it == used_pool_milli_.end() ? 0 : it->second;
}

int64_t State::UsedMilli(const std::string& team, const std::string& pool,
                         const std::string& gpu_model) const {
  auto it = used_milli_.find(QuotaKey{team, pool, gpu_model});
  return it == used_milli_.end() ? 0 : it->second;
}

const std::string& State::CohortOf(const std::string& team) const {
  auto it = teams_.find(team);
  ARBITER_CHECK(it != teams_.end());
  while (!it->second.parent.empty()) {
    it = teams_.find(it->second.parent);
    ARBITER_CHECK(it != teams_.end());
  }
  return it->first;
}

const std::vector<size_t>& State::PoolNodes(const std::string& pool) const {
  static const std::vector<size_t> kNone;
  auto it = pool_nodes_.find(pool);
  return it == pool_nodes_.end() ? kNone : it->second;
}

const std::set<int64_t>& State::QueuedIn(const std::string& pool) const {
  static const std::set<int64_t> kNone;
  auto it = queued_.find(pool);
  return it == queued_.end() ? kNone : it->second;
}

const std::set<int64_t>& State::VictimsOf(int64_t preemptor) const {
  static const std::set<int64_t> kNone;
  auto it = victims_.find(preemptor);
  return it == victims_.end() ? kNone : it->second;
}

const std::set<int64_t>& State::HoldingIn(const std::string& pool) const {
  static const std::set<int64_t> kNone;
  auto it = holding_.find(pool);
  return it == holding_.end() ? kNone : it->second;
}

void State::ApplyPlacement(const Placement& p, int sign) {
  auto it = node_index_.find(p.node_id);
  ARBITER_CHECK(it != node_index_.end());
  Node& node = nodes_[it->second];
  const auto cls = static_cast<size_t>(p.workload_class);
  node.class_members[cls] += sign;
  ARBITER_CHECK(node.class_members[cls] >= 0);
  node.allocated_cpu_milli += sign * p.cpu_milli;
  node.allocated_memory_mib += sign * p.memory_mib;
  ARBITER_CHECK(node.allocated_cpu_milli >= 0 && node.allocated_cpu_milli <= node.cpu_milli);
  ARBITER_CHECK(node.allocated_memory_mib >= 0 && node.allocated_memory_mib <= node.memory_mib);
  for (int32_t g : p.gpu_indices) {
    Gpu& gpu = node.gpus[g];
    if (sign > 0 && (p.mig_layout_cleared || !p.mig_new_layout.empty())) {
      ARBITER_CHECK(gpu.tenants == 0);
      gpu.mig_layout = p.mig_new_layout;
    }
    if (!p.mig_profile.empty()) {
      auto inst =
          std::find_if(gpu.mig_layout.begin(), gpu.mig_layout.end(), [&](const MigInstance& i) {
            return i.profile == p.mig_profile && i.start == p.mig_start;
          });
      ARBITER_CHECK(inst != gpu.mig_layout.end() && inst->allocated == (sign < 0));
      inst->allocated = sign > 0;
    }
    gpu.allocated_milli += sign * p.gpu_milli;
    // An exclusive placement holds all of each GPU's memory, whatever its model.
    gpu.allocated_memory_mib += sign * (p.exclusive ? gpu.memory_mib : p.gpu_memory_mib);
    gpu.tenants += sign;
    gpu.class_tenants[cls] += sign;
    ARBITER_CHECK(gpu.class_tenants[cls] >= 0);
    gpu.exclusive = sign > 0 && p.exclusive;
    ARBITER_CHECK(gpu.allocated_milli >= 0 && gpu.allocated_milli <= kMilliPerGpu);
    ARBITER_CHECK(gpu.allocated_memory_mib >= 0 && gpu.allocated_memory_mib <= gpu.memory_mib);
    ARBITER_CHECK(gpu.tenants >= 0);
  }
  inventory_.Put(it->second, node);
}

void State::ObserveDemand(const CapacityRequestSpec& spec) {
  if (spec.shape.is_mig()) mig_demand_[spec.shape.mig().profile] += spec.members;
  demand_.Observe(ShapeOf(spec), spec.members);
  observed_since_refresh_ += spec.members;
  if (packing_policy_ == PackingPolicy::kBestFit) return;  // Scores with no model.
  const int64_t epoch = std::max<int64_t>(32, std::min<int64_t>(1024, demand_.total() / 8));
  if (fragmentation_.empty() || observed_since_refresh_ >= epoch) {
    const bool arbiter = packing_policy_ == PackingPolicy::kArbiter;
    fragmentation_.Reset(demand_, /*host_term=*/arbiter);
    if (arbiter) share_prices_.Reset(demand_);
    observed_since_refresh_ = 0;
  }
}

absl::StatusOr<int64_t> State::MigMilli(const CapacityRequestSpec& spec) const {
  const std::string& name = spec.shape.mig().profile;
  int64_t milli = 0;
  auto consider = [&](const GpuModel& model) {
    if (const MigProfile* p = FindMigProfile(model.mig_profiles, name)) {
      milli = std::max(milli, core::MigMilli(model.mig_profiles, *p));
    }
  };
  if (spec.gpu_models.empty()) {
    for (const auto& [model_name, model] : gpu_models_) consider(model);
  } else {
    for (const std::string& m : spec.gpu_models) {
      if (const GpuModel* model = FindGpuModel(m)) consider(*model);
    }
  }
  if (milli == 0) {
    return absl::NotFoundError(
        absl::StrCat("shape.mig_profile: no allowed GPU model has MIG "
                     "profile '",
                     name, "'"));
  }
  return milli;
}

const std::vector<MigProfile>& State::MigProfilesOf(const Gpu& gpu) const {
  if (!gpu.reported_mig.empty()) return gpu.mig_profiles;
  const GpuModel* model = FindGpuModel(gpu.model);
  ARBITER_CHECK(model != nullptr);
  return model->mig_profiles;
}

std::vector<std::string> State::MigFillOrder(const GpuModel& model) const {
  std::vector<const MigProfile*> profiles;
  for (const MigProfile& p : model.mig_profiles) profiles.push_back(&p);
  auto demand = [&](const MigProfile* p) {
    auto it = mig_demand_.find(p->name);
    return it == mig_demand_.end() ? int64_t{0} : it->second;
  };
  std::sort(profiles.begin(), profiles.end(), [&](const MigProfile* a, const MigProfile* b) {
    return std::make_tuple(-demand(a), -a->compute_slices, -a->memory_slices, a->name) <
           std::make_tuple(-demand(b), -b->compute_slices, -b->memory_slices, b->name);
  });
  std::vector<std::string> order;
  for (const MigProfile* p : profiles) order.push_back(p->name);
  return order;
}

void State::RestoreNode(Node node) {
  auto it = node_index_.find(node.id);
  ARBITER_CHECK(it != node_index_.end());
  nodes_[it->second] = std::move(node);
  inventory_.Put(it->second, nodes_[it->second]);
}

void State::PutRequest(const CapacityRequest& request) {
  const int64_t id = request.id;
  const std::string& pool = request.spec.pool;
  auto old = live_requests_.find(id);
  if (old != live_requests_.end()) Unindex(old->second);
  by_key_[request.spec.idempotency_key] = IdempotencyEntry{id, request.body_hash};
  if (IsFinal(request.state)) {
    if (old != live_requests_.end()) live_requests_.erase(old);
    return;
  }
  const int64_t milli = request.spec.total_gpu_milli();
  if (HoldsCapacity(request.state)) {
    used_milli_[QuotaKey{request.spec.team, pool, request.quota_model}] += milli;
    used_pool_milli_[{request.spec.team, pool}] += milli;
    holding_[pool].insert(id);
  }
  if (request.state == RequestState::kQueued) queued_[pool].insert(id);
  if (request.state == RequestState::kPreempting) {
    timers_.insert({request.preempt_deadline, id});
    victims_[request.preempted_by].insert(id);
  }
  if (request.state == RequestState::kReserved) timers_.insert({request.spec.start_at, id});
  if (request.state == RequestState::kPendingApproval) {
    timers_.insert({request.approval_deadline, id});
  }
  SetHolds(request, +1);
  live_requests_[id] = request;
}

void State::ReleaseHolds(int64_t id) {
  auto it = live_requests_.find(id);
  if (it == live_requests_.end()) return;
  SetHolds(it->second, -1);
  it->second.holds.clear();
}

void State::Unindex(const CapacityRequest& old) {
  const std::string& pool = old.spec.pool;
  const int64_t milli = old.spec.total_gpu_milli();
  if (HoldsCapacity(old.state)) {
    used_milli_[QuotaKey{old.spec.team, pool, old.quota_model}] -= milli;
    used_pool_milli_[{old.spec.team, pool}] -= milli;
    holding_[pool].erase(old.id);
  }
  if (old.state == RequestState::kQueued) queued_[pool].erase(old.id);
  if (old.state == RequestState::kPreempting) {
    timers_.erase({old.preempt_deadline, old.id});
    auto it = victims_.find(old.preempted_by);
    if (it != victims_.end() && it->second.erase(old.id) > 0 && it->second.empty()) {
      victims_.erase(it);
    }
  }
  if (old.state == RequestState::kReserved) timers_.erase({old.spec.start_at, old.id});
  if (old.state == RequestState::kPendingApproval) {
    timers_.erase({old.approval_deadline, old.id});
  }
  SetHolds(old, -1);
}

void State::SetHolds(const CapacityRequest& reservation, int sign) {
  const std::pair<absl::Time, absl::Time> window{
      reservation.spec.start_at, reservation.spec.duration == absl::ZeroDuration()
                                     ? absl::InfiniteFuture()
                                     : reservation.spec.start_at + reservation.spec.duration};
  for (const GpuHold& h : reservation.holds) {
    auto it = node_index_.find(h.node_id);
    if (it == node_index_.end()) continue;
    std::vector<Gpu>& gpus = nodes_[it->second].gpus;
    if (h.gpu_index < 0 || h.gpu_index >= static_cast<int32_t>(gpus.size())) continue;
    auto& held = gpus[h.gpu_index].held;
    if (sign > 0) {
      held.push_back(window);
    } else if (auto w = std::find(held.begin(), held.end(), window); w != held.end()) {
      held.erase(w);
    }
  }
}

}  // namespace arbiter::core
