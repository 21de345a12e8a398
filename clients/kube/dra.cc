#include "clients/kube/dra.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include "clients/kube/json_fields.h"

namespace arbiter::kube {
namespace {

using json = nlohmann::json;

// An attribute's string or int value ({"string": ...} or {"int": ...}).
std::string StringAttribute(const json& attributes, const char* name) {
  return Text(Field(attributes, name), "string");
}
int IntAttribute(const json& attributes, const char* name) {
  const json& v = Field(Field(attributes, name), "int");
  return v.is_number_integer() ? v.get<int>() : -1;
}

// The lowest N of the capacities "memorySlice<N>": a MIG instance's start.
int FirstMemorySlice(const json& capacity) {
  int first = -1;
  if (!capacity.is_object()) return first;
  for (const auto& [name, value] : capacity.items()) {
    int n = 0;
    if (absl::StartsWith(name, "memorySlice") &&
        absl::SimpleAtoi(absl::string_view(name).substr(11), &n) && (first < 0 || n < first)) {
      first = n;
    }
  }
  return first;
}

// The CEL expression that pins a request to one device (its uuid).
std::string Selector(const SliceDevice& d) {
  return absl::StrCat("device.attributes[\"", d.driver, "\"].uuid == \"", d.uuid, "\"");
}

std::string RequestName(size_t i) { return absl::StrCat("gpu-", i); }

}  // namespace

absl::StatusOr<std::vector<SliceDevice>> ReadSlice(const json& slice, const std::string& driver) {
  const json& spec = Field(slice, "spec");
  std::vector<SliceDevice> out;
  if (Text(spec, "driver") != driver) return out;
  const std::string node = Text(spec, "nodeName");
  const std::string pool = Text(Field(spec, "pool"), "name");
  if (node.empty()) return absl::InvalidArgumentError("spec.nodeName: missing");
  if (pool.empty()) return absl::InvalidArgumentError("spec.pool.name: missing");
  const json& devices = Field(spec, "devices");
  if (!devices.is_array()) return out;
  for (const json& d : devices) {
    SliceDevice device;
    device.driver = driver;
    device.pool = pool;
    device.node = node;
    device.name = Text(d, "name");
    if (device.name.empty()) return absl::InvalidArgumentError("spec.devices[].name: missing");
    const json& attributes = Field(d, "attributes");
    device.type = StringAttribute(attributes, "type");
    device.uuid = StringAttribute(attributes, "uuid");
    device.parent_uuid = StringAttribute(attributes, "parentUUID");
    device.profile = StringAttribute(attributes, "profile");
    device.index = device.type == "mig" ? IntAttribute(attributes, "parentIndex")
                                        : IntAttribute(attributes, "index");
    if (device.type == "mig") device.mig_start = FirstMemorySlice(Field(d, "capacity"));
    out.push_back(std::move(device));
  }
  return out;
}

absl::StatusOr<std::vector<SliceDevice>> MatchDevices(const MemberPlacement& m,
                                                      const std::vector<SliceDevice>& devices) {
  const std::string who = absl::StrCat("allocation ", m.allocation, " member ", m.member);
  if (m.shared) {
    return absl::FailedPreconditionError(
        absl::StrCat(who,
                     " holds a share of a GPU: no claim (consumable capacity is not in a driver "
                     "release); the webhook's annotations carry it"));
  }
  std::vector<const SliceDevice*> on_node;
  for (const SliceDevice& d : devices) {
    if (d.node == m.node) on_node.push_back(&d);
  }
  if (on_node.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": no ResourceSlice of ", kNvidiaDriver, " for node ", m.node));
  }
  // Whether `d` is the GPU at position `i` of the placement (MIG: its parent).
  auto same_gpu = [&m](const SliceDevice& d, size_t i, bool mig) {
    const std::string& uuid = m.gpu_uuids.size() > i ? m.gpu_uuids[i] : "";
    if (!uuid.empty()) return (mig ? d.parent_uuid : d.uuid) == uuid;
    if (d.index >= 0) return d.index == m.gpu_indices[i];
    return !mig && d.name == absl::StrCat("gpu-", m.gpu_indices[i]);
  };
  std::vector<SliceDevice> out;
  for (size_t i = 0; i < m.gpu_indices.size(); ++i) {
    const bool mig = !m.mig_profile.empty();
    const SliceDevice* found = nullptr;
    for (const SliceDevice* d : on_node) {
      if (mig && (d->type != "mig" || d->profile != m.mig_profile || d->mig_start != m.mig_start)) {
        continue;
      }
      if (!mig && d->type != "gpu" && !d->type.empty()) continue;
      if (same_gpu(*d, i, mig)) found = d;
    }
    if (found == nullptr) {
      return absl::FailedPreconditionError(
          mig ? absl::StrCat(who, ": node ", m.node, " publishes no MIG device ", m.mig_profile,
                             " at start ", m.mig_start, " on GPU ", m.gpu_indices[i])
              : absl::StrCat(who, ": node ", m.node, " publishes no device for GPU ",
                             m.gpu_indices[i]));
    }
    out.push_back(*found);
  }
  return out;
}

std::string ClaimName(int64_t allocation, int32_t member) {
  return absl::StrCat("arbiter-", allocation, "-", member);
}

json ClaimSpec(const MemberPlacement& m, const std::vector<SliceDevice>& devices) {
  json requests = json::array();
  for (size_t i = 0; i < devices.size(); ++i) {
    const SliceDevice& d = devices[i];
    json exactly = {{"deviceClassName", d.type == "mig" ? "mig.nvidia.com" : "gpu.nvidia.com"},
                    {"allocationMode", "ExactCount"},
                    {"count", 1}};
    // The allocation names the device; the selector says which, where the
    // device has a uuid, so that the request reads right on its own.
    if (!d.uuid.empty()) {
      exactly["selectors"] = json::array({{{"cel", {{"expression", Selector(d)}}}}});
    }
    requests.push_back({{"name", RequestName(i)}, {"exactly", exactly}});
  }
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata",
           {{"name", ClaimName(m.allocation, m.member)},
            {"namespace", m.ns},
            {"labels",
             {{"app.kubernetes.io/managed-by", "arbiter"},
              {"arbiter.dev/allocation", absl::StrCat(m.allocation)},
              {"arbiter.dev/member", absl::StrCat(m.member)}}}}},
          {"spec", {{"devices", {{"requests", requests}}}}}};
}

json ClaimStatus(const MemberPlacement& m, const std::vector<SliceDevice>& devices) {
  json results = json::array();
  for (size_t i = 0; i < devices.size(); ++i) {
    results.push_back({{"request", RequestName(i)},
                       {"driver", devices[i].driver},
                       {"pool", devices[i].pool},
                       {"device", devices[i].name}});
  }
  const json term = {{"matchFields", json::array({{{"key", "metadata.name"},
                                                   {"operator", "In"},
                                                   {"values", json::array({m.node})}}})}};
  return {{"allocation",
           {{"devices", {{"results", results}}},
            {"nodeSelector", {{"nodeSelectorTerms", json::array({term})}}}}}};
}

}  // namespace arbiter::kube
