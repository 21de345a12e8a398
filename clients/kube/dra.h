// Dynamic Resource Allocation (resource.k8s.io/v1): an admitted member's
// placement as a ResourceClaim allocated to exactly the devices Arbiter
// chose, read from the ResourceSlices that NVIDIA's DRA driver
// (gpu.nvidia.com) publishes (docs/kubernetes.md, "Dynamic Resource
// Allocation"; the shapes: tests/kube/fixtures/dra/SOURCES.md).
//
// The controller writes the claim's spec (one request per device, pinned by
// a CEL selector on the device's uuid) and its status.allocation (the
// driver, pool and device of each, and the node): the scheduler honours an
// allocated claim as it stands and schedules the pod that names it on that
// node, and the kubelet's driver prepares exactly those devices.
//
// Devices are found by what Arbiter knows of a GPU: its UUID (the driver's
// `uuid` attribute; MIG devices by `parentUUID`, `profile` and the first
// `memorySlice<N>` capacity, which is the instance's placement start). Where
// Arbiter has no UUID for a GPU, the driver's older `index`/`parentIndex`
// attributes, then the device name `gpu-<index>`, stand in. A share of a GPU
// (a fraction) has no claim: consumable capacity is not in a driver release.
//
// Thread-compatible; no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include <nlohmann/json.hpp>

namespace arbiter::kube {

inline constexpr char kNvidiaDriver[] = "gpu.nvidia.com";

// One device of a ResourceSlice, with what matching needs.
struct SliceDevice {
  std::string driver;
  std::string pool;
  std::string node;
  std::string name;
  std::string type;  // "gpu" or "mig".
  std::string uuid;
  std::string parent_uuid;  // MIG.
  std::string profile;      // MIG, e.g. "3g.40gb".
  int index = -1;           // The driver's older `index` (GPU) or `parentIndex` (MIG).
  int mig_start = -1;       // MIG: the lowest memorySlice<N>.
};

// The devices of one v1 ResourceSlice of `driver` (others: none).
// INVALID_ARGUMENT (naming the field) for a slice without spec.nodeName,
// spec.pool.name or a device name.
absl::StatusOr<std::vector<SliceDevice>> ReadSlice(const nlohmann::json& slice,
                                                   const std::string& driver = kNvidiaDriver);

// One member's placement, as Arbiter placed it.
struct MemberPlacement {
  int64_t allocation = 0;
  int32_t member = 0;
  std::string ns;  // The team's namespace.
  std::string node;
  std::vector<int> gpu_indices;
  std::vector<std::string> gpu_uuids;  // By position in gpu_indices; "" where unknown.
  std::string mig_profile;             // Non-empty: one MIG instance.
  int mig_start = -1;
  bool shared = false;  // A fraction of one GPU.
};

// The devices on the member's node that are its placement, in gpu_indices
// order. FAILED_PRECONDITION naming what is missing (no slice for the node,
// no device for a GPU or MIG instance; a share of a GPU).
absl::StatusOr<std::vector<SliceDevice>> MatchDevices(const MemberPlacement& m,
                                                      const std::vector<SliceDevice>& devices);

// "arbiter-<allocation>-<member>": the claim a pod names in
// spec.resourceClaims[].resourceClaimName.
std::string ClaimName(int64_t allocation, int32_t member);

// The ResourceClaim (metadata and spec) for `m` on `devices`: what the
// controller applies.
nlohmann::json ClaimSpec(const MemberPlacement& m, const std::vector<SliceDevice>& devices);

// Its status.allocation: each request's driver, pool and device, and the
// node (matchFields metadata.name, as the scheduler writes it).
nlohmann::json ClaimStatus(const MemberPlacement& m, const std::vector<SliceDevice>& devices);

}  // namespace arbiter::kube
