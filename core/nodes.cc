// Node lifecycle: update, cordon, drain, failure, removal and heartbeats
// (docs/nodes.md). Declared in core/arbitration.h.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "core/arbitration.h"
#include "core/arbitration_internal.h"
#include "core/mig.h"
#include "core/status_macros.h"
#include "core/validate.h"

namespace arbiter::core {
namespace {

// The longest notice a drain may give.
constexpr int64_t kMaxDrainGraceSeconds = 7 * 24 * 3600;

absl::StatusOr<const Node*> FindLiveNode(const State& state, const NodeRef& ref) {
  ARBITER_RETURN_IF_ERROR(ValidateName("cluster", ref.cluster));
  ARBITER_RETURN_IF_ERROR(ValidateName("name", ref.name, kMaxNodeNameLength));
  const Node* node = state.FindNode(ref.cluster, ref.name);
  if (node == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("name: no node '", ref.name, "' in cluster '", ref.cluster, "'"));
  }
  return node;
}

bool OnNode(const CapacityRequest& r, int64_t node_id) {
  return std::any_of(r.placements.begin(), r.placements.end(),
                     [node_id](const Placement& p) { return p.node_id == node_id; });
}

// Live requests holding capacity on `node_id`, by id.
std::vector<int64_t> HoldersOf(const State& state, int64_t node_id) {
  std::vector<int64_t> ids;
  for (const auto& [id, r] : state.live_requests()) {
    if (HoldsCapacity(r.state) && OnNode(r, node_id)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Records `node`'s new lifecycle in the state and as a change.
Node Record(State& state, const Node& node, NodeEvent event, ChangeSet& changes) {
  state.SetNodeLifecycle(node);
  // A timed node that is (again) healthy must be checked in time.
  if (node.health == NodeHealth::kHealthy && node.last_heartbeat != absl::InfinitePast()) {
    state.set_heartbeat_check_at(
        std::min(state.heartbeat_check_at(), node.last_heartbeat + state.node_heartbeat_timeout()));
  }
  const Node& stored = *state.FindNode(node.id);
  changes.changes.emplace_back(NodeWrite{stored, event});
  return stored;
}

// FAILED_PRECONDITION unless `facts` keeps what a node in use cannot change.
absl::Status CheckUpdatable(const State& state, const Node& now, const Node& facts) {
  if (facts.pool != now.pool) {
    return absl::FailedPreconditionError(
        absl::StrCat("node.pool: node ", now.cluster, "/", now.name, " is in pool ", now.pool,
                     "; a node changes pool only by being removed and registered again"));
  }
  if (facts.gpus.size() != now.gpus.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node.gpus: node ", now.cluster, "/", now.name, " has ", now.gpus.size(),
                     " GPUs; a node changes its GPUs only by being removed and registered again"));
  }
  for (size_t i = 0; i < facts.gpus.size(); ++i) {
    if (facts.gpus[i].model != now.gpus[i].model) {
      return absl::FailedPreconditionError(
          absl::StrCat("node.gpus[", i, "].model: GPU ", i, " is a ", now.gpus[i].model,
                       "; a node changes its GPUs only by being removed and registered again"));
    }
    const std::string& uuid = facts.gpus[i].uuid;
    if (const auto* holder = state.FindGpuByUuid(uuid);
        holder != nullptr && (holder->first != now.id || holder->second != static_cast<int>(i))) {
      return absl::AlreadyExistsError(absl::StrCat("node.gpus[", i, "].uuid: '", uuid,
                                                   "' is registered on node ", holder->first,
                                                   " as GPU ", holder->second));
    }
    const GpuModel& model = *state.FindGpuModel(now.gpus[i].model);
    const std::string field = absl::StrCat("node.gpus[", i, "].reported_mig_placements");
    std::vector<MigProfile> offered = model.mig_profiles;
    if (!facts.gpus[i].reported_mig.empty()) {
      ARBITER_ASSIGN_OR_RETURN(
          offered, ApplyReportedPlacements(model.mig_profiles, facts.gpus[i].reported_mig, field));
    }
    if (!now.gpus[i].mig_layout.empty() &&
        !ValidateMigLayout(offered, now.gpus[i].mig_layout).ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          field, ": GPU ", i, "'s MIG layout in use does not fit the reported placements"));
    }
  }
  if (facts.cpu_milli < now.allocated_cpu_milli) {
    return absl::FailedPreconditionError(absl::StrCat("node.cpu_milli: ", now.allocated_cpu_milli,
                                                      " milli-CPU are allocated on the node"));
  }
  if (facts.memory_mib < now.allocated_memory_mib) {
    return absl::FailedPreconditionError(absl::StrCat("node.memory_mib: ", now.allocated_memory_mib,
                                                      " MiB are allocated on the node"));
  }
  return absl::OkStatus();
}

