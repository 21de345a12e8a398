#include "core/inventory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

#include "core/mig.h"
#include "core/status_macros.h"

namespace arbiter::core {
namespace {

absl::Status Conflict(absl::string_view what) { return absl::FailedPreconditionError(what); }

}  // namespace

absl::Status Inventory::LoadGpuModel(GpuModel model) {
  AttachBuiltinMigProfiles(model);
  const std::string name = model.name;
  if (!gpu_models_.emplace(name, std::move(model)).second) {
    return Conflict(absl::StrCat("duplicate GPU model ", name));
  }
  return absl::OkStatus();
}

void Inventory::PutGpuModel(GpuModel model) {
  AttachBuiltinMigProfiles(model);
  const std::string name = model.name;
  gpu_models_[name] = std::move(model);
}

absl::Status Inventory::LoadCluster(Cluster cluster) {
  const std::string name = cluster.name;
  if (!clusters_.emplace(name, std::move(cluster)).second) {
    return Conflict(absl::StrCat("duplicate cluster ", name));
  }
  return absl::OkStatus();
}

absl::Status Inventory::LoadPool(Pool pool) {
  const std::string name = pool.name;
  if (!pools_.emplace(name, std::move(pool)).second) {
    return Conflict(absl::StrCat("duplicate pool ", name));
  }
  return absl::OkStatus();
}

absl::Status Inventory::LoadNode(Node node) {
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
  index_.Put(index, node);
  nodes_.push_back(std::move(node));
  return absl::OkStatus();
}

const GpuModel* Inventory::FindGpuModel(const std::string& name) const {
  auto it = gpu_models_.find(name);
  return it == gpu_models_.end() ? nullptr : &it->second;
}

const Pool* Inventory::FindPool(const std::string& name) const {
  auto it = pools_.find(name);
  return it == pools_.end() ? nullptr : &it->second;
}

const Node* Inventory::FindNode(int64_t id) const {
  auto it = node_index_.find(id);
  return it == node_index_.end() ? nullptr : &nodes_[it->second];
}

const Node* Inventory::FindNode(const std::string& cluster, const std::string& name) const {
  auto it = node_by_name_.find({cluster, name});
  return it == node_by_name_.end() ? nullptr : &nodes_[it->second];
}

const std::pair<int64_t, int32_t>* Inventory::FindGpuByUuid(const std::string& uuid) const {
  if (uuid.empty()) return nullptr;
  auto it = gpu_by_uuid_.find(uuid);
  return it == gpu_by_uuid_.end() ? nullptr : &it->second;
}

const std::vector<size_t>& Inventory::PoolNodes(const std::string& pool) const {
  static const std::vector<size_t> kNone;
  auto it = pool_nodes_.find(pool);
  return it == pool_nodes_.end() ? kNone : it->second;
}

const std::vector<MigProfile>& Inventory::MigProfilesOf(const Gpu& gpu) const {
  if (!gpu.reported_mig.empty()) return gpu.mig_profiles;
  const GpuModel* model = FindGpuModel(gpu.model);
  ARBITER_CHECK(model != nullptr);
  return model->mig_profiles;
}

absl::Status Inventory::CheckFits(const Placement& p) const {
  const Node* node = FindNode(p.node_id);
  if (node == nullptr) return Conflict("unknown node");
  for (int32_t g : p.gpu_indices) {
    if (g < 0 || g >= static_cast<int32_t>(node->gpus.size())) return Conflict("bad GPU index");
    const Gpu& gpu = node->gpus[g];
    bool fits = p.exclusive ? gpu.empty()
                            : !gpu.exclusive && gpu.free_milli() >= p.gpu_milli &&
                                  gpu.free_memory_mib() >= p.gpu_memory_mib;
    if (!p.mig_profile.empty()) {
      fits = fits &&
             std::any_of(gpu.mig_layout.begin(), gpu.mig_layout.end(), [&](const MigInstance& i) {
               return i.profile == p.mig_profile && i.start == p.mig_start && !i.allocated;
             });
    }
    if (!fits) return Conflict("GPU overcommitted");
  }
  return absl::OkStatus();
}

void Inventory::ApplyPlacement(const Placement& p, int sign) {
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
  index_.Put(it->second, node);
}

void Inventory::SetLifecycle(const Node& node) {
  auto it = node_index_.find(node.id);
  ARBITER_CHECK(it != node_index_.end());
  Node& n = nodes_[it->second];
  n.cordoned = node.cordoned;
  n.health = node.health;
  n.drain_deadline = node.drain_deadline;
  n.failed_at = node.failed_at;
  n.last_heartbeat = node.last_heartbeat;
  index_.Put(it->second, n);
}

void Inventory::UpdateFacts(const Node& node) {
  auto it = node_index_.find(node.id);
  ARBITER_CHECK(it != node_index_.end());
  Node& n = nodes_[it->second];
  ARBITER_CHECK(node.gpus.size() == n.gpus.size());
  ARBITER_CHECK(node.cpu_milli >= n.allocated_cpu_milli &&
                node.memory_mib >= n.allocated_memory_mib);
  n.topology_domain = node.topology_domain;
  n.cpu_milli = node.cpu_milli;
  n.memory_mib = node.memory_mib;
  for (size_t i = 0; i < n.gpus.size(); ++i) {
    Gpu& gpu = n.gpus[i];
    ARBITER_CHECK(gpu.model == node.gpus[i].model);
    if (gpu.uuid != node.gpus[i].uuid) {
      if (!gpu.uuid.empty()) gpu_by_uuid_.erase(gpu.uuid);
      gpu.uuid = node.gpus[i].uuid;
      if (!gpu.uuid.empty()) gpu_by_uuid_[gpu.uuid] = {n.id, gpu.index};
    }
    gpu.reported_mig = node.gpus[i].reported_mig;
    gpu.mig_profiles.clear();
    if (!gpu.reported_mig.empty()) {
      absl::StatusOr<std::vector<MigProfile>> offered = ApplyReportedPlacements(
          FindGpuModel(gpu.model)->mig_profiles, gpu.reported_mig, "reported_mig");
      ARBITER_CHECK(offered.ok());
      gpu.mig_profiles = std::move(*offered);
    }
  }
  index_.Put(it->second, n);
}

void Inventory::RemoveNode(int64_t id) {
  auto it = node_index_.find(id);
  ARBITER_CHECK(it != node_index_.end());
  const size_t position = it->second;
  Node& n = nodes_[position];
  ARBITER_CHECK(!n.busy());
  n.removed = true;
  std::vector<size_t>& pool = pool_nodes_[n.pool];
  pool.erase(std::remove(pool.begin(), pool.end(), position), pool.end());
  node_by_name_.erase({n.cluster, n.name});
  for (const Gpu& gpu : n.gpus) {
    if (!gpu.uuid.empty()) gpu_by_uuid_.erase(gpu.uuid);
  }
  node_index_.erase(it);
  index_.Put(position, n);
}

void Inventory::RestoreNode(Node node) {
  auto it = node_index_.find(node.id);
  ARBITER_CHECK(it != node_index_.end());
  nodes_[it->second] = std::move(node);
  index_.Put(it->second, nodes_[it->second]);
}

void Inventory::SetHolds(const std::vector<GpuHold>& holds,
                         std::pair<absl::Time, absl::Time> window, int sign) {
  for (const GpuHold& h : holds) {
    auto it = node_index_.find(h.node_id);
    if (it == node_index_.end()) continue;
    Node& node = nodes_[it->second];
    if (h.cpu_milli > 0 || h.memory_mib > 0) {
      const Node::HostHold host{window.first, window.second, h.cpu_milli, h.memory_mib};
      if (sign > 0) {
        node.host_held.push_back(host);
      } else if (auto w = std::find(node.host_held.begin(), node.host_held.end(), host);
                 w != node.host_held.end()) {
        node.host_held.erase(w);
      }
    }
    std::vector<Gpu>& gpus = node.gpus;
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
