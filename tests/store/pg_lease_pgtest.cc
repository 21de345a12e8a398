// The leader lease and the fencing of decision writes (migration 0021,
// store/postgres/pg_lease.h) against a real PostgreSQL.
#include "absl/time/clock.h"
#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "ledger/chain.h"
#include "store/postgres/pg_lease.h"
#include "store/postgres/pg_store.h"
#include "tests/core/test_state.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::store {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::StatusIs;
using ::arbiter::testing::TestDatabase;
using ::testing::HasSubstr;

class PgLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = TestDatabase::Create();
    ASSERT_THAT(db, IsOk());
    db_ = std::move(*db);
  }

  std::unique_ptr<PgStore> Store(const std::string& replica) {
    PgStoreOptions options;
    options.dsn = db_->dsn();
    options.read_connections = 1;
    options.replica = replica;
    auto store = PgStore::Create(options);
    EXPECT_THAT(store, IsOk());
    return std::move(*store);
  }

  std::unique_ptr<PgLease> Lease(const std::string& replica, absl::Duration ttl) {
    LeaseOptions options;
    options.dsn = db_->dsn();
    options.holder = replica;
    options.address = replica + ":50051";
    options.ttl = ttl;
    return std::make_unique<PgLease>(options);
  }

  // A change that writes a ledger entry: a team named `name`.
  static core::ChangeSet TeamChange(core::State& state, const std::string& name) {
    core::ChangeSet changes;
    EXPECT_THAT(core::CreateTeam(state, {name, "", 1000}, changes), IsOk());
    return changes;
  }

  std::string Value(const std::string& sql) { return *db_->QueryValue(sql); }

  // Tries to take the lease every 100 ms, up to 10 s (a closed session's
  // lock is freed by the server shortly after, not at once). The epoch, or 0.
  static int64_t AcquireSoon(PgLease& lease) {
    for (int i = 0; i < 100; ++i) {
      absl::StatusOr<int64_t> tried = lease.TryAcquire();
      EXPECT_THAT(tried, IsOk());
      if (tried.ok() && *tried > 0) return *tried;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return 0;
  }

  std::unique_ptr<TestDatabase> db_;
};

TEST_F(PgLeaseTest, OneReplicaAtATimeTakesTheLeaseAndEachTakeoverIncrementsTheEpoch) {
  auto a = Lease("a", absl::Seconds(30));
  auto b = Lease("b", absl::Seconds(30));
  absl::StatusOr<int64_t> first = a->TryAcquire();
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(*first, 1);
  EXPECT_EQ(*b->TryAcquire(), 0) << "the lock is held";
  EXPECT_THAT(a->Renew(1), IsOk());
  absl::StatusOr<LeaseInfo> info = b->Read();
  ASSERT_THAT(info, IsOk());
  EXPECT_EQ(info->holder, "a");
  EXPECT_EQ(info->address, "a:50051");
  EXPECT_FALSE(info->expired);

  a->Release(1);
  EXPECT_EQ(AcquireSoon(*b), 2);
  EXPECT_THAT(a->Renew(1), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(PgLeaseTest, ADeposedLeadersCommitIsRefusedAndWritesNothing) {
  auto store_a = Store("a");
  auto store_b = Store("b");
  auto lease_a = Lease("a", absl::Seconds(30));
  absl::StatusOr<int64_t> epoch_a = lease_a->TryAcquire();
  ASSERT_THAT(epoch_a, IsOk());
  store_a->SetFencingEpoch(*epoch_a);
  absl::StatusOr<core::State> state_a = store_a->LoadState();
  ASSERT_THAT(state_a, IsOk());
  ASSERT_THAT(store_a->Commit(TeamChange(*state_a, "before")), IsOk());

  // a's lock session ends (a crash, or PostgreSQL dropped it); b takes over
  // while a's process, and its writer connection, live on.
  lease_a.reset();
  auto lease_b = Lease("b", absl::Seconds(30));
  const int64_t epoch_b = AcquireSoon(*lease_b);
  ASSERT_EQ(epoch_b, *epoch_a + 1);

  const std::string ledger_before = Value("SELECT count(*) FROM ledger");
  EXPECT_THAT(store_a->Commit(TeamChange(*state_a, "deposed")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("fenced")));
  EXPECT_EQ(Value("SELECT count(*) FROM teams WHERE name = 'deposed'"), "0");
  EXPECT_EQ(Value("SELECT count(*) FROM ledger"), ledger_before);

  // The new leader loads what a committed and continues the chain.
  store_b->SetFencingEpoch(epoch_b);
  absl::StatusOr<core::State> state_b = store_b->LoadState();
  ASSERT_THAT(state_b, IsOk());
  EXPECT_TRUE(state_b->teams().contains("before"));
  ASSERT_THAT(store_b->Commit(TeamChange(*state_b, "after")), IsOk());
  absl::StatusOr<std::vector<ledger::Entry>> entries = store_b->ListLedger(LedgerFilter());
  ASSERT_THAT(entries, IsOk());
  const ledger::Verdict verdict = ledger::VerifyChain(*entries, 0, ledger::kGenesisHash);
  EXPECT_TRUE(verdict.ok) << verdict.problem;
  EXPECT_EQ(entries->back().subject, "team/after");
}

TEST_F(PgLeaseTest, AStalledHolderIsEndedOnceItsLeaseExpires) {
  auto store_a = Store("stalled");
  auto lease_a = Lease("stalled", absl::Seconds(1));
  ASSERT_EQ(*lease_a->TryAcquire(), 1);
  store_a->SetFencingEpoch(1);
  ASSERT_THAT(store_a->LoadState(), IsOk());  // Opens a's writer session.
  // a stops renewing but keeps its sessions (SIGSTOP): b takes over once the
  // lease has expired, by ending them. Bounded polling, not a timed check.
  auto lease_b = Lease("b", absl::Seconds(1));
  EXPECT_EQ(AcquireSoon(*lease_b), 2);
  EXPECT_EQ(Value("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                  "'arbiterd/stalled' AND datname = current_database()"),
            "0");
  // Woken, a finds itself deposed.
  EXPECT_FALSE(lease_a->Renew(1).ok());
}

TEST_F(PgLeaseTest, DsnOptionsAreAddedInEitherForm) {
  EXPECT_EQ(AppendDsnOptions("host=h dbname=d", "application_name=x"),
            "host=h dbname=d application_name=x");
  EXPECT_EQ(AppendDsnOptions("postgresql://h/d", "a=1 b=2"), "postgresql://h/d?a=1&b=2");
  EXPECT_EQ(AppendDsnOptions("postgresql://h/d?sslmode=disable", "a=1"),
            "postgresql://h/d?sslmode=disable&a=1");
}

}  // namespace
}  // namespace arbiter::store
