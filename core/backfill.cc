#include "core/backfill.h"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "core/placement.h"
#include "core/quota.h"

namespace arbiter::core {
namespace {

// What a holder of the pool gives back, and when.
struct Ending {
  absl::Time at;
  const CapacityRequest* request;
};

// A trial on `state` that takes holders' placements away and places the
// head, then puts the pool's nodes back as they were.
class Trial {
 public:
  Trial(State& state, const CapacityRequest& head)
      : state_(state), pool_(head.spec.pool), spec_(SpecFor(state, head)) {
    for (size_t i : state_.PoolNodes(pool_)) saved_.push_back(state_.nodes()[i]);
    loosened_ = state_.Loosened(pool_);
  }
  Trial(const Trial&) = delete;
  Trial& operator=(const Trial&) = delete;

  // Places the head for `window` with `gone` (a prefix of the holders)
  // taken away; the GPUs it takes go to `claim` when given.
  bool Fits(const std::vector<Ending>& holders, size_t gone, const Window& window,
            std::vector<GpuHold>* claim) {
    if (gone == holders.size()) {
      EmptyPool();  // One write per node rather than one per placement.
    } else {
      for (size_t i = 0; i < gone; ++i) {
        for (const Placement& p : holders[i].request->placements) state_.ApplyPlacement(p, -1);
      }
    }
    GangPlacement placed = PlaceGang(state_, spec_, window);
    const bool fits = placed.result == FitResult::kPlaced;
    if (fits && claim != nullptr) {
      for (const Placement& p : placed.placements) {
        for (int32_t g : p.gpu_indices) claim->push_back(GpuHold{p.node_id, g});
      }
    }
    Restore();
    return fits;
  }

 private:
  // The head's spec narrowed to the models of its first flavor that its
  // quota admits now (the one a decision would try first).
  static CapacityRequestSpec SpecFor(const State& state, const CapacityRequest& head) {
    CapacityRequestSpec spec = head.spec;
    for (const Flavor& f : FlavorsOf(state, head.spec)) {
      if (CheckQuota(state, head.spec, *f.quota, head.spec.total_gpu_milli()).ok) {
        spec.gpu_models = f.gpu_models;
        break;
      }
    }
    return spec;
  }

  // Takes every placement off the pool's nodes (what every holder being
  // gone leaves): MIG layouts and the GPUs' holds stay.
  void EmptyPool() {
    for (const Node& saved : saved_) {
      Node n = saved;
      n.allocated_cpu_milli = 0;
      n.allocated_memory_mib = 0;
      n.class_members.fill(0);
      for (Gpu& g : n.gpus) {
        g.allocated_milli = 0;
        g.allocated_memory_mib = 0;
        g.tenants = 0;
        g.exclusive = false;
        g.class_tenants.fill(0);
        for (MigInstance& inst : g.mig_layout) inst.allocated = false;
      }
      state_.RestoreNode(std::move(n));
    }
  }

  void Restore() {
    for (const Node& n : saved_) state_.RestoreNode(n);
    if (!loosened_) state_.ClearLoosened(pool_);
  }

  State& state_;
  const std::string pool_;
  const CapacityRequestSpec spec_;
  std::vector<Node> saved_;
  bool loosened_ = false;
};

Window From(absl::Time start, const CapacityRequestSpec& spec) {
  Window w;
  w.start = start;
  if (spec.duration > absl::ZeroDuration()) w.end = start + spec.duration;
  return w;
}

// The pool's holders, those with a known end first, by end.
std::vector<Ending> HoldersByEnd(const State& state, const std::string& pool, absl::Time now) {
  std::vector<Ending> out;
  for (int64_t id : state.HoldingIn(pool)) {
    const CapacityRequest* r = state.FindLiveRequest(id);
    out.push_back({KnownEnd(*r, now), r});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Ending& a, const Ending& b) { return a.at < b.at; });
  return out;
}

}  // namespace

absl::Time KnownEnd(const CapacityRequest& r, absl::Time now) {
  const absl::Time end =
      r.state == RequestState::kPreempting ? r.preempt_deadline : r.declared_end();
  return end >= now ? end : absl::InfiniteFuture();
}

HeadPlan PlanHead(State& state, const CapacityRequest& head, absl::Time now, absl::Time hint) {
  const std::vector<Ending> holders = HoldersByEnd(state, head.spec.pool, now);
  Trial trial(state, head);
  HeadPlan plan;
  if (hint != absl::InfiniteFuture() && hint >= now) {
    size_t gone = 0;
    while (gone < holders.size() && holders[gone].at <= hint) ++gone;
    if (trial.Fits(holders, gone, From(hint, head.spec), &plan.claim)) {
      plan.start = hint;
      return plan;
    }
  }
  // gone[j]: how many holders are gone once the j-th distinct known end passes.
  std::vector<size_t> gone;
  for (size_t i = 0; i < holders.size() && holders[i].at != absl::InfiniteFuture(); ++i) {
    if (i + 1 == holders.size() || holders[i + 1].at != holders[i].at) gone.push_back(i + 1);
  }
  auto fits_after = [&](size_t j, std::vector<GpuHold>* claim) {
    return trial.Fits(holders, gone[j], From(holders[gone[j] - 1].at, head.spec), claim);
  };
  if (!gone.empty() && fits_after(gone.size() - 1, nullptr)) {
    // The earliest end after which the head fits: fits with hi's, not with
    // lo's (-1: none gone, known not to fit by the caller).
    ptrdiff_t lo = -1, hi = static_cast<ptrdiff_t>(gone.size()) - 1;
    while (hi - lo > 1) {
      const ptrdiff_t mid = lo + (hi - lo) / 2;
      if (fits_after(static_cast<size_t>(mid), nullptr)) {
        hi = mid;
      } else {
        lo = mid;
      }
    }
    plan.start = holders[gone[static_cast<size_t>(hi)] - 1].at;
    fits_after(static_cast<size_t>(hi), &plan.claim);
    return plan;
  }
  // Open-ended work: the head waits for the GPUs it would take in the pool
  // with every holder gone to drain.
  trial.Fits(holders, holders.size(), From(now, head.spec), &plan.claim);
  return plan;
}

bool FitsAt(State& state, const CapacityRequest& head, absl::Time at) {
  // Every declared end counts, passed or not: work that runs past its end
  // delays the head by itself, not by backfill.
  std::vector<Ending> holders = HoldersByEnd(state, head.spec.pool, absl::InfinitePast());
  size_t gone = 0;
  while (gone < holders.size() && holders[gone].at <= at) ++gone;
  // The head's own holds are lifted for the trial, and put back.
  const CapacityRequest* live = state.FindLiveRequest(head.id);
  const std::optional<CapacityRequest> held =
      live != nullptr && !live->holds.empty() ? std::optional(*live) : std::nullopt;
  const bool loosened = state.Loosened(head.spec.pool);
  if (held.has_value()) state.ReleaseHolds(head.id);
  bool fits = false;
  {
    Trial trial(state, head);
    fits = trial.Fits(holders, gone, From(at, head.spec), nullptr);
  }
  if (held.has_value()) state.PutRequest(*held);
  if (!loosened) state.ClearLoosened(head.spec.pool);
  return fits;
}

}  // namespace arbiter::core
