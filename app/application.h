// Application: Arbiter's application layer assembled. It owns the engine
// (app/arbiter.h: the single writer and its group commit), the leader
// election, the authorization policy, the read workers, telemetry
// maintenance, the watch hub (and its fan-out and catch-up threads), and
// the use cases that every edge calls: the gRPC services
// (server/), the HTTP endpoints, arbctl's server side. It links no gRPC and
// no protobuf; edges translate their wire types to core types and call it.
//
// Lifecycle: Create loads the state and starts the threads following (no
// command is decided); StartElection joins the leader election (a lone
// replica leads when it returns), or Lead makes it lead unfenced (tests and
// tools that own the store alone).
//
// Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "app/access.h"
#include "app/allocations.h"
#include "app/arbiter.h"
#include "app/authz.h"
#include "app/chargeback.h"
#include "app/context.h"
#include "app/governance.h"
#include "app/inventory.h"
#include "app/leader_election.h"
#include "app/ledger_queries.h"
#include "app/node_directory.h"
#include "app/telemetry.h"
#include "app/telemetry_maintenance.h"
#include "app/watch_hub.h"
#include "app/worker_pool.h"
#include "core/clock.h"
#include "store/lease.h"
#include "store/store.h"

namespace arbiter::app {

struct ApplicationOptions {
  // Principals that are platform admins by configuration (bootstrap: they
  // grant the first role bindings).
  std::vector<std::string> admins;
  // Threads running database reads. Default: 4.
  int read_threads = 4;
  // Reads that may wait for a thread. Default: 4096.
  size_t max_queued_reads = 4096;
  ArbiterOptions arbiter;
  TelemetryOptions telemetry;
  WatchOptions watch;
};

class Application {
 public:
  // Loads the state from `store` and starts the threads. `store` and `clock`
  // must outlive the application. Errors: those of Store::LoadState.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Application>> Create(
      store::Store* store, Clock* clock, const ApplicationOptions& options);
  // Stops in order: the read workers (running what is queued), telemetry
  // maintenance (it submits idle reclaims), the election (a leader gives its
  // lease up), the engine (answers what is queued).
  ~Application();

  // Joins the leader election over `lease`, polling every `poll` (well under
  // the lease's ttl). REQUIRES: called once.
  void StartElection(std::unique_ptr<store::LeaderLease> lease, absl::Duration poll);

  const Context& context() const { return ctx_; }
  Arbiter& arbiter() { return *arbiter_; }
  TelemetryMaintenance& telemetry() { return *telemetry_; }
  const EndedKeyLookup& ended_keys() const { return *ended_keys_; }
  NodeDirectory& nodes() { return nodes_; }
  WatchHub& hub() { return *hub_; }
  const Access& access() const { return *access_; }
  const Allocations& allocations() const { return *allocations_; }
  const Inventory& inventory() const { return *inventory_; }
  const Governance& governance() const { return *governance_; }
  const Telemetry& telemetry_reports() const { return *telemetry_reports_; }
  const Chargeback& chargeback() const { return *chargeback_; }
  const LedgerQueries& ledger() const { return *ledger_; }

 private:
  Application() = default;

  NodeDirectory nodes_;
  std::unique_ptr<WatchHub> hub_;
  std::unique_ptr<WorkerPool> reads_;
  std::unique_ptr<EndedKeyLookup> ended_keys_;
  std::unique_ptr<Authorizer> authz_;
  std::unique_ptr<Access> access_;
  std::unique_ptr<Arbiter> arbiter_;
  std::unique_ptr<TelemetryMaintenance> telemetry_;
  std::unique_ptr<LeaderElection> election_;
  Context ctx_;
  std::unique_ptr<Allocations> allocations_;
  std::unique_ptr<Inventory> inventory_;
  std::unique_ptr<Governance> governance_;
  std::unique_ptr<Telemetry> telemetry_reports_;
  std::unique_ptr<Chargeback> chargeback_;
  std::unique_ptr<LedgerQueries> ledger_;
};

}  // namespace arbiter::app
