// arbctl's command line: the state every command shares, the root's global
// flags, and one registration function per command group.
//
// A command group is one concept of the API (the ledger, money, approvals,
// ...) and owns the top-level subcommands for it. Each group lives in its own
// `*_cli.cc`, which declares subcommands, flags and help text, and whose
// callbacks call one `Commands` method (commands.h) each; the calls and the
// printing live in `Commands`, not here. main.cc lists the groups in a table.
//
// Ordering contract: CLI11 lists subcommands in the order they are added, and
// a subcommand inherits its parent's footer and subcommand limit when it is
// added. So `ConfigureRoot` runs before any group, and the groups run in the
// order `arbctl --help` shows them; the integration tests and the docs quote
// that output.
//
// A group's flags are bound to the fields of a struct that the group's
// callbacks capture by `std::shared_ptr`: the `CLI::App` then owns that
// storage exactly as long as the options that point into it (shared because
// CLI11 keeps callbacks in `std::function`, which must be copyable). Where
// sibling subcommands shared a variable before the split (`roles grant` and
// `roles revoke`, `authority set` and `authority remove`), they share one
// struct still: CLI11 may parse both in one command line.
#pragma once

#include <string>

#include "clients/arbctl/commands.h"

namespace CLI {
class App;
}  // namespace CLI

namespace arbiter::arbctl {

// What the commands of every group share: the global options, the defaults
// from the configuration files, and the exit code of the command that ran.
// Confined to main's thread; lives in main() and outlives the `CLI::App`,
// whose callbacks refer to it.
struct CliContext {
  GlobalOptions global;
  // --as: a principal whose NAME.pem and NAME.key sit in `certs_dir`.
  std::string as;
  // Where --as looks (config key certs_dir). Default: the working directory.
  std::string certs_dir;
  // The default of `request --team` (config key team); empty: --team is
  // required.
  std::string default_team;
  // The process exit code: set by the callback of the command that ran, as
  // `Commands` returns it. Default: 0 (also for a group run without a
  // subcommand, where CLI11 allows that).
  int exit_code = 0;

  // The commands over the connection the global flags describe, with --as
  // turned into --tls-cert and --tls-key.
  // REQUIRES: the command line is parsed (call it from a callback).
  Commands Connect();
};

// Reads the defaults: the user's config.toml, then ARBITER_CONFIG (or the
// checkout's .arbiter/arbctl.conf), then the environment, each overriding the
// one before; flags override them all when parsed. A missing file is not an
// error.
CliContext LoadDefaults();

// Sets the root's footer (examples and environment), requires exactly one
// top-level subcommand, and adds the global flags. Their shown defaults are
// those of `ctx` now, so call it after `LoadDefaults`.
// REQUIRES: no subcommand added to `root` yet (they inherit the footer).
void ConfigureRoot(CLI::App& root, CliContext& ctx);

// Adds the checks every value of `app` and its subcommands gets, whatever
// the flag: an integer is a decimal that fits in int64 ("010", "0x10" and
// 2^63 are refused), a text has no control characters, is at most 4096
// bytes, and is not empty unless it clears a configured default (--tls-ca,
// --tls-cert, --tls-key). Each error names the flag or positional.
// REQUIRES: every group is registered (the checks reach the options there
// are now).
void CheckEveryValue(CLI::App& app);

// The command groups, in the order of `arbctl --help`. Each adds its
// top-level subcommands to `root`; their callbacks set `ctx.exit_code`.
// REQUIRES: `ctx` outlives `root`.

// models, clusters, pools (catalog_cli.cc).
void RegisterCatalogCommands(CLI::App& root, CliContext& ctx);
// roles (access_cli.cc).
void RegisterAccessCommands(CLI::App& root, CliContext& ctx);
// inventory (inventory_cli.cc).
void RegisterInventoryCommands(CLI::App& root, CliContext& ctx);
// teams, quotas, coexistence (governance_cli.cc).
void RegisterGovernanceCommands(CLI::App& root, CliContext& ctx);
// request, requests, release, watch (requests_cli.cc).
void RegisterRequestCommands(CLI::App& root, CliContext& ctx);
// approve, deny, delegate, delegations, authority (approvals_cli.cc).
void RegisterApprovalCommands(CLI::App& root, CliContext& ctx);
// prices, budgets (money_cli.cc).
void RegisterMoneyCommands(CLI::App& root, CliContext& ctx);
// ledger (ledger_cli.cc).
void RegisterLedgerCommands(CLI::App& root, CliContext& ctx);
// slo, latency, incidents, chargeback (chargeback_cli.cc).
void RegisterChargebackCommands(CLI::App& root, CliContext& ctx);
// usage, rightsize, idle (usage_cli.cc).
void RegisterUsageCommands(CLI::App& root, CliContext& ctx);
// export (export_cli.cc).
void RegisterExportCommands(CLI::App& root, CliContext& ctx);
// telemetry (telemetry_cli.cc).
void RegisterTelemetryCommands(CLI::App& root, CliContext& ctx);
// demo (demo_cli.cc).
void RegisterDemoCommands(CLI::App& root, CliContext& ctx);
// completion (completion_cli.cc): last, as in `arbctl --help`. Its script
// lists every command of `root` as it stands when the command runs.
void RegisterCompletionCommand(CLI::App& root, CliContext& ctx);

}  // namespace arbiter::arbctl
