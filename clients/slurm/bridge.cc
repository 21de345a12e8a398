#include "clients/slurm/bridge.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace arbiter::slurm {
namespace {

using Phase = RequestView::Phase;

constexpr size_t kMaxComment = 250;
constexpr int64_t kMaxDurationSeconds = 31622400;  // As RequestCapacity allows.

std::string Truncated(std::string text, size_t limit) {
  if (text.size() > limit) text.resize(limit);
  return text;
}

// Distinct nodes in member order.
std::vector<std::string> DistinctNodes(const std::vector<std::string>& nodes) {
  std::vector<std::string> out;
  for (const std::string& n : nodes) {
    bool seen = false;
    for (const std::string& o : out) seen = seen || o == n;
    if (!seen) out.push_back(n);
  }
  return out;
}

// An answer that no retry changes: the job cannot be asked for as it is.
bool Permanent(const absl::Status& s) {
  return absl::IsInvalidArgument(s) || absl::IsNotFound(s) || absl::IsPermissionDenied(s) ||
         absl::IsFailedPrecondition(s) || absl::IsOutOfRange(s);
}

}  // namespace

std::string Action::Describe() const {
  static const char* const kNames[] = {"ask",     "lookup", "show",   "admit",   "renew",
                                       "release", "hold",   "signal", "requeue", "cancel"};
  std::string out = absl::StrCat(kNames[kind], " job ", job);
  if (request > 0) absl::StrAppend(&out, " request ", request);
  if (run_started > 0) absl::StrAppend(&out, " ran ", run_ended - run_started, " s");
  if (!nodes.empty()) absl::StrAppend(&out, " on ", absl::StrJoin(nodes, ","));
  if (!text.empty()) absl::StrAppend(&out, " (", text, ")");
  return out;
}

std::string CommentFor(const RequestView& view) {
  std::string state = absl::AsciiStrToLower(view.state);
  std::string text;
  if (view.phase == Phase::kWaiting) {
    text = absl::StrCat("arbiter: ", state, view.reason_code.empty() ? "" : ": ", view.reason_code,
                        view.reason.empty() ? "" : ": ", view.reason);
  } else {
    text = absl::StrCat("arbiter: request ", view.id, " ", state, view.reason.empty() ? "" : ": ",
                        view.reason);
  }
  return Truncated(std::move(text), kMaxComment);
}

Bridge::Bridge(BridgeOptions options) : options_(std::move(options)) {}

std::string Bridge::HolderOf(int64_t job) const {
  return absl::StrCat("slurm:", options_.cluster, "/", job);
}

void Bridge::Jobs(const std::vector<SlurmJob>& jobs, absl::Time now) {
  (void)now;
  for (auto& [id, t] : tracked_) t.listed = false;
  for (const SlurmJob& job : jobs) {
    if (!job.gpus.any && !job.gpus_not_per_node) continue;
    auto [it, fresh] = tracked_.try_emplace(job.id);
    Tracked& t = it->second;
    if (!fresh && job.restart_count != t.job.restart_count) {
      // Requeued: the earlier run's allocation is released (confirming a
      // preemption), and the new run is asked for anew.
      if (t.request > 0 && !t.released) t.to_release.push_back(t.request);
      std::vector<int64_t> to_release = std::move(t.to_release);
      const bool in_flight = t.in_flight;  // The earlier run's action, still out.
      t = Tracked{};
      t.to_release = std::move(to_release);
      t.in_flight = in_flight;
    }
    t.job = job;
    t.listed = true;
    if (t.request == 0) t.request = RequestIn(job.admin_comment, job.restart_count);
  }
}

void Bridge::AllocationChanged(const RequestView& view) {
  for (auto& [id, t] : tracked_) {
    if (t.request == view.id) t.view = view;
  }
}

std::vector<Action> Bridge::Plan(absl::Time now) {
  std::vector<Action> actions;
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    Tracked& t = it->second;
    if (t.in_flight) {
      ++it;
      continue;
    }
    std::optional<Action> next = Next(t, now);
    const bool allocation_live =
        !t.to_release.empty() ||
        (t.request > 0 && !t.released && (!t.view || t.view->phase != Phase::kEnded));
    if (!next.has_value() && !t.listed && !allocation_live) {
      it = tracked_.erase(it);  // Gone from squeue, nothing left to do.
      continue;
    }
    if (next.has_value()) {
      t.in_flight = true;
      actions.push_back(*std::move(next));
    }
    ++it;
  }
  return actions;
}

Action Bridge::On(const Tracked& t, Action::Kind kind) const {
  Action a;
  a.kind = kind;
  a.job = t.job.id;
  a.restart = t.job.restart_count;
  a.request = t.request;
  a.holder = HolderOf(t.job.id);
  a.requeueable = t.job.requeue;
  return a;
}

