#include "clients/kube/controller.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

#include "clients/kube/json_fields.h"

namespace arbiter::kube {
namespace {

using json = nlohmann::json;

// Every action on the same thing has the same key: one in flight at a time.
std::string Key(const Action& a) {
  switch (a.kind) {
    case Action::kRenew:
      return absl::StrCat("renew/", a.allocation, "/", a.holder);
    case Action::kClaim:
      return absl::StrCat("claim/", a.allocation, "/", a.member);
    case Action::kRelease:
    case Action::kLookup:
      return absl::StrCat("allocation/", a.allocation);
    case Action::kEvict:
    case Action::kDelete:
      return absl::StrCat("pod/", a.ns, "/", a.name);
    default:
      return absl::StrCat("node/", a.name);
  }
}

bool Live(AllocationPhase p) {
  return p == AllocationPhase::kAdmitted || p == AllocationPhase::kPreempting;
}

}  // namespace

std::string PodInfo::holder() const { return absl::StrCat("pod:", ns, "/", name); }

std::string TeamNamespace(const std::string& team) {
  return absl::StrReplaceAll(team, {{"_", "-"}});
}

std::string Action::Describe() const {
  switch (kind) {
    case kClaim:
      return absl::StrCat("claim allocation ", allocation, " member ", member, " for ", holder);
    case kRenew:
      return absl::StrCat("renew allocation ", allocation, " for ", holder);
    case kRelease:
      return absl::StrCat("release allocation ", allocation);
    case kLookup:
      return absl::StrCat("look up allocation ", allocation);
    case kEvict:
      return absl::StrCat("evict pod ", ns, "/", name, " (allocation ", allocation, ")");
    case kDelete:
      return absl::StrCat("delete pod ", ns, "/", name, " (allocation ", allocation, ")");
    case kCordon:
      return absl::StrCat("cordon node ", name);
    case kDrain:
      return absl::StrCat("drain node ", name);
    case kFail:
      return absl::StrCat("mark node ", name, " failed");
    case kUncordon:
      return absl::StrCat("uncordon node ", name);
  }
  return "?";
}

absl::StatusOr<std::optional<PodInfo>> ReadPod(const json& pod) {
  const json& meta = Field(pod, "metadata");
  const json& annotations = Field(meta, "annotations");
  const std::string allocation = Text(annotations, kAllocationAnnotation);
  if (allocation.empty()) return std::nullopt;
  PodInfo info;
  info.uid = Text(meta, "uid");
  info.ns = Text(meta, "namespace");
  info.name = Text(meta, "name");
  if (info.uid.empty() || info.ns.empty() || info.name.empty()) {
    return absl::InvalidArgumentError("metadata: a pod needs uid, namespace and name");
  }
  if (!absl::SimpleAtoi(allocation, &info.allocation) || info.allocation <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("metadata.annotations.", kAllocationAnnotation,
                                                   ": \"", allocation, "\" is not a request id"));
  }
  const std::string member = Text(annotations, kMemberAnnotation);
  if (!member.empty() && (!absl::SimpleAtoi(member, &info.member) || info.member < 0)) {
    return absl::InvalidArgumentError(absl::StrCat("metadata.annotations.", kMemberAnnotation,
                                                   ": \"", member, "\" is not a member index"));
  }
  const json& spec = Field(pod, "spec");
  info.node = Text(spec, "nodeName");
  info.asks_for_gpus = Field(spec, "resourceClaims").is_array() && !spec["resourceClaims"].empty();
  for (const char* list : {"containers", "initContainers"}) {
    const json& containers = Field(spec, list);
    if (!containers.is_array()) continue;
    for (const json& c : containers) {
      for (const char* section : {"limits", "requests"}) {
        const json& resources = Field(Field(c, "resources"), section);
        if (!resources.is_object()) continue;
        for (const auto& [name, quantity] : resources.items()) {
          info.asks_for_gpus |=
              absl::StartsWith(name, "nvidia.com/") && quantity != "0" && quantity != 0;
        }
      }
    }
  }
  const std::string phase = Text(Field(pod, "status"), "phase");
  info.finished = phase == "Succeeded" || phase == "Failed";
  info.deleting = Field(meta, "deletionTimestamp").is_string();
  return info;
}

