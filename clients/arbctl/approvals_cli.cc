// arbctl approve | deny | delegate | delegations | authority: requests that
// wait for a person, who that person is, and who may stand in. The calls are
// in authority.cc.
#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {
namespace {

struct DenyFlags {
  int64_t id = 0;
  std::string reason;
};

struct DelegationFlags {
  std::string from;
  std::string to;
  std::string until;
};

// Shared by `authority set` and `authority remove`.
struct AuthorityFlags {
  std::string pool;
  std::string action;
  std::string approver;
  Commands::AuthorityLimits limits;
};

void AddApproveAndDeny(CLI::App& root, CliContext& ctx) {
  auto id = std::make_shared<int64_t>(0);
  CLI::App* approve = root.add_subcommand("approve", "approve a request that waits for you");
  approve->add_option("id", *id, "request id")->check(CLI::PositiveNumber)->required();
  approve->callback([&ctx, id] { ctx.exit_code = ctx.Connect().Approve(*id); });
  auto f = std::make_shared<DenyFlags>();
  CLI::App* deny = root.add_subcommand("deny", "refuse a request that waits for your approval");
  deny->add_option("id", f->id, "request id")->check(CLI::PositiveNumber)->required();
  deny->add_option("--reason", f->reason, "why (recorded in the ledger)")->required();
  deny->callback([&ctx, f] { ctx.exit_code = ctx.Connect().Deny(f->id, f->reason); });
}

void AddDelegations(CLI::App& root, CliContext& ctx) {
  auto f = std::make_shared<DelegationFlags>();
  CLI::App* delegate = root.add_subcommand("delegate", "let someone approve in your stead");
  delegate->add_option("to", f->to, "principal who may approve for you")->required();
  delegate->add_option("--from", f->from, "your principal")->required();
  delegate->add_option("--until", f->until, "RFC 3339 time or +<duration>")->required();
  delegate->callback(
      [&ctx, f] { ctx.exit_code = ctx.Connect().Delegate(f->from, f->to, f->until); });
  auto revoke_flags = std::make_shared<DelegationFlags>();
  CLI::App* delegations = root.add_subcommand("delegations", "delegated approval authority");
  CLI::App* revoke =
      delegations->add_subcommand("revoke",
                                  "take back a delegation\n  e.g. arbctl delegations "
                                  "revoke spiffe://arbiter.local/erin --from "
                                  "spiffe://arbiter.local/carol");
  revoke->add_option("to", revoke_flags->to, "principal who may approve for you")->required();
  revoke->add_option("--from", revoke_flags->from, "your principal")->required();
  revoke->callback([&ctx, revoke_flags] {
    ctx.exit_code = ctx.Connect().RevokeDelegation(revoke_flags->from, revoke_flags->to);
  });
  delegations->add_subcommand("list", "list delegations")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListDelegations();
  });
}

void AddAuthority(CLI::App& root, CliContext& ctx) {
  CLI::App* authority = root.add_subcommand("authority", "who must approve what");
  authority->add_subcommand("list", "list authority rules")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListAuthority();
  });
  auto f = std::make_shared<AuthorityFlags>();
  for (const char* verb : {"set", "remove"}) {
    CLI::App* cmd = authority->add_subcommand(verb, std::string(verb) == "set"
                                                        ? "declare that an action needs an approver"
                                                        : "remove an authority rule");
    cmd->add_option("--pool", f->pool, "pool (default: every pool)");
    cmd->add_option("--action", f->action, "borrow, guaranteed, large, over_budget or long")
        ->required();
    cmd->add_option("--approver", f->approver, "principal or group:NAME")->required();
    cmd->add_option("--limit-milli", f->limits.limit_milli,
                    "largest request it may approve; -1: any")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--limit-seconds", f->limits.limit_seconds,
                    "longest request it may approve; -1: any")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--limit-micros", f->limits.limit_micros,
                    "dearest request (projected) it may approve; -1: any")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--threshold-milli", f->limits.threshold_milli, "large: requests above this")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--threshold-seconds", f->limits.threshold_seconds,
                    "long: requests running longer than this")
        ->check(CLI::NonNegativeNumber);
    const bool remove = std::string(verb) == "remove";
    cmd->callback([&ctx, f, remove] {
      ctx.exit_code =
          ctx.Connect().SetAuthority(f->pool, f->action, f->approver, f->limits, remove);
    });
  }
}

}  // namespace

void RegisterApprovalCommands(CLI::App& root, CliContext& ctx) {
  AddApproveAndDeny(root, ctx);
  AddDelegations(root, ctx);
  AddAuthority(root, ctx);
}

}  // namespace arbiter::arbctl
