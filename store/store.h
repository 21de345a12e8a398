// The store: Arbiter's system of record, expressed in core types. The only
// implementation is PostgreSQL (store/postgres/); all SQL lives there.
//
// Status codes, for every method: UNAVAILABLE when the database cannot be
// reached (retry the call); ABORTED on a serialization failure or deadlock
// (retry the whole operation); INTERNAL for anything else. Further codes are
// stated per method.
//
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ledger/chain.h"

#include "core/chargeback.h"
#include "core/externality.h"
#include "core/model.h"
#include "core/state.h"
#include "core/telemetry.h"

namespace arbiter::store {

// Allocated and used milli-GPUs of one (pool, class, team, GPU model).
struct GpuGauge {
  std::string pool;
  std::string workload_class;
  std::string team;
  std::string gpu_model;
  int64_t allocated_milli = 0;
  int64_t used_milli = 0;  // Measured use; 0 where not known.
};

// The stored state /metrics reports (server/metrics.h), read at scrape time.
struct MetricsSnapshot {
  // Held now by admitted and preempting requests (used_milli is 0).
  std::vector<GpuGauge> allocated;
  // The latest rolled-up hour: mean allocated and used milli-GPUs over it.
  std::vector<GpuGauge> last_hour;
  int64_t pending_approvals = 0;
  int64_t queued = 0;
  int64_t ledger_entries = 0;                        // The chain head's sequence number.
  std::map<std::string, int64_t> incidents_by_team;  // All recorded.
};

struct QuotaUsage {
  core::Quota quota;
  int64_t used_milli = 0;
};

// Who made a batch of changes, and when: each change gets a ledger entry.
struct CommitContext {
  absl::Time at = absl::UnixEpoch();
  // actors[i] made changes.changes[i]; "system" past its end.
  std::vector<std::string> actors;
};

struct LedgerFilter {
  int64_t after_seq = 0;  // Only entries after this (paging); 0: from genesis.
  int32_t limit = 1000;
  std::string subject;  // Exact; empty: all.
  std::string actor;    // Exact; empty: all.
  std::string action;   // Exact; empty: all.
};

struct LedgerCheckpoint {
  int64_t seq = 0;
  std::string hash;
  std::string signature;  // Hex Ed25519.
  absl::Time at;
};

struct RequestFilter {
  std::string team;                                             // Empty: all teams.
  core::RequestState state = core::RequestState::kUnspecified;  // Unspecified: all.
  int64_t before_id = 0;  // Only ids below this (paging); 0: from the newest.
  int32_t limit = 100;
};

// Rolled-up usage of one team, pool, workload class and GPU model.
struct UtilizationRow {
  std::string team;
  std::string pool;
  core::WorkloadClass workload_class = core::WorkloadClass::kUnspecified;
  std::string gpu_model;
  core::MemberUsage usage;  // request_id and member unset.
};

class Store {
 public:
  virtual ~Store() = default;

  // Loads the whole arbitration state: catalog, inventory, governance, live
  // requests with their placements charged, and the idempotency index.
  // FAILED_PRECONDITION if the stored data breaks a core invariant.
  virtual absl::StatusOr<core::State> LoadState() = 0;

  // Makes `changes` durable in one transaction, each with its ledger entry
  // (chained to the previous one; see ledger/chain.h). Returns OK only after
  // COMMIT. On any error nothing of `changes` is written (or, for an
  // UNAVAILABLE during COMMIT, the outcome is unknown): the caller must
  // reload state. FAILED_PRECONDITION (nothing written) when the store is
  // fenced to a leader epoch that is no longer current: another replica has
  // taken over. REQUIRES: one writer at a time (the arbiter thread).
  [[nodiscard]] virtual absl::Status Commit(const core::ChangeSet& changes,
                                            const CommitContext& context) = 0;
  [[nodiscard]] absl::Status Commit(const core::ChangeSet& changes) {
    return Commit(changes, CommitContext());
  }

  // Fences every later Commit to leader epoch `epoch` (migration 0021): a
  // Commit then writes only while `epoch` is the current one. 0, the
  // default, leaves Commit unfenced, for tools and tests that own the
  // database alone. REQUIRES: no Commit in progress (the arbiter thread).
  virtual void SetFencingEpoch(int64_t epoch) = 0;

  // --- Reads (served straight from the database, by any replica).
  virtual absl::StatusOr<std::vector<core::GpuModel>> ListGpuModels() = 0;
  virtual absl::StatusOr<std::vector<core::Cluster>> ListClusters() = 0;
  virtual absl::StatusOr<std::vector<core::Pool>> ListPools() = 0;
  // Nodes with their GPUs' current allocations, ordered by cluster, name.
  // Empty filters match all.
  virtual absl::StatusOr<std::vector<core::Node>> ListNodes(const std::string& cluster,
                                                            const std::string& pool) = 0;
  virtual absl::StatusOr<std::vector<core::Team>> ListTeams() = 0;
  virtual absl::StatusOr<std::vector<QuotaUsage>> ListQuotas(const std::string& team) = 0;
  // NOT_FOUND if there is no request `id`.
  virtual absl::StatusOr<core::CapacityRequest> GetRequest(int64_t id) = 0;
  // Requests matching `filter`, newest first.
  virtual absl::StatusOr<std::vector<core::CapacityRequest>> ListRequests(
      const RequestFilter& filter) = 0;
  // The coexistence matrix in force: the defaults with the stored rules set
  // over them.
  virtual absl::StatusOr<core::CoexistenceMatrix> GetCoexistence() = 0;
  virtual absl::StatusOr<std::vector<core::RoleBinding>> ListRoleBindings() = 0;
  virtual absl::StatusOr<std::vector<core::AuthorityRule>> ListAuthorityRules() = 0;
  // The price book, every version, by model, class and time.
  virtual absl::StatusOr<std::vector<core::Price>> ListPrices() = 0;
  virtual absl::StatusOr<std::vector<core::Budget>> ListBudgets() = 0;
  virtual absl::StatusOr<std::vector<core::Delegation>> ListDelegations() = 0;
  // Costs charged per team to requests admitted in [from, to).
  virtual absl::StatusOr<std::map<std::string, int64_t>> SpendBetween(absl::Time from,
                                                                      absl::Time to) = 0;
  // Ledger entries in sequence order, and the signed checkpoints.
  virtual absl::StatusOr<std::vector<ledger::Entry>> ListLedger(const LedgerFilter& filter) = 0;
  virtual absl::StatusOr<std::vector<LedgerCheckpoint>> ListCheckpoints() = 0;
  // One consistent read of what /metrics reports.
  virtual absl::StatusOr<MetricsSnapshot> LoadMetricsSnapshot() = 0;

