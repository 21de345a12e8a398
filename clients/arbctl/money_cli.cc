// arbctl prices | budgets: the price book and the teams' monthly budgets.
// Money is in micros. The calls are in money.cc.
#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {
namespace {

struct PriceFlags {
  std::string model;
  std::string latency_class;
  int64_t micros_per_gpu_hour = 0;
  int64_t burst_micros_per_gpu_hour = 0;
  std::string from;
};

struct BudgetFlags {
  std::string team;
  int64_t soft_micros = 0;
  int64_t hard_micros = 0;
  std::string over = "deny";
};

void AddPrices(CLI::App& root, CliContext& ctx) {
  CLI::App* prices = root.add_subcommand("prices", "the price book (micros per GPU-hour)");
  auto at = std::make_shared<std::string>();
  CLI::App* list = prices->add_subcommand("list", "every price, or those in force --at");
  list->add_option("--at", *at, "RFC 3339 time or +<duration>");
  list->callback([&ctx, at] { ctx.exit_code = ctx.Connect().ListPrices(*at); });
  auto f = std::make_shared<PriceFlags>();
  CLI::App* set = prices->add_subcommand("set", "add a price (from now, or --from)");
  set->add_option("model", f->model, "GPU model")->required();
  set->add_option("class", f->latency_class, "serving, batch, spot or dev")->required();
  set->add_option("micros_per_gpu_hour", f->micros_per_gpu_hour, "1000000 = one unit")
      ->check(CLI::NonNegativeNumber)
      ->required();
  set->add_option("--from", f->from, "RFC 3339 time or +<duration>");
  set->add_option("--burst", f->burst_micros_per_gpu_hour,
                  "price of a GPU-hour taken by a burst above quota (default: the price)")
      ->check(CLI::NonNegativeNumber);
  set->callback([&ctx, f] {
    ctx.exit_code = ctx.Connect().SetPrice(f->model, f->latency_class, f->micros_per_gpu_hour,
                                           f->from, f->burst_micros_per_gpu_hour);
  });
}

void AddBudgets(CLI::App& root, CliContext& ctx) {
  CLI::App* budgets = root.add_subcommand("budgets", "monthly team budgets (micros)");
  budgets->add_subcommand("list", "budgets with this month's spend")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListBudgets();
  });
  auto f = std::make_shared<BudgetFlags>();
  CLI::App* set = budgets->add_subcommand("set", "set a team's monthly budget");
  set->add_option("team", f->team, "team")->required();
  set->add_option("--soft-micros", f->soft_micros, "warn beyond this")
      ->check(CLI::NonNegativeNumber)
      ->required();
  set->add_option("--hard-micros", f->hard_micros, "deny or ask beyond this")
      ->check(CLI::NonNegativeNumber)
      ->required();
  set->add_option("--over", f->over, "deny or approval")->capture_default_str();
  set->callback([&ctx, f] {
    ctx.exit_code = ctx.Connect().SetBudget(f->team, f->soft_micros, f->hard_micros, f->over);
  });
}

struct PowerFlags {
  std::string scope;
  std::string name;
  int64_t watts = 0;
  bool reclaim = false;
};

void AddPower(CLI::App& root, CliContext& ctx) {
  CLI::App* power = root.add_subcommand("power", "watt budgets of pools, racks and sites");
  power->add_subcommand("list", "list watt budgets")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListPowerBudgets();
  });
  auto f = std::make_shared<PowerFlags>();
  CLI::App* set = power->add_subcommand(
      "set", "set a watt budget\n  e.g. arbctl power set rack r1 6500 --reclaim");
  set->add_option("scope", f->scope, "pool, rack (a topology domain) or site (a cluster)")
      ->required();
  set->add_option("name", f->name, "the pool, rack or site")->required();
  set->add_option("watts", f->watts, "the budget in watts")
      ->check(CLI::NonNegativeNumber)
      ->required();
  set->add_flag("--reclaim", f->reclaim,
                "when lowered below what runs, preemptible work there vacates (spot first)");
  set->callback([&ctx, f] {
    ctx.exit_code = ctx.Connect().SetPowerBudget(f->scope, f->name, f->watts, f->reclaim);
  });
  power->require_subcommand(1);
}

}  // namespace

void RegisterMoneyCommands(CLI::App& root, CliContext& ctx) {
  AddPrices(root, ctx);
  AddBudgets(root, ctx);
  AddPower(root, ctx);
}

}  // namespace arbiter::arbctl
