#include "core/placement.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "core/fragmentation.h"
#include "core/inventory_index.h"
#include "core/mig_fragmentation.h"
#include "core/packing_model.h"

namespace arbiter::core {
namespace {

// Distinct free amounts scored per node (nodes have at most 64 GPUs).
constexpr int kMaxGpusScored = 64;
// Members of a host-only gang that one node could hold, before host limits.
constexpr int64_t kMaxMembersPerNode = int64_t{1} << 30;

// Whether `gpu` may take work of `spec` running in `window`: an allowed model,
// and no reservation holds it for part of the window.
bool Allowed(const CapacityRequestSpec& spec, const Window& window, const Gpu& gpu) {
  if (!spec.allows_model(gpu.model)) return false;
  for (const auto& [start, end] : gpu.held) {
    if (start < window.end && window.start < end) return false;
  }
  return true;
}

// Whether `node` has the host capacity of `shape` for work running in
// `window`, beside what advance reservations hold on it for windows that
// overlap it (summed, though they may not overlap each other: cautious).
bool HostFits(const Node& node, const MemberShape& shape, const Window& window) {
  int64_t cpu = node.free_cpu_milli();
  int64_t memory = node.free_memory_mib();
  for (const Node::HostHold& h : node.host_held) {
    if (h.start < window.end && window.start < h.end) {
      cpu -= h.cpu_milli;
      memory -= h.memory_mib;
    }
  }
  return cpu >= shape.cpu_milli && memory >= shape.memory_mib;
}

// Whether every class already on `node` may share it with `cls`.
bool NodeAdmits(const State& state, const Node& node, WorkloadClass cls) {
  // Cordoned, draining, unreachable or failed: nothing new. (The index
  // leaves such nodes out; topology groups and unindexed scans do not.)
  if (!node.schedulable()) return false;
  for (size_t c = 0; c < node.class_members.size(); ++c) {
    if (node.class_members[c] > 0 &&
        !state.coexistence().Rule(static_cast<WorkloadClass>(c), cls).same_node) {
      return false;
    }
  }
  return true;
}

// Whether every class already on `gpu` may share it with `cls` at `needed`
// isolation (soft sharing for fractions, MIG for instances).
bool GpuAdmits(const State& state, const Gpu& gpu, WorkloadClass cls, Isolation needed) {
  return state.coexistence().GpuAdmits(gpu.class_mask(), cls, needed);
}

Placement HostPart(int32_t member, const Node& node, const CapacityRequestSpec& spec) {
  const MemberShape& shape = spec.shape;
  Placement p;
  p.workload_class = spec.workload_class;
  p.member = member;
  p.node_id = node.id;
  p.cpu_milli = shape.cpu_milli;
  p.memory_mib = shape.memory_mib;
  return p;
}

// The node's free capacity, sorted as FragmentationModel wants it.
FreeCapacity FreeOf(const Node& node) {
  FreeCapacity free;
  free.free_milli.reserve(node.gpus.size());
  for (const Gpu& gpu : node.gpus)
    free.free_milli.push_back(SharableOrEmpty(gpu) ? gpu.free_milli() : 0);
  std::sort(free.free_milli.begin(), free.free_milli.end());
  free.free_cpu_milli = node.free_cpu_milli();
  free.free_memory_mib = node.free_memory_mib();
  free.gpu_model = node.gpu_model();
  free.node_gpus = static_cast<int32_t>(node.gpus.size());
  free.node_cpu_milli = node.cpu_milli;
  free.node_memory_mib = node.memory_mib;
  return free;
}

// `free` after taking `take` milli from one GPU that has `had` free, and the
// member's host share.
FreeCapacity After(FreeCapacity free, const MemberShape& shape, int64_t had, int64_t take,
                   int32_t count) {
  for (int32_t n = 0; n < count; ++n) {
    auto it = std::lower_bound(free.free_milli.begin(), free.free_milli.end(), had);
    *it = had - take;
  }
  std::sort(free.free_milli.begin(), free.free_milli.end());
  free.free_cpu_milli -= shape.cpu_milli;
  free.free_memory_mib -= shape.memory_mib;
  return free;
}

// Score of a candidate, lower is better. Arbiter's policy: for a fraction,
// the share value it loses on the node (NodeShareLoss, in micro-GPU) plus
// what it takes from work limited to the node's GPU model (PressureCost);
// then the growth of the node's expected fragmentation for the learnt demand
// mix (0 without a mix), plus, for whole GPUs, PressureCost and the value of
// the holes their host use leaves unfed (NodeShareLoss); then how much GPU
// capacity the node keeps free (best fit); then node id and GPU index. The
// published policies (ReferenceScore) rank by their own whole-number node
// score instead.
using Score = std::tuple<int64_t, int64_t, int64_t, int64_t, int32_t>;

// Growth in micro-GPU, rounded, so that floating-point noise never decides
// between candidates that are equal; ties fall to the rest of the Score.
int64_t FragmentGrowth(const State& state, const FreeCapacity& before, const FreeCapacity& after) {
  const FragmentationModel& model = state.fragmentation();
  if (model.empty()) return 0;
  return std::llround((model.Expected(after) - model.Expected(before)) * 1000.0);
}

// What the node's shared GPUs' holes are worth as its free host can feed
// them together (SharePrices::FedHolesValue), in GPUs.
double FedHoles(const SharePrices& prices, const FreeCapacity& free) {
  return prices.FedHolesValue(free.free_milli, free.free_cpu_milli, free.free_memory_mib);
}

// Whether the node's free host feeds all its holes beside its empty GPUs
// (SharePrices::FeedsAll).
bool FeedsAll(const SharePrices& prices, const FreeCapacity& free) {
  int64_t holes = 0;
  int64_t empty_gpus = 0;
  for (int64_t f : free.free_milli) {
    if (f >= kMilliPerGpu) {
      ++empty_gpus;
    } else if (f > 0) {
      ++holes;
    }
  }
  return prices.FeedsAll(holes, empty_gpus, free.free_cpu_milli, free.free_memory_mib);
}

// The share value a placement loses on the node, in micro-GPU: for a
// fraction of `take` on a GPU with `had` free, the value of the node's holes
// before (an empty GPU worth a GPU) less their value after and less the
// fraction's price; for whole GPUs (take 0), what the holes lose because the
// node's host can no longer feed them. Equal to SharePrices::Loss while the
// host feeds all the node's holes before and after (FeedsAll).
int64_t NodeShareLoss(const State& state, const FreeCapacity& before, const FreeCapacity& after,
                      int64_t had, int64_t take) {
  const SharePrices& prices = state.share_prices();
  if (prices.empty()) return 0;
  if (FeedsAll(prices, before) && FeedsAll(prices, after)) {
    return take == 0 ? 0 : std::llround(prices.Loss(had, take) * 1e6);
  }
  double lost = FedHoles(prices, before) - FedHoles(prices, after);
  if (take > 0) lost += (had == kMilliPerGpu ? 1.0 : 0.0) - prices.Price(take);
  return std::llround(std::max(0.0, lost) * 1e6);
}

int64_t TotalFree(const FreeCapacity& free) {
  int64_t total = 0;
  for (int64_t f : free.free_milli) total += f;
  return total;
}

// What taking `take` milli of a node's GPUs costs the work limited to its
// model or to nodes like it, in micro-GPU: (ModelPressure + TypePressure) x
// take.
int64_t PressureCost(const State& state, const FreeCapacity& node, int64_t take) {
  const FragmentationModel& model = state.fragmentation();
  return std::llround((model.ModelPressure(node.gpu_model) + model.TypePressure(node)) *
                      static_cast<double>(take) * 1000.0);
}

// The whole-number node score (0-100, higher is better) of the FGD paper's
// simulator for its two published policies, which kFgd and kBestFit
// reproduce (docs/packing.md):
//   kFgd:     100 x sigmoid(fragmentation removed / 1000 milli-GPU), the
//             fragmentation being FGD's measure for the typical demand;
//   kBestFit: 100 x (1 - (free CPU after / 128 cores + free GPU after / 8
//             GPUs) / 2), 128 cores and 8 GPUs being the largest node of
//             the paper's cluster.
// Both truncate toward zero as the simulator does; equal scores go to the
// node that comes first (the simulator's first node name).
int64_t PublishedNodeScore(const State& state, const FreeCapacity& before,
                           const FreeCapacity& after) {
  if (state.packing_policy() == State::PackingPolicy::kFgd) {
    const FragmentationModel& model = state.fragmentation();
    const double removed = model.empty() ? 0 : model.Expected(before) - model.Expected(after);
    return static_cast<int64_t>(100.0 / (1.0 + std::exp(-removed / 1000.0)));
  }
  constexpr double kLargestNodeCpuMilli = 128000;
  constexpr double kLargestNodeGpuMilli = 8000;
  const double left = 0.5 * static_cast<double>(after.free_cpu_milli) / kLargestNodeCpuMilli +
                      0.5 * static_cast<double>(TotalFree(after)) / kLargestNodeGpuMilli;
  return static_cast<int64_t>((1.0 - left) * 100.0);
}

bool PublishedPolicy(const State& state) {
  return state.packing_policy() != State::PackingPolicy::kArbiter;
}

// The Score of a published policy: its node score, then the node, then (best
// fit's choice of GPU for a fraction) the GPU that keeps least free, then
// the GPU index (FGD's choice: the first GPU with the node's best score).
Score ReferenceScore(const State& state, const FreeCapacity& before, const FreeCapacity& after,
                     int64_t node_id, int64_t gpu_left, int32_t gpu_index) {
  const bool best_fit = state.packing_policy() == State::PackingPolicy::kBestFit;
  return Score{-PublishedNodeScore(state, before, after), node_id, best_fit ? gpu_left : 0, 0,
               gpu_index};
}

// Best node for `whole_gpus` exclusive GPUs (0: host only).
std::optional<Placement> PlaceWhole(const State& state, const CapacityRequestSpec& spec,
                                    const Window& window, const std::vector<size_t>& candidates,
                                    int32_t member) {
  const int32_t k = spec.shape.whole_gpus();
  const Node* best = nullptr;
  Score best_score;
  for (size_t i : candidates) {
    const Node& node = state.nodes()[i];
    if (!HostFits(node, spec.shape, window) || !NodeAdmits(state, node, spec.workload_class))
      continue;
    int32_t empty = 0;
    for (const Gpu& gpu : node.gpus) {
      if (gpu.empty() && Allowed(spec, window, gpu)) ++empty;
    }
    if (empty < k) continue;
    const FreeCapacity before = FreeOf(node);
    const FreeCapacity after = After(before, spec.shape, kMilliPerGpu, kMilliPerGpu, k);
    const Score score = PublishedPolicy(state)
                            ? ReferenceScore(state, before, after, node.id, 0, 0)
                            : Score{0,
                                    FragmentGrowth(state, before, after) +
                                        PressureCost(state, before, int64_t{k} * kMilliPerGpu) +
                                        NodeShareLoss(state, before, after, 0, 0),
                                    TotalFree(after), node.id, 0};
    if (best == nullptr || score < best_score) {
      best = &node;
      best_score = score;
    }
  }
  if (best == nullptr) return std::nullopt;
  Placement p = HostPart(member, *best, spec);
  for (const Gpu& gpu : best->gpus) {
    if (static_cast<int32_t>(p.gpu_indices.size()) == k) break;
    if (gpu.empty() && Allowed(spec, window, gpu)) p.gpu_indices.push_back(gpu.index);
  }
  p.gpu_milli = kMilliPerGpu;
  p.gpu_memory_mib = p.gpu_indices.empty() ? 0 : best->gpus[p.gpu_indices[0]].memory_mib;
  p.exclusive = true;
  for (int32_t g : p.gpu_indices) p.mig_layout_cleared |= !best->gpus[g].mig_layout.empty();
  return p;
}

// Best GPU for a fraction. Each distinct free amount on a node is one
// candidate (GPUs with the same free amount are interchangeable).
std::optional<Placement> PlaceFraction(const State& state, const CapacityRequestSpec& spec,
                                       const Window& window, const std::vector<size_t>& candidates,
                                       int32_t member) {
  const GpuFraction& f = spec.shape.fraction();
  const Node* best_node = nullptr;
  int32_t best_gpu = -1;
  Score best_score;
  for (size_t i : candidates) {
    const Node& node = state.nodes()[i];
    if (!HostFits(node, spec.shape, window) || !NodeAdmits(state, node, spec.workload_class))
      continue;
    std::optional<FreeCapacity> before;
    int64_t tried[kMaxGpusScored];
    int tried_count = 0;
    for (const Gpu& gpu : node.gpus) {
      if (!SharableOrEmpty(gpu) || !Allowed(spec, window, gpu)) continue;
      if (!GpuAdmits(state, gpu, spec.workload_class, Isolation::kSoftSharing)) continue;
      if (gpu.free_milli() < f.gpu_milli || gpu.free_memory_mib() < f.memory_mib) continue;
      const int64_t had = gpu.free_milli();
      if (std::find(tried, tried + tried_count, had) != tried + tried_count) continue;
      if (tried_count < kMaxGpusScored) tried[tried_count++] = had;
      if (!before.has_value()) before = FreeOf(node);
      const FreeCapacity after = After(*before, spec.shape, had, f.gpu_milli, 1);
      const Score score =
          PublishedPolicy(state)
              ? ReferenceScore(state, *before, after, node.id, had - f.gpu_milli, gpu.index)
              : Score{NodeShareLoss(state, *before, after, had, f.gpu_milli) +
                          PressureCost(state, *before, f.gpu_milli),
                      FragmentGrowth(state, *before, after), had - f.gpu_milli, node.id, gpu.index};
      if (best_node == nullptr || score < best_score) {
        best_node = &node;
        best_gpu = gpu.index;
        best_score = score;
      }
    }
  }
  if (best_node == nullptr) return std::nullopt;
  Placement p = HostPart(member, *best_node, spec);
  p.gpu_indices = {best_gpu};
  p.gpu_milli = f.gpu_milli;
  p.gpu_memory_mib = f.memory_mib;
  p.mig_layout_cleared = !best_node->gpus[best_gpu].mig_layout.empty();
  return p;
}

// Whether `gpu` may hold a MIG instance for `spec` in `window`.
bool MigAllowed(const State& state, const CapacityRequestSpec& spec, const Window& window,
                const Gpu& gpu) {
  return Allowed(spec, window, gpu) &&
         GpuAdmits(state, gpu, spec.workload_class, Isolation::kMigOnly);
}

// Whether an empty `gpu` may be partitioned for `spec` in `window`.
bool PartitionAllowed(const CapacityRequestSpec& spec, const Window& window, const Gpu& gpu) {
  return gpu.empty() && !gpu.exclusive && Allowed(spec, window, gpu);
}

// The index in `gpu`'s layout of a free instance of `profile`, or -1.
int32_t FreeInstance(const Gpu& gpu, const std::string& profile) {
  for (size_t i = 0; i < gpu.mig_layout.size(); ++i) {
    const MigInstance& inst = gpu.mig_layout[i];
    if (!inst.allocated && inst.profile == profile) return static_cast<int32_t>(i);
  }
  return -1;
}

int64_t FreeInstances(const Gpu& gpu) {
  int64_t n = 0;
  for (const MigInstance& inst : gpu.mig_layout) n += inst.allocated ? 0 : 1;
  return n;
}

// The demand's MIG mix per GPU model (State::MigMixOf), built once per model
// for one placement. Confined to that placement's thread.
class MigMixes {
 public:
  explicit MigMixes(const State& state) : state_(state) {}
  // REQUIRES: `model` is in the catalog.
  const MigMix& Of(const std::string& model) {
    for (const auto& [name, mix] : mixes_) {
      if (name == model) return mix;
    }
    mixes_.emplace_back(model, state_.MigMixOf(*state_.FindGpuModel(model)));
    return mixes_.back().second;
  }

