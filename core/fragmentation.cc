#include "core/fragmentation.h"

#include <algorithm>
#include <limits>

namespace arbiter::core {

void FragmentationModel::Reset(const DemandProfile& profile, bool host_term) {
  shapes_.clear();
  weights_.clear();
  cache_.clear();
  cpu_per_gpu_milli_ = 0;
  memory_mib_per_gpu_milli_ = 0;
  int64_t gpu_tasks = 0;
  for (const DemandProfile::Entry& e : profile.Entries()) {
    if (e.shape.gpus > 0) gpu_tasks += e.count;
  }
  if (gpu_tasks == 0) return;
  double cpu = 0, memory = 0, gpu = 0;
  for (const DemandProfile::Entry& e : profile.Entries()) {
    cpu += static_cast<double>(e.count) * static_cast<double>(e.shape.cpu_milli);
    memory += static_cast<double>(e.count) * static_cast<double>(e.shape.memory_mib);
    gpu += static_cast<double>(e.count) * e.shape.gpus * static_cast<double>(e.shape.gpu_milli);
  }
  if (host_term) {
    cpu_per_gpu_milli_ = cpu / gpu;
    memory_mib_per_gpu_milli_ = memory / gpu;
  }
  for (const DemandProfile::Entry& e : profile.Entries()) {
    if (e.shape.gpus == 0) continue;  // Host-only work fragments no GPU.
    shapes_.push_back(e.shape);
    weights_.push_back(static_cast<double>(e.count) / static_cast<double>(gpu_tasks));
  }
}

double FragmentationModel::Expected(const FreeCapacity& free) const {
  if (shapes_.empty()) return 0;
  CacheKey key(free.free_milli.begin(), free.free_milli.end());
  key.push_back(free.free_cpu_milli);
  key.push_back(free.free_memory_mib);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const double value = Compute(free);
  cache_.emplace(std::move(key), value);
  return value;
}

double FragmentationModel::Compute(const FreeCapacity& free) const {
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
    int64_t fragment = 0;
    if (m.cpu_milli > free.free_cpu_milli || m.memory_mib > free.free_memory_mib) {
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
