#include "core/request_book.h"

#include "absl/strings/str_cat.h"

namespace arbiter::core {
namespace {

template <typename Map, typename Key>
const std::set<int64_t>& SetOrEmpty(const Map& map, const Key& key) {
  static const std::set<int64_t> kNone;
  auto it = map.find(key);
  return it == map.end() ? kNone : it->second;
}

// Length-prefixed so that no two different field sequences encode alike.
void Field(std::string& out, absl::string_view value) {
  absl::StrAppend(&out, value.size(), ":", value, ";");
}
void Field(std::string& out, int64_t value) { absl::StrAppend(&out, value, ";"); }

}  // namespace

std::string AdmissionKey(const CapacityRequest& request) {
  const CapacityRequestSpec& spec = request.spec;
  std::string key;
  if (request.reason_code == kReasonPreempting || !request.holds.empty()) {
    Field(key, "alone");
    Field(key, request.id);
    return key;
  }
  Field(key, spec.team);
  Field(key, spec.pool);
  Field(key, static_cast<int64_t>(spec.workload_class));
  Field(key, spec.members);
  if (spec.shape.is_whole()) {
    Field(key, "whole");
    Field(key, spec.shape.whole_gpus());
  } else if (spec.shape.is_mig()) {
    Field(key, "mig");
    Field(key, spec.shape.mig().profile);
    Field(key, spec.shape.mig().milli);
  } else {
    Field(key, "fraction");
    Field(key, spec.shape.fraction().gpu_milli);
    Field(key, spec.shape.fraction().memory_mib);
  }
  Field(key, spec.shape.cpu_milli);
  Field(key, spec.shape.memory_mib);
  Field(key, static_cast<int64_t>(spec.gpu_models.size()));
  for (const std::string& m : spec.gpu_models) Field(key, m);
  Field(key, static_cast<int64_t>(spec.topology));
  Field(key, spec.priority);
  Field(key, spec.preemptible ? 1 : 0);
  Field(key, spec.checkpoint_seconds);
  Field(key, spec.checkpoint_interval_seconds);
  Field(key, spec.guaranteed ? 1 : 0);
  Field(key, absl::ToUnixMicros(spec.start_at));
  Field(key, absl::ToInt64Microseconds(spec.duration));
  Field(key, static_cast<int64_t>(request.approvals.size()));
  for (const std::string& a : request.approvals) Field(key, a);
  return key;
}

const CapacityRequest* RequestBook::FindLive(int64_t id) const {
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : &it->second;
}

const IdempotencyEntry* RequestBook::FindIdempotencyKey(const std::string& key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &it->second;
}

const std::set<int64_t>& RequestBook::QueuedIn(const std::string& pool) const {
  return SetOrEmpty(queued_, pool);
}

const absl::flat_hash_map<std::string, std::set<int64_t>>& RequestBook::QueueGroupsIn(
    const std::string& pool) const {
  static const absl::flat_hash_map<std::string, std::set<int64_t>> kNone;
  auto it = queue_groups_.find(pool);
  return it == queue_groups_.end() ? kNone : it->second;
}

const std::set<int64_t>& RequestBook::WaitingIn(const std::string& pool) const {
  return SetOrEmpty(waiting_, pool);
}

const std::set<int64_t>& RequestBook::HoldingIn(const std::string& pool) const {
  return SetOrEmpty(holding_, pool);
}

const std::set<int64_t>& RequestBook::VictimsOf(int64_t preemptor) const {
  return SetOrEmpty(victims_, preemptor);
}

void RequestBook::Put(const CapacityRequest& request) {
  const int64_t id = request.id;
  auto old = live_.find(id);
  if (old != live_.end()) Unindex(old->second);
  by_key_[request.spec.idempotency_key] = IdempotencyEntry{id, request.body_hash};
  if (IsFinal(request.state)) {
    if (old != live_.end()) live_.erase(old);
    return;
  }
  Index(request);
  live_[id] = request;
}

void RequestBook::ClearHolds(int64_t id) {
  auto it = live_.find(id);
  if (it != live_.end()) it->second.holds.clear();
}

void RequestBook::Index(const CapacityRequest& request) {
  const int64_t id = request.id;
  const std::string& pool = request.spec.pool;
  if (HoldsCapacity(request.state)) holding_[pool].insert(id);
  if (request.state == RequestState::kQueued) {
    queued_[pool].insert(id);
    queue_groups_[pool][AdmissionKey(request)].insert(id);
    if (request.reason_code == kReasonPreempting) waiting_[pool].insert(id);
  }
  if (request.state == RequestState::kPreempting) {
    timers_.insert({request.preempt_deadline, id});
    victims_[request.preempted_by].insert(id);
  }
  if (request.state == RequestState::kReserved) timers_.insert({request.spec.start_at, id});
  if (request.state == RequestState::kPendingApproval) {
    timers_.insert({request.approval_deadline, id});
  }
}

void RequestBook::Unindex(const CapacityRequest& old) {
  const std::string& pool = old.spec.pool;
  if (HoldsCapacity(old.state)) holding_[pool].erase(old.id);
  if (old.state == RequestState::kQueued) {
    queued_[pool].erase(old.id);
    auto& groups = queue_groups_[pool];
    auto group = groups.find(AdmissionKey(old));
    if (group != groups.end() && group->second.erase(old.id) > 0 && group->second.empty()) {
      groups.erase(group);
    }
    if (old.reason_code == kReasonPreempting) waiting_[pool].erase(old.id);
  }
  if (old.state == RequestState::kPreempting) {
    timers_.erase({old.preempt_deadline, old.id});
    auto it = victims_.find(old.preempted_by);
    if (it != victims_.end() && it->second.erase(old.id) > 0 && it->second.empty()) {
      victims_.erase(it);
    }
  }
  if (old.state == RequestState::kReserved) timers_.erase({old.spec.start_at, old.id});
  if (old.state == RequestState::kPendingApproval) {
    timers_.erase({old.approval_deadline, old.id});
  }
}

}  // namespace arbiter::core
