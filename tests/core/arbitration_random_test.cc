// Randomized invariant tests: seeded sequences of requests and releases,
// with the invariants of DESIGN.md checked after every operation. The seed
// is printed; rerun one with ARBITER_TEST_SEED=<seed>.
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "tests/core/test_state.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::kT0;
using ::arbiter::testing::MakeNode;

// Recomputes every GPU's and node's accounting from the live requests and
// compares it with the state's, and checks capacity and quota limits.
void CheckInvariants(const State& s) {
  std::map<std::pair<int64_t, int32_t>, std::pair<int64_t, int64_t>> gpu_use;  // milli, MiB.
  std::map<std::pair<int64_t, int32_t>, int> tenants;
  std::map<int64_t, std::pair<int64_t, int64_t>> host_use;
  std::map<std::tuple<std::string, std::string, std::string>, int64_t> team_use;
  // Per GPU: allocated MIG instances ("profile@start") and non-MIG tenants.
  std::map<std::pair<int64_t, int32_t>, std::multiset<std::string>> mig_use;
  std::map<std::pair<int64_t, int32_t>, int> other_use;
  for (const auto& [id, r] : s.live_requests()) {
    if (!HoldsCapacity(r.state)) {
      ASSERT_TRUE(r.state == RequestState::kQueued || r.state == RequestState::kReserved);
      ASSERT_TRUE(r.placements.empty());
      ASSERT_TRUE(r.state != RequestState::kReserved || !r.holds.empty());
      continue;
    }
    ASSERT_FALSE(r.spec.guaranteed && r.state == RequestState::kPreempting);
    ASSERT_EQ(static_cast<int32_t>(r.placements.size()), r.spec.members);
    team_use[{r.spec.team, r.spec.pool, r.quota_model}] += r.spec.total_gpu_milli();
    for (const Placement& p : r.placements) {
      const Node* n = s.FindNode(p.node_id);
      ASSERT_NE(n, nullptr);
      ASSERT_EQ(n->pool, r.spec.pool);
      host_use[p.node_id].first += p.cpu_milli;
      host_use[p.node_id].second += p.memory_mib;
      for (int32_t g : p.gpu_indices) {
        const Gpu& gpu = n->gpus[g];
        if (!r.spec.gpu_models.empty()) {
          ASSERT_NE(std::find(r.spec.gpu_models.begin(), r.spec.gpu_models.end(), gpu.model),
                    r.spec.gpu_models.end());
        }
        if (p.mig_profile.empty()) {
          other_use[{p.node_id, g}]++;
        } else {
          mig_use[{p.node_id, g}].insert(absl::StrCat(p.mig_profile, "@", p.mig_start));
        }
        auto& use = gpu_use[{p.node_id, g}];
        use.first += p.gpu_milli;
        use.second += p.exclusive ? gpu.memory_mib : p.gpu_memory_mib;
        tenants[{p.node_id, g}]++;
      }
    }
  }
  for (const Node& n : s.nodes()) {
    ASSERT_LE(n.allocated_cpu_milli, n.cpu_milli);
    ASSERT_LE(n.allocated_memory_mib, n.memory_mib);
    ASSERT_EQ(n.allocated_cpu_milli, host_use[n.id].first);
    ASSERT_EQ(n.allocated_memory_mib, host_use[n.id].second);
    for (const Gpu& g : n.gpus) {
      const auto use = gpu_use[{n.id, g.index}];
      ASSERT_EQ(g.allocated_milli, use.first);
      ASSERT_EQ(g.allocated_memory_mib, use.second);
      ASSERT_LE(g.allocated_milli, kMilliPerGpu);
      ASSERT_LE(g.allocated_memory_mib, g.memory_mib);
      ASSERT_EQ(g.tenants, (tenants[{n.id, g.index}]));
      if (g.exclusive) {
        ASSERT_EQ(g.tenants, 1);
      }
      // MIG: a valid layout whose allocated instances are exactly the live
      // MIG placements, and no other work on a GPU with instances in use.
      const GpuModel* model = s.FindGpuModel(g.model);
      ASSERT_TRUE(ValidateMigLayout(model->mig_profiles, g.mig_layout).ok());
      std::multiset<std::string> allocated;
      for (const MigInstance& inst : g.mig_layout) {
        if (inst.allocated) allocated.insert(absl::StrCat(inst.profile, "@", inst.start));
      }
      ASSERT_EQ(allocated, (mig_use[{n.id, g.index}]));
      if (!allocated.empty()) {
        ASSERT_EQ((other_use[{n.id, g.index}]), 0);
      }
      // Coexistence: every pair of classes on the GPU may share it at the
      // isolation in use, and every pair on the node may share the node.
      const Isolation needed = allocated.empty() ? Isolation::kSoftSharing : Isolation::kMigOnly;
      for (size_t a = 1; a < 5; ++a) {
        for (size_t b = 1; b < 5; ++b) {
          const auto ca = static_cast<WorkloadClass>(a);
          const auto cb = static_cast<WorkloadClass>(b);
          const int pairs = (a == b) ? g.class_tenants[a] - 1 : g.class_tenants[b];
          if (g.class_tenants[a] > 0 && pairs > 0 && !g.exclusive) {
            ASSERT_GE(s.coexistence().Rule(ca, cb).gpu, needed)
                << "GPU " << n.name << "/" << g.index;
          }
          if (n.class_members[a] > 0 && n.class_members[b] > 0 &&
              (a != b || n.class_members[a] > 1)) {
            ASSERT_TRUE(s.coexistence().Rule(ca, cb).same_node);
          }
        }
      }
    }
  }
  // Quotas: nobody beyond nominal + borrowing limit; per cohort, pool and
  // model, the use beyond what teams keep never exceeds what they lend.
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<int64_t, int64_t>> cohorts;
  for (const auto& [key, used] : team_use) {
    const auto& [team, pool, model] = key;
    ASSERT_EQ(s.UsedMilli(team, pool, model), used);
    const Quota* q = s.FindQuota(team, pool, model);
    ASSERT_NE(q, nullptr);
    if (q->ceiling_milli() != kUnlimited) {
      ASSERT_LE(used, q->ceiling_milli()) << team;
    }
  }
  for (const auto& [name, team] : s.teams()) {
    for (const std::string pool : {"serving", "batch"}) {
      for (const Quota* q : s.QuotasOf(name, pool)) {
        auto& c = cohorts[{s.CohortOf(name), pool, q->gpu_model}];
        c.first += q->lendable_milli();
        c.second +=
            std::max<int64_t>(0, team_use[{name, pool, q->gpu_model}] - q->guaranteed_milli());
      }
    }
  }
  for (const auto& [key, c] : cohorts) {
    ASSERT_LE(c.second, c.first) << "cohort " << std::get<0>(key) << " lends " << c.first;
    // The quota book's running sums agree with the scan.
    const auto& [cohort, pool, model] = key;
    ASSERT_EQ(s.quota_book().CohortUseOf(cohort, pool, model), (CohortUse{c.first, c.second}))
        << "cohort " << cohort << " in " << pool << " " << model;
  }
  // Reservations: work started on a held GPU after the reservation was made
  // ends (as declared) before the window. (Work already there was planned
  // around.)
  for (const auto& [id, r] : s.live_requests()) {
    if (r.state != RequestState::kReserved) continue;
    for (const auto& [other_id, v] : s.live_requests()) {
      if (!HoldsCapacity(v.state) || v.admitted_at <= r.created_at) continue;
      for (const Placement& p : v.placements) {
        for (int32_t g : p.gpu_indices) {
          if (std::find(r.holds.begin(), r.holds.end(), GpuHold{p.node_id, g}) != r.holds.end()) {
            ASSERT_LE(v.declared_end(), r.spec.start_at)
                << "request " << other_id << " runs into reservation " << id;
          }
        }
      }
    }
  }
}

