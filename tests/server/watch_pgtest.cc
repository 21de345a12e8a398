// WatchAllocations through real gRPC on a real PostgreSQL: list, then watch
// from the list's revision; a watcher cancelled at random points and resumed
// from its last revision, across a failover from one arbiterd to another,
// receives every event exactly once, in order; a too-old revision is
// OUT_OF_RANGE; an idle stream gets bookmarks; a follower refuses to serve;
// bad filters name their field.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/api_seed.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;

// (revision, request id, type) of one event.
struct Seen {
  int64_t revision = 0;
  int64_t request_id = 0;
  int type = 0;
  bool operator==(const Seen& o) const {
    return revision == o.revision && request_id == o.request_id && type == o.type;
  }
};

std::ostream& operator<<(std::ostream& os, const Seen& s) {
  return os << "{" << s.revision << " request/" << s.request_id << " type " << s.type << "}";
}

uint32_t Seed() {
  uint32_t seed = std::random_device()();
  if (const char* s = std::getenv("ARBITER_TEST_SEED")) seed = std::strtoul(s, nullptr, 10);
  std::cout << "seed: " << seed << " (rerun with ARBITER_TEST_SEED=" << seed << ")" << std::endl;
  return seed;
}

// One arbiterd replica in process, with its stubs.
struct Replica {
  std::unique_ptr<ArbiterServer> server;
  std::unique_ptr<v1::InventoryService::Stub> inventory;
  std::unique_ptr<v1::GovernanceService::Stub> governance;
  std::unique_ptr<v1::AllocationService::Stub> allocation;
};

class WatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = ::arbiter::testing::TestDatabase::Create();
    ASSERT_THAT(db, IsOk());
    db_ = std::move(*db);
  }

  Replica Start(const std::string& name, app::WatchOptions watch = {}) {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.insecure_loopback = true;
    options.dsn = db_->dsn();
    options.telemetry.rollup_every = absl::ZeroDuration();
    options.replica_name = name;
    // Long enough that a loaded machine does not fail over by itself; the
    // test fails over by stopping the leader, which gives the lease up.
    options.lease_ttl = absl::Seconds(5);
    options.watch = watch;
    Replica r;
    auto server = ArbiterServer::Start(options, &clock_);
    EXPECT_THAT(server, IsOk());
    if (!server.ok()) return r;
    r.server = std::move(*server);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", r.server->port()),
                                       grpc::InsecureChannelCredentials());
    r.inventory = v1::InventoryService::NewStub(channel);
    r.governance = v1::GovernanceService::NewStub(channel);
    r.allocation = v1::AllocationService::NewStub(channel);
    return r;
  }

  static int64_t Admit(Replica& r, const std::string& key) {
    v1::RequestCapacityRequest req;
    req.set_idempotency_key(key);
    req.set_team("inference");
    req.set_pool("serving");
    req.set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
    req.set_members(1);
    req.mutable_shape()->mutable_fraction()->set_gpu_milli(250);
    req.mutable_shape()->mutable_fraction()->set_memory_mib(1024);
    v1::RequestCapacityResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status s = r.allocation->RequestCapacity(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.request().id();
  }
  static void Release(Replica& r, int64_t id) {
    v1::ReleaseAllocationRequest req;
    req.set_id(id);
    v1::ReleaseAllocationResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status s = r.allocation->ReleaseAllocation(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  // Every request event in the ledger after `after`, in order.
  std::vector<Seen> Truth(int64_t after) {
    auto rows = db_->QueryValue(absl::StrCat(
        "SELECT coalesce(string_agg(seq || ',' || subject || ',' || action, ';' ORDER BY seq),"
        " '') FROM ledger WHERE action LIKE 'request.%' AND seq > ",
        after));
    EXPECT_THAT(rows, IsOk());
    std::vector<Seen> out;
    for (absl::string_view row : absl::StrSplit(rows.value_or(""), ';', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(row, ',');
      Seen s;
      EXPECT_TRUE(absl::SimpleAtoi(f[0], &s.revision));
      EXPECT_TRUE(absl::SimpleAtoi(absl::string_view(f[1]).substr(8), &s.request_id));
      static const std::map<std::string, int> kTypes = {
          {"request.admitted", v1::ALLOCATION_EVENT_TYPE_ADMITTED},
          {"request.released", v1::ALLOCATION_EVENT_TYPE_RELEASED},
          {"request.queued", v1::ALLOCATION_EVENT_TYPE_QUEUED},
          // Releasing a request that is still queued cancels it.
          {"request.cancelled", v1::ALLOCATION_EVENT_TYPE_CANCELLED}};
      s.type = kTypes.count(f[2]) ? kTypes.at(f[2]) : -1;
      out.push_back(s);
    }
    return out;
  }

  testing::SimulatedClock clock_;
  std::unique_ptr<::arbiter::testing::TestDatabase> db_;
};

// Reads one batched stream's events into `out` until it holds `want`, or
// the stream ends; returns the stream's status if it ended.
std::optional<grpc::Status> ReadBatched(grpc::ClientReader<v1::WatchAllocationsResponse>& reader,
                                        size_t want, std::vector<Seen>& out) {
  v1::WatchAllocationsResponse msg;
  while (out.size() < want) {
    if (!reader.Read(&msg)) return reader.Finish();
    for (const v1::AllocationEvent& e : msg.events()) {
      out.push_back({e.revision(), e.request().id(), e.type()});
    }
  }
  return std::nullopt;
}

TEST_F(WatchTest, AWatcherCancelledAtRandomAndResumedAcrossAFailoverSeesEveryEventOnce) {
  std::mt19937 rng(Seed());
  Replica a = Start("a");
  ASSERT_THAT(testing::SeedOrganisation(*a.inventory, *a.governance, testing::SeedSpec()), IsOk());
  Replica b = Start("b");
  {
    // A follower does not serve watches: it names the leader instead.
    grpc::ClientContext ctx;
    auto reader = b.allocation->WatchAllocations(&ctx, v1::WatchAllocationsRequest());
    v1::WatchAllocationsResponse msg;
    EXPECT_FALSE(reader->Read(&msg));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  }

  // List, then watch from the list's revision.
  v1::ListRequestsResponse page;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(a.allocation->ListRequests(&ctx, v1::ListRequestsRequest(), &page).ok());
  }
  const int64_t start = page.revision();
  ASSERT_GT(start, 0);
  std::vector<Seen> received;
  std::vector<int64_t> live;
  Replica* leader = &a;
  for (int round = 0; round < 8; ++round) {
    if (round == 4) {
      // Failover: the leader goes; the follower takes over within a lease.
      a.server.reset();
      leader = &b;
      for (int i = 0; i < 400; ++i) {
        if (b.server->app().arbiter().stats().leading) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      ASSERT_TRUE(b.server->app().arbiter().stats().leading);
    }
    const int64_t last = received.empty() ? start : received.back().revision;
    grpc::ClientContext ctx;
    v1::WatchAllocationsRequest watch;
    watch.set_start_revision(last);
    watch.set_batched(true);
    auto reader = leader->allocation->WatchAllocations(&ctx, watch);
    for (int i = 0; i < 4; ++i) {
      if (!live.empty() && rng() % 2 == 0) {
        Release(*leader, live.back());
        live.pop_back();
      } else {
        live.push_back(Admit(*leader, absl::StrCat("k", round, "-", i)));
      }
    }
    // Cancelled after a random number of the events there are by now.
    const size_t kill_after = rng() % (Truth(last).size() + 1);
    std::vector<Seen> got;
    // A stream may also end UNAVAILABLE (the leader reloaded): resuming from
    // there is the same as from a cancellation.
    std::optional<grpc::Status> ended = ReadBatched(*reader, kill_after, got);
    if (ended.has_value()) {
      EXPECT_EQ(ended->error_code(), grpc::StatusCode::UNAVAILABLE) << ended->error_message();
    }
    ctx.TryCancel();
    received.insert(received.end(), got.begin(), got.end());
  }
  // The last resumption reads to the end.
  const int64_t last = received.empty() ? start : received.back().revision;
  grpc::ClientContext ctx;
  v1::WatchAllocationsRequest watch;
  watch.set_start_revision(last);
  watch.set_batched(true);
  auto reader = b.allocation->WatchAllocations(&ctx, watch);
  std::vector<Seen> got;
  EXPECT_FALSE(ReadBatched(*reader, Truth(last).size(), got).has_value());
  ctx.TryCancel();
  received.insert(received.end(), got.begin(), got.end());
  EXPECT_THAT(received, ::testing::ElementsAreArray(Truth(start)));
}

TEST_F(WatchTest, ATooOldRevisionIsOutOfRangeAndBadFiltersNameTheirField) {
  app::WatchOptions watch;
  watch.replay_limit = 2;
  Replica a = Start("a", watch);
  ASSERT_THAT(testing::SeedOrganisation(*a.inventory, *a.governance, testing::SeedSpec()), IsOk());
  // Wait until the hub has published the seed (its head moves past 3).
  for (int i = 0; i < 200 && a.server->app().hub().stats().head < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto refused = [&](const v1::WatchAllocationsRequest& req) {
    grpc::ClientContext ctx;
    auto reader = a.allocation->WatchAllocations(&ctx, req);
    v1::WatchAllocationsResponse msg;
    EXPECT_FALSE(reader->Read(&msg));
    return reader->Finish();
  };
  v1::WatchAllocationsRequest old;
  old.set_start_revision(1);
  grpc::Status s = refused(old);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(s.error_message().rfind("start_revision:", 0), 0u) << s.error_message();

  v1::WatchAllocationsRequest bad;
  bad.set_node("n1");
  s = refused(bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "node: requires cluster");
  bad.Clear();
  bad.add_types(v1::ALLOCATION_EVENT_TYPE_UNSPECIFIED);
  s = refused(bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("types[0]:", 0), 0u) << s.error_message();
  bad.Clear();
  bad.set_start_revision(-1);
  s = refused(bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("start_revision:", 0), 0u) << s.error_message();
}

TEST_F(WatchTest, AnIdleStreamGetsABookmarkWithTheCurrentRevision) {
  app::WatchOptions watch;
  watch.bookmark_every = absl::Seconds(1);
  Replica a = Start("a", watch);
  ASSERT_THAT(testing::SeedOrganisation(*a.inventory, *a.governance, testing::SeedSpec()), IsOk());
  v1::ListRequestsResponse page;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(a.allocation->ListRequests(&ctx, v1::ListRequestsRequest(), &page).ok());
  }
  grpc::ClientContext ctx;
  v1::WatchAllocationsRequest req;
  req.set_start_revision(page.revision());
  auto reader = a.allocation->WatchAllocations(&ctx, req);
  std::atomic<bool> done{false};
  std::thread ticker([&] {
    while (!done) {
      clock_.Advance(absl::Milliseconds(300));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  v1::WatchAllocationsResponse msg;
  const bool read = reader->Read(&msg);
  done = true;
  ticker.join();
  ASSERT_TRUE(read);
  EXPECT_TRUE(msg.bookmark());
  EXPECT_EQ(msg.revision(), page.revision());
  EXPECT_EQ(msg.type(), v1::ALLOCATION_EVENT_TYPE_UNSPECIFIED);
  ctx.TryCancel();
}

// The hub may hand a stream a bookmark or an event between the stream's
// cancellation and its done tag: when the server stops in between, the
// stream must not start a write on a watch queue that is shutting down
// (gRPC aborts the process). Streams cancelled just before the server stops,
// with bookmarks due every tick, make that likely.
TEST_F(WatchTest, StoppingTheServerAsItsStreamsAreCancelledEndsThemCleanly) {
  app::WatchOptions watch;
  watch.bookmark_every = absl::Milliseconds(1);
  for (int round = 0; round < 40; ++round) {
    Replica a = Start(absl::StrCat("a", round), watch);
    ASSERT_NE(a.server, nullptr);
    std::atomic<bool> done{false};
    std::thread ticker([&] {
      while (!done) {
        clock_.Advance(absl::Milliseconds(5));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    // Until the replica leads, streams are refused.
    for (bool serving = false; !serving;) {
      grpc::ClientContext probe;
      auto reader = a.allocation->WatchAllocations(&probe, v1::WatchAllocationsRequest());
      v1::WatchAllocationsResponse msg;
      serving = reader->Read(&msg);
      probe.TryCancel();
      (void)reader->Finish();
      if (!serving) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    std::atomic<int> bookmarks{0};
    std::vector<std::thread> readers;
    for (int i = 0; i < 32; ++i) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      readers.emplace_back([&, ctx = contexts.back().get()] {
        auto reader = a.allocation->WatchAllocations(ctx, v1::WatchAllocationsRequest());
        v1::WatchAllocationsResponse msg;
        while (reader->Read(&msg)) bookmarks += msg.bookmark() ? 1 : 0;
        (void)reader->Finish();
      });
    }
    for (int i = 0; i < 2000 && bookmarks < 64; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_GE(bookmarks, 64);
    for (auto& ctx : contexts) ctx->TryCancel();
    a.server.reset();  // At once: the cancelled streams' done tags are still on their way.
    for (std::thread& t : readers) t.join();
    done = true;
    ticker.join();
  }
}

}  // namespace
}  // namespace arbiter::server
