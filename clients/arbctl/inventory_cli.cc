// arbctl inventory: nodes and their GPUs. The calls are in commands.cc
// (list) and access.cc (register).
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {
namespace {

struct ListFlags {
  std::string cluster;
  std::string pool;
};

}  // namespace

void RegisterInventoryCommands(CLI::App& root, CliContext& ctx) {
  CLI::App* inventory = root.add_subcommand("inventory", "nodes and their GPUs");
  auto list_flags = std::make_shared<ListFlags>();
  CLI::App* list = inventory->add_subcommand("list", "list nodes with allocations");
  list->add_option("--cluster", list_flags->cluster, "only this cluster");
  list->add_option("--pool", list_flags->pool, "only this pool");
  list->callback([&ctx, list_flags] {
    ctx.exit_code = ctx.Connect().ListInventory(list_flags->cluster, list_flags->pool);
  });

  auto node = std::make_shared<Commands::NodeOptions>();
  CLI::App* reg = inventory->add_subcommand(
      "register",
      "register a node and its GPUs\n  e.g. arbctl inventory register h100-7 --cluster east "
      "--pool serving --model H100-80GB --gpus 8");
  reg->add_option("name", node->name, "node name (its Kubernetes node name)")->required();
  reg->add_option("--cluster", node->cluster, "cluster")->required();
  reg->add_option("--pool", node->pool, "pool")->required();
  reg->add_option("--model", node->model, "GPU model (arbctl models list)")->required();
  reg->add_option("--gpus", node->gpus, "GPUs on the node")
      ->check(CLI::Range(int64_t{1}, int64_t{64}))
      ->capture_default_str();
  reg->add_option("--cpu-milli", node->cpu_milli, "host CPU, milli-cores")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  reg->add_option("--memory-mib", node->memory_mib, "host memory, MiB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  reg->add_option("--topology-domain", node->topology_domain,
                  "NVLink domain or rack (gangs may ask for one)");
  reg->add_option("--uuid", node->uuids, "GPU UUIDs in index order (repeatable)");
  reg->callback([&ctx, node] { ctx.exit_code = ctx.Connect().RegisterNode(*node); });
  inventory->require_subcommand(1);
}

}  // namespace arbiter::arbctl
