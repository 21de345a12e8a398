// The Kubernetes controller's decisions (arbiter-kube; docs/kubernetes.md):
// what to tell Arbiter and the Kubernetes API, from what the controller has
// seen of pods, nodes and allocations. No I/O: the binary (main.cc) feeds it
// the watches' events, asks it for the actions due (Plan), carries them out
// and reports the outcomes (Done). That is what the unit tests drive.
//
// The rules:
//   - a pod that carries arbiter.dev/allocation holds its member's claim
//     (holder "pod:<namespace>/<name>"), which the validating webhook made;
//     while it is not finished, its lease is renewed every `renew_every`;
//   - a pod admitted unclaimed (a webhook replica that did not lead, or no
//     validating webhook) is claimed for; a pod whose member another holder
//     holds is deleted: its GPUs are promised to that workload;
//   - once every pod seen for an allocation has finished (Succeeded, Failed)
//     or is gone, the allocation is released: for a preempted one this is
//     the enforcer's confirmation;
//   - an allocation turned PREEMPTING: each of its pods is evicted at once
//     (the Eviction API: the pod's termination grace is its checkpoint
//     signal, a PodDisruptionBudget may delay it), and deleted with no grace
//     at the notice's deadline if it still exists;
//   - an allocation that ended in Arbiter (lease expired, node failed): its
//     pods are deleted, since their GPUs may already be someone else's;
//   - a node cordoned in Kubernetes is drained in Arbiter (cordoned only
//     when `drain_grace` is zero), and uncordoned when it is schedulable
//     again; a node NotReady for `not_ready_after` is marked failed, and
//     uncordoned once Ready. A node's state in Arbiter that the controller
//     did not set (an admin's cordon) is left alone.
//
// Thread-compatible: the binary serialises calls with one mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include <nlohmann/json.hpp>

namespace arbiter::kube {

inline constexpr char kAllocationAnnotation[] = "arbiter.dev/allocation";
inline constexpr char kMemberAnnotation[] = "arbiter.dev/member";

// What the controller keeps of a pod that carries kAllocationAnnotation.
struct PodInfo {
  std::string uid;
  std::string ns;
  std::string name;
  std::string node;
  int64_t allocation = 0;
  int32_t member = 0;
  bool finished = false;  // Phase Succeeded or Failed.
  // Asks for GPUs (an nvidia.com/ resource or a resource claim): a pod that
  // does not is no workload of its allocation, whatever it is annotated.
  bool asks_for_gpus = false;
  bool deleting = false;  // deletionTimestamp set.

  // "pod:<namespace>/<name>", as the webhook claimed.
  std::string holder() const;
};

// A v1 Pod's fields the controller reads; nullopt for a pod without
// kAllocationAnnotation (not Arbiter's). INVALID_ARGUMENT (naming the field)
// for a malformed pod or annotation.
absl::StatusOr<std::optional<PodInfo>> ReadPod(const nlohmann::json& pod);

struct NodeInfo {
  std::string name;
  bool unschedulable = false;
  bool ready = true;
  // When the Ready condition last changed (lastTransitionTime).
  absl::Time ready_since = absl::InfinitePast();
};

// A team's namespace: its name with '_' as '-' (as the webhook requires).
std::string TeamNamespace(const std::string& team);

// A v1 Node's fields the controller reads. INVALID_ARGUMENT for a node
// without metadata.name.
absl::StatusOr<NodeInfo> ReadNode(const nlohmann::json& node);

// An allocation's state as Arbiter last told it.
enum class AllocationPhase { kUnknown, kAdmitted, kPreempting, kEnded };

struct Action {
  enum Kind {
    kClaim,     // ClaimAllocation(allocation, holder, {member})
    kRenew,     // RenewLease(allocation, holder)
    kRelease,   // ReleaseAllocation(allocation)
    kLookup,    // GetRequest(allocation): the phase of a new allocation
    kEvict,     // POST pods/<name>/eviction
    kDelete,    // DELETE the pod (grace 0)
    kCordon,    // CordonNode(node)
    kDrain,     // DrainNode(node, drain_grace)
    kFail,      // MarkNodeFailed(node, at)
    kUncordon,  // UncordonNode(node)
  };
  Kind kind;
  int64_t allocation = 0;
  std::string holder;  // kClaim, kRenew.
  std::string ns;      // kEvict, kDelete.
  std::string name;    // kEvict, kDelete: the pod; node actions: the node.
  std::string uid;     // kDelete: the pod's uid (a precondition).
  absl::Time at;       // kFail: since when.
  int32_t member = 0;  // kClaim.

