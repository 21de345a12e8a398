#include "app/ended_keys.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

#include "app/thread_name.h"

namespace arbiter::app {

EndedKeyLookup::EndedKeyLookup(store::RequestReads* store, Clock* clock,
                               EndedKeyLookupOptions options)
    : store_(store), clock_(clock), options_(std::move(options)) {
  if (options_.enabled) thread_ = StartNamedThread("arb-ended-keys", [this] { Run(); });
}

EndedKeyLookup::~EndedKeyLookup() { Stop(); }

void EndedKeyLookup::Find(std::string key, Done done) {
  if (!options_.enabled) {
    done(Result{std::nullopt, clock_->TimeNow()});
    return;
  }
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      refused = absl::UnavailableError("the server is stopping; retry");
    } else if (waiting_.size() >= options_.max_waiting) {
      refused = absl::ResourceExhaustedError("too many idempotency key lookups waiting; retry");
    } else {
      waiting_.push_back(Waiting{std::move(key), std::move(done)});
      return;
    }
  }
  done(std::move(refused));
}

void EndedKeyLookup::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int64_t EndedKeyLookup::queries() const {
  absl::MutexLock lock(&mu_);
  return queries_;
}

int64_t EndedKeyLookup::lookups() const {
  absl::MutexLock lock(&mu_);
  return lookups_;
}

void EndedKeyLookup::Run() {
  for (;;) {
    std::vector<Waiting> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !waiting_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (waiting_.empty()) return;  // Stopping, and everything answered.
      if (waiting_.size() <= options_.max_batch) {
        batch.swap(waiting_);
      } else {
        batch.assign(std::make_move_iterator(waiting_.begin()),
                     std::make_move_iterator(waiting_.begin() + options_.max_batch));
        waiting_.erase(waiting_.begin(), waiting_.begin() + options_.max_batch);
      }
      queries_++;
      lookups_ += static_cast<int64_t>(batch.size());
    }
    Answer(std::move(batch));
  }
}

void EndedKeyLookup::Answer(std::vector<Waiting> batch) {
  // Started before the query: whatever committed earlier, it sees.
  const absl::Time checked_at = clock_->TimeNow();
  std::vector<std::string> keys;
  keys.reserve(batch.size());
  for (const Waiting& w : batch) keys.push_back(w.key);
  absl::StatusOr<std::vector<store::EndedKey>> found =
      store_->FindEndedKeys(keys, checked_at - options_.window);
  if (!found.ok()) {
    for (Waiting& w : batch) w.done(found.status());
    return;
  }
  absl::flat_hash_map<std::string, store::EndedKey> by_key;
  for (store::EndedKey& k : *found) {
    std::string key = k.key;
    by_key.emplace(std::move(key), std::move(k));
  }
  for (Waiting& w : batch) {
    Result result{std::nullopt, checked_at};
    if (auto it = by_key.find(w.key); it != by_key.end()) result.found = it->second;
    w.done(std::move(result));
  }
}

}  // namespace arbiter::app
