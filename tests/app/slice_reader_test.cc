// SliceReader: slice after slice, with gaps and restarts, the usage RollUp
// computes from what it hands over equals the usage from a whole read of
// [from - 5 min, to); a store error makes the next slice read whole; and the
// store is asked for no more than each slice's own span when slices follow
// each other.
#include "app/slice_reader.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace arbiter::app {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);
constexpr absl::Duration kBefore = absl::Minutes(5);

// Four GPUs of one node over two hours, each reporting at its own interval
// (10 s to 4 min) with random gaps; GPU 3 in two MIG instances.
std::vector<core::GpuSample> RandomSamples(std::mt19937& rng) {
  std::vector<core::GpuSample> out;
  for (int32_t gpu = 0; gpu < 4; ++gpu) {
    const absl::Duration every = absl::Seconds(10 + rng() % 230);
    for (int32_t instance : gpu == 3 ? std::vector<int32_t>{1, 2} : std::vector<int32_t>{-1}) {
      for (absl::Time t = kT0; t < kT0 + absl::Hours(2); t += every) {
        if (rng() % 7 == 0) continue;
        core::GpuSample s;
        s.at = t;
        s.node_id = 1;
        s.gpu_index = gpu;
        s.mig_instance = instance;
        s.mig_profile = instance < 0 ? "" : "3g.40gb";
        s.interval = every;
        s.util_milli = static_cast<int32_t>(rng() % 1000);
        s.fb_used_mib = 1000 + gpu;
        s.power_mw = 50000;
        out.push_back(s);
      }
    }
  }
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

std::vector<core::HeldMember> Members() {
  std::vector<core::HeldMember> out;
  for (int32_t gpu = 0; gpu < 4; ++gpu) {
    core::HeldMember m;
    m.request_id = gpu + 1;
    m.node_id = 1;
    m.gpu_indices = {gpu};
    m.gpu_milli = gpu == 3 ? 428 : 1000;
    m.mig_profile = gpu == 3 ? "3g.40gb" : "";
    m.from = kT0 + absl::Minutes(3 * gpu);
    m.until = absl::InfiniteFuture();
    out.push_back(m);
  }
  return out;
}

std::string Usage(const std::vector<core::MemberUsage>& usage) {
  std::string out;
  for (const core::MemberUsage& u : usage) {
    out += std::to_string(u.allocated_milli_seconds) + "/" +
           std::to_string(u.sampled_milli_seconds) + "/" + std::to_string(u.used_milli_seconds) +
           "/" + std::to_string(u.peak_busy_milli) + "/" + std::to_string(u.energy_mwh) + " ";
  }
  return out;
}

TEST(SliceReaderTest, CarriedSlicesRollUpAsWholeReadsDo) {
  std::mt19937 rng(11);
  const std::vector<core::HeldMember> members = Members();
  int slices = 0;
  for (int round = 0; round < 30; ++round) {
    const std::vector<core::GpuSample> samples = RandomSamples(rng);
    int64_t rows_read = 0;
    int64_t whole_rows = 0;  // What reading each slice whole would have read.
    bool fail_next = false;
    SliceReader::ReadFn read = [&](absl::Time from,
                                   absl::Time to) -> absl::StatusOr<std::vector<core::GpuSample>> {
      if (fail_next) {
        fail_next = false;
        return absl::UnavailableError("down");
      }
      std::vector<core::GpuSample> out;
      for (const core::GpuSample& s : samples) {
        if (s.at >= from && s.at < to) out.push_back(s);
      }
      rows_read += static_cast<int64_t>(out.size());
      return out;
    };
    SliceReader reader(kBefore);
    for (absl::Time from = kT0 + absl::Minutes(5); from < kT0 + absl::Minutes(115);) {
      const absl::Time to = from + absl::Seconds(20 + rng() % 300);
      if (rng() % 40 == 0) fail_next = true;
      absl::StatusOr<std::vector<core::GpuSample>> got = reader.Read(from, to, read);
      if (!got.ok()) {
        EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
        continue;  // The same slice again, read whole.
      }
      std::vector<core::GpuSample> whole;
      for (const core::GpuSample& s : samples) {
        if (s.at >= from - kBefore && s.at < to) whole.push_back(s);
      }
      ASSERT_EQ(Usage(core::RollUp(members, *got, from, to)),
                Usage(core::RollUp(members, whole, from, to)))
          << "round " << round << ", slice from " << from;
      EXPECT_LE(got->size(), whole.size());
      whole_rows += static_cast<int64_t>(whole.size());
      ++slices;
      // Now and then a gap (a pass that did not run) or a step back (late
      // samples rolled up again): the next slice reads whole.
      from = rng() % 20 == 0 ? to + absl::Minutes(rng() % 20) - absl::Minutes(10) : to;
    }
    // Carried over, most of each slice's 5 minutes ahead is not read again.
    EXPECT_LT(rows_read * 2, whole_rows);
  }
  EXPECT_GT(slices, 500);
}

}  // namespace
}  // namespace arbiter::app
