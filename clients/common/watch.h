// Following arbiterd's allocation events from a long-running client
// (arbiter-kube, arbiter-slurm): WatchAllocations on the leader, opened
// again whenever the stream ends, from the last revision seen.
//
// Thread-compatible: one loop per thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "clients/common/channel.h"

namespace arbiter::clients {

struct WatchCallbacks {
  // Each event that carries a request (bookmarks only move the revision).
  std::function<void(const v1::WatchAllocationsResponse&)> on_event;
  // Before each (re)open, with the revision to watch from (0: from now).
  // May list and set it (list, then watch from the list's revision);
  // returning false waits a second and tries again. Optional.
  std::function<bool(int64_t& revision)> before_open;
  // A line about the stream (ended, following the leader). Optional.
  std::function<void(const std::string&)> log;
};

// Watches with `request` (its start_revision is overwritten) until `stop`.
// The stream is opened again after it ends: at once at the leader a
// follower names, otherwise a second later; from the last revision seen,
// or from 0 (before_open lists again) when that revision is older than the
// server keeps (OUT_OF_RANGE).
void FollowAllocations(LeaderChannel& leader, v1::WatchAllocationsRequest request,
                       const std::atomic<bool>& stop, const WatchCallbacks& callbacks);

}  // namespace arbiter::clients
