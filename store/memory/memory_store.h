// MemoryStore: an in-memory implementation of `Store`, with the observable
// behaviour of the PostgreSQL store (store/postgres/pg_store.h): the same
// state loads back after the same commits, the same ledger entries and
// hashes are written (ledger/entries.h), reads return the same rows in the
// same order, and the same keys are refused with the same codes. Both pass
// the contract suite tests/store/store_contract.h.
//
// For unit tests of the application and for tools that need no database. It
// keeps everything in memory: nothing survives the object.
//
// Differences from PostgreSQL, by design: CHECK constraints of the schema
// (positive sizes, enumerated names) are not enforced here (core validates
// before it writes); text orders are byte orders (PostgreSQL uses the
// database's collation: the same for ASCII lower-case names); ListSamples
// returns samples by time, node, GPU and instance (PostgreSQL: no order).
//
// Beyond `Store`, tests may fence the store (SetCurrentEpoch), make commits
// fail (FailNextCommits) and read the access denials it recorded.
//
// Thread-safe: one mutex guards everything.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

#include "ledger/chain.h"
#include "store/store.h"

namespace arbiter::store {

struct MemoryStoreOptions {
  // Ed25519 private key (PEM) that signs ledger checkpoints; empty: no
  // checkpoints are made.
  std::string ledger_key_pem;
  // A checkpoint is signed once this many entries were added since the last.
  int64_t checkpoint_every = 1000;
};

// One refused call, as RecordAccessDenial stored it.
struct AccessDenial {
  std::string principal;
  std::string method;
  std::string code;
  std::string reason;
};

class MemoryStore final : public Store {
 public:
  // An empty store holding the seeded GPU catalog (migration 0002), as a
  // freshly migrated database does.
  explicit MemoryStore(MemoryStoreOptions options = {});
  ~MemoryStore() override;

  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  // --- Test controls.
  // The current leader epoch (the lease's; 0: no lease taken yet). A store
  // fenced to another epoch (SetFencingEpoch, not 0) refuses Commit with
  // FAILED_PRECONDITION.
  void SetCurrentEpoch(int64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);
  // The next `n` calls of Commit with changes return `status` (not OK) and
  // write nothing.
  void FailNextCommits(int n, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // The refused calls recorded so far, oldest first.
  std::vector<AccessDenial> AccessDenials() const ABSL_LOCKS_EXCLUDED(mu_);

  // --- Store.
  using StateStore::LoadState;
  [[nodiscard]] absl::StatusOr<core::State> LoadState(const LoadScope& scope) override
      ABSL_LOCKS_EXCLUDED(mu_);
  using Store::Commit;
  [[nodiscard]] absl::Status Commit(const core::ChangeSet& changes,
                                    const CommitContext& context) override ABSL_LOCKS_EXCLUDED(mu_);
  void SetFencingEpoch(int64_t epoch) override ABSL_LOCKS_EXCLUDED(mu_);
  [[nodiscard]] int64_t LedgerHead() override ABSL_LOCKS_EXCLUDED(mu_);

  [[nodiscard]] absl::StatusOr<std::vector<core::GpuModel>> ListGpuModels() override;
  [[nodiscard]] absl::StatusOr<std::vector<core::Cluster>> ListClusters() override;
  [[nodiscard]] absl::StatusOr<std::vector<core::Pool>> ListPools() override;
  [[nodiscard]] absl::StatusOr<std::vector<core::Node>> ListNodes(const std::string& cluster,
                                                                  const std::string& pool) override;
  [[nodiscard]] absl::StatusOr<std::vector<core::Team>> ListTeams() override;
  [[nodiscard]] absl::StatusOr<std::vector<QuotaUsage>> ListQuotas(
      const std::string& team) override;
  [[nodiscard]] absl::StatusOr<core::CapacityRequest> GetRequest(int64_t id) override;
  [[nodiscard]] absl::StatusOr<std::vector<core::CapacityRequest>> ListRequests(
      const RequestFilter& filter) override;
  [[nodiscard]] absl::StatusOr<RequestPage> ListRequestPage(const RequestFilter& filter) override;
  [[nodiscard]] absl::StatusOr<std::vector<EndedKey>> FindEndedKeys(
      const std::vector<std::string>& keys, absl::Time since) override;
  [[nodiscard]] absl::StatusOr<core::CoexistenceMatrix> GetCoexistence() override;
  [[nodiscard]] absl::StatusOr<std::vector<core::RoleBinding>> ListRoleBindings() override;
  [[nodiscard]] absl::StatusOr<std::vector<core::AuthorityRule>> ListAuthorityRules() override;
  [[nodiscard]] absl::StatusOr<std::vector<core::Price>> ListPrices() override;
  [[nodiscard]] absl::StatusOr<std::vector<core::Budget>> ListBudgets() override;
  [[nodiscard]] absl::StatusOr<std::vector<core::PowerBudget>> ListPowerBudgets() override;
  [[nodiscard]] absl::StatusOr<std::vector<core::Delegation>> ListDelegations() override;
  [[nodiscard]] absl::StatusOr<std::map<std::string, int64_t>> SpendBetween(absl::Time from,
                                                                            absl::Time to) override;
  [[nodiscard]] absl::StatusOr<std::vector<core::IdlePolicy>> ListIdlePolicies() override;
  [[nodiscard]] absl::StatusOr<std::vector<ledger::Entry>> ListLedger(
      const LedgerFilter& filter) override;
  [[nodiscard]] absl::StatusOr<std::vector<LedgerCheckpoint>> ListCheckpoints(
      int64_t after_seq, int32_t limit) override;
  [[nodiscard]] absl::Status RecordAccessDenial(const std::string& principal,
                                                const std::string& method, const std::string& code,
                                                const std::string& reason) override;

  [[nodiscard]] absl::StatusOr<std::vector<int64_t>> InsertSampleBatches(
      absl::Span<const std::vector<core::GpuSample>> batches) override;
  [[nodiscard]] absl::StatusOr<int32_t> DropSamplesBefore(absl::Time day) override;
  [[nodiscard]] absl::StatusOr<std::vector<core::GpuSample>> ListSamples(absl::Time from,
                                                                         absl::Time to) override;
  [[nodiscard]] absl::StatusOr<std::vector<core::HeldMember>> ListHeldMembers(
      absl::Time from, absl::Time to) override;
  [[nodiscard]] absl::StatusOr<std::vector<core::HeldMember>> ListLiveMembers() override;
  [[nodiscard]] absl::StatusOr<absl::Time> UsageRolledTo(absl::Time hour) override;
  [[nodiscard]] absl::Status AddUsageSlice(const UsageSlice& slice) override;
  [[nodiscard]] absl::Status ResetUsageHour(absl::Time hour) override;
  [[nodiscard]] absl::StatusOr<std::vector<UtilizationRow>> ListUtilization(
      absl::Time from, absl::Time to, const std::string& team) override;
  [[nodiscard]] absl::StatusOr<std::vector<core::MemberUsage>> ListMemberUsage(
      absl::Time from, absl::Time to) override;
  [[nodiscard]] absl::StatusOr<std::vector<core::HourPoint>> ListUsedByHour(
      absl::Time from, absl::Time to, const std::string& team) override;

  [[nodiscard]] absl::StatusOr<std::vector<core::Slo>> ListSlos(const std::string& team) override;
  [[nodiscard]] absl::StatusOr<StoredWindow> InsertLatencyWindow(const core::LatencyWindow& window,
                                                                 absl::Time reported_at) override;
  [[nodiscard]] absl::StatusOr<std::vector<core::WaitingRequest>> ListWaitingRequests(
      const std::string& team, const std::string& pool, absl::Time from, absl::Time to) override;
  [[nodiscard]] absl::StatusOr<std::vector<core::Incident>> ListIncidents(absl::Time from,
                                                                          absl::Time to,
                                                                          const std::string& team,
                                                                          int64_t id) override;
  [[nodiscard]] absl::StatusOr<std::vector<core::ExternalityCharge>> ListCharges(
      absl::Time from, absl::Time to) override;
  [[nodiscard]] absl::StatusOr<std::optional<core::PeriodClose>> GetClosedPeriod(
      absl::Time from, absl::Time to) override;
  [[nodiscard]] absl::StatusOr<int64_t> ClusterReservedMilliSeconds(absl::Time from,
                                                                    absl::Time to) override;
  [[nodiscard]] absl::StatusOr<MetricsSnapshot> LoadMetricsSnapshot() override;

  // The rows of the store, as the tables of the schema hold them (text
  // forms and microsecond times included). Public for memory_store.cc's
  // helpers only.
  struct Tables;
  struct Telemetry;

 private:
  // FAILED_PRECONDITION (as arbiter_fence's AR001) when this writer's
  // epoch is set and no longer the current one.
  absl::Status CheckFence() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const MemoryStoreOptions options_;
  mutable absl::Mutex mu_;
  // Decisions: replaced whole by each successful Commit.
  std::unique_ptr<Tables> tables_ ABSL_GUARDED_BY(mu_);
  // Measurements, written outside Commit.
  std::unique_ptr<Telemetry> telemetry_ ABSL_GUARDED_BY(mu_);
  std::vector<AccessDenial> denials_ ABSL_GUARDED_BY(mu_);
  int64_t fencing_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t current_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_commits_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace arbiter::store
