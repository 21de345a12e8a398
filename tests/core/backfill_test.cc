// Queueing policies against their own rules. A 32-GPU gang at the head of a
// busy pool of small requests gets its GPUs by its planned start under
// backfill and strict order, and starves under best-effort. On random traces
// under backfill, after every event: the head fits at its planned start with
// only what ends by then gone (nothing admitted behind it delays it), its
// planned start never moves later, and a request waiting past the
// starvation limit is the head. The seed is printed; rerun one with
// ARBITER_TEST_SEED=<seed>.
#include "core/backfill.h"

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

// Pool "batch" of `nodes` nodes of eight H100s, queued by `policy`; teams
// "small" and "gang" with quota for all of it.
State BatchState(QueueingPolicy policy, int nodes, int64_t starvation_limit_seconds) {
  State s;
  EXPECT_TRUE(s.LoadGpuModel({"H100-80GB", 81920, 132, 700, true}).ok());
  ChangeSet ch;
  EXPECT_TRUE(CreateCluster(s, {"c", ""}, ch).ok());
  Pool batch{"batch", LatencyClass::kBatch, ""};
  batch.queueing = policy;
  batch.starvation_limit_seconds = starvation_limit_seconds;
  EXPECT_TRUE(CreatePool(s, batch, ch).ok());
  for (const char* team : {"small", "gang"}) {
    EXPECT_TRUE(CreateTeam(s, {team, "", 1000}, ch).ok());
    EXPECT_TRUE(SetQuota(s, {team, "batch", 1'000'000}, kT0, ch).ok());
  }
  for (int i = 0; i < nodes; ++i) {
    ::arbiter::testing::AddNode(s, MakeNode(absl::StrCat("n", i), 8, "H100-80GB", "batch"));
  }
  return s;
}

CapacityRequestSpec Whole(const std::string& key, const std::string& team, int members, int gpus,
                          absl::Duration duration) {
  CapacityRequestSpec spec;
  spec.idempotency_key = key;
  spec.team = team;
  spec.pool = "batch";
  spec.workload_class = WorkloadClass::kTraining;
  spec.members = members;
  spec.shape.gpu = int32_t{gpus};
  spec.shape.cpu_milli = 1000;
  spec.shape.memory_mib = 4096;
  spec.duration = duration;
  return spec;
}

// What happened to the gang in a day of a busy pool.
struct GangDay {
  absl::Time first_planned_start = absl::InfiniteFuture();
  absl::Time admitted_at = absl::InfinitePast();
  // Small jobs that arrived after the gang and started before it.
  int small_admitted_while_waiting = 0;
};

// A day in minutes on a pool of 64 GPUs: small one-GPU jobs of 30 to 90
// minutes arrive faster than they end (up to 20 queued), each released at
// its declared end; at 01:00 a gang of four members of eight GPUs (32 GPUs)
// for four hours arrives.
GangDay RunGangDay(QueueingPolicy policy, uint64_t seed) {
  std::mt19937_64 rng(seed);
  State s = BatchState(policy, 8, kDefaultStarvationLimitSeconds);
  GangDay day;
  int64_t gang = 0;
  int n = 0;
  for (int minute = 0; minute < 24 * 60; ++minute) {
    const absl::Time now = kT0 + absl::Minutes(minute);
    ChangeSet ch;
    Tick(s, now, ch);
    // Releases at declared ends, oldest first.
    std::vector<int64_t> ending;
    for (int64_t id : s.HoldingIn("batch")) {
      if (s.FindLiveRequest(id)->declared_end() <= now) ending.push_back(id);
    }
    for (int64_t id : ending) EXPECT_TRUE(ReleaseRequest(s, id, now, ch).ok());
    if (minute == 60) {
      auto out = RequestCapacity(s, Whole("gang", "gang", 4, 8, absl::Hours(4)), now, ch);
      EXPECT_TRUE(out.ok()) << out.status();
      gang = out->request.id;
    }
    for (int i = 0; i < 2 && s.QueuedIn("batch").size() < 20; ++i) {
      const auto duration = absl::Minutes(30 + static_cast<int64_t>(rng() % 61));
      auto out =
          RequestCapacity(s, Whole(absl::StrCat("s", n++), "small", 1, 1, duration), now, ch);
      EXPECT_TRUE(out.ok()) << out.status();
    }
    if (gang == 0 || day.admitted_at != absl::InfinitePast()) continue;
    const CapacityRequest* g = s.FindLiveRequest(gang);
    if (g->state == RequestState::kAdmitted) {
      day.admitted_at = g->admitted_at;
      continue;
    }
    if (g->backfill_head() && day.first_planned_start == absl::InfiniteFuture()) {
      day.first_planned_start = g->planned_start;
    }
    for (const Change& c : ch.changes) {
      const auto* w = std::get_if<RequestWrite>(&c);
      if (w != nullptr && w->request.state == RequestState::kAdmitted && w->request.id > gang) {
        ++day.small_admitted_while_waiting;
      }
    }
  }
  return day;
}

