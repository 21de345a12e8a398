// arbiter-kube: the Kubernetes controller that makes Arbiter's decisions hold
// in a cluster (docs/kubernetes.md). It watches the cluster's pods and nodes
// through the Kubernetes API and the cluster's allocation notices through
// arbiterd (WatchAllocations), and, as clients/kube/controller.h states:
// renews the leases of running pods, releases an allocation when its pods
// end, evicts the pods of a preempted allocation and deletes them at the
// notice's deadline, and maps node cordons and NotReady to Arbiter's drain
// and failure. With --dra it expresses each admitted member as a
// ResourceClaim allocated to the devices Arbiter chose (clients/kube/dra.h).
// With --kueue-every it keeps Kueue's ClusterQueues, Cohorts,
// ResourceFlavors and LocalQueues equal to Arbiter's quotas by server-side
// apply. Several replicas elect one leader through a coordination.k8s.io
// Lease (--lease-name); only the leader acts, the others keep their caches.
#include <atomic>
#include <csignal>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include <CLI/CLI.hpp>
#include <curl/curl.h>
#include <unistd.h>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"
#include "clients/common/channel.h"
#include "clients/common/watch.h"
#include "clients/kube/controller.h"
#include "clients/kube/dra_binder.h"
#include "clients/kube/informer.h"
#include "clients/kube/kube_api.h"
#include "clients/kube/kueue_objects.h"
#include "clients/kube/lease.h"

namespace {

namespace v1 = ::arbiter::v1;
namespace kube = ::arbiter::kube;
namespace clients = ::arbiter::clients;
using nlohmann::json;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

struct Options {
  std::string endpoint = "127.0.0.1:50051";
  std::string ca_file, cert_file, key_file;
  std::string cluster;
  std::string kube_api, kube_token_file, kube_ca;
  std::string renew_every = "20s", drain_grace = "300s", not_ready_after = "120s";
  std::string kueue_every = "0s", kueue_queue_name = "gpu";
  std::string lease_namespace = "arbiter-system", lease_name, identity;
  std::string lease_duration = "15s";
  bool dra = false;
};

void Log(const std::string& line) {
  std::cerr << absl::FormatTime("%Y-%m-%dT%H:%M:%SZ ", absl::Now(), absl::UTCTimeZone())
            << "arbiter-kube: " << line << "\n";
}

using ::arbiter::clients::Context;
using ::arbiter::clients::StatusOf;

kube::AllocationPhase PhaseOf(const v1::CapacityRequest& r, absl::Time* deadline) {
  *deadline = absl::InfiniteFuture();
  switch (r.state()) {
    case v1::REQUEST_STATE_ADMITTED:
      return kube::AllocationPhase::kAdmitted;
    case v1::REQUEST_STATE_PREEMPTING:
      *deadline = absl::FromUnixSeconds(r.preempt_deadline().seconds()) +
                  absl::Nanoseconds(r.preempt_deadline().nanos());
      return kube::AllocationPhase::kPreempting;
    case v1::REQUEST_STATE_RELEASED:
    case v1::REQUEST_STATE_PREEMPTED:
    case v1::REQUEST_STATE_CANCELLED:
    case v1::REQUEST_STATE_DENIED:
      return kube::AllocationPhase::kEnded;
    default:
      return kube::AllocationPhase::kUnknown;  // Not admitted yet: asked again later.
  }
}

// What an answer says of the allocation: its phase, deadline and holders.
void Learn(const v1::CapacityRequest& r, kube::Outcome& out) {
  out.phase = PhaseOf(r, &out.deadline);
  out.ns = kube::TeamNamespace(r.team());
  std::map<int32_t, std::string> holders;
  for (const v1::Claim& c : r.claims()) holders[c.member()] = c.holder();
  out.holders = std::move(holders);
}

// The calls an action makes, on arbiterd or the Kubernetes API.
class Actor {
 public:
  Actor(clients::LeaderChannel& leader, const kube::KubeApi& api, const Options& o,
        absl::Duration drain_grace)
      : leader_(leader), api_(api), options_(o), drain_grace_(drain_grace) {}

