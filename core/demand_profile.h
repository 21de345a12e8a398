// DemandProfile: the mix of task shapes the cluster has been asked for,
// learnt online from the requests the arbiter sees (never from the future).
// The packer scores a placement by how much it fragments the remaining
// capacity for this mix (see core/fragmentation.h).
//
// Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace arbiter::core {

// The per-member shape of a task, as the packer sees it: `gpus` whole GPUs
// (gpu_milli 1000), one fraction (gpus 1, gpu_milli < 1000), or host only
// (gpus 0), on the GPU models `models` allows.
struct TaskShape {
  int32_t gpus = 0;
  int64_t gpu_milli = 0;  // Per GPU.
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  // The GPU models the task may run on, sorted, without repeats, joined by
  // '|' (ModelSetKey); empty: any model.
  std::string models;

  bool fractional() const { return gpus == 1 && gpu_milli < 1000; }
  auto key() const { return std::tie(gpus, gpu_milli, cpu_milli, memory_mib, models); }
  bool operator<(const TaskShape& o) const { return key() < o.key(); }
  bool operator==(const TaskShape& o) const { return key() == o.key(); }
};

// The canonical TaskShape::models of a request's allowed models (any order,
// repeats allowed): sorted, deduplicated, joined by '|'.
std::string ModelSetKey(std::vector<std::string> models);

class DemandProfile {
 public:
  struct Entry {
    TaskShape shape;
    int64_t count = 0;
  };

  // At most this many distinct shapes are kept: memory and the cost of
  // rebuilding the packer's models stay bounded however long the arbiter
  // runs and however varied the requests' host sizes.
  static constexpr size_t kMaxShapes = 1024;

  // Counts `count` more tasks of `shape`. A new shape beyond kMaxShapes
  // first halves every count (dropping those that reach zero) until there
  // is room: the mix keeps its proportions and forgets rare old shapes.
  void Observe(const TaskShape& shape, int64_t count = 1);
  // Distinct shapes with their counts, ordered by shape.
  std::vector<Entry> Entries() const;
  int64_t total() const { return total_; }
  bool empty() const { return total_ == 0; }

 private:
  void Decay();

  std::map<TaskShape, int64_t> counts_;
  int64_t total_ = 0;
};

}  // namespace arbiter::core
