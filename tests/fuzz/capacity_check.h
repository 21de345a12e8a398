// No capacity overcommitted: an independent recount of what the live
// placements of a core::State hold, compared with the state's own
// bookkeeping. Shared by the fuzz targets that drive arbitration
// (arbitration_fuzz.cc on the core, decision_path_fuzz.cc through the
// application and its store).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/model.h"
#include "core/state.h"

namespace arbiter::fuzz {

// What is wrong with the holdings of `s`, or "" when nothing is: no GPU
// holds more than 1000 milli, more memory than it has, or a whole-GPU holder
// next to another; no two MIG instances start on the same slot of a GPU; no
// node lends more host CPU or memory than it has; and every GPU's and
// node's counters equal the recount of the admitted and preempting
// requests' placements.
inline std::string CapacityProblem(const core::State& s) {
  struct Held {
    int64_t milli = 0, memory = 0;
    int32_t tenants = 0, exclusive = 0;
    std::set<int32_t> mig_starts;
    bool mig_clash = false;
  };
  struct Host {
    int64_t cpu_milli = 0, memory_mib = 0;
  };
  std::map<std::pair<int64_t, int32_t>, Held> held;
  std::map<int64_t, Host> hosts;
  for (const auto& [id, r] : s.live_requests()) {
    if (r.state != core::RequestState::kAdmitted && r.state != core::RequestState::kPreempting) {
      continue;
    }
    for (const core::Placement& p : r.placements) {
      hosts[p.node_id].cpu_milli += p.cpu_milli;
      hosts[p.node_id].memory_mib += p.memory_mib;
      for (int32_t g : p.gpu_indices) {
        Held& h = held[{p.node_id, g}];
        h.milli += p.gpu_milli;
        h.memory += p.gpu_memory_mib;
        h.tenants += 1;
        h.exclusive += p.exclusive ? 1 : 0;
        if (p.mig_start >= 0 && !h.mig_starts.insert(p.mig_start).second) h.mig_clash = true;
      }
    }
  }
  for (const core::Node& n : s.nodes()) {
    const Host& host = hosts[n.id];
    if (host.cpu_milli > n.cpu_milli)
      return absl::StrCat(n.name, ": more host CPU lent than it has");
    if (host.memory_mib > n.memory_mib) {
      return absl::StrCat(n.name, ": more host memory lent than it has");
    }
    if (host.cpu_milli != n.allocated_cpu_milli || host.memory_mib != n.allocated_memory_mib) {
      return absl::StrCat(n.name, ": allocated host CPU or memory disagrees with placements");
    }
    for (const core::Gpu& g : n.gpus) {
      const Held& h = held[{n.id, g.index}];
      const std::string where = absl::StrCat(n.name, "/", g.index, ": ");
      if (h.milli > 1000) return where + "more than a whole GPU held";
      if (h.memory > g.memory_mib) return where + "more memory held than the GPU has";
      if (h.exclusive > 0 && h.tenants != 1) return where + "a whole GPU shared";
      if (h.mig_clash) return where + "two MIG instances on one slot";
      if (h.milli != g.allocated_milli) return where + "allocated milli disagrees with placements";
      if (h.memory != g.allocated_memory_mib) return where + "allocated memory disagrees";
      if (h.tenants != g.tenants) return where + "tenant count disagrees with placements";
      if (g.exclusive != (h.exclusive > 0)) return where + "exclusive flag disagrees";
    }
  }
  return "";
}

}  // namespace arbiter::fuzz
