// Metrics: arbiterd's Prometheus series, served over plain HTTP on their own
// port (`serve --metrics-listen`), apart from the gRPC API.
//
// Its sources:
//   - every RPC, through a gRPC server interceptor: grpc_server_handled_total
//     {grpc_service, grpc_method, grpc_code} and grpc_server_handling_seconds;
//   - the arbiter's group commit (ObserveCommit): batch sizes, commit latency,
//     failures, and its queue depth and idempotency keys at scrape time;
//   - the lookups of idempotency keys in the store (app::EndedKeyLookup):
//     statements and keys;
//   - the watch hub at scrape time: streams, bytes queued to them, events,
//     deliveries, bookmarks, cut-offs and refusals;
//   - the telemetry passes (app::TelemetryCoverage): how much of the time
//     held the samples covered, so that a telemetry source that stopped
//     shows;
//   - the stored state, read once per scrape: allocated and used milli-GPUs
//     by pool, class, team and GPU model, budget burn, pending approvals,
//     incidents and the ledger's length.
// docs/operations.md lists every series and what to alert on.
//
// Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include <grpcpp/support/server_interceptor.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "core/clock.h"
#include "store/store.h"

namespace arbiter::app {
class Arbiter;
class EndedKeyLookup;
class TelemetryMaintenance;
class WatchHub;
}  // namespace arbiter::app

namespace arbiter::server {

class Metrics {
 public:
  Metrics();
  ~Metrics();

  // Serves GET /metrics on `listen_address` (host:port; port 0 picks one).
  // `store`, `arbiter`, `hub`, `telemetry`, `ended_keys` and `clock` must
  // outlive this object (or StopServing). UNAVAILABLE when the port cannot
  // be had.
  [[nodiscard]] absl::Status Serve(const std::string& listen_address, store::Store* store,
                                   app::Arbiter* arbiter, app::WatchHub* hub,
                                   app::TelemetryMaintenance* telemetry,
                                   const app::EndedKeyLookup* ended_keys, Clock* clock);
  // Stops the HTTP server; scrapes after this see nothing. Idempotent.
  void StopServing();
  // The port /metrics is served on; 0 when not serving.
  int port() const { return port_; }

  // For grpc::ServerBuilder::experimental().SetInterceptorCreators.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

  // One batch of `commands` written in `took`; `ok` false when it failed.
  void ObserveCommit(size_t commands, absl::Duration took, bool ok);

  // Counts one finished RPC. `full_method` is "/package.Service/Method".
  void ObserveRpc(const char* full_method, grpc::StatusCode code, absl::Duration took);

  // The text exposition of the registry's own series (not the state read at
  // scrape time), for tests.
  std::string SerializeForTest() const;

 private:
  class StateCollector;

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& rpc_handled_;
  prometheus::Family<prometheus::Histogram>& rpc_seconds_;
  prometheus::Histogram& commit_seconds_;
  prometheus::Histogram& commit_batch_commands_;
  prometheus::Counter& commit_failures_;
  std::shared_ptr<StateCollector> state_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace arbiter::server
