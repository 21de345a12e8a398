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
#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include <yaml-cpp/yaml.h>

#include "clients/arbctl/commands.h"

namespace arbiter::arbctl {
namespace {

constexpr const char* kApiVersion = "kueue.x-k8s.io/v1beta2";
constexpr const char* kGpuResource = "nvidia.com/gpu";

// A Kubernetes object name (RFC 1123): lower case, '-' for '_' and '.'.
std::string KubeName(const std::string& name) {
  return absl::AsciiStrToLower(absl::StrReplaceAll(name, {{"_", "-"}, {".", "-"}}));
}

// Milli-units as a Kubernetes quantity: "2" or "2500m".
std::string Quantity(int64_t milli) {
  return milli % 1000 == 0 ? absl::StrCat(milli / 1000) : absl::StrCat(milli, "m");
}

struct Flavor {
  std::string name;
  std::string pool;
  std::string gpu_model;         // Empty: pool-wide.
  std::set<std::string> models;  // The models it stands for.
};

void EmitMeta(YAML::Emitter& out, const char* kind, const std::string& name,
              const std::string& ns = "") {
  out << YAML::BeginDoc << YAML::BeginMap;
  out << YAML::Key << "apiVersion" << YAML::Value << kApiVersion;
  out << YAML::Key << "kind" << YAML::Value << kind;
  out << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << name;
  if (!ns.empty()) out << YAML::Key << "namespace" << YAML::Value << ns;
  out << YAML::Key << "labels" << YAML::Value << YAML::BeginMap << YAML::Key
      << "app.kubernetes.io/managed-by" << YAML::Value << "arbiter" << YAML::EndMap;
  out << YAML::EndMap;
}

}  // namespace

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
  // MIG resources and their milli-GPU (the profile's SM share), per model.
  std::map<std::string, std::map<std::string, int64_t>> mig_milli;
  std::set<std::string> mig_resources;
  for (const v1::GpuModel& m : models.gpu_models()) {
    for (const v1::MigProfile& p : m.mig_profiles()) {
      if (m.sm_count() <= 0 || p.sm_count() <= 0) continue;
      const std::string resource = absl::StrCat("nvidia.com/mig-", p.name());
      mig_milli[m.name()][resource] = int64_t{p.sm_count()} * 1000 / m.sm_count();
    }
  }
  std::map<std::string, std::set<std::string>> pool_models;
  for (const v1::Node& n : nodes.nodes()) {
    for (const v1::Gpu& g : n.gpus()) pool_models[n.pool()].insert(g.model());
  }
  // Flavors: per model with its own quota; pool-wide for the other models.
  std::map<std::string, Flavor> flavors;
  std::map<std::string, std::set<std::string>> own_models;  // pool -> models with quotas
  for (const v1::QuotaUsage& q : quotas.quotas()) {
    if (!q.quota().gpu_model().empty()) own_models[q.quota().pool()].insert(q.quota().gpu_model());
  }
  auto flavor_of = [&](const v1::Quota& q) -> const Flavor& {
    const std::string name =
        KubeName(q.gpu_model().empty() ? q.pool() : absl::StrCat(q.pool(), "-", q.gpu_model()));
    Flavor& f = flavors[name];
    if (f.name.empty()) {
      f = Flavor{name, q.pool(), q.gpu_model(), {}};
      if (!q.gpu_model().empty()) {
        f.models.insert(q.gpu_model());
      } else {
        for (const std::string& m : pool_models[q.pool()]) {
          if (own_models[q.pool()].count(m) == 0) f.models.insert(m);
        }
      }
      for (const std::string& m : f.models) {
        for (const auto& [resource, milli] : mig_milli[m]) mig_resources.insert(resource);
      }
    }
    return f;
  };
  std::map<std::string, std::vector<const v1::Quota*>> team_quotas;
  for (const v1::QuotaUsage& q : quotas.quotas()) {
    flavor_of(q.quota());
    team_quotas[q.quota().team()].push_back(&q.quota());
  }
  // A Kueue resource group covers at most 16 resources.
  while (mig_resources.size() > 15) mig_resources.erase(std::prev(mig_resources.end()));

  std::map<std::string, const v1::Team*> by_name;
  std::set<std::string> has_children;
  for (const v1::Team& t : teams.teams()) {
    by_name[t.name()] = &t;
    if (!t.parent().empty()) has_children.insert(t.parent());
  }

