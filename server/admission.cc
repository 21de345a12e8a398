#include "server/admission.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include <nlohmann/json.hpp>

#include "core/status_macros.h"

namespace arbiter::server {
namespace {

using json = nlohmann::json;

constexpr absl::string_view kGpuResource = "nvidia.com/gpu";
constexpr absl::string_view kSharedGpuResource = "nvidia.com/gpu.shared";
constexpr absl::string_view kMigPrefix = "nvidia.com/mig-";

bool IsGpuResource(absl::string_view name) {
  return name == kGpuResource || name == kSharedGpuResource || absl::StartsWith(name, kMigPrefix);
}

// RFC 6901: '~' is "~0" and '/' is "~1" in a JSON Pointer token.
std::string PointerToken(absl::string_view token) {
  return absl::StrReplaceAll(token, {{"~", "~0"}, {"/", "~1"}});
}

// What the pod asks for, per GPU resource name: the larger of the sum over
// its containers and the largest init container (Kubernetes' effective
// request). Extended resources are whole numbers; limits win over requests.
struct PodDemand {
  std::map<std::string, int64_t> gpus;  // Resource name -> count.
  std::string error;                    // A quantity that is not a count.
  int64_t total() const {
    int64_t n = 0;
    for (const auto& [name, count] : gpus) n += count;
    return n;
  }
  std::string Describe() const {
    std::vector<std::string> parts;
    for (const auto& [name, count] : gpus) parts.push_back(absl::StrCat(name, ": ", count));
    return absl::StrJoin(parts, ", ");
  }
};

std::map<std::string, int64_t> ContainerGpus(const json& container, std::string& error) {
  std::map<std::string, int64_t> out;
  const json* resources = container.contains("resources") ? &container["resources"] : nullptr;
  if (resources == nullptr || !resources->is_object()) return out;
  for (const char* section : {"requests", "limits"}) {
    if (!resources->contains(section) || !(*resources)[section].is_object()) continue;
    for (const auto& [name, quantity] : (*resources)[section].items()) {
      if (!IsGpuResource(name)) continue;
      int64_t count = 0;
      const std::string text = quantity.is_string() ? quantity.get<std::string>()
                               : quantity.is_number_integer()
                                   ? std::to_string(quantity.get<int64_t>())
                                   : "";
      if (!absl::SimpleAtoi(text, &count) || count < 0) {
        error = absl::StrCat("container ", container.value("name", "?"), " asks for ", name, ": ",
                             quantity.dump(), ", which is not a whole number");
        continue;
      }
      out[name] = count;  // Limits (read last) win.
    }
  }
  return out;
}

PodDemand DemandOf(const json& spec) {
  PodDemand demand;
  if (spec.contains("containers") && spec["containers"].is_array()) {
    for (const json& c : spec["containers"]) {
      for (const auto& [name, n] : ContainerGpus(c, demand.error)) demand.gpus[name] += n;
    }
  }
  if (spec.contains("initContainers") && spec["initContainers"].is_array()) {
    for (const json& c : spec["initContainers"]) {
      for (const auto& [name, n] : ContainerGpus(c, demand.error)) {
        demand.gpus[name] = std::max(demand.gpus[name], n);
      }
    }
  }
  for (auto it = demand.gpus.begin(); it != demand.gpus.end();) {
    it = it->second == 0 ? demand.gpus.erase(it) : std::next(it);
  }
  return demand;
}

json Envelope(const std::string& uid) {
  json review = {{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}};
  review["response"] = {{"uid", uid}};
  return review;
}

std::string Allow(const std::string& uid) {
  json review = Envelope(uid);
  review["response"]["allowed"] = true;
  return review.dump();
}

// `code` 403 for a pod that may not run; 503 when Arbiter cannot check now.
std::string Deny(const std::string& uid, const std::string& message, int code = 403) {
  json review = Envelope(uid);
  review["response"]["allowed"] = false;
  review["response"]["status"] = {{"code", code},
                                  {"reason", code == 403 ? "Forbidden" : "ServiceUnavailable"},
                                  {"message", message}};
  return review.dump();
}

std::string AllowWithWarning(const std::string& uid, const std::string& warning) {
  json review = Envelope(uid);
  review["response"]["allowed"] = true;
  review["response"]["warnings"] = json::array({warning});
  return review.dump();
}

std::string AllowWithPatch(const std::string& uid, const json& patch) {
  json review = Envelope(uid);
  review["response"]["allowed"] = true;
  review["response"]["patchType"] = "JSONPatch";
  review["response"]["patch"] = absl::Base64Escape(patch.dump());
  return review.dump();
}

// Requires the pod to run on `node`: a new node affinity, or the node's
// requirement ANDed into each of the pod's own required terms.
void PatchNodeAffinity(const json& spec, const std::string& node, json& patch) {
  const json requirement = {
      {"key", "kubernetes.io/hostname"}, {"operator", "In"}, {"values", json::array({node})}};
  const json required = {
      {"nodeSelectorTerms", json::array({json{{"matchExpressions", json::array({requirement})}}})}};
  const json* affinity = spec.contains("affinity") ? &spec["affinity"] : nullptr;
  if (affinity == nullptr || !affinity->is_object()) {
    patch.push_back(
        {{"op", "add"},
         {"path", "/spec/affinity"},
         {"value",
          {{"nodeAffinity", {{"requiredDuringSchedulingIgnoredDuringExecution", required}}}}}});
    return;
  }
  const json* node_affinity =
      affinity->contains("nodeAffinity") ? &(*affinity)["nodeAffinity"] : nullptr;
  const char* kRequired = "requiredDuringSchedulingIgnoredDuringExecution";
  if (node_affinity == nullptr || !node_affinity->is_object()) {
    patch.push_back({{"op", "add"},
                     {"path", "/spec/affinity/nodeAffinity"},
                     {"value", {{kRequired, required}}}});
    return;
  }
  const json* own = node_affinity->contains(kRequired) ? &(*node_affinity)[kRequired] : nullptr;
  if (own == nullptr || !own->contains("nodeSelectorTerms") ||
      !(*own)["nodeSelectorTerms"].is_array() || (*own)["nodeSelectorTerms"].empty()) {
    patch.push_back({{"op", "add"},
                     {"path", absl::StrCat("/spec/affinity/nodeAffinity/", kRequired)},
                     {"value", required}});
    return;
  }
  const json& terms = (*own)["nodeSelectorTerms"];
  for (size_t i = 0; i < terms.size(); ++i) {
    const std::string term =
        absl::StrCat("/spec/affinity/nodeAffinity/", kRequired, "/nodeSelectorTerms/", i);
    if (terms[i].contains("matchExpressions") && terms[i]["matchExpressions"].is_array()) {
      patch.push_back(
          {{"op", "add"}, {"path", term + "/matchExpressions/-"}, {"value", requirement}});
    } else {
      patch.push_back({{"op", "add"},
                       {"path", term + "/matchExpressions"},
                       {"value", json::array({requirement})}});
    }
  }
}

// Renames every container's `from` resource to `to` (MIG instances).
void PatchResourceName(const json& spec, const std::string& from, const std::string& to,
                       json& patch) {
  for (const char* list : {"initContainers", "containers"}) {
    if (!spec.contains(list) || !spec[list].is_array()) continue;
    for (size_t i = 0; i < spec[list].size(); ++i) {
      const json& c = spec[list][i];
      if (!c.contains("resources") || !c["resources"].is_object()) continue;
      for (const char* section : {"requests", "limits"}) {
        const json& r = c["resources"];
        if (!r.contains(section) || !r[section].is_object() || !r[section].contains(from)) continue;
        const std::string base = absl::StrCat("/spec/", list, "/", i, "/resources/", section, "/");
        patch.push_back({{"op", "remove"}, {"path", base + PointerToken(from)}});
        patch.push_back(
            {{"op", "add"}, {"path", base + PointerToken(to)}, {"value", r[section][from]}});
      }
    }
  }
}

void PatchAnnotation(const std::string& key, const std::string& value, json& patch) {
  patch.push_back({{"op", "add"},
                   {"path", absl::StrCat("/metadata/annotations/", PointerToken(key))},
                   {"value", value}});
}

// The shape check: an empty string when the pod's GPU demand is what the
// member holds, else why not. `rename` receives the resource to rename to
// the MIG profile's, if any.
std::string CheckShape(const PodDemand& demand, const core::Placement& p, const std::string& who,
                       std::string& rename) {
  if (!p.mig_profile.empty()) {
    const std::string mig = absl::StrCat(kMigPrefix, p.mig_profile);
    for (const auto& [name, count] : demand.gpus) {
      if (name != kGpuResource && name != mig) {
        return absl::StrCat(who, " holds one MIG instance ", p.mig_profile, "; the pod asks for ",
                            demand.Describe(), ". Ask for ", mig, ": 1 or ", kGpuResource, ": 1");
      }
    }
    if (demand.total() != 1) {
      return absl::StrCat(who, " holds one MIG instance ", p.mig_profile, "; the pod asks for ",
                          demand.Describe());
    }
    if (demand.gpus.count(std::string(kGpuResource)) > 0) rename = std::string(kGpuResource);
    return "";
  }
  if (!p.exclusive) {  // A share of one GPU.
    if (demand.gpus.size() != 1 || demand.total() != 1 ||
        (demand.gpus.begin()->first != kGpuResource &&
         demand.gpus.begin()->first != kSharedGpuResource)) {
      return absl::StrCat(who, " holds ", p.gpu_milli, " milli-GPU of one GPU; the pod asks for ",
                          demand.Describe(), ". Ask for ", kGpuResource, ": 1 (or ",
                          kSharedGpuResource, ": 1 with time-slicing)");
    }
    return "";
  }
  const int64_t held = static_cast<int64_t>(p.gpu_indices.size());
  if (demand.gpus.size() != 1 || demand.gpus.begin()->first != kGpuResource ||
      demand.total() != held) {
    return absl::StrCat(who, " holds ", held, " whole GPU", held == 1 ? "" : "s",
                        "; the pod asks for ", demand.Describe(), ". Ask for ", kGpuResource, ": ",
                        held);
  }
  return "";
}

// A Pod CREATE that asks for GPUs and names an admitted allocation of its
// namespace's team: what both webhooks read from the review.
struct PodReview {
  std::string uid;      // The review's.
  std::string ns;       // The pod's namespace.
  std::string name;     // As Kubernetes named the pod ("" before validation).
  std::string display;  // "ns/name", or "ns/generateName" before validation.
  bool dry_run = false;
  json spec;
  PodDemand demand;
  core::CapacityRequest request;
  core::Placement placement;
  std::string who;  // "allocation ID member N".
};

// Reads `body` into `pod`. Returns the answer when the review is decided
// without going further (allowed: not a GPU pod CREATE; denied: no such
// admitted allocation for this pod), or nullopt with `pod` filled.
// INVALID_ARGUMENT (naming the field) when `body` is not an AdmissionReview.
absl::StatusOr<std::optional<std::string>> ReadPodReview(absl::string_view body,
                                                         const AdmissionLookups& lookups,
                                                         PodReview& pod) {
  json review = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (review.is_discarded() || !review.is_object()) {
    return absl::InvalidArgumentError("body: not a JSON object");
  }
  if (review.value("apiVersion", "") != "admission.k8s.io/v1" ||
      review.value("kind", "") != "AdmissionReview") {
    return absl::InvalidArgumentError("apiVersion/kind: want admission.k8s.io/v1 AdmissionReview");
  }
  if (!review.contains("request") || !review["request"].is_object()) {
    return absl::InvalidArgumentError("request: missing");
  }
  const json& request = review["request"];
  if (!request.contains("uid") || !request["uid"].is_string() ||
      request["uid"].get<std::string>().empty()) {
    return absl::InvalidArgumentError("request.uid: missing");
  }
  const std::string uid = request["uid"].get<std::string>();
  pod.uid = uid;
  const bool is_pod = request.contains("kind") && request["kind"].is_object() &&
                      request["kind"].value("kind", "") == "Pod" &&
                      request["kind"].value("group", "") == "";
  if (!is_pod || request.value("operation", "") != "CREATE") return Allow(uid);
  if (!request.contains("object") || !request["object"].is_object()) {
    return absl::InvalidArgumentError("request.object: a Pod CREATE without the pod");
  }
  pod.dry_run =
      request.contains("dryRun") && request["dryRun"].is_boolean() && request["dryRun"].get<bool>();
  const json& object = request["object"];
  const json empty = json::object();
  pod.spec = object.contains("spec") && object["spec"].is_object() ? object["spec"] : empty;
  const json& meta =
      object.contains("metadata") && object["metadata"].is_object() ? object["metadata"] : empty;
  pod.ns = request.value("namespace", meta.value("namespace", ""));
  pod.name = request.value("name", meta.value("name", ""));
  pod.display =
      absl::StrCat(pod.ns, "/", pod.name.empty() ? meta.value("generateName", "") : pod.name);
  const std::string& name = pod.display;

  pod.demand = DemandOf(pod.spec);
  const PodDemand& demand = pod.demand;
  if (!demand.error.empty()) return Deny(uid, absl::StrCat("pod ", name, ": ", demand.error));
  if (demand.gpus.empty()) return Allow(uid);

  const json& annotations =
      meta.contains("annotations") && meta["annotations"].is_object() ? meta["annotations"] : empty;
  const std::string allocation = annotations.value(std::string(kAllocationAnnotation), "");
  if (allocation.empty()) {
    return Deny(uid, absl::StrCat("pod ", name, " asks for ", demand.Describe(), " but carries no ",
                                  kAllocationAnnotation,
                                  " annotation. Ask Arbiter for the capacity first (arbctl "
                                  "request --team TEAM --pool POOL --gpus N), then annotate the "
                                  "pod with ",
                                  kAllocationAnnotation, ": \"<request id>\""));
  }
  int64_t id = 0;
  if (!absl::SimpleAtoi(allocation, &id) || id <= 0) {
    return Deny(uid, absl::StrCat("pod ", name, ": ", kAllocationAnnotation, " \"", allocation,
                                  "\" is not a request id (a positive integer, as arbctl request "
                                  "prints)"));
  }
  int32_t member = 0;
  const std::string member_text = annotations.value(std::string(kMemberAnnotation), "0");
  if (!absl::SimpleAtoi(member_text, &member) || member < 0) {
    return Deny(uid, absl::StrCat("pod ", name, ": ", kMemberAnnotation, " \"", member_text,
                                  "\" is not a member index (0, 1, ...)"));
  }
  absl::StatusOr<core::CapacityRequest> found = lookups.request(id);
  if (absl::IsNotFound(found.status())) {
    return Deny(uid, absl::StrCat("pod ", name, ": allocation ", id,
                                  " does not exist; arbctl requests list --team TEAM shows yours"));
  }
  if (!found.ok()) {
    return Deny(uid,
                absl::StrCat("Arbiter cannot check allocation ", id, " now (",
                             found.status().message(), "); the pod may be created again later"),
                503);
  }
  const core::CapacityRequest& r = *found;
  if (TeamNamespace(r.spec.team) != pod.ns) {
    return Deny(uid,
                absl::StrCat("pod ", name, ": allocation ", id, " belongs to team ", r.spec.team,
                             ", whose pods run in namespace ", TeamNamespace(r.spec.team)));
  }
  if (r.state != core::RequestState::kAdmitted) {
    return Deny(uid, absl::StrCat("pod ", name, ": allocation ", id, " is ",
                                  core::RequestStateName(r.state), ", not admitted; arbctl get ",
                                  id, " says why"));
  }
  const auto placement = std::find_if(r.placements.begin(), r.placements.end(),
                                      [&](const core::Placement& p) { return p.member == member; });
  if (placement == r.placements.end()) {
    return Deny(uid, absl::StrCat("pod ", name, ": allocation ", id, " has ", r.spec.members,
                                  " member(s); ", kMemberAnnotation, " ", member, " is not one"));
  }
  const std::string who = absl::StrCat("allocation ", id, " member ", member);
  pod.request = r;
  pod.placement = *placement;
  pod.who = who;
  return std::nullopt;
}

// The holder of `member`'s claim, or "".
std::string HolderOf(const core::CapacityRequest& r, int32_t member) {
  for (const core::Claim& c : r.claims) {
    if (c.member == member) return c.holder;
  }
  return "";
}

}  // namespace

std::string TeamNamespace(absl::string_view team) {
  return absl::StrReplaceAll(team, {{"_", "-"}});
}

std::string PodHolder(absl::string_view ns, absl::string_view name) {
  return absl::StrCat(kPodHolderPrefix, ns, "/", name);
}

absl::StatusOr<std::string> ReviewAdmission(absl::string_view body,
                                            const AdmissionLookups& lookups) {
  PodReview pod;
  ARBITER_ASSIGN_OR_RETURN(std::optional<std::string> early, ReadPodReview(body, lookups, pod));
  if (early.has_value()) return *std::move(early);
  const std::string& uid = pod.uid;
  const std::string& name = pod.display;
  const json& spec = pod.spec;
  const core::Placement* placement = &pod.placement;
  const std::string& who = pod.who;
  // A member another pod holds: denied now, naming that pod (a pod named
  // only by generateName is never the holder: its name is new).
  if (std::string holder = HolderOf(pod.request, placement->member);
      !holder.empty() && (pod.name.empty() || holder != PodHolder(pod.ns, pod.name))) {
    return Deny(uid, absl::StrCat("pod ", name, ": ", who, " is already claimed by ", holder,
                                  "; one allocation runs one workload"));
  }
  std::string rename;
  if (std::string why = CheckShape(pod.demand, *placement, who, rename); !why.empty()) {
    return Deny(uid, absl::StrCat("pod ", name, ": ", why));
  }
  const std::string node = lookups.node_name(placement->node_id);
  if (node.empty()) {
    return Deny(uid, absl::StrCat("Arbiter does not know node ", placement->node_id, " of ", who),
                503);
  }

  json patch = json::array();
  PatchNodeAffinity(spec, node, patch);
  if (!rename.empty()) {
    PatchResourceName(spec, rename, absl::StrCat(kMigPrefix, placement->mig_profile), patch);
  }
  PatchAnnotation("arbiter.dev/node", node, patch);
  PatchAnnotation("arbiter.dev/gpu-indices", absl::StrJoin(placement->gpu_indices, ","), patch);
  if (!placement->mig_profile.empty()) {
    PatchAnnotation("arbiter.dev/mig-profile", placement->mig_profile, patch);
  } else if (!placement->exclusive) {
    PatchAnnotation("arbiter.dev/gpu-milli", absl::StrCat(placement->gpu_milli), patch);
    PatchAnnotation("arbiter.dev/gpu-memory-mib", absl::StrCat(placement->gpu_memory_mib), patch);
  }
  return AllowWithPatch(uid, patch);
}

absl::StatusOr<std::string> ReviewClaim(absl::string_view body, const AdmissionLookups& lookups) {
  PodReview pod;
  ARBITER_ASSIGN_OR_RETURN(std::optional<std::string> early, ReadPodReview(body, lookups, pod));
  if (early.has_value()) return *std::move(early);
  if (pod.name.empty()) {
    return absl::InvalidArgumentError(
        "request.object.metadata.name: empty; the claim is made at validating admission, where "
        "Kubernetes has named the pod");
  }
  const std::string holder = PodHolder(pod.ns, pod.name);
  if (holder.size() > 253) {
    return Deny(pod.uid,
                absl::StrCat("pod ", pod.display, ": its holder name ", holder.substr(0, 40),
                             "... is longer than 253 characters; shorten the pod's name"));
  }
  // A dry run has no side effects: it is answered as the claim would be.
  if (pod.dry_run) {
    const std::string held = HolderOf(pod.request, pod.placement.member);
    if (!held.empty() && held != holder) {
      return Deny(pod.uid, absl::StrCat("pod ", pod.display, ": ", pod.who,
                                        " is already claimed by ", held));
    }
    return Allow(pod.uid);
  }
  absl::StatusOr<core::CapacityRequest> claimed =
      lookups.claim(pod.request.id, pod.placement.member, holder);
  if (absl::IsAborted(claimed.status())) {
    return AllowWithWarning(
        pod.uid, absl::StrCat("Arbiter: this replica does not lead, so ", pod.who,
                              " is not claimed at admission; arbiter-kube claims it for pod ",
                              pod.display, " (", claimed.status().message(), ")"));
  }
  if (absl::IsFailedPrecondition(claimed.status()) || absl::IsInvalidArgument(claimed.status())) {
    return Deny(pod.uid, absl::StrCat("pod ", pod.display, ": ", claimed.status().message()));
  }
  if (!claimed.ok()) {
    return Deny(pod.uid,
                absl::StrCat("Arbiter cannot claim ", pod.who, " now (", claimed.status().message(),
                             "); the pod may be created again later"),
                503);
  }
  return Allow(pod.uid);
}

}  // namespace arbiter::server
