#include "app/watch_hub.h"

namespace arbiter::app {

int64_t WatchHub::Subscribe(WatchSubscriber* subscriber) {
  absl::MutexLock lock(&mu_);
  const int64_t id = next_id_++;
  subscribers_[id] = subscriber;
  return id;
}

void WatchHub::Unsubscribe(int64_t id) {
  absl::MutexLock lock(&mu_);
  subscribers_.erase(id);
}

void WatchHub::Publish(const std::vector<AllocationEvent>& events) {
  absl::MutexLock lock(&mu_);
  for (const AllocationEvent& event : events) {
    for (auto& [id, subscriber] : subscribers_) subscriber->Deliver(event);
  }
}

}  // namespace arbiter::app
