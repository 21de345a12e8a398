// arbctl request | requests | release | watch: asking for capacity, and
// following a request until it is released. The calls are in commands.cc.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "clients/arbctl/cli.h"

namespace arbiter::arbctl {
namespace {

struct ListFlags {
  std::string team;
  std::string state;
  int limit = 50;
};

// `request --team` defaults to the configured team, and is required only
// when there is none.
void AddRequest(CLI::App& root, CliContext& ctx) {
  CLI::App* request = root.add_subcommand("request", "ask for capacity (answered after commit)");
  auto req = std::make_shared<RequestOptions>();
  req->team = ctx.default_team;
  CLI::Option* team_option =
      request->add_option("--team", req->team, "requesting team (default: team in config.toml)");
  if (ctx.default_team.empty()) team_option->required();
  request->add_option("--pool", req->pool, "pool to draw from")->required();
  request
      ->add_option("--class", req->workload_class,
                   "training, inference, batch_analytics or experimentation")
      ->capture_default_str();
  request->add_option("--members", req->members, "gang size (all or nothing)")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  request->add_option("--gpus", req->gpus, "whole GPUs per member")
      ->check(CLI::Range(int64_t{1}, int64_t{64}));
  request->add_option("--milli", req->milli, "fraction of one shared GPU per member, milli-GPU")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  request->add_option("--gpu-memory-mib", req->gpu_memory_mib, "GPU memory per member (fraction)")
      ->check(CLI::PositiveNumber);
  request->add_option("--mig", req->mig_profile, "one MIG instance per member, e.g. 3g.40gb");
  request->add_option("--topology", req->topology,
                      "same-node or same-domain: keep the gang's members together");
  request->add_option("--cpu-milli", req->cpu_milli, "host CPU per member, milli-cores")
      ->check(CLI::PositiveNumber);
  request->add_option("--memory-mib", req->memory_mib, "host memory per member, MiB")
      ->check(CLI::PositiveNumber);
  request->add_option("--model", req->models, "allowed GPU model (repeatable)");
  request->add_option("--key", req->key, "idempotency key; reuse it to retry safely");
  request->add_option("--description", req->description, "job name, pod or ticket");
  request->add_option("--priority", req->priority, "-1000..1000; higher may preempt lower")
      ->check(CLI::Range(int64_t{-1000}, int64_t{1000}));
  request->add_flag(
      "--preemptible", req->preemptible,
      "may be preempted (needed to borrow, or to use a serving pool as non-inference)");
  request->add_flag("--guaranteed", req->guaranteed, "executive-sponsored: never preempted");
  request
      ->add_option("--burst", req->burst_seconds,
                   "beyond quota, take the serving pool's headroom for at most this many seconds")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  request->add_option("--recurrence", req->recurrence,
                      "a recurring reservation: one per occurrence of a window such as "
                      "'weekdays 01:00-06:00 Europe/Berlin' (not with --start or --duration)");
  request->add_flag("--spot", req->spot,
                    "spot capacity: the spot price, preempted first, never preempts (waits)");
  request
      ->add_option("--checkpoint-seconds", req->checkpoint_seconds,
                   "seconds to checkpoint and restore")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}));
  request
      ->add_option("--checkpoint-every", req->checkpoint_every_seconds,
                   "seconds between checkpoints (0: none)")
      ->check(CLI::NonNegativeNumber);
  request->add_option("--start", req->start,
                      "advance reservation: RFC 3339 time or +<duration> from now, e.g. +2h");
  request->add_option("--duration", req->duration,
                      "declared run time, e.g. 90m (lets the work backfill reservations)");
  request->callback([&ctx, req] {
    // No size given: one whole GPU per member.
    if (req->milli == 0 && req->gpus == 0 && req->mig_profile.empty()) req->gpus = 1;
    ctx.exit_code = ctx.Connect().Request(*req);
  });
}

