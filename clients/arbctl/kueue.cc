// `arbctl export kueue`: Arbiter's governance compiled into Kueue objects
// (kueue.x-k8s.io/v1beta2), so that Kueue enforces in Kubernetes what
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
#include <iostream>

#include "clients/arbctl/commands.h"
#include "clients/kube/kueue_objects.h"

namespace arbiter::arbctl {

int Commands::ExportKueue(const std::string& queue_name) {
  v1::ListTeamsResponse teams;
  v1::ListQuotasResponse quotas;
  v1::ListGpuModelsResponse models;
  v1::ListNodesResponse nodes;
  if (!Call(governance_, &v1::GovernanceService::Stub::ListTeams, v1::ListTeamsRequest(), &teams) ||
      !Call(governance_, &v1::GovernanceService::Stub::ListQuotas, v1::ListQuotasRequest(),
            &quotas) ||
      !Call(inventory_, &v1::InventoryService::Stub::ListGpuModels, v1::ListGpuModelsRequest(),
            &models) ||
      !Call(inventory_, &v1::InventoryService::Stub::ListNodes, v1::ListNodesRequest(), &nodes)) {
    return 1;
  }
  kube::KueueInputs in{teams, quotas, models, nodes};
  absl::StatusOr<std::string> text = kube::KueueYaml(in, queue_name);
  if (!text.ok()) {
    std::cerr << "error: " << text.status().message() << "\n";
    return 1;
  }
  std::cout << *text << "\n";
  return 0;
}

}  // namespace arbiter::arbctl
