#include "core/arbitration.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

#include "core/fingerprint.h"
#include "core/model_sizing.h"
#include "core/placement.h"
#include "core/status_macros.h"
#include "core/validate.h"

namespace arbiter::core {
namespace {

absl::Status NotFound(absl::string_view field, absl::string_view what, absl::string_view name) {
  return absl::NotFoundError(absl::StrCat(field, ": unknown ", what, " '", name, "'"));
}

// State-dependent checks of a request: referenced entities exist, and a
// fraction's memory fits at least one allowed GPU model.
absl::Status CheckReferences(const State& state, const CapacityRequestSpec& spec) {
  if (state.FindTeam(spec.team) == nullptr) return NotFound("team", "team", spec.team);
  if (state.FindPool(spec.pool) == nullptr) return NotFound("pool", "pool", spec.pool);
  int64_t max_memory = 0;
  std::string max_model;
  auto consider = [&](const GpuModel& m) {
    if (m.memory_mib > max_memory) {
      max_memory = m.memory_mib;
      max_model = m.name;
    }
  };
  for (size_t i = 0; i < spec.gpu_models.size(); ++i) {
    const GpuModel* m = state.FindGpuModel(spec.gpu_models[i]);
    if (m == nullptr) {
      return NotFound(absl::StrCat("gpu_models[", i, "]"), "GPU model", spec.gpu_models[i]);
    }
    consider(*m);
  }
  if (spec.gpu_models.empty()) {
    for (const auto& [name, m] : state.gpu_models()) consider(m);
  }
  if (spec.shape.is_fraction() && spec.shape.fraction().memory_mib > max_memory) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape.fraction.memory_mib: ", spec.shape.fraction().memory_mib,
                     " MiB exceeds the memory of every allowed GPU model (largest: ", max_model,
                     " with ", max_memory, " MiB)"));
  }
  return absl::OkStatus();
}

// Decides a request that is new or waiting. Mutates `request` (state,
// reason, placements) and `state` (charges placements when admitted).
void Decide(State& state, CapacityRequest& request) {
  const CapacityRequestSpec& spec = request.spec;
  const Quota* quota = state.FindQuota(spec.team, spec.pool);
  const int64_t need = spec.total_gpu_milli();
  const int64_t nominal = quota == nullptr ? 0 : quota->nominal_milli;
  const int64_t used = state.UsedMilli(spec.team, spec.pool);
  request.placements.clear();
  if (quota == nullptr || need > nominal) {
    request.state = RequestState::kDenied;
    request.reason_code = quota == nullptr ? kReasonNoQuota : kReasonQuotaExceeded;
    request.reason = quota == nullptr
                         ? absl::StrCat("team ", spec.team, " has no quota in pool ", spec.pool)
                         : absl::StrCat("request needs ", need, " milli-GPU; team ", spec.team,
                                        "'s nominal quota in pool ", spec.pool, " is ", nominal);
    return;
  }
  if (used + need > nominal) {
    request.state = RequestState::kQueued;
    request.reason_code = kReasonQuotaExceeded;
    request.reason = absl::StrCat("team ", spec.team, " holds ", used, " of its ", nominal,
                                  " milli-GPU in pool ", spec.pool, "; request needs ", need,
                                  " (over by ", used + need - nominal, ")");
    return;
  }
  GangPlacement placed = PlaceGang(state, spec);
  switch (placed.result) {
    case FitResult::kPlaced:
      request.state = RequestState::kAdmitted;
      request.reason_code.clear();
      request.reason.clear();
      request.placements = std::move(placed.placements);
      return;
    case FitResult::kNotNow:
      request.state = RequestState::kQueued;
      request.reason_code = kReasonInsufficientCapacity;
      request.reason = std::move(placed.why);
      return;
    case FitResult::kNever:
      request.state = RequestState::kDenied;
      request.reason_code = kReasonNoFeasibleNode;
      request.reason = std::move(placed.why);
      return;
  }
}

// Re-decides the queued requests of `pool`, oldest first; records those that
// were admitted.
void AdmitQueued(State& state, const std::string& pool, absl::Time now, ChangeSet& changes) {
  const std::set<int64_t>& queued = state.QueuedIn(pool);
  const std::vector<int64_t> ids(queued.begin(), queued.end());
  for (int64_t id : ids) {
    CapacityRequest request = *state.FindLiveRequest(id);
    Decide(state, request);
    if (request.state != RequestState::kAdmitted) continue;
    request.updated_at = now;
    state.PutRequest(request);
    changes.changes.emplace_back(RequestWrite{std::move(request), /*is_new=*/false});
  }
}

}  // namespace