// Whether `facts` changes nothing UpdateNode would change on `node`.
bool SameFacts(const Node& node, const Node& facts) {
  if (node.topology_domain != facts.topology_domain || node.cpu_milli != facts.cpu_milli ||
      node.memory_mib != facts.memory_mib) {
    return false;
  }
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    if (node.gpus[i].uuid != facts.gpus[i].uuid ||
        node.gpus[i].reported_mig != facts.gpus[i].reported_mig) {
      return false;
    }
  }
  return true;
}

// Ends live request `id`, which holds capacity on a failed node: released
// with NODE_FAILED, charged up to `failed_at` (never before admission).
// The whole gang ends, its members on other nodes too.
void EndOnFailedNode(State& state, int64_t id, const Node& node, absl::Time failed_at,
                     ChangeSet& changes) {
  CapacityRequest request = *state.FindLiveRequest(id);
  const absl::Time end = std::max(failed_at, request.admitted_at);
  for (const Placement& p : request.placements) state.ApplyPlacement(p, -1);
  SettleCost(state, request, end);
  SetOutcome(request, RequestState::kReleased, kReasonNodeFailed,
             absl::StrCat("node ", node.cluster, "/", node.name, " failed at ",
                          absl::FormatTime(failed_at, absl::UTCTimeZone())));
  request.preempt_deadline = absl::InfinitePast();
  request.preempted_by = 0;
  request.updated_at = end;
  state.PutRequest(request);
  changes.changes.emplace_back(RequestWrite{std::move(request), /*is_new=*/false});
}

}  // namespace

absl::StatusOr<Node> UpdateNode(State& state, const Node& facts, absl::Time now,
                                ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateNode(facts));
  ARBITER_ASSIGN_OR_RETURN(const Node* node,
                           FindLiveNode(state, NodeRef{facts.cluster, facts.name}));
  ARBITER_RETURN_IF_ERROR(CheckUpdatable(state, *node, facts));
  if (SameFacts(*node, facts)) return *node;  // An agent's refresh: nothing to record.
  Node updated = facts;
  updated.id = node->id;
  state.UpdateNodeFacts(updated);
  changes.changes.emplace_back(NodeWrite{*state.FindNode(node->id), NodeEvent::kUpdate});
  AdmitQueued(state, facts.pool, now, changes);
  return *state.FindNode(updated.id);
}

absl::StatusOr<Node> CordonNode(State& state, const NodeRef& ref, bool cordon, absl::Time now,
                                ChangeSet& changes) {
  ARBITER_ASSIGN_OR_RETURN(const Node* found, FindLiveNode(state, ref));
  Node node = *found;
  if (cordon) {
    if (node.cordoned) return node;
    node.cordoned = true;
    return Record(state, node, NodeEvent::kCordon, changes);
  }
  if (!node.cordoned && node.health != NodeHealth::kFailed && !node.draining()) return node;
  node.cordoned = false;
  node.drain_deadline = absl::InfinitePast();
  if (node.health == NodeHealth::kFailed) {
    node.health = NodeHealth::kHealthy;
    node.failed_at = absl::InfinitePast();
  }
  Node out = Record(state, node, NodeEvent::kUncordon, changes);
  AdmitQueued(state, node.pool, now, changes);
  return *state.FindNode(out.id);
}

absl::StatusOr<DrainOutcome> DrainNode(State& state, const NodeRef& ref, int64_t grace_seconds,
                                       absl::Time now, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateRange("grace_seconds", grace_seconds, 0, kMaxDrainGraceSeconds));
  ARBITER_ASSIGN_OR_RETURN(const Node* found, FindLiveNode(state, ref));
  Node node = *found;
  if (node.health == NodeHealth::kFailed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "name: node ", ref.cluster, "/", ref.name, " has failed; its allocations already ended"));
  }
  const int64_t grace =
      grace_seconds > 0 ? grace_seconds : state.FindPool(node.pool)->reclaim_grace_seconds;
  const absl::Time deadline = now + absl::Seconds(grace);
  DrainOutcome out;
  for (int64_t id : HoldersOf(state, node.id)) {
    CapacityRequest r = *state.FindLiveRequest(id);
    if (r.state == RequestState::kPreempting && r.preempt_deadline <= deadline) continue;
    r.state = RequestState::kPreempting;
    r.preempt_deadline = deadline;
    r.preempted_by = 0;
    r.reason_code = kReasonNodeDrain;
    r.reason = absl::StrCat("node ", node.cluster, "/", node.name, " is draining; vacate within ",
                            grace, " s");
    r.updated_at = now;
    state.PutRequest(r);
    changes.changes.emplace_back(RequestWrite{r, /*is_new=*/false});
    out.notified.push_back(id);
  }
  node.cordoned = true;
  node.drain_deadline = node.draining() ? std::min(node.drain_deadline, deadline) : deadline;
  out.node = Record(state, node, NodeEvent::kDrain, changes);
  return out;
}

