#include "clients/kube/dra_binder.h"

#include <iostream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include <grpcpp/client_context.h>

#include "clients/kube/controller.h"

namespace arbiter::kube {
namespace {

using json = nlohmann::json;

constexpr absl::Duration kRetry = absl::Seconds(10);
constexpr absl::Duration kUuidsFresh = absl::Seconds(30);
constexpr char kClaims[] = "/apis/resource.k8s.io/v1/namespaces/";

void Log(const std::string& line) { std::cerr << "arbiter-kube: dra: " << line << "\n"; }

std::string ClaimPath(const std::string& ns, const std::string& name) {
  return absl::StrCat(kClaims, ns, "/resourceclaims/", name);
}

bool OnCluster(const v1::CapacityRequest& r, const std::string& cluster) {
  for (const v1::Placement& p : r.placements()) {
    if (p.cluster() == cluster) return true;
  }
  return false;
}

}  // namespace

DraBinder::DraBinder(const KubeApi& api, clients::LeaderChannel& leader, std::string cluster)
    : api_(api), leader_(leader), cluster_(std::move(cluster)) {}

void DraBinder::SlicesReset(const std::vector<json>& slices) {
  std::lock_guard<std::mutex> lock(mu_);
  slices_.clear();
  for (const json& s : slices) {
    absl::StatusOr<std::vector<SliceDevice>> devices = ReadSlice(s);
    const std::string name = s["metadata"].value("name", "");
    if (devices.ok()) slices_[name] = *std::move(devices);
  }
}

void DraBinder::SliceChanged(const std::string& type, const json& slice) {
  const json& meta = slice.contains("metadata") ? slice["metadata"] : json::object();
  const std::string name = meta.is_object() ? meta.value("name", "") : "";
  std::lock_guard<std::mutex> lock(mu_);
  if (type == "DELETED") {
    slices_.erase(name);
    return;
  }
  absl::StatusOr<std::vector<SliceDevice>> devices = ReadSlice(slice);
  if (!devices.ok()) {
    Log(absl::StrCat("slice ", name, ": ", devices.status().message()));
    return;
  }
  slices_[name] = *std::move(devices);
}

void DraBinder::Reset(const std::vector<v1::CapacityRequest>& admitted) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int64_t, Tracked> now;
  for (const v1::CapacityRequest& r : admitted) {
    if (!OnCluster(r, cluster_)) continue;
    Tracked& t = now[r.id()];
    t.request = r;
    if (auto it = admitted_.find(r.id()); it != admitted_.end()) t.bound = it->second.bound;
  }
  admitted_ = std::move(now);
  sweep_due_ = true;
}

void DraBinder::Admitted(const v1::CapacityRequest& request) {
  if (!OnCluster(request, cluster_)) return;
  std::lock_guard<std::mutex> lock(mu_);
  admitted_[request.id()].request = request;
}

void DraBinder::Ended(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = admitted_.find(id);
  if (it == admitted_.end()) return;
  ending_[id] = {TeamNamespace(it->second.request.team()), it->second.request.members()};
  admitted_.erase(it);
}

std::vector<SliceDevice> DraBinder::AllDevices() const {
  std::vector<SliceDevice> out;
  for (const auto& [name, devices] : slices_) out.insert(out.end(), devices.begin(), devices.end());
  return out;
}

void DraBinder::RefreshUuids(absl::Time now) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ListNodesResponse nodes;
  const grpc::Status status =
      v1::InventoryService::NewStub(leader_.Get())->ListNodes(&ctx, v1::ListNodesRequest(), &nodes);
  if (!status.ok()) {
    leader_.Follow(status);
    Log(absl::StrCat("listing nodes: ", status.error_message()));
    return;
  }
  std::map<std::string, std::map<int, std::string>> uuids;
  for (const v1::Node& n : nodes.nodes()) {
    if (n.cluster() != cluster_) continue;
    for (const v1::Gpu& g : n.gpus()) uuids[n.name()][g.index()] = g.uuid();
  }
  std::lock_guard<std::mutex> lock(mu_);
  uuids_ = std::move(uuids);
  uuids_at_ = now;
}

