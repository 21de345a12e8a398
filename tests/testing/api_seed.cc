#include "tests/testing/api_seed.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace arbiter::testing {
namespace {

absl::Status Check(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

// Calls `method` under a 10 s deadline.
template <typename Stub, typename Req, typename Resp>
absl::Status Call(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                  const Req& req, absl::string_view what) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  Resp resp;
  return Check((stub.*method)(&ctx, req, &resp), what);
}

}  // namespace

absl::Status SeedOrganisation(v1::InventoryService::StubInterface& inventory,
                              v1::GovernanceService::StubInterface& governance,
                              const SeedSpec& spec) {
  using Inv = v1::InventoryService::StubInterface;
  using Gov = v1::GovernanceService::StubInterface;
  v1::CreateClusterRequest cluster;
  cluster.mutable_cluster()->set_name(spec.cluster);
  absl::Status s = Call(inventory, &Inv::CreateCluster, cluster, "create cluster");
  if (!s.ok()) return s;
  v1::CreatePoolRequest pool;
  pool.mutable_pool()->set_name(spec.pool);
  pool.mutable_pool()->set_latency_class(spec.latency_class);
  if (spec.latency_class != v1::LATENCY_CLASS_SERVING) {
    // The tests' requests are inference by default, which a pool that is
    // not SERVING admits only by rule (docs/pools.md).
    v1::PoolClassRule* rule = pool.mutable_pool()->add_class_rules();
    rule->set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
    rule->set_admission(v1::CLASS_ADMISSION_ADMIT);
  }
  if (s = Call(inventory, &Inv::CreatePool, pool, "create pool"); !s.ok()) return s;
  for (int n = 0; n < spec.nodes; ++n) {
    v1::RegisterNodeRequest node;
    node.mutable_node()->set_cluster(spec.cluster);
    node.mutable_node()->set_name(absl::StrCat("n", n));
    node.mutable_node()->set_pool(spec.pool);
    node.mutable_node()->set_cpu_milli(spec.node_cpu_milli);
    node.mutable_node()->set_memory_mib(spec.node_memory_mib);
    for (int g = 0; g < spec.gpus_per_node; ++g) {
      v1::Gpu* gpu = node.mutable_node()->add_gpus();
      gpu->set_index(g);
      gpu->set_model(spec.model);
    }
    if (s = Call(inventory, &Inv::RegisterNode, node, "register node"); !s.ok()) return s;
  }
  v1::CreateTeamRequest team;
  team.mutable_team()->set_name(spec.team);
  if (s = Call(governance, &Gov::CreateTeam, team, "create team"); !s.ok()) return s;
  v1::SetQuotaRequest quota;
  quota.mutable_quota()->set_team(spec.team);
  quota.mutable_quota()->set_pool(spec.pool);
  quota.mutable_quota()->set_nominal_milli(spec.nominal_milli);
  return Call(governance, &Gov::SetQuota, quota, "set quota");
}

}  // namespace arbiter::testing
