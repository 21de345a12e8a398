// arbctl inventory: nodes and their GPUs. The calls are in commands.cc
// (list), access.cc (register) and nodes.cc (the lifecycle).
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

// A node named on the command line, and the lifecycle commands' options.
struct NodeFlags {
  std::string cluster;
  std::string name;
  int64_t grace_seconds = 0;
  std::string failed_at;
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

  auto facts = std::make_shared<Commands::NodeOptions>();
  CLI::App* update = inventory->add_subcommand(
      "update",
      "update a node's topology domain, host capacity and GPU UUIDs (its pool and GPUs stay)");
  update->add_option("name", facts->name, "node name")->required();
  update->add_option("--cluster", facts->cluster, "cluster")->required();
  update->add_option("--pool", facts->pool, "its pool, as registered")->required();
  update->add_option("--model", facts->model, "its GPU model, as registered")->required();
  update->add_option("--gpus", facts->gpus, "its GPUs, as registered")
      ->check(CLI::Range(int64_t{1}, int64_t{64}))
      ->capture_default_str();
  update->add_option("--cpu-milli", facts->cpu_milli, "host CPU, milli-cores")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  update->add_option("--memory-mib", facts->memory_mib, "host memory, MiB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  update->add_option("--topology-domain", facts->topology_domain, "NVLink domain or rack");
  update->add_option("--uuid", facts->uuids, "GPU UUIDs in index order (repeatable)");
  update->callback([&ctx, facts] { ctx.exit_code = ctx.Connect().UpdateNode(*facts); });

  auto ref = std::make_shared<NodeFlags>();
  auto named = [&](const char* verb, const char* help) {
    CLI::App* sub = inventory->add_subcommand(verb, help);
    sub->add_option("name", ref->name, "node name")->required();
    sub->add_option("--cluster", ref->cluster, "cluster")->required();
    return sub;
  };
  named("cordon", "take no new placements on a node; what runs stays")->callback([&ctx, ref] {
    ctx.exit_code = ctx.Connect().CordonNode(ref->cluster, ref->name, true);
  });
  named("uncordon", "let a node take placements again (ends a drain, clears a failure)")
      ->callback([&ctx, ref] {
        ctx.exit_code = ctx.Connect().CordonNode(ref->cluster, ref->name, false);
      });
  CLI::App* drain = named("drain",
                          "cordon a node and give every allocation on it notice to vacate\n"
                          "  e.g. arbctl inventory drain h100-7 --cluster east --grace 600");
  drain->add_option("--grace", ref->grace_seconds, "seconds of notice; 0: the pool's reclaim grace")
      ->check(CLI::Range(int64_t{0}, int64_t{604800}))
      ->capture_default_str();
  drain->callback([&ctx, ref] {
    ctx.exit_code = ctx.Connect().DrainNode(ref->cluster, ref->name, ref->grace_seconds);
  });
  CLI::App* fail = named("fail", "mark a node failed: its allocations end NODE_FAILED");
  fail->add_option("--at", ref->failed_at, "when it failed (RFC 3339 or -10m); default now");
  fail->callback([&ctx, ref] {
    ctx.exit_code = ctx.Connect().MarkNodeFailed(ref->cluster, ref->name, ref->failed_at);
  });
  named("remove", "remove a node that holds nothing")->callback([&ctx, ref] {
    ctx.exit_code = ctx.Connect().RemoveNode(ref->cluster, ref->name);
  });
  named("heartbeat", "send one agent heartbeat for a node (agents do this on their own)")
      ->callback(
          [&ctx, ref] { ctx.exit_code = ctx.Connect().NodeHeartbeat(ref->cluster, ref->name); });
  inventory->require_subcommand(1);
}

}  // namespace arbiter::arbctl
