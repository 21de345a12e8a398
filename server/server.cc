#include "server/server.h"

#include <chrono>
#include <future>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "core/status_macros.h"
#include "server/admission.h"
#include "server/watch_server.h"

namespace arbiter::server {
namespace {

// Completion queues (and threads) serving WatchAllocations: 10,000 streams
// put 1,250 on each (see server/watch_server.h for why it matters).
constexpr int kWatchQueues = 8;
// The console's HTTPS workers: each open stream holds one; unary calls get
// the 8 the streams may not take.
constexpr int kConsoleThreads = 40;

}  // namespace

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
  server->metrics_ = std::make_unique<Metrics>();
  app::ArbiterOptions arbiter_options = options.arbiter;
  // Leads only once the election says so (below); a store given by a test
  // has no lease to elect with, so its server leads at once.
  arbiter_options.start_following = options.store == nullptr;
  arbiter_options.on_commit = [metrics = server->metrics_.get(),
                               chained = options.arbiter.on_commit](size_t commands,
                                                                    absl::Duration took, bool ok) {
    metrics->ObserveCommit(commands, took, ok);
    if (chained) chained(commands, took, ok);
  };
  if (options.store != nullptr) {
    server->store_ = options.store;
  } else {
    store::PgStoreOptions store_options;
    store_options.dsn = options.dsn;
    store_options.read_connections = options.read_connections;
    store_options.ledger_key_pem = options.ledger_key_pem;
    store_options.checkpoint_every = options.checkpoint_every;
    store_options.replica = options.replica_name;
    ARBITER_ASSIGN_OR_RETURN(server->pg_store_, store::PgStore::Create(store_options));
    server->store_ = server->pg_store_.get();
  }
  app::ApplicationOptions app_options;
  app_options.admins = options.admins;
  app_options.read_threads = options.read_threads;
  app_options.arbiter = arbiter_options;
  app_options.telemetry = options.telemetry;
  app_options.watch = options.watch;
  app_options.watch.encode = EncodeWatchEvent;
  ARBITER_ASSIGN_OR_RETURN(server->app_,
                           app::Application::Create(server->store_, clock, app_options));
  ServiceContext ctx;
  ctx.app = server->app_.get();
  ctx.insecure = options.insecure_loopback;
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
  server->watch_server_ =
      std::make_unique<WatchServer>(builder, server->allocation_.get(), ctx, kWatchQueues);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(server->metrics_->InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address, " (address in use?)"));
  }
  server->watch_server_->Start();
  if (options.store == nullptr) ARBITER_RETURN_IF_ERROR(server->StartElection(options));
  if (!options.metrics_listen.empty()) {
    ARBITER_RETURN_IF_ERROR(server->metrics_->Serve(
        options.metrics_listen, server->store_, &server->app_->arbiter(), &server->app_->hub(),
        &server->app_->telemetry(), &server->app_->ended_keys(), clock));
  }
  if (!options.webhook_listen.empty()) ARBITER_RETURN_IF_ERROR(server->StartWebhook(options));
  if (!options.console_listen.empty())
    ARBITER_RETURN_IF_ERROR(server->StartConsole(options, clock));
  if (options.heap_release_every > absl::ZeroDuration()) {
    server->heap_releaser_ =
        std::make_unique<HeapReleaser>(options.heap_release_every, options.heap_keep_free_bytes);
  }
  return server;
}

absl::Status ArbiterServer::StartElection(const ServerOptions& options) {
  if (options.replica_name.empty() || options.replica_name.size() > 40) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replica-name: must be 1 to 40 characters, got \"", options.replica_name, "\""));
  }
  if (options.lease_ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("lease-ttl: must be at least 1s");
  }
  store::LeaseOptions lease;
  lease.dsn = options.dsn;
  lease.holder = options.replica_name;
  lease.address = options.advertise_address;
  if (lease.address.empty()) {
    const std::string& listen = options.listen_address;
    lease.address = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port_);
  }
  lease.ttl = options.lease_ttl;
  app_->StartElection(std::make_unique<store::PgLease>(std::move(lease)), options.lease_ttl / 5);
  return absl::OkStatus();
}

namespace {

// The certificate chain and key of the HTTPS endpoint `flag` ("webhook",
// "console"): its own, or else the gRPC server's. INVALID_ARGUMENT naming
// `<flag>-cert` when neither is given.
absl::StatusOr<std::pair<std::string, std::string>> HttpsCertAndKey(const std::string& cert,
                                                                    const std::string& key,
                                                                    const TlsFiles& tls,
                                                                    absl::string_view flag) {
  std::pair<std::string, std::string> files{cert.empty() ? tls.cert : cert,
                                            key.empty() ? tls.key : key};
  if (files.first.empty() || files.second.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, "-cert: the ", flag,
                                                   " is HTTPS only; give --", flag, "-cert and --",
                                                   flag, "-key (or --tls-cert and --tls-key)"));
  }
  return files;
}

}  // namespace