CapacityRequestSpec RandomSpec(std::mt19937_64& rng, int n, absl::Time now) {
  CapacityRequestSpec spec;
  spec.idempotency_key = absl::StrCat("k", n);
  static const char* const kTeams[] = {"t", "u", "a", "b"};
  spec.team = kTeams[rng() % 4];
  spec.pool = "batch";
  spec.workload_class = static_cast<WorkloadClass>(1 + rng() % 4);
  spec.members = 1 + rng() % 3;
  const int kind = static_cast<int>(rng() % 3);
  if (kind == 2) {
    // One MIG instance of a random profile of one MIG model.
    const std::string model = rng() % 2 ? "H100-80GB" : "A100-40GB";
    const std::vector<MigProfile>& profiles = *BuiltinMigProfiles(model);
    spec.shape.gpu = MigShape{profiles[rng() % profiles.size()].name, 0};
    spec.gpu_models = {model};
  } else if (kind == 1) {
    spec.shape.gpu = static_cast<int32_t>(1 + rng() % 4);
  } else {
    spec.shape.gpu = GpuFraction{static_cast<int64_t>(50 + rng() % 950),
                                 static_cast<int64_t>(1024 + rng() % (39 * 1024))};
  }
  spec.shape.cpu_milli = static_cast<int64_t>(rng() % 8000);
  spec.shape.memory_mib = static_cast<int64_t>(rng() % 65536);
  if (kind != 2 && rng() % 4 == 0) spec.gpu_models = {rng() % 2 ? "H100-80GB" : "A100-40GB"};
  spec.priority = static_cast<int32_t>(rng() % 4) - 1;
  spec.preemptible = rng() % 2 == 0;
  spec.guaranteed = !spec.preemptible && rng() % 8 == 0;
  spec.checkpoint_seconds = static_cast<int64_t>(rng() % 60);
  spec.checkpoint_interval_seconds = static_cast<int64_t>(rng() % 3) * 100;
  if (rng() % 3 == 0) spec.duration = absl::Seconds(1 + rng() % 100);
  if (rng() % 8 == 0) {
    spec.start_at = now + absl::Seconds(1 + rng() % 60);
    spec.duration = absl::Seconds(1 + rng() % 100);
  }
  return spec;
}

