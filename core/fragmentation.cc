#include "core/fragmentation.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_split.h"

namespace arbiter::core {
namespace {

// Milli-GPU that an entry of the mix asks for (all its tasks).
double GpuDemand(const DemandProfile::Entry& e) {
  return static_cast<double>(e.count) * e.shape.gpus * static_cast<double>(e.shape.gpu_milli);
}

// Milli-GPU that the whole mix asks for.
double GpuDemand(const DemandProfile& profile) {
  double total = 0;
  for (const DemandProfile::Entry& e : profile.Entries()) total += GpuDemand(e);
  return total;
}

}  // namespace

void FragmentationModel::Reset(const DemandProfile& profile, Measure measure,
                               const ClusterCapacity& cluster) {
  measure_ = measure;
  pressure_.clear();
  type_pressure_.clear();
  shapes_.clear();
  weights_.clear();
  allowed_.clear();
  model_bits_.clear();
  cache_.clear();
  cpu_per_gpu_milli_ = 0;
  memory_mib_per_gpu_milli_ = 0;
  if (measure == Measure::kFgd) {
    ResetFgd(profile);
    return;
  }
  int64_t gpu_tasks = 0;
  for (const DemandProfile::Entry& e : profile.Entries()) {
    if (e.shape.gpus > 0) gpu_tasks += e.count;
  }
  if (gpu_tasks == 0) return;
  double cpu = 0, memory = 0, gpu = 0;
  for (const DemandProfile::Entry& e : profile.Entries()) {
    cpu += static_cast<double>(e.count) * static_cast<double>(e.shape.cpu_milli);
    memory += static_cast<double>(e.count) * static_cast<double>(e.shape.memory_mib);
    gpu += GpuDemand(e);
  }
  cpu_per_gpu_milli_ = cpu / gpu;
  memory_mib_per_gpu_milli_ = memory / gpu;
  for (const DemandProfile::Entry& e : profile.Entries()) {
    if (e.shape.gpus == 0) continue;  // Host-only work fragments no GPU.
    shapes_.push_back(e.shape);
    weights_.push_back(static_cast<double>(e.count) / static_cast<double>(gpu_tasks));
    // Any model: Arbiter's measure leaves GPU models to ModelPressure, and
    // with no model bits the cache keys no model and hashes no name.
    allowed_.push_back(0);
  }
  SetPressure(profile, cluster.gpus_by_model);
  SetTypePressure(profile, cluster.node_types);
}

void FragmentationModel::SetPressure(const DemandProfile& profile,
                                     const std::map<std::string, int64_t>& gpus_by_model) {
  int64_t all_gpus = 0;
  for (const auto& [model, gpus] : gpus_by_model) all_gpus += gpus;
  const double volume = GpuDemand(profile);
  if (all_gpus == 0 || volume == 0) return;
  for (const DemandProfile::Entry& e : profile.Entries()) {
    if (e.shape.gpus == 0 || e.shape.models.empty()) continue;
    const std::vector<std::string> models = absl::StrSplit(e.shape.models, '|');
    int64_t usable = 0;
    for (const std::string& m : models) {
      auto it = gpus_by_model.find(m);
      if (it != gpus_by_model.end()) usable += it->second;
    }
    if (usable == 0) continue;
    const double share = GpuDemand(e) / volume;
    for (const std::string& m : models) {
      pressure_[m] += share * static_cast<double>(all_gpus) / static_cast<double>(usable);
    }
  }
}

void FragmentationModel::SetTypePressure(const DemandProfile& profile,
                                         const std::vector<NodeType>& types) {
  int64_t all_gpus = 0;
  for (const NodeType& t : types) all_gpus += t.cluster_gpus;
  const double volume = GpuDemand(profile);
  if (all_gpus == 0 || volume == 0) return;
  std::vector<double> pressure(types.size(), 0);
  for (const DemandProfile::Entry& e : profile.Entries()) {
    // Limited to models: ModelPressure's.
    if (e.shape.gpus == 0 || !e.shape.models.empty()) continue;
    auto holds = [&](const NodeType& t) {
      return t.gpus >= e.shape.gpus && t.cpu_milli >= e.shape.cpu_milli &&
             t.memory_mib >= e.shape.memory_mib;
    };
    int64_t usable = 0;
    for (const NodeType& t : types) usable += holds(t) ? t.cluster_gpus : 0;
    if (usable == 0 || 2 * usable > all_gpus) continue;  // None, or not scarce.
    const double share = GpuDemand(e) / volume;
    for (size_t i = 0; i < types.size(); ++i) {
      if (holds(types[i])) {
        pressure[i] += share * static_cast<double>(all_gpus) / static_cast<double>(usable);
      }
    }
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (pressure[i] == 0) continue;
    const NodeType& t = types[i];
    type_pressure_[t.gpu_model].push_back({t.gpus, t.cpu_milli, t.memory_mib, pressure[i]});
  }
}

double FragmentationModel::TypePressure(const FreeCapacity& node) const {
  if (type_pressure_.empty()) return 0;  // No scarce demand: no lookup.
  auto it = type_pressure_.find(node.gpu_model);
  if (it == type_pressure_.end()) return 0;
  for (const TypedPressure& t : it->second) {
    if (t.gpus == node.node_gpus && t.cpu_milli == node.node_cpu_milli &&
        t.memory_mib == node.node_memory_mib) {
      return t.pressure;
    }
  }
  return 0;
}

double FragmentationModel::ModelPressure(absl::string_view gpu_model) const {
  if (pressure_.empty()) return 0;  // No limited demand: no lookup on the hot path.
  auto it = pressure_.find(gpu_model);
  return it == pressure_.end() ? 0 : it->second;
}

void FragmentationModel::ResetFgd(const DemandProfile& profile) {
  // Shapes by count, memory not counted.
  std::map<TaskShape, int64_t> counts;
  int64_t total = 0;
  for (const DemandProfile::Entry& e : profile.Entries()) {
    TaskShape shape = e.shape;
    shape.memory_mib = 0;
    counts[shape] += e.count;
    total += e.count;
  }
  if (total == 0) return;
  std::vector<std::pair<int64_t, TaskShape>> by_count;
  for (const auto& [shape, count] : counts) by_count.push_back({-count, shape});
  std::sort(by_count.begin(), by_count.end());
  // The most asked for until they cover 95% of the tasks.
  constexpr double kTypicalShare = 0.95;
  int64_t covered = 0;
  size_t n = 0;
  while (n < by_count.size() && static_cast<double>(covered) < kTypicalShare * total) {
    covered += -by_count[n++].first;
  }
  bool any_gpu = false;
  for (size_t i = 0; i < n; ++i) {
    shapes_.push_back(by_count[i].second);
    weights_.push_back(static_cast<double>(-by_count[i].first) / static_cast<double>(covered));
    allowed_.push_back(AllowedBits(by_count[i].second.models));
    any_gpu |= by_count[i].second.gpus > 0;
  }
  if (!any_gpu) {  // Only host-only work: nothing to measure.
    shapes_.clear();
    weights_.clear();
    allowed_.clear();
  }
}

uint64_t FragmentationModel::AllowedBits(const std::string& models) {
  if (models.empty()) return 0;
  uint64_t bits = 0;
  for (absl::string_view model : absl::StrSplit(models, '|')) {
    auto it = model_bits_.find(model);
    if (it == model_bits_.end()) {
      if (model_bits_.size() == 64) return 0;  // Out of bits: counted as any model.
      it = model_bits_.emplace(std::string(model), static_cast<int64_t>(model_bits_.size())).first;
    }
    bits |= uint64_t{1} << it->second;
  }
  return bits;
}

int64_t FragmentationModel::ModelKey(absl::string_view gpu_model) const {
  // No shape limited to models (the common case): the model changes
  // nothing, and the hot path hashes no name.
  if (model_bits_.empty()) return kUnnamedModel;
  if (gpu_model.empty()) return kMixedModels;
  auto it = model_bits_.find(gpu_model);
  return it == model_bits_.end() ? kUnnamedModel : it->second;
}

double FragmentationModel::Expected(const FreeCapacity& free) const {
  if (shapes_.empty()) return 0;
  const int64_t model_key = ModelKey(free.gpu_model);
  CacheKey key(free.free_milli.begin(), free.free_milli.end());
  key.push_back(free.free_cpu_milli);
  key.push_back(free.free_memory_mib);
  key.push_back(model_key);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const double value = Compute(free, model_key);
  cache_.emplace(std::move(key), value);
  return value;
}

double FragmentationModel::Compute(const FreeCapacity& free, int64_t model_key) const {
  int64_t total_free = 0;
  int64_t partial_free = 0;
  int32_t empty_gpus = 0;
  for (int64_t f : free.free_milli) {
    total_free += f;
    if (f == 1000) {
      ++empty_gpus;
    } else {
      partial_free += f;
    }
  }
  if (total_free == 0) return 0;
  // Free GPU capacity the node's free CPU and memory cannot feed at the mix's
  // ratios.
  constexpr double kUnbounded = std::numeric_limits<double>::infinity();
  const double fed_by_cpu = cpu_per_gpu_milli_ > 0
                                ? static_cast<double>(free.free_cpu_milli) / cpu_per_gpu_milli_
                                : kUnbounded;
  const double fed_by_memory =
      memory_mib_per_gpu_milli_ > 0
          ? static_cast<double>(free.free_memory_mib) / memory_mib_per_gpu_milli_
          : kUnbounded;
  double expected =
      std::max(0.0, static_cast<double>(total_free) - std::min(fed_by_cpu, fed_by_memory));
  for (size_t i = 0; i < shapes_.size(); ++i) {
    const TaskShape& m = shapes_[i];
    const bool accessible = allowed_[i] == 0 || model_key == kMixedModels ||
                            (model_key >= 0 && ((allowed_[i] >> model_key) & 1) != 0);
    // FGD's measure counts memory nowhere, and every free GPU as a fragment
    // for host-only work.
    const bool memory_short = measure_ == Measure::kArbiter && m.memory_mib > free.free_memory_mib;
    int64_t fragment = 0;
    if (m.gpus == 0 || !accessible || m.cpu_milli > free.free_cpu_milli || memory_short) {
      fragment = total_free;
    } else if (m.fractional()) {
      // free_milli is sorted ascending: every GPU below d is a fragment.
      for (int64_t f : free.free_milli) {
        if (f >= m.gpu_milli) break;
        fragment += f;
      }
    } else {
      fragment = empty_gpus < m.gpus ? total_free : partial_free;
    }
    expected += weights_[i] * static_cast<double>(fragment);
  }
  return expected;
}

}  // namespace arbiter::core
