#include "core/placement.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace arbiter::core {
namespace {

bool ModelAllowed(const CapacityRequestSpec& spec, const std::string& model) {
  return spec.gpu_models.empty() ||
         std::find(spec.gpu_models.begin(), spec.gpu_models.end(), model) != spec.gpu_models.end();
}

bool HostFits(const Node& node, const MemberShape& shape) {
  return node.free_cpu_milli() >= shape.cpu_milli && node.free_memory_mib() >= shape.memory_mib;
}

Placement HostPart(int32_t member, const Node& node, const MemberShape& shape) {
  Placement p;
  p.member = member;
  p.node_id = node.id;
  p.cpu_milli = shape.cpu_milli;
  p.memory_mib = shape.memory_mib;
  return p;
}

// Best node for `whole_gpus` exclusive GPUs: the one left with the fewest
// empty allowed GPUs afterwards, then the least free CPU.
std::optional<Placement> PlaceWhole(const State& state, const CapacityRequestSpec& spec,
                                    int32_t member) {
  const int32_t k = spec.shape.whole_gpus();
  const Node* best = nullptr;
  std::tuple<int64_t, int64_t, int64_t> best_key;
  for (size_t i : state.PoolNodes(spec.pool)) {
    const Node& node = state.nodes()[i];
    if (!HostFits(node, spec.shape)) continue;
    int64_t empty = 0;
    for (const Gpu& gpu : node.gpus) {
      if (gpu.empty() && ModelAllowed(spec, gpu.model)) ++empty;
    }
    if (empty < k) continue;
    auto key = std::make_tuple(empty - k, node.free_cpu_milli() - spec.shape.cpu_milli, node.id);
    if (best == nullptr || key < best_key) {
      best = &node;
      best_key = key;
    }
  }
  if (best == nullptr) return std::nullopt;
  Placement p = HostPart(member, *best, spec.shape);
  for (const Gpu& gpu : best->gpus) {
    if (static_cast<int32_t>(p.gpu_indices.size()) == k) break;
    if (gpu.empty() && ModelAllowed(spec, gpu.model)) p.gpu_indices.push_back(gpu.index);
  }
  p.gpu_milli = kMilliPerGpu;
  p.gpu_memory_mib = best->gpus[p.gpu_indices[0]].memory_mib;
  p.exclusive = true;
  return p;
}

// Best GPU for a fraction: an already shared GPU before an empty one, then the
// least milli-GPU and memory left over.
std::optional<Placement> PlaceFraction(const State& state, const CapacityRequestSpec& spec,
                                       int32_t member) {
  const GpuFraction& f = spec.shape.fraction();
  const Node* best_node = nullptr;
  int32_t best_gpu = -1;
  std::tuple<int, int64_t, int64_t, int64_t, int32_t> best_key;
  for (size_t i : state.PoolNodes(spec.pool)) {
    const Node& node = state.nodes()[i];
    if (!HostFits(node, spec.shape)) continue;
    for (const Gpu& gpu : node.gpus) {
      if (gpu.exclusive || !ModelAllowed(spec, gpu.model)) continue;
      if (gpu.free_milli() < f.gpu_milli || gpu.free_memory_mib() < f.memory_mib) continue;
      auto key = std::make_tuple(gpu.empty() ? 1 : 0, gpu.free_milli() - f.gpu_milli,
                                 gpu.free_memory_mib() - f.memory_mib, node.id, gpu.index);
      if (best_node == nullptr || key < best_key) {
        best_node = &node;
        best_gpu = gpu.index;
        best_key = key;
      }
    }
  }
  if (best_node == nullptr) return std::nullopt;
  Placement p = HostPart(member, *best_node, spec.shape);
  p.gpu_indices = {best_gpu};
  p.gpu_milli = f.gpu_milli;
  p.gpu_memory_mib = f.memory_mib;
  return p;
}

// How many members of `spec` an empty `node` could host.
int64_t MembersPerEmptyNode(const Node& node, const CapacityRequestSpec& spec) {
  const MemberShape& s = spec.shape;
  if (s.cpu_milli > node.cpu_milli || s.memory_mib > node.memory_mib) return 0;
  int64_t gpu_limit = 0;
  for (const Gpu& gpu : node.gpus) {
    if (!ModelAllowed(spec, gpu.model)) continue;
    if (s.is_whole()) {
      ++gpu_limit;
    } else if (gpu.memory_mib >= s.fraction().memory_mib) {
      gpu_limit +=
          std::min(kMilliPerGpu / s.fraction().gpu_milli, gpu.memory_mib / s.fraction().memory_mib);
    }
  }
  if (s.is_whole()) gpu_limit /= s.whole_gpus();
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
  return absl::StrCat(spec.members, " x ", spec.shape.fraction().gpu_milli, " milli-GPU with ",
                      spec.shape.fraction().memory_mib, " MiB (", models, ")");
}

}  // namespace

GangPlacement PlaceGang(State& state, const CapacityRequestSpec& spec) {
  GangPlacement out;
  for (int32_t m = 0; m < spec.members; ++m) {
    std::optional<Placement> p =
        spec.shape.is_whole() ? PlaceWhole(state, spec, m) : PlaceFraction(state, spec, m);
    if (!p.has_value()) break;
    state.ApplyPlacement(*p, +1);
    out.placements.push_back(std::move(*p));
  }
  if (static_cast<int32_t>(out.placements.size()) == spec.members) {
    out.result = FitResult::kPlaced;
    return out;
  }
  // All or nothing: give back what the partial gang took.
  for (auto it = out.placements.rbegin(); it != out.placements.rend(); ++it) {
    state.ApplyPlacement(*it, -1);
  }
  out.placements.clear();

  int64_t capacity = 0;
  for (size_t i : state.PoolNodes(spec.pool)) {
    capacity += MembersPerEmptyNode(state.nodes()[i], spec);
    if (capacity >= spec.members) break;
  }
  if (capacity >= spec.members) {
    out.result = FitResult::kNotNow;
    out.why = absl::StrCat("pool ", spec.pool, " has no free room now for ", ShapeText(spec));
  } else {
    out.result = FitResult::kNever;
    out.why = absl::StrCat("pool ", spec.pool, " cannot hold ", ShapeText(spec),
                           " even when empty (room for ", capacity, " members)");
  }
  return out;
}

}  // namespace arbiter::core
