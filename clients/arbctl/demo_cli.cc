// arbctl demo load: the demo organisation the README tour uses. The call is
// in demo.cc.
#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {

void RegisterDemoCommands(CLI::App& root, CliContext& ctx) {
  CLI::App* demo = root.add_subcommand("demo", "demo data");
  demo->add_subcommand("load", "load the demo organisation (idempotent)")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().LoadDemo();
  });
  demo->require_subcommand(1);
}

}  // namespace arbiter::arbctl
