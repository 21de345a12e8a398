// arbctl usage | rightsize | idle: what allocations actually use, by the
// telemetry the agents send, and what happens to those that sit idle. Times
// are RFC 3339 or +/-<duration> from now. The calls are in telemetry.cc.
#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {
namespace {

struct PeriodFlags {
  std::string from = "-24h";
  std::string to = "+0s";
  std::string team;
};

struct IdlePolicyFlags {
  std::string workload_class;
  int32_t threshold_milli = 50;
  int64_t window_seconds = 3600;
  std::string action;
  int64_t notice_seconds = 900;
};

// `usage` and `rightsize` read the same kind of period.
std::shared_ptr<PeriodFlags> AddPeriodOptions(CLI::App& cmd) {
  auto f = std::make_shared<PeriodFlags>();
  cmd.add_option("--from", f->from, "RFC 3339 or -<duration>")->capture_default_str();
  cmd.add_option("--to", f->to, "RFC 3339 or +/-<duration>")->capture_default_str();
  cmd.add_option("--team", f->team, "one team's");
  return f;
}

void AddUsageAndRightsize(CLI::App& root, CliContext& ctx) {
  CLI::App* usage = root.add_subcommand("usage", "allocated vs used GPU-hours (telemetry)");
  auto usage_flags = AddPeriodOptions(*usage);
  usage->callback(
      [&ctx, f = usage_flags] { ctx.exit_code = ctx.Connect().Usage(f->from, f->to, f->team); });
  CLI::App* rightsize =
      root.add_subcommand("rightsize", "smaller forms that would carry the observed peaks");
  auto rightsize_flags = AddPeriodOptions(*rightsize);
  rightsize->callback([&ctx, f = rightsize_flags] {
    ctx.exit_code = ctx.Connect().RightSize(f->from, f->to, f->team);
  });
}

void AddIdle(CLI::App& root, CliContext& ctx) {
  CLI::App* idle = root.add_subcommand("idle", "idle allocations and the policies per class");
  idle->add_subcommand("list", "live allocations idle now")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListIdle();
  });
  idle->add_subcommand("policies", "the idle policy of every class")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListIdlePolicies();
  });
  auto f = std::make_shared<IdlePolicyFlags>();
  CLI::App* set = idle->add_subcommand("set-policy", "replace a class's idle policy");
  set->add_option("class", f->workload_class, "training, inference, batch_analytics, ...")
      ->required();
  set->add_option("--under-milli", f->threshold_milli, "idle: busy under this (1000 = 100%)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}))
      ->capture_default_str();
  set->add_option("--for-seconds", f->window_seconds, "for this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  set->add_option("--action", f->action, "report, notify or release")->required();
  set->add_option("--notice-seconds", f->notice_seconds, "before a release")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  set->callback([&ctx, f] {
    ctx.exit_code = ctx.Connect().SetIdlePolicy(f->workload_class, f->threshold_milli,
                                                f->window_seconds, f->action, f->notice_seconds);
  });
  idle->require_subcommand(1);
}

}  // namespace

void RegisterUsageCommands(CLI::App& root, CliContext& ctx) {
  AddUsageAndRightsize(root, ctx);
  AddIdle(root, ctx);
}

}  // namespace arbiter::arbctl