  // Records a refused call (not a decision: written on its own, at once).
  virtual absl::Status RecordAccessDenial(const std::string& principal, const std::string& method,
                                          const std::string& code, const std::string& reason) = 0;

  // --- Telemetry. Samples and rollups are measurements, not decisions:
  // written straight to the database by any replica, never to the ledger.

  // Stores resolved samples in one transaction, creating the daily
  // partitions they need. Returns how many were new; the rest were already
  // stored (same node, GPU, instance and time). REQUIRES: node ids exist.
  virtual absl::StatusOr<int64_t> InsertSamples(const std::vector<core::GpuSample>& samples) = 0;
  // Drops the daily partitions of samples before `day` (UTC, rounded down);
  // returns how many.
  virtual absl::StatusOr<int32_t> DropSamplesBefore(absl::Time day) = 0;
  // Samples taken in [from, to).
  virtual absl::StatusOr<std::vector<core::GpuSample>> ListSamples(absl::Time from,
                                                                   absl::Time to) = 0;
  // Members of requests that held capacity at some time in [from, to),
  // ordered by request and member.
  virtual absl::StatusOr<std::vector<core::HeldMember>> ListHeldMembers(absl::Time from,
                                                                        absl::Time to) = 0;
  // Replaces the rollups of the hour starting at `hour` with usage[i] of
  // members[i] (members that held nothing in it are left out).
  virtual absl::Status ReplaceUsageHour(absl::Time hour,
                                        const std::vector<core::HeldMember>& members,
                                        const std::vector<core::MemberUsage>& usage,
                                        absl::Time computed_at) = 0;
  // Rollups of the hours starting in [from, to), summed by team, pool, class
  // and model (peaks: the highest); `team` "" for all.
  virtual absl::StatusOr<std::vector<UtilizationRow>> ListUtilization(absl::Time from,
                                                                      absl::Time to,
                                                                      const std::string& team) = 0;
  // Rollups of the hours starting in [from, to), summed per member.
  virtual absl::StatusOr<std::vector<core::MemberUsage>> ListMemberUsage(absl::Time from,
                                                                         absl::Time to) = 0;
  // Used milli-GPU seconds per hour of [from, to) from the rollups, for
  // `team` ("" for all); hours without rollups are left out.
  virtual absl::StatusOr<std::vector<core::HourPoint>> ListUsedByHour(absl::Time from,
                                                                      absl::Time to,
                                                                      const std::string& team) = 0;

  // Idle policies set per class (without the built-in defaults).
  virtual absl::StatusOr<std::vector<core::IdlePolicy>> ListIdlePolicies() = 0;

  // --- SLOs, incidents and chargeback.
  virtual absl::StatusOr<std::vector<core::Slo>> ListSlos(const std::string& team) = 0;
  // Stores a reported window (a measurement, written at once) unless that
  // window of that service is stored already: the first report wins.
  // Returns the stored window, and whether this call stored it.
  struct StoredWindow {
    core::LatencyWindow window;
    bool first = false;
  };
  virtual absl::StatusOr<StoredWindow> InsertLatencyWindow(const core::LatencyWindow& window,
                                                           absl::Time reported_at) = 0;
  // `team`'s requests in `pool` that waited for admission at some time in
  // [from, to).
  virtual absl::StatusOr<std::vector<core::WaitingRequest>> ListWaitingRequests(
      const std::string& team, const std::string& pool, absl::Time from, absl::Time to) = 0;
  // Incidents recorded in [from, to) that `team` suffered or caused ("" for
  // all; `id` > 0 for that one only), with their charges (credits left out
  // of the causes), by id.
  virtual absl::StatusOr<std::vector<core::Incident>> ListIncidents(absl::Time from, absl::Time to,
                                                                    const std::string& team,
                                                                    int64_t id) = 0;
  // Charges and credits booked in [from, to).
  virtual absl::StatusOr<std::vector<core::ExternalityCharge>> ListCharges(absl::Time from,
                                                                           absl::Time to) = 0;
  // The closed period [from, to) exactly; nullopt when it is not closed.
  virtual absl::StatusOr<std::optional<core::PeriodClose>> GetClosedPeriod(absl::Time from,
                                                                           absl::Time to) = 0;
  // Milli-GPU seconds held in [from, to) by all allocations, summed in SQL
  // (independently of the statements, as a conservation check).
  virtual absl::StatusOr<int64_t> ClusterReservedMilliSeconds(absl::Time from, absl::Time to) = 0;
};

}  // namespace arbiter::store
