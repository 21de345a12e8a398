#include "clients/agent/registration.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace arbiter::agent {

namespace {

// The -lgipp placements of GPU `g` named by its model's profile IDs.
void ReportPlacements(const GpuFacts& g, const std::string& model, const CatalogMig& catalog,
                      const std::vector<MigPlacementFacts>& placements, v1::Gpu& gpu,
                      std::vector<std::string>& notes) {
  const auto ids = catalog.ids.find(model);
  std::vector<std::string> unnamed;
  for (const MigPlacementFacts& p : placements) {
    if (p.gpu != g.index) continue;
    const std::string* name = nullptr;
    if (ids != catalog.ids.end()) {
      if (auto it = ids->second.find(p.profile_id); it != ids->second.end()) name = &it->second;
    }
    if (name == nullptr) {
      unnamed.push_back(absl::StrCat(p.profile_id));
      continue;
    }
    v1::MigPlacementReport* report = gpu.add_reported_mig_placements();
    report->set_profile(*name);
    for (int32_t start : p.starts) report->add_start_slots(start);
  }
  if (!unnamed.empty()) {
    notes.push_back(absl::StrCat("GPU ", g.index, ": MIG profile IDs ",
                                 absl::StrJoin(unnamed, ", "), " are not in the catalog's ", model,
                                 " table; their placements are not reported"));
  }
}

}  // namespace

absl::StatusOr<Registration> RegistrationOf(const NodeIdentity& who,
                                            const std::vector<GpuFacts>& gpus,
                                            const CatalogMig& catalog,
                                            const std::vector<MigPlacementFacts>& placements) {
  Registration out;
  v1::Node& node = out.node;
  node.set_cluster(who.cluster);
  node.set_name(who.name);
  node.set_pool(who.pool);
  node.set_topology_domain(who.topology_domain);
  node.set_cpu_milli(who.cpu_milli);
  node.set_memory_mib(who.memory_mib);
  for (const GpuFacts& g : gpus) {
    absl::StatusOr<std::string> model = CatalogModelOf(g.product, g.memory_mib);
    if (!model.ok()) {
      return absl::NotFoundError(
          absl::StrCat("GPU ", g.index, " (", g.uuid, "): ", model.status().message()));
    }
    v1::Gpu* gpu = node.add_gpus();
    gpu->set_index(g.index);
    gpu->set_model(*model);
    gpu->set_uuid(g.uuid);
    if (g.mig_enabled && !g.mig_devices.empty()) {
      std::map<std::string, int> found;
      auto table = catalog.sizes.find(*model);
      for (const MigDeviceFacts& d : g.mig_devices) {
        std::string profile =
            table == catalog.sizes.end() ? "" : ProfileOf(table->second, d.sm_count, d.memory_mib);
        if (profile.empty()) profile = absl::StrCat(d.sm_count, " SMs/", d.memory_mib, " MiB");
        ++found[profile];
      }
      std::vector<std::string> parts;
      for (const auto& [profile, n] : found) parts.push_back(absl::StrCat(n, " x ", profile));
      out.notes.push_back(absl::StrCat(
          "GPU ", g.index, " has MIG instances Arbiter did not create (",
          absl::StrJoin(parts, ", "),
          "); Arbiter lays out MIG instances itself: destroy them before it places work here"));
    }
    if (g.mig_enabled) ReportPlacements(g, *model, catalog, placements, *gpu, out.notes);
    for (const std::string& why : g.unhealthy) {
      out.unhealthy = true;
      out.notes.push_back(absl::StrCat("GPU ", g.index, " is unhealthy: ", why));
    }
  }
  return out;
}

}  // namespace arbiter::agent
