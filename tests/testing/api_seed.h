// Seeds an organisation through the public API, for server and integration
// tests: one cluster, one pool, N identical GPU nodes, one team with a quota.
#pragma once

#include <string>

#include "absl/status/status.h"

#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"

namespace arbiter::testing {

struct SeedSpec {
  std::string cluster = "east";
  std::string pool = "serving";
  v1::LatencyClass latency_class = v1::LATENCY_CLASS_SERVING;
  int nodes = 1;
  int gpus_per_node = 4;
  std::string model = "L4";
  int64_t node_cpu_milli = 64'000;
  int64_t node_memory_mib = 512'000;
  std::string team = "inference";
  int64_t nominal_milli = 3000;
};

// Creates everything `spec` describes; returns the first failed call's status.
absl::Status SeedOrganisation(v1::InventoryService::StubInterface& inventory,
                              v1::GovernanceService::StubInterface& governance,
                              const SeedSpec& spec);

}  // namespace arbiter::testing