  std::string Describe() const;
};

// What carrying out an action found.
struct Outcome {
  absl::Status status;
  // kClaim, kRenew, kRelease, kLookup: the allocation's phase after the
  // call, and its notice's deadline when kPreempting.
  AllocationPhase phase = AllocationPhase::kUnknown;
  absl::Time deadline = absl::InfiniteFuture();
  // kClaim, kRenew, kLookup: the namespace of the allocation's team.
  std::string ns;
  // kClaim, kRenew, kLookup: the holder of each claimed member (nullopt:
  // not told).
  std::optional<std::map<int32_t, std::string>> holders;
};

struct ControllerOptions {
  absl::Duration renew_every = absl::Seconds(20);
  absl::Duration drain_grace = absl::Seconds(300);  // Zero: cordon only.
  absl::Duration not_ready_after = absl::Seconds(120);
  // A failed call is retried after this long.
  absl::Duration retry_after = absl::Seconds(5);
};

class Controller {
 public:
  explicit Controller(ControllerOptions options) : options_(options) {}

  // Pods: the full set after a (re)list, or one watch event.
  void ResetPods(const std::vector<PodInfo>& pods, absl::Time now);
  void PodChanged(const PodInfo& pod, absl::Time now);
  void PodGone(const std::string& uid, absl::Time now);

  // Nodes likewise.
  void ResetNodes(const std::vector<NodeInfo>& nodes);
  void NodeChanged(const NodeInfo& node);
  void NodeGone(const std::string& name);

  // Arbiter said so (a watch event): the phase, a notice's deadline, and
  // the namespace of the allocation's team.
  void AllocationChanged(int64_t allocation, AllocationPhase phase, absl::Time deadline,
                         const std::string& ns);

  // The actions due at `now`, each marked in flight until Done.
  std::vector<Action> Plan(absl::Time now);
  void Done(const Action& action, const Outcome& outcome, absl::Time now);

  // For tests and logs.
  AllocationPhase PhaseOf(int64_t allocation) const;
  size_t pods() const { return pods_.size(); }

 private:
  struct PodState {
    PodInfo info;
    absl::Time renewed_at = absl::InfinitePast();
    absl::Time evicted_at = absl::InfinitePast();
    absl::Time evict_tried_at = absl::InfinitePast();
    absl::Time deleted_at = absl::InfinitePast();
    bool gone = false;  // Deleted in Kubernetes: kept until its allocation is released.
  };
  struct AllocationState {
    AllocationPhase phase = AllocationPhase::kUnknown;
    absl::Time deadline = absl::InfiniteFuture();
    // Its team's namespace: only pods there are its workloads.
    std::string ns;
    absl::Time looked_up_at = absl::InfinitePast();
    absl::Time released_at = absl::InfinitePast();
    bool released = false;
    // Who holds each member, as Arbiter last said (known after a lookup,
    // renewal or claim).
    std::map<int32_t, std::string> holders;
    bool holders_known = false;
    // Whether a pod seen holds one of its members: only then do the pods'
    // ends release it (not when the holder is another kind of workload).
    bool held_by_pod = false;
  };
  // Arbiter's state of a node as the controller set it.
  enum class NodeMark { kNone, kCordoned, kDrained, kFailed };
  struct NodeState {
    NodeInfo info;
    NodeMark mark = NodeMark::kNone;
    absl::Time tried_at = absl::InfinitePast();
  };

  void PlanAllocation(int64_t id, AllocationState& a, absl::Time now, std::vector<Action>& out);
  // The pods that name `allocation`.
  std::vector<PodState*> PodsOf(int64_t allocation);
  void PlanNode(NodeState& n, absl::Time now, std::vector<Action>& out);
  void Forget(int64_t allocation);
  bool Due(absl::Time last, absl::Duration every, absl::Time now) const {
    return last == absl::InfinitePast() || now - last >= every;
  }

  const ControllerOptions options_;
  std::map<std::string, PodState> pods_;  // By uid.
  // The uids of pods_ by the allocation they name: each allocation's pods
  // without a scan of every pod (Plan runs twice a second).
  std::map<int64_t, std::set<std::string>> pods_by_allocation_;
  std::map<int64_t, AllocationState> allocations_;
  std::map<std::string, NodeState> nodes_;
  std::set<std::string> in_flight_;  // Action keys.
};

}  // namespace arbiter::kube
