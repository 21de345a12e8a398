// arbctl roles: who may do what. The calls are in access.cc.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {
namespace {

// Shared by `grant` and `revoke`.
struct RoleFlags {
  std::string subject;
  std::string role;
  std::string scope = "org";
};

}  // namespace

void RegisterAccessCommands(CLI::App& root, CliContext& ctx) {
  CLI::App* roles = root.add_subcommand("roles", "who may do what: role bindings");
  roles->add_subcommand("list", "list role bindings")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListRoles();
  });
  root.add_subcommand("whoami", "who arbiterd takes you for: principal, groups and roles")
      ->callback([&ctx] { ctx.exit_code = ctx.Connect().WhoAmI(); });
  auto f = std::make_shared<RoleFlags>();
  for (const char* verb : {"grant", "revoke"}) {
    const bool revoke = std::string(verb) == "revoke";
    CLI::App* cmd = roles->add_subcommand(
        verb, revoke ? "revoke a role\n  e.g. arbctl roles revoke spiffe://arbiter.local/bob "
                       "--role team_member --scope team:inference"
                     : "grant a role\n  e.g. arbctl roles grant spiffe://arbiter.local/bob "
                       "--role team_member --scope team:inference");
    cmd->add_option("subject", f->subject, "principal (SPIFFE ID, URI SAN or CN) or group:NAME")
        ->required();
    cmd->add_option("--role", f->role,
                    "platform_admin, pool_authority, team_admin, team_member, finance, auditor "
                    "or agent")
        ->required();
    cmd->add_option("--scope", f->scope, "org, team:NAME or pool:NAME")->capture_default_str();
    cmd->callback([&ctx, f, revoke] {
      ctx.exit_code = ctx.Connect().GrantRole(f->subject, f->role, f->scope, revoke);
    });
  }
}

}  // namespace arbiter::arbctl
