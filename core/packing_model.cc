#include "core/packing_model.h"

#include <algorithm>
#include <tuple>

namespace arbiter::core {
namespace {

// The packer's view of one member of `spec`.
TaskShape ShapeOf(const CapacityRequestSpec& spec) {
  TaskShape shape;
  if (spec.shape.is_mig()) {
    // A MIG instance takes no part in whole/fraction fragmentation; only its
    // host demand counts.
    shape.cpu_milli = spec.shape.cpu_milli;
    shape.memory_mib = spec.shape.memory_mib;
    return shape;
  }
  shape.gpus = spec.shape.is_whole() ? spec.shape.whole_gpus() : 1;
  shape.gpu_milli = spec.shape.is_whole() ? kMilliPerGpu : spec.shape.fraction().gpu_milli;
  shape.cpu_milli = spec.shape.cpu_milli;
  shape.memory_mib = spec.shape.memory_mib;
  shape.models = ModelSetKey(spec.gpu_models);
  return shape;
}

}  // namespace

void PackingModel::Observe(const CapacityRequestSpec& spec,
                           absl::FunctionRef<ClusterCapacity()> cluster) {
  if (spec.shape.is_mig()) mig_demand_[spec.shape.mig().profile] += spec.members;
  demand_.Observe(ShapeOf(spec), spec.members);
  observed_since_refresh_ += spec.members;
  if (policy_ == Policy::kBestFit) return;  // Scores with no model.
  const int64_t epoch = std::max<int64_t>(32, std::min<int64_t>(1024, demand_.total() / 8));
  if (fragmentation_.empty() || observed_since_refresh_ >= epoch) {
    if (policy_ == Policy::kArbiter) {
      fragmentation_.Reset(demand_, FragmentationModel::Measure::kArbiter, cluster());
      share_prices_.Reset(demand_);
    } else {
      fragmentation_.Reset(demand_, FragmentationModel::Measure::kFgd);
    }
    observed_since_refresh_ = 0;
  }
}

std::vector<std::string> PackingModel::MigFillOrder(const GpuModel& model) const {
  std::vector<const MigProfile*> profiles;
  for (const MigProfile& p : model.mig_profiles) profiles.push_back(&p);
  auto demand = [&](const MigProfile* p) {
    auto it = mig_demand_.find(p->name);
    return it == mig_demand_.end() ? int64_t{0} : it->second;
  };
  std::sort(profiles.begin(), profiles.end(), [&](const MigProfile* a, const MigProfile* b) {
    return std::make_tuple(-demand(a), -a->compute_slices, -a->memory_slices, a->name) <
           std::make_tuple(-demand(b), -b->compute_slices, -b->memory_slices, b->name);
  });
  std::vector<std::string> order;
  for (const MigProfile* p : profiles) order.push_back(p->name);
  return order;
}

MigMix PackingModel::MigMixOf(const GpuModel& model) const {
  MigMix mix;
  for (const MigProfile& p : model.mig_profiles) {
    auto it = mig_demand_.find(p.name);
    if (it != mig_demand_.end() && it->second > 0) mix.push_back({p.name, it->second});
  }
  return mix;
}

}  // namespace arbiter::core
