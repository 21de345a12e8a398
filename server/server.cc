#include "server/server.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "core/status_macros.h"

namespace arbiter::server {

bool IsLoopbackAddress(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = host_port.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::StatusOr<std::unique_ptr<ArbiterServer>> ArbiterServer::Start(const ServerOptions& options,
                                                                    Clock* clock) {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (options.insecure_loopback) {
    if (!IsLoopbackAddress(options.listen_address)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "listen: plaintext may only listen on a loopback address, got ", options.listen_address));
    }
    credentials = grpc::InsecureServerCredentials();
  } else {
    ARBITER_ASSIGN_OR_RETURN(credentials, ServerTlsCredentials(options.tls));
  }
  auto server = std::unique_ptr<ArbiterServer>(new ArbiterServer());
  store::PgStoreOptions store_options;
  store_options.dsn = options.dsn;
  store_options.read_connections = options.read_connections;
  store_options.ledger_key_pem = options.ledger_key_pem;
  store_options.checkpoint_every = options.checkpoint_every;
  ARBITER_ASSIGN_OR_RETURN(server->store_, store::PgStore::Create(store_options));
  server->reads_ = std::make_unique<WorkerPool>(options.read_threads, 4096);
  server->authz_ = std::make_unique<Authorizer>(options.admins);
  ARBITER_ASSIGN_OR_RETURN(
      server->arbiter_, Arbiter::Create(server->store_.get(), clock, &server->hub_, &server->nodes_,
                                        options.arbiter, server->authz_.get()));
  server->telemetry_ =
      std::make_unique<TelemetryMaintenance>(server->store_.get(), clock, options.telemetry);
  server->telemetry_->EnableIdleReclaim(server->arbiter_.get());
  ServiceContext ctx;
  ctx.arbiter = server->arbiter_.get();
  ctx.store = server->store_.get();
  ctx.reads = server->reads_.get();
  ctx.nodes = &server->nodes_;
  ctx.hub = &server->hub_;
  ctx.authz = server->authz_.get();
  ctx.insecure = options.insecure_loopback;
  ctx.clock = clock;
  ctx.telemetry = server->telemetry_.get();
  server->inventory_ = std::make_unique<InventoryService>(ctx);
  server->governance_ = std::make_unique<GovernanceService>(ctx);
  server->allocation_ = std::make_unique<AllocationService>(ctx);
  server->ledger_ = std::make_unique<LedgerService>(ctx);
  server->telemetry_service_ = std::make_unique<TelemetryService>(ctx);
  server->chargeback_service_ = std::make_unique<ChargebackService>(ctx);

  grpc::EnableDefaultHealthCheckService(true);
  // Reflection answers without an identity, so it is served only in the
  // plaintext development mode; with TLS only health does.
  if (options.insecure_loopback) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, credentials, &server->port_);
  builder.RegisterService(server->inventory_.get());
  builder.RegisterService(server->governance_.get());
  builder.RegisterService(server->allocation_.get());
  builder.RegisterService(server->ledger_.get());
  builder.RegisterService(server->telemetry_service_.get());
  builder.RegisterService(server->chargeback_service_.get());
  builder.SetMaxReceiveMessageSize(4 << 20);
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address, " (address in use?)"));
  }
  return server;
}

ArbiterServer::~ArbiterServer() {
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_seconds(5, GPR_TIMESPAN)));
  }
  // Order matters: no calls arrive now; stop the telemetry thread (it submits
  // idle reclaims), then the arbiter (answers what is queued), then the read
  // workers.
  telemetry_.reset();
  arbiter_.reset();
  reads_.reset();
}

}  // namespace arbiter::server
