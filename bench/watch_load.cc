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
// early (with their codes), events, bookmarks, messages and bytes received,
// and events whose revision went backwards (none, for a correct server).
// Plaintext gRPC: arbiterd runs with --insecure-loopback.
//
// By default a message is skimmed, not decoded: its events are counted and
// their revisions read from the wire (the top-level fields of each
// AllocationEvent), so that on a 2-core machine the clients take as little
// CPU as they can from arbiterd. --decode parses each message into
// WatchAllocationsResponse as a real watcher would.
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
#include <grpcpp/generic/generic_stub.h>
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
  std::atomic<int64_t> bytes{0};
  std::atomic<int64_t> backwards{0};  // Events whose revision went backwards.
  std::atomic<int64_t> ended{0};
  std::mutex mu;
  std::map<int, int64_t> codes;
};

// A varint at `*p` (before `end`); false when the bytes end first.
bool ReadVarint(const uint8_t** p, const uint8_t* end, uint64_t* out) {
  *out = 0;
  for (int shift = 0; *p < end && shift < 64; shift += 7) {
    const uint8_t b = *(*p)++;
    *out |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// What one message holds, read from its top-level fields: a bookmark, or
// events (one at the top level, or `events` entries) with their revisions.
struct Skim {
  bool bookmark = false;
  int64_t events = 0;
  std::vector<int64_t> revisions;
};

// Calls `field(number, wire_type, value, body)` for each field of the
// message in [p, end): `value` for varints, `body` for length-delimited
// fields. Returns false for bytes that are not a message.
template <typename Fn>
bool ForEachField(const uint8_t* p, const uint8_t* end, Fn field) {
  while (p < end) {
    uint64_t key = 0;
    uint64_t value = 0;
    if (!ReadVarint(&p, end, &key)) return false;
    const int number = static_cast<int>(key >> 3);
    switch (key & 7) {
      case 0:
        if (!ReadVarint(&p, end, &value)) return false;
        field(number, 0, value, p, p);
        break;
      case 2:
        if (!ReadVarint(&p, end, &value) || value > static_cast<uint64_t>(end - p)) return false;
        field(number, 2, 0, p, p + value);
        p += value;
        break;
      case 1:
        if (end - p < 8) return false;
        p += 8;
        break;
      case 5:
        if (end - p < 4) return false;
        p += 4;
        break;
      default:
        return false;
    }
  }
  return true;
}

// WatchAllocationsResponse: revision = 4, events = 5, bookmark = 6, and a
// top-level event's request = 2; AllocationEvent: revision = 4.
bool SkimMessage(const std::string& bytes, Skim* out) {
  const auto* begin = reinterpret_cast<const uint8_t*>(bytes.data());
  int64_t top_revision = 0;
  bool top_event = false;
  const bool ok = ForEachField(
      begin, begin + bytes.size(),
      [&](int number, int wire, uint64_t value, const uint8_t* body, const uint8_t* body_end) {
        if (number == 6 && wire == 0) out->bookmark = value != 0;
        if (number == 4 && wire == 0) top_revision = static_cast<int64_t>(value);
        if (number == 2 && wire == 2) top_event = true;
        if (number == 5 && wire == 2) {
          int64_t revision = 0;
          ForEachField(body, body_end,
                       [&](int n, int w, uint64_t v, const uint8_t*, const uint8_t*) {
                         if (n == 4 && w == 0) revision = static_cast<int64_t>(v);
                       });
          out->events++;
          out->revisions.push_back(revision);
        }
      });
  if (top_event && !out->bookmark) {
    out->events++;
    out->revisions.push_back(top_revision);
  }
  return ok;
}

// One stream, called as a bidi stream of bytes (the wire is the same for a
// server stream): one request, then reads until cancelled. Deleted by its
// owner after OnDone.
class Watcher final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  Watcher(grpc::GenericStub* stub, const v1::WatchAllocationsRequest& req, bool decode,
          Totals* totals)
      : decode_(decode), totals_(totals) {
    const std::string bytes = req.SerializeAsString();
    grpc::Slice slice(bytes.data(), bytes.size());
    request_ = grpc::ByteBuffer(&slice, 1);
    stub->PrepareBidiStreamingCall(&ctx_, "/arbiter.v1.AllocationService/WatchAllocations",
                                   grpc::StubOptions(), this);
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&read_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows.
    totals_->messages++;
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (read_.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices)
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    totals_->bytes += static_cast<int64_t>(bytes.size());
    Skim skim;
    if (decode_) {
      v1::WatchAllocationsResponse msg;
      if (msg.ParseFromString(bytes)) {
        skim.bookmark = msg.bookmark();
        for (const v1::AllocationEvent& e : msg.events()) skim.revisions.push_back(e.revision());
        if (msg.has_request()) skim.revisions.push_back(msg.revision());
        skim.events = static_cast<int64_t>(skim.revisions.size());
      }
    } else {
      SkimMessage(bytes, &skim);
    }
    if (skim.bookmark) totals_->bookmarks++;
    totals_->events += skim.events;
    // An explanation carries the revision of the change before it: equal
    // to the last one is in order; lower is not.
    for (int64_t revision : skim.revisions) {
      if (revision < last_revision_) totals_->backwards++;
      last_revision_ = std::max(last_revision_, revision);
    }
    StartRead(&read_);
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
  const bool decode_;
  grpc::ClientContext ctx_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer read_;
  int64_t last_revision_ = 0;
  Totals* const totals_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> done_{false};
};

int Run(const std::string& target, int streams, const std::string& mode, int nodes, double seconds,
        int channels, bool decode) {
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("arbiter.watch.channel", c);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stubs.push_back(std::make_unique<grpc::GenericStub>(
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
    watchers.push_back(std::make_unique<Watcher>(stubs[i % channels].get(), req, decode, &totals));
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
            << ",\"messages\":" << totals.messages.load() << ",\"bytes\":" << totals.bytes.load()
            << ",\"revisions_backwards\":" << totals.backwards.load() << "}" << std::endl;
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
  bool decode = false;
  app.add_option("--target", target)->capture_default_str();
  app.add_option("--streams", streams)->capture_default_str();
  app.add_option("--mode", mode, "node (one stream per node) or all (unfiltered)")
      ->check(CLI::IsMember({"node", "all"}))
      ->capture_default_str();
  app.add_option("--nodes", nodes, "nodes registered by arbiter-load setup")->capture_default_str();
  app.add_option("--seconds", seconds)->capture_default_str();
  app.add_option("--channels", channels)->capture_default_str();
  app.add_flag("--decode", decode, "parse each message, as a real watcher would");
  CLI11_PARSE(app, argc, argv);
  return arbiter::bench::Run(target, streams, mode, nodes, seconds, channels, decode);
}
