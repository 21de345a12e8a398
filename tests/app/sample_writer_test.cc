// SampleWriter on the in-memory store: batches that arrive while a
// transaction is in flight share the next one, each still learns how many
// of its own samples were new, a failed transaction answers every batch in
// it, and the limits refuse with RESOURCE_EXHAUSTED. Waits are for events,
// never for time.
#include "app/sample_writer.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "app/worker_pool.h"
#include "tests/testing/memory_telemetry_store.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::app {
namespace {

using ::arbiter::testing::StatusIs;
using ::testing::ElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

core::GpuSample Sample(int32_t gpu, int seconds) {
  core::GpuSample s;
  s.at = kT0 + absl::Seconds(seconds);
  s.node_id = 1;
  s.gpu_index = gpu;
  s.interval = absl::Seconds(10);
  s.util_milli = 500;
  return s;
}

// The in-memory store's telemetry, with each InsertSampleBatches call
// recorded (the batch sizes), the first one held until Release(), and a
// failure on demand.
class GatedStore final : public ::arbiter::testing::MemoryTelemetryStore {
 public:
  absl::StatusOr<std::vector<int64_t>> InsertSampleBatches(
      absl::Span<const std::vector<core::GpuSample>> batches) override {
    {
      absl::MutexLock lock(&mu_);
      std::vector<size_t> sizes;
      for (const auto& b : batches) sizes.push_back(b.size());
      calls_.push_back(sizes);
    }
    if (!entered_.HasBeenNotified()) entered_.Notify();
    release_.WaitForNotification();
    {
      absl::MutexLock lock(&mu_);
      if (!fail_with_.ok()) return fail_with_;
    }
    return MemoryTelemetryStore::InsertSampleBatches(batches);
  }

  void WaitEntered() { entered_.WaitForNotification(); }
  void Release() { release_.Notify(); }
  void FailWith(absl::Status status) {
    absl::MutexLock lock(&mu_);
    fail_with_ = std::move(status);
  }
  std::vector<std::vector<size_t>> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Notification entered_;
  absl::Notification release_;
  absl::Mutex mu_;
  std::vector<std::vector<size_t>> calls_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_with_ ABSL_GUARDED_BY(mu_);
};

// What one batch was answered: its count or status, once.
struct Answer {
  absl::Notification done;
  absl::StatusOr<int64_t> stored = absl::UnknownError("not answered");
  size_t written = 0;
};

SampleWriter::Done AnswerTo(Answer* answer) {
  return [answer](absl::StatusOr<int64_t> stored, absl::Span<const core::GpuSample> samples) {
    answer->stored = std::move(stored);
    answer->written = samples.size();
    answer->done.Notify();
  };
}

TEST(SampleWriterTest, BatchesThatArriveDuringATransactionShareTheNextOne) {
  GatedStore store;
  WorkerPool workers(2, 100);
  SampleWriter writer(&store, &workers);
  Answer first, second, third;
  writer.Write({Sample(0, 0), Sample(1, 0)}, AnswerTo(&first));
  store.WaitEntered();  // The first transaction is in flight.
  writer.Write({Sample(0, 10), Sample(1, 10), Sample(2, 10)}, AnswerTo(&second));
  // Repeats one reading of the first batch and one of the second.
  writer.Write({Sample(0, 0), Sample(2, 10), Sample(3, 10)}, AnswerTo(&third));
  store.Release();
  for (Answer* a : {&first, &second, &third}) a->done.WaitForNotification();
  workers.Stop();
  EXPECT_THAT(store.calls(), ElementsAre(ElementsAre(2u), ElementsAre(3u, 3u)));
  EXPECT_EQ(first.stored.value_or(-1), 2);
  EXPECT_EQ(second.stored.value_or(-1), 3);
  EXPECT_EQ(third.stored.value_or(-1), 1);
  EXPECT_EQ(third.written, 3u);
  auto all = store.ListSamples(kT0, kT0 + absl::Minutes(1));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 6u);
}

