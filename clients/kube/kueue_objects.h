// Kueue objects (`arbctl export kueue`, and arbiter-kube's reconcile): Arbiter's governance
// compiled into Kueue objects (kueue.x-k8s.io/v1beta2), so that Kueue enforces in Kubernetes what
// Arbiter decided. docs/kubernetes.md explains the mapping:
//   - a ResourceFlavor per pool-wide quota's pool (nodes labelled
//     arbiter.dev/pool) and per GPU model with a quota of its own (also
//     arbiter.dev/gpu-model);
//   - a Cohort per team with sub-teams, its parent the parent team's;
//   - a ClusterQueue per team with quotas: nvidia.com/gpu and the MIG
//     resources of its models, nominal quota, borrowing and lending limits
//     in GPUs, fair-sharing weight, reclaiming lent capacity by preemption;
//   - a LocalQueue per ClusterQueue in the team's namespace (the team's
//     name with '_' as '-', as the admission webhook expects).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include <nlohmann/json.hpp>

#include "arbiter/v1/governance.pb.h"
#include "arbiter/v1/inventory.pb.h"

namespace arbiter::kube {

// What the objects are made from: Arbiter's teams, quotas, GPU models and
// nodes, as the List calls return them.
struct KueueInputs {
  v1::ListTeamsResponse teams;
  v1::ListQuotasResponse quotas;
  v1::ListGpuModelsResponse models;
  v1::ListNodesResponse nodes;
};

// The objects as a YAML stream (one document each), in a stable order:
// the same inputs give the same text. INTERNAL if they cannot be written.
absl::StatusOr<std::string> KueueYaml(const KueueInputs& in, const std::string& queue_name);

// The same objects as JSON, for server-side apply (quantities as strings).
absl::StatusOr<std::vector<nlohmann::json>> KueueObjects(const KueueInputs& in,
                                                         const std::string& queue_name);

}  // namespace arbiter::kube
