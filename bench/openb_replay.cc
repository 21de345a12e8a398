// openb-replay: replays an arrival sequence of Alibaba's openb GPU trace
// through the core's packer (the PlaceGang that arbiterd runs) and reports
// the share of GPUs allocated as demand arrives, as the FGD paper does.
//
//   openb-replay --nodes NODES.csv --arrivals ARRIVALS.csv --out PLACEMENTS.csv
//                [--curve CURVE.csv] [--demand-profile PODS.csv]
//                [--candidates N] [--policy arbiter|fgd|best-fit]
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
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include <CLI/CLI.hpp>

#include "bench/csv.h"
#include "core/arbitration.h"
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
  CLI11_PARSE(app, argc, argv);

  const auto start = std::chrono::steady_clock::now();
  core::State state;
  state.set_placement_candidates(candidates);
  state.set_packing_policy(policy == "fgd"        ? core::State::PackingPolicy::kFgd
                           : policy == "best-fit" ? core::State::PackingPolicy::kBestFit
                                                  : core::State::PackingPolicy::kArbiter);
  core::ChangeSet ignored;
  const absl::Time now = absl::FromUnixSeconds(0);
  (void)core::CreateCluster(state, {"openb", ""}, ignored);
  (void)core::CreatePool(state, {"openb", core::LatencyClass::kBatch, ""}, ignored);
  std::vector<std::string> node_names;
  int64_t total_gpus = 0;
  for (const bench::CsvRow& row :
       bench::ReadRows(nodes_path, {"sn", "cpu_milli", "memory_mib", "gpu", "model"})) {
    const std::string model = row.at("model");
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
    const int64_t gpus = bench::Int(row, "gpu");
    for (int32_t g = 0; g < gpus; ++g) node.gpus.push_back(core::Gpu{g, model});
    total_gpus += gpus;
    if (gpus == 0) continue;  // Validation wants GPU nodes; the trace has none without.
    auto registered = core::RegisterNode(state, node, now, ignored);
    if (!registered.ok()) {
      std::cerr << "openb-replay: node " << node.name << ": " << registered.status() << "\n";
      return 2;
    }
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
  std::ofstream out(out_path);
  out << "seq,name,cpu_milli,memory_mib,num_gpu,gpu_milli,node,gpu_ids\n";
  int64_t arrived = 0, used = 0, failed = 0;
  std::map<int64_t, std::pair<double, int64_t>> curve;             // k -> (sum alloc%, events).
  const double capacity = static_cast<double>(total_gpus) * 10.0;  // milli per percent.
  for (size_t seq = 0; seq < pods.size(); ++seq) {
    const bench::Pod& pod = pods[seq];
    const core::CapacityRequestSpec spec = bench::SpecOf(pod, static_cast<int64_t>(seq));
    if (learn_online) state.ObserveDemand(spec);
    const core::GangPlacement placed = core::PlaceGang(state, spec);
    arrived += bench::GpuDemand(pod);
    std::string node_name, gpu_ids;
    if (placed.result == core::FitResult::kPlaced) {
      used += bench::GpuDemand(pod);
      const core::Placement& p = placed.placements[0];
      node_name = state.FindNode(p.node_id)->name;
      gpu_ids = absl::StrJoin(p.gpu_indices, "-");
    } else {
      ++failed;
    }
    out << seq << "," << pod.name << "," << pod.cpu_milli << "," << pod.memory_mib << ","
        << pod.num_gpu << "," << pod.gpu_milli << "," << node_name << "," << gpu_ids << "\n";
    const int64_t k = std::llround(static_cast<double>(arrived) / capacity);
    const double alloc = std::round(static_cast<double>(used) / capacity * 100.0) / 100.0;
    curve[k].first += alloc;
    curve[k].second += 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  auto at = [&](int64_t k) {
    auto it = curve.find(k);
    return it == curve.end() ? NAN : it->second.first / static_cast<double>(it->second.second);
  };
  if (!curve_path.empty()) {
    std::ofstream c(curve_path);
    c << "arrived_percent,allocated_percent\n";
    for (const auto& [k, v] : curve)
      c << k << "," << v.first / static_cast<double>(v.second) << "\n";
  }
  std::printf("openb-replay: %zu pods on %zu nodes (%lld GPUs), %lld failed, %.2f s\n", pods.size(),
              node_names.size(), static_cast<long long>(total_gpus), static_cast<long long>(failed),
              seconds);
  std::printf("allocated at 100%% arrived: %.2f%% (%.0f GPUs unallocated); at 130%%: %.2f%%\n",
              at(100), static_cast<double>(total_gpus) * (100.0 - at(100)) / 100.0, at(130));
  return 0;
}
