// Grouped admission against its oracle: the same random event traces run on
// two states, one re-deciding queues group by group (the default), one
// re-deciding every queued request each time (State::Admission::kScan).
// After every event both must hold the same requests in the same states on
// the same GPUs, under best-effort and strict queueing. The seed is printed; rerun one with
// ARBITER_TEST_SEED=<seed>.
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "tests/core/test_state.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::kT0;
using ::arbiter::testing::MakeNode;

// A request from a small set of shapes, teams and priorities, so that many
// queued requests are alike and groups form.
CapacityRequestSpec AlikeSpec(std::mt19937_64& rng, int n, absl::Time now) {
  CapacityRequestSpec spec;
  spec.idempotency_key = absl::StrCat("k", n);
  static const char* const kTeams[] = {"t", "u", "a", "b"};
  spec.team = kTeams[rng() % 4];
  spec.pool = "batch";
  spec.workload_class = rng() % 2 ? WorkloadClass::kTraining : WorkloadClass::kBatchAnalytics;
  switch (rng() % 5) {
    case 0:
      spec.shape.gpu = int32_t{1};
      break;
    case 1:
      spec.shape.gpu = int32_t{4};  // A gang member of four GPUs.
      spec.members = 2;
      break;
    case 2:
      spec.shape.gpu = GpuFraction{500, 20 * 1024};
      break;
    case 3:
      spec.shape.gpu = MigShape{"3g.40gb", 0};
      spec.gpu_models = {"H100-80GB"};
      break;
    default:
      spec.shape.gpu = int32_t{2};
      spec.gpu_models = {"A100-40GB"};
  }
  spec.shape.cpu_milli = 1000;
  spec.shape.memory_mib = 4096;
  spec.priority = static_cast<int32_t>(rng() % 3) - 1;
  spec.preemptible = rng() % 3 != 0;
  if (rng() % 4 == 0) spec.duration = absl::Seconds(5 + rng() % 40);
  if (rng() % 12 == 0) {
    spec.start_at = now + absl::Seconds(1 + rng() % 20);
    spec.duration = absl::Seconds(5 + rng() % 30);
  }
  return spec;
}

// The live requests as text: id, state, placements and holds.
std::string Snapshot(const State& s) {
  std::map<int64_t, std::string> by_id;
  for (const auto& [id, r] : s.live_requests()) {
    std::string& line = by_id[id];
    absl::StrAppend(&line, RequestStateName(r.state));
    for (const Placement& p : r.placements) {
      absl::StrAppend(&line, " ", p.node_id, ":");
      for (int32_t g : p.gpu_indices) absl::StrAppend(&line, g, ",");
      absl::StrAppend(&line, p.mig_profile, "@", p.mig_start);
    }
    for (const GpuHold& h : r.holds) absl::StrAppend(&line, " hold ", h.node_id, "/", h.gpu_index);
    if (r.backfill_head()) absl::StrAppend(&line, " head from ", absl::FormatTime(r.planned_start));
  }
  std::string out;
  for (const auto& [id, line] : by_id) absl::StrAppend(&out, id, " ", line, "\n");
  return out;
}