std::optional<Action> Bridge::Next(Tracked& t, absl::Time now) const {
  // A call that failed is not made again before retry_every.
  if (now - t.failed_at < options_.retry_every) return std::nullopt;
  if (!t.to_release.empty()) {
    Action a = On(t, Action::kRelease);
    a.request = t.to_release.back();
    return a;
  }
  const bool allocation_live =
      t.request > 0 && !t.released && (!t.view || t.view->phase != Phase::kEnded);
  if (!t.listed || t.job.Ended()) {
    // The job ended (or left squeue): its allocation is released, charged
    // for the run Slurm recorded when it has one.
    if (!allocation_live) return std::nullopt;
    Action a = On(t, Action::kRelease);
    // A job cancelled before it started has a start and an end too (both
    // at the cancel), but no nodes: it did not run.
    if (t.listed && !t.run_refused && !t.job.node_list.empty() && t.job.start_time > 0 &&
        t.job.end_time >= t.job.start_time) {
      a.run_started = t.job.start_time;
      a.run_ended = t.job.end_time;
    }
    return a;
  }
  if (t.finished) return std::nullopt;  // Slurm is cancelling or requeueing it.
  if (t.job.Pending()) return ForPending(t, now);
  if (t.job.Active()) return ForActive(t, now);
  return std::nullopt;  // REQUEUED, REQUEUE_HOLD, ...: passing states.
}

std::optional<Action> Bridge::ForPending(Tracked& t, absl::Time now) const {
  const SlurmJob& job = t.job;
  const bool due = now - t.acted_at >= options_.retry_every;
  if (!t.refusal.empty()) {
    Action a = On(t, Action::kCancel);
    a.text = t.refusal;
    return a;
  }
  if (t.request == 0) {
    if (!job.held) return due ? std::optional<Action>(On(t, Action::kHold)) : std::nullopt;
    absl::StatusOr<Ask> ask = AskFor(job);
    if (!ask.ok()) {
      Action a = On(t, Action::kCancel);
      a.text = Truncated(absl::StrCat("arbiter: refused: ", ask.status().message()), kMaxComment);
      return a;
    }
    if (!t.trouble.empty() && t.shown != t.trouble && job.comment != t.trouble) {
      Action a = On(t, Action::kShow);
      a.text = t.trouble;
      return a;
    }
    if (!due) return std::nullopt;
    Action a = On(t, Action::kAsk);
    a.ask = *std::move(ask);
    return a;
  }
  if (!t.view.has_value()) {
    return due ? std::optional<Action>(On(t, Action::kLookup)) : std::nullopt;
  }
  const RequestView& view = *t.view;
  switch (view.phase) {
    case Phase::kWaiting: {
      if (!job.held) return due ? std::optional<Action>(On(t, Action::kHold)) : std::nullopt;
      const std::string comment = CommentFor(view);
      if (t.shown != comment && job.comment != comment) {
        Action a = On(t, Action::kShow);
        a.text = comment;
        return a;
      }
      return now - t.acted_at >= options_.lookup_every
                 ? std::optional<Action>(On(t, Action::kLookup))
                 : std::nullopt;
    }
    case Phase::kAdmitted: {
      if (job.held) {
        if (!due && t.claimed) return std::nullopt;  // Released; squeue lags.
        Action a = On(t, Action::kAdmit);
        a.nodes = DistinctNodes(view.nodes);
        a.text = Truncated(absl::StrCat("arbiter: admitted as request ", view.id, " on ",
                                        absl::StrJoin(a.nodes, ",")),
                           kMaxComment);
        return a;
      }
      // Released, waiting for Slurm to start it: the lease is kept.
      if (now - t.renewed_at >= options_.renew_every) return On(t, Action::kRenew);
      return std::nullopt;
    }
    case Phase::kPreempting:
    case Phase::kEnded: {
      // Preempted, denied or ended before it started: the run cannot go
      // on with this request, and its key is spent.
      Action a = On(t, Action::kCancel);
      a.text = CommentFor(view);
      return a;
    }
  }
  return std::nullopt;
}

std::optional<Action> Bridge::ForActive(Tracked& t, absl::Time now) const {
  const bool due = now - t.acted_at >= options_.retry_every;
  if (t.request == 0) {
    Action a = On(t, Action::kRequeue);
    a.text = "arbiter: started without an Arbiter allocation";
    return a;
  }
  if (!t.view.has_value()) {
    return due ? std::optional<Action>(On(t, Action::kLookup)) : std::nullopt;
  }
  const RequestView& view = *t.view;
  const bool renew_due = now - t.renewed_at >= options_.renew_every;
  switch (view.phase) {
    case Phase::kWaiting: {
      Action a = On(t, Action::kRequeue);
      a.text = absl::StrCat("arbiter: started before request ", view.id, " was admitted");
      return a;
    }
    case Phase::kAdmitted:
      return renew_due ? std::optional<Action>(On(t, Action::kRenew)) : std::nullopt;
    case Phase::kPreempting: {
      // The deadline first: a signal that keeps failing does not delay it.
      if (now >= view.deadline) {
        Action a = On(t, Action::kRequeue);
        a.text = absl::StrCat("arbiter: request ", view.id, " preempted",
                              view.reason.empty() ? "" : ": ", view.reason);
        return a;
      }
      if (!t.signalled) return On(t, Action::kSignal);
      return renew_due ? std::optional<Action>(On(t, Action::kRenew)) : std::nullopt;
    }
    case Phase::kEnded: {
      Action a = On(t, Action::kRequeue);
      a.text = CommentFor(view);
      return a;
    }
  }
  return std::nullopt;
}