TEST(BackfillTest, AGangAtTheHeadOfABusyPoolGetsItsGpusByItsPlannedStartUnderBackfill) {
  const uint64_t seed = ::arbiter::testing::TestSeed();
  std::cout << "seed: " << seed << " (rerun with ARBITER_TEST_SEED=" << seed << ")" << std::endl;
  const GangDay backfill = RunGangDay(QueueingPolicy::kBackfill, seed);
  ASSERT_NE(backfill.first_planned_start, absl::InfiniteFuture()) << "the gang was never planned";
  ASSERT_NE(backfill.admitted_at, absl::InfinitePast()) << "the gang never started";
  EXPECT_LE(backfill.admitted_at, backfill.first_planned_start);
  // Small jobs that end before the gang starts, or run elsewhere, kept
  // the pool busy while it waited.
  EXPECT_GT(backfill.small_admitted_while_waiting, 0);

  const GangDay strict = RunGangDay(QueueingPolicy::kStrict, seed);
  EXPECT_NE(strict.admitted_at, absl::InfinitePast());
  EXPECT_EQ(strict.small_admitted_while_waiting, 0);

  // Best-effort: every GPU that frees goes to a small job that fits now.
  const GangDay best_effort = RunGangDay(QueueingPolicy::kBestEffort, seed);
  EXPECT_EQ(best_effort.admitted_at, absl::InfinitePast());
  EXPECT_GT(best_effort.small_admitted_while_waiting, 0);
  std::cout << "gang arrived at 01:00; backfill: planned "
            << absl::FormatTime("%H:%M", backfill.first_planned_start, absl::UTCTimeZone())
            << ", started " << absl::FormatTime("%H:%M", backfill.admitted_at, absl::UTCTimeZone())
            << ", " << backfill.small_admitted_while_waiting
            << " small jobs admitted meanwhile; strict: started "
            << absl::FormatTime("%H:%M", strict.admitted_at, absl::UTCTimeZone())
            << "; best-effort: still queued after a day, "
            << best_effort.small_admitted_while_waiting << " small jobs admitted meanwhile\n";
}

// One team and one priority: the queue order is by age (and waiting for
// victims first), so what comes before the head is known.
CapacityRequestSpec RandomSpec(std::mt19937_64& rng, int n) {
  CapacityRequestSpec spec =
      Whole(absl::StrCat("k", n), "small", 1, 1, absl::Seconds(5 + rng() % 60));
  switch (rng() % 5) {
    case 0:
      spec.shape.gpu = int32_t{8};
      spec.members = static_cast<int32_t>(1 + rng() % 3);
      break;
    case 1:
      spec.shape.gpu = int32_t{static_cast<int32_t>(1 + rng() % 4)};
      break;
    case 2:
      spec.shape.gpu = GpuFraction{static_cast<int64_t>(100 + rng() % 900), 8 * 1024};
      break;
    case 3:
      spec.shape.gpu = MigShape{"3g.40gb", 0};
      break;
    default:
      break;
  }
  if (rng() % 5 == 0) spec.duration = absl::ZeroDuration();  // Open-ended.
  return spec;
}

