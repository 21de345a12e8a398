// Fuzz target: the core's arbitration driven by a random sequence of
// operations (requests of any shape and priority, with quantities that may be
// invalid, releases, passing time), checking after each one that the state's
// bookkeeping agrees with an independent recount of the live placements and
// that no GPU, MIG slice or fraction is overcommitted (capacity_check.h). A
// broken invariant aborts (a finding). Built with libFuzzer under clang (ARBITER_FUZZ=ON), and
// replayed over tests/fuzz/corpus/arbitration by `tests/run` (replay_main.cc).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

#include "core/arbitration.h"
#include "core/state.h"
#include "tests/fuzz/capacity_check.h"

namespace {

using arbiter::core::State;

// Reads the fuzzer's bytes; past the end, zeros.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  int64_t Int(int64_t lo, int64_t hi) {  // In [lo, hi].
    const uint64_t raw = (uint64_t{Byte()} << 8) | Byte();
    return lo + static_cast<int64_t>(raw % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

void Check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "invariant broken: %s\n", what.c_str());
  std::abort();
}

State MakeOrganisation() {
  State s;
  arbiter::core::ChangeSet ch;
  bool ok = s.LoadGpuModel({"H100-80GB", 81920, 132, 700, true}).ok() &&
            arbiter::core::CreateCluster(s, {"c", ""}, ch).ok() &&
            arbiter::core::CreatePool(s, {"p", arbiter::core::LatencyClass::kBatch, ""}, ch).ok();
  for (const char* team : {"a", "b"}) {
    ok = ok && arbiter::core::CreateTeam(s, {team, "", 1000}, ch).ok();
    arbiter::core::Quota quota{team, "p", 4000};
    quota.borrowing_limit_milli = 2000;
    ok = ok && arbiter::core::SetQuota(s, quota, absl::UnixEpoch(), ch).ok();
  }
  for (int n = 0; n < 2; ++n) {
    arbiter::core::Node node;
    node.cluster = "c";
    node.name = absl::StrCat("n", n);
    node.pool = "p";
    node.cpu_milli = 64'000;
    node.memory_mib = 512'000;
    for (int i = 0; i < 4; ++i) {
      arbiter::core::Gpu g;
      g.index = i;
      g.model = "H100-80GB";
      node.gpus.push_back(g);
    }
    ok = ok && arbiter::core::RegisterNode(s, node, absl::UnixEpoch(), ch).ok();
  }
  Check(ok, "the organisation builds");
  return s;
}

arbiter::core::CapacityRequestSpec RandomSpec(Bytes& in, int key) {
  arbiter::core::CapacityRequestSpec spec;
  spec.idempotency_key = absl::StrCat("k", key);
  spec.team = in.Byte() % 2 ? "a" : "b";
  spec.pool = "p";
  spec.workload_class = static_cast<arbiter::core::WorkloadClass>(in.Int(0, 5));
  spec.members = static_cast<int32_t>(in.Int(-1, 4));
  static const char* kProfiles[] = {"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb", "9g.99gb"};
  switch (in.Byte() % 3) {
    case 0:
      spec.shape.gpu = static_cast<int32_t>(in.Int(-1, 5));
      break;
    case 1:
      spec.shape.gpu = arbiter::core::MigShape{kProfiles[in.Byte() % 5], 0};
      break;
    default:
      spec.shape.gpu = arbiter::core::GpuFraction{in.Int(-10, 1100), in.Int(-10, 90'000)};
  }
  spec.priority = static_cast<int32_t>(in.Int(-5, 5)) * 100;
  spec.preemptible = in.Byte() % 2 == 0;
  spec.checkpoint_seconds = in.Int(0, 120);
  if (in.Byte() % 4 == 0) spec.topology = arbiter::core::Topology::kSameNode;
  return spec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  State state = MakeOrganisation();
  Bytes in(data, size);
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  std::vector<int64_t> ids;
  for (int op = 0; op < 64 && !in.done(); ++op) {
    arbiter::core::ChangeSet changes;
    now += absl::Seconds(in.Int(0, 90));
    arbiter::core::Tick(state, now, changes);
    const uint8_t kind = in.Byte() % 4;
    if (kind == 0 && !ids.empty()) {
      const int64_t id = ids[static_cast<size_t>(in.Int(0, static_cast<int64_t>(ids.size()) - 1))];
      (void)arbiter::core::ReleaseRequest(state, id, now, changes);
    } else if (kind == 1) {
      (void)arbiter::core::ReleaseRequest(state, in.Int(-2, 1000), now, changes);
    } else {
      auto outcome = arbiter::core::RequestCapacity(state, RandomSpec(in, op), now, changes);
      if (outcome.ok()) ids.push_back(outcome->request.id);
    }
    const std::string problem = arbiter::fuzz::CapacityProblem(state);
    Check(problem.empty(), problem);
  }
  return 0;
}