absl::StatusOr<RequestOutcome> RequestCapacity(State& state, const CapacityRequestSpec& spec,
                                               absl::Time now, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateRequestSpec(spec));
  const uint64_t body_hash = FingerprintRequestSpec(spec);
  if (const IdempotencyEntry* seen = state.FindIdempotencyKey(spec.idempotency_key)) {
    if (seen->body_hash != body_hash) {
      return absl::FailedPreconditionError(absl::StrCat(
          "idempotency_key: '", spec.idempotency_key, "' was used for request ", seen->request_id,
          " with a different body; use a new key for a different request"));
    }
    RequestOutcome replay;
    replay.request.id = seen->request_id;
    replay.replayed = true;
    return replay;
  }
  CapacityRequest request;
  request.spec = spec;
  if (spec.model_profile.has_value()) {
    // The request names a model: choose the smallest form that holds it.
    if (state.FindPool(spec.pool) == nullptr) return NotFound("pool", "pool", spec.pool);
    ARBITER_ASSIGN_OR_RETURN(const int64_t memory_mib, ModelMemoryMib(*spec.model_profile));
    ARBITER_ASSIGN_OR_RETURN(request.spec.shape.gpu, ChooseGpuForm(state, spec, memory_mib));
  }
  ARBITER_RETURN_IF_ERROR(CheckReferences(state, request.spec));
  if (request.spec.shape.is_mig()) {
    ARBITER_ASSIGN_OR_RETURN(std::get<MigShape>(request.spec.shape.gpu).milli,
                             state.MigMilli(request.spec));
  }
  state.ObserveDemand(request.spec);
  request.id = state.TakeRequestId();
  request.body_hash = body_hash;
  request.created_at = now;
  request.updated_at = now;
  Decide(state, request);
  state.PutRequest(request);
  changes.changes.emplace_back(RequestWrite{request, /*is_new=*/true});
  return RequestOutcome{std::move(request), /*replayed=*/false};
}

absl::StatusOr<CapacityRequest> ReleaseRequest(State& state, int64_t id, absl::Time now,
                                               ChangeSet& changes) {
  if (id <= 0) return absl::InvalidArgumentError(absl::StrCat("id: must be > 0, got ", id));
  if (id >= state.next_request_id()) {
    return absl::NotFoundError(absl::StrCat("id: no request ", id));
  }
  const CapacityRequest* live = state.FindLiveRequest(id);
  if (live == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("id: request ", id, " holds nothing (already released, cancelled or denied)"));
  }
  CapacityRequest request = *live;
  if (request.state == RequestState::kAdmitted) {
    for (const Placement& p : request.placements) state.ApplyPlacement(p, -1);
    request.state = RequestState::kReleased;
  } else {
    request.state = RequestState::kCancelled;
  }
  request.updated_at = now;
  state.PutRequest(request);
  changes.changes.emplace_back(RequestWrite{request, /*is_new=*/false});
  AdmitQueued(state, request.spec.pool, now, changes);
  return request;
}

absl::Status CreateCluster(State& state, const Cluster& cluster, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateCluster(cluster));
  if (state.HasCluster(cluster.name)) {
    return absl::AlreadyExistsError(absl::StrCat("cluster.name: '", cluster.name, "' exists"));
  }
  ARBITER_RETURN_IF_ERROR(state.LoadCluster(cluster));
  changes.changes.emplace_back(cluster);
  return absl::OkStatus();
}

absl::Status CreatePool(State& state, const Pool& pool, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidatePool(pool));
  if (state.FindPool(pool.name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("pool.name: '", pool.name, "' exists"));
  }
  ARBITER_RETURN_IF_ERROR(state.LoadPool(pool));
  changes.changes.emplace_back(pool);
  return absl::OkStatus();
}

absl::StatusOr<Node> RegisterNode(State& state, const Node& node, absl::Time now,
                                  ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateNode(node));
  if (!state.HasCluster(node.cluster)) return NotFound("node.cluster", "cluster", node.cluster);
  if (state.FindPool(node.pool) == nullptr) return NotFound("node.pool", "pool", node.pool);
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    if (state.FindGpuModel(node.gpus[i].model) == nullptr) {
      return NotFound(absl::StrCat("node.gpus[", i, "].model"), "GPU model", node.gpus[i].model);
    }
  }
  if (state.FindNode(node.cluster, node.name) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("node.name: '", node.name, "' exists in cluster ", node.cluster));
  }
  Node registered = node;
  registered.id = state.TakeNodeId();
  ARBITER_RETURN_IF_ERROR(state.LoadNode(registered));
  const Node& stored = *state.FindNode(registered.id);
  changes.changes.emplace_back(stored);
  AdmitQueued(state, node.pool, now, changes);
  return *state.FindNode(registered.id);
}

absl::Status CreateTeam(State& state, const Team& team, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateTeam(team));
  if (state.FindTeam(team.name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("team.name: '", team.name, "' exists"));
  }
  if (!team.parent.empty() && state.FindTeam(team.parent) == nullptr) {
    return NotFound("team.parent", "team", team.parent);
  }
  ARBITER_RETURN_IF_ERROR(state.LoadTeam(team));
  changes.changes.emplace_back(team);
  return absl::OkStatus();
}

absl::Status SetQuota(State& state, const Quota& quota, absl::Time now, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateQuota(quota));
  if (state.FindTeam(quota.team) == nullptr) return NotFound("quota.team", "team", quota.team);
  if (state.FindPool(quota.pool) == nullptr) return NotFound("quota.pool", "pool", quota.pool);
  ARBITER_RETURN_IF_ERROR(state.LoadQuota(quota));
  changes.changes.emplace_back(quota);
  AdmitQueued(state, quota.pool, now, changes);
  return absl::OkStatus();
}

}  // namespace arbiter::core
