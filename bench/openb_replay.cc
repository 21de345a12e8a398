// openb-replay: replays an arrival sequence of Alibaba's openb GPU trace
// through the core's packer (the PlaceGang that arbiterd runs) and reports
// the share of GPUs allocated as demand arrives, as the FGD paper does.
//
//   openb-replay --nodes NODES.csv --arrivals ARRIVALS.csv --out PLACEMENTS.csv
//                [--curve CURVE.csv] [--demand-profile PODS.csv]
//                [--candidates N] [--policy arbiter|fgd|best-fit]
//                [--mig-nodes SHARE --mig-model MODEL --mig-pods SHARE
//                 --mig-policy arbiter|first-fit --mig-layouts LAYOUTS.csv]
//
// Each pod is placed in file order, once, with no departures and no retries;
// a pod that fits nowhere fails and is dropped. Arbiter's packer learns the
// demand mix only from the pods that have arrived so far (optionally primed
// with a past trace in the pod-list format); it never reads ahead. The
// published policies (fgd, best-fit) reproduce the FGD paper's simulator:
// they score every node, and FGD given --demand-profile keeps the typical
// pods of that pod list for the whole run, as the simulator computes them
// from the workload before it starts (bench/openb/run-published).
//
// The CSVs are read by bench/csv.h (CRLF or LF, quoted fields, a BOM); a
// file without one of the columns named above is refused, naming it (a pod
// list given to --demand-profile may lack gpu_spec: any model).
//
// The trace gives no GPU memory for fractions, so a fraction asks for 1 MiB:
// the per-GPU memory check never binds here. Quotas and queueing are not part
// of this replay (one team, unlimited quota, no retries).
//
// MIG mode (any --mig-* share above 0; docs/packing.md, "MIG fragmentation,
// and a replay with MIG-partitioned nodes"): --mig-nodes of the GPU nodes, in
// node-file order and spread evenly (node i is chosen when
// floor((i + 1) x share) > floor(i x share)), become nodes of --mig-model
// (a model with a built-in MIG table, core/mig.h), with as many GPUs; and
// --mig-pods of the fractional pods, chosen the same way in arrival order,
// ask for the smallest profile of that model (+me profiles aside) whose
// charge (MigMilli) covers their gpu_milli, on that model only. A MIG pod
// counts its gpu_milli as arrived and its instance's charge as allocated.
// --mig-policy picks the packer's MIG placement (State::MigPackingPolicy).
// The placements CSV gains mig_profile and mig_start, the curve the MIG
// figures at the end of each point (mig_instances, mig_gpus: GPUs with an
// allocated instance; mig_free_slices on them; mig_stranded_slices and
// mig_stranded_milli_gpu: the expected stranded capacity on them for the mix
// of MIG pods arrived so far, core/mig_fragmentation.h), and --mig-layouts
// the final layout of every GPU of a MIG node. Every layout a placement
// changes is checked against NVIDIA's rules (ValidateMigLayout); a broken one
// stops the replay with exit status 3. Without the flags the output is what
// it was before MIG mode existed.
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include <CLI/CLI.hpp>

#include "bench/csv.h"
#include "core/arbitration.h"
#include "core/mig_fragmentation.h"
#include "core/placement.h"

