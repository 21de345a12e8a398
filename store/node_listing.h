// What CatalogReads::ListNodes answers, from a state loaded with the live
// requests (so that each GPU shows its current allocations): the nodes of
// `cluster` and `pool` ("" matches all), ordered by cluster, then name.
// Shared by the stores, so that both answer the same.
#pragma once

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "core/state.h"

namespace arbiter::store {

inline std::vector<core::Node> NodesMatching(const core::State& state, const std::string& cluster,
                                             const std::string& pool) {
  std::vector<core::Node> out;
  for (const core::Node& n : state.nodes()) {
    if ((cluster.empty() || n.cluster == cluster) && (pool.empty() || n.pool == pool)) {
      out.push_back(n);
    }
  }
  std::sort(out.begin(), out.end(), [](const core::Node& a, const core::Node& b) {
    return std::tie(a.cluster, a.name) < std::tie(b.cluster, b.name);
  });
  return out;
}

}  // namespace arbiter::store
