// arbiter-kube --dra: keeps one ResourceClaim per member of each admitted
// allocation of the cluster, allocated to the devices Arbiter chose
// (clients/kube/dra.h), and deletes them when the allocation ends.
//
// Fed by the ResourceSlice informer (Slices*), by arbiterd's allocation
// events (Admitted, Ended) and by a full list at start (Reset). Step()
// carries out what is due; only the leader calls it.
//
// Thread-safe: the feeds and Step may run on different threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include <nlohmann/json.hpp>

#include "arbiter/v1/inventory.grpc.pb.h"
#include "arbiter/v1/types.pb.h"
#include "clients/common/channel.h"
#include "clients/kube/dra.h"
#include "clients/kube/kube_api.h"

namespace arbiter::kube {

class DraBinder {
 public:
  DraBinder(const KubeApi& api, clients::LeaderChannel& leader, std::string cluster);

  void SlicesReset(const std::vector<nlohmann::json>& slices);
  void SliceChanged(const std::string& type, const nlohmann::json& slice);

  // The admitted requests (a start-up list) and then each change.
  void Reset(const std::vector<v1::CapacityRequest>& admitted);
  void Admitted(const v1::CapacityRequest& request);
  void Ended(int64_t id);

  // Makes the claims of admitted allocations (retrying a member whose
  // devices are not published yet every 10 s) and deletes those of ended
  // ones.
  void Step(absl::Time now);

 private:
  struct Tracked {
    v1::CapacityRequest request;
    std::set<int32_t> bound;  // Members whose claim is allocated.
    absl::Time tried_at = absl::InfinitePast();
    std::string last_error;  // Logged when it changes.
  };

  // Applies the claim and writes its allocation. Returns an error message, or "".
  std::string Bind(const MemberPlacement& m, const std::vector<SliceDevice>& devices);
  // Deletes Arbiter's claims whose allocation is not live (ended while no
  // controller ran): once after each Reset.
  void Sweep();
  void RefreshUuids(absl::Time now);
  std::vector<SliceDevice> AllDevices() const;

  const KubeApi& api_;
  clients::LeaderChannel& leader_;
  const std::string cluster_;

  mutable std::mutex mu_;
  std::map<std::string, std::vector<SliceDevice>> slices_;  // By slice name.
  std::map<int64_t, Tracked> admitted_;
  // Ended allocations whose claims remain: id -> (namespace, members).
  std::map<int64_t, std::pair<std::string, int32_t>> ending_;
  bool sweep_due_ = false;
  // The GPUs' UUIDs of the cluster's nodes: node -> index -> uuid.
  std::map<std::string, std::map<int, std::string>> uuids_;
  absl::Time uuids_at_ = absl::InfinitePast();
};

}  // namespace arbiter::kube
