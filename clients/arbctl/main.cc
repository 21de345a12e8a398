// arbctl: the command-line client of Arbiter. Run `arbctl --help`.
//
// This file only wires the command groups (cli.h) together: defaults, global
// flags, then every group in the order `arbctl --help` lists them, then the
// checks every value gets (CheckEveryValue). The exit code is the one the
// command that ran set (see `Commands` in commands.h), or CLI11's for a
// command line it rejects.
#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace {

using RegisterFn = void (*)(CLI::App& root, arbiter::arbctl::CliContext& ctx);

// The command groups, in the order `arbctl --help` lists their commands.
constexpr RegisterFn kCommandGroups[] = {
    arbiter::arbctl::RegisterCatalogCommands,     // models, clusters, pools
    arbiter::arbctl::RegisterAccessCommands,      // roles
    arbiter::arbctl::RegisterInventoryCommands,   // inventory
    arbiter::arbctl::RegisterGovernanceCommands,  // teams, quotas, coexistence
    arbiter::arbctl::RegisterRequestCommands,     // request, requests, release, watch
    arbiter::arbctl::RegisterApprovalCommands,    // approve, deny, delegate, delegations, authority
    arbiter::arbctl::RegisterMoneyCommands,       // prices, budgets
    arbiter::arbctl::RegisterLedgerCommands,      // ledger
    arbiter::arbctl::RegisterChargebackCommands,  // slo, latency, incidents, chargeback
    arbiter::arbctl::RegisterUsageCommands,       // usage, rightsize, idle
    arbiter::arbctl::RegisterExportCommands,      // export
    arbiter::arbctl::RegisterTelemetryCommands,   // telemetry
    arbiter::arbctl::RegisterDemoCommands,        // demo
    arbiter::arbctl::RegisterCompletionCommand,   // completion
};

}  // namespace

int main(int argc, char** argv) {
  arbiter::arbctl::CliContext ctx = arbiter::arbctl::LoadDefaults();
  CLI::App app{"arbctl: ask Arbiter for GPU capacity, see why a request waits, release it.",
               "arbctl"};
  arbiter::arbctl::ConfigureRoot(app, ctx);
  for (RegisterFn register_group : kCommandGroups) register_group(app, ctx);
  arbiter::arbctl::CheckEveryValue(app);
  CLI11_PARSE(app, argc, argv);
  return ctx.exit_code;
}
