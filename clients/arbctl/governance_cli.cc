// arbctl teams | quotas | org | coexistence: the organisation, what each team may
// use, and which workloads may share hardware. The calls are in commands.cc.
#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {
namespace {

struct TeamFlags {
  std::string name;
  std::string parent;
  int64_t weight_milli = 1000;
};

struct QuotaFlags {
  std::string team;
  std::string pool;
  int64_t nominal_milli = 0;
  std::string gpu_model;
  Commands::QuotaLimits limits;
};

struct CoexistenceFlags {
  std::string class_a;
  std::string class_b;
  std::string isolation;
  bool separate_nodes = false;
};

void AddTeams(CLI::App& root, CliContext& ctx) {
  CLI::App* teams = root.add_subcommand("teams", "teams and cohorts");
  teams->add_subcommand("list", "list teams")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListTeams();
  });
  auto f = std::make_shared<TeamFlags>();
  CLI::App* create = teams->add_subcommand("create", "create a team");
  create->add_option("name", f->name, "team name")->required();
  create->add_option("--parent", f->parent, "parent team (cohort)");
  create->add_option("--weight-milli", f->weight_milli, "fair-share weight, 1000 = 1")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000000}))
      ->capture_default_str();
  create->callback(
      [&ctx, f] { ctx.exit_code = ctx.Connect().CreateTeam(f->name, f->parent, f->weight_milli); });
  teams->require_subcommand(1);
}

void AddQuotas(CLI::App& root, CliContext& ctx) {
  CLI::App* quotas = root.add_subcommand("quotas", "quotas per team per pool");
  auto list_team = std::make_shared<std::string>();
  CLI::App* list = quotas->add_subcommand("list", "list quotas with use");
  list->add_option("--team", *list_team, "only this team");
  list->callback([&ctx, list_team] { ctx.exit_code = ctx.Connect().ListQuotas(*list_team); });
  auto f = std::make_shared<QuotaFlags>();
  CLI::App* set = quotas->add_subcommand("set", "set a team's nominal quota in a pool");
  set->add_option("team", f->team, "team")->required();
  set->add_option("pool", f->pool, "pool")->required();
  set->add_option("nominal_milli", f->nominal_milli, "milli-GPU (1000 = one GPU)")
      ->check(CLI::NonNegativeNumber)
      ->required();
  set->add_option("--gpu-model", f->gpu_model, "only for this GPU model (default: all)");
  set->add_option("--borrow-milli", f->limits.borrow_milli,
                  "may borrow this much beyond nominal from the cohort; -1: no limit")
      ->check(CLI::Range(int64_t{-1}, int64_t{int64_t{1} << 50}));
  set->add_option("--lend-milli", f->limits.lend_milli,
                  "lends at most this much of nominal to the cohort (default: all)")
      ->check(CLI::NonNegativeNumber);
  set->add_option("--cohort-lend-milli", f->limits.cohort_lend_milli,
                  "the team's subtree lends at most this much outside it (default: all)")
      ->check(CLI::NonNegativeNumber);
  set->add_option("--cohort-borrow-milli", f->limits.cohort_borrow_milli,
                  "the team's subtree borrows at most this much from outside it (default: "
                  "no limit)")
      ->check(CLI::NonNegativeNumber);
  set->callback([&ctx, f] {
    ctx.exit_code =
        ctx.Connect().SetQuota(f->team, f->pool, f->nominal_milli, f->gpu_model, f->limits);
  });
  quotas->require_subcommand(1);
}

void AddOrganisation(CLI::App& root, CliContext& ctx) {
  CLI::App* org = root.add_subcommand("org", "the whole organisation at once");
  auto path = std::make_shared<std::string>();
  CLI::App* import = org->add_subcommand(
      "import",
      "create the teams and set the quotas of a JSON file (ImportOrganisationRequest);\n"
      "  teams and quotas already in force are left as they are\n"
      "  e.g. {\"teams\":[{\"name\":\"ml\"},{\"name\":\"nlp\",\"parent\":\"ml\"}],\n"
      "        \"quotas\":[{\"team\":\"nlp\",\"pool\":\"train\",\"nominalMilli\":8000}]}");
  import->add_option("file", *path, "the organisation, protobuf JSON")->required();
  import->callback([&ctx, path] { ctx.exit_code = ctx.Connect().ImportOrganisation(*path);
});
org->require_subcommand(1);
}  // namespace

void AddCoexistence(CLI::App& root, CliContext& ctx) {
  CLI::App* coexistence =
      root.add_subcommand("coexistence", "which workload classes may share a GPU or a node");
  coexistence->add_subcommand("list", "list the rules in force")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListCoexistence();
  });
  auto f = std::make_shared<CoexistenceFlags>();
  CLI::App* set = coexistence->add_subcommand("set", "set the rule of a pair");
  set->add_option("class_a", f->class_a, "training, inference, ...")->required();
  set->add_option("class_b", f->class_b, "training, inference, ...")->required();
  set->add_option("--gpu", f->isolation, "forbidden, mig_only or soft_sharing")->required();
  set->add_flag("--separate-nodes", f->separate_nodes, "never on the same node");
  set->callback([&ctx, f] {
    ctx.exit_code =
        ctx.Connect().SetCoexistence(f->class_a, f->class_b, f->isolation, !f->separate_nodes);
  });
}

}  // namespace arbiter::arbctl

void RegisterGovernanceCommands(CLI::App& root, CliContext& ctx) {
  AddTeams(root, ctx);
  AddQuotas(root, ctx);
  AddOrganisation(root, ctx);
  AddCoexistence(root, ctx);
}

}  // namespace arbiter::arbctl