absl::StatusOr<NodeInfo> ReadNode(const json& node) {
  NodeInfo info;
  info.name = Text(Field(node, "metadata"), "name");
  if (info.name.empty()) return absl::InvalidArgumentError("metadata.name: a node needs a name");
  const json& unschedulable = Field(Field(node, "spec"), "unschedulable");
  info.unschedulable = unschedulable.is_boolean() && unschedulable.get<bool>();
  const json& conditions = Field(Field(node, "status"), "conditions");
  if (conditions.is_array()) {
    for (const json& c : conditions) {
      if (Text(c, "type") != "Ready") continue;
      info.ready = Text(c, "status") == "True";
      absl::Time since;
      std::string error;
      if (absl::ParseTime(absl::RFC3339_full, Text(c, "lastTransitionTime"), &since, &error)) {
        info.ready_since = since;
      }
    }
  }
  return info;
}

void Controller::ResetPods(const std::vector<PodInfo>& pods, absl::Time now) {
  std::set<std::string> listed;
  for (const PodInfo& pod : pods) {
    listed.insert(pod.uid);
    PodChanged(pod, now);
  }
  for (auto& [uid, state] : pods_) {
    if (listed.count(uid) == 0) state.gone = true;
  }
}

void Controller::PodChanged(const PodInfo& pod, absl::Time) {
  auto [it, added] = pods_.try_emplace(pod.uid);
  PodState& state = it->second;
  if (!added && state.info.allocation != pod.allocation) {
    pods_by_allocation_[state.info.allocation].erase(pod.uid);  // Its annotation changed.
  }
  pods_by_allocation_[pod.allocation].insert(pod.uid);
  state.info = pod;
  state.gone = false;
  allocations_.try_emplace(pod.allocation);
}

void Controller::PodGone(const std::string& uid, absl::Time) {
  if (auto it = pods_.find(uid); it != pods_.end()) it->second.gone = true;
}

void Controller::ResetNodes(const std::vector<NodeInfo>& nodes) {
  std::set<std::string> listed;
  for (const NodeInfo& node : nodes) {
    listed.insert(node.name);
    NodeChanged(node);
  }
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    it = listed.count(it->first) == 0 ? nodes_.erase(it) : std::next(it);
  }
}

void Controller::NodeChanged(const NodeInfo& node) { nodes_[node.name].info = node; }

void Controller::NodeGone(const std::string& name) { nodes_.erase(name); }

void Controller::AllocationChanged(int64_t allocation, AllocationPhase phase, absl::Time deadline,
                                   const std::string& ns) {
  auto it = allocations_.find(allocation);
  if (it == allocations_.end()) return;  // No pod of this cluster holds it.
  it->second.phase = phase;
  it->second.deadline = deadline;
  it->second.ns = ns;
}

AllocationPhase Controller::PhaseOf(int64_t allocation) const {
  auto it = allocations_.find(allocation);
  return it == allocations_.end() ? AllocationPhase::kUnknown : it->second.phase;
}

void Controller::Forget(int64_t allocation) {
  if (auto it = pods_by_allocation_.find(allocation); it != pods_by_allocation_.end()) {
    for (const std::string& uid : it->second) pods_.erase(uid);
    pods_by_allocation_.erase(it);
  }
  allocations_.erase(allocation);
}

std::vector<Controller::PodState*> Controller::PodsOf(int64_t allocation) {
  std::vector<PodState*> out;
  if (auto it = pods_by_allocation_.find(allocation); it != pods_by_allocation_.end()) {
    for (const std::string& uid : it->second) out.push_back(&pods_.at(uid));
  }
  return out;
}

std::vector<Action> Controller::Plan(absl::Time now) {
  std::vector<Action> planned;
  std::vector<int64_t> ids;
  for (const auto& [id, a] : allocations_) ids.push_back(id);
  for (int64_t id : ids) PlanAllocation(id, allocations_[id], now, planned);
  for (auto& [name, n] : nodes_) PlanNode(n, now, planned);
  std::vector<Action> out;
  for (Action& a : planned) {
    if (in_flight_.insert(Key(a)).second) out.push_back(std::move(a));
  }
  return out;
}

