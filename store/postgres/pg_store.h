// PgStore: the PostgreSQL implementation of `Store`. Reads use a pool of
// connections; `Commit` uses a dedicated connection of its own, since only the
// arbiter thread writes.
//
// Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"

#include "store/postgres/connection_pool.h"
#include "store/postgres/pg_errors.h"
#include "store/store.h"

namespace arbiter::store {

struct PgStoreOptions {
  // libpq connection string, e.g. "host=127.0.0.1 port=5432 dbname=arbiter".
  std::string dsn;
  // Connections for reads. Default: 4.
  int read_connections = 4;
  // Ed25519 private key (PEM) that signs ledger checkpoints; empty: no
  // checkpoints are made.
  std::string ledger_key_pem;
  // A checkpoint is signed once this many entries were added since the last.
  // Default: 1000.
  int64_t checkpoint_every = 1000;
  // This replica's name (LeaseOptions::holder): its sessions carry it as
  // application_name, so that a new leader can end a stalled one's
  // sessions. Empty: not set.
  std::string replica;
};

class PgStore final : public Store {
 public:
  // Opens the store. UNAVAILABLE if the database cannot be reached.
  static absl::StatusOr<std::unique_ptr<PgStore>> Create(const PgStoreOptions& options);
  ~PgStore() override;

  using StateStore::LoadState;
  absl::StatusOr<core::State> LoadState(const LoadScope& scope) override;
  using Store::Commit;
  absl::Status Commit(const core::ChangeSet& changes, const CommitContext& context) override;
  void SetFencingEpoch(int64_t epoch) override { fencing_epoch_ = epoch; }
  int64_t LedgerHead() override { return head_seq_; }

  absl::StatusOr<std::vector<core::GpuModel>> ListGpuModels() override;
  absl::StatusOr<std::vector<core::Cluster>> ListClusters() override;
  absl::StatusOr<std::vector<core::Pool>> ListPools() override;
  absl::StatusOr<std::vector<core::Node>> ListNodes(const std::string& cluster,
                                                    const std::string& pool) override;
  absl::StatusOr<std::vector<core::Team>> ListTeams() override;
  absl::StatusOr<std::vector<QuotaUsage>> ListQuotas(const std::string& team) override;
  absl::StatusOr<core::CapacityRequest> GetRequest(int64_t id) override;
  absl::StatusOr<std::vector<core::CapacityRequest>> ListRequests(
      const RequestFilter& filter) override;
  absl::StatusOr<RequestPage> ListRequestPage(const RequestFilter& filter) override;
  absl::StatusOr<std::vector<EndedKey>> FindEndedKeys(const std::vector<std::string>& keys,
                                                      absl::Time since) override;
  absl::StatusOr<core::CoexistenceMatrix> GetCoexistence() override;
  absl::StatusOr<std::vector<core::RoleBinding>> ListRoleBindings() override;
  absl::StatusOr<std::vector<core::AuthorityRule>> ListAuthorityRules() override;
  absl::StatusOr<std::vector<core::Price>> ListPrices() override;
  absl::StatusOr<std::vector<core::Budget>> ListBudgets() override;
  absl::StatusOr<std::vector<core::PowerBudget>> ListPowerBudgets() override;
  absl::StatusOr<std::vector<core::Delegation>> ListDelegations() override;
  absl::StatusOr<std::map<std::string, int64_t>> SpendBetween(absl::Time from,
                                                              absl::Time to) override;
  absl::StatusOr<std::map<std::string, int64_t>> MonthSpend(absl::Time month_start) override;
  absl::StatusOr<std::vector<ledger::Entry>> ListLedger(const LedgerFilter& filter) override;
  absl::StatusOr<std::vector<LedgerCheckpoint>> ListCheckpoints(int64_t after_seq,
                                                                int32_t limit) override;
  absl::Status RecordAccessDenial(const std::string& principal, const std::string& method,
                                  const std::string& code, const std::string& reason) override;

