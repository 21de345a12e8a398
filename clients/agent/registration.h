// The node registration arbiter-agent sends for what nvidia-smi reports
// (clients/agent/nvidia_smi.h): one arbiter.v1.Node with a GPU per device,
// named by its catalog model and UUID. MIG instances found on a GPU are
// described (Arbiter lays out MIG instances itself; ones it did not create
// must be destroyed or left to the node's own scheduler).
//
// Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

#include "arbiter/v1/types.pb.h"
#include "clients/agent/nvidia_smi.h"

namespace arbiter::agent {

// Who the node is, from the agent's flags and the host.
struct NodeIdentity {
  std::string cluster;
  std::string name;
  std::string pool;
  std::string topology_domain;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};

struct Registration {
  v1::Node node;
  // What a scheduler must know beyond the registration: MIG instances found,
  // a catalog model whose memory differs from the device's, unhealthy GPUs.
  std::vector<std::string> notes;
  // Some GPU is unhealthy (GpuFacts::unhealthy): the node should be cordoned.
  bool unhealthy = false;
};

// What the agent knows of the catalog's MIG tables, by catalog model.
struct CatalogMig {
  // Profile name -> (SMs, MiB), for naming the MIG instances found.
  std::map<std::string, std::map<std::string, std::pair<int32_t, int64_t>>> sizes;
  // GPU instance profile ID -> profile name, for naming -lgipp's placements.
  std::map<std::string, std::map<int32_t, std::string>> ids;
};

// The registration of `gpus` as node `who`. A MIG-enabled GPU reports the
// placements `nvidia-smi mig -lgipp` lists for it (`placements`, by GPU
// index) of the profiles its catalog model has, so that Arbiter places
// instances only where this GPU can create them; profiles the catalog does
// not name (media-extension variants, a newer driver's) are noted and left
// out. NOT_FOUND naming the GPU whose product maps to no catalog model.
absl::StatusOr<Registration> RegistrationOf(const NodeIdentity& who,
                                            const std::vector<GpuFacts>& gpus,
                                            const CatalogMig& catalog,
                                            const std::vector<MigPlacementFacts>& placements = {});

}  // namespace arbiter::agent
