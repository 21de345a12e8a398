#include "clients/common/watch.h"

#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace arbiter::clients {

void FollowAllocations(LeaderChannel& leader, v1::WatchAllocationsRequest request,
                       const std::atomic<bool>& stop, const WatchCallbacks& callbacks) {
  auto log = [&](const std::string& line) {
    if (callbacks.log) callbacks.log(line);
  };
  int64_t revision = request.start_revision();
  while (!stop.load()) {
    if (callbacks.before_open && !callbacks.before_open(revision)) {
      absl::SleepFor(absl::Seconds(1));
      continue;
    }
    auto stub = v1::AllocationService::NewStub(leader.Get());
    grpc::ClientContext ctx;
    request.set_start_revision(revision);
    std::atomic<bool> done{false};
    // A blocked Read ends only when the call is cancelled.
    std::thread canceller([&] {
      while (!stop.load() && !done.load()) absl::SleepFor(absl::Milliseconds(200));
      ctx.TryCancel();
    });
    auto reader = stub->WatchAllocations(&ctx, request);
    v1::WatchAllocationsResponse event;
    while (reader->Read(&event)) {
      if (event.revision() > 0) revision = event.revision();
      if (event.has_request() && callbacks.on_event) callbacks.on_event(event);
    }
    const grpc::Status status = reader->Finish();
    done.store(true);
    canceller.join();
    if (stop.load()) break;
    if (status.error_code() == grpc::StatusCode::OUT_OF_RANGE) revision = 0;
    if (leader.Follow(status)) {
      log("arbiterd watch: following the leader at " + leader.address());
      continue;
    }
    if (!status.ok()) log(absl::StrCat("arbiterd watch: ", status.error_message()));
    absl::SleepFor(absl::Seconds(1));
  }
}

}  // namespace arbiter::clients
