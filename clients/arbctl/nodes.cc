// arbctl inventory update, cordon, uncordon, drain, fail, remove and
// heartbeat: the node lifecycle (docs/nodes.md).
#include <iostream>
#include <string>

#include "absl/strings/str_join.h"
#include <google/protobuf/util/time_util.h>

#include "clients/arbctl/commands.h"

namespace arbiter::arbctl {

const char* NodeStateWord(v1::NodeState s) {
  switch (s) {
    case v1::NODE_STATE_READY:
      return "ready";
    case v1::NODE_STATE_CORDONED:
      return "cordoned";
    case v1::NODE_STATE_DRAINING:
      return "draining";
    case v1::NODE_STATE_UNREACHABLE:
      return "unreachable";
    case v1::NODE_STATE_FAILED:
      return "failed";
    default:
      return "unknown";
  }
}

namespace {

void PrintNode(const v1::Node& n) {
  std::cout << "node " << n.cluster() << "/" << n.name() << " is " << NodeStateWord(n.state());
  if (n.has_drain_deadline()) {
    std::cout << " (allocations vacate by "
              << google::protobuf::util::TimeUtil::ToString(n.drain_deadline()) << ")";
  }
  std::cout << "\n";
}

}  // namespace

int Commands::UpdateNode(const NodeOptions& n) {
  v1::UpdateNodeRequest req;
  *req.mutable_node() = NodeOf(n);
  v1::UpdateNodeResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::UpdateNode, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "updated; ";
  PrintNode(resp.node());
  return 0;
}

int Commands::CordonNode(const std::string& cluster, const std::string& name, bool cordon) {
  v1::Node node;
  if (cordon) {
    v1::CordonNodeRequest req;
    req.set_cluster(cluster);
    req.set_name(name);
    v1::CordonNodeResponse resp;
    if (!Call(inventory_, &v1::InventoryService::Stub::CordonNode, req, &resp)) return 1;
    if (options_.json) return PrintJsonMessage(resp), 0;
    node = resp.node();
  } else {
    v1::UncordonNodeRequest req;
    req.set_cluster(cluster);
    req.set_name(name);
    v1::UncordonNodeResponse resp;
    if (!Call(inventory_, &v1::InventoryService::Stub::UncordonNode, req, &resp)) return 1;
    if (options_.json) return PrintJsonMessage(resp), 0;
    node = resp.node();
  }
  PrintNode(node);
  return 0;
}

int Commands::DrainNode(const std::string& cluster, const std::string& name,
                        int64_t grace_seconds) {
  v1::DrainNodeRequest req;
  req.set_cluster(cluster);
  req.set_name(name);
  req.set_grace_seconds(grace_seconds);
  v1::DrainNodeResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::DrainNode, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  PrintNode(resp.node());
  if (resp.notified_request_ids_size() == 0) {
    std::cout << "nothing was allocated on it\n";
  } else {
    std::cout << "notice given to request(s) " << absl::StrJoin(resp.notified_request_ids(), ", ")
              << "\n";
  }
  return 0;
}

int Commands::MarkNodeFailed(const std::string& cluster, const std::string& name,
                             const std::string& failed_at) {
  v1::MarkNodeFailedRequest req;
  req.set_cluster(cluster);
  req.set_name(name);
  if (!failed_at.empty()) {
    absl::Time at;
    if (!ParseWhen(failed_at, &at)) {
      std::cerr << "arbctl: --at must be an RFC 3339 time or -<duration> (e.g. -10m)\n";
      return 2;
    }
    *req.mutable_failed_at() =
        google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(at));
  }
  v1::MarkNodeFailedResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::MarkNodeFailed, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  PrintNode(resp.node());
  if (resp.ended_request_ids_size() > 0) {
    std::cout << "ended (NODE_FAILED): request(s) " << absl::StrJoin(resp.ended_request_ids(), ", ")
              << "\n";
  }
  return 0;
}

int Commands::RemoveNode(const std::string& cluster, const std::string& name) {
  v1::RemoveNodeRequest req;
  req.set_cluster(cluster);
  req.set_name(name);
  v1::RemoveNodeResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::RemoveNode, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "removed node " << cluster << "/" << name << "\n";
  return 0;
}

int Commands::NodeHeartbeat(const std::string& cluster, const std::string& name) {
  v1::NodeHeartbeatRequest req;
  req.set_cluster(cluster);
  req.set_name(name);
  v1::NodeHeartbeatResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::NodeHeartbeat, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  PrintNode(resp.node());
  return 0;
}

}  // namespace arbiter::arbctl
