// arbiter-memory: what the arbiter's memory holds after many decisions.
// Runs the core's decisions and the ledger's chaining of each batch (the
// commit path but the database) in one process, on a pool of --gpus GPUs
// held at about 80% by the core benchmarks' mix: each step requests one
// allocation and releases a random live one. Simulated time advances
// --seconds-per-decision per decision, so that the idempotency window
// (--window) is reached: a fleet making 10 decisions a second, with the
// default 0.1 s, passes a 24-hour window after 864,000 decisions.
//
// Every --report-every decisions it prints the heap in use (mallinfo2),
// the resident set (VmRSS), the idempotency keys remembered and the live
// requests. With --max-growth R it exits 1 when the heap in use at the end
// exceeds R times that at the first report.
//
// 10 million decisions, then the unit test's run:
//   build/bench/arbiter-memory
//   build/bench/arbiter-memory --decisions 400000 --report-every 100000 --window 1h
//                              --max-growth 1.1
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include <malloc.h>

#include "bench/decision_mix.h"
#include "core/arbitration.h"
#include "ledger/chain.h"
#include "ledger/entries.h"

namespace arbiter::core {
namespace {

struct Options {
  int64_t decisions = 10'000'000;
  int64_t report_every = 1'000'000;
  int gpus = 1000;
  double seconds_per_decision = 0.1;
  std::string window = "24h";
  double max_growth = 0;  // 0: no check.
};

size_t HeapInUse() { return mallinfo2().uordblks; }

// VmRSS of this process, in KiB; 0 when unknown.
int64_t RssKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return 0;
}

// The ledger's head, advanced over every batch as a commit would.
struct Chain {
  int64_t seq = 0;
  std::string hash = std::string(ledger::kGenesisHash);

  void Append(const ChangeSet& changes, absl::Time at) {
    if (changes.empty()) return;
    ledger::CommitContext context;
    context.at = at;
    std::vector<ledger::Entry> entries = ledger::ChainEntries(seq, hash, changes, context);
    seq = entries.back().seq;
    hash = entries.back().hash;
  }
};

int Run(const Options& options) {
  absl::Duration window;
  if (!absl::ParseDuration(options.window, &window) || window <= absl::ZeroDuration()) {
    std::fprintf(stderr, "--window: not a positive duration: %s\n", options.window.c_str());
    return 2;
  }
  State s = mix::PoolOf(options.gpus);
  s.set_idempotency_window(window);
  const absl::Duration step = absl::Seconds(options.seconds_per_decision);
  std::mt19937_64 rng(42);
  std::vector<int64_t> live;
  Chain chain;
  absl::Time now = mix::kNow;
  int64_t key = 0;
  int64_t decisions = 0;
  size_t first_heap = 0;
  std::printf("%12s %12s %12s %10s %12s %8s %10s\n", "decisions", "simulated_h", "heap_mib",
              "rss_mib", "keys", "live", "ledger");
  auto decided = [&](const ChangeSet& changes) {
    chain.Append(changes, now);
    now += step;
    if (++decisions % options.report_every != 0) return;
    const size_t heap = HeapInUse();
    if (first_heap == 0) first_heap = heap;
    std::printf("%12lld %12.1f %12.1f %10.1f %12zu %8zu %10lld\n",
                static_cast<long long>(decisions), absl::ToDoubleHours(now - mix::kNow),
                heap / 1048576.0, RssKib() / 1024.0, s.requests().remembered_keys(),
                s.live_requests().size(), static_cast<long long>(chain.seq));
    std::fflush(stdout);
  };
  while (decisions < options.decisions) {
    ChangeSet changes;
    absl::StatusOr<RequestOutcome> out = RequestCapacity(s, mix::Spec(key++, rng), now, changes);
    if (!out.ok()) {
      std::fprintf(stderr, "request: %s\n", out.status().ToString().c_str());
      return 1;
    }
    const bool admitted = out->request.state == RequestState::kAdmitted;
    const int64_t id = out->request.id;
    decided(changes);
    if (admitted) live.push_back(id);
    // Hold the pool near 80%: release a random live allocation, and a
    // request that did not get in.
    if (!admitted) {
      ChangeSet release;
      if (ReleaseRequest(s, id, now, release).ok()) decided(release);
    }
    if (live.size() > 1 && s.UsedMilli("t", "p") > int64_t{options.gpus} * 800) {
      const size_t victim = rng() % live.size();
      ChangeSet release;
      if (ReleaseRequest(s, live[victim], now, release).ok()) decided(release);
      live[victim] = live.back();
      live.pop_back();
    }
  }
  const size_t last_heap = HeapInUse();
  if (options.max_growth > 0 && first_heap > 0) {
    const double growth = static_cast<double>(last_heap) / static_cast<double>(first_heap);
    std::printf("heap in use: %.3fx that of the first report (limit %.2fx)\n", growth,
                options.max_growth);
    if (growth > options.max_growth) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace arbiter::core

int main(int argc, char** argv) {
  arbiter::core::Options options;
  CLI::App app{"arbiter-memory: the arbiter's memory after many decisions"};
  app.add_option("--decisions", options.decisions, "decisions to make")->capture_default_str();
  app.add_option("--report-every", options.report_every, "print a row every this many")
      ->capture_default_str();
  app.add_option("--gpus", options.gpus, "GPUs in the pool")->capture_default_str();
  app.add_option("--seconds-per-decision", options.seconds_per_decision,
                 "simulated time between decisions")
      ->capture_default_str();
  app.add_option("--window", options.window, "idempotency window, e.g. 24h")->capture_default_str();
  app.add_option("--max-growth", options.max_growth,
                 "fail when the heap at the end exceeds this many times the first report's");
  CLI11_PARSE(app, argc, argv);
  return arbiter::core::Run(options);
}