void Controller::PlanAllocation(int64_t id, AllocationState& a, absl::Time now,
                                std::vector<Action>& out) {
  // Its pods: in its team's namespace (once known), asking for GPUs. Others
  // carrying its annotation are not its workloads: ignored.
  std::vector<PodState*> pods;
  bool any_seen = false;
  for (PodState* p : PodsOf(id)) {
    any_seen = true;
    if (!p->info.asks_for_gpus || (!a.ns.empty() && p->info.ns != a.ns)) continue;
    pods.push_back(p);
  }
  bool any_live = false;
  bool all_gone = true;
  for (const PodState* p : pods) {
    any_live |= !p->gone && !p->info.finished;
    all_gone &= p->gone;
    const auto held = a.holders.find(p->info.member);
    a.held_by_pod |= held != a.holders.end() && held->second == p->info.holder();
  }
  const bool ended = a.released || a.phase == AllocationPhase::kEnded;
  if (ended && all_gone) {
    Forget(id);
    return;
  }
  if (!any_seen) return;
  if (a.phase == AllocationPhase::kUnknown || a.ns.empty()) {
    if (Due(a.looked_up_at, options_.retry_after, now)) out.push_back(Action{Action::kLookup, id});
    return;
  }
  for (PodState* p : pods) {
    if (p->gone || p->info.finished) continue;
    const PodInfo& pod = p->info;
    const bool past_deadline = a.phase == AllocationPhase::kPreempting && now >= a.deadline;
    const bool must_go = a.phase == AllocationPhase::kEnded || past_deadline;
    if (must_go && Due(p->deleted_at, options_.retry_after, now)) {
      out.push_back(Action{Action::kDelete, id, "", pod.ns, pod.name, pod.uid});
      continue;
    }
    // Whose is the member: this pod's, nobody's yet, or another's.
    const auto held = a.holders.find(pod.member);
    const bool mine = !a.holders_known || (held != a.holders.end() && held->second == pod.holder());
    if (a.holders_known && a.phase == AllocationPhase::kAdmitted && !mine) {
      if (held == a.holders.end()) {
        Action claim{Action::kClaim, id, pod.holder()};
        claim.member = pod.member;
        out.push_back(std::move(claim));
      } else if (Due(p->deleted_at, options_.retry_after, now)) {
        out.push_back(Action{Action::kDelete, id, "", pod.ns, pod.name, pod.uid});
      }
      continue;
    }
    if (a.phase == AllocationPhase::kPreempting && !pod.deleting &&
        p->evicted_at == absl::InfinitePast() &&
        Due(p->evict_tried_at, options_.retry_after, now)) {
      out.push_back(Action{Action::kEvict, id, "", pod.ns, pod.name, pod.uid});
    }
    if (Live(a.phase) && !past_deadline && Due(p->renewed_at, options_.renew_every, now)) {
      out.push_back(Action{Action::kRenew, id, pod.holder()});
    }
  }
  // Released for its pods only when one of them held it, as Arbiter said.
  if (Live(a.phase) && !pods.empty() && !any_live && !a.released && a.holders_known &&
      a.held_by_pod && Due(a.released_at, options_.retry_after, now)) {
    out.push_back(Action{Action::kRelease, id});
  }
}

void Controller::PlanNode(NodeState& n, absl::Time now, std::vector<Action>& out) {
  NodeMark target;
  if (!n.info.ready && now - n.info.ready_since >= options_.not_ready_after) {
    target = NodeMark::kFailed;
  } else if (!n.info.ready) {
    return;  // Not ready for long enough: nothing changes yet.
  } else if (n.info.unschedulable) {
    target = options_.drain_grace > absl::ZeroDuration() ? NodeMark::kDrained : NodeMark::kCordoned;
  } else {
    target = NodeMark::kNone;
  }
  if (target == n.mark || !Due(n.tried_at, options_.retry_after, now)) return;
  Action a{Action::kUncordon};
  a.name = n.info.name;
  // A failed node is uncordoned (its failure cleared) before anything else.
  if (n.mark == NodeMark::kFailed || target == NodeMark::kNone) {
    a.kind = Action::kUncordon;
  } else if (target == NodeMark::kFailed) {
    a.kind = Action::kFail;
    a.at = n.info.ready_since == absl::InfinitePast() ? now : n.info.ready_since;
  } else if (target == NodeMark::kDrained) {
    a.kind = Action::kDrain;
  } else {
    a.kind = Action::kCordon;
  }
  out.push_back(std::move(a));
}