absl::Status ArbiterServer::StartWebhook(const ServerOptions& options) {
  ARBITER_ASSIGN_OR_RETURN(auto files, HttpsCertAndKey(options.webhook_cert, options.webhook_key,
                                                       options.tls, "webhook"));
  const auto& [cert, key] = files;
  AdmissionLookups lookups;
  lookups.request = [store = store_](int64_t id) { return store->GetRequest(id); };
  lookups.node_name = [nodes = &app_->nodes()](int64_t node_id) {
    return nodes->Get(node_id).second;
  };
  lookups.claim = [allocations = &app_->allocations()](int64_t id, int32_t member,
                                                       const std::string& holder) {
    // Shared with the reply, which may come after the wait below gave up.
    auto decided = std::make_shared<std::promise<absl::StatusOr<core::CapacityRequest>>>();
    std::future<absl::StatusOr<core::CapacityRequest>> answer = decided->get_future();
    allocations->ClaimAllocation(
        app::WebhookCaller(), id, holder, {member},
        [decided](absl::StatusOr<core::CapacityRequest> r) { decided->set_value(std::move(r)); });
    // Within the API server's webhook timeout (5 s in the shipped
    // registration), so that the pod is denied 503 rather than timed out.
    // A claim committed after this answer is held by a pod that was not
    // created: arbiter-kube releases nothing for it, and a pool's lease
    // ends it.
    if (answer.wait_for(std::chrono::seconds(3)) != std::future_status::ready) {
      return absl::StatusOr<core::CapacityRequest>(
          absl::UnavailableError("the claim was not decided within 3 s"));
    }
    absl::StatusOr<core::CapacityRequest> r = answer.get();
    // A follower cannot decide: ReviewClaim leaves the claim to the controller.
    if (!r.ok() && r.status().GetPayload(app::kLeaderPayload).has_value()) {
      return absl::StatusOr<core::CapacityRequest>(
          absl::AbortedError(std::string(r.status().message())));
    }
    return r;
  };
  auto handler = [lookups](const HttpRequest& request) -> HttpResponse {
    constexpr absl::string_view kUsage =
        "POST AdmissionReviews to /admit (mutating) and /validate (validating: claims)\n";
    if (request.path == "/healthz") return {200, "text/plain", "ok\n"};
    if (request.path != "/admit" && request.path != "/validate") {
      return {404, "text/plain", std::string(kUsage)};
    }
    if (request.method != "POST") return {405, "text/plain", std::string(kUsage)};
    absl::StatusOr<std::string> answer = request.path == "/admit"
                                             ? ReviewAdmission(request.body, lookups)
                                             : ReviewClaim(request.body, lookups);
    if (!answer.ok()) return {400, "text/plain", std::string(answer.status().message()) + "\n"};
    return {200, "application/json", *std::move(answer)};
  };
  ARBITER_ASSIGN_OR_RETURN(webhook_,
                           HttpsServer::Start(options.webhook_listen, cert, key, handler));
  return absl::OkStatus();
}

absl::Status ArbiterServer::StartConsole(const ServerOptions& options, Clock* clock) {
  ARBITER_ASSIGN_OR_RETURN(auto files, HttpsCertAndKey(options.console_cert, options.console_key,
                                                       options.tls, "console"));
  const auto& [cert, key] = files;
  if (!options.oidc.issuer.empty()) {
    ARBITER_ASSIGN_OR_RETURN(bearer_, BearerVerifier::Create(options.oidc));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  ConnectGatewayOptions gateway;
  gateway.assets_dir = options.console_assets;
  gateway.max_streams = kConsoleThreads - 8;
  gateway_ = std::make_unique<ConnectGateway>(grpc_server_->InProcessChannel(args), bearer_.get(),
                                              clock, gateway);
  auto handler = [gateway = gateway_.get()](const HttpRequest& request) {
    return gateway->Handle(request);
  };
  ARBITER_ASSIGN_OR_RETURN(console_, HttpsServer::Start(options.console_listen, cert, key, handler,
                                                        kConsoleThreads, "console"));
  return absl::OkStatus();
}

ArbiterServer::~ArbiterServer() {
  // The HTTP servers read the store and the arbiter: stop them first. The
  // console's streams hold its workers: end them before stopping it.
  if (gateway_ != nullptr) gateway_->CancelStreams();
  console_.reset();
  webhook_.reset();
  if (metrics_ != nullptr) metrics_->StopServing();
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_seconds(5, GPR_TIMESPAN)));
  }
  // The watch calls have ended with the server: drain their queues.
  if (watch_server_ != nullptr) watch_server_->Stop();
  // No calls arrive now: stop the application (app::Application's
  // destructor states the order), then close the store.
  app_.reset();
  pg_store_.reset();
}

}  // namespace arbiter::server
