// MIG (Multi-Instance GPU) geometry: the profiles of each MIG-capable model,
// layouts of GPU instances on one GPU, and the rules a layout must keep
// (../shared/reference/mig-profiles.md, from NVIDIA's MIG user guide):
//   - memory has 8 slots; an instance occupies [start, start + memory_slices)
//     at one of its profile's valid start slots, and ranges never overlap;
//   - compute slices of all instances sum to at most 7;
//   - at most 7 instances, at most `max_instances` of each profile, and at
//     most one media-extension (+me) instance per GPU.
// A GPU's layout is chosen, or changed, only while none of its instances is
// allocated; the decision that changes it says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace arbiter::core {

inline constexpr int32_t kMigMemorySlots = 8;
inline constexpr int32_t kMigComputeSlices = 7;
inline constexpr int32_t kMigMaxInstances = 7;
// The largest NVML GPU-instance profile id a catalog entry may give.
inline constexpr int32_t kMaxMigProfileId = 255;

struct MigProfile {
  std::string name;  // e.g. "3g.40gb".
  int32_t profile_id = 0;
  int32_t memory_slices = 0;   // Of 8.
  int32_t compute_slices = 0;  // Of 7.
  int32_t sm_count = 0;
  int64_t memory_mib = 0;
  int32_t max_instances = 0;
  bool media_extensions = false;  // "+me": at most one per GPU.
  std::vector<int32_t> start_slots;

  bool operator==(const MigProfile&) const = default;
};

// Text form of a profile table, as the catalog is stored:
// "name/id/memory slices/compute slices/SMs/MiB/max instances/me/starts"
// per profile, starts joined by '+', profiles by ';' ("" for none); and back.
std::string FormatMigProfiles(const std::vector<MigProfile>& profiles);
absl::Status ParseMigProfiles(absl::string_view text, std::vector<MigProfile>* profiles);
// INVALID_ARGUMENT naming `field`[i].* unless each profile is possible on a
// MIG GPU: a name, 1..8 memory slices, 1..7 compute slices, SMs and memory
// above zero, 1..7 instances, start slots in 0..7 where the instance fits,
// names unique.
absl::Status ValidateMigProfiles(const std::vector<MigProfile>& profiles, absl::string_view field);

// The start slots at which a node reports it can create instances of a
// profile (as `nvidia-smi mig -lgipp` lists them). A GPU with reports offers
// only the reported profiles, at the reported slots: they win over the table.
struct MigPlacementReport {
  std::string profile;
  std::vector<int32_t> start_slots;
  bool operator==(const MigPlacementReport&) const = default;
};

// One GPU instance of a layout.
struct MigInstance {
  std::string profile;
  int32_t start = 0;
  bool allocated = false;
  bool operator==(const MigInstance&) const = default;
};

// The profiles of `table` narrowed to `reported`, each with the reported start
// slots. INVALID_ARGUMENT, naming `field`[i], for a profile the table does
// not have, an empty or duplicate slot list, or a slot where the profile's
// memory slices do not fit (start + memory slices > 8).
absl::StatusOr<std::vector<MigProfile>> ApplyReportedPlacements(
    const std::vector<MigProfile>& table, const std::vector<MigPlacementReport>& reported,
    absl::string_view field);

// Text form "3g.40gb:0,4;1g.10gb:0,1,2" (empty: no reports), and back.
std::string FormatMigReports(const std::vector<MigPlacementReport>& reported);
absl::Status ParseMigReports(absl::string_view text, std::vector<MigPlacementReport>* reported);

// The built-in profile table of `model` ("A100-40GB", "A100-80GB",
// "H100-80GB", "H200-141GB", "B200"), or nullptr for a model without MIG.
const std::vector<MigProfile>* BuiltinMigProfiles(absl::string_view model);

const MigProfile* FindMigProfile(const std::vector<MigProfile>& profiles, absl::string_view name);

// Milli-GPU charged for one instance of `profile`: its share of the SMs of
// the full-GPU (7g) profile, so that a 7g instance is 1000. Rounded down, so
// that the instances of a valid layout never add up to more than 1000.
int64_t MigMilli(const std::vector<MigProfile>& profiles, const MigProfile& profile);

// OK if `layout` keeps every rule above for a GPU with `profiles`;
// otherwise FAILED_PRECONDITION naming the broken rule.
[[nodiscard]] absl::Status ValidateMigLayout(const std::vector<MigProfile>& profiles,
                                             const std::vector<MigInstance>& layout);

// A layout for an empty GPU that holds one instance of `wanted` and uses the
// rest of the GPU: more of `wanted` first, then the profiles in `fill_order`
// (most wanted first), each at its lowest valid start. Media-extension
// profiles are added only when wanted. Returns an empty layout if `wanted`
// does not fit an empty GPU. Deterministic.
std::vector<MigInstance> PlanMigLayout(const std::vector<MigProfile>& profiles,
                                       const MigProfile& wanted,
                                       const std::vector<std::string>& fill_order);

// "3g.40gb@0,3g.40gb@4": the text form used in the database and the API.
std::string FormatMigLayout(const std::vector<MigInstance>& layout);
// Inverse of FormatMigLayout (instances unallocated). INVALID_ARGUMENT on a
// malformed text.
absl::Status ParseMigLayout(absl::string_view text, std::vector<MigInstance>* layout);

}  // namespace arbiter::core
