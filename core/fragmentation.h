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
// The packer places a task where the sum grows least.
//
// Thread-compatible. Results are cached per distinct node state; the cache
// is valid until the next `Reset`.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"

#include "core/demand_profile.h"

namespace arbiter::core {

// A node's free capacity as the packer sees it. `free_milli` holds one entry
// per GPU (0 for a GPU held exclusively), in any order. Inline up to eight
// GPUs: the packer builds two of these per candidate it scores.
struct FreeCapacity {
  absl::InlinedVector<int64_t, 8> free_milli;
  int64_t free_cpu_milli = 0;
  int64_t free_memory_mib = 0;
};

class FragmentationModel {
 public:
  // Takes a snapshot of `profile` (shapes and weights) and clears the cache.
  // Without `host_term` the model is FGD's step term alone.
  void Reset(const DemandProfile& profile, bool host_term = true);
  bool empty() const { return shapes_.empty(); }

  // Expected fragment of a node in milli-GPU (0 when the model is empty).
  // REQUIRES: `free.free_milli` is sorted ascending (the cache key).
  double Expected(const FreeCapacity& free) const;

 private:
  double Compute(const FreeCapacity& free) const;

  std::vector<TaskShape> shapes_;
  std::vector<double> weights_;  // Sum to 1.
  // Host demand per milli-GPU of the mix (host-only tasks included).
  double cpu_per_gpu_milli_ = 0;
  double memory_mib_per_gpu_milli_ = 0;
  // Free milli per GPU (sorted), then free CPU and memory -> Expected.
  using CacheKey = absl::InlinedVector<int64_t, 10>;
  mutable absl::flat_hash_map<CacheKey, double> cache_;
};

}  // namespace arbiter::core
