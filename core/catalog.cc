// The GPU catalog as data (docs/catalog.md). Declared in core/arbitration.h.
#include <string>

#include "absl/strings/str_cat.h"

#include "core/arbitration.h"
#include "core/mig.h"
#include "core/status_macros.h"
#include "core/validate.h"

namespace arbiter::core {
namespace {

// Upper bounds that no accelerator comes near.
constexpr int64_t kMaxModelMemoryMib = 16LL * 1024 * 1024;  // 16 TiB.
constexpr int64_t kMaxSmCount = 100'000;
constexpr int64_t kMaxTdpWatts = 100'000;
constexpr int64_t kMaxNvlinkDomain = 100'000;

absl::Status ValidateGpuModel(const GpuModel& m) {
  ARBITER_RETURN_IF_ERROR(ValidateName("gpu_model.name", m.name));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("gpu_model.memory_mib", m.memory_mib, 1, kMaxModelMemoryMib));
  ARBITER_RETURN_IF_ERROR(ValidateRange("gpu_model.sm_count", m.sm_count, 1, kMaxSmCount));
  ARBITER_RETURN_IF_ERROR(ValidateRange("gpu_model.tdp_watts", m.tdp_watts, 1, kMaxTdpWatts));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("gpu_model.nvlink_domain_size", m.nvlink_domain_size, 0, kMaxNvlinkDomain));
  ARBITER_RETURN_IF_ERROR(ValidateName("gpu_model.vendor", m.vendor));
  if (m.mig_capable != !m.mig_profiles.empty()) {
    return absl::InvalidArgumentError(
        m.mig_capable ? "gpu_model.mig_profiles: a MIG-capable model lists its profiles"
                      : "gpu_model.mig_capable: must be set for a model with MIG profiles");
  }
  ARBITER_RETURN_IF_ERROR(ValidateMigProfiles(m.mig_profiles, "gpu_model.mig_profiles"));
  for (size_t i = 0; i < m.mig_profiles.size(); ++i) {
    if (m.mig_profiles[i].memory_mib > m.memory_mib) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gpu_model.mig_profiles[", i, "].memory_mib: more than the GPU's ", m.memory_mib));
    }
    if (m.mig_profiles[i].sm_count > m.sm_count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gpu_model.mig_profiles[", i, "].sm_count: more than the GPU's ", m.sm_count));
    }
  }
  return absl::OkStatus();
}

// Nodes (not removed) with at least one GPU of `model`.
int64_t NodesWith(const State& state, const std::string& model) {
  int64_t n = 0;
  for (const Node& node : state.nodes()) {
    if (node.removed) continue;
    for (const Gpu& g : node.gpus) {
      if (g.model == model) {
        ++n;
        break;
      }
    }
  }
  return n;
}

}  // namespace

absl::StatusOr<bool> SetGpuModel(State& state, const GpuModel& model, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateGpuModel(model));
  if (const GpuModel* now = state.FindGpuModel(model.name)) {
    if (*now == model) return false;
    const bool shape_changes = now->memory_mib != model.memory_mib ||
                               now->mig_capable != model.mig_capable ||
                               now->mig_profiles != model.mig_profiles;
    if (const int64_t in_use = NodesWith(state, model.name); shape_changes && in_use > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          now->memory_mib != model.memory_mib ? "gpu_model.memory_mib" : "gpu_model.mig_profiles",
          ": ", in_use, " node(s) have GPUs of model ", model.name,
          "; its memory and MIG table change only while no node has one"));
    }
  }
  state.PutGpuModel(model);
  changes.changes.emplace_back(*state.FindGpuModel(model.name));
  return true;
}

}  // namespace arbiter::core