void Controller::Done(const Action& action, const Outcome& outcome, absl::Time now) {
  in_flight_.erase(Key(action));
  const absl::Status& status = outcome.status;
  if (action.kind >= Action::kCordon) {
    auto it = nodes_.find(action.name);
    if (it == nodes_.end()) return;
    NodeState& n = it->second;
    n.tried_at = now;
    // A node Arbiter does not know (no GPUs of this cluster) is left alone
    // as if done, so that it is not tried again.
    // FAILED_PRECONDITION (draining a node Arbiter has failed) is final too.
    if (!status.ok() && !absl::IsNotFound(status) && !absl::IsFailedPrecondition(status)) return;
    switch (action.kind) {
      case Action::kCordon:
        n.mark = NodeMark::kCordoned;
        break;
      case Action::kDrain:
        n.mark = NodeMark::kDrained;
        break;
      case Action::kFail:
        n.mark = NodeMark::kFailed;
        break;
      default:
        n.mark = NodeMark::kNone;
        break;
    }
    n.tried_at = absl::InfinitePast();
    return;
  }
  auto found = allocations_.find(action.allocation);
  if (found == allocations_.end()) return;
  AllocationState& a = found->second;
  auto learn = [&a, &outcome] {
    // A notice is never withdrawn: an answer sent before it (a renewal that
    // crossed the watch's event) does not undo it.
    if (!(a.phase == AllocationPhase::kPreempting && outcome.phase == AllocationPhase::kAdmitted)) {
      a.phase = outcome.phase;
      a.deadline = outcome.deadline;
    }
    if (!outcome.ns.empty()) a.ns = outcome.ns;
    if (outcome.holders.has_value()) {
      a.holders = *outcome.holders;
      a.holders_known = true;
    }
  };
  auto pod = [this, &action]() -> PodState* {
    auto it = pods_.find(action.uid);
    return it == pods_.end() ? nullptr : &it->second;
  };
  switch (action.kind) {
    case Action::kLookup:
      a.looked_up_at = now;
      if (status.ok()) learn();
      if (absl::IsNotFound(status)) a.phase = AllocationPhase::kEnded;
      break;
    case Action::kRenew:
      for (PodState* p : PodsOf(action.allocation)) {
        if (p->info.holder() != action.holder) continue;
        // A failed renewal is tried again after retry_after.
        p->renewed_at = status.ok() ? now : now - options_.renew_every + options_.retry_after;
      }
      if (status.ok()) learn();
      // Refused (past a notice's deadline, ended, not claimed): ask again.
      if (absl::IsFailedPrecondition(status)) a.phase = AllocationPhase::kUnknown;
      if (absl::IsNotFound(status)) a.phase = AllocationPhase::kEnded;
      break;
    case Action::kClaim:
      if (status.ok()) learn();
      // Claimed by another meanwhile, or no longer admitted: ask again.
      if (!status.ok()) a.holders_known = false;
      if (absl::IsFailedPrecondition(status)) a.phase = AllocationPhase::kUnknown;
      break;
    case Action::kRelease:
      a.released_at = now;
      // FAILED_PRECONDITION: it had ended already.
      if (status.ok() || absl::IsFailedPrecondition(status) || absl::IsNotFound(status)) {
        a.released = true;
        a.phase = AllocationPhase::kEnded;
      }
      break;
    case Action::kEvict:
      if (PodState* p = pod(); p != nullptr) {
        // Refused (a disruption budget: 429): tried again after retry_after.
        p->evict_tried_at = now;
        if (status.ok() || absl::IsNotFound(status)) p->evicted_at = now;
      }
      break;
    case Action::kDelete:
      if (PodState* p = pod(); p != nullptr) {
        p->deleted_at = now;
        if (absl::IsNotFound(status)) p->gone = true;
      }
      break;
    default:
      break;
  }
}

}  // namespace arbiter::kube