  YAML::Emitter out;
  for (const auto& [name, f] : flavors) {
    EmitMeta(out, "ResourceFlavor", name);
    out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "nodeLabels" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "arbiter.dev/pool" << YAML::Value << f.pool;
    if (!f.gpu_model.empty())
      out << YAML::Key << "arbiter.dev/gpu-model" << YAML::Value << f.gpu_model;
    out << YAML::EndMap << YAML::EndMap << YAML::EndMap;
  }
  for (const std::string& parent : has_children) {
    EmitMeta(out, "Cohort", KubeName(parent));
    out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
    const v1::Team* t = by_name.count(parent) ? by_name[parent] : nullptr;
    if (t != nullptr && !t->parent().empty()) {
      out << YAML::Key << "parentName" << YAML::Value << KubeName(t->parent());
    }
    out << YAML::EndMap << YAML::EndMap;
  }
  for (const auto& [team, qs] : team_quotas) {
    const v1::Team* t = by_name.count(team) ? by_name[team] : nullptr;
    // A team with sub-teams lends into its own cohort; others into their
    // parent's. A root team without sub-teams has no cohort.
    std::string cohort = has_children.count(team) ? team : (t != nullptr ? t->parent() : "");
    const std::string ns = KubeName(team);
    EmitMeta(out, "ClusterQueue", KubeName(team));
    out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
    if (!cohort.empty()) out << YAML::Key << "cohortName" << YAML::Value << KubeName(cohort);
    out << YAML::Key << "namespaceSelector" << YAML::Value << YAML::BeginMap << YAML::Key
        << "matchLabels" << YAML::Value << YAML::BeginMap << YAML::Key
        << "kubernetes.io/metadata.name" << YAML::Value << ns << YAML::EndMap << YAML::EndMap;
    if (t != nullptr && t->weight_milli() > 0) {
      out << YAML::Key << "fairSharing" << YAML::Value << YAML::BeginMap << YAML::Key << "weight"
          << YAML::Value << Quantity(t->weight_milli()) << YAML::EndMap;
    }
    out << YAML::Key << "preemption" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "reclaimWithinCohort" << YAML::Value << "Any";
    out << YAML::Key << "withinClusterQueue" << YAML::Value << "LowerPriority" << YAML::EndMap;
    out << YAML::Key << "resourceGroups" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
    out << YAML::Key << "coveredResources" << YAML::Value << YAML::BeginSeq << kGpuResource;
    for (const std::string& r : mig_resources) out << r;
    out << YAML::EndSeq;
    out << YAML::Key << "flavors" << YAML::Value << YAML::BeginSeq;
    // Per-model quotas first: Arbiter tries them before the pool-wide one.
    std::vector<const v1::Quota*> ordered = qs;
    std::stable_sort(ordered.begin(), ordered.end(), [](const v1::Quota* a, const v1::Quota* b) {
      return !a->gpu_model().empty() && b->gpu_model().empty();
    });
    for (const v1::Quota* q : ordered) {
      const Flavor& f = flavor_of(*q);
      out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << f.name;
      out << YAML::Key << "resources" << YAML::Value << YAML::BeginSeq;
      auto resource = [&](const std::string& name, int64_t unit_milli) {
        auto count = [&](int64_t milli) {
          return unit_milli == 1 ? Quantity(milli) : absl::StrCat(milli / unit_milli);
        };
        out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << name;
        out << YAML::Key << "nominalQuota" << YAML::Value << count(q->nominal_milli());
        if (!cohort.empty()) {
          const int64_t borrow = q->has_borrowing_limit_milli() ? q->borrowing_limit_milli() : 0;
          if (borrow >= 0) out << YAML::Key << "borrowingLimit" << YAML::Value << count(borrow);
          if (q->has_lending_limit_milli()) {
            out << YAML::Key << "lendingLimit" << YAML::Value << count(q->lending_limit_milli());
          }
        }
        out << YAML::EndMap;
      };
      resource(kGpuResource, 1);
      for (const std::string& r : mig_resources) {
        // The smallest share among the flavor's models that have the
        // profile; models without it give no instances.
        int64_t unit = 0;
        for (const std::string& m : f.models) {
          auto it = mig_milli[m].find(r);
          if (it != mig_milli[m].end() && it->second > 0) {
            unit = unit == 0 ? it->second : std::min(unit, it->second);
          }
        }
        if (unit == 0) {
          out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << r << YAML::Key
              << "nominalQuota" << YAML::Value << "0" << YAML::EndMap;
        } else {
          resource(r, unit);
        }
      }
      out << YAML::EndSeq << YAML::EndMap;
    }
    out << YAML::EndSeq << YAML::EndMap << YAML::EndSeq;
    out << YAML::EndMap << YAML::EndMap;

    EmitMeta(out, "LocalQueue", queue_name, ns);
    out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap << YAML::Key << "clusterQueue"
        << YAML::Value << KubeName(team) << YAML::EndMap << YAML::EndMap;
  }
  if (!out.good()) {
    std::cerr << "error: cannot write the Kueue objects: " << out.GetLastError() << "\n";
    return 1;
  }
  std::cout << out.c_str() << "\n";
  return 0;
}

}  // namespace arbiter::arbctl
