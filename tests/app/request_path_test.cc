// The request path end to end on the in-memory store, without a socket or a
// database: the application's use cases (app/allocations.h) decide through
// the engine, commit through a store that passes the same contract suite as
// PostgreSQL (tests/store/store_contract.h), and ledger every decision.
#include <future>
#include <memory>
#include <string>
#include <vector>

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

// An identified caller with no role binding.
Caller Stranger() {
  Caller c;
  c.principal = "mallory";
  return c;
}

// Waits for the one reply of a use case.
template <typename T>
class Awaited {
 public:
  Reply<T> reply() {
    return
        [promise = promise_](absl::StatusOr<T> result) { promise->set_value(std::move(result)); };
  }
  absl::StatusOr<T> get() { return promise_->get_future().get(); }

 private:
  std::shared_ptr<std::promise<absl::StatusOr<T>>> promise_ =
      std::make_shared<std::promise<absl::StatusOr<T>>>();
};

class RequestPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_unique<store::MemoryStore>();
    Start();
    // Cluster "c", pool "serving", team "t" with 3 GPUs of quota, one node
    // with four H100s: through the engine, as the governance calls would.
    ASSERT_THAT(
        Run([](core::State& s, absl::Time now, core::ChangeSet& ch) -> absl::Status {
          if (auto st = core::CreateCluster(s, {"c", ""}, ch); !st.ok()) return st;
          if (auto st = core::CreatePool(s, {"serving", core::LatencyClass::kServing, ""}, ch);
              !st.ok()) {
            return st;
          }
          if (auto st = core::CreateTeam(s, {"t", "", 1000}, ch); !st.ok()) return st;
          if (auto st = core::SetQuota(s, {"t", "serving", 3000}, now, ch); !st.ok()) {
            return st;
          }
          return core::RegisterNode(s, MakeNode("n1", 4, "H100-80GB"), now, ch).status();
        }),
        IsOk());
  }

  // (Re)starts the application on the store, as a restarted arbiterd would.
  void Start(ApplicationOptions options = {}) {
    app_.reset();
    absl::StatusOr<std::unique_ptr<Application>> made =
        Application::Create(store_.get(), &clock_, options);
    ASSERT_THAT(made, IsOk());
    app_ = *std::move(made);
  }

  // Runs one command on the engine and waits for its answer.
  absl::Status Run(Arbiter::Decide decide) {
    auto done = std::make_shared<std::promise<absl::Status>>();
    app_->arbiter().Submit(std::move(decide),
                           [done](const absl::Status& status) { done->set_value(status); });
    return done->get_future().get();
  }

  absl::StatusOr<RequestDecision> Request(const Caller& caller, const std::string& key, int gpus) {
    Awaited<RequestDecision> decided;
    core::CapacityRequestSpec spec = WholeSpec(key, 1, gpus);
    const Resource target{spec.team, spec.pool};
    app_->allocations().RequestCapacity(caller, target, std::move(spec), decided.reply());
    return decided.get();
  }

  std::vector<ledger::Entry> Ledger() {
    store::LedgerFilter all;
    all.limit = 100000;
    absl::StatusOr<std::vector<ledger::Entry>> entries = store_->ListLedger(all);
    EXPECT_THAT(entries, IsOk());
    return entries.ok() ? *entries : std::vector<ledger::Entry>{};
  }

  testing::SimulatedClock clock_;
  std::unique_ptr<store::MemoryStore> store_;
  std::unique_ptr<Application> app_;
};

