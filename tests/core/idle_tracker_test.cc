// IdleTracker against core::FindIdle over the raw samples: fed the RollUp of
// consecutive one-minute slices (as TelemetryMaintenance feeds it), it must
// find the same idle requests, with the same peaks and held time, at every
// bucket boundary of random fleets; and it judges nothing it has not seen
// whole.
#include "core/idle_tracker.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

namespace arbiter::core {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);  // A whole hour.

struct Fleet {
  std::vector<HeldMember> members;  // All live (held until further notice).
  std::vector<GpuSample> samples;   // In time order.
};

// `gpus` GPUs on one node, a reading a minute of each over [start, end);
// requests of one or two members (whole GPUs, or two halves of one GPU)
// starting at random times. Each GPU is quiet, spikes once at a random
// time, or goes silent for a random stretch.
Fleet RandomFleet(std::mt19937& rng, int gpus, absl::Time start, absl::Time end) {
  Fleet fleet;
  std::uniform_int_distribution<int> minute_of(
      0, static_cast<int>((end - start) / absl::Minutes(1)) - 1);
  int64_t id = 1;
  for (int g = 0; g < gpus; ++g) {
    const int members = rng() % 2 == 0 ? 1 : 2;
    for (int m = 0; m < members; ++m) {
      HeldMember h;
      h.request_id = id;
      h.member = m;
      h.team = "team";
      h.pool = "pool";
      h.workload_class = static_cast<WorkloadClass>(1 + rng() % 4);
      h.node_id = 1;
      h.gpu_indices = {g};
      h.gpu_milli = members == 1 ? 1000 : 500;
      h.preemptible = rng() % 2 == 0;
      h.from = start + absl::Minutes(minute_of(rng)) * (rng() % 3 == 0 ? 1 : 0);
      h.until = absl::InfiniteFuture();
      fleet.members.push_back(h);
      if (members == 2 && rng() % 2 == 0) ++id;  // The halves: one request or two.
    }
    ++id;
    const int mode = rng() % 3;
    const absl::Time spike = start + absl::Minutes(minute_of(rng));
    const absl::Time gap_from = start + absl::Minutes(minute_of(rng));
    const absl::Duration gap = absl::Minutes(rng() % 90);
    for (absl::Time t = start; t < end; t += absl::Minutes(1)) {
      if (mode == 2 && t >= gap_from && t < gap_from + gap) continue;
      GpuSample s;
      s.at = t;
      s.node_id = 1;
      s.gpu_index = g;
      s.interval = absl::Minutes(1);
      s.util_milli = static_cast<int32_t>(rng() % 40);
      if (mode == 1 && t == spike) s.util_milli = 800;
      s.fb_used_mib = 1000;
      fleet.samples.push_back(s);
    }
  }
  std::stable_sort(fleet.samples.begin(), fleet.samples.end(),
                   [](const GpuSample& a, const GpuSample& b) { return a.at < b.at; });
  return fleet;
}

// What TelemetryMaintenance does each pass: the RollUp of [from, to) from
// the members held in it and the samples from 5 minutes before it; in
// parts of `part` members (all at once when 0).
void AddSlice(IdleTracker& tracker, const Fleet& fleet, absl::Time from, absl::Time to,
              size_t part = 0) {
  std::vector<HeldMember> held;
  for (const HeldMember& m : fleet.members) {
    if (m.from < to) held.push_back(m);
  }
  std::vector<GpuSample> read;
  for (const GpuSample& s : fleet.samples) {
    if (s.at >= from - absl::Minutes(5) && s.at < to) read.push_back(s);
  }
  if (part == 0) part = std::max<size_t>(held.size(), 1);
  const absl::Span<const HeldMember> all(held);
  for (size_t at = 0; at < all.size(); at += part) {
    const absl::Span<const HeldMember> some = all.subspan(at, part);
    tracker.Add(from, to, some, RollUp(some, read, from, to));
  }
}

std::string Describe(const std::vector<IdleFinding>& findings) {
  std::string out;
  for (const IdleFinding& f : findings) {
    out += std::to_string(f.request_id) + ":" + std::to_string(f.peak_busy_milli) + ":" +
           std::to_string(f.idle_milli_seconds) + ":" + std::string(IdleActionName(f.action)) + " ";
  }
  return out;
}

