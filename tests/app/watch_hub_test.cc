// The watch hub on the in-memory store: revisions on events and lists,
// resumption from any revision (from the window and from the store behind
// it, across a restart of the application), the too-old status, bookmarks,
// filters and limits. Waits are for events, never for time: a wait that
// runs out fails with what was seen.
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "app/application.h"
#include "core/arbitration.h"
#include "ledger/chain.h"
#include "store/memory/memory_store.h"
#include "tests/app/callers.h"
#include "tests/core/test_state.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::app {
namespace {

using ::arbiter::testing::Developer;
using ::arbiter::testing::IsOk;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::StatusIs;
using ::arbiter::testing::WholeSpec;

// (revision, request id, type) of one event.
struct Seen {
  int64_t revision = 0;
  int64_t request_id = 0;
  EventType type = EventType::kAdmitted;
  bool operator==(const Seen& o) const {
    return revision == o.revision && request_id == o.request_id && type == o.type;
  }
};

// Records what the hub hands it. Thread-safe.
class Recorder final : public WatchSubscriber {
 public:
  void Deliver(const WatchBatchPtr& batch) override {
    absl::MutexLock lock(&mu_);
    ++batches_;
    for (const WatchEventPtr& e : batch->events) {
      seen_.push_back({e->event.revision, e->event.request.id, e->event.type});
      events_.push_back(e);
    }
  }
  void Bookmark(int64_t revision) override {
    absl::MutexLock lock(&mu_);
    bookmarks_.push_back(revision);
  }
  void End(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    ended_ = status;
  }
  size_t Backlog() const override { return 0; }

  // Waits until `done` holds, or `limit` passes (a safety net, not a
  // measure): returns whether it held.
  bool WaitFor(const std::function<bool(const Recorder&)>& done,
               absl::Duration limit = absl::Minutes(1)) {
    absl::MutexLock lock(&mu_);
    auto holds = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return done(*this); };
    return mu_.AwaitWithTimeout(absl::Condition(&holds), limit);
  }
  std::vector<Seen> seen() const {
    absl::MutexLock lock(&mu_);
    return seen_;
  }
  int64_t batches() const {
    absl::MutexLock lock(&mu_);
    return batches_;
  }
  std::vector<WatchEventPtr> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  std::vector<int64_t> bookmarks() const {
    absl::MutexLock lock(&mu_);
    return bookmarks_;
  }
  std::optional<absl::Status> ended() const {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  int64_t last_revision() const {
    absl::MutexLock lock(&mu_);
    return seen_.empty() ? 0 : seen_.back().revision;
  }

  // For the conditions, with the lock held.
  const std::vector<Seen>& seen_locked() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return seen_; }
  const std::vector<int64_t>& bookmarks_locked() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return bookmarks_;
  }
  bool ended_locked() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return ended_.has_value(); }

 private:
  mutable absl::Mutex mu_;
  std::vector<Seen> seen_ ABSL_GUARDED_BY(mu_);
  std::vector<WatchEventPtr> events_ ABSL_GUARDED_BY(mu_);
  int64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> bookmarks_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> ended_ ABSL_GUARDED_BY(mu_);
};

// The seed of the random kill points: ARBITER_TEST_SEED, or a fresh one
// (printed).
uint32_t Seed() {
  uint32_t seed = std::random_device()();
  if (const char* s = std::getenv("ARBITER_TEST_SEED")) seed = std::strtoul(s, nullptr, 10);
  std::cout << "seed: " << seed << " (rerun with ARBITER_TEST_SEED=" << seed << ")" << std::endl;
  return seed;
}

template <typename T>
absl::StatusOr<T> Await(const std::function<void(Reply<T>)>& call) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<T>>>();
  call([promise](absl::StatusOr<T> r) { promise->set_value(std::move(r)); });
  return promise->get_future().get();
}

class WatchHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_unique<store::MemoryStore>();
    Start();
    auto done = std::make_shared<std::promise<absl::Status>>();
    app_->arbiter().Submit(
        [](core::State& s, absl::Time now, core::ChangeSet& ch) -> absl::Status {
          if (auto st = core::CreateCluster(s, {"c", ""}, ch); !st.ok()) return st;
          if (auto st = core::CreatePool(s, {"serving", core::LatencyClass::kServing, ""}, ch);
              !st.ok()) {
            return st;
          }
          if (auto st = core::CreateTeam(s, {"t", "", 1000}, ch); !st.ok()) return st;
          if (auto st = core::SetQuota(s, {"t", "serving", 64000}, now, ch); !st.ok()) return st;
          for (int i = 1; i <= 4; ++i) {
            auto node =
                core::RegisterNode(s, MakeNode(absl::StrCat("n", i), 4, "H100-80GB"), now, ch);
            if (!node.ok()) return node.status();
          }
          return absl::OkStatus();
        },
        [done](const absl::Status& status) { done->set_value(status); });
    ASSERT_THAT(done->get_future().get(), IsOk());
  }

  void TearDown() override { app_.reset(); }

  // (Re)starts the application on the store, as a restarted (or newly
  // elected) arbiterd would.
  void Start() {
    app_.reset();
    ApplicationOptions options;
    options.watch = watch_;
    absl::StatusOr<std::unique_ptr<Application>> made =
        Application::Create(store_.get(), &clock_, options);
    ASSERT_THAT(made, IsOk());
    app_ = *std::move(made);
  }

  // Admits one GPU (returns its id), or releases `id`.
  int64_t Admit(const std::string& key) {
    core::CapacityRequestSpec spec = WholeSpec(key, 1, 1);
    const Resource target{spec.team, spec.pool};
    absl::StatusOr<RequestDecision> d = Await<RequestDecision>([&](Reply<RequestDecision> r) {
      app_->allocations().RequestCapacity(Developer(), target, std::move(spec), std::move(r));
    });
    EXPECT_THAT(d, IsOk());
    return d.ok() ? d->request.id : 0;
  }
  void Release(int64_t id) {
    absl::StatusOr<core::CapacityRequest> r =
        Await<core::CapacityRequest>([&](Reply<core::CapacityRequest> reply) {
          app_->allocations().ReleaseAllocation(Developer(), id, {}, std::move(reply));
        });
    EXPECT_THAT(r, IsOk());
  }

  // Every request event the ledger holds after `after`: the truth a watcher
  // must see, in order.
  std::vector<Seen> Truth(int64_t after) {
    store::LedgerFilter all;
    all.after_seq = after;
    all.limit = 1'000'000;
    absl::StatusOr<std::vector<ledger::Entry>> entries = store_->ListLedger(all);
    EXPECT_THAT(entries, IsOk());
    std::vector<Seen> out;
    for (const ledger::Entry& e : entries.value_or(std::vector<ledger::Entry>{})) {
      absl::string_view action = e.action;
      absl::string_view subject = e.subject;
      int64_t id = 0;
      if (!absl::ConsumePrefix(&action, "request.") || !absl::ConsumePrefix(&subject, "request/") ||
          !absl::SimpleAtoi(subject, &id)) {
        continue;
      }
      out.push_back({e.seq, id, EventTypeOfState(core::RequestStateFromName(action))});
    }
    return out;
  }

  absl::StatusOr<int64_t> Watch(Recorder& r, int64_t start, WatchFilter filter = {}) {
    return app_->allocations().Watch(Developer(), filter, start, &r);
  }

  // A recorder that outlives the application (its streams end with it).
  Recorder& NewRecorder() { return recorders_.emplace_back(); }

  testing::SimulatedClock clock_;
  WatchOptions watch_;
  std::unique_ptr<store::MemoryStore> store_;
  std::deque<Recorder> recorders_;
  std::unique_ptr<Application> app_;
};

TEST_F(WatchHubTest, ListThenWatchFromTheListsRevisionMissesNothingAndRepeatsNothing) {
  const int64_t a = Admit("a");
  absl::StatusOr<store::RequestPage> page =
      Await<store::RequestPage>([&](Reply<store::RequestPage> reply) {
        app_->allocations().ListRequests(Developer(), store::RequestFilter(), std::move(reply));
      });
  ASSERT_THAT(page, IsOk());
  ASSERT_EQ(page->requests.size(), 1u);
  EXPECT_EQ(page->revision, store_->LedgerHead());

  Recorder& r = NewRecorder();
  absl::StatusOr<int64_t> id = Watch(r, page->revision);
  ASSERT_THAT(id, IsOk());
  Release(a);
  const int64_t b = Admit("b");
  const std::vector<Seen> truth = Truth(page->revision);
  ASSERT_EQ(truth.size(), 2u);
  ASSERT_TRUE(r.WaitFor([&](const Recorder& x) { return x.seen_locked().size() >= 2; }));
  EXPECT_THAT(r.seen(), ::testing::ElementsAreArray(truth));
  EXPECT_EQ(r.seen()[0].request_id, a);
  EXPECT_EQ(r.seen()[0].type, EventType::kReleased);
  EXPECT_EQ(r.seen()[1].request_id, b);
  app_->hub().Unsubscribe(*id);
}

