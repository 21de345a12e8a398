// EndedKeyLookup (app/ended_keys.h) over the in-memory store, with a gate
// in front of the store's FindEndedKeys that holds a query until the test
// opens it, so that what arrives meanwhile is seen to go in one query.
#include "app/ended_keys.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

#include "store/memory/memory_store.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::app {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::StatusIs;

// The memory store's reads, with FindEndedKeys held shut until Open() and
// the size of each query recorded.
class GatedReads : public store::RequestReads {
 public:
  absl::StatusOr<core::CapacityRequest> GetRequest(int64_t id) override {
    return inner_.GetRequest(id);
  }
  absl::StatusOr<std::vector<core::CapacityRequest>> ListRequests(
      const store::RequestFilter& filter) override {
    return inner_.ListRequests(filter);
  }
  absl::StatusOr<store::RequestPage> ListRequestPage(const store::RequestFilter& filter) override {
    return inner_.ListRequestPage(filter);
  }
  absl::StatusOr<std::vector<store::EndedKey>> FindEndedKeys(const std::vector<std::string>& keys,
                                                             absl::Time since) override {
    absl::MutexLock lock(&mu_);
    sizes_.push_back(keys.size());
    sinces_.push_back(since);
    mu_.Await(absl::Condition(&open_));
    if (!fail_.ok()) return fail_;
    return inner_.FindEndedKeys(keys, since);
  }

  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    fail_ = std::move(status);
  }
  // Waits until `n` queries have reached the store.
  void AwaitQueries(size_t n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sizes_.size() >= n; };
    mu_.Await(absl::Condition(&reached));
  }
  std::vector<size_t> sizes() {
    absl::MutexLock lock(&mu_);
    return sizes_;
  }
  std::vector<absl::Time> sinces() {
    absl::MutexLock lock(&mu_);
    return sinces_;
  }

 private:
  store::MemoryStore inner_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> sizes_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> sinces_ ABSL_GUARDED_BY(mu_);
};

// Collects the answers of `expected` lookups.
class Answers {
 public:
  explicit Answers(int expected) : left_(expected) {}
  EndedKeyLookup::Done done() {
    return [this](absl::StatusOr<EndedKeyLookup::Result> result) {
      absl::MutexLock lock(&mu_);
      results_.push_back(std::move(result));
      if (--left_ == 0) all_.Notify();
    };
  }
  std::vector<absl::StatusOr<EndedKeyLookup::Result>> Await() {
    all_.WaitForNotification();
    absl::MutexLock lock(&mu_);
    return results_;
  }

 private:
  absl::Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::StatusOr<EndedKeyLookup::Result>> results_ ABSL_GUARDED_BY(mu_);
  absl::Notification all_;
};

TEST(EndedKeyLookupTest, LookupsThatArriveDuringAQueryGoTogetherInTheNext) {
  GatedReads reads;
  testing::SimulatedClock clock;
  EndedKeyLookupOptions options;
  options.window = absl::Hours(24);
  EndedKeyLookup lookup(&reads, &clock, options);
  Answers answers(101);
  const absl::Time first_at = clock.TimeNow();
  lookup.Find("first", answers.done());
  reads.AwaitQueries(1);  // Held at the store.
  clock.Advance(absl::Seconds(1));
  for (int i = 0; i < 100; ++i) lookup.Find(absl::StrCat("k", i), answers.done());
  reads.Open();
  const std::vector<absl::StatusOr<EndedKeyLookup::Result>> results = answers.Await();
  EXPECT_EQ(reads.sizes(), (std::vector<size_t>{1, 100}));
  EXPECT_EQ(lookup.queries(), 2);
  EXPECT_EQ(lookup.lookups(), 101);
  // Each looks back a window from when its query started, and says when.
  EXPECT_EQ(reads.sinces(),
            (std::vector<absl::Time>{first_at - absl::Hours(24),
                                     first_at + absl::Seconds(1) - absl::Hours(24)}));
  int at_first = 0;
  for (const auto& r : results) {
    ASSERT_THAT(r, IsOk());
    EXPECT_FALSE(r->found.has_value()) << "no request ended with these keys";
    if (r->checked_at == first_at) ++at_first;
  }
  EXPECT_EQ(at_first, 1);
}

TEST(EndedKeyLookupTest, AStoreErrorAnswersEveryLookupOfTheQuery) {
  GatedReads reads;
  testing::SimulatedClock clock;
  EndedKeyLookup lookup(&reads, &clock, EndedKeyLookupOptions{});
  reads.Fail(absl::UnavailableError("connection refused"));
  reads.Open();
  Answers answers(3);
  for (int i = 0; i < 3; ++i) lookup.Find(absl::StrCat("k", i), answers.done());
  for (const auto& r : answers.Await()) {
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnavailable));
  }
}

TEST(EndedKeyLookupTest, StopAnswersWhatWaitsAndRefusesWhatComesLater) {
  GatedReads reads;
  testing::SimulatedClock clock;
  EndedKeyLookup lookup(&reads, &clock, EndedKeyLookupOptions{});
  Answers waiting(2);
  lookup.Find("a", waiting.done());
  reads.AwaitQueries(1);
  lookup.Find("b", waiting.done());
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    lookup.Stop();
    stopped = true;
  });
  reads.Open();
  for (const auto& r : waiting.Await()) EXPECT_THAT(r, IsOk());
  stopper.join();
  EXPECT_TRUE(stopped);
  Answers late(1);
  lookup.Find("c", late.done());
  EXPECT_THAT(late.Await()[0], StatusIs(absl::StatusCode::kUnavailable));
}

TEST(EndedKeyLookupTest, TooManyWaitingIsResourceExhausted) {
  GatedReads reads;
  testing::SimulatedClock clock;
  EndedKeyLookupOptions options;
  options.max_waiting = 2;
  EndedKeyLookup lookup(&reads, &clock, options);
  Answers answers(3);
  lookup.Find("held", answers.done());
  reads.AwaitQueries(1);
  lookup.Find("a", answers.done());
  lookup.Find("b", answers.done());
  Answers refused(1);
  lookup.Find("c", refused.done());
  EXPECT_THAT(refused.Await()[0], StatusIs(absl::StatusCode::kResourceExhausted));
  reads.Open();
  for (const auto& r : answers.Await()) EXPECT_THAT(r, IsOk());
  Answers after(1);  // Room again.
  lookup.Find("d", after.done());
  EXPECT_THAT(after.Await()[0], IsOk());
}

TEST(EndedKeyLookupTest, NotEnabledAnswersAtOnceWithoutTheStore) {
  GatedReads reads;  // Shut: a query would block.
  testing::SimulatedClock clock;
  EndedKeyLookupOptions options;
  options.enabled = false;
  EndedKeyLookup lookup(&reads, &clock, options);
  Answers answers(1);
  lookup.Find("k", answers.done());
  const auto results = answers.Await();
  ASSERT_THAT(results[0], IsOk());
  EXPECT_FALSE(results[0]->found.has_value());
  EXPECT_EQ(results[0]->checked_at, clock.TimeNow());
  EXPECT_TRUE(reads.sizes().empty());
}

}  // namespace
}  // namespace arbiter::app