TEST(IdleTrackerTest, FindsWhatTheRawSamplesShowAtEveryBucketBoundary) {
  std::mt19937 rng(20261127);
  const std::vector<IdlePolicy> policies = IdlePoliciesInForce({});
  int compared = 0;
  int idle_found = 0;
  for (int fleet_no = 0; fleet_no < 20; ++fleet_no) {
    const absl::Time start = kT0 - absl::Hours(6);
    const absl::Time end = kT0 + absl::Hours(2);
    const Fleet fleet = RandomFleet(rng, 12, start, end);
    IdleTracker tracker(absl::Hours(4));  // The defaults' longest window.
    ASSERT_EQ(tracker.bucket(), absl::Minutes(5));
    for (absl::Time t = start; t < end;) {
      const absl::Time to = std::min(t + absl::Minutes(1), tracker.BucketEnd(t));
      AddSlice(tracker, fleet, t, to);
      t = to;
      if (t != tracker.BucketStart(t)) continue;
      std::vector<GpuSample> before;
      for (const GpuSample& s : fleet.samples) {
        if (s.at < t) before.push_back(s);
      }
      const std::vector<IdleFinding> want = FindIdle(fleet.members, before, policies, t);
      const std::vector<IdleFinding> got = tracker.FindIdle(fleet.members, policies);
      if (t - start >= absl::Hours(4)) {  // Every window seen whole.
        EXPECT_EQ(Describe(got), Describe(want)) << "fleet " << fleet_no << " at " << t;
        ++compared;
        idle_found += static_cast<int>(want.size());
      } else {
        // Only what the tracker saw whole is judged, and then as the samples say.
        for (const IdleFinding& f : got) {
          bool in_want = false;
          for (const IdleFinding& w : want) in_want = in_want || w.request_id == f.request_id;
          EXPECT_TRUE(in_want) << "request " << f.request_id << " at " << t;
        }
      }
    }
  }
  EXPECT_GT(compared, 400);
  EXPECT_GT(idle_found, 100);  // The comparison is not of empty lists only.
}

// Requests that ended are not kept: the tracker holds the live ones only,
// however many ended within its longest window, and still judges the live
// ones as the raw samples do.
TEST(IdleTrackerTest, KeepsOnlyTheLiveRequests) {
  std::mt19937 rng(20261128);
  const std::vector<IdlePolicy> policies = IdlePoliciesInForce({});
  const absl::Time start = kT0 - absl::Hours(6);
  const absl::Time end = kT0 + absl::Hours(1);
  Fleet fleet = RandomFleet(rng, 16, start, end);
  // Every other request ends at a random time before kT0 - 1 h.
  std::vector<HeldMember> live;
  absl::flat_hash_set<int64_t> live_ids;
  for (HeldMember& m : fleet.members) {
    if (m.request_id % 2 == 0) {
      m.until = m.from + absl::Minutes(10 + m.request_id * 7 % 200);
    } else {
      live.push_back(m);
      live_ids.insert(m.request_id);
    }
  }
  ASSERT_LT(live_ids.size(), 16u);
  IdleTracker tracker(absl::Hours(4));
  int judged = 0;
  for (absl::Time t = start; t < end;) {
    const absl::Time to = std::min(t + absl::Minutes(1), tracker.BucketEnd(t));
    AddSlice(tracker, fleet, t, to);
    t = to;
    EXPECT_LE(tracker.tracked_requests(), live_ids.size()) << "at " << t;
    if (t != tracker.BucketStart(t) || t - start < absl::Hours(4)) continue;
    std::vector<GpuSample> before;
    for (const GpuSample& s : fleet.samples) {
      if (s.at < t) before.push_back(s);
    }
    EXPECT_EQ(Describe(tracker.FindIdle(live, policies)),
              Describe(FindIdle(live, before, policies, t)))
        << "at " << t;
    ++judged;
  }
  EXPECT_GT(judged, 10);
  EXPECT_GT(tracker.tracked_requests(), 0u);
}

