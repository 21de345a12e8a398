#include "core/model_sizing.h"

#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"

#include "core/validate.h"

namespace arbiter::core {
namespace {

constexpr int64_t kMib = int64_t{1} << 20;
constexpr __int128 kMaxBytes = static_cast<__int128>(1) << 50;  // 1 PiB.

absl::Status TooLarge(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("shape.model_profile: ", what));
}

}  // namespace

absl::StatusOr<int64_t> ModelMemoryMib(const ModelProfile& m) {
  __int128 bytes = static_cast<__int128>(m.parameters) * m.bytes_per_parameter_milli / 1000;
  bytes += static_cast<__int128>(2) * m.layers * m.kv_heads * m.head_dim *
           m.kv_bytes_per_element_milli * m.token_budget / 1000;
  bytes += static_cast<__int128>(m.overhead_mib) * kMib;
  if (bytes > kMaxBytes) return TooLarge("needs more than 1 PiB of GPU memory");
  return static_cast<int64_t>((bytes + kMib - 1) / kMib);
}

absl::StatusOr<std::variant<int32_t, GpuFraction, MigShape>> ChooseGpuForm(
    const State& state, const CapacityRequestSpec& spec, int64_t memory_mib) {
  std::set<std::string> models(spec.gpu_models.begin(), spec.gpu_models.end());
  if (models.empty()) {
    for (size_t i : state.PoolNodes(spec.pool)) {
      for (const Gpu& g : state.nodes()[i].gpus) models.insert(g.model);
    }
  }
  if (models.empty()) {
    return absl::NotFoundError(absl::StrCat("pool: pool ", spec.pool, " has no GPUs to size for"));
  }
  // (charge, kind: 0 MIG / 1 fraction / 2 whole, model) -> form.
  using Key = std::tuple<int64_t, int, std::string>;
  std::optional<Key> best_key;
  std::variant<int32_t, GpuFraction, MigShape> best;
  auto consider = [&](Key key, std::variant<int32_t, GpuFraction, MigShape> form) {
    if (!best_key.has_value() || key < *best_key) {
      best_key = std::move(key);
      best = std::move(form);
    }
  };
  for (const std::string& name : models) {
    const GpuModel* model = state.FindGpuModel(name);
    if (model == nullptr) continue;
    for (const MigProfile& p : model->mig_profiles) {
      if (p.media_extensions || p.memory_mib < memory_mib) continue;
      const int64_t milli = MigMilli(model->mig_profiles, p);
      consider({milli, 0, name}, MigShape{p.name, milli});
    }
    if (memory_mib <= model->memory_mib) {
      const int64_t milli = std::max<int64_t>(
          1, (memory_mib * kMilliPerGpu + model->memory_mib - 1) / model->memory_mib);
      consider({milli, 1, name}, GpuFraction{milli, memory_mib});
    } else {
      const int64_t gpus = (memory_mib + model->memory_mib - 1) / model->memory_mib;
      if (gpus <= kMaxWholeGpusPerMember) {
        consider({gpus * kMilliPerGpu, 2, name}, static_cast<int32_t>(gpus));
      }
    }
  }
  if (!best_key.has_value()) {
    return TooLarge(absl::StrCat("needs ", memory_mib, " MiB: more than ", kMaxWholeGpusPerMember,
                                 " GPUs of any allowed model"));
  }
  return best;
}

}  // namespace arbiter::core
