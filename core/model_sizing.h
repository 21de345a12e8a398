// Sizing a request from a model profile: the memory a model needs to serve
// (weights, KV cache for a token budget, overhead), and the smallest GPU form
// that holds it.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

#include "core/model.h"
#include "core/state.h"

namespace arbiter::core {

// Memory in MiB, rounded up:
//   parameters x bytes_per_parameter
// + 2 (K and V) x layers x kv_heads x head_dim x kv_bytes_per_element x token_budget
// + overhead.
// INVALID_ARGUMENT (field shape.model_profile) if it exceeds 1 PiB.
absl::StatusOr<int64_t> ModelMemoryMib(const ModelProfile& profile);

// The smallest form that holds `memory_mib` on the GPU models `spec` may use
// (its gpu_models, or else the models of its pool's nodes), by charged
// milli-GPU:
//   - a MIG instance: the smallest profile with enough memory (SM share);
//   - a fraction: milli-GPU in proportion to memory, with that memory;
//   - whole GPUs: as many as the memory needs (more than one GPU's worth).
// Ties prefer MIG (hard isolation), then a fraction, then the model name.
// NOT_FOUND (field pool) when the pool has no GPUs; INVALID_ARGUMENT (field
// shape.model_profile) when it needs more than 64 GPUs.
absl::StatusOr<std::variant<int32_t, GpuFraction, MigShape>> ChooseGpuForm(
    const State& state, const CapacityRequestSpec& spec, int64_t memory_mib);

}  // namespace arbiter::core