TEST_F(RequestPathTest, AnAdmittedRequestIsDurableLedgeredAndSurvivesARestart) {
  const size_t before = Ledger().size();
  absl::StatusOr<RequestDecision> d = Request(Developer(), "k1", 2);
  ASSERT_THAT(d, IsOk());
  EXPECT_FALSE(d->replayed);
  ASSERT_EQ(d->request.state, core::RequestState::kAdmitted);
  ASSERT_EQ(d->request.placements.size(), 1u);
  EXPECT_EQ(d->request.placements[0].gpu_indices.size(), 2u);

  // Acknowledged means committed: the store holds it, and the ledger records
  // it, chained, with the caller as the actor.
  absl::StatusOr<core::CapacityRequest> stored = store_->GetRequest(d->request.id);
  ASSERT_THAT(stored, IsOk());
  EXPECT_EQ(stored->state, core::RequestState::kAdmitted);
  const std::vector<ledger::Entry> entries = Ledger();
  ASSERT_EQ(entries.size(), before + 1);
  EXPECT_EQ(entries.back().action, "request.admitted");
  EXPECT_EQ(entries.back().subject, absl::StrCat("request/", d->request.id));
  EXPECT_EQ(entries.back().actor, kUnidentifiedActor);
  const ledger::Verdict verdict = ledger::VerifyChain(entries, 0, ledger::kGenesisHash);
  EXPECT_TRUE(verdict.ok) << verdict.problem;
  EXPECT_EQ(verdict.count, static_cast<int64_t>(entries.size()));

  // A restarted application loads the allocation back: one GPU of quota left.
  Start();
  absl::StatusOr<RequestDecision> over = Request(Developer(), "k2", 2);
  ASSERT_THAT(over, IsOk());
  EXPECT_NE(over->request.state, core::RequestState::kAdmitted) << "3 GPUs of quota, 4 asked";
}

TEST_F(RequestPathTest, ARetriedKeyReplaysTheStoredRequest) {
  absl::StatusOr<RequestDecision> first = Request(Developer(), "same", 1);
  ASSERT_THAT(first, IsOk());
  const size_t entries = Ledger().size();
  absl::StatusOr<RequestDecision> again = Request(Developer(), "same", 1);
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->request.id, first->request.id);
  EXPECT_EQ(again->request.state, core::RequestState::kAdmitted);
  EXPECT_EQ(Ledger().size(), entries) << "a replay writes nothing";
}

