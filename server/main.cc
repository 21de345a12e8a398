// arbiterd: the Arbiter control plane daemon. Only wiring lives here.
//
//   arbiterd serve   --dsn DSN --tls-cert PEM --tls-key PEM --tls-client-ca PEM
//                    [--listen 127.0.0.1:50051] [--migrate]
//   arbiterd serve   --dsn DSN --insecure-loopback [--listen 127.0.0.1:50051] (development)
//   arbiterd migrate --dsn DSN
//   arbiterd archive-ledger --dsn DSN --out DIR [--keep-months 12] [--dry-run]
//   arbiterd archive-history --dsn DSN --out DIR [--keep-months 12] [--dry-run]
//
// Several `serve` processes on one database are replicas: one leads, the
// others follow (docs/operations.md, "Replicas").
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include <CLI/CLI.hpp>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "app/real_clock.h"
#include "server/history_retention.h"
#include "server/ledger_retention.h"
#include "server/logging.h"
#include "server/server.h"
#include "server/tls.h"
#include "store/migrations.h"
#include "store/postgres/history_archive.h"
#include "store/postgres/ledger_archive.h"
#include "store/postgres/migrator.h"

namespace {

using arbiter::app::ArbiterStats;
using arbiter::server::ServerOptions;

// The host's name and this process's id: unique among replicas.
std::string DefaultReplicaName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string name = std::string(host).substr(0, 30);
  return (name.empty() ? std::string("arbiterd") : name) + "-" + std::to_string(getpid());
}

// Parses `text`, the value of `flag`, into `out`. False (and logs
// "<flag>: not <what>: <text>") when it is not a duration of at least
// `min`, or of more than zero when `min` is zero and `positive`.
bool ParseDurationFlag(const char* flag, const std::string& text, absl::Duration min,
                       const char* what, absl::Duration* out, bool positive = false) {
  if (absl::ParseDuration(text, out) && *out >= min && (!positive || *out > absl::ZeroDuration())) {
    return true;
  }
  spdlog::error("{}: not {}: {}", flag, what, text);
  return false;
}

int Migrate(const std::string& dsn) {
  auto report = arbiter::store::ApplyMigrations(dsn, arbiter::store::EmbeddedMigrations());
  if (!report.ok()) {
    spdlog::error("migrate: {}", report.status().ToString());
    return 1;
  }
  spdlog::info("migrate: {} migrations were applied, {} applied now", report->applied_before,
               report->applied_now.size());
  return 0;
}

int ArchiveHistory(const std::string& dsn,
                   const arbiter::server::HistoryRetentionOptions& options) {
  const absl::Status verified =
      arbiter::store::VerifyMigrations(dsn, arbiter::store::EmbeddedMigrations());
  if (!verified.ok()) {
    spdlog::error("archive-history: {}", verified.ToString());
    return 1;
  }
  auto store = arbiter::store::HistoryArchiveStore::Connect(dsn);
  if (!store.ok()) {
    spdlog::error("archive-history: {}", store.status().ToString());
    return 1;
  }
  auto archived = arbiter::server::ArchiveClosedHistory(**store, options);
  if (!archived.ok()) {
    spdlog::error("archive-history: {}", archived.status().ToString());
    return 1;
  }
  for (const arbiter::server::ArchivedHistory& a : *archived) {
    if (options.dry_run) {
      std::cout << "would archive " << a.name << " to " << a.exported.file << "\n";
    } else {
      std::cout << "archived " << a.name << ": " << a.exported.rows << " rows, to "
                << a.exported.file << " (sha256 " << a.exported.sha256 << ")\n";
    }
  }
  if (archived->empty()) std::cout << "nothing to archive\n";
  return 0;
}