  kube::Outcome Do(const kube::Action& a) {
    kube::Outcome out;
    switch (a.kind) {
      case kube::Action::kClaim: {
        v1::ClaimAllocationRequest req;
        req.set_id(a.allocation);
        req.set_holder(a.holder);
        req.add_members(a.member);
        v1::ClaimAllocationResponse resp;
        out.status = Seen(Alloc()->ClaimAllocation(Context().get(), req, &resp));
        if (out.status.ok()) Learn(resp.request(), out);
        break;
      }
      case kube::Action::kRenew: {
        v1::RenewLeaseRequest req;
        req.set_id(a.allocation);
        req.set_holder(a.holder);
        v1::RenewLeaseResponse resp;
        out.status = Seen(Alloc()->RenewLease(Context().get(), req, &resp));
        if (out.status.ok()) Learn(resp.request(), out);
        break;
      }
      case kube::Action::kLookup: {
        v1::GetRequestRequest req;
        req.set_id(a.allocation);
        v1::GetRequestResponse resp;
        out.status = Seen(Alloc()->GetRequest(Context().get(), req, &resp));
        if (out.status.ok()) Learn(resp.request(), out);
        break;
      }
      case kube::Action::kRelease: {
        v1::ReleaseAllocationRequest req;
        req.set_id(a.allocation);
        v1::ReleaseAllocationResponse resp;
        out.status = Seen(Alloc()->ReleaseAllocation(Context().get(), req, &resp));
        break;
      }
      case kube::Action::kEvict: {
        const json eviction = {{"apiVersion", "policy/v1"},
                               {"kind", "Eviction"},
                               {"metadata", {{"name", a.name}, {"namespace", a.ns}}},
                               {"deleteOptions", {{"preconditions", {{"uid", a.uid}}}}}};
        out.status =
            Kube("POST", absl::StrCat("/api/v1/namespaces/", a.ns, "/pods/", a.name, "/eviction"),
                 eviction.dump());
        break;
      }
      case kube::Action::kDelete: {
        const json options = {{"apiVersion", "v1"},
                              {"kind", "DeleteOptions"},
                              {"gracePeriodSeconds", 0},
                              {"preconditions", {{"uid", a.uid}}}};
        out.status = Kube("DELETE", absl::StrCat("/api/v1/namespaces/", a.ns, "/pods/", a.name),
                          options.dump());
        break;
      }
      default:
        out.status = Node(a);
        break;
    }
    return out;
  }

  // Forgets what was applied: the next reconcile applies everything again.
  void Forget() { last_kueue_.clear(); }

  // Server-side apply of Kueue's objects when Arbiter's governance changed
  // (and once after gaining the lead). Objects of removed teams or quotas
  // are not deleted.
  void ReconcileKueue() {
    auto governance = v1::GovernanceService::NewStub(leader_.Get());
    kube::KueueInputs in;
    absl::Status s = Seen(governance->ListTeams(Context().get(), {}, &in.teams));
    if (s.ok()) s = Seen(governance->ListQuotas(Context().get(), {}, &in.quotas));
    if (s.ok()) s = Seen(Inv()->ListGpuModels(Context().get(), {}, &in.models));
    if (s.ok()) s = Seen(Inv()->ListNodes(Context().get(), {}, &in.nodes));
    if (!s.ok()) {
      Log(absl::StrCat("kueue: reading Arbiter's governance: ", s.message()));
      return;
    }
    absl::StatusOr<std::vector<json>> objects = kube::KueueObjects(in, options_.kueue_queue_name);
    if (!objects.ok()) {
      Log(absl::StrCat("kueue: ", objects.status().message()));
      return;
    }
    const std::string text = json(*objects).dump();
    if (text == last_kueue_) return;  // Nothing changed since the last apply.
    bool all = true;
    for (const json& o : *objects) {
      const std::string kind = o.value("kind", "");
      const json& meta = o["metadata"];
      const std::string resource = kind == "ClusterQueue"     ? "clusterqueues"
                                   : kind == "Cohort"         ? "cohorts"
                                   : kind == "ResourceFlavor" ? "resourceflavors"
                                                              : "localqueues";
      const std::string path =
          resource == "localqueues"
              ? absl::StrCat("/apis/kueue.x-k8s.io/v1beta2/namespaces/",
                             meta.value("namespace", ""), "/localqueues/", meta.value("name", ""))
              : absl::StrCat("/apis/kueue.x-k8s.io/v1beta2/", resource, "/",
                             meta.value("name", ""));
      absl::Status applied = Kube("PATCH", path + "?fieldManager=arbiter&force=true", o.dump(),
                                  "application/apply-patch+yaml");
      if (!applied.ok()) {
        Log(absl::StrCat("kueue: apply ", kind, " ", meta.value("name", ""), ": ",
                         applied.message()));
        all = false;
      }
    }
    if (all) {
      last_kueue_ = text;
      Log(absl::StrCat("kueue: applied ", objects->size(), " objects"));
    }
  }

