#include "app/leader_election.h"

#include <utility>

#include <spdlog/spdlog.h>

#include "app/thread_name.h"

namespace arbiter::app {

std::unique_ptr<LeaderElection> LeaderElection::Start(std::unique_ptr<store::LeaderLease> lease,
                                                      Arbiter* arbiter, absl::Duration poll) {
  auto election =
      std::unique_ptr<LeaderElection>(new LeaderElection(std::move(lease), arbiter, poll));
  election->Step();
  election->thread_ = StartNamedThread("arb-election", [e = election.get()] { e->Run(); });
  return election;
}

LeaderElection::LeaderElection(std::unique_ptr<store::LeaderLease> lease, Arbiter* arbiter,
                               absl::Duration poll)
    : lease_(std::move(lease)), arbiter_(arbiter), poll_(poll) {}

LeaderElection::~LeaderElection() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (epoch_ != 0) {
    arbiter_->Follow("");
    lease_->Release(epoch_);
    spdlog::info("gave up the leader lease of epoch {}", epoch_);
  }
}

void LeaderElection::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), poll_)) return;
    }
    Step();
  }
}

void LeaderElection::Step() {
  if (epoch_ != 0) {
    const absl::Status renewed = lease_->Renew(epoch_);
    if (renewed.ok()) return;
    spdlog::warn("lost the leader lease of epoch {}: {}", epoch_, renewed.ToString());
    epoch_ = 0;
    arbiter_->Follow("");
  }
  absl::StatusOr<int64_t> epoch = lease_->TryAcquire();
  if (!epoch.ok()) {
    spdlog::warn("leader election: {}", epoch.status().ToString());
    arbiter_->Follow("");
    return;
  }
  if (*epoch > 0) {
    epoch_ = *epoch;
    spdlog::info("took the leader lease: epoch {}", epoch_);
    arbiter_->Lead(epoch_);
    return;
  }
  absl::StatusOr<store::LeaseInfo> leader = lease_->Read();
  arbiter_->Follow(leader.ok() && !leader->expired ? leader->address : std::string());
}

}  // namespace arbiter::app