int ArchiveLedger(const std::string& dsn, const arbiter::server::RetentionOptions& options) {
  const absl::Status verified =
      arbiter::store::VerifyMigrations(dsn, arbiter::store::EmbeddedMigrations());
  if (!verified.ok()) {
    spdlog::error("archive-ledger: {}", verified.ToString());
    return 1;
  }
  auto store = arbiter::store::LedgerArchiveStore::Connect(dsn);
  if (!store.ok()) {
    spdlog::error("archive-ledger: {}", store.status().ToString());
    return 1;
  }
  auto archived = arbiter::server::ArchiveClosedMonths(**store, options);
  if (!archived.ok()) {
    spdlog::error("archive-ledger: {}", archived.status().ToString());
    return 1;
  }
  for (const arbiter::server::ArchivedPartition& a : *archived) {
    if (options.dry_run) {
      std::cout << "would archive " << a.name << " to " << a.exported.file << "\n";
    } else {
      std::cout << "archived " << a.name << ": " << a.exported.entries << " entries";
      if (a.exported.entries > 0) {
        std::cout << ", seq " << a.exported.first_seq << ".." << a.exported.last_seq;
      }
      std::cout << ", to " << a.exported.file << "\n";
    }
  }
  if (archived->empty()) std::cout << "nothing to archive\n";
  return 0;
}