TEST_F(RequestPathTest, ARefusedCallerWritesNothingAndTheRefusalIsRecorded) {
  const size_t entries = Ledger().size();
  EXPECT_THAT(Request(Stranger(), "k", 1), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(Ledger().size(), entries);
  store::RequestFilter all;
  absl::StatusOr<std::vector<core::CapacityRequest>> requests = store_->ListRequests(all);
  ASSERT_THAT(requests, IsOk());
  EXPECT_TRUE(requests->empty());
  // The refusal is recorded off the caller's thread: wait for it.
  std::vector<store::AccessDenial> denials;
  for (int i = 0; i < 500 && denials.empty(); ++i) {
    denials = store_->AccessDenials();
    if (denials.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(denials.size(), 1u);
  EXPECT_EQ(denials[0].principal, "mallory");
  EXPECT_EQ(denials[0].method, "AllocationService.RequestCapacity");
  EXPECT_EQ(denials[0].code, "PERMISSION_DENIED");
}

TEST_F(RequestPathTest, AFailedCommitIsUnavailableAndTheRetryDecidesOnce) {
  const size_t entries = Ledger().size();
  store_->FailNextCommits(1, absl::UnavailableError("connection lost during COMMIT"));
  EXPECT_THAT(Request(Developer(), "k", 2), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(Ledger().size(), entries) << "nothing of a failed batch is written";

  // The engine reloaded the durable state: the retry is decided afresh, once.
  absl::StatusOr<RequestDecision> retried = Request(Developer(), "k", 2);
  ASSERT_THAT(retried, IsOk());
  EXPECT_FALSE(retried->replayed);
  EXPECT_EQ(retried->request.state, core::RequestState::kAdmitted);
  EXPECT_EQ(Ledger().size(), entries + 1);
  // Its GPUs are counted once: of the quota's three GPUs one is left.
  absl::StatusOr<RequestDecision> more = Request(Developer(), "k2", 2);
  ASSERT_THAT(more, IsOk());
  EXPECT_NE(more->request.state, core::RequestState::kAdmitted);
}

TEST_F(RequestPathTest, ReleaseFreesTheGpusAndIsLedgered) {
  absl::StatusOr<RequestDecision> held = Request(Developer(), "k", 3);
  ASSERT_THAT(held, IsOk());
  ASSERT_EQ(held->request.state, core::RequestState::kAdmitted);

  Awaited<core::CapacityRequest> released;
  app_->allocations().ReleaseAllocation(Developer(), held->request.id, {}, released.reply());
  absl::StatusOr<core::CapacityRequest> r = released.get();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->state, core::RequestState::kReleased);
  EXPECT_EQ(Ledger().back().action, "request.released");

  absl::StatusOr<RequestDecision> again = Request(Developer(), "k2", 3);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->request.state, core::RequestState::kAdmitted);

  // Releasing twice is refused, and a stranger may not release at all.
  Awaited<core::CapacityRequest> twice;
  app_->allocations().ReleaseAllocation(Developer(), held->request.id, {}, twice.reply());
  EXPECT_THAT(twice.get(), StatusIs(absl::StatusCode::kFailedPrecondition));
  Awaited<core::CapacityRequest> foreign;
  app_->allocations().ReleaseAllocation(Stranger(), again->request.id, {}, foreign.reply());
  EXPECT_THAT(foreign.get(), StatusIs(absl::StatusCode::kPermissionDenied));
}

// The engine remembers an ended request's key until its commit is older
// than a key lookup may be (20 s: ArbiterOptions::ended_key_memory / 2);
// for the rest of the window (24 hours)
// the store finds it: a retry replays the stored decision exactly, another
// body is refused, and past the window the key starts a new request.
TEST_F(RequestPathTest, AnEndedRequestsKeyIsFoundInTheStoreForTheWholeWindow) {
  absl::StatusOr<RequestDecision> first = Request(Developer(), "nightly", 2);
  ASSERT_THAT(first, IsOk());
  Awaited<core::CapacityRequest> released;
  app_->allocations().ReleaseAllocation(Developer(), first->request.id, {}, released.reply());
  ASSERT_THAT(released.get(), IsOk());
  const size_t entries = Ledger().size();

  clock_.Advance(absl::Seconds(21));
  absl::StatusOr<RequestDecision> again = Request(Developer(), "nightly", 2);
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->request.id, first->request.id);
  EXPECT_EQ(again->request.state, core::RequestState::kReleased);
  EXPECT_EQ(again->request.placements.size(), first->request.placements.size());
  size_t remembered = 1;
  ASSERT_THAT(Run([&](core::State& s, absl::Time, core::ChangeSet&) {
                remembered = s.requests().remembered_keys();
                return absl::OkStatus();
              }),
              IsOk());
  EXPECT_EQ(remembered, 0u) << "memory forgot it: the store answered";
  EXPECT_THAT(Request(Developer(), "nightly", 1),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::HasSubstr(absl::StrCat("request ", first->request.id))));
  // A restart loads none of the window's ended keys, and still replays.
  Start();
  again = Request(Developer(), "nightly", 2);
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(Ledger().size(), entries) << "replays and refusals write nothing";

  clock_.Advance(absl::Hours(24));
  absl::StatusOr<RequestDecision> later = Request(Developer(), "nightly", 1);
  ASSERT_THAT(later, IsOk());
  EXPECT_FALSE(later->replayed);
  EXPECT_NE(later->request.id, first->request.id);
}