std::string DraBinder::Bind(const MemberPlacement& m, const std::vector<SliceDevice>& devices) {
  const std::string name = ClaimName(m.allocation, m.member);
  const std::string path = ClaimPath(m.ns, name);
  absl::StatusOr<KubeReply> applied =
      api_.Call("PATCH", path + "?fieldManager=arbiter&force=true", ClaimSpec(m, devices).dump(),
                "application/apply-patch+yaml");
  if (!applied.ok()) return std::string(applied.status().message());
  if (applied->code != 200 && applied->code != 201) {
    return absl::StrCat("apply ", name, ": HTTP ", applied->code, ": ",
                        applied->body.substr(0, 300));
  }
  json claim = json::parse(applied->body, nullptr, /*allow_exceptions=*/false);
  if (!claim.is_object()) return absl::StrCat("apply ", name, ": not an object");
  const json status = ClaimStatus(m, devices);
  if (claim.contains("status") && claim["status"].is_object() &&
      claim["status"].contains("allocation")) {
    // An allocation is immutable once written: ours stands, or another's.
    return claim["status"]["allocation"] == status["allocation"]
               ? ""
               : absl::StrCat(name,
                              " is allocated to other devices; delete it to let Arbiter "
                              "allocate it");
  }
  claim["status"] = status;
  absl::StatusOr<KubeReply> written = api_.Call("PUT", path + "/status", claim.dump());
  if (!written.ok()) return std::string(written.status().message());
  if (written->code != 200) {
    return absl::StrCat("allocate ", name, ": HTTP ", written->code, ": ",
                        written->body.substr(0, 300));
  }
  return "";
}

void DraBinder::Step(absl::Time now) {
  // Claims of ended allocations go.
  std::map<int64_t, std::pair<std::string, int32_t>> ending;
  bool sweep = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ending = ending_;
    sweep = sweep_due_;
    sweep_due_ = false;
  }
  for (const auto& [id, what] : ending) {
    bool all = true;
    for (int32_t m = 0; m < what.second; ++m) {
      absl::StatusOr<KubeReply> r = api_.Call("DELETE", ClaimPath(what.first, ClaimName(id, m)));
      all &= r.ok() && (r->code == 200 || r->code == 202 || r->code == 404);
    }
    if (all) {
      Log(absl::StrCat("deleted the claims of allocation ", id));
      std::lock_guard<std::mutex> lock(mu_);
      ending_.erase(id);
    }
  }
  if (sweep) Sweep();

  // Members not bound yet, due for a try.
  std::vector<v1::CapacityRequest> pending;
  bool stale = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, t] : admitted_) {
      if (static_cast<int>(t.bound.size()) >= t.request.placements_size()) continue;
      if (now - t.tried_at < kRetry) continue;
      t.tried_at = now;
      pending.push_back(t.request);
      // A node registered since the last read: read again.
      for (const v1::Placement& p : t.request.placements()) stale |= uuids_.count(p.node()) == 0;
    }
    stale |= now - uuids_at_ >= kUuidsFresh;
  }
  if (pending.empty()) return;
  if (stale) RefreshUuids(now);
  for (const v1::CapacityRequest& r : pending) {
    for (const v1::Placement& p : r.placements()) {
      MemberPlacement m;
      std::vector<SliceDevice> devices;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (admitted_.count(r.id()) == 0 || admitted_[r.id()].bound.count(p.member()) > 0) continue;
        m.allocation = r.id();
        m.member = p.member();
        m.ns = TeamNamespace(r.team());
        m.node = p.node();
        m.mig_profile = p.mig_profile();
        m.mig_start = p.mig_start_slot();
        m.shared = r.shape().has_fraction();
        for (int index : p.gpu_indices()) {
          m.gpu_indices.push_back(index);
          m.gpu_uuids.push_back(uuids_[p.node()][index]);
        }
        devices = AllDevices();
      }
      absl::StatusOr<std::vector<SliceDevice>> chosen = MatchDevices(m, devices);
      const std::string error =
          chosen.ok() ? Bind(m, *chosen) : std::string(chosen.status().message());
      if (!error.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = admitted_.find(r.id());
        if (it != admitted_.end() && it->second.last_error != error) {
          it->second.last_error = error;
          Log(error + " (retried every 10 s)");
        }
        continue;
      }
      Log(absl::StrCat("claim ", m.ns, "/", ClaimName(m.allocation, m.member),
                       " allocated on node ", m.node));
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = admitted_.find(r.id()); it != admitted_.end())
        it->second.bound.insert(m.member);
    }
  }
}

void DraBinder::Sweep() {
  absl::StatusOr<KubeReply> listed =
      api_.Call("GET",
                "/apis/resource.k8s.io/v1/resourceclaims?labelSelector=app.kubernetes.io%2F"
                "managed-by%3Darbiter");
  if (!listed.ok() || listed->code != 200) return;
  json list = json::parse(listed->body, nullptr, /*allow_exceptions=*/false);
  if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) return;
  for (const json& claim : list["items"]) {
    const json& meta = claim["metadata"];
    int64_t id = 0;
    const json& labels = meta.contains("labels") ? meta["labels"] : json::object();
    if (!absl::SimpleAtoi(labels.value("arbiter.dev/allocation", ""), &id)) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (admitted_.count(id) > 0) continue;
    }
    absl::StatusOr<KubeReply> deleted =
        api_.Call("DELETE", ClaimPath(meta.value("namespace", ""), meta.value("name", "")));
    Log(absl::StrCat(deleted.ok() ? "deleted " : "cannot delete ", meta.value("name", ""),
                     ": its allocation is not live"));
  }
}

}  // namespace arbiter::kube