TEST(SampleWriterTest, ATransactionHoldsAtMostTheLimitButAlwaysOneBatch) {
  GatedStore store;
  WorkerPool workers(1, 100);
  SampleWriter writer(&store, &workers, /*max_samples_per_commit=*/4);
  Answer a, b, c, d;
  writer.Write({Sample(0, 0)}, AnswerTo(&a));
  store.WaitEntered();
  writer.Write({Sample(0, 10), Sample(1, 10)}, AnswerTo(&b));
  writer.Write({Sample(0, 20), Sample(1, 20)}, AnswerTo(&c));
  // Over the limit on its own: goes alone.
  writer.Write({Sample(0, 30), Sample(1, 30), Sample(2, 30), Sample(3, 30), Sample(4, 30)},
               AnswerTo(&d));
  store.Release();
  for (Answer* x : {&a, &b, &c, &d}) x->done.WaitForNotification();
  workers.Stop();
  EXPECT_THAT(store.calls(), ElementsAre(ElementsAre(1u), ElementsAre(2u, 2u), ElementsAre(5u)));
  EXPECT_EQ(d.stored.value_or(-1), 5);
}

TEST(SampleWriterTest, ATransactionGathersBatchesUntilItsWindowEndsOrItIsFull) {
  GatedStore store;
  store.Release();  // Transactions run at once.
  WorkerPool workers(1, 100);
  // A window that does not end in this test: the transaction waits until
  // the limit's worth of samples wait.
  SampleWriter writer(&store, &workers, /*max_samples_per_commit=*/4,
                      /*max_waiting_samples=*/100, /*gather=*/absl::Hours(1));
  Answer a, b;
  writer.Write({Sample(0, 0), Sample(1, 0)}, AnswerTo(&a));
  writer.Write({Sample(0, 10), Sample(1, 10)}, AnswerTo(&b));
  for (Answer* x : {&a, &b}) x->done.WaitForNotification();
  EXPECT_THAT(store.calls(), ElementsAre(ElementsAre(2u, 2u)));

  // A short window: a lone batch goes once it ends.
  SampleWriter quick(&store, &workers, /*max_samples_per_commit=*/4,
                     /*max_waiting_samples=*/100, /*gather=*/absl::Milliseconds(10));
  Answer c;
  quick.Write({Sample(0, 20)}, AnswerTo(&c));
  c.done.WaitForNotification();
  workers.Stop();
  EXPECT_THAT(store.calls(), ElementsAre(ElementsAre(2u, 2u), ElementsAre(1u)));
  EXPECT_EQ(c.stored.value_or(-1), 1);
}

TEST(SampleWriterTest, AFailedTransactionAnswersEveryBatchInItAndStoresNone) {
  GatedStore store;
  WorkerPool workers(1, 100);
  SampleWriter writer(&store, &workers);
  store.FailWith(absl::UnavailableError("database down"));
  Answer a, b;
  writer.Write({Sample(0, 0)}, AnswerTo(&a));
  store.WaitEntered();
  writer.Write({Sample(1, 0)}, AnswerTo(&b));
  store.Release();
  a.done.WaitForNotification();
  b.done.WaitForNotification();
  EXPECT_THAT(a.stored.status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(b.stored.status(), StatusIs(absl::StatusCode::kUnavailable));
  store.FailWith(absl::OkStatus());
  Answer again;
  writer.Write({Sample(0, 0), Sample(1, 0)}, AnswerTo(&again));  // The agent's retry.
  again.done.WaitForNotification();
  workers.Stop();
  EXPECT_EQ(again.stored.value_or(-1), 2);
}

TEST(SampleWriterTest, RefusesWhenTooManySamplesWaitOrTheWorkersAreStopped) {
  GatedStore store;
  WorkerPool workers(1, 100);
  SampleWriter writer(&store, &workers, 20000, /*max_waiting_samples=*/3);
  Answer a, b, c;
  writer.Write({Sample(0, 0)}, AnswerTo(&a));
  store.WaitEntered();
  writer.Write({Sample(0, 10), Sample(1, 10)}, AnswerTo(&b));
  writer.Write({Sample(0, 20), Sample(1, 20)}, AnswerTo(&c));  // 4 would wait.
  ASSERT_TRUE(c.done.HasBeenNotified());                       // Answered at once.
  EXPECT_THAT(c.stored.status(), StatusIs(absl::StatusCode::kResourceExhausted));
  store.Release();
  a.done.WaitForNotification();
  b.done.WaitForNotification();
  EXPECT_EQ(b.stored.value_or(-1), 2);
  workers.Stop();
  Answer late;
  writer.Write({Sample(5, 0)}, AnswerTo(&late));
  ASSERT_TRUE(late.done.HasBeenNotified());
  EXPECT_THAT(late.stored.status(), StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace arbiter::app
