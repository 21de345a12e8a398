// arbctl models | clusters | pools: the GPU catalog and the places capacity
// lives in. The calls are in commands.cc and access.cc.
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {
namespace {

struct ClusterFlags {
  std::string name;
  std::string description;
};

void AddModels(CLI::App& root, CliContext& ctx) {
  CLI::App* models = root.add_subcommand("models", "the GPU catalog");
  models->add_subcommand("list", "list GPU models")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListModels();
  });
  auto path = std::make_shared<std::string>();
  CLI::App* apply =
      models->add_subcommand("apply",
                             "add or change GPU models from a catalog file (platform admins)\n"
                             "  e.g. arbctl models apply catalog/gpu-models.json");
  apply->add_option("file", *path, "JSON with \"gpu_models\", as `-o json models list` prints")
      ->required();
  apply->callback([&ctx, path] { ctx.exit_code = ctx.Connect().ApplyCatalog(*path); });
  models->require_subcommand(1);
}

void AddClusters(CLI::App& root, CliContext& ctx) {
  CLI::App* clusters = root.add_subcommand("clusters", "clusters");
  clusters->add_subcommand("list", "list clusters")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListClusters();
  });
  auto f = std::make_shared<ClusterFlags>();
  CLI::App* create = clusters->add_subcommand("create", "create a cluster");
  create->add_option("name", f->name, "cluster name")->required();
  create->add_option("--description", f->description, "free-form description");
  create->callback(
      [&ctx, f] { ctx.exit_code = ctx.Connect().CreateCluster(f->name, f->description); });
  clusters->require_subcommand(1);
}

void AddPools(CLI::App& root, CliContext& ctx) {
  CLI::App* pools = root.add_subcommand("pools", "pools by latency class");
  pools->add_subcommand("list", "list pools")->callback([&ctx] {
    ctx.exit_code = ctx.Connect().ListPools();
  });
  auto f = std::make_shared<PoolOptions>();
  CLI::App* create = pools->add_subcommand("create",
                                           "create a pool\n  e.g. arbctl pools create serving "
                                           "--class serving --lends-to batch_analytics");
  create->add_option("name", f->name, "pool name")->required();
  create->add_option("--class", f->latency_class, "serving, batch, spot or dev")->required();
  create->add_option("--lends-to", f->lends_to,
                     "serving pools: workload classes it lends to, preemptibly (repeatable)");
  create->add_option("--class-rule", f->class_rules,
                     "CLASS=admit|borrow|deny[@WINDOW]: how the pool takes a workload class "
                     "(repeatable); a borrow rule may hold only in a recurring window, e.g. "
                     "'training=borrow@weekdays 01:00-06:00 Europe/Berlin'; default: serving "
                     "pools admit only inference, other pools all but inference");
  create
      ->add_option("--spot-grace", f->spot_grace_seconds,
                   "seconds of notice spot work gets when preempted (default: the reclaim grace)")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}));
  create->add_option("--headroom", f->headroom,
                     "MODEL=MILLI: serving pools: capacity of a model kept free for the classes "
                     "the pool admits (repeatable)");
  create
      ->add_option("--max-burst", f->max_burst_seconds,
                   "longest burst above quota into the headroom, seconds (default 0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}));
  create
      ->add_option("--reclaim-grace", f->reclaim_grace_seconds,
                   "least seconds a victim of preemption or reclaim gets to vacate (default 30)")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}));
  create->add_flag("--proactive-reclaim", f->proactive_reclaim,
                   "serving pools: learn the demand of the classes the pool admits per quarter "
                   "hour of the week and reclaim lent capacity ahead of a forecast rise "
                   "(see arbctl pools forecast)");
  create
      ->add_option("--cold-start", f->cold_start_seconds,
                   "seconds a serving replica needs from its GPU to serving; proactive reclaim "
                   "looks ahead by the reclaim grace plus this (default 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}));
  create->add_option("--description", f->description, "free-form description");
  create->add_option("--queueing", f->queueing,
                     "backfill (default), best_effort or strict: how the queue is admitted");
  create
      ->add_option("--starvation-limit", f->starvation_limit_seconds,
                   "backfill: seconds a request may wait for capacity before it becomes the "
                   "head (default 3600; 0: never)")
      ->check(CLI::Range(int64_t{0}, int64_t{604800}));
  create
      ->add_option("--claim-deadline", f->claim_deadline_seconds,
                   "seconds an admitted allocation may stay unclaimed before it ends UNCLAIMED "
                   "(default 0: claims not required)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  create
      ->add_option("--lease", f->lease_seconds,
                   "seconds a claim lives without a renewal before the allocation ends "
                   "LEASE_EXPIRED (default 0: claims do not expire)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  create->callback([&ctx, f] { ctx.exit_code = ctx.Connect().CreatePool(*f); });
  auto forecast = std::make_shared<std::pair<std::string, int32_t>>("", 24);
  CLI::App* show =
      pools->add_subcommand("forecast",
                            "a proactive pool's serving forecast, capacity and reclaim notices\n"
                            "  e.g. arbctl pools forecast serving --hours 6");
  show->add_option("name", forecast->first, "pool name")->required();
  show->add_option("--hours", forecast->second, "hours ahead, 1..168 (default 24)")
      ->check(CLI::Range(1, 168));
  show->callback([&ctx, forecast] {
    ctx.exit_code = ctx.Connect().ServingForecast(forecast->first, forecast->second);
  });
  pools->require_subcommand(1);
}

}  // namespace

void RegisterCatalogCommands(CLI::App& root, CliContext& ctx) {
  AddModels(root, ctx);
  AddClusters(root, ctx);
  AddPools(root, ctx);
}

}  // namespace arbiter::arbctl
