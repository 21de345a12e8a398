// Expected GPU fragmentation of a node for a demand mix, in the spirit of
// FGD (Weng et al., USENIX ATC 2023): for one task shape m, the fragment of
// node n is the free GPU capacity on n that m cannot use:
//   - m does not fit the node's free CPU or memory: all free GPU capacity;
//   - m is a fraction d: the free capacity of every GPU with less than d free;
//   - m needs k whole GPUs: the free capacity of partly used GPUs, plus all
//     empty GPUs when fewer than k are empty;
//   - m needs no GPU: nothing.
// The expected fragment weighs each shape by its share of the demand.
//
// FGD's step function sees host scarcity only once a shape no longer fits,
// which is too late: CPU-hungry pods drain a node's CPU long before its GPUs,
// and the GPUs are stranded. So a second term, added to the first, counts the
// node's free GPU capacity that its free CPU (or memory) cannot feed at the
// demand's average ratio of CPU (memory) to GPU. On Alibaba's openb trace
// this term cuts the GPUs left unallocated at 100% arrived demand from about
// 302 (FGD's own level) to about 257 (docs/packing.md).
//
// A shape limited to some GPU models can use no GPU of another model: on a
// node of such a model all its free GPU capacity is the shape's fragment, as
// in FGD's own measure (its "no access" case).
//
// The packer places a task where the sum grows least.
//
// Thread-compatible. Results are cached per distinct node state; the cache
// is valid until the next `Reset`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"

#include "core/demand_profile.h"

namespace arbiter::core {

// A node's free capacity as the packer sees it. `free_milli` holds one entry
// per GPU (0 for a GPU held exclusively), in any order. `gpu_model` is the
// model of all the node's GPUs, or empty when they are of several models
// (then every shape counts as able to use them). Inline up to eight GPUs:
// the packer builds two of these per candidate it scores.
struct FreeCapacity {
  absl::InlinedVector<int64_t, 8> free_milli;
  int64_t free_cpu_milli = 0;
  int64_t free_memory_mib = 0;
  absl::string_view gpu_model;  // Points into the node's Gpu::model.
};

class FragmentationModel {
 public:
  // Which measure the model computes.
  //   kArbiter: the step term over the GPU shapes of the mix, plus the host
  //             term (above).
  //   kFgd:     FGD's measure exactly as its paper's simulator computes it:
  //             the "typical" shapes (the most asked for, by CPU, GPUs and
  //             models, memory not counted, until they cover 95% of the
  //             tasks) weighted by their share; host-only shapes included,
  //             each counting all the node's free GPU capacity; no host term.
  enum class Measure { kArbiter, kFgd };

  // Takes a snapshot of `profile` (shapes and weights) and clears the cache.
  void Reset(const DemandProfile& profile, Measure measure = Measure::kArbiter);
  bool empty() const { return shapes_.empty(); }

  // Expected fragment of a node in milli-GPU (0 when the model is empty).
  // REQUIRES: `free.free_milli` is sorted ascending (the cache key).
  double Expected(const FreeCapacity& free) const;

 private:
  // What the cache keys a node's model by: its bit in `model_bits_`, or
  // kUnnamedModel (a model no shape names) or kMixedModels.
  static constexpr int64_t kUnnamedModel = -1;
  static constexpr int64_t kMixedModels = -2;
  int64_t ModelKey(absl::string_view gpu_model) const;
  // The bits of TaskShape::models, giving bits to models not seen yet.
  uint64_t AllowedBits(const std::string& models);
  double Compute(const FreeCapacity& free, int64_t model_key) const;

  void ResetFgd(const DemandProfile& profile);

  Measure measure_ = Measure::kArbiter;
  std::vector<TaskShape> shapes_;
  std::vector<double> weights_;  // Sum to 1.
  // Per shape, the bits of the models it may use; 0: any model (also for a
  // shape naming a model beyond the 64 that have bits).
  std::vector<uint64_t> allowed_;
  absl::flat_hash_map<std::string, int64_t> model_bits_;  // Model -> bit, at most 64.
  // Host demand per milli-GPU of the mix (host-only tasks included).
  double cpu_per_gpu_milli_ = 0;
  double memory_mib_per_gpu_milli_ = 0;
  // Free milli per GPU (sorted), then free CPU, memory and ModelKey -> Expected.
  using CacheKey = absl::InlinedVector<int64_t, 11>;
  mutable absl::flat_hash_map<CacheKey, double> cache_;
};

}  // namespace arbiter::core
