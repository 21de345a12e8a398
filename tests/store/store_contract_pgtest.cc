// The store contract (store_contract.h) on PostgreSQL: each store gets a
// fresh database cloned from the fixture's migrated template.
#include "absl/strings/str_cat.h"

#include "store/postgres/pg_store.h"
#include "tests/store/store_contract.h"
#include "tests/testing/pg_harness.h"

namespace arbiter::store::contract {
namespace {

using ::arbiter::testing::TestDatabase;

class PgUnderTest final : public StoreUnderTest {
 public:
  PgUnderTest(std::unique_ptr<TestDatabase> db, std::unique_ptr<PgStore> store)
      : db_(std::move(db)), store_(std::move(store)) {}
  ~PgUnderTest() override { store_.reset(); }  // Before the database is dropped.
  Store& store() override { return *store_; }
  absl::Status SetCurrentEpoch(int64_t epoch) override {
    return db_
        ->QueryValue(absl::StrCat(
            "INSERT INTO leader_lease (id, epoch, holder, address, lease_until, acquired_at) "
            "VALUES (1, ",
            epoch, ", 'contract', '', now(), now()) ON CONFLICT (id) DO UPDATE SET epoch = ", epoch,
            " RETURNING 1"))
        .status();
  }

 private:
  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<PgStore> store_;
};

absl::StatusOr<std::unique_ptr<StoreUnderTest>> MakePgStore(const ContractOptions& options) {
  auto db = TestDatabase::Create();
  if (!db.ok()) return db.status();
  PgStoreOptions pg;
  pg.dsn = (*db)->dsn();
  pg.read_connections = 2;
  pg.ledger_key_pem = options.ledger_key_pem;
  pg.checkpoint_every = options.checkpoint_every;
  auto store = PgStore::Create(pg);
  if (!store.ok()) return store.status();
  return std::make_unique<PgUnderTest>(std::move(*db), std::move(*store));
}

INSTANTIATE_TEST_SUITE_P(Postgres, StoreContractTest,
                         ::testing::Values(StoreFactory{"postgres", &MakePgStore}));

}  // namespace
}  // namespace arbiter::store::contract
