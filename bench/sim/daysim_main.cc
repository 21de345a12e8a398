// daysim: simulates a scenario's week under static partitioning, quota-only
// sharing, Arbiter without proactive reclaim and Arbiter, on the same seeded
// workload, and prints the comparison; writes CSV files and SVG figures to
// --out.
//
//   daysim --scenario bench/scenarios/mixed-week.yaml [--out DIR]
//          [--policy static|quota-only|arbiter-reactive|arbiter]... [--seed N] [--days N]
//
// Exit status: 0, 2 for a bad scenario or flag, 1 when a conservation check
// fails or the core refused a call (a simulator defect).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include <CLI/CLI.hpp>

#include "bench/sim/report.h"
#include "bench/sim/scenario.h"
#include "bench/sim/simulator.h"

namespace {

bool WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) std::cerr << "daysim: cannot write " << path << "\n";
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace arbiter::daysim;
  CLI::App app{"Arbiter's economics: a week of a mixed GPU cluster under four policies"};
  std::string scenario_path, out_dir = "daysim-out";
  std::vector<std::string> policies;
  int64_t seed = -1;
  int32_t days = 0;
  app.add_option("--scenario", scenario_path, "Scenario YAML")->required();
  app.add_option("--out", out_dir, "Directory for the CSV files and figures")
      ->capture_default_str();
  app.add_option("--policy", policies, "Policies to run (default: all four)")
      ->check(CLI::IsMember({"static", "quota-only", "arbiter-reactive", "arbiter"}));
  app.add_option("--seed", seed, "Override the scenario's seed");
  app.add_option("--days", days, "Override the scenario's days");
  CLI11_PARSE(app, argc, argv);

  auto scenario = LoadScenario(scenario_path);
  if (!scenario.ok()) {
    std::cerr << "daysim: " << scenario.status().message() << "\n";
    return 2;
  }
  if (seed >= 0) scenario->seed = static_cast<uint64_t>(seed);
  if (days > 0) scenario->days = days;
  if (auto valid = ValidateScenario(*scenario); !valid.ok()) {
    std::cerr << "daysim: " << valid.message() << "\n";
    return 2;
  }
  if (policies.empty()) policies = {"static", "quota-only", "arbiter-reactive", "arbiter"};

  std::vector<Result> results;
  int status = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& name : policies) {
    const Policy policy = name == "static"             ? Policy::kStatic
                          : name == "quota-only"       ? Policy::kQuotaOnly
                          : name == "arbiter-reactive" ? Policy::kArbiterReactive
                                                       : Policy::kArbiter;
    const auto begin = std::chrono::steady_clock::now();
    results.push_back(Simulate(*scenario, policy));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    const Result& r = results.back();
    std::cerr << absl::StrFormat(
        "daysim: %s: %d days, %d GPUs, %d core calls in %.1f s\n", name, scenario->days,
        scenario->cluster.nodes * scenario->cluster.gpus_per_node, r.core_calls, seconds);
    if (r.held_by_jobs_milli_seconds != r.held_by_inventory_milli_seconds) {
      std::cerr << absl::StrFormat(
          "daysim: %s: conservation FAILED: jobs held %d milli-GPU s, the inventory %d\n", name,
          r.held_by_jobs_milli_seconds, r.held_by_inventory_milli_seconds);
      status = 1;
    }
    if (r.power_budget_watts > 0 && r.max_draw_watts > r.power_budget_watts) {
      std::cerr << absl::StrFormat("daysim: %s: power FAILED: drew %d W, the budget is %d W\n",
                                   name, r.max_draw_watts, r.power_budget_watts);
      status = 1;
    }
    if (r.core_errors > 0) {
      std::cerr << "daysim: " << name << ": the core refused " << r.core_errors << " calls\n";
      status = 1;
    }
  }
  std::cerr << absl::StrFormat(
      "daysim: all policies in %.1f s\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  std::cout << "scenario " << scenario->name << " (seed " << scenario->seed << ")\n\n"
            << ComparisonTable(*scenario, results);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  const std::filesystem::path dir(out_dir);
  const std::string power = PowerCsv(results);
  const bool written = WriteFile(dir / "summary.csv", SummaryCsv(results)) &&
                       WriteFile(dir / "hourly.csv", HourlyCsv(*scenario, results)) &&
                       WriteFile(dir / "teams.csv", TeamsCsv(results)) &&
                       (power.empty() || WriteFile(dir / "power.csv", power)) &&
                       WriteFile(dir / "utilization.svg", UtilizationSvg(*scenario, results)) &&
                       WriteFile(dir / "p99.svg", P99Svg(*scenario, results));
  if (!written) return 2;
  std::cout << "\nwrote " << out_dir
            << "/{summary.csv,hourly.csv,teams.csv,utilization.svg,p99.svg}"
            << (power.empty() ? "" : " and power.csv") << "\n";
  return status;
}
