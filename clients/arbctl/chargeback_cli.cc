// arbctl slo | latency | incidents | chargeback: serving teams' objectives,
// the breaches that become incidents, and the per-team statements finance
// reads. Times are RFC 3339 or +/-<duration> from now. The calls are in
// chargeback.cc.
#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {
namespace {

// A latency in ms, sent in microseconds: up to an hour, so that the product
// cannot overflow (a positive int64 of ms could).
const CLI::Range kMilliseconds(int64_t{1}, int64_t{3600000});

struct SloFlags {
  std::string team;
  std::string service;
  std::string pool;
  int64_t p99_ms = 0;
  int64_t window_seconds = 300;
  int64_t penalty_micros_per_minute = 0;
};

struct LatencyFlags {
  std::string team;
  std::string service;
  std::string start;
  int64_t window_seconds = 0;
  int64_t p50_ms = 0;
  int64_t p99_ms = 0;
  int64_t rps = 0;
};

// A period, and for `chargeback show` how and where to write it.
struct PeriodFlags {
  std::string from = "-24h";
  std::string to = "+0s";
  std::string team;
  std::string format = "table";
  std::string output;  // Empty: stdout.
};

void AddSlo(CLI::App& root, CliContext& ctx) {
  CLI::App* slo = root.add_subcommand("slo", "serving teams' latency objectives");
  auto f = std::make_shared<SloFlags>();
  CLI::App* set = slo->add_subcommand("set", "declare or replace a service's SLO");
  set->add_option("team", f->team, "the serving team")->required();
  set->add_option("service", f->service, "the service, e.g. chat-api")->required();
  set->add_option("--pool", f->pool, "the pool it runs in")->required();
  set->add_option("--p99-ms", f->p99_ms, "p99 latency target, ms")
      ->check(kMilliseconds)
      ->required();
  set->add_option("--window-seconds", f->window_seconds, "evaluation window")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  set->add_option("--penalty-micros-per-minute", f->penalty_micros_per_minute,
                  "cost of a minute of breach; 0: the team's reserved cost")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  set->callback([&ctx, f] {
    ctx.exit_code = ctx.Connect().SetSlo(f->team, f->service, f->pool, f->p99_ms * 1000,
                                         f->window_seconds, f->penalty_micros_per_minute);
  });
  auto list_team = std::make_shared<std::string>();
  CLI::App* list = slo->add_subcommand("list", "SLOs");
  list->add_option("--team", *list_team, "one team's");
  list->callback([&ctx, list_team] { ctx.exit_code = ctx.Connect().ListSlos(*list_team); });
  slo->require_subcommand(1);
}

void AddLatency(CLI::App& root, CliContext& ctx) {
  CLI::App* latency = root.add_subcommand("latency", "latency windows from a serving platform");
  auto f = std::make_shared<LatencyFlags>();
  CLI::App* report =
      latency->add_subcommand("report", "report one window; a breach becomes an incident");
  report->add_option("team", f->team, "the serving team")->required();
  report->add_option("service", f->service, "the service")->required();
  report->add_option("--start", f->start, "window start: RFC 3339 or -<duration>")->required();
  report
      ->add_option("--window-seconds", f->window_seconds,
                   "the window's length; default: the SLO's window")
      ->check(CLI::PositiveNumber);
  report->add_option("--p50-ms", f->p50_ms, "p50, ms")->check(kMilliseconds)->required();
  report->add_option("--p99-ms", f->p99_ms, "p99, ms")->check(kMilliseconds)->required();
  report->add_option("--rps", f->rps, "requests per second")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000000000}));
  report->callback([&ctx, f] {
    ctx.exit_code = ctx.Connect().ReportLatency(f->team, f->service, f->start, f->window_seconds,
                                                f->p50_ms * 1000, f->p99_ms * 1000, f->rps * 1000);
  });
  latency->require_subcommand(1);
}

void AddIncidents(CLI::App& root, CliContext& ctx) {
  CLI::App* incidents = root.add_subcommand("incidents", "SLO breaches and who was charged");
  auto f = std::make_shared<PeriodFlags>();
  CLI::App* list = incidents->add_subcommand("list", "incidents recorded in a period");
  list->add_option("--from", f->from, "RFC 3339 or -<duration>")->capture_default_str();
  list->add_option("--to", f->to, "RFC 3339 or +/-<duration>")->capture_default_str();
  list->add_option("--team", f->team, "suffered or caused by this team");
  list->callback(
      [&ctx, f] { ctx.exit_code = ctx.Connect().ListIncidents(f->from, f->to, f->team); });
  incidents->require_subcommand(1);
}

void AddChargeback(CLI::App& root, CliContext& ctx) {
  CLI::App* chargeback = root.add_subcommand("chargeback", "per-team statements for finance");
  auto f = std::make_shared<PeriodFlags>();
  CLI::App* show = chargeback->add_subcommand("show", "statements for a period (whole hours)");
  show->add_option("--from", f->from, "RFC 3339 or -<duration>")->capture_default_str();
  show->add_option("--to", f->to, "RFC 3339 or +/-<duration>")->capture_default_str();
  show->add_option("--team", f->team, "one team's statement");
  show->add_option("--format", f->format, "table, json, csv, csv-lines or html")
      ->capture_default_str();
  show->add_option("-o,--output", f->output, "write to this file instead of stdout");
  show->callback([&ctx, f] {
    ctx.exit_code = ctx.Connect().Chargeback(f->from, f->to, f->team, f->format, f->output);
  });
  CLI::App* close =
      chargeback->add_subcommand("close", "freeze an ended period; its hash goes into the ledger");
  close->add_option("--from", f->from, "RFC 3339")->required();
  close->add_option("--to", f->to, "RFC 3339")->required();
  close->callback([&ctx, f] { ctx.exit_code = ctx.Connect().ClosePeriod(f->from, f->to); });
  chargeback->require_subcommand(1);
}

}  // namespace

void RegisterChargebackCommands(CLI::App& root, CliContext& ctx) {
  AddSlo(root, ctx);
  AddLatency(root, ctx);
  AddIncidents(root, ctx);
  AddChargeback(root, ctx);
}

}  // namespace arbiter::arbctl