  // Telemetry (pg_telemetry.cc).
  absl::StatusOr<std::vector<int64_t>> InsertSampleBatches(
      absl::Span<const std::vector<core::GpuSample>> batches) override;
  absl::StatusOr<int32_t> DropSamplesBefore(absl::Time day) override;
  absl::StatusOr<std::vector<core::GpuSample>> ListSamples(absl::Time from, absl::Time to) override;
  absl::StatusOr<std::vector<core::HeldMember>> ListHeldMembers(absl::Time from,
                                                                absl::Time to) override;
  absl::StatusOr<std::vector<core::HeldMember>> ListHeldMembersInPool(const std::string& pool,
                                                                      absl::Time from,
                                                                      absl::Time to) override;
  absl::StatusOr<std::vector<core::HeldMember>> ListLiveMembers() override;
  absl::Status ScanHeldMembers(absl::Time from, absl::Time to, size_t max_part,
                               const HeldPart& part) override;
  absl::StatusOr<absl::Time> UsageRolledTo(absl::Time hour) override;
  absl::Status AddUsageSlice(const UsageSlice& slice) override;
  absl::Status RollUpSlice(absl::Time hour, absl::Time from, absl::Time to, absl::Time computed_at,
                           size_t max_part, const RollPart& roll) override;
  absl::Status ResetUsageHour(absl::Time hour) override;
  absl::StatusOr<std::vector<UtilizationRow>> ListUtilization(absl::Time from, absl::Time to,
                                                              const std::string& team) override;
  absl::StatusOr<std::vector<core::MemberUsage>> ListMemberUsage(absl::Time from,
                                                                 absl::Time to) override;
  absl::StatusOr<std::vector<core::HourPoint>> ListUsedByHour(absl::Time from, absl::Time to,
                                                              const std::string& team) override;
  absl::StatusOr<std::vector<core::Slo>> ListSlos(const std::string& team) override;
  absl::StatusOr<std::vector<core::IdlePolicy>> ListIdlePolicies() override;
  absl::StatusOr<StoredWindow> InsertLatencyWindow(const core::LatencyWindow& window,
                                                   absl::Time reported_at) override;
  absl::StatusOr<std::vector<core::WaitingRequest>> ListWaitingRequests(const std::string& team,
                                                                        const std::string& pool,
                                                                        absl::Time from,
                                                                        absl::Time to) override;
  absl::StatusOr<std::vector<core::Incident>> ListIncidents(absl::Time from, absl::Time to,
                                                            const std::string& team,
                                                            int64_t id) override;
  absl::StatusOr<std::vector<core::ExternalityCharge>> ListCharges(absl::Time from,
                                                                   absl::Time to) override;
  absl::StatusOr<std::optional<core::PeriodClose>> GetClosedPeriod(absl::Time from,
                                                                   absl::Time to) override;
  absl::StatusOr<int64_t> ClusterReservedMilliSeconds(absl::Time from, absl::Time to) override;
  absl::StatusOr<MetricsSnapshot> LoadMetricsSnapshot() override;

 private:
  explicit PgStore(const PgStoreOptions& options);

  // A commit of serving demand profiles alone: no decision, so no ledger
  // entry; fenced like a decision.
  absl::Status CommitDemand(const std::vector<core::DemandSlotWrite>& demand);

  // Makes sure the monthly partitions a commit at `at` of `changes` writes
  // to exist: the ledger's of `at`'s UTC month, and those of the months in
  // which its requests ended or were admitted (migrations 0030 and 0033).
  // On the writer's connection, outside the commit's transaction. The
  // arbiter thread only.
  absl::Status EnsureMonthPartitions(pqxx::connection& conn, const core::ChangeSet& changes,
                                     absl::Time at, bool* broken);
  // Those of `at`'s UTC month, once per month.
  absl::Status EnsureMonthPartition(pqxx::connection& conn, absl::Time at, bool* broken);

  // Runs `fn(connection)` on a pooled connection with exception mapping.
  template <typename Fn>
  auto WithConnection(absl::string_view operation, Fn&& fn)
      -> decltype(fn(std::declval<pqxx::connection&>())) {
    return WithConnectionOf(reads_, operation, std::forward<Fn>(fn));
  }
  template <typename Fn>
  auto WithConnectionOf(ConnectionPool& pool, absl::string_view operation, Fn&& fn)
      -> decltype(fn(std::declval<pqxx::connection&>())) {
    auto lease = pool.Acquire();
    if (!lease.ok()) return lease.status();
    bool broken = false;
    auto result = Guarded(operation, &broken, [&] { return fn(**lease); });
    if (broken) lease->Discard();
    return result;
  }

  ConnectionPool reads_;
  ConnectionPool writer_;
  // FindEndedKeys's own connection: one statement, run for every new
  // request outside a transaction, planned once (sql::PrepareKeyLookups:
  // a generic plan kept to index scans, so that one made while `requests`
  // was empty still finds the keys by their index as the table grows).
  ConnectionPool key_lookups_;
  const std::string ledger_key_pem_;
  const int64_t checkpoint_every_;
  // The chain head and the last checkpoint: read by LoadState, advanced by
  // Commit. Touched only by the one writer (the arbiter thread).
  int64_t head_seq_ = 0;
  std::string head_hash_ = ledger::kGenesisHash;
  int64_t checkpoint_seq_ = 0;
  int64_t fencing_epoch_ = 0;  // The arbiter thread only, as the head.
  // The UTC months (days since the epoch of their first day) whose
  // partitions this writer has made sure of: one statement a month.
  // The arbiter thread only.
  absl::flat_hash_set<int64_t> partitioned_months_;
  // [from, to) of the month last made sure of: EnsureMonthPartition's
  // check without a time zone conversion. The arbiter thread only.
  absl::Time last_month_from_ = absl::InfiniteFuture();
  absl::Time last_month_to_ = absl::InfiniteFuture();
};

}  // namespace arbiter::store
