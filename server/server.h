// ArbiterServer: wires the PostgreSQL store, the application (app/) and the
// gRPC services and HTTP endpoints into one running server. Used by main.cc and by in-process
// server tests, which may serve another store (ServerOptions::store).
//
// Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include <grpcpp/server.h>

#include "app/application.h"
#include "core/clock.h"
#include "server/bearer_auth.h"
#include "server/connect_gateway.h"
#include "server/heap_release.h"
#include "server/https_server.h"
#include "server/metrics.h"
#include "server/services.h"
#include "server/tls.h"
#include "server/watch_server.h"
#include "store/postgres/pg_lease.h"
#include "store/postgres/pg_store.h"

namespace arbiter::server {

struct ServerOptions {
  // Address to listen on, host:port. Port 0 picks a free port.
  // Default: 127.0.0.1:50051.
  std::string listen_address = "127.0.0.1:50051";
  // Serve plaintext gRPC. Only loopback addresses are accepted when set.
  // Default: false (TLS with client certificates, `tls`, is required).
  bool insecure_loopback = false;
  // Certificates for TLS; all three are required unless insecure_loopback.
  TlsFiles tls;
  // Principals that are platform admins by configuration (bootstrap: they
  // grant the first role bindings).
  std::vector<std::string> admins;
  // Ed25519 private key (PEM text) that signs ledger checkpoints every
  // `checkpoint_every` entries; empty: no checkpoints.
  std::string ledger_key_pem;
  int64_t checkpoint_every = 1000;
  // PostgreSQL connection string.
  std::string dsn;
  // Tests only: serve this store (not owned; it must outlive the server)
  // instead of connecting to `dsn`, e.g. the in-memory store, which passes
  // the same contract suite as PostgreSQL (tests/store/store_contract.h).
  // The replica then leads at once, unfenced, with no leader election (the
  // lease lives in PostgreSQL); ledger checkpoints are the store's own.
  // Default: null, PostgreSQL at `dsn`.
  store::Store* store = nullptr;
  // Database connections for reads. Default: 4.
  int read_connections = 4;
  // Threads running database reads. Default: 4.
  int read_threads = 4;
  app::ArbiterOptions arbiter;
  app::TelemetryOptions telemetry;
  // Watch streams: window, bookmarks, limits (app/watch_hub.h). The encoder
  // is always the server's own.
  app::WatchOptions watch;
  // Prometheus GET /metrics on this host:port, plain HTTP (server/metrics.h).
  // Default: empty, not served.
  std::string metrics_listen;
  // The Kubernetes admission webhook, POST /admit over HTTPS
  // (server/admission.h), on this host:port. Default: empty, not served.
  std::string webhook_listen;
  // The webhook's certificate chain and key (PEM). Default: tls.cert, tls.key.
  std::string webhook_cert;
  std::string webhook_key;
  // The browser console and the Connect protocol (server/connect_gateway.h)
  // over HTTPS on this host:port. Default: empty, not served.
  std::string console_listen;
  // Its certificate chain and key (PEM). Default: tls.cert, tls.key.
  std::string console_cert;
  std::string console_key;
  // The console's built files; empty: the Connect API only.
  std::string console_assets;
  // Browser sign-in: tokens from this OIDC issuer. Empty issuer: none, and
  // every console call is UNAUTHENTICATED.
  BearerOptions oidc;
  // Replicas (docs/operations.md, "Replicas"): every arbiterd on one
  // database takes part in the leader election; one leads, the others
  // follow. This replica's name, unique among them (at most 40 characters).
  // Default: "arbiterd".
  std::string replica_name = "arbiterd";
  // The host:port followers name for this replica when it leads. Default:
  // the listen address with the bound port.
  std::string advertise_address;
  // How long the leader lease lasts unrenewed: the longest a stalled leader
  // (SIGSTOP, a partition) holds up a takeover. Renewed every fifth of it.
  // Default: 5 s.
  absl::Duration lease_ttl = absl::Seconds(5);
  // Every this long, the heap's free pages go back to the system when more
  // than heap_keep_free_bytes are free (server/heap_release.h); zero: never.
  // Default: 10 s, 16 MiB.
  absl::Duration heap_release_every = absl::Seconds(10);
  int64_t heap_keep_free_bytes = int64_t{16} << 20;
};

class ArbiterServer {
 public:
  // Connects, loads the state, starts serving and joins the leader election
  // (a lone replica leads when Start returns). INVALID_ARGUMENT for a bad
  // listen address (or plaintext on a non-loopback address) or unusable TLS
  // files (naming the flag); UNAVAILABLE if the database or the port cannot
  // be had.
  static absl::StatusOr<std::unique_ptr<ArbiterServer>> Start(const ServerOptions& options,
                                                              Clock* clock);
  // Stops accepting calls, lets running calls finish (up to 5 s), stops.
  ~ArbiterServer();

  // The port actually bound (useful with port 0).
  int port() const { return port_; }
  // The ports of /metrics, the webhook and the console; 0 when not served.
  int metrics_port() const { return metrics_ != nullptr ? metrics_->port() : 0; }
  int webhook_port() const { return webhook_ != nullptr ? webhook_->port() : 0; }
  int console_port() const { return console_ != nullptr ? console_->port() : 0; }
  app::Application& app() { return *app_; }
  app::Arbiter& arbiter() { return app_->arbiter(); }
  app::TelemetryMaintenance& telemetry() { return app_->telemetry(); }

 private:
  ArbiterServer() = default;

  // Joins the leader election. INVALID_ARGUMENT for a bad replica name or
  // lease ttl.
  absl::Status StartElection(const ServerOptions& options);
  // Starts the webhook's HTTPS server. Errors: those of HttpsServer::Start.
  absl::Status StartWebhook(const ServerOptions& options);
  // Starts the console's HTTPS server. Errors: those of BearerVerifier::Create
  // and HttpsServer::Start.
  absl::Status StartConsole(const ServerOptions& options, Clock* clock);

  std::unique_ptr<Metrics> metrics_;
  // The PostgreSQL store, unless ServerOptions::store named another.
  std::unique_ptr<store::PgStore> pg_store_;
  store::Store* store_ = nullptr;  // pg_store_ or ServerOptions::store.
  std::unique_ptr<app::Application> app_;
  std::unique_ptr<InventoryService> inventory_;
  std::unique_ptr<GovernanceService> governance_;
  std::unique_ptr<AllocationService> allocation_;
  // Before grpc_server_: the server is destroyed before its queues.
  std::unique_ptr<WatchServer> watch_server_;
  std::unique_ptr<LedgerService> ledger_;
  std::unique_ptr<TelemetryService> telemetry_service_;
  std::unique_ptr<ChargebackService> chargeback_service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<HttpsServer> webhook_;
  std::unique_ptr<BearerVerifier> bearer_;
  std::unique_ptr<ConnectGateway> gateway_;
  // After gateway_: destroyed first, as it calls the gateway.
  std::unique_ptr<HttpsServer> console_;
  std::unique_ptr<HeapReleaser> heap_releaser_;  // Null when not asked for.
  int port_ = 0;
};

// True for 127.0.0.0/8, ::1 and "localhost", with a port.
bool IsLoopbackAddress(const std::string& host_port);

}  // namespace arbiter::server