void AddRequests(CLI::App& root, CliContext& ctx) {
  CLI::App* requests = root.add_subcommand("requests", "capacity requests");
  auto f = std::make_shared<ListFlags>();
  CLI::App* list = requests->add_subcommand("list", "list requests, newest first");
  list->add_option("--team", f->team, "only this team");
  list->add_option("--state", f->state, "admitted, queued, denied, released, cancelled");
  list->add_option("--limit", f->limit, "at most this many")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  list->callback(
      [&ctx, f] { ctx.exit_code = ctx.Connect().ListRequests(f->team, f->state, f->limit); });
  auto id = std::make_shared<int64_t>(0);
  CLI::App* get = requests->add_subcommand("get", "show one request and why it waits");
  get->add_option("id", *id, "request id")->check(CLI::PositiveNumber)->required();
  get->callback([&ctx, id] { ctx.exit_code = ctx.Connect().GetRequest(*id); });
  requests->require_subcommand(1);
}

void AddRelease(CLI::App& root, CliContext& ctx) {
  auto id = std::make_shared<int64_t>(0);
  CLI::App* release =
      root.add_subcommand("release", "release an allocation (or cancel a queued request)");
  release->add_option("id", *id, "request id")->check(CLI::PositiveNumber)->required();
  release->callback([&ctx, id] { ctx.exit_code = ctx.Connect().Release(*id); });
}

struct ClaimFlags {
  int64_t id = 0;
  std::string holder;
  std::vector<int32_t> members;
};

// An enforcer's side by hand (docs/enforcement.md).
void AddClaims(CLI::App& root, CliContext& ctx) {
  auto f = std::make_shared<ClaimFlags>();
  CLI::App* claim = root.add_subcommand(
      "claim",
      "claim an admitted allocation for one workload\n  e.g. arbctl claim 42 --holder pod:7f3a");
  claim->add_option("id", f->id, "request id")->required()->check(CLI::PositiveNumber);
  claim
      ->add_option("--holder", f->holder,
                   "the workload: pod:<namespace>/<name>, slurm:<job>.<step>, ...")
      ->required();
  claim->add_option("--member", f->members, "only this member, 0-based (repeatable; default all)")
      ->check(CLI::NonNegativeNumber);
  claim->callback([&ctx, f] { ctx.exit_code = ctx.Connect().Claim(f->id, f->holder, f->members); });
  auto r = std::make_shared<ClaimFlags>();
  CLI::App* renew =
      root.add_subcommand("renew", "renew the leases a holder holds on an allocation");
  renew->add_option("id", r->id, "request id")->required()->check(CLI::PositiveNumber);
  renew->add_option("--holder", r->holder, "the workload that holds the claims")->required();
  renew->callback([&ctx, r] { ctx.exit_code = ctx.Connect().Renew(r->id, r->holder); });
}

void AddWatch(CLI::App& root, CliContext& ctx) {
  auto f = std::make_shared<WatchOptions>();
  CLI::App* watch = root.add_subcommand(
      "watch", "stream allocation events as they commit, each with its revision");
  watch->add_option("--team", f->team, "only this team");
  watch->add_option("--pool", f->pool, "only this pool");
  watch->add_option("--cluster", f->cluster, "only requests placed in this cluster");
  watch->add_option("--node", f->node, "only requests placed on this node (with --cluster)");
  watch->add_option("--request", f->request_id, "only this request")->check(CLI::PositiveNumber);
  watch->add_option("--type", f->types,
                    "only these event types (admitted, queued, denied, released, cancelled, "
                    "preempting, preempted, reserved, pending_approval); repeatable");
  watch
      ->add_option("--from-revision", f->from_revision,
                   "replay the events after this revision (a list's or the last one printed), "
                   "then follow")
      ->check(CLI::NonNegativeNumber);
  watch->callback([&ctx, f] { ctx.exit_code = ctx.Connect().Watch(*f); });
}

}  // namespace

void RegisterRequestCommands(CLI::App& root, CliContext& ctx) {
  AddRequest(root, ctx);
  AddRequests(root, ctx);
  AddRelease(root, ctx);
  AddClaims(root, ctx);
  AddWatch(root, ctx);
}

}  // namespace arbiter::arbctl