// TelemetryMaintenance hands a slice's members over in parts: the tracker
// keeps what it keeps of the whole slice, and judges alike.
TEST(IdleTrackerTest, ASliceInPartsIsTheSliceWhole) {
  std::mt19937 rng(20261129);
  const std::vector<IdlePolicy> policies = IdlePoliciesInForce({});
  const absl::Time start = kT0 - absl::Hours(5);
  const absl::Time end = kT0 + absl::Hours(1);
  Fleet fleet = RandomFleet(rng, 16, start, end);
  for (HeldMember& m : fleet.members) {
    if (m.request_id % 3 == 0) m.until = m.from + absl::Minutes(10 + m.request_id * 7 % 200);
  }
  std::vector<HeldMember> live;
  for (const HeldMember& m : fleet.members) {
    if (m.until == absl::InfiniteFuture()) live.push_back(m);
  }
  IdleTracker whole(absl::Hours(4));
  IdleTracker parts(absl::Hours(4));
  int judged = 0;
  for (absl::Time t = start; t < end;) {
    const absl::Time to = std::min(t + absl::Minutes(1), whole.BucketEnd(t));
    AddSlice(whole, fleet, t, to);
    AddSlice(parts, fleet, t, to, 3);
    t = to;
    ASSERT_EQ(parts.tracked_from(), whole.tracked_from()) << "at " << t;
    ASSERT_EQ(parts.tracked_to(), whole.tracked_to()) << "at " << t;
    ASSERT_EQ(parts.tracked_requests(), whole.tracked_requests()) << "at " << t;
    if (t != whole.BucketStart(t) || t - start < absl::Hours(4)) continue;
    EXPECT_EQ(Describe(parts.FindIdle(live, policies)), Describe(whole.FindIdle(live, policies)))
        << "at " << t;
    ++judged;
  }
  EXPECT_GT(judged, 10);
  EXPECT_GT(whole.tracked_requests(), 0u);
}

TEST(IdleTrackerTest, JudgesNothingBeforeItHasSeenAWholeWindowAndForgetsWhatIsRewound) {
  std::mt19937 rng(7);
  Fleet fleet = RandomFleet(rng, 4, kT0 - absl::Hours(6), kT0 + absl::Hours(1));
  for (GpuSample& s : fleet.samples) s.util_milli = 0;  // All idle.
  for (HeldMember& m : fleet.members) {
    m.from = kT0 - absl::Hours(6);
    m.workload_class = WorkloadClass::kBatchAnalytics;  // 30-minute window.
  }
  IdleTracker tracker(absl::Hours(4));
  EXPECT_TRUE(tracker.FindIdle(fleet.members, IdlePoliciesInForce({})).empty());
  // Tracking starts at kT0: nothing is idle until 30 minutes are seen.
  absl::Time t = kT0;
  for (; t < kT0 + absl::Minutes(25); t += absl::Minutes(1)) {
    AddSlice(tracker, fleet, t, t + absl::Minutes(1));
  }
  EXPECT_TRUE(tracker.FindIdle(fleet.members, IdlePoliciesInForce({})).empty());
  for (; t < kT0 + absl::Minutes(40); t += absl::Minutes(1)) {
    AddSlice(tracker, fleet, t, t + absl::Minutes(1));
  }
  EXPECT_FALSE(tracker.FindIdle(fleet.members, IdlePoliciesInForce({})).empty());
  // Late samples for kT0 + 12 min: everything from its bucket is forgotten
  // and the tracker resumes there.
  tracker.Rewind(kT0 + absl::Minutes(12));
  EXPECT_EQ(tracker.tracked_to(), kT0 + absl::Minutes(10));
  EXPECT_EQ(tracker.tracked_from(), kT0);
  tracker.Rewind(kT0 - absl::Minutes(1));  // Before anything seen: start again.
  EXPECT_EQ(tracker.tracked_to(), absl::InfinitePast());
  EXPECT_TRUE(tracker.FindIdle(fleet.members, IdlePoliciesInForce({})).empty());
}

}  // namespace
}  // namespace arbiter::core