absl::StatusOr<FailOutcome> FailNode(State& state, const NodeRef& ref, absl::Time failed_at,
                                     absl::Time now, ChangeSet& changes) {
  ARBITER_ASSIGN_OR_RETURN(const Node* found, FindLiveNode(state, ref));
  if (failed_at == absl::InfinitePast()) failed_at = now;
  if (failed_at > now) {
    return absl::InvalidArgumentError(absl::StrCat(
        "failed_at: ", absl::FormatTime(failed_at, absl::UTCTimeZone()), " is in the future"));
  }
  Node node = *found;
  if (node.health == NodeHealth::kFailed) return FailOutcome{node, {}};
  FailOutcome out;
  std::set<std::string> pools = {node.pool};
  for (int64_t id : HoldersOf(state, node.id)) {
    pools.insert(state.FindLiveRequest(id)->spec.pool);
    EndOnFailedNode(state, id, node, failed_at, changes);
    out.ended.push_back(id);
  }
  node = *state.FindNode(node.id);
  node.health = NodeHealth::kFailed;
  node.failed_at = failed_at;
  out.node = Record(state, node, NodeEvent::kFail, changes);
  for (const std::string& pool : pools) AdmitQueued(state, pool, now, changes);
  return out;
}

absl::Status RemoveNode(State& state, const NodeRef& ref, ChangeSet& changes) {
  ARBITER_ASSIGN_OR_RETURN(const Node* found, FindLiveNode(state, ref));
  const std::vector<int64_t> holders = HoldersOf(state, found->id);
  if (!holders.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "name: node ", ref.cluster, "/", ref.name, " holds request(s) ",
        absl::StrJoin(holders, ", "), "; drain it or release them before removing it"));
  }
  Node node = *found;
  node.removed = true;
  state.RemoveNode(node.id);
  changes.changes.emplace_back(NodeWrite{node, NodeEvent::kRemove});
  return absl::OkStatus();
}

absl::StatusOr<Node> NodeHeartbeat(State& state, const NodeRef& ref, absl::Time now,
                                   ChangeSet& changes) {
  ARBITER_ASSIGN_OR_RETURN(const Node* found, FindLiveNode(state, ref));
  Node node = *found;
  const bool first = node.last_heartbeat == absl::InfinitePast();
  const bool back = node.health == NodeHealth::kUnreachable;
  node.last_heartbeat = now;
  if (back) node.health = NodeHealth::kHealthy;
  if (!first && !back) {
    state.SetNodeLifecycle(node);  // Not a decision: nothing is written.
    return *state.FindNode(node.id);
  }
  Node out = Record(state, node, NodeEvent::kReachable, changes);
  if (back) AdmitQueued(state, node.pool, now, changes);
  return *state.FindNode(out.id);
}

void MarkUnreachable(State& state, absl::Time now, ChangeSet& changes) {
  const absl::Duration timeout = state.node_heartbeat_timeout();
  state.set_heartbeat_check_at(absl::InfiniteFuture());
  if (timeout <= absl::ZeroDuration()) return;
  std::vector<Node> lost;
  absl::Time next = absl::InfiniteFuture();
  for (const Node& n : state.nodes()) {
    if (n.removed || n.health != NodeHealth::kHealthy) continue;
    if (n.last_heartbeat == absl::InfinitePast()) continue;
    if (now - n.last_heartbeat <= timeout) {
      next = std::min(next, n.last_heartbeat + timeout);
      continue;
    }
    lost.push_back(n);
  }
  state.set_heartbeat_check_at(next);
  for (Node& n : lost) {
    n.health = NodeHealth::kUnreachable;
    Record(state, n, NodeEvent::kUnreachable, changes);
  }
}

void GraceHeartbeats(State& state, absl::Time now) {
  std::vector<Node> timed;
  for (const Node& n : state.nodes()) {
    if (!n.removed && n.last_heartbeat != absl::InfinitePast()) timed.push_back(n);
  }
  for (Node& n : timed) {
    n.last_heartbeat = std::max(n.last_heartbeat, now);
    state.SetNodeLifecycle(n);
  }
  if (!timed.empty()) state.set_heartbeat_check_at(now + state.node_heartbeat_timeout());
}

}  // namespace arbiter::core
