// arbctl telemetry send: one GPU reading by hand, as the agent sends them.
// The call is in telemetry.cc.
#include <memory>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {

void RegisterTelemetryCommands(CLI::App& root, CliContext& ctx) {
  CLI::App* telemetry = root.add_subcommand("telemetry", "GPU readings (the agent sends these)");
  auto sample = std::make_shared<Commands::SampleOptions>();
  CLI::App* send = telemetry->add_subcommand(
      "send",
      "send one GPU reading by hand\n  e.g. arbctl telemetry send --cluster east --node "
      "h100-0 --gpu 0 --util-milli 730");
  send->add_option("--cluster", sample->cluster, "cluster")->required();
  send->add_option("--node", sample->node, "node name")->required();
  send->add_option("--gpu", sample->gpu_index, "GPU index")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  send->add_option("--uuid", sample->uuid, "GPU UUID (instead of the index)");
  send->add_option("--util-milli", sample->util_milli, "busy, 0..1000")
      ->check(CLI::Range(int64_t{0}, int64_t{1000}));
  send->add_option("--memory-used-mib", sample->fb_used_mib, "framebuffer used, MiB")
      ->check(CLI::NonNegativeNumber);
  send->add_option("--power-mw", sample->power_mw, "power, milliwatts")
      ->check(CLI::NonNegativeNumber);
  send->add_option("--interval-seconds", sample->interval_seconds, "the reading's interval")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  send->add_option("--pod", sample->pod, "pod using the GPU");
  send->add_option("--namespace", sample->pod_namespace, "its namespace");
  send->callback([&ctx, sample] { ctx.exit_code = ctx.Connect().SendSample(*sample); });
}

}  // namespace arbiter::arbctl