TEST_F(WatchHubTest, AWatcherKilledAtRandomPointsAndResumedSeesEveryEventOnceInOrder) {
  // A window of four events: most resumptions read the store behind it.
  watch_.window_events = 4;
  Start();
  const int64_t start = store_->LedgerHead();
  std::mt19937 rng(Seed());
  std::vector<Seen> received;
  int64_t last = start;
  std::vector<int64_t> live;
  for (int round = 0; round < 12; ++round) {
    Recorder* r = &NewRecorder();
    absl::StatusOr<int64_t> id = Watch(*r, last);
    ASSERT_THAT(id, IsOk());
    // Some commits, then the watcher is killed after a random number of
    // events (perhaps mid-batch), or the whole application restarts.
    for (int i = 0; i < 5; ++i) {
      if (!live.empty() && rng() % 2 == 0) {
        Release(live.back());
        live.pop_back();
      } else if (live.size() < 12) {
        live.push_back(Admit(absl::StrCat("k", round, "-", i)));
      }
    }
    const size_t want = Truth(last).size();
    const size_t kill_after = rng() % (want + 1);
    ASSERT_TRUE(r->WaitFor([&](const Recorder& x) {
      return x.seen_locked().size() >= kill_after || x.ended_locked();
    })) << "round "
        << round;
    if (round % 4 == 3) {
      Start();  // The stream ends with the old application (failover).
      EXPECT_TRUE(r->ended().has_value());
    } else {
      app_->hub().Unsubscribe(*id);
    }
    for (const Seen& s : r->seen()) received.push_back(s);
    last = received.empty() ? start : received.back().revision;
  }
  // The last resumption catches up to the end.
  Recorder& tail = NewRecorder();
  ASSERT_THAT(Watch(tail, last), IsOk());
  const size_t rest = Truth(last).size();
  ASSERT_TRUE(tail.WaitFor([&](const Recorder& x) { return x.seen_locked().size() >= rest; }));
  for (const Seen& s : tail.seen()) received.push_back(s);
  EXPECT_THAT(received, ::testing::ElementsAreArray(Truth(start)));
}

