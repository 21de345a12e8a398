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
// GPU models: FGD's measure counts all free GPU capacity of a node as the
// fragment of a shape that may not use the node's model (its "no access"
// case). Arbiter's measure leaves models out of the step term; instead
// ModelPressure says how much of each model the demand limited to some
// models needs, and the packer charges flexible work for taking it.
//
// The packer places a task where the sum grows least.
//
// Thread-compatible. Results are cached per distinct node state; the cache
// is valid until the next `Reset`.
#pragma once

#include <cstdint>
#include <map>
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
  // What the node holds when empty (its NodeType; FragmentationModel::
  // TypePressure).
  int32_t node_gpus = 0;
  int64_t node_cpu_milli = 0;
  int64_t node_memory_mib = 0;
};

// A kind of node: GPU model ("" for several), GPUs, CPU and memory, and the
// GPUs all nodes of the kind hold in the cluster.
struct NodeType {
  std::string gpu_model;
  int32_t gpus = 0;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t cluster_gpus = 0;
};

// The cluster as the pressures see it.
struct ClusterCapacity {
  std::map<std::string, int64_t> gpus_by_model;  // GPUs of each model.
  std::vector<NodeType> node_types;
};

class FragmentationModel {
 public:
  // Which measure the model computes.
  //   kArbiter: the step term over the GPU shapes of the mix (models not
  //             counted), plus the host term (above), and ModelPressure.
  //   kFgd:     FGD's measure exactly as its paper's simulator computes it:
  //             the "typical" shapes (the most asked for, by CPU, GPUs and
  //             models, memory not counted, until they cover 95% of the
  //             tasks) weighted by their share; host-only shapes included,
  //             each counting all the node's free GPU capacity; no host term.
  enum class Measure { kArbiter, kFgd };

  // Takes a snapshot of `profile` (shapes and weights) and clears the cache.
  // `cluster` sets ModelPressure and TypePressure (kArbiter only).
  void Reset(const DemandProfile& profile, Measure measure = Measure::kArbiter,
             const ClusterCapacity& cluster = {});
  bool empty() const { return shapes_.empty(); }

  // How much of a model's capacity the demand limited to some models needs,
  // with the mix scaled to fill the cluster: the sum over each limited shape
  // s of (its share of the GPU demand) x (GPUs of all models) / (GPUs of the
  // models s may use), for every model s may use. 0 for a model no limited
  // shape may use, and when no shape is limited. Flexible work placed on a
  // model of high pressure takes capacity that limited work cannot replace.
  double ModelPressure(absl::string_view gpu_model) const;
  // Whether some demand is limited to some models (a ModelPressure > 0).
  bool has_model_pressure() const { return !pressure_.empty(); }

  // The same for what a node must hold: the sum over each shape s that no
  // model limits, but that only nodes holding at most half of the cluster's
  // GPUs could hold when empty (enough GPUs, CPU and memory: e.g. 8 GPUs
  // with 120 cores, on a cluster where most 8-GPU nodes have 96), of (its
  // share of the GPU demand) x (GPUs of all nodes) / (GPUs of the nodes that
  // could hold it), for every type of node that could. 0 for every node when
  // no such shape is in the mix. Work placed on such a node takes capacity
  // that the demand only it can serve cannot replace. Demand half the
  // cluster can hold is not scarce of nodes, and adds nothing.
  double TypePressure(const FreeCapacity& node) const;

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
  void SetPressure(const DemandProfile& profile,
                   const std::map<std::string, int64_t>& gpus_by_model);
  void SetTypePressure(const DemandProfile& profile, const std::vector<NodeType>& types);

  Measure measure_ = Measure::kArbiter;
  std::vector<TaskShape> shapes_;
  std::vector<double> weights_;  // Sum to 1.
  // Per shape, the bits of the models it may use (FGD's measure); 0: any
  // model (every shape in Arbiter's measure, and a shape naming a model
  // beyond the 64 that have bits).
  std::vector<uint64_t> allowed_;
  absl::flat_hash_map<std::string, int64_t> model_bits_;  // Model -> bit, at most 64.
  absl::flat_hash_map<std::string, double> pressure_;     // Model -> ModelPressure.
  // GPU model -> the node types of that model with a TypePressure > 0.
  struct TypedPressure {
    int32_t gpus = 0;
    int64_t cpu_milli = 0;
    int64_t memory_mib = 0;
    double pressure = 0;
  };
  absl::flat_hash_map<std::string, std::vector<TypedPressure>> type_pressure_;
  // Host demand per milli-GPU of the mix (host-only tasks included).
  double cpu_per_gpu_milli_ = 0;
  double memory_mib_per_gpu_milli_ = 0;
  // Free milli per GPU (sorted), then free CPU, memory and ModelKey -> Expected.
  using CacheKey = absl::InlinedVector<int64_t, 11>;
  mutable absl::flat_hash_map<CacheKey, double> cache_;
};

}  // namespace arbiter::core
