// HeapReleaser (server/heap_release.h) on tcmalloc, which arbiterd and this
// test link: the pages a burst of allocations freed stay with the allocator
// until released, and a release over the threshold hands them back to the
// system (tcmalloc's unmapped bytes grow by them).
#include "server/heap_release.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include <gperftools/malloc_extension.h>

namespace arbiter::server {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Bytes tcmalloc has returned to the system. Fails the test where the
// allocator is not tcmalloc.
int64_t ReturnedBytes() {
  size_t value = 0;
  EXPECT_TRUE(
      MallocExtension::instance()->GetNumericProperty("tcmalloc.pageheap_unmapped_bytes", &value))
      << "not linked with tcmalloc";
  return static_cast<int64_t>(value);
}

// Allocates and touches `mib` MiB in 1 MiB blocks, then frees them all: the
// allocator keeps the pages free.
void Burst(int mib) {
  std::vector<std::unique_ptr<char[]>> blocks;
  for (int i = 0; i < mib; ++i) {
    blocks.emplace_back(new char[kMiB]);
    std::memset(blocks.back().get(), i, kMiB);
  }
  volatile char sink = blocks.back()[kMiB - 1];
  (void)sink;
}

TEST(HeapReleaserTest, ABurstsFreedPagesGoBackOverTheThreshold) {
  Burst(256);
  ASSERT_GT(HeapFreeBytes(), 128 * kMiB) << "tcmalloc keeps the burst's pages";
  const int64_t returned = ReturnedBytes();
  HeapReleaser releaser(absl::Hours(1), 64 * kMiB);
  EXPECT_GT(releaser.ReleaseIfOver(), 128 * kMiB);
  EXPECT_LT(HeapFreeBytes(), 64 * kMiB);
  EXPECT_GT(ReturnedBytes() - returned, 128 * kMiB);
}

TEST(HeapReleaserTest, FreePagesUnderTheThresholdAreKept) {
  Burst(256);
  const int64_t free = HeapFreeBytes();
  ASSERT_GT(free, 128 * kMiB);
  const int64_t returned = ReturnedBytes();
  HeapReleaser releaser(absl::Hours(1), free + 64 * kMiB);
  EXPECT_EQ(releaser.ReleaseIfOver(), 0);
  EXPECT_EQ(ReturnedBytes(), returned);
  EXPECT_GT(HeapFreeBytes(), 128 * kMiB);
}

TEST(HeapReleaserTest, ItsThreadReleasesOnItsOwn) {
  HeapReleaser releaser(absl::Milliseconds(20), 64 * kMiB);
  const int64_t returned = ReturnedBytes();
  Burst(256);
  // The thread's next check releases the burst; wait for it (no time bound
  // asserted: only that it happens).
  for (int i = 0; i < 3000 && ReturnedBytes() - returned <= 128 * kMiB; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GT(ReturnedBytes() - returned, 128 * kMiB);
  EXPECT_LT(HeapFreeBytes(), 64 * kMiB);
}

}  // namespace
}  // namespace arbiter::server
