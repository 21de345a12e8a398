// The store contract (store_contract.h) on the in-memory store, plus what
// only the in-memory store offers: failures injected into commits.
#include "store/memory/memory_store.h"
#include "tests/store/store_contract.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::store::contract {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::StatusIs;

class MemoryUnderTest final : public StoreUnderTest {
 public:
  explicit MemoryUnderTest(const ContractOptions& options)
      : store_(MemoryStoreOptions{options.ledger_key_pem, options.checkpoint_every}) {}
  Store& store() override { return store_; }
  absl::Status SetCurrentEpoch(int64_t epoch) override {
    store_.SetCurrentEpoch(epoch);
    return absl::OkStatus();
  }

 private:
  MemoryStore store_;
};

absl::StatusOr<std::unique_ptr<StoreUnderTest>> MakeMemoryStore(const ContractOptions& options) {
  return std::make_unique<MemoryUnderTest>(options);
}

INSTANTIATE_TEST_SUITE_P(Memory, StoreContractTest,
                         ::testing::Values(StoreFactory{"memory", &MakeMemoryStore}));

TEST(MemoryStoreTest, InjectedCommitFailuresWriteNothing) {
  MemoryStore store;
  store.FailNextCommits(2, absl::UnavailableError("injected"));
  core::ChangeSet ch;
  ch.changes.emplace_back(core::Cluster{"east", ""});
  EXPECT_THAT(store.Commit(ch), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(store.Commit(ch), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(store.ListClusters(), ::arbiter::testing::IsOkAndHolds(::testing::IsEmpty()));
  EXPECT_THAT(store.Commit(ch), IsOk());
  EXPECT_THAT(store.ListLedger(LedgerFilter{}),
              ::arbiter::testing::IsOkAndHolds(::testing::SizeIs(1)));
}

TEST(MemoryStoreTest, AccessDenialsCanBeRead) {
  MemoryStore store;
  ASSERT_THAT(store.RecordAccessDenial("mallory", "m", "PERMISSION_DENIED", "why"), IsOk());
  ASSERT_EQ(store.AccessDenials().size(), 1u);
  EXPECT_EQ(store.AccessDenials()[0].principal, "mallory");
  EXPECT_EQ(store.AccessDenials()[0].reason, "why");
}

}  // namespace
}  // namespace arbiter::store::contract