 private:
  const State& state_;
  std::vector<std::pair<std::string, MigMix>> mixes_;
};

// The placement of one instance of `spec`'s profile on `node`'s GPU `gpu` at
// memory slot `start`, with its charge and memory.
Placement MigPlacement(const State& state, const CapacityRequestSpec& spec, int32_t member,
                       const Node& node, int32_t gpu, int32_t start) {
  const std::string& name = spec.shape.mig().profile;
  const GpuModel* model = state.FindGpuModel(node.gpus[gpu].model);
  const MigProfile* profile = FindMigProfile(model->mig_profiles, name);
  Placement p = HostPart(member, node, spec);
  p.gpu_indices = {gpu};
  p.mig_start = start;
  p.mig_profile = name;
  p.gpu_milli = MigMilli(model->mig_profiles, *profile);
  p.gpu_memory_mib = profile->memory_mib;
  return p;
}

// `p` with the new layout `layout` for its GPU, at the first instance of its
// profile.
Placement WithNewLayout(Placement p, std::vector<MigInstance> layout) {
  for (const MigInstance& inst : layout) {
    if (inst.profile == p.mig_profile) {
      p.mig_start = inst.start;
      break;
    }
  }
  p.mig_new_layout = std::move(layout);
  return p;
}

// A free instance of the wanted profile in an existing layout. Taking one
// from a GPU whose layout is fixed (an instance is allocated) lowers the
// stranded MIG capacity (core/mig_fragmentation.h) by the same amount on
// every such GPU, and never by more on an idle GPU, whose layout it would
// fix: so fixed GPUs come first, those with the fewest free instances left
// first (partitioned GPUs fill up); then idle GPUs, by the growth of their
// stranded capacity for the demand's mix, then the fewest free instances
// left; then node id and GPU index. Only idle GPUs are measured.
std::optional<Placement> PlaceMigInFreeInstance(const State& state, const CapacityRequestSpec& spec,
                                                const Window& window,
                                                const std::vector<size_t>& candidates,
                                                int32_t member, MigMixes& mixes) {
  using Key = std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int32_t>;
  const std::string& want = spec.shape.mig().profile;
  const Node* best_node = nullptr;
  int32_t best_gpu = -1;
  int32_t best_start = -1;
  Key best_key;
  for (size_t i : candidates) {
    const Node& node = state.nodes()[i];
    if (!HostFits(node, spec.shape, window) || !NodeAdmits(state, node, spec.workload_class))
      continue;
    for (const Gpu& gpu : node.gpus) {
      if (!MigAllowed(state, spec, window, gpu)) continue;
      const int32_t at = FreeInstance(gpu, want);
      if (at < 0) continue;
      const bool idle = gpu.empty();
      MigStranded growth;
      if (idle) {
        growth = MigStrandedGrowth(state.MigProfilesOf(gpu), gpu.mig_layout,
                                   static_cast<size_t>(at), mixes.Of(gpu.model));
      }
      const Key key{
          idle, growth.milli_slices, growth.milli_gpu, FreeInstances(gpu) - 1, node.id, gpu.index};
      if (best_node == nullptr || key < best_key) {
        best_node = &node;
        best_gpu = gpu.index;
        best_start = gpu.mig_layout[static_cast<size_t>(at)].start;
        best_key = key;
      }
    }
  }
  if (best_node == nullptr) return std::nullopt;
  return MigPlacement(state, spec, member, *best_node, best_gpu, best_start);
}

// An empty GPU of a model with the wanted profile, chosen like one whole GPU
// (least fragmentation growth), and given the layout that strands the least
// MIG capacity for the demand's mix (LeastStrandingMigLayout), ties going to
// PlanMigLayout's full layout.
std::optional<Placement> PlaceMigOnEmptyGpu(const State& state, const CapacityRequestSpec& spec,
                                            const Window& window,
                                            const std::vector<size_t>& candidates, int32_t member,
                                            MigMixes& mixes) {
  const std::string& want = spec.shape.mig().profile;
  const Node* best_node = nullptr;
  int32_t best_gpu = -1;
  Score best_score;
  std::vector<MigInstance> best_layout;
  for (size_t i : candidates) {
    const Node& node = state.nodes()[i];
    if (!HostFits(node, spec.shape, window) || !NodeAdmits(state, node, spec.workload_class))
      continue;
    std::optional<FreeCapacity> before;
    for (const Gpu& gpu : node.gpus) {
      if (!PartitionAllowed(spec, window, gpu)) continue;
      const GpuModel* model = state.FindGpuModel(gpu.model);
      const MigProfile* profile =
          model == nullptr ? nullptr : FindMigProfile(state.MigProfilesOf(gpu), want);
      if (profile == nullptr) continue;
      if (!before.has_value()) before = FreeOf(node);
      const FreeCapacity after = After(*before, spec.shape, kMilliPerGpu, kMilliPerGpu, 1);
      Score score{0, FragmentGrowth(state, *before, after), TotalFree(after), node.id, gpu.index};
      if (best_node == nullptr || score < best_score) {
        std::vector<MigInstance> layout =
            PlanMigLayout(state.MigProfilesOf(gpu), *profile, state.MigFillOrder(*model));
        if (layout.empty()) continue;
        best_node = &node;
        best_gpu = gpu.index;
        best_score = score;
        best_layout = std::move(layout);
      }
    }
  }
  if (best_node == nullptr) return std::nullopt;
  const Gpu& gpu = best_node->gpus[best_gpu];
  const std::vector<MigProfile>& profiles = state.MigProfilesOf(gpu);
  std::vector<MigInstance> layout = LeastStrandingMigLayout(
      profiles, *FindMigProfile(profiles, want), mixes.Of(gpu.model), best_layout);
  return WithNewLayout(MigPlacement(state, spec, member, *best_node, best_gpu, -1),
                       std::move(layout));
}

// The profiles of `profiles`, larger before smaller (compute, then memory
// slices), as the first-fit baseline fills an empty GPU.
std::vector<std::string> LargestFirst(const std::vector<MigProfile>& profiles) {
  std::vector<const MigProfile*> sorted;
  for (const MigProfile& p : profiles) sorted.push_back(&p);
  std::sort(sorted.begin(), sorted.end(), [](const MigProfile* a, const MigProfile* b) {
    return std::make_tuple(-a->compute_slices, -a->memory_slices, a->name) <
           std::make_tuple(-b->compute_slices, -b->memory_slices, b->name);
  });
  std::vector<std::string> names;
  for (const MigProfile* p : sorted) names.push_back(p->name);
  return names;
}

// The baseline (State::MigPackingPolicy::kFirstFit): the first GPU of
// `candidates` with a free instance of the profile, else the first empty GPU
// that has it, laid out by PlanMigLayout with larger profiles first.
std::optional<Placement> PlaceMigFirstFit(const State& state, const CapacityRequestSpec& spec,
                                          const Window& window,
                                          const std::vector<size_t>& candidates, int32_t member) {
  const std::string& want = spec.shape.mig().profile;
  for (size_t i : candidates) {
    const Node& node = state.nodes()[i];
    if (!HostFits(node, spec.shape, window) || !NodeAdmits(state, node, spec.workload_class))
      continue;
    for (const Gpu& gpu : node.gpus) {
      const int32_t at = MigAllowed(state, spec, window, gpu) ? FreeInstance(gpu, want) : -1;
      if (at >= 0) {
        return MigPlacement(state, spec, member, node, gpu.index,
                            gpu.mig_layout[static_cast<size_t>(at)].start);
      }
    }
  }
  for (size_t i : candidates) {
    const Node& node = state.nodes()[i];
    if (!HostFits(node, spec.shape, window) || !NodeAdmits(state, node, spec.workload_class))
      continue;
    for (const Gpu& gpu : node.gpus) {
      if (!PartitionAllowed(spec, window, gpu) || state.FindGpuModel(gpu.model) == nullptr) {
        continue;
      }
      const std::vector<MigProfile>& profiles = state.MigProfilesOf(gpu);
      const MigProfile* profile = FindMigProfile(profiles, want);
      if (profile == nullptr) continue;
      std::vector<MigInstance> layout = PlanMigLayout(profiles, *profile, LargestFirst(profiles));
      if (layout.empty()) continue;
      return WithNewLayout(MigPlacement(state, spec, member, node, gpu.index, -1),
                           std::move(layout));
    }
  }
  return std::nullopt;
}

bool MigFirstFit(const State& state, const CapacityRequestSpec& spec) {
  return spec.shape.is_mig() && state.mig_packing_policy() == State::MigPackingPolicy::kFirstFit;
}

// A MIG instance of the wanted profile: a free instance of an existing
// layout first, otherwise an empty GPU partitioned (kArbiter); or the
// first-fit baseline.
std::optional<Placement> PlaceMig(const State& state, const CapacityRequestSpec& spec,
                                  const Window& window, const std::vector<size_t>& candidates,
                                  int32_t member) {
  if (MigFirstFit(state, spec)) return PlaceMigFirstFit(state, spec, window, candidates, member);
  MigMixes mixes(state);
  if (auto p = PlaceMigInFreeInstance(state, spec, window, candidates, member, mixes)) return p;
  return PlaceMigOnEmptyGpu(state, spec, window, candidates, member, mixes);
}

// How many members of `spec` an empty `node` could host.
int64_t MembersPerEmptyNode(const State& state, const Node& node, const CapacityRequestSpec& spec) {
  const MemberShape& s = spec.shape;
  if (s.cpu_milli > node.cpu_milli || s.memory_mib > node.memory_mib) return 0;
  int64_t gpu_limit = 0;
  for (const Gpu& gpu : node.gpus) {
    if (!spec.allows_model(gpu.model)) continue;
    if (s.is_mig()) {
      const GpuModel* model = state.FindGpuModel(gpu.model);
      const MigProfile* profile =
          model == nullptr ? nullptr : FindMigProfile(state.MigProfilesOf(gpu), s.mig().profile);
      if (profile == nullptr) continue;
      for (const MigInstance& inst : PlanMigLayout(state.MigProfilesOf(gpu), *profile, {})) {
        gpu_limit += inst.profile == profile->name ? 1 : 0;
      }
    } else if (s.is_whole()) {
      ++gpu_limit;
    } else if (gpu.memory_mib >= s.fraction().memory_mib) {
      gpu_limit +=
          std::min(kMilliPerGpu / s.fraction().gpu_milli, gpu.memory_mib / s.fraction().memory_mib);
    }
  }
  if (s.is_whole())
    gpu_limit = s.whole_gpus() == 0 ? kMaxMembersPerNode : gpu_limit / s.whole_gpus();
  int64_t limit = gpu_limit;
  if (s.cpu_milli > 0) limit = std::min(limit, node.cpu_milli / s.cpu_milli);
  if (s.memory_mib > 0) limit = std::min(limit, node.memory_mib / s.memory_mib);
  return limit;
}

std::string ShapeText(const CapacityRequestSpec& spec) {
  std::string models = spec.gpu_models.empty() ? "any model" : absl::StrJoin(spec.gpu_models, "|");
  if (spec.shape.is_whole()) {
    return absl::StrCat(spec.members, " x ", spec.shape.whole_gpus(), " whole GPU (", models, ")");
  }
  if (spec.shape.is_mig()) {
    return absl::StrCat(spec.members, " x MIG ", spec.shape.mig().profile, " (", models, ")");
  }
  return absl::StrCat(spec.members, " x ", spec.shape.fraction().gpu_milli, " milli-GPU with ",
                      spec.shape.fraction().memory_mib, " MiB (", models, ")");
}

std::optional<Placement> PlaceMember(const State& state, const CapacityRequestSpec& spec,
                                     const Window& window, const std::vector<size_t>& candidates,
                                     int32_t member) {
  if (spec.shape.is_whole()) return PlaceWhole(state, spec, window, candidates, member);
  if (spec.shape.is_mig()) return PlaceMig(state, spec, window, candidates, member);
  return PlaceFraction(state, spec, window, candidates, member);
}

// One member on the best of the pool's indexed candidates, scored a batch at
// a time in best-fit order; the next batch only when none of one fits.
std::optional<Placement> PlaceMemberIndexed(const State& state, const CapacityRequestSpec& spec,
                                            const Window& window, int32_t member) {
  // Demand limited to some models: best fit fills a batch with the cluster's
  // smallest nodes, often of the models that demand needs (openb: the
  // 2-GPU T4 and P100 nodes come before every 8-GPU node), and ModelPressure
  // can only steer flexible work to the nodes it is shown. A larger batch
  // reaches the big nodes of the uncontended models.
  const size_t factor =
      state.fragmentation().has_model_pressure() ? PackingModel::kLimitedDemandBatchFactor : 1;
  const size_t batch = state.placement_candidates() * factor;
  // The published policies score every node, as the paper's simulator
  // does; the first-fit MIG baseline walks the pool in node order.
  if (batch == 0 || PublishedPolicy(state) || MigFirstFit(state, spec)) {
    return PlaceMember(state, spec, window, state.PoolNodes(spec.pool), member);
  }
  InventoryIndex::Cursor cursor(state.inventory().index(), spec, state.coexistence());
  std::vector<size_t> candidates;
  while (cursor.Next(batch, candidates)) {
    if (auto p = PlaceMember(state, spec, window, candidates, member)) return p;
    candidates.clear();
  }
  return std::nullopt;
}

// Places every member of `spec` on `candidates` (null: the pool, through its
// index), or none: on failure the nodes it touched are put back. Returns true
// when the whole gang is placed.
bool TryPlaceGang(State& state, const CapacityRequestSpec& spec, const Window& window,
                  const std::vector<size_t>* candidates, std::vector<Placement>& placed) {
  // Copies of the nodes as they were before this gang, to put back if it
  // does not fit whole (placements may have changed MIG layouts).
  std::vector<Node> before;
  for (int32_t m = 0; m < spec.members; ++m) {
    std::optional<Placement> p = candidates == nullptr
                                     ? PlaceMemberIndexed(state, spec, window, m)
                                     : PlaceMember(state, spec, window, *candidates, m);
    if (!p.has_value()) break;
    const bool copied = std::any_of(before.begin(), before.end(),
                                    [&](const Node& n) { return n.id == p->node_id; });
    if (!copied) before.push_back(*state.FindNode(p->node_id));
    state.ApplyPlacement(*p, +1);
    placed.push_back(std::move(*p));
  }
  if (static_cast<int32_t>(placed.size()) == spec.members) return true;
  for (Node& node : before) state.RestoreNode(std::move(node));
  placed.clear();
  return false;
}

// The groups a gang with a topology constraint may be placed in: one group
// per node (kSameNode) or per topology domain (kSameDomain; a node without a
// domain is its own), ordered by free GPU capacity, least first (best fit).
// REQUIRES: spec.topology != Topology::kAny.
std::vector<std::vector<size_t>> CandidateGroups(const State& state,
                                                 const CapacityRequestSpec& spec) {
  const std::vector<size_t>& pool = state.PoolNodes(spec.pool);
  std::map<std::string, std::vector<size_t>> by_key;
  for (size_t i : pool) {
    const Node& n = state.nodes()[i];
    const bool own = spec.topology == Topology::kSameNode || n.topology_domain.empty();
    by_key[own ? absl::StrCat("node:", n.id) : absl::StrCat("domain:", n.topology_domain)]
        .push_back(i);
  }
  std::vector<std::pair<std::pair<int64_t, std::string>, std::vector<size_t>>> groups;
  for (auto& [key, nodes] : by_key) {
    int64_t free = 0;
    for (size_t i : nodes) free += TotalFree(FreeOf(state.nodes()[i]));
    groups.push_back({{free, key}, std::move(nodes)});
  }
  std::sort(groups.begin(), groups.end());
  std::vector<std::vector<size_t>> out;
  for (auto& g : groups) out.push_back(std::move(g.second));
  return out;
}

}  // namespace

GangPlacement PlaceGang(State& state, const CapacityRequestSpec& spec, const Window& window) {
  GangPlacement out;
  // Without a topology constraint the whole pool is the one group (not
  // copied: placing members never changes which nodes a pool has).
  std::vector<std::vector<size_t>> owned;
  std::vector<const std::vector<size_t>*> groups;
  if (spec.topology == Topology::kAny) {
    groups.push_back(&state.PoolNodes(spec.pool));
  } else {
    owned = CandidateGroups(state, spec);
    for (const std::vector<size_t>& group : owned) groups.push_back(&group);
  }
  const bool indexed = spec.topology == Topology::kAny;
  for (const std::vector<size_t>* group : groups) {
    if (TryPlaceGang(state, spec, window, indexed ? nullptr : group, out.placements)) {
      out.result = FitResult::kPlaced;
      return out;
    }
  }
  // Could some group hold the whole gang once it is empty?
  int64_t best = 0;
  for (const std::vector<size_t>* group : groups) {
    int64_t capacity = 0;
    for (size_t i : *group) {
      capacity += MembersPerEmptyNode(state, state.nodes()[i], spec);
      if (capacity >= spec.members) break;
    }
    best = std::max(best, capacity);
    if (best >= spec.members) break;
  }
  const std::string where =
      spec.topology == Topology::kAny
          ? absl::StrCat("pool ", spec.pool)
          : absl::StrCat("any ", spec.topology == Topology::kSameNode ? "node" : "topology domain",
                         " of pool ", spec.pool);
  if (best >= spec.members) {
    out.result = FitResult::kNotNow;
    out.why = absl::StrCat(where, " has no free room now for ", ShapeText(spec));
  } else {
    out.result = FitResult::kNever;
    out.why = absl::StrCat(where, " cannot hold ", ShapeText(spec), " even when empty (room for ",
                           best, " members)");
  }
  return out;
}

}  // namespace arbiter::core
