#include "clients/kube/kueue_objects.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include <yaml-cpp/yaml.h>

namespace arbiter::kube {
namespace {

// A YAML document as JSON: maps, sequences and scalars (every scalar a
// string: the objects hold names, enums and quantities only).
nlohmann::json ToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = ToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& item : node) out.push_back(ToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar:
      return node.Scalar();
    default:
      return nullptr;
  }
}

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

absl::StatusOr<std::string> KueueYaml(const KueueInputs& in, const std::string& queue_name) {
  const v1::ListTeamsResponse& teams = in.teams;
  const v1::ListQuotasResponse& quotas = in.quotas;
  const v1::ListGpuModelsResponse& models = in.models;
  const v1::ListNodesResponse& nodes = in.nodes;
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
    // The cohort limits of the subtree the team heads: Kueue's Cohort
    // borrowing and lending limits toward its parent, with no quota of its
    // own (the team's quota is its ClusterQueue's, lent into this cohort).
    std::vector<const v1::Quota*> limited;
    if (auto own = team_quotas.find(parent); own != team_quotas.end()) {
      for (const v1::Quota* q : own->second) {
        if (q->has_cohort_borrowing_limit_milli() || q->has_cohort_lending_limit_milli()) {
          limited.push_back(q);
        }
      }
    }
    if (!limited.empty()) {
      out << YAML::Key << "resourceGroups" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
      out << YAML::Key << "coveredResources" << YAML::Value << YAML::BeginSeq << kGpuResource
          << YAML::EndSeq;
      out << YAML::Key << "flavors" << YAML::Value << YAML::BeginSeq;
      for (const v1::Quota* q : limited) {
        out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << flavor_of(*q).name;
        out << YAML::Key << "resources" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
        out << YAML::Key << "name" << YAML::Value << kGpuResource;
        out << YAML::Key << "nominalQuota" << YAML::Value << "0";
        if (q->has_cohort_borrowing_limit_milli() && q->cohort_borrowing_limit_milli() >= 0) {
          out << YAML::Key << "borrowingLimit" << YAML::Value
              << Quantity(q->cohort_borrowing_limit_milli());
        }
        if (q->has_cohort_lending_limit_milli() && q->cohort_lending_limit_milli() >= 0) {
          out << YAML::Key << "lendingLimit" << YAML::Value
              << Quantity(q->cohort_lending_limit_milli());
        }
        out << YAML::EndMap << YAML::EndSeq << YAML::EndMap;
      }
      out << YAML::EndSeq << YAML::EndMap << YAML::EndSeq;
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
    return absl::InternalError(
        absl::StrCat("cannot write the Kueue objects: ", out.GetLastError()));
  }
  return std::string(out.c_str());
}

absl::StatusOr<std::vector<nlohmann::json>> KueueObjects(const KueueInputs& in,
                                                         const std::string& queue_name) {
  absl::StatusOr<std::string> text = KueueYaml(in, queue_name);
  if (!text.ok()) return text.status();
  std::vector<nlohmann::json> out;
  for (const YAML::Node& doc : YAML::LoadAll(*text)) out.push_back(ToJson(doc));
  return out;
}

}  // namespace arbiter::kube