namespace arbiter::bench {
namespace {

struct Pod {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t num_gpu = 0;
  int64_t gpu_milli = 0;
  std::vector<std::string> models;
};

// The rows of the CSV at `path` (bench/csv.h), which must have the
// `required` columns; exits with the reader's error otherwise.
std::vector<CsvRow> ReadRows(const std::string& path, const std::vector<std::string>& required) {
  absl::StatusOr<CsvTable> table = ReadCsvFile(path, required);
  if (!table.ok()) {
    std::cerr << "openb-replay: " << table.status().message() << "\n";
    std::exit(2);
  }
  return std::move(table->rows);
}

int64_t Int(const CsvRow& row, const std::string& col) {
  int64_t v = 0;
  auto it = row.find(col);
  if (it == row.end() || !absl::SimpleAtoi(it->second, &v)) {
    std::cerr << "openb-replay: bad or missing column " << col << "\n";
    std::exit(2);
  }
  return v;
}

// Reads pods from an arrival sequence (gpu_spec required) or, with
// `spec_optional`, from a pod list, where the paper's multi-GPU lists have no
// gpu_spec column (any model).
std::vector<Pod> ReadPods(const std::string& path, bool spec_optional = false) {
  std::vector<std::string> required = {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"};
  if (!spec_optional) required.push_back("gpu_spec");
  std::vector<Pod> pods;
  for (const CsvRow& row : ReadRows(path, required)) {
    Pod p;
    p.name = row.at("name");
    p.cpu_milli = Int(row, "cpu_milli");
    p.memory_mib = Int(row, "memory_mib");
    p.num_gpu = static_cast<int32_t>(Int(row, "num_gpu"));
    p.gpu_milli = Int(row, "gpu_milli");
    // Empty: any model; "V100M16|V100M32": one of those.
    if (auto spec = row.find("gpu_spec"); spec != row.end() && !spec->second.empty()) {
      p.models = absl::StrSplit(spec->second, '|');
    }
    pods.push_back(std::move(p));
  }
  return pods;
}

core::CapacityRequestSpec SpecOf(const Pod& pod, int64_t n) {
  core::CapacityRequestSpec spec;
  spec.idempotency_key = absl::StrCat("openb-", n);
  spec.team = "openb";
  spec.pool = "openb";
  spec.workload_class = core::WorkloadClass::kBatchAnalytics;
  spec.members = 1;
  if (pod.num_gpu == 1 && pod.gpu_milli < core::kMilliPerGpu) {
    spec.shape.gpu = core::GpuFraction{pod.gpu_milli, 1};
  } else {
    spec.shape.gpu = pod.num_gpu;  // 0: host only.
  }
  spec.shape.cpu_milli = pod.cpu_milli;
  spec.shape.memory_mib = pod.memory_mib;
  spec.gpu_models = pod.models;
  return spec;
}

// Milli-GPU a pod asks for (the trace's num_gpu x gpu_milli).
int64_t GpuDemand(const Pod& pod) { return int64_t{pod.num_gpu} * pod.gpu_milli; }

struct MigOptions {
  double node_share = 0;
  double pod_share = 0;
  std::string model = "H100-80GB";
  std::string policy = "arbiter";
  std::string layouts_path;
  bool on() const { return node_share > 0 || pod_share > 0; }
};

// Whether item `i` of a sequence is chosen when `share` of it is, spread
// evenly: floor((i + 1) x share) > floor(i x share), in per-mille.
bool Chosen(size_t i, double share) {
  const int64_t per_mille = std::llround(share * 1000);
  return (static_cast<int64_t>(i) + 1) * per_mille / 1000 >
         static_cast<int64_t>(i) * per_mille / 1000;
}

// The catalog entry of a MIG-capable model (catalog/gpu-models.json), or
// nullopt. Its MIG table is the built-in one (core/mig.h).
std::optional<core::GpuModel> MigModel(const std::string& name) {
  static const std::map<std::string, core::GpuModel> kModels = {
      {"A100-40GB", {"A100-40GB", 40960, 108, 400, true}},
      {"A100-80GB", {"A100-80GB", 81920, 108, 400, true}},
      {"H100-80GB", {"H100-80GB", 81920, 132, 700, true}},
      {"H200-141GB", {"H200-141GB", 144384, 132, 700, true}},
      {"B200", {"B200", 183359, 148, 1000, true}},
  };
  auto it = kModels.find(name);
  if (it == kModels.end() || core::BuiltinMigProfiles(name) == nullptr) return std::nullopt;
  return it->second;
}

// The smallest profile of `profiles` (+me aside) whose charge covers
// `gpu_milli`: least charge, then fewest memory slices; nullptr if none.
const core::MigProfile* ProfileFor(const std::vector<core::MigProfile>& profiles,
                                   int64_t gpu_milli) {
  const core::MigProfile* best = nullptr;
  for (const core::MigProfile& p : profiles) {
    const int64_t milli = core::MigMilli(profiles, p);
    if (p.media_extensions || milli < gpu_milli) continue;
    if (best == nullptr ||
        std::make_pair(milli, p.memory_slices) <
            std::make_pair(core::MigMilli(profiles, *best), best->memory_slices)) {
      best = &p;
    }
  }
  return best;
}

core::CapacityRequestSpec MigSpecOf(const Pod& pod, int64_t n, const core::MigProfile& profile,
                                    const std::vector<core::MigProfile>& profiles,
                                    const std::string& model) {
  core::CapacityRequestSpec spec = SpecOf(pod, n);
  spec.shape.gpu = core::MigShape{profile.name, core::MigMilli(profiles, profile)};
  spec.gpu_models = {model};
  return spec;
}

// The MIG figures of the replay at one moment: over the GPUs of MIG nodes
// that have an allocated instance.
struct MigFigures {
  int64_t instances = 0;
  int64_t gpus = 0;
  int64_t free_slices = 0;
  core::MigStranded stranded;  // Expected, for the mix.
};

core::MigMix MixOf(const std::map<std::string, int64_t>& asked) {
  core::MigMix mix;
  for (const auto& [profile, n] : asked) mix.push_back({profile, n});
  return mix;
}

int64_t TotalWeight(const core::MigMix& mix) {
  int64_t total = 0;
  for (const core::MigShare& s : mix) total += s.weight;
  return total;
}

// The GPU's allocated instances and their compute slices.
std::pair<int64_t, int64_t> Allocated(const std::vector<core::MigProfile>& profiles,
                                      const core::Gpu& gpu) {
  int64_t instances = 0, slices = 0;
  for (const core::MigInstance& inst : gpu.mig_layout) {
    if (!inst.allocated) continue;
    ++instances;
    slices += core::FindMigProfile(profiles, inst.profile)->compute_slices;
  }
  return {instances, slices};
}

MigFigures FiguresOf(const core::State& state, const std::vector<size_t>& mig_nodes,
                     const core::MigMix& mix) {
  MigFigures f;
  core::MigStranded weighted;
  for (size_t i : mig_nodes) {
    for (const core::Gpu& gpu : state.nodes()[i].gpus) {
      const std::vector<core::MigProfile>& profiles = state.MigProfilesOf(gpu);
      const auto [instances, slices] = Allocated(profiles, gpu);
      if (instances == 0) continue;
      f.instances += instances;
      ++f.gpus;
      f.free_slices += core::kMigComputeSlices - slices;
      const core::MigStranded w = core::MigStrandedWeighted(profiles, gpu.mig_layout, mix);
      weighted.milli_slices += w.milli_slices;
      weighted.milli_gpu += w.milli_gpu;
    }
  }
  if (const int64_t total = TotalWeight(mix); total > 0) {
    f.stranded = {weighted.milli_slices / total, weighted.milli_gpu / total};
  }
  return f;
}

// "3g.40gb@0*,3g.40gb@4": the layout, allocated instances starred.
std::string LayoutText(const std::vector<core::MigInstance>& layout) {
  return absl::StrJoin(layout, ",", [](std::string* out, const core::MigInstance& i) {
    absl::StrAppend(out, i.profile, "@", i.start, i.allocated ? "*" : "");
  });
}

// Writes every GPU of the MIG nodes: its layout and, for the mix, its
// weighted stranded capacity (MigStrandedWeighted; the expected capacity is
// the sum over GPUs with an allocated instance divided by mix_weight). A GPU
// that holds whole or fractional work has no layout and no MIG measure
// (empty fields).
void WriteLayouts(const std::string& path, const core::State& state,
                  const std::vector<size_t>& mig_nodes, const core::MigMix& mix) {
  std::ofstream out(path);
  out << "node,gpu,model,layout,weighted_stranded_milli_slices,weighted_stranded_milli_gpu,"
         "mix_weight\n";
  for (size_t i : mig_nodes) {
    const core::Node& node = state.nodes()[i];
    for (const core::Gpu& gpu : node.gpus) {
      const std::vector<core::MigProfile>& profiles = state.MigProfilesOf(gpu);
      out << node.name << "," << gpu.index << "," << gpu.model << ",\""
          << LayoutText(gpu.mig_layout) << "\",";
      if (gpu.tenants > Allocated(profiles, gpu).first) {
        out << ",," << TotalWeight(mix) << "\n";
        continue;
      }
      const core::MigStranded w = core::MigStrandedWeighted(profiles, gpu.mig_layout, mix);
      out << w.milli_slices << "," << w.milli_gpu << "," << TotalWeight(mix) << "\n";
    }
  }
}

}  // namespace
}  // namespace arbiter::bench

int main(int argc, char** argv) {
  using namespace arbiter;  // NOLINT: a short main.
  std::string nodes_path, arrivals_path, out_path, curve_path, profile_path;
  CLI::App app{"openb-replay: replay an openb arrival sequence through Arbiter's packer"};
  app.add_option("--nodes", nodes_path, "node list: sn,cpu_milli,memory_mib,gpu,model")->required();
  app.add_option("--arrivals", arrivals_path,
                 "arrivals: name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec")
      ->required();
  app.add_option("--out", out_path, "placements CSV to write")->required();
  app.add_option("--curve", curve_path, "allocation curve CSV to write (k,alloc_percent)");
  app.add_option("--demand-profile", profile_path, "a past trace (pod-list format) to prime with");
  size_t candidates = core::State::kDefaultPlacementCandidates;
  app.add_option("--candidates", candidates,
                 "candidate nodes the packer scores per member (0: every node)");
  std::string policy = "arbiter";
  app.add_option("--policy", policy, "how the packer scores places: arbiter, fgd or best-fit")
      ->check(CLI::IsMember({"arbiter", "fgd", "best-fit"}));
  bench::MigOptions mig;
  app.add_option("--mig-nodes", mig.node_share, "share of the GPU nodes made MIG nodes (0-1)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--mig-pods", mig.pod_share, "share of the fractional pods that ask for MIG")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--mig-model", mig.model, "the MIG nodes' model")
      ->check(CLI::IsMember({"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "B200"}));
  app.add_option("--mig-policy", mig.policy, "MIG placement: arbiter or first-fit (the baseline)")
      ->check(CLI::IsMember({"arbiter", "first-fit"}));
  app.add_option("--mig-layouts", mig.layouts_path, "final MIG layouts CSV to write");
  CLI11_PARSE(app, argc, argv);

  const auto start = std::chrono::steady_clock::now();
  core::State state;
  state.set_placement_candidates(candidates);
  state.set_packing_policy(policy == "fgd"        ? core::State::PackingPolicy::kFgd
                           : policy == "best-fit" ? core::State::PackingPolicy::kBestFit
                                                  : core::State::PackingPolicy::kArbiter);
  state.set_mig_packing_policy(mig.policy == "first-fit" ? core::State::MigPackingPolicy::kFirstFit
                                                         : core::State::MigPackingPolicy::kArbiter);
  core::ChangeSet ignored;
  const absl::Time now = absl::FromUnixSeconds(0);
  (void)core::CreateCluster(state, {"openb", ""}, ignored);
  (void)core::CreatePool(state, {"openb", core::LatencyClass::kBatch, ""}, ignored);
  if (mig.on()) (void)state.LoadGpuModel(*bench::MigModel(mig.model));
  std::vector<std::string> node_names;
  std::vector<size_t> mig_nodes;  // Positions in state.nodes().
  int64_t total_gpus = 0;
  for (const bench::CsvRow& row :
       bench::ReadRows(nodes_path, {"sn", "cpu_milli", "memory_mib", "gpu", "model"})) {
    const int64_t gpus = bench::Int(row, "gpu");
    const bool mig_node = gpus > 0 && bench::Chosen(node_names.size(), mig.node_share);
    const std::string model = mig_node ? mig.model : row.at("model");
    if (state.FindGpuModel(model) == nullptr) {
      // The trace anonymises some models (G1-G3) and gives no memory; any
      // size works because fractions here ask for 1 MiB.
      (void)state.LoadGpuModel({model, 32768, 80, 300, false});
    }
    core::Node node;
    node.cluster = "openb";
    node.name = row.at("sn");
    node.pool = "openb";
    node.cpu_milli = bench::Int(row, "cpu_milli");
    node.memory_mib = bench::Int(row, "memory_mib");
    for (int32_t g = 0; g < gpus; ++g) node.gpus.push_back(core::Gpu{g, model});
    total_gpus += gpus;
    if (gpus == 0) continue;  // Validation wants GPU nodes; the trace has none without.
    auto registered = core::RegisterNode(state, node, now, ignored);
    if (!registered.ok()) {
      std::cerr << "openb-replay: node " << node.name << ": " << registered.status() << "\n";
      return 2;
    }
    if (mig_node) mig_nodes.push_back(state.nodes().size() - 1);
    node_names.push_back(node.name);
  }
  if (!profile_path.empty()) {
    int64_t n = 0;
    for (const bench::Pod& pod : bench::ReadPods(profile_path, /*spec_optional=*/true)) {
      state.ObserveDemand(bench::SpecOf(pod, --n));
    }
  }

  // Arbiter learns the mix from the arrivals as they come (never from the
  // future). The published policies given a pod list keep the mix it makes,
  // as the paper's simulator computes FGD's typical pods from the workload
  // before the run.
  const bool learn_online = policy == "arbiter" || profile_path.empty();
  const std::vector<bench::Pod> pods = bench::ReadPods(arrivals_path);
  const std::vector<core::MigProfile>* mig_profiles = core::BuiltinMigProfiles(mig.model);
  std::ofstream out(out_path);
  out << "seq,name,cpu_milli,memory_mib,num_gpu,gpu_milli,node,gpu_ids"
      << (mig.on() ? ",mig_profile,mig_start" : "") << "\n";
  int64_t arrived = 0, used = 0, failed = 0, fractions = 0, mig_pods = 0, mig_placed = 0;
  std::map<int64_t, std::pair<double, int64_t>> curve;             // k -> (sum alloc%, events).
  std::map<int64_t, bench::MigFigures> mig_curve;                  // k -> figures at its end.
  std::map<std::string, int64_t> mig_asked;                        // Profile -> MIG pods.
  const double capacity = static_cast<double>(total_gpus) * 10.0;  // milli per percent.
  auto point = [&](int64_t demand) { return std::llround(static_cast<double>(demand) / capacity); };
  for (size_t seq = 0; seq < pods.size(); ++seq) {
    const bench::Pod& pod = pods[seq];
    core::CapacityRequestSpec spec = bench::SpecOf(pod, static_cast<int64_t>(seq));
    const core::MigProfile* profile = nullptr;
    if (mig.on() && spec.shape.is_fraction() && bench::Chosen(fractions++, mig.pod_share)) {
      profile = bench::ProfileFor(*mig_profiles, pod.gpu_milli);
    }
    if (profile != nullptr) {
      spec = bench::MigSpecOf(pod, static_cast<int64_t>(seq), *profile, *mig_profiles, mig.model);
      ++mig_pods;
      ++mig_asked[profile->name];
    }
    if (learn_online) state.ObserveDemand(spec);
    const core::GangPlacement placed = core::PlaceGang(state, spec);
    arrived += bench::GpuDemand(pod);
    std::string node_name, gpu_ids, mig_start;
    if (placed.result == core::FitResult::kPlaced) {
      const core::Placement& p = placed.placements[0];
      used += profile != nullptr ? p.gpu_milli : bench::GpuDemand(pod);
      const core::Node& node = *state.FindNode(p.node_id);
      node_name = node.name;
      gpu_ids = absl::StrJoin(p.gpu_indices, "-");
      if (profile != nullptr) {
        ++mig_placed;
        mig_start = absl::StrCat(p.mig_start);
      }
      for (int32_t g : mig.on() ? p.gpu_indices : std::vector<int32_t>{}) {
        const core::Gpu& gpu = node.gpus[g];
        if (absl::Status valid = core::ValidateMigLayout(state.MigProfilesOf(gpu), gpu.mig_layout);
            !valid.ok()) {
          std::cerr << "openb-replay: " << node.name << " GPU " << g << " after pod " << seq << ": "
                    << valid.message() << "\n";
          return 3;
        }
      }
    } else {
      ++failed;
    }
    out << seq << "," << pod.name << "," << pod.cpu_milli << "," << pod.memory_mib << ","
        << pod.num_gpu << "," << pod.gpu_milli << "," << node_name << "," << gpu_ids;
    if (mig.on()) out << "," << (profile != nullptr ? profile->name : "") << "," << mig_start;
    out << "\n";
    const int64_t k = point(arrived);
    const double alloc = std::round(static_cast<double>(used) / capacity * 100.0) / 100.0;
    curve[k].first += alloc;
    curve[k].second += 1;
    // The MIG figures at the end of each point.
    if (mig.on() &&
        (seq + 1 == pods.size() || point(arrived + bench::GpuDemand(pods[seq + 1])) != k)) {
      mig_curve[k] = bench::FiguresOf(state, mig_nodes, bench::MixOf(mig_asked));
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  auto at = [&](int64_t k) {
    auto it = curve.find(k);
    return it == curve.end() ? NAN : it->second.first / static_cast<double>(it->second.second);
  };
  if (!curve_path.empty()) {
    std::ofstream c(curve_path);
    c << "arrived_percent,allocated_percent"
      << (mig.on() ? ",mig_instances,mig_gpus,mig_free_slices,mig_stranded_slices,"
                     "mig_stranded_milli_gpu"
                   : "")
      << "\n";
    for (const auto& [k, v] : curve) {
      c << k << "," << v.first / static_cast<double>(v.second);
      if (mig.on()) {
        const bench::MigFigures& f = mig_curve[k];
        c << "," << f.instances << "," << f.gpus << "," << f.free_slices << ","
          << absl::StrFormat("%.3f", static_cast<double>(f.stranded.milli_slices) / 1000) << ","
          << f.stranded.milli_gpu;
      }
      c << "\n";
    }
  }
  if (!mig.layouts_path.empty()) {
    bench::WriteLayouts(mig.layouts_path, state, mig_nodes, bench::MixOf(mig_asked));
  }
  std::printf("openb-replay: %zu pods on %zu nodes (%lld GPUs), %lld failed, %.2f s\n", pods.size(),
              node_names.size(), static_cast<long long>(total_gpus), static_cast<long long>(failed),
              seconds);
  std::printf("allocated at 100%% arrived: %.2f%% (%.0f GPUs unallocated); at 130%%: %.2f%%\n",
              at(100), static_cast<double>(total_gpus) * (100.0 - at(100)) / 100.0, at(130));
  if (mig.on()) {
    int64_t mig_gpus = 0;
    for (size_t i : mig_nodes) mig_gpus += static_cast<int64_t>(state.nodes()[i].gpus.size());
    const bench::MigFigures& f = mig_curve[100];
    std::printf(
        "mig (%s, %s): %zu nodes (%lld GPUs), %lld MIG pods, %lld placed; at 100%% arrived: "
        "%lld instances on %lld GPUs, %lld free slices, %.3f stranded slices (%lld milli-GPU)\n",
        mig.model.c_str(), mig.policy.c_str(), mig_nodes.size(), static_cast<long long>(mig_gpus),
        static_cast<long long>(mig_pods), static_cast<long long>(mig_placed),
        static_cast<long long>(f.instances), static_cast<long long>(f.gpus),
        static_cast<long long>(f.free_slices), static_cast<double>(f.stranded.milli_slices) / 1000,
        static_cast<long long>(f.stranded.milli_gpu));
  }
  return 0;
}