TEST_F(RequestPathTest, ADeposedLeaderIsFencedAndFollows) {
  app_->arbiter().Lead(1);
  store_->SetCurrentEpoch(1);
  ASSERT_THAT(Request(Developer(), "k1", 1), IsOk());
  const size_t entries = Ledger().size();

  // Another replica took the lease: this one's next commit is refused.
  store_->SetCurrentEpoch(2);
  EXPECT_THAT(Request(Developer(), "k2", 1), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(Ledger().size(), entries);
  // It now follows: commands are refused without being decided.
  EXPECT_THAT(Request(Developer(), "k3", 1), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(app_->arbiter().stats().leading);
  EXPECT_EQ(Ledger().size(), entries);
}

TEST_F(RequestPathTest, ReadsCheckAccessAndArguments) {
  absl::StatusOr<RequestDecision> held = Request(Developer(), "k", 1);
  ASSERT_THAT(held, IsOk());
  Awaited<core::CapacityRequest> got;
  app_->allocations().GetRequest(Developer(), held->request.id, got.reply());
  absl::StatusOr<core::CapacityRequest> r = got.get();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->spec.idempotency_key, "k");

  Awaited<core::CapacityRequest> bad_id;
  app_->allocations().GetRequest(Developer(), 0, bad_id.reply());
  EXPECT_THAT(bad_id.get(), StatusIs(absl::StatusCode::kInvalidArgument));
  Awaited<core::CapacityRequest> missing;
  app_->allocations().GetRequest(Developer(), 999, missing.reply());
  EXPECT_THAT(missing.get(), StatusIs(absl::StatusCode::kNotFound));
  Awaited<store::RequestPage> listed;
  app_->allocations().ListRequests(Stranger(), store::RequestFilter(), listed.reply());
  EXPECT_THAT(listed.get(), StatusIs(absl::StatusCode::kPermissionDenied));
}

// A preview decides on a clone: it answers what the call would do, and the
// store and the ledger do not move.
TEST_F(RequestPathTest, APreviewIsDecidedAndNothingIsWritten) {
  const size_t ledger = Ledger().size();
  Awaited<RequestDecision> previewed;
  core::CapacityRequestSpec spec = WholeSpec("p1", 1, 2);
  app_->allocations().RequestCapacity(Developer(), Resource{spec.team, spec.pool}, spec,
                                      previewed.reply(), /*preview=*/true);
  absl::StatusOr<RequestDecision> d = previewed.get();
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(d->preview);
  EXPECT_EQ(d->request.state, core::RequestState::kAdmitted);
  EXPECT_EQ(d->request.placements.size(), 1u);
  EXPECT_EQ(Ledger().size(), ledger);
  EXPECT_THAT(store_->GetRequest(d->request.id), StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<RequestDecision> real = Request(Developer(), "p1", 2);
  ASSERT_THAT(real, IsOk());
  EXPECT_EQ(real->request.id, d->request.id);
  EXPECT_EQ(real->request.placements[0].gpu_indices, d->request.placements[0].gpu_indices);
}

TEST(DutyLimiterTest, AJobGetsItsShareOfTheTimeAndNoMore) {
  DutyLimiter limiter(10);
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  EXPECT_THAT(limiter.Admit(t0), IsOk());
  limiter.Charge(t0, t0 + absl::Milliseconds(100));  // A run of 100 ms...
  // ...may be followed by the next only 900 ms after it ended.
  EXPECT_THAT(limiter.Admit(t0 + absl::Milliseconds(100)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  absl::Status early = limiter.Admit(t0 + absl::Milliseconds(999));
  EXPECT_THAT(early, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(early.message().find("retry in 2 ms"), absl::string_view::npos) << early.message();
  EXPECT_THAT(limiter.Admit(t0 + absl::Seconds(1)), IsOk());
  // A shorter run later does not shorten the wait a longer one set.
  limiter.Charge(t0 + absl::Seconds(1), t0 + absl::Seconds(3));
  limiter.Charge(t0 + absl::Seconds(3), t0 + absl::Seconds(3));
  EXPECT_THAT(limiter.Admit(t0 + absl::Seconds(20)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(limiter.Admit(t0 + absl::Seconds(21)), IsOk());
}

}  // namespace
}  // namespace arbiter::app
