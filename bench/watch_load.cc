// arbiter-watch: holds N WatchAllocations streams open against a running
// arbiterd and counts what arrives, so that bench/watch-fanout can measure
// arbiterd with many watchers while arbiter-load drives decisions. Streams
// are batched (`events` per message) and asynchronous (the callback API):
// one process holds 10,000 of them on a few threads, and its CPU is its own,
// apart from arbiterd's.
//
//   arbiter-watch --target 127.0.0.1:7443 --streams 10000 --mode node --seconds 40
//
// --mode node: stream i watches node "n<i mod nodes>" of cluster "load"
// (the nodes arbiter-load setup registers: `--nodes` of them), one agent
// per node; --mode all: unfiltered streams. Prints, at the end, one JSON
// line (after --seconds, or at SIGTERM): streams opened, streams ended
// early (with their codes), events and bookmarks received. Plaintext gRPC: arbiterd runs with
// --insecure-loopback.
#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include <grpcpp/grpcpp.h>

#include "arbiter/v1/allocation.grpc.pb.h"

namespace arbiter::bench {
namespace {

// Set by SIGTERM or SIGINT: stop, cancel the streams and print the totals.
std::atomic<bool> g_stop{false};

struct Totals {
  std::atomic<int64_t> events{0};
  std::atomic<int64_t> bookmarks{0};
  std::atomic<int64_t> messages{0};
  std::atomic<int64_t> ended{0};
  std::mutex mu;
  std::map<int, int64_t> codes;
};

// One stream; reads until cancelled. Deleted by its owner after OnDone.
class Watcher final : public grpc::ClientReadReactor<v1::WatchAllocationsResponse> {
 public:
  Watcher(v1::AllocationService::Stub* stub, const v1::WatchAllocationsRequest& req, Totals* totals)
      : totals_(totals) {
    stub->async()->WatchAllocations(&ctx_, &req, this);
    StartRead(&msg_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows.
    totals_->messages++;
    if (msg_.bookmark()) {
      totals_->bookmarks++;
    } else if (msg_.events_size() > 0) {
      totals_->events += msg_.events_size();
    } else {
      totals_->events++;
    }
    StartRead(&msg_);
  }
  void OnDone(const grpc::Status& s) override {
    if (!cancelled_) {
      totals_->ended++;
      std::lock_guard<std::mutex> lock(totals_->mu);
      totals_->codes[s.error_code()]++;
    }
    done_ = true;
  }
  void Cancel() {
    cancelled_ = true;
    ctx_.TryCancel();
  }
  bool done() const { return done_; }

 private:
  grpc::ClientContext ctx_;
  v1::WatchAllocationsResponse msg_;
  Totals* const totals_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> done_{false};
};

int Run(const std::string& target, int streams, const std::string& mode, int nodes, double seconds,
        int channels) {
  std::vector<std::unique_ptr<v1::AllocationService::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("arbiter.watch.channel", c);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stubs.push_back(v1::AllocationService::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  Totals totals;
  std::vector<std::unique_ptr<Watcher>> watchers;
  watchers.reserve(streams);
  for (int i = 0; i < streams; ++i) {
    v1::WatchAllocationsRequest req;
    req.set_batched(true);
    if (mode == "node") {
      req.set_cluster("load");
      req.set_node(absl::StrCat("n", i % nodes));
    }
    watchers.push_back(std::make_unique<Watcher>(stubs[i % channels].get(), req, &totals));
  }
  std::cerr << "arbiter-watch: " << streams << " streams started" << std::endl;
  std::signal(SIGTERM, [](int) { g_stop = true; });
  std::signal(SIGINT, [](int) { g_stop = true; });
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (!g_stop && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& w : watchers) w->Cancel();
  for (auto& w : watchers) {
    while (!w->done()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string codes;
  for (const auto& [code, n] : totals.codes)
    absl::StrAppend(&codes, codes.empty() ? "" : ",", "\"", code, "\":", n);
  std::cout << "{\"streams\":" << streams << ",\"ended_early\":" << totals.ended.load()
            << ",\"end_codes\":{" << codes << "},\"events\":" << totals.events.load()
            << ",\"bookmarks\":" << totals.bookmarks.load()
            << ",\"messages\":" << totals.messages.load() << "}" << std::endl;
  return 0;
}

}  // namespace
}  // namespace arbiter::bench

int main(int argc, char** argv) {
  CLI::App app("arbiter-watch: many WatchAllocations streams against arbiterd");
  std::string target = "127.0.0.1:7443";
  int streams = 100;
  std::string mode = "node";
  int nodes = 2500;
  double seconds = 30;
  int channels = 16;
  app.add_option("--target", target)->capture_default_str();
  app.add_option("--streams", streams)->capture_default_str();
  app.add_option("--mode", mode, "node (one stream per node) or all (unfiltered)")
      ->check(CLI::IsMember({"node", "all"}))
      ->capture_default_str();
  app.add_option("--nodes", nodes, "nodes registered by arbiter-load setup")->capture_default_str();
  app.add_option("--seconds", seconds)->capture_default_str();
  app.add_option("--channels", channels)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return arbiter::bench::Run(target, streams, mode, nodes, seconds, channels);
}