// How often each state was written, to show that a run reached the rules.
using StateCounts = std::map<RequestState, int>;

// Runs `steps` random operations; returns a transcript of every decision.
std::string RunRandom(uint64_t seed, int steps, StateCounts* counts = nullptr) {
  std::mt19937_64 rng(seed);
  State s = ::arbiter::testing::MakeState(/*nominal_milli=*/20'000);
  ChangeSet ch;
  // Teams t and u are cohorts of their own; a and b share cohort org, with
  // borrowing, lending limits and a per-model quota.
  for (const Team& team : std::vector<Team>{
           {"u", "", 1000}, {"org", "", 1000}, {"a", "org", 1000}, {"b", "org", 3000}}) {
    EXPECT_TRUE(CreateTeam(s, team, ch).ok());
  }
  for (const Quota& q :
       std::vector<Quota>{{"t", "batch", 20'000},
                          {"u", "batch", 12'000, "", 0, 4'000},
                          {"a", "batch", 8'000, "", kUnlimited, 6'000},
                          {"b", "batch", 6'000, "", 4'000, kUnlimited},
                          {"b", "batch", 4'000, "H100-80GB", 2'000, 1'000},
                          {"a", "batch", 2'000, "H100-80GB", kUnlimited, kUnlimited}}) {
    EXPECT_TRUE(SetQuota(s, q, kT0, ch).ok());
  }
  for (int i = 0; i < 6; ++i) {
    ::arbiter::testing::AddNode(
        s, MakeNode(absl::StrCat("n", i), 2 + i % 3, i % 2 ? "H100-80GB" : "A100-40GB", "batch",
                    32'000, 256 * 1024));
  }
  std::string transcript;
  std::vector<int64_t> ids;
  for (int step = 0; step < steps; ++step) {
    const absl::Time now = kT0 + absl::Seconds(step);
    ChangeSet changes;
    Tick(s, now, changes);
    CheckInvariants(s);
    if (::testing::Test::HasFatalFailure()) {
      ADD_FAILURE() << "invariant broken by Tick at step " << step << " with seed " << seed;
      break;
    }
    if (ids.empty() || rng() % 3 != 0) {
      auto out = RequestCapacity(s, RandomSpec(rng, step, now), now, changes);
      EXPECT_TRUE(out.ok()) << out.status();
      if (!out.ok()) break;
      ids.push_back(out->request.id);
      absl::StrAppend(&transcript, out->request.id, ":", RequestStateName(out->request.state));
      for (const Placement& p : out->request.placements) {
        absl::StrAppend(&transcript, "@", p.node_id, "/", p.gpu_indices.size());
      }
      absl::StrAppend(&transcript, ";");
    } else {
      const size_t pick = rng() % ids.size();
      auto out = ReleaseRequest(s, ids[pick], now, changes);
      ids.erase(ids.begin() + pick);
      if (out.ok()) absl::StrAppend(&transcript, "r", out->id, ";");
      absl::StrAppend(&transcript, "+", changes.changes.size(), ";");
    }
    CheckInvariants(s);
    if (::testing::Test::HasFatalFailure()) {
      ADD_FAILURE() << "invariant broken at step " << step << " with seed " << seed;
      break;
    }
    for (const Change& c : changes.changes) {
      const auto* w = std::get_if<RequestWrite>(&c);
      if (w != nullptr && counts != nullptr) (*counts)[w->request.state]++;
    }
  }
  return transcript;
}

TEST(ArbitrationRandomTest, InvariantsHoldAfterEveryOperation) {
  const uint64_t seed = ::arbiter::testing::TestSeed();
  std::cout << "seed: " << seed << " (rerun with ARBITER_TEST_SEED=" << seed << ")" << std::endl;
  StateCounts counts;
  for (int round = 0; round < 20; ++round) {
    RunRandom(seed + round, 400, &counts);
    ASSERT_FALSE(HasFailure()) << "seed " << seed + round;
  }
  // The runs reached preemption, reservations and their completion.
  for (RequestState reached : {RequestState::kPreempting, RequestState::kPreempted,
                               RequestState::kReserved, RequestState::kAdmitted}) {
    EXPECT_GT(counts[reached], 0) << RequestStateName(reached);
  }
  std::cout << "preempting " << counts[RequestState::kPreempting] << ", preempted "
            << counts[RequestState::kPreempted] << ", reserved " << counts[RequestState::kReserved]
            << "\n";
}

TEST(ArbitrationRandomTest, SameSeedGivesSameDecisions) {
  const uint64_t seed = ::arbiter::testing::TestSeed();
  std::cout << "seed: " << seed << "\n";
  EXPECT_EQ(RunRandom(seed, 500), RunRandom(seed, 500)) << "seed " << seed;
}

}  // namespace
}  // namespace arbiter::core
