// arbctl export kueue: Arbiter's governance in the form other systems
// enforce. The calls are in kueue.cc.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {

void RegisterExportCommands(CLI::App& root, CliContext& ctx) {
  CLI::App* export_cmd = root.add_subcommand("export", "governance for other systems");
  auto queue_name = std::make_shared<std::string>("gpu");
  CLI::App* kueue = export_cmd->add_subcommand(
      "kueue",
      "Kueue objects (YAML) enforcing Arbiter's teams, cohorts and quotas\n  e.g. arbctl "
      "export kueue | kubectl apply -f -");
  kueue->add_option("--queue-name", *queue_name, "name of each team's LocalQueue")
      ->capture_default_str();
  kueue->callback([&ctx, queue_name] { ctx.exit_code = ctx.Connect().ExportKueue(*queue_name); });
}

}  // namespace arbiter::arbctl
