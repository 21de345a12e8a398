#include "core/request_book.h"

#include <algorithm>

#include "core/fingerprint.h"

namespace arbiter::core {
namespace {

// When a preempting request's timer fires: its deadline, or its lease's end
// when State::EnforceAt put that later (`enforce_at`).
absl::Time PreemptingUntil(const CapacityRequest& r) {
  return r.enforce_at == absl::InfiniteFuture() ? r.preempt_deadline
                                                : std::max(r.preempt_deadline, r.enforce_at);
}

template <typename Map, typename Key>
const std::set<int64_t>& SetOrEmpty(const Map& map, const Key& key) {
  static const std::set<int64_t> kNone;
  auto it = map.find(key);
  return it == map.end() ? kNone : it->second;
}

}  // namespace

std::string AdmissionKey(const CapacityRequest& request) {
  const CapacityRequestSpec& spec = request.spec;
  std::string key;
  if (request.reason_code == kReasonPreempting || !request.holds.empty()) {
    AppendField(key, "alone");
    AppendField(key, request.id);
    return key;
  }
  AppendField(key, spec.team);
  AppendField(key, spec.pool);
  AppendField(key, static_cast<int64_t>(spec.workload_class));
  AppendField(key, spec.members);
  if (spec.shape.is_whole()) {
    AppendField(key, "whole");
    AppendField(key, spec.shape.whole_gpus());
  } else if (spec.shape.is_mig()) {
    AppendField(key, "mig");
    AppendField(key, spec.shape.mig().profile);
    AppendField(key, spec.shape.mig().milli);
  } else {
    AppendField(key, "fraction");
    AppendField(key, spec.shape.fraction().gpu_milli);
    AppendField(key, spec.shape.fraction().memory_mib);
  }
  AppendField(key, spec.shape.cpu_milli);
  AppendField(key, spec.shape.memory_mib);
  AppendField(key, static_cast<int64_t>(spec.gpu_models.size()));
  for (const std::string& m : spec.gpu_models) AppendField(key, m);
  AppendField(key, static_cast<int64_t>(spec.topology));
  AppendField(key, spec.priority);
  AppendField(key, spec.preemptible ? 1 : 0);
  AppendField(key, spec.checkpoint_seconds);
  AppendField(key, spec.checkpoint_interval_seconds);
  AppendField(key, spec.guaranteed ? 1 : 0);
  AppendField(key, spec.spot ? 1 : 0);
  AppendField(key, spec.burst_seconds);
  AppendField(key, absl::ToUnixMicros(spec.start_at));
  AppendField(key, absl::ToInt64Microseconds(spec.duration));
  AppendField(key, static_cast<int64_t>(request.approvals.size()));
  for (const std::string& a : request.approvals) AppendField(key, a);
  return key;
}

const CapacityRequest* RequestBook::FindLive(int64_t id) const {
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : &it->second;
}

const IdempotencyEntry* RequestBook::FindIdempotencyKey(const std::string& key) const {
  auto it = keys_.by_key.find(key);
  return it == keys_.by_key.end() ? nullptr : &it->second;
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

int64_t RequestBook::HeadOf(const std::string& pool) const {
  auto it = heads_.find(pool);
  return it == heads_.end() ? 0 : it->second;
}

const std::set<int64_t>& RequestBook::VictimsOf(int64_t preemptor) const {
  return SetOrEmpty(victims_, preemptor);
}

RequestBook RequestBook::CopyOfPool(const std::string& pool) const {
  RequestBook copy;
  copy.next_id_ = next_id_;
  size_t in_pool = 0;
  for (const auto& [id, request] : live_) in_pool += request.spec.pool == pool;
  copy.live_.reserve(in_pool);  // No rehash moves a request while copying.
  for (const auto& [id, request] : live_) {
    if (request.spec.pool == pool) copy.live_.emplace(id, request);
  }
  auto copy_pool = [&pool](const auto& from, auto& to) {
    auto it = from.find(pool);
    if (it != from.end()) to.emplace(it->first, it->second);
  };
  copy_pool(queued_, copy.queued_);
  copy_pool(queue_groups_, copy.queue_groups_);
  copy_pool(waiting_, copy.waiting_);
  copy_pool(holding_, copy.holding_);
  copy_pool(heads_, copy.heads_);
  for (const auto& timer : timers_) {
    if (copy.live_.contains(timer.second)) copy.timers_.insert(timer);
  }
  for (const auto& [preemptor, victims] : victims_) {
    if (copy.live_.contains(preemptor)) copy.victims_.emplace(preemptor, victims);
  }
  return copy;
}

void RequestBook::Put(const CapacityRequest& request) {
  const int64_t id = request.id;
  auto old = live_.find(id);
  if (old != live_.end()) Unindex(old->second);
  IdempotencyEntry& entry = keys_.by_key[request.spec.idempotency_key];
  const bool ended_before = entry.ended && entry.request_id == id;
  entry = IdempotencyEntry{id, request.body_hash, IsFinal(request.state)};
  if (IsFinal(request.state)) {
    if (!ended_before) {
      keys_.ended.push_back({request.updated_at, id, request.spec.idempotency_key});
      ++keys_.put;
    }
    if (old != live_.end()) live_.erase(old);
    return;
  }
  Index(request);
  live_[id] = request;
}

void RequestBook::ForgetKeysEndedBefore(absl::Time cutoff) {
  while (!keys_.ended.empty() && keys_.ended.front().at < cutoff) ForgetFirstEndedKey();
}

void RequestBook::NoteKeysStored(uint64_t keys_put, absl::Time stored_at) {
  keys_.notes_stores = true;
  keys_.stored.push_back({keys_put, stored_at});
}

void RequestBook::ForgetKeysStoredBefore(absl::Time cutoff) {
  while (!keys_.stored.empty() && keys_.stored.front().at < cutoff) {
    ForgetFirstEndedKeys(keys_.stored.front().keys_put);
    keys_.stored.pop_front();
  }
}

void RequestBook::ForgetFirstEndedKeys(uint64_t count) {
  while (!keys_.ended.empty() && keys_.forgotten < count) ForgetFirstEndedKey();
}

void RequestBook::ForgetFirstEndedKey() {
  const Keys::Ended& ended = keys_.ended.front();
  auto it = keys_.by_key.find(ended.key);
  if (it != keys_.by_key.end() && it->second.ended && it->second.request_id == ended.request_id) {
    keys_.by_key.erase(it);
  }
  keys_.ended.pop_front();
  ++keys_.forgotten;
}

void RequestBook::ClearHolds(int64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Unindex(it->second);  // Its admission key depends on its holds.
  it->second.holds.clear();
  it->second.planned_start = absl::InfinitePast();
  Index(it->second);
}

void RequestBook::Index(const CapacityRequest& request) {
  const int64_t id = request.id;
  const std::string& pool = request.spec.pool;
  if (HoldsCapacity(request.state)) holding_[pool].insert(id);
  if (request.state == RequestState::kQueued) {
    queued_[pool].insert(id);
    queue_groups_[pool][AdmissionKey(request)].insert(id);
    if (request.reason_code == kReasonPreempting) waiting_[pool].insert(id);
    if (request.backfill_head()) heads_[pool] = id;
  }
  if (request.state == RequestState::kPreempting) {
    timers_.insert({PreemptingUntil(request), id});
    victims_[request.preempted_by].insert(id);
  }
  if (request.state == RequestState::kAdmitted && request.enforce_at != absl::InfiniteFuture()) {
    timers_.insert({request.enforce_at, id});
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
    if (auto head = heads_.find(pool); head != heads_.end() && head->second == old.id) {
      heads_.erase(head);
    }
  }
  if (old.state == RequestState::kPreempting) {
    timers_.erase({PreemptingUntil(old), old.id});
    auto it = victims_.find(old.preempted_by);
    if (it != victims_.end() && it->second.erase(old.id) > 0 && it->second.empty()) {
      victims_.erase(it);
    }
  }
  if (old.state == RequestState::kAdmitted && old.enforce_at != absl::InfiniteFuture()) {
    timers_.erase({old.enforce_at, old.id});
  }
  if (old.state == RequestState::kReserved) timers_.erase({old.spec.start_at, old.id});
  if (old.state == RequestState::kPendingApproval) {
    timers_.erase({old.approval_deadline, old.id});
  }
}

}  // namespace arbiter::core
