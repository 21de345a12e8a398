#include "app/application.h"

#include <utility>

#include "core/status_macros.h"

namespace arbiter::app {

absl::StatusOr<std::unique_ptr<Application>> Application::Create(
    store::Store* store, Clock* clock, const ApplicationOptions& options) {
  auto app = std::unique_ptr<Application>(new Application());
  app->reads_ = std::make_unique<WorkerPool>(options.read_threads, options.max_queued_reads);
  app->authz_ = std::make_unique<Authorizer>(options.admins);
  app->access_ = std::make_unique<Access>(app->authz_.get(), store, app->reads_.get());
  app->hub_ = std::make_unique<WatchHub>(options.watch, &app->nodes_, clock);
  ARBITER_ASSIGN_OR_RETURN(
      app->arbiter_, Arbiter::Create(store, clock, app->hub_.get(), &app->nodes_, options.arbiter,
                                     app->authz_.get()));
  app->hub_->Start(store);
  EndedKeyLookupOptions keys;
  keys.window = options.arbiter.idempotency_window;
  keys.enabled = options.arbiter.ended_key_memory < options.arbiter.idempotency_window;
  app->ended_keys_ = std::make_unique<EndedKeyLookup>(store, clock, keys);
  app->telemetry_ = std::make_unique<TelemetryMaintenance>(store, store, clock, options.telemetry);
  app->telemetry_->EnableIdleReclaim(app->arbiter_.get());
  Context& ctx = app->ctx_;
  ctx.arbiter = app->arbiter_.get();
  ctx.store = store;
  ctx.reads = app->reads_.get();
  ctx.ended_keys = app->ended_keys_.get();
  ctx.nodes = &app->nodes_;
  ctx.hub = app->hub_.get();
  ctx.access = app->access_.get();
  ctx.clock = clock;
  ctx.telemetry = app->telemetry_.get();
  app->allocations_ = std::make_unique<Allocations>(ctx);
  app->inventory_ = std::make_unique<Inventory>(ctx);
  app->governance_ = std::make_unique<Governance>(ctx);
  app->telemetry_reports_ = std::make_unique<Telemetry>(ctx);
  app->chargeback_ = std::make_unique<Chargeback>(ctx);
  app->ledger_ = std::make_unique<LedgerQueries>(ctx);
  return app;
}

void Application::StartElection(std::unique_ptr<store::LeaderLease> lease, absl::Duration poll) {
  election_ = LeaderElection::Start(std::move(lease), arbiter_.get(), poll);
}

Application::~Application() {
  // Key lookups first (an answered one may queue a read or a command),
  // then reads: a queued read may still ingest samples (telemetry) or hand
  // an incident or a period close to the engine. Commands answered after
  // this that need a read are refused RESOURCE_EXHAUSTED.
  if (ended_keys_ != nullptr) ended_keys_->Stop();
  reads_->Stop();
  telemetry_.reset();
  // Giving the lease up lets a follower take over at once; what this
  // arbiter decided still commits, or is refused as fenced.
  election_.reset();
  arbiter_.reset();
  // The engine published its last batch; streams end, the hub's threads stop.
  if (hub_ != nullptr) hub_->Stop();
  reads_.reset();
}

}  // namespace arbiter::app