 private:
  // OK for 2xx; NOT_FOUND for 404; RESOURCE_EXHAUSTED for 429 (a disruption
  // budget); FAILED_PRECONDITION for 409; UNAVAILABLE otherwise.
  absl::Status Kube(const std::string& method, const std::string& path, const std::string& body,
                    const std::string& content_type = "application/json") {
    absl::StatusOr<kube::KubeReply> reply = api_.Call(method, path, body, content_type);
    if (!reply.ok()) return reply.status();
    const std::string what =
        absl::StrCat(method, " ", path, ": HTTP ", reply->code, ": ", reply->body.substr(0, 300));
    if (reply->code >= 200 && reply->code < 300) return absl::OkStatus();
    if (reply->code == 404) return absl::NotFoundError(what);
    if (reply->code == 429) return absl::ResourceExhaustedError(what);
    if (reply->code == 409) return absl::FailedPreconditionError(what);
    return absl::UnavailableError(what);
  }

  absl::Status Node(const kube::Action& a) {
    grpc::Status s;
    switch (a.kind) {
      case kube::Action::kCordon: {
        v1::CordonNodeRequest req;
        req.set_cluster(options_.cluster);
        req.set_name(a.name);
        v1::CordonNodeResponse resp;
        s = Inv()->CordonNode(Context().get(), req, &resp);
        break;
      }
      case kube::Action::kUncordon: {
        v1::UncordonNodeRequest req;
        req.set_cluster(options_.cluster);
        req.set_name(a.name);
        v1::UncordonNodeResponse resp;
        s = Inv()->UncordonNode(Context().get(), req, &resp);
        break;
      }
      case kube::Action::kDrain: {
        v1::DrainNodeRequest req;
        req.set_cluster(options_.cluster);
        req.set_name(a.name);
        req.set_grace_seconds(absl::ToInt64Seconds(drain_grace_));
        v1::DrainNodeResponse resp;
        s = Inv()->DrainNode(Context().get(), req, &resp);
        break;
      }
      case kube::Action::kFail: {
        v1::MarkNodeFailedRequest req;
        req.set_cluster(options_.cluster);
        req.set_name(a.name);
        req.mutable_failed_at()->set_seconds(absl::ToUnixSeconds(a.at));
        v1::MarkNodeFailedResponse resp;
        s = Inv()->MarkNodeFailed(Context().get(), req, &resp);
        break;
      }
      default:
        break;
    }
    return Seen(s);
  }

  // Stubs on the leader's channel as now known; a refusal by a follower
  // that names the leader moves the channel there (Seen).
  std::unique_ptr<v1::AllocationService::Stub> Alloc() {
    return v1::AllocationService::NewStub(leader_.Get());
  }
  std::unique_ptr<v1::InventoryService::Stub> Inv() {
    return v1::InventoryService::NewStub(leader_.Get());
  }
  absl::Status Seen(const grpc::Status& s) {
    if (leader_.Follow(s)) Log("following arbiterd's leader at " + leader_.address());
    return StatusOf(s);
  }