// Blocks SIGINT and SIGTERM in every thread (call before starting any), so
// that WaitForStopSignal can take them synchronously.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int Serve(ServerOptions options, bool migrate, const std::string& port_file) {
  if (migrate && Migrate(options.dsn) != 0) return 1;
  const absl::Status verified =
      arbiter::store::VerifyMigrations(options.dsn, arbiter::store::EmbeddedMigrations());
  if (!verified.ok()) {
    spdlog::error("refusing to start: {}", verified.ToString());
    return 1;
  }
  const sigset_t stop_signals = BlockStopSignals();
  arbiter::app::RealClock clock;
  auto server = arbiter::server::ArbiterServer::Start(options, &clock);
  if (!server.ok()) {
    spdlog::error("cannot start: {}", server.status().ToString());
    return 1;
  }
  const int port = (*server)->port();
  if (!port_file.empty()) {
    // The extra ports first: readers wait for the main file.
    if ((*server)->metrics_port() != 0) {
      std::ofstream(port_file + ".metrics") << (*server)->metrics_port() << "\n";
    }
    if ((*server)->webhook_port() != 0) {
      std::ofstream(port_file + ".webhook") << (*server)->webhook_port() << "\n";
    }
    if ((*server)->console_port() != 0) {
      std::ofstream(port_file + ".console") << (*server)->console_port() << "\n";
    }
    std::ofstream(port_file) << port << "\n";
  }
  const std::string host = options.listen_address.substr(0, options.listen_address.rfind(':'));
  std::cout << "arbiterd ready: serving arbiter.v1 on " << host << ":" << port
            << (options.insecure_loopback ? " (plaintext, loopback only)"
                                          : " (TLS 1.3, client certificates)");
  if ((*server)->metrics_port() != 0)
    std::cout << "; /metrics on port " << (*server)->metrics_port();
  if ((*server)->webhook_port() != 0) {
    std::cout << "; admission webhook on https port " << (*server)->webhook_port();
  }
  if ((*server)->console_port() != 0) {
    std::cout << "; console on https port " << (*server)->console_port();
  }
  const ArbiterStats stats = (*server)->arbiter().stats();
  if (stats.leading) {
    std::cout << "; leading (epoch " << stats.epoch << ")";
  } else {
    std::cout << "; following";
  }
  std::cout << std::endl;
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  spdlog::info("received signal {}, shutting down", signal_number);
  server->reset();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything initializes OpenSSL: TLS 1.3 or nothing.
  if (absl::Status tls13 = arbiter::server::RestrictProcessToTls13(); !tls13.ok()) {
    std::cerr << "arbiterd: " << tls13.message() << "\n";
    return 1;
  }
  // Lock-order checking records every acquisition in a global graph; the
  // lock order is fixed by design (server/arbiter.h), so skip the cost.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"arbiterd: GPU allocation governance control plane"};
  app.require_subcommand(1);
  std::string dsn;
  if (const char* env = std::getenv("ARBITER_DSN")) dsn = env;
  std::string log_level = "info";
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "text, or json (one object per line)")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error")
      ->capture_default_str();
  // Every flag may come from a TOML file instead: top-level ones at the top,
  // `serve` and `migrate` ones under [serve] and [migrate]. Flags on the
  // command line win. deploy/arbiterd.toml documents each option.
  app.set_config("--config", "", "read options from this TOML file; flags given here win");
  // A misspelt option in the file is an error, not a silent default.
  app.allow_config_extras(CLI::config_extras_mode::error);

  CLI::App* migrate_cmd = app.add_subcommand("migrate", "apply pending schema migrations");
  migrate_cmd->add_option("--dsn", dsn, "PostgreSQL connection string (env ARBITER_DSN)");

  arbiter::server::RetentionOptions retention_options;
  CLI::App* archive_cmd = app.add_subcommand(
      "archive-ledger",
      "export the ledger's closed months to files and take them out of the database");
  archive_cmd->add_option("--dsn", dsn, "PostgreSQL connection string (env ARBITER_DSN)");
  archive_cmd
      ->add_option("--out", retention_options.out_dir,
                   "directory for the archive files (<partition>.ledger)")
      ->required()
      ->check(CLI::ExistingDirectory);
  archive_cmd
      ->add_option("--keep-months", retention_options.keep_months,
                   "closed months kept in the database before the newest entry's month")
      ->check(CLI::Range(0, 1200))
      ->capture_default_str();
  archive_cmd->add_flag("--dry-run", retention_options.dry_run,
                        "name what would be archived; write and change nothing");

  arbiter::server::HistoryRetentionOptions history_options;
  CLI::App* history_cmd = app.add_subcommand(
      "archive-history",
      "export the closed months of the request history (requests, placements, usage) to files "
      "and take them out of the database");
  history_cmd->add_option("--dsn", dsn, "PostgreSQL connection string (env ARBITER_DSN)");
  history_cmd
      ->add_option("--out", history_options.out_dir,
                   "directory for the archive files (<partition>.copy)")
      ->required()
      ->check(CLI::ExistingDirectory);
  history_cmd
      ->add_option("--keep-months", history_options.keep_months,
                   "months kept in the database before the current one")
      ->check(CLI::Range(0, 1200))
      ->capture_default_str();
  history_cmd->add_flag("--dry-run", history_options.dry_run,
                        "name what would be archived; write and change nothing");

  ServerOptions options;
  bool migrate = false;
  std::string port_file;
  CLI::App* serve_cmd = app.add_subcommand("serve", "serve the arbiter.v1 gRPC API");
  serve_cmd->add_option("--dsn", dsn, "PostgreSQL connection string (env ARBITER_DSN)");
  serve_cmd->add_option("--listen", options.listen_address, "host:port to listen on")
      ->capture_default_str();
  serve_cmd->add_flag("--insecure-loopback", options.insecure_loopback,
                      "serve plaintext gRPC; only loopback addresses are accepted");
  serve_cmd->add_option("--tls-cert", options.tls.cert, "server certificate chain (PEM)");
  serve_cmd->add_option("--tls-key", options.tls.key, "server private key (PEM)");
  serve_cmd->add_option("--tls-client-ca", options.tls.client_ca,
                        "CA bundle that client certificates must chain to (PEM)");
  serve_cmd->add_option("--admin", options.admins,
                        "principal that is a platform admin by configuration (repeatable)");
  std::string ledger_key_file;
  serve_cmd->add_option("--ledger-key", ledger_key_file,
                        "Ed25519 private key (PEM) that signs ledger checkpoints; keep it "
                        "outside the database");
  std::string approval_timeout = "24h";
  serve_cmd
      ->add_option("--approval-timeout", approval_timeout,
                   "how long a request may wait for approval, e.g. 24h")
      ->capture_default_str();
  std::string idempotency_window = "24h";
  serve_cmd
      ->add_option("--idempotency-window", idempotency_window,
                   "how long a request's idempotency key is remembered after the request "
                   "ended; past it, the key starts a new request")
      ->capture_default_str();
  std::string node_heartbeat_timeout = "60s";
  serve_cmd
      ->add_option("--node-heartbeat-timeout", node_heartbeat_timeout,
                   "a node whose agent heartbeats turns unreachable after this long without "
                   "one (no new placements); 0s: never")
      ->capture_default_str();
  serve_cmd
      ->add_option("--checkpoint-every", options.checkpoint_every,
                   "sign a ledger checkpoint every this many entries")
      ->capture_default_str();
  serve_cmd->add_flag("--migrate", migrate, "apply pending migrations before serving");
  serve_cmd->add_option("--port-file", port_file,
                        "write the bound port to this file (and those of /metrics, the "
                        "webhook and the console to FILE.metrics, FILE.webhook and "
                        "FILE.console)");
  serve_cmd->add_option("--metrics-listen", options.metrics_listen,
                        "serve Prometheus GET /metrics on this host:port (plain HTTP)");
  serve_cmd->add_option("--webhook-listen", options.webhook_listen,
                        "serve the Kubernetes admission webhook, POST /admit over HTTPS, on "
                        "this host:port");
  serve_cmd->add_option("--webhook-cert", options.webhook_cert,
                        "the webhook's certificate chain (PEM); default: --tls-cert");
  serve_cmd->add_option("--webhook-key", options.webhook_key,
                        "the webhook's private key (PEM); default: --tls-key");
  serve_cmd->add_option("--console-listen", options.console_listen,
                        "serve the browser console and the Connect protocol (arbiter.v1 as "
                        "JSON over HTTPS) on this host:port");
  serve_cmd->add_option("--console-cert", options.console_cert,
                        "the console's certificate chain (PEM); default: --tls-cert");
  serve_cmd->add_option("--console-key", options.console_key,
                        "the console's private key (PEM); default: --tls-key");
  serve_cmd->add_option("--console-assets", options.console_assets,
                        "the console's built files (console/dist); default: none, the "
                        "Connect API only");
  serve_cmd->add_option("--oidc-issuer", options.oidc.issuer,
                        "browser sign-in: the OIDC issuer whose ID tokens are accepted "
                        "(their iss)");
  serve_cmd->add_option("--oidc-audience", options.oidc.audience,
                        "browser sign-in: the audience the tokens must name (the console's "
                        "client id)");
  serve_cmd->add_option("--oidc-jwks", options.oidc.jwks_file,
                        "browser sign-in: the issuer's JSON Web Key Set, as a file (re-read "
                        "when it changes)");
  serve_cmd
      ->add_option("--oidc-principal-claim", options.oidc.principal_claim,
                   "the token claim that names the caller")
      ->capture_default_str();
  serve_cmd->add_option("--oidc-principal-prefix", options.oidc.principal_prefix,
                        "put before the claim to make the principal, e.g. "
                        "spiffe://arbiter.local/ to match client certificates");
  serve_cmd
      ->add_option("--oidc-groups-claim", options.oidc.groups_claim,
                   "the token claim that lists the caller's groups")
      ->capture_default_str();
  serve_cmd
      ->add_option("--read-connections", options.read_connections,
                   "PostgreSQL connections for reads")
      ->capture_default_str();
  std::string rollup_every = "1m";
  serve_cmd
      ->add_option("--rollup-every", rollup_every,
                   "how often telemetry rollups are refreshed, e.g. 1m; 0 for never")
      ->capture_default_str();
  std::string rollup_settle = "2m";
  serve_cmd
      ->add_option("--rollup-settle", rollup_settle,
                   "how long after a moment its usage is rolled up (samples and decisions for it "
                   "may still arrive), e.g. 2m")
      ->capture_default_str();
  std::string sample_gather = "200ms";
  serve_cmd
      ->add_option("--sample-gather", sample_gather,
                   "how long agents' sample batches wait for others to share their transaction "
                   "(fewer, larger commits), e.g. 200ms; 0 for none")
      ->capture_default_str();
  std::string retention = "720h";
  serve_cmd
      ->add_option("--telemetry-retention", retention,
                   "how long raw telemetry samples are kept, e.g. 720h")
      ->capture_default_str();
  serve_cmd
      ->add_option("--max-batch", options.arbiter.max_batch,
                   "most decisions committed in one transaction")
      ->capture_default_str();
  options.replica_name = DefaultReplicaName();
  serve_cmd
      ->add_option("--replica-name", options.replica_name,
                   "this replica's name, unique among the replicas sharing the database")
      ->capture_default_str();
  serve_cmd->add_option("--advertise-address", options.advertise_address,
                        "host:port that followers name for this replica when it leads; "
                        "default: the listen address");
  std::string lease_ttl = "5s";
  serve_cmd
      ->add_option("--lease-ttl", lease_ttl,
                   "how long the leader lease lasts unrenewed (the longest a stalled leader "
                   "holds up a takeover)")
      ->capture_default_str();

  std::string heap_release_every = "10s";
  serve_cmd
      ->add_option("--heap-release-every", heap_release_every,
                   "how often the heap's free pages go back to the system when over "
                   "--heap-keep-free-mib are free (after a telemetry pass's reads); at least "
                   "100ms, or 0 for never")
      ->capture_default_str();
  int64_t heap_keep_free_mib = 16;
  serve_cmd
      ->add_option("--heap-keep-free-mib", heap_keep_free_mib,
                   "free heap pages kept for the next allocations, in MiB")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();

  serve_cmd
      ->add_option("--watch-window", options.watch.window_events,
                   "recent events kept in memory for watch resumption")
      ->capture_default_str();
  std::string bookmark_every = "60s";
  serve_cmd
      ->add_option("--watch-bookmark-every", bookmark_every,
                   "how long a watch stream may idle before it gets a bookmark")
      ->capture_default_str();
  std::string batch_every = "50ms";
  serve_cmd
      ->add_option("--watch-batch-every", batch_every,
                   "how often a batched watch stream may start a write; the events of the "
                   "commits in between go in one message (a stream's first write after a "
                   "quiet period is not delayed); 0 for as soon as the last is written")
      ->capture_default_str();
  serve_cmd
      ->add_option("--max-watch-streams", options.watch.max_streams,
                   "most WatchAllocations streams open at once")
      ->capture_default_str();
  serve_cmd
      ->add_option("--max-watch-streams-per-caller", options.watch.max_streams_per_caller,
                   "most WatchAllocations streams one principal may hold open")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (absl::Status logging = arbiter::server::ConfigureLogging(log_format); !logging.ok()) {
    std::cerr << "arbiterd: " << logging.message() << "\n";
    return 2;
  }
  if (dsn.empty()) {
    spdlog::error("no database: pass --dsn or set ARBITER_DSN");
    return 2;
  }
  if (*migrate_cmd) return Migrate(dsn);
  if (*archive_cmd) return ArchiveLedger(dsn, retention_options);
  if (*history_cmd) {
    history_options.now = arbiter::app::RealClock().TimeNow();
    return ArchiveHistory(dsn, history_options);
  }
  options.dsn = dsn;
  const absl::Duration kZero = absl::ZeroDuration();
  if (!ParseDurationFlag("--approval-timeout", approval_timeout, kZero, "a positive duration",
                         &options.arbiter.approval_timeout, /*positive=*/true) ||
      !ParseDurationFlag("--idempotency-window", idempotency_window, kZero, "a positive duration",
                         &options.arbiter.idempotency_window, /*positive=*/true) ||
      !ParseDurationFlag("--node-heartbeat-timeout", node_heartbeat_timeout, kZero, "a duration",
                         &options.arbiter.node_heartbeat_timeout) ||
      !ParseDurationFlag("--rollup-every", rollup_every, kZero, "a duration",
                         &options.telemetry.rollup_every) ||
      !ParseDurationFlag("--rollup-settle", rollup_settle, kZero, "a duration",
                         &options.telemetry.settle) ||
      !ParseDurationFlag("--sample-gather", sample_gather, kZero, "a duration",
                         &options.telemetry.sample_gather) ||
      !ParseDurationFlag("--telemetry-retention", retention, absl::Hours(24),
                         "a duration of at least 24h", &options.telemetry.retention) ||
      !ParseDurationFlag("--watch-bookmark-every", bookmark_every, absl::Milliseconds(100),
                         "a duration of at least 100ms", &options.watch.bookmark_every) ||
      !ParseDurationFlag("--watch-batch-every", batch_every, kZero, "a duration",
                         &options.watch.batch_every) ||
      !ParseDurationFlag("--lease-ttl", lease_ttl, absl::Seconds(1), "a duration of at least 1s",
                         &options.lease_ttl) ||
      !ParseDurationFlag("--heap-release-every", heap_release_every, kZero, "a duration",
                         &options.heap_release_every)) {
    return 2;
  }
  if (options.heap_release_every > kZero && options.heap_release_every < absl::Milliseconds(100)) {
    spdlog::error("--heap-release-every: not 0 or at least 100ms: {}", heap_release_every);
    return 2;
  }
  options.heap_keep_free_bytes = heap_keep_free_mib << 20;
  if (!ledger_key_file.empty()) {
    std::ifstream in(ledger_key_file);
    std::stringstream key;
    key << in.rdbuf();
    if (!in.good() && key.str().empty()) {
      spdlog::error("--ledger-key: cannot read {}", ledger_key_file);
      return 2;
    }
    options.ledger_key_pem = key.str();
  }
  return Serve(options, migrate, port_file);
}