TEST(BackfillTest, NothingAdmittedBehindTheHeadDelaysItAndTheStarvedBecomeTheHead) {
  const uint64_t seed = ::arbiter::testing::TestSeed();
  std::cout << "seed: " << seed << " (rerun with ARBITER_TEST_SEED=" << seed << ")" << std::endl;
  constexpr int64_t kStarvation = 40;
  int planned = 0, starved = 0;
  for (int trace = 0; trace < 300; ++trace) {
    std::mt19937_64 rng(seed + trace);
    State s = BatchState(QueueingPolicy::kBackfill, 3, kStarvation);
    std::vector<int64_t> ids;
    int64_t last_head = 0;
    absl::Time last_start = absl::InfiniteFuture();
    for (int step = 0; step < 150; ++step) {
      const absl::Time now = kT0 + absl::Seconds(step);
      ChangeSet ch;
      Tick(s, now, ch);
      // The request a pass makes the head first: the oldest that waited
      // for capacity when last decided, past the limit.
      int64_t starving = 0;
      for (int64_t id : s.QueuedIn("batch")) {
        const CapacityRequest& r = *s.FindLiveRequest(id);
        if (r.created_at + absl::Seconds(kStarvation) > now) break;
        if (r.reason_code == kReasonInsufficientCapacity) {
          starving = id;
          break;
        }
      }
      // Requests waiting for their victims come before the head in order
      // (they may take its GPUs on a pass): the plan may move then.
      const bool preempting = !s.requests().WaitingIn("batch").empty();
      bool released = false;
      if (ids.empty() || rng() % 100 < 55) {
        auto out = RequestCapacity(s, RandomSpec(rng, step), now, ch);
        ASSERT_TRUE(out.ok()) << out.status();
        ids.push_back(out->request.id);
      } else {
        const size_t pick = rng() % ids.size();
        (void)ReleaseRequest(s, ids[pick], now, ch);
        ids.erase(ids.begin() + static_cast<ptrdiff_t>(pick));
        released = true;
      }
      const int64_t head = s.HeadOf("batch");
      const std::string where = absl::StrCat("seed ", seed + trace, " step ", step);
      if (head != 0) {
        const CapacityRequest h = *s.FindLiveRequest(head);
        ASSERT_EQ(h.state, RequestState::kQueued) << where;
        if (h.planned_start != absl::InfiniteFuture() && h.planned_start > now) {
          ++planned;
          EXPECT_TRUE(FitsAt(s, h, h.planned_start))
              << where << ": head " << head << " no longer fits at its planned start";
          // A release only frees; an arrival ahead of the head in order may
          // take its GPUs (it is not behind the head).
          // So may a request older than the head, which comes before it.
          bool older_admitted = false;
          for (const Change& c : ch.changes) {
            const auto* w = std::get_if<RequestWrite>(&c);
            older_admitted |=
                w != nullptr && w->request.state == RequestState::kAdmitted && w->request.id < head;
          }
          if (released && !preempting && !older_admitted && head == last_head && last_start > now) {
            EXPECT_LE(h.planned_start, last_start) << where << ": the plan moved later";
          }
        }
        last_start = h.planned_start;
      }
      last_head = head;
      // A pass (every release starts one when a request starves) makes the
      // starving request the head while it still waits for capacity.
      const CapacityRequest* still = starving == 0 ? nullptr : s.FindLiveRequest(starving);
      if (!released || still == nullptr || still->reason_code != kReasonInsufficientCapacity) {
        continue;
      }
      ++starved;
      EXPECT_EQ(head, starving) << where << ": request " << starving << " starves";
      if (::testing::Test::HasFailure()) return;
    }
  }
  // The traces reached planned heads and starved requests.
  EXPECT_GT(planned, 1000);
  EXPECT_GT(starved, 100);
  std::cout << "events with a planned head: " << planned << ", with a starved request: " << starved
            << "\n";
}

}  // namespace
}  // namespace arbiter::core