absl::StatusOr<Ask> Bridge::AskFor(const SlurmJob& job) const {
  if (job.gpus_not_per_node) {
    return absl::InvalidArgumentError(
        "ask for GPUs per node (--gres=gpu:TYPE:N or --gpus-per-node), the form Arbiter places");
  }
  Ask ask;
  if (!job.gpus.type.empty()) {
    auto model = options_.gpu_types.find(job.gpus.type);
    if (model == options_.gpu_types.end()) {
      std::vector<std::string> known;
      for (const auto& [type, m] : options_.gpu_types) known.push_back(type);
      return absl::InvalidArgumentError(
          absl::StrCat("GPU type '", job.gpus.type,
                       "' is not one Arbiter knows (known: ", absl::StrJoin(known, ", "), ")"));
    }
    ask.gpu_model = model->second;
  }
  if (job.account.empty()) {
    return absl::InvalidArgumentError("the job has no account: its account is its Arbiter team");
  }
  auto pool = options_.partition_pools.find(job.partition);
  ask.pool = pool == options_.partition_pools.end() ? job.partition : pool->second;
  ask.idempotency_key =
      absl::StrCat("slurm:", options_.cluster, "/", job.id, ".", job.restart_count);
  ask.team = job.account;
  ask.members = job.nodes;
  ask.gpus_per_member = job.gpus.per_node;
  ask.preemptible = !options_.preemptible_qos.empty() && job.qos == options_.preemptible_qos;
  ask.duration_seconds = std::min(job.time_limit_minutes * 60, kMaxDurationSeconds);
  ask.description =
      Truncated(absl::StrCat("slurm job ", job.id, " (", job.name, ") of ", job.user), 256);
  return ask;
}

void Bridge::Done(const Action& action, const Outcome& outcome, absl::Time now) {
  auto it = tracked_.find(action.job);
  if (it == tracked_.end()) return;
  Tracked& t = it->second;
  t.in_flight = false;  // This was the job's one action in flight.
  if (action.restart != t.job.restart_count) {
    // For an earlier run: a request it asked for is released.
    if (action.kind == Action::kAsk && outcome.status.ok() && outcome.request.has_value()) {
      t.to_release.push_back(outcome.request->id);
    }
    return;
  }
  if (outcome.status.ok() && outcome.request.has_value() && outcome.request->id == t.request) {
    t.view = outcome.request;
  }
  // Calls whose retry has no pace of its own (asks, lookups, holds and
  // admissions keep acted_at; renewals renewed_at) wait before the next.
  const bool paced = action.kind == Action::kShow || action.kind == Action::kSignal ||
                     action.kind == Action::kRequeue || action.kind == Action::kCancel ||
                     (action.kind == Action::kRelease &&
                      !(action.run_started > 0 && absl::IsInvalidArgument(outcome.status)));
  if (paced && !outcome.status.ok() && !absl::IsFailedPrecondition(outcome.status) &&
      !absl::IsNotFound(outcome.status)) {
    t.failed_at = now;
  }
  switch (action.kind) {
    case Action::kAsk:
      t.acted_at = now;
      if (outcome.status.ok() && outcome.request.has_value()) {
        t.request = outcome.request->id;
        t.view = outcome.request;
        t.trouble.clear();
      } else if (Permanent(outcome.status)) {
        t.refusal =
            Truncated(absl::StrCat("arbiter: refused: ", outcome.status.message()), kMaxComment);
      } else {
        t.trouble = Truncated(
            absl::StrCat("arbiter: held: Arbiter did not answer (", outcome.status.message(), ")"),
            kMaxComment);
      }
      break;
    case Action::kLookup:
    case Action::kHold:
      t.acted_at = now;
      break;
    case Action::kShow:
      if (outcome.status.ok()) t.shown = action.text;
      break;
    case Action::kAdmit:
      t.acted_at = now;
      if (outcome.status.ok()) {
        t.claimed = true;
        t.renewed_at = now;
        t.shown = action.text;
      }
      break;
    case Action::kRenew:
      t.renewed_at = now;
      if (absl::IsFailedPrecondition(outcome.status)) t.view.reset();  // Look it up.
      break;
    case Action::kRelease: {
      if (action.run_started > 0 && absl::IsInvalidArgument(outcome.status)) {
        t.run_refused = true;  // Released again at once, charged admission to release.
        break;
      }
      const bool gone = outcome.status.ok() || absl::IsFailedPrecondition(outcome.status) ||
                        absl::IsNotFound(outcome.status);
      if (!gone) break;
      if (!t.to_release.empty() && t.to_release.back() == action.request) {
        t.to_release.pop_back();
      } else if (action.request == t.request) {
        t.released = true;
      }
      break;
    }
    case Action::kSignal:
      if (outcome.status.ok()) t.signalled = true;
      break;
    case Action::kRequeue:
    case Action::kCancel:
      if (outcome.status.ok()) t.finished = true;
      break;
  }
}

}  // namespace arbiter::slurm