  clients::LeaderChannel& leader_;
  const kube::KubeApi& api_;
  const Options& options_;
  const absl::Duration drain_grace_;
  std::string last_kueue_;
};

// The live allocations (ADMITTED and PREEMPTING), for the DRA binder's
// start: the requests and the revision to watch from. False on failure.
bool ListLive(clients::LeaderChannel& leader, std::vector<v1::CapacityRequest>& out,
              int64_t& revision) {
  auto stub = v1::AllocationService::NewStub(leader.Get());
  revision = 0;
  for (v1::RequestState state : {v1::REQUEST_STATE_ADMITTED, v1::REQUEST_STATE_PREEMPTING}) {
    std::string token;
    do {
      v1::ListRequestsRequest req;
      req.set_state(state);
      req.set_page_size(500);
      req.set_page_token(token);
      v1::ListRequestsResponse resp;
      const grpc::Status s = stub->ListRequests(Context().get(), req, &resp);
      if (!s.ok()) {
        leader.Follow(s);
        Log(absl::StrCat("listing allocations: ", s.error_message()));
        return false;
      }
      for (const v1::CapacityRequest& r : resp.requests()) out.push_back(r);
      // Watch from the older of the lists' revisions: a replayed event is
      // applied twice to no harm.
      if (revision == 0 || resp.revision() < revision) revision = resp.revision();
      token = resp.next_page_token();
    } while (!token.empty());
  }
  return true;
}

// Follows the cluster's preemption notices and endings on arbiterd, so that
// evictions start at the notice rather than at the next renewal; with a DRA
// binder, also its admissions (listed first, then watched from the list's
// revision).
void WatchArbiter(clients::LeaderChannel& leader, const std::string& cluster, std::mutex& mu,
                  kube::Controller& controller, kube::DraBinder* dra) {
  v1::WatchAllocationsRequest req;
  req.set_cluster(cluster);
  req.add_types(v1::ALLOCATION_EVENT_TYPE_PREEMPTING);
  req.add_types(v1::ALLOCATION_EVENT_TYPE_RELEASED);
  req.add_types(v1::ALLOCATION_EVENT_TYPE_PREEMPTED);
  if (dra != nullptr) req.add_types(v1::ALLOCATION_EVENT_TYPE_ADMITTED);
  clients::WatchCallbacks callbacks;
  callbacks.before_open = [&](int64_t& revision) {
    if (dra == nullptr || revision != 0) return true;
    std::vector<v1::CapacityRequest> live;
    if (!ListLive(leader, live, revision)) return false;
    dra->Reset(live);
    return true;
  };
  callbacks.on_event = [&](const v1::WatchAllocationsResponse& event) {
    absl::Time deadline;
    const kube::AllocationPhase phase = PhaseOf(event.request(), &deadline);
    if (dra != nullptr && phase == kube::AllocationPhase::kAdmitted) dra->Admitted(event.request());
    if (dra != nullptr && phase == kube::AllocationPhase::kEnded) dra->Ended(event.request().id());
    std::lock_guard<std::mutex> lock(mu);
    controller.AllocationChanged(event.request().id(), phase, deadline,
                                 kube::TeamNamespace(event.request().team()));
  };
  callbacks.log = Log;
  clients::FollowAllocations(leader, req, g_stop, callbacks);
}

bool ParseFlagDuration(const std::string& flag, const std::string& text, absl::Duration* out) {
  if (!absl::ParseDuration(text, out) || *out < absl::ZeroDuration() || *out > absl::Hours(24)) {
    std::cerr << "arbiter-kube: --" << flag << " must be a duration in 0s..24h, got " << text
              << "\n";
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "arbiter-kube: the Kubernetes controller that binds, releases and evicts Arbiter's "
      "allocations\n"
      "  arbiter-kube --endpoint arbiter:7443 --tls-ca ca.pem --tls-cert kube.pem \\\n"
      "      --tls-key kube.key --cluster east"};
  app.add_option("--endpoint", o.endpoint, "arbiterd host:port")->capture_default_str();
  app.add_option("--tls-ca", o.ca_file, "CA that signed arbiterd's certificate (PEM)");
  app.add_option("--tls-cert", o.cert_file, "this controller's certificate (PEM), agent role");
  app.add_option("--tls-key", o.key_file, "this controller's private key (PEM)");
  app.add_option("--cluster", o.cluster, "the Arbiter cluster this Kubernetes cluster is")
      ->required();
  app.add_option("--kube-api", o.kube_api,
                 "the API server's URL; default: in-cluster (KUBERNETES_SERVICE_HOST)");
  app.add_option("--kube-token-file", o.kube_token_file, "bearer token file (with --kube-api)");
  app.add_option("--kube-ca", o.kube_ca, "the API server's CA (PEM, with --kube-api)");
  app.add_option("--renew-every", o.renew_every, "renew each running pod's lease this often")
      ->capture_default_str();
  app.add_option("--drain-grace", o.drain_grace,
                 "a cordoned node is drained with this notice; 0s: cordoned only")
      ->capture_default_str();
  app.add_option("--not-ready-after", o.not_ready_after,
                 "a node NotReady this long is marked failed")
      ->capture_default_str();
  app.add_option("--kueue-every", o.kueue_every,
                 "reconcile Kueue's objects with Arbiter's quotas this often; 0s: off")
      ->capture_default_str();
  app.add_option("--kueue-queue-name", o.kueue_queue_name, "each team's LocalQueue's name")
      ->capture_default_str();
  app.add_option("--lease-namespace", o.lease_namespace, "the leader election Lease's namespace")
      ->capture_default_str();
  app.add_option("--lease-name", o.lease_name,
                 "the Lease's name; empty: no election (one replica)");
  app.add_option("--identity", o.identity, "this replica's name in the Lease; default: hostname");
  app.add_option("--lease-duration", o.lease_duration,
                 "another replica takes over once the Lease has not changed this long; renewed "
                 "at a third of it")
      ->capture_default_str();
  app.add_flag("--dra", o.dra,
               "express each admitted member as a ResourceClaim (resource.k8s.io/v1) allocated to "
               "its devices, read from the NVIDIA driver's ResourceSlices");
  CLI11_PARSE(app, argc, argv);
  curl_global_init(CURL_GLOBAL_DEFAULT);  // Before any thread makes a handle.

  absl::Duration renew_every, drain_grace, not_ready_after, kueue_every, lease_duration;
  if (!ParseFlagDuration("lease-duration", o.lease_duration, &lease_duration) ||
      !ParseFlagDuration("renew-every", o.renew_every, &renew_every) ||
      !ParseFlagDuration("drain-grace", o.drain_grace, &drain_grace) ||
      !ParseFlagDuration("not-ready-after", o.not_ready_after, &not_ready_after) ||
      !ParseFlagDuration("kueue-every", o.kueue_every, &kueue_every)) {
    return 2;
  }
  if (renew_every < absl::Seconds(1)) {
    std::cerr << "arbiter-kube: --renew-every must be at least 1s\n";
    return 2;
  }
  if (lease_duration < absl::Seconds(3)) {
    std::cerr << "arbiter-kube: --lease-duration must be at least 3s\n";
    return 2;
  }
  kube::KubeApiOptions api_options;
  if (o.kube_api.empty()) {
    absl::StatusOr<kube::KubeApiOptions> in_cluster = kube::KubeApiOptions::InCluster();
    if (!in_cluster.ok()) {
      std::cerr << "arbiter-kube: " << in_cluster.status().message() << "\n";
      return 2;
    }
    api_options = *in_cluster;
  } else {
    api_options.server = o.kube_api;
    api_options.token_file = o.kube_token_file;
    api_options.ca_file = o.kube_ca;
  }
  if (o.identity.empty()) {
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    o.identity = host;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> opened =
      arbiter::clients::OpenChannel(o.endpoint, {o.ca_file, o.cert_file, o.key_file});
  if (!opened.ok()) {
    std::cerr << "arbiter-kube: " << opened.status().message() << "\n";
    return 2;
  }
  clients::LeaderChannel leader(o.endpoint, {o.ca_file, o.cert_file, o.key_file}, *opened);
  const kube::KubeApi api(api_options);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  kube::ControllerOptions controller_options;
  controller_options.renew_every = renew_every;
  controller_options.drain_grace = drain_grace;
  controller_options.not_ready_after = not_ready_after;
  kube::Controller controller(controller_options);
  std::mutex mu;

  kube::InformerCallbacks pod_callbacks;
  pod_callbacks.reset = [&](const std::vector<json>& items) {
    std::vector<kube::PodInfo> pods;
    for (const json& item : items) {
      absl::StatusOr<std::optional<kube::PodInfo>> pod = kube::ReadPod(item);
      if (!pod.ok()) Log(absl::StrCat("pod: ", pod.status().message()));
      if (pod.ok() && pod->has_value()) pods.push_back(**pod);
    }
    std::lock_guard<std::mutex> lock(mu);
    controller.ResetPods(pods, absl::Now());
    Log(absl::StrCat("pods listed: ", pods.size(), " with allocations"));
  };
  pod_callbacks.event = [&](const std::string& type, const json& object) {
    absl::StatusOr<std::optional<kube::PodInfo>> pod = kube::ReadPod(object);
    if (!pod.ok()) {
      Log(absl::StrCat("pod: ", pod.status().message()));
      return;
    }
    if (!pod->has_value()) return;
    std::lock_guard<std::mutex> lock(mu);
    if (type == "DELETED") {
      controller.PodGone((*pod)->uid, absl::Now());
    } else {
      controller.PodChanged(**pod, absl::Now());
    }
  };
  pod_callbacks.error = [](const std::string& m) { Log("pods: " + m); };
  kube::InformerCallbacks node_callbacks;
  node_callbacks.reset = [&](const std::vector<json>& items) {
    std::vector<kube::NodeInfo> nodes;
    for (const json& item : items) {
      if (absl::StatusOr<kube::NodeInfo> n = kube::ReadNode(item); n.ok()) nodes.push_back(*n);
    }
    std::lock_guard<std::mutex> lock(mu);
    controller.ResetNodes(nodes);
  };
  node_callbacks.event = [&](const std::string& type, const json& object) {
    absl::StatusOr<kube::NodeInfo> node = kube::ReadNode(object);
    if (!node.ok()) return;
    std::lock_guard<std::mutex> lock(mu);
    if (type == "DELETED") {
      controller.NodeGone(node->name);
    } else {
      controller.NodeChanged(*node);
    }
  };
  node_callbacks.error = [](const std::string& m) { Log("nodes: " + m); };

  std::unique_ptr<kube::DraBinder> dra;
  kube::InformerCallbacks slice_callbacks;
  if (o.dra) {
    dra = std::make_unique<kube::DraBinder>(api, leader, o.cluster);
    slice_callbacks.reset = [&](const std::vector<json>& items) { dra->SlicesReset(items); };
    slice_callbacks.event = [&](const std::string& type, const json& object) {
      dra->SliceChanged(type, object);
    };
    slice_callbacks.error = [](const std::string& m) { Log("resourceslices: " + m); };
  }

  kube::Informer pods(api, "/api/v1/pods", pod_callbacks);
  kube::Informer nodes(api, "/api/v1/nodes", node_callbacks);
  kube::Informer slices(api, "/apis/resource.k8s.io/v1/resourceslices", slice_callbacks);
  std::thread pod_thread([&] { pods.Run(g_stop); });
  std::thread node_thread([&] { nodes.Run(g_stop); });
  std::thread slice_thread([&] {
    if (dra != nullptr) slices.Run(g_stop);
  });
  std::thread arbiter_thread([&] { WatchArbiter(leader, o.cluster, mu, controller, dra.get()); });

  Actor actor(leader, api, o, drain_grace);
  std::unique_ptr<kube::LeaseElector> elector;
  if (!o.lease_name.empty()) {
    elector = std::make_unique<kube::LeaseElector>(api, o.lease_namespace, o.lease_name, o.identity,
                                                   lease_duration);
  }
  bool leading = elector == nullptr;
  absl::Time elected_at = absl::InfinitePast(), kueue_at = absl::InfinitePast();
  absl::Time held_at = absl::InfinitePast();  // The last renewal of the Lease.
  Log(absl::StrCat("watching ", api.server(), " for cluster ", o.cluster, " as ", o.identity));
  while (!g_stop.load()) {
    const absl::Time now = absl::Now();
    if (elector != nullptr && now - elected_at >= lease_duration / 3) {
      const bool first = elected_at == absl::InfinitePast();
      const bool was = leading;
      leading = elector->Try(now);
      elected_at = now;
      if (leading) held_at = now;
      if (leading && !was) actor.Forget();  // What another leader may have changed.
      if (leading != was || first) {
        Log(leading ? "leading" : absl::StrCat("following ", elector->holder()));
      }
    }
    if (leading) {
      std::vector<kube::Action> actions;
      {
        std::lock_guard<std::mutex> lock(mu);
        actions = controller.Plan(now);
      }
      for (const kube::Action& a : actions) {
        // An action runs only while this replica surely holds the Lease:
        // a slow batch must not outlast it (another replica may lead).
        if (elector != nullptr && absl::Now() - held_at > lease_duration * 2 / 3) {
          std::lock_guard<std::mutex> lock(mu);
          controller.Done(a, kube::Outcome{absl::UnavailableError("the Lease may have passed")},
                          absl::Now());
          continue;
        }
        const kube::Outcome outcome = actor.Do(a);
        if (a.kind != kube::Action::kRenew || !outcome.status.ok()) {
          Log(absl::StrCat(a.Describe(), ": ",
                           outcome.status.ok() ? "done" : outcome.status.ToString()));
        }
        std::lock_guard<std::mutex> lock(mu);
        controller.Done(a, outcome, absl::Now());
      }
      if (dra != nullptr) dra->Step(now);
      if (kueue_every > absl::ZeroDuration() && now - kueue_at >= kueue_every) {
        actor.ReconcileKueue();
        kueue_at = now;
      }
    }
    for (int i = 0; i < 10 && !g_stop.load(); ++i) absl::SleepFor(absl::Milliseconds(50));
  }
  pod_thread.join();
  node_thread.join();
  slice_thread.join();
  arbiter_thread.join();
  Log("stopped");
  return 0;
}