TEST_F(WatchHubTest, ARevisionOlderThanTheReplayLimitIsOutOfRange) {
  watch_.replay_limit = 3;
  Start();
  const int64_t old = store_->LedgerHead();
  for (int i = 0; i < 3; ++i) Admit(absl::StrCat("k", i));
  Recorder& r = NewRecorder();
  // Published asynchronously: wait until the hub has the head.
  Recorder& probe = NewRecorder();
  ASSERT_THAT(Watch(probe, old), IsOk());
  ASSERT_TRUE(probe.WaitFor([](const Recorder& x) { return x.seen_locked().size() >= 3; }));
  EXPECT_THAT(Watch(r, old - 1), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(Watch(r, -1), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(WatchHubTest, ACommitWithoutRequestEventsDeliversNothing) {
  Recorder& all = NewRecorder();
  ASSERT_THAT(Watch(all, 0), IsOk());
  auto done = std::make_shared<std::promise<absl::Status>>();
  app_->arbiter().Submit(
      [](core::State& s, absl::Time now, core::ChangeSet& ch) {
        return core::SetQuota(s, {"t", "serving", 32000}, now, ch);
      },
      [done](const absl::Status& status) { done->set_value(status); });
  ASSERT_THAT(done->get_future().get(), IsOk());
  const int64_t a = Admit("a");
  ASSERT_TRUE(all.WaitFor([](const Recorder& x) { return !x.seen_locked().empty(); }));
  EXPECT_EQ(all.seen().front().request_id, a);
  EXPECT_EQ(all.batches(), 1);
}

TEST_F(WatchHubTest, AStartRevisionAheadOfTheLastCommitIsOutOfRange) {
  Admit("a");
  const int64_t head = store_->LedgerHead();
  Recorder& r = NewRecorder();
  EXPECT_THAT(Watch(r, head + 1), StatusIs(absl::StatusCode::kOutOfRange));
  // The last commit itself, whether or not the hub has published it yet.
  absl::StatusOr<int64_t> id = Watch(r, head);
  ASSERT_THAT(id, IsOk());
  const int64_t b = Admit("b");
  ASSERT_TRUE(r.WaitFor([](const Recorder& x) { return !x.seen_locked().empty(); }));
  EXPECT_EQ(r.seen().front().request_id, b);
  EXPECT_EQ(r.seen().front().revision, head + 1);
  app_->hub().Unsubscribe(*id);
}

TEST_F(WatchHubTest, AReplayFromTheStoreShowsEachRequestAsItsEventLeftIt) {
  // A window of one event: the replay reads the ledger.
  watch_.window_events = 1;
  Start();
  const int64_t start = store_->LedgerHead();
  const int64_t a = Admit("a");
  Release(a);
  Admit("b");
  Recorder& r = NewRecorder();
  ASSERT_THAT(Watch(r, start), IsOk());
  ASSERT_TRUE(r.WaitFor([](const Recorder& x) { return x.seen_locked().size() >= 3; }));
  const std::vector<WatchEventPtr> events = r.events();
  absl::StatusOr<core::CapacityRequest> now = store_->GetRequest(a);
  ASSERT_THAT(now, IsOk());
  ASSERT_EQ(now->state, core::RequestState::kReleased);

  const core::CapacityRequest& admitted = events[0]->event.request;
  EXPECT_EQ(events[0]->event.type, EventType::kAdmitted);
  EXPECT_EQ(admitted.id, a);
  EXPECT_EQ(admitted.state, core::RequestState::kAdmitted);
  ASSERT_EQ(admitted.placements.size(), 1u);
  EXPECT_EQ(admitted.placements[0].gpu_indices.size(), 1u);
  EXPECT_EQ(admitted.placements[0].gpu_milli, 1000);
  EXPECT_EQ(admitted.spec.idempotency_key, now->spec.idempotency_key);

  const core::CapacityRequest& released = events[1]->event.request;
  EXPECT_EQ(events[1]->event.type, EventType::kReleased);
  EXPECT_EQ(released.state, core::RequestState::kReleased);
  EXPECT_EQ(released.updated_at, now->updated_at);
  EXPECT_EQ(events[2]->event.request.state, core::RequestState::kAdmitted);
}

TEST(LedgerPayloadTest, ParsePayloadReadsWhatPayloadWrites) {
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"a=b", "x;y"}, {"empty", ""}, {"escaped", "back\\slash\nnewline=;"}, {"plain", "v"}};
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> parsed =
      ledger::ParsePayload(ledger::Payload(fields));
  ASSERT_THAT(parsed, IsOk());
  EXPECT_EQ(*parsed, fields);
  EXPECT_THAT(ledger::ParsePayload(""), IsOk());
  EXPECT_THAT(ledger::ParsePayload("novalue"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ledger::ParsePayload("k=v\\"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(WatchHubTest, AnIdleStreamGetsBookmarksWithTheCurrentRevision) {
  watch_.bookmark_every = absl::Seconds(1);
  Start();
  // From the head: the hub may not have fanned the last batch out yet.
  const int64_t head = store_->LedgerHead();
  Recorder& r = NewRecorder();
  ASSERT_THAT(Watch(r, head), IsOk());
  // The simulated clock moves; the hub looks at it every quarter period.
  for (int i = 0; i < 600 && r.bookmarks().empty(); ++i) {
    clock_.Advance(absl::Milliseconds(300));
    (void)r.WaitFor([](const Recorder& x) { return !x.bookmarks_locked().empty(); },
                    absl::Milliseconds(100));
  }
  ASSERT_FALSE(r.bookmarks().empty());
  EXPECT_EQ(r.bookmarks().front(), head);
  EXPECT_TRUE(r.seen().empty());
}

TEST_F(WatchHubTest, StreamsOpenedTogetherGetTheirFirstBookmarksSpreadOverThePeriod) {
  watch_.bookmark_every = absl::Seconds(8);
  Start();
  const int64_t head = store_->LedgerHead();
  std::vector<Recorder*> streams;
  for (int i = 0; i < 8; ++i) {
    streams.push_back(&NewRecorder());
    ASSERT_THAT(Watch(*streams.back(), head), IsOk());
  }
  auto with_bookmarks = [&] {
    int n = 0;
    for (const Recorder* r : streams) n += r->bookmarks().empty() ? 0 : 1;
    return n;
  };
  // Half a period on: some streams are due, not all. The hub looks at the
  // (simulated) clock every quarter period of real time, at most a second.
  clock_.Advance(absl::Seconds(4));
  (void)streams.front()->WaitFor([](const Recorder&) { return false; }, absl::Milliseconds(1500));
  const int half = with_bookmarks();
  EXPECT_GT(half, 0);
  EXPECT_LT(half, 8);
  // A whole period on: every stream has had its first.
  clock_.Advance(absl::Seconds(4));
  for (Recorder* r : streams) {
    EXPECT_TRUE(r->WaitFor([](const Recorder& x) { return !x.bookmarks_locked().empty(); }));
  }
  EXPECT_EQ(with_bookmarks(), 8);
}

TEST_F(WatchHubTest, FiltersByNodeRequestAndTypeThroughTheIndexes) {
  Recorder& on_n2 = NewRecorder();
  Recorder& one = NewRecorder();
  Recorder& notices = NewRecorder();
  Recorder& all = NewRecorder();
  WatchFilter node;
  node.cluster = "c";
  node.node = "n2";
  ASSERT_THAT(Watch(on_n2, 0, node), IsOk());
  WatchFilter released;
  released.types = 1u << static_cast<uint32_t>(EventType::kReleased);
  ASSERT_THAT(Watch(notices, 0, released), IsOk());
  ASSERT_THAT(Watch(all, 0), IsOk());
  std::vector<int64_t> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(Admit(absl::StrCat("k", i)));
  WatchFilter request;
  request.request_id = ids[5];
  ASSERT_THAT(Watch(one, store_->LedgerHead(), request), IsOk());
  for (int64_t id : ids) Release(id);
  ASSERT_TRUE(all.WaitFor([](const Recorder& x) { return x.seen_locked().size() >= 16; }));
  ASSERT_TRUE(notices.WaitFor([](const Recorder& x) { return x.seen_locked().size() >= 8; }));
  ASSERT_TRUE(one.WaitFor([](const Recorder& x) { return !x.seen_locked().empty(); }));

  for (const Seen& s : notices.seen()) EXPECT_EQ(s.type, EventType::kReleased);
  ASSERT_EQ(one.seen().size(), 1u);
  EXPECT_EQ(one.seen()[0].request_id, ids[5]);
  // Exactly the events of requests placed on n2.
  std::vector<int64_t> expected;
  for (int64_t id : ids) {
    absl::StatusOr<core::CapacityRequest> r = store_->GetRequest(id);
    ASSERT_THAT(r, IsOk());
    if (app_->nodes().Get(r->placements.at(0).node_id).second == "n2") expected.push_back(id);
  }
  ASSERT_FALSE(expected.empty());
  ASSERT_TRUE(on_n2.WaitFor(
      [&](const Recorder& x) { return x.seen_locked().size() >= 2 * expected.size(); }));
  std::vector<int64_t> got;
  for (const Seen& s : on_n2.seen()) got.push_back(s.request_id);
  std::vector<int64_t> twice;
  for (int64_t id : expected) twice.push_back(id);
  for (int64_t id : expected) twice.push_back(id);
  EXPECT_THAT(got, ::testing::ElementsAreArray(twice));
}

// A queued request whose explanation changes and nothing else: watchers
// and reads see the new explanation; the store keeps the row as it was
// queued and the ledger records nothing.
TEST_F(WatchHubTest, AQueuedRequestsNewExplanationStreamsAndIsNeitherWrittenNorLedgered) {
  auto run = [&](Arbiter::Decide decide) {
    auto done = std::make_shared<std::promise<absl::Status>>();
    app_->arbiter().Submit(std::move(decide),
                           [done](const absl::Status& status) { done->set_value(status); });
    return done->get_future().get();
  };
  auto quota = [&](const std::string& team, int64_t milli) {
    return run([=](core::State& s, absl::Time now, core::ChangeSet& ch) {
      return core::SetQuota(s, {team, "serving", milli}, now, ch);
    });
  };
  // Team t holds its quota of 2 GPUs and queues a third; team u fills the
  // other 14 GPUs.
  ASSERT_THAT(quota("t", 2000), IsOk());
  Admit("a1");
  Admit("a2");
  core::CapacityRequestSpec third = WholeSpec("q", 1, 1);
  const Resource target{third.team, third.pool};
  absl::StatusOr<RequestDecision> q = Await<RequestDecision>([&](Reply<RequestDecision> r) {
    app_->allocations().RequestCapacity(Developer(), target, std::move(third), std::move(r));
  });
  ASSERT_THAT(q, IsOk());
  ASSERT_EQ(q->request.state, core::RequestState::kQueued);
  ASSERT_EQ(q->request.reason_code, core::kReasonQuotaExceeded);
  ASSERT_THAT(run([](core::State& s, absl::Time now, core::ChangeSet& ch) -> absl::Status {
                if (auto st = core::CreateTeam(s, {"u", "", 1000}, ch); !st.ok()) return st;
                if (auto st = core::SetQuota(s, {"u", "serving", 14000}, now, ch); !st.ok()) {
                  return st;
                }
                core::CapacityRequestSpec fill = WholeSpec("u-fill", 14, 1);
                fill.team = "u";
                // A new key: no ended request of the window used it.
                auto out = core::RequestCapacity(s, fill, now, ch, now);
                if (!out.ok()) return out.status();
                return out->request.state == core::RequestState::kAdmitted
                           ? absl::OkStatus()
                           : absl::InternalError("u-fill not admitted");
              }),
              IsOk());

  // From the head: the hub may not have fanned the last batch out yet.
  const int64_t head = store_->LedgerHead();
  Recorder& r = NewRecorder();
  ASSERT_THAT(Watch(r, head), IsOk());
  // t's quota grows: q now waits for capacity, not quota.
  ASSERT_THAT(quota("t", 64000), IsOk());
  const std::vector<Seen> truth = Truth(head);
  EXPECT_THAT(truth, ::testing::IsEmpty()) << "a new explanation is not ledgered";
  EXPECT_EQ(store_->LedgerHead(), head + 1) << "the quota change only";
  absl::StatusOr<core::CapacityRequest> stored = store_->GetRequest(q->request.id);
  ASSERT_THAT(stored, IsOk());
  EXPECT_EQ(stored->reason_code, core::kReasonQuotaExceeded) << "the row is as first queued";

  ASSERT_TRUE(r.WaitFor([](const Recorder& x) { return !x.seen_locked().empty(); }));
  ASSERT_EQ(r.seen().size(), 1u);
  EXPECT_EQ(r.seen()[0].request_id, q->request.id);
  EXPECT_EQ(r.seen()[0].type, EventType::kQueued);
  EXPECT_EQ(r.seen()[0].revision, head + 1) << "the revision of the change before it";
  absl::StatusOr<core::CapacityRequest> read =
      Await<core::CapacityRequest>([&](Reply<core::CapacityRequest> reply) {
        app_->allocations().GetRequest(Developer(), q->request.id, std::move(reply));
      });
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(read->state, core::RequestState::kQueued);
  EXPECT_NE(read->reason_code, core::kReasonQuotaExceeded) << "reads show the current one";
  EXPECT_FALSE(read->reason_code.empty());

  // Once decided, the row holds its decision and the read no longer needs
  // the explanation.
  Release(q->request.id);
  EXPECT_EQ(app_->arbiter().explanations().size(), 0u);
}

TEST_F(WatchHubTest, StreamsBeyondTheCallersLimitAreRefused) {
  watch_.max_streams_per_caller = 2;
  Start();
  Recorder& a = NewRecorder();
  Recorder& b = NewRecorder();
  Recorder& c = NewRecorder();
  ASSERT_THAT(Watch(a, 0), IsOk());
  absl::StatusOr<int64_t> second = Watch(b, 0);
  ASSERT_THAT(second, IsOk());
  EXPECT_THAT(Watch(c, 0), StatusIs(absl::StatusCode::kResourceExhausted));
  app_->hub().Unsubscribe(*second);
  EXPECT_THAT(Watch(c, 0), IsOk());
  EXPECT_EQ(app_->hub().stats().refused, 1);
}

}  // namespace
}  // namespace arbiter::app