// One trace: requests, releases and cancels, approvals, quota changes, nodes
// joining, reservations starting and preemption deadlines passing. Returns false
// (with a failure recorded) at the first event after which the two states
// differ. Counts the queued requests seen, to show the traces reach deep
// queues.
bool RunTrace(uint64_t seed, int steps, QueueingPolicy policy, int64_t* queued_seen,
              int64_t* approved) {
  std::mt19937_64 rng(seed);
  State states[2] = {::arbiter::testing::MakeState(64'000, policy),
                     ::arbiter::testing::MakeState(64'000, policy)};
  states[1].set_admission(State::Admission::kScan);
  for (State& s : states) {
    ChangeSet ch;
    for (const Team& team : std::vector<Team>{
             {"u", "", 1000}, {"org", "", 1000}, {"a", "org", 1000}, {"b", "org", 3000}}) {
      EXPECT_TRUE(CreateTeam(s, team, ch).ok());
    }
    for (const Quota& q : std::vector<Quota>{{"t", "batch", 16'000},
                                             {"u", "batch", 8'000, "", 0, 4'000},
                                             {"a", "batch", 8'000, "", kUnlimited, 6'000},
                                             {"b", "batch", 6'000, "", 4'000, kUnlimited}}) {
      EXPECT_TRUE(SetQuota(s, q, kT0, ch).ok());
    }
    for (int i = 0; i < 3; ++i) {
      ::arbiter::testing::AddNode(
          s, MakeNode(absl::StrCat("n", i), 4, i % 2 ? "H100-80GB" : "A100-40GB", "batch"));
    }
    // Requests above six GPUs (the gangs of two members of four) wait for
    // alice's approval.
    AuthorityRule large;
    large.pool = "batch";
    large.action = ApprovalAction::kLarge;
    large.approver = "alice";
    large.threshold_milli = 6'000;
    EXPECT_TRUE(SetAuthorityRule(s, large, ch).ok());
  }
  std::vector<int64_t> ids;
  int nodes = 3;
  for (int step = 0; step < steps; ++step) {
    const absl::Time now = kT0 + absl::Seconds(step);
    const int pick = static_cast<int>(rng() % 100);
    const size_t victim = ids.empty() ? 0 : rng() % ids.size();
    const CapacityRequestSpec spec = AlikeSpec(rng, step, now);
    const int64_t nominal = 2'000 * static_cast<int64_t>(1 + rng() % 10);
    const char* const team = pick % 2 ? "a" : "u";
    std::string event;
    for (State& s : states) {
      ChangeSet ch;
      Tick(s, now, ch);
      if (pick < 60 || ids.empty()) {
        event = "request";
        EXPECT_TRUE(RequestCapacity(s, spec, now, ch).ok());
      } else if (pick < 88) {
        event = absl::StrCat("release ", ids[victim]);
        (void)ReleaseRequest(s, ids[victim], now, ch);
      } else if (pick < 92) {
        // Alice approves the oldest request waiting for her, if any.
        event = "approve";
        for (int64_t id : ids) {
          const CapacityRequest* r = s.FindLiveRequest(id);
          if (r != nullptr && r->state == RequestState::kPendingApproval) {
            event = absl::StrCat("approve ", id);
            EXPECT_TRUE(ApproveRequest(s, id, Approver{"alice", {}}, now, ch).ok());
            break;
          }
        }
      } else if (pick < 97) {
        event = absl::StrCat("quota ", team, " ", nominal);
        EXPECT_TRUE(
            SetQuota(s, {team, "batch", nominal, "", kUnlimited, kUnlimited}, now, ch).ok());
      } else {
        event = "node";
        EXPECT_TRUE(RegisterNode(s,
                                 MakeNode(absl::StrCat("n", nodes), 2 + step % 3,
                                          step % 2 ? "H100-80GB" : "A100-40GB", "batch"),
                                 now, ch)
                        .ok());
      }
    }
    if (event == "request") ids.push_back(states[0].next_request_id() - 1);
    if (event.rfind("release", 0) == 0) ids.erase(ids.begin() + static_cast<ptrdiff_t>(victim));
    if (event == "node") ++nodes;
    if (event.rfind("approve ", 0) == 0) ++*approved;
    *queued_seen += static_cast<int64_t>(states[1].QueuedIn("batch").size());
    const std::string grouped = Snapshot(states[0]);
    const std::string scanned = Snapshot(states[1]);
    if (grouped != scanned) {
      ADD_FAILURE() << "seed " << seed << ", " << QueueingPolicyName(policy) << ", step " << step
                    << " (" << event << "): grouped admission differs from the scan\n--- grouped\n"
                    << grouped << "--- scan\n"
                    << scanned;
      return false;
    }
  }
  return true;
}

TEST(AdmissionEquivalenceTest, GroupedAdmitsWhatTheScanAdmitsAtTheSameMoments) {
  const uint64_t seed = ::arbiter::testing::TestSeed();
  std::cout << "seed: " << seed << " (rerun with ARBITER_TEST_SEED=" << seed << ")" << std::endl;
  int64_t queued_seen = 0, approved = 0;
  constexpr int kTraces = 1000;
  constexpr int kSteps = 120;
  for (int trace = 0; trace < kTraces; ++trace) {
    // Best-effort and strict. Under backfill a pass decides the requests
    // ahead of the head without its plan, which decisions between passes
    // respect, so when passes run matters and the scan is no oracle:
    // backfill is held to its own rules (tests/core/backfill_test.cc).
    const auto policy = trace % 2 ? QueueingPolicy::kStrict : QueueingPolicy::kBestEffort;
    if (!RunTrace(seed + trace, kSteps, policy, &queued_seen, &approved)) break;
  }
  // The traces kept queues (on average several requests queued per event)
  // and reached approvals.
  EXPECT_GT(queued_seen, int64_t{kTraces} * kSteps);
  EXPECT_GT(approved, kTraces);
  std::cout << "mean queue length per event: "
            << static_cast<double>(queued_seen) / (kTraces * kSteps) << ", approvals " << approved
            << "\n";
}

}  // namespace
}  // namespace arbiter::core
