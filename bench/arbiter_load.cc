// arbiter-load: drives a running arbiterd with N concurrent clients over K
// gRPC channels, a 50/50 mix of RequestCapacity (random shapes: whole GPUs,
// fractions, MIG instances) and ReleaseAllocation of the client's own
// requests, every call under a deadline and every response checked against
// what was asked. Prints decisions/s, latency percentiles and errors, and
// writes them as JSON with --json. Clients are asynchronous: `--threads`
// threads (default 2) drive them all.
//
//   arbiter-load setup --target 127.0.0.1:7443 --gpus 10000
//   arbiter-load run --target 127.0.0.1:7443 --clients 64 --seconds 30 [--hot] [--json F]
//
// `setup` registers two inventories of `--gpus` 8-GPU H100 nodes each: one
// split over `--pools` batch pools, and one in the single pool "pool-hot";
// and `--teams` teams with a quota in every pool that never binds. `run`
// spreads clients over teams and the split pools, or with --hot sends
// everything as team-0 to pool-hot: the same capacity, one team and one pool.
// Plaintext gRPC: arbiterd runs with --insecure-loopback.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include <grpcpp/grpcpp.h>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"

namespace arbiter::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string target = "127.0.0.1:7443";
  int gpus = 10'000;
  int pools = 4;
  int teams = 16;
  int cohorts = 0;  // Teams under this many root teams; 0: each its own.
  int clients = 64;
  int channels = 8;
  int threads = 2;  // Completion-queue threads driving the clients.
  double seconds = 30;
  int deadline_ms = 5'000;
  int max_held = 64;  // Per client; beyond it the client releases.
  bool hot = false;
  int64_t fill = 0;  // Instead of the mix: this many small requests, kept.
  uint64_t seed = 1;
  std::string json;
};

std::shared_ptr<grpc::Channel> Connect(const std::string& target, int n) {
  grpc::ChannelArguments args;
  // A distinct argument per channel keeps each on its own connection.
  args.SetInt("arbiter.load.channel", n);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

void SetDeadline(grpc::ClientContext& ctx, int ms) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(ms));
}

// --- setup

bool Check(const grpc::Status& s, const std::string& what) {
  if (s.ok() || s.error_code() == grpc::StatusCode::ALREADY_EXISTS) return true;
  std::cerr << "arbiter-load: " << what << ": " << s.error_message() << "\n";
  return false;
}

// Calls `call(i)` for i in [0, n) from `threads` threads; false once any
// call returned false (the rest are not made).
bool Parallel(int n, const std::function<bool(int)>& call, int threads = 16) {
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&] {
      for (int i = next++; i < n && !failed; i = next++) {
        if (!call(i)) failed = true;
      }
    });
  }
  for (std::thread& t : workers) t.join();
  return !failed;
}

int Setup(const Options& o) {
  auto channel = Connect(o.target, 0);
  auto inventory = v1::InventoryService::NewStub(channel);
  auto governance = v1::GovernanceService::NewStub(channel);
  {
    v1::CreateClusterRequest req;
    req.mutable_cluster()->set_name("load");
    v1::CreateClusterResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, 30'000);
    if (!Check(inventory->CreateCluster(&ctx, req, &resp), "create cluster")) return 1;
  }
  const int nodes = o.gpus / 8;
  std::vector<std::string> pools;
  for (int p = 0; p < o.pools; ++p) pools.push_back(absl::StrCat("pool-", p));
  pools.push_back("pool-hot");
  for (const std::string& pool : pools) {
    v1::CreatePoolRequest req;
    req.mutable_pool()->set_name(pool);
    req.mutable_pool()->set_latency_class(v1::LATENCY_CLASS_BATCH);
    v1::CreatePoolResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, 30'000);
    if (!Check(inventory->CreatePool(&ctx, req, &resp), "create pool")) return 1;
  }
  // Cohort roots first, then teams, quotas and nodes, each by many callers
  // in parallel (quotas by 64), so that the arbiter commits them in batches.
  for (int c = 0; c < o.cohorts; ++c) {
    v1::CreateTeamRequest req;
    req.mutable_team()->set_name(absl::StrCat("cohort-", c));
    v1::CreateTeamResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, 30'000);
    if (!Check(governance->CreateTeam(&ctx, req, &resp), "create cohort")) return 1;
  }
  const bool teams_made = Parallel(o.teams, [&](int t) {
    v1::CreateTeamRequest req;
    req.mutable_team()->set_name(absl::StrCat("team-", t));
    if (o.cohorts > 0) req.mutable_team()->set_parent(absl::StrCat("cohort-", t % o.cohorts));
    v1::CreateTeamResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, 30'000);
    return Check(governance->CreateTeam(&ctx, req, &resp), "create team");
  });
  if (!teams_made) return 1;
  const Clock::time_point quotas_start = Clock::now();
  const int n_pools = static_cast<int>(pools.size());
  const bool quotas_set = Parallel(
      o.teams * n_pools,
      [&](int i) {
        v1::SetQuotaRequest q;
        q.mutable_quota()->set_team(absl::StrCat("team-", i / n_pools));
        q.mutable_quota()->set_pool(pools[i % n_pools]);
        q.mutable_quota()->set_nominal_milli(int64_t{o.gpus} * 1000);
        v1::SetQuotaResponse qr;
        grpc::ClientContext qc;
        SetDeadline(qc, 30'000);
        return Check(governance->SetQuota(&qc, q, &qr), "set quota");
      },
      /*threads=*/64);
  if (!quotas_set) return 1;
  const double quota_s = std::chrono::duration<double>(Clock::now() - quotas_start).count();
  std::cout << "arbiter-load: set " << o.teams * n_pools << " quotas in "
            << absl::StrFormat("%.1f", quota_s) << " s\n";
  const bool nodes_made = Parallel(2 * nodes, [&](int n) {
    v1::RegisterNodeRequest req;
    v1::Node* node = req.mutable_node();
    node->set_cluster("load");
    node->set_name(absl::StrCat("n", n));
    node->set_pool(n < nodes ? absl::StrCat("pool-", n % o.pools) : "pool-hot");
    node->set_topology_domain(absl::StrCat("nvl-", n / 4));
    node->set_cpu_milli(8 * 16'000);
    node->set_memory_mib(8 * 128 * 1024);
    for (int g = 0; g < 8; ++g) {
      v1::Gpu* gpu = node->add_gpus();
      gpu->set_index(g);
      gpu->set_model("H100-80GB");
    }
    v1::RegisterNodeResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, 30'000);
    return Check(inventory->RegisterNode(&ctx, req, &resp), "register node");
  });
  if (!nodes_made) return 1;
  std::cout << "arbiter-load: set up " << nodes << " nodes (" << nodes * 8 << " GPUs) in "
            << o.pools << " pools and as many in pool-hot, " << o.teams << " teams\n";
  return 0;
}

// --- run

struct Tally {
  std::vector<int64_t> latency_us;
  int64_t requests = 0, releases = 0, admitted = 0, queued = 0, denied = 0;
  std::map<std::string, int64_t> errors;  // What went wrong -> count.
  void Error(const std::string& what) { ++errors[what]; }
};

struct Held {
  int64_t id;
  bool admitted;
};

// The shape of a random request, and what a correct answer must show.
struct Ask {
  v1::RequestCapacityRequest req;
  int64_t milli_per_member = 0;  // 0 for MIG (charged at the SM share).
};

// A one-member request of `team` in `pool`, shape still to set.
Ask NewAsk(const std::string& team, const std::string& pool, const std::string& key) {
  Ask a;
  a.req.set_idempotency_key(key);
  a.req.set_team(team);
  a.req.set_pool(pool);
  a.req.set_members(1);
  return a;
}

// A small request (a fraction of 100 or 200 milli-GPU), for filling up.
Ask SmallAsk(std::mt19937_64& rng, const std::string& team, const std::string& pool,
             const std::string& key) {
  Ask a = NewAsk(team, pool, key);
  v1::RequestCapacityRequest& r = a.req;
  r.set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
  a.milli_per_member = 100 * (1 + static_cast<int64_t>(rng() % 2));
  r.mutable_shape()->mutable_fraction()->set_gpu_milli(a.milli_per_member);
  r.mutable_shape()->mutable_fraction()->set_memory_mib(a.milli_per_member * 64);
  return a;
}

Ask RandomAsk(std::mt19937_64& rng, const std::string& team, const std::string& pool,
              const std::string& key) {
  Ask a = NewAsk(team, pool, key);
  v1::RequestCapacityRequest& r = a.req;
  v1::MemberShape* s = r.mutable_shape();
  const int kind = static_cast<int>(rng() % 10);
  if (kind < 4) {
    static constexpr int kSizes[] = {1, 1, 1, 2, 2, 4, 8};
    r.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
    s->set_whole_gpus(kSizes[rng() % 7]);
    if (rng() % 8 == 0) r.set_members(2);
    a.milli_per_member = 1000 * s->whole_gpus();
  } else if (kind < 8) {
    r.set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
    const int64_t milli = 100 + static_cast<int64_t>(rng() % 9) * 100;
    s->mutable_fraction()->set_gpu_milli(milli);
    s->mutable_fraction()->set_memory_mib(milli * 64);
    a.milli_per_member = milli;
  } else {
    static const char* kProfiles[] = {"1g.10gb", "2g.20gb", "3g.40gb"};
    r.set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
    s->set_mig_profile(kProfiles[rng() % 3]);
  }
  s->set_cpu_milli(1000 * (1 + static_cast<int64_t>(rng() % 4)));
  s->set_memory_mib(8192 * (1 + static_cast<int64_t>(rng() % 4)));
  return a;
}

// Whether `got` answers `ask` correctly; names the first problem otherwise.
std::string CheckDecision(const Ask& ask, const v1::CapacityRequest& got) {
  if (got.id() <= 0) return "response without an id";
  if (got.team() != ask.req.team() || got.pool() != ask.req.pool()) return "wrong team or pool";
  if (got.idempotency_key() != ask.req.idempotency_key()) return "wrong idempotency key";
  switch (got.state()) {
    case v1::REQUEST_STATE_ADMITTED: {
      if (got.placements_size() != ask.req.members()) return "admitted with a wrong member count";
      for (const v1::Placement& p : got.placements()) {
        if (p.node().empty() || p.gpu_indices_size() == 0) return "placement without GPUs";
        if (ask.req.shape().has_mig_profile()) {
          if (p.mig_profile() != ask.req.shape().mig_profile()) return "wrong MIG profile";
        } else if (ask.req.shape().whole_gpus() > 0) {
          if (p.gpu_indices_size() != ask.req.shape().whole_gpus() || p.gpu_milli() != 1000) {
            return "wrong whole-GPU placement";
          }
        } else if (p.gpu_indices_size() != 1 || p.gpu_milli() != ask.milli_per_member) {
          return "wrong fraction placement";
        }
      }
      return "";
    }
    case v1::REQUEST_STATE_QUEUED:
    case v1::REQUEST_STATE_DENIED:
      if (got.reason().empty() || got.placements_size() != 0) return "queued/denied without reason";
      return "";
    default:
      return absl::StrCat("unexpected state ", v1::RequestState_Name(got.state()));
  }
}

// One client: one call at a time, the next started when the last one
// completes. Clients are driven by a few threads, each polling a completion
// queue (Drive), so that the load generator spends little CPU of the machine
// it shares with arbiterd and PostgreSQL. Not thread-safe: one driver each.
class Client {
 public:
  Client(const Options& o, int id, v1::AllocationService::Stub* stub, Clock::time_point end,
         Tally& tally)
      : o_(o),
        id_(id),
        stub_(stub),
        end_(end),
        t_(tally),
        rng_(o.seed * 1'000'003 + static_cast<uint64_t>(id)),
        run_(absl::StrCat(o.seed, "-",
                          std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count())),
        fill_(o.fill / o.clients + (id < o.fill % o.clients ? 1 : 0)) {}

  // Starts the next call on `cq`, tagged with this client. Returns false
  // when the client has nothing left to do.
  bool Start(grpc::CompletionQueue* cq) {
    const bool mixing = o_.fill > 0 ? n_ < fill_ : Clock::now() < end_;
    if (!mixing) {
      // Leave nothing behind (but a fill): release what is still held, not
      // counted.
      if (o_.fill > 0 || held_.empty()) return false;
      StartRelease(cq, held_.size() - 1, /*counted=*/false);
      return true;
    }
    const bool release = o_.fill == 0 && !held_.empty() &&
                         (static_cast<int>(held_.size()) >= o_.max_held || rng_() % 2 == 0);
    if (release) {
      StartRelease(cq, rng_() % held_.size(), /*counted=*/true);
      return true;
    }
    const int team = o_.hot ? 0 : id_ % o_.teams;
    const std::string pool =
        o_.hot ? "pool-hot" : absl::StrCat("pool-", static_cast<int>(rng_() % o_.pools));
    const std::string key = absl::StrCat("load-", run_, "-", id_, "-", n_++);
    ask_ = o_.fill > 0 ? SmallAsk(rng_, absl::StrCat("team-", team), pool, key)
                       : RandomAsk(rng_, absl::StrCat("team-", team), pool, key);
    Begin();
    releasing_ = false;
    request_ = stub_->AsyncRequestCapacity(ctx_.get(), ask_.req, cq);
    request_->Finish(&request_resp_, &status_, this);
    return true;
  }

  // Checks and counts the answer to the call started last.
  void Complete() {
    const int64_t us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count();
    if (releasing_) {
      if (counted_) CompleteRelease(us);
    } else {
      CompleteRequest(us);
    }
  }

 private:
  void Begin() {
    ctx_ = std::make_unique<grpc::ClientContext>();
    SetDeadline(*ctx_, o_.deadline_ms);
    started_ = Clock::now();
  }

  void StartRelease(grpc::CompletionQueue* cq, size_t k, bool counted) {
    releasing_held_ = held_[k];
    held_[k] = held_.back();
    held_.pop_back();
    releasing_ = true;
    counted_ = counted;
    Begin();
    v1::ReleaseAllocationRequest req;
    req.set_id(releasing_held_.id);
    release_ = stub_->AsyncReleaseAllocation(ctx_.get(), req, cq);
    release_->Finish(&release_resp_, &status_, this);
  }

  void CompleteRelease(int64_t us) {
    t_.latency_us.push_back(us);
    ++t_.releases;
    if (!status_.ok()) {
      t_.Error(
          absl::StrCat("ReleaseAllocation ", status_.error_code(), ": ", status_.error_message()));
      return;
    }
    const Held& h = releasing_held_;
    const v1::RequestState want =
        h.admitted ? v1::REQUEST_STATE_RELEASED : v1::REQUEST_STATE_CANCELLED;
    const v1::CapacityRequest& got = release_resp_.request();
    // A queued request may have been admitted since: then it is released.
    if (got.id() != h.id ||
        (got.state() != want && !(got.state() == v1::REQUEST_STATE_RELEASED && !h.admitted))) {
      t_.Error("release answered with a wrong id or state");
    }
  }

  void CompleteRequest(int64_t us) {
    t_.latency_us.push_back(us);
    ++t_.requests;
    if (!status_.ok()) {
      t_.Error(
          absl::StrCat("RequestCapacity ", status_.error_code(), ": ", status_.error_message()));
      return;
    }
    const v1::CapacityRequest& got = request_resp_.request();
    if (const std::string bad = CheckDecision(ask_, got); !bad.empty()) {
      t_.Error(bad);
      return;
    }
    switch (got.state()) {
      case v1::REQUEST_STATE_ADMITTED:
        ++t_.admitted;
        held_.push_back({got.id(), true});
        break;
      case v1::REQUEST_STATE_QUEUED:
        ++t_.queued;
        held_.push_back({got.id(), false});
        break;
      default:
        ++t_.denied;
    }
  }

  const Options& o_;
  const int id_;
  v1::AllocationService::Stub* const stub_;
  const Clock::time_point end_;
  Tally& t_;
  std::mt19937_64 rng_;
  const std::string run_;
  const int64_t fill_;
  int64_t n_ = 0;
  std::vector<Held> held_;

  // The call in flight.
  std::unique_ptr<grpc::ClientContext> ctx_;
  Clock::time_point started_;
  grpc::Status status_;
  bool releasing_ = false;
  bool counted_ = true;
  Ask ask_;
  Held releasing_held_{0, false};
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::RequestCapacityResponse>> request_;
  v1::RequestCapacityResponse request_resp_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ReleaseAllocationResponse>> release_;
  v1::ReleaseAllocationResponse release_resp_;
};

// Runs `clients` to completion on one completion queue.
void Drive(std::vector<Client*> clients) {
  grpc::CompletionQueue cq;
  size_t active = 0;
  for (Client* c : clients) active += c->Start(&cq) ? 1 : 0;
  void* tag = nullptr;
  bool ok = false;
  while (active > 0 && cq.Next(&tag, &ok)) {
    Client* c = static_cast<Client*>(tag);
    c->Complete();
    if (!c->Start(&cq)) --active;
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

double Percentile(std::vector<int64_t>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]) / 1000.0;
}

int Run(const Options& o) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::AllocationService::Stub>> stubs;
  for (int c = 0; c < o.channels; ++c) {
    channels.push_back(Connect(o.target, c));
    stubs.push_back(v1::AllocationService::NewStub(channels.back()));
  }
  std::vector<Tally> tallies(static_cast<size_t>(o.clients));
  const auto start = Clock::now();
  const auto end = start + std::chrono::microseconds(static_cast<int64_t>(o.seconds * 1e6));
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::vector<Client*>> per_thread(static_cast<size_t>(std::max(1, o.threads)));
  for (int c = 0; c < o.clients; ++c) {
    clients.push_back(std::make_unique<Client>(o, c,
                                               stubs[static_cast<size_t>(c % o.channels)].get(),
                                               end, tallies[static_cast<size_t>(c)]));
    per_thread[static_cast<size_t>(c) % per_thread.size()].push_back(clients.back().get());
  }
  std::vector<std::thread> threads;
  for (std::vector<Client*>& group : per_thread) threads.emplace_back(Drive, group);
  for (std::thread& t : threads) t.join();
  const double took =
      std::chrono::duration_cast<std::chrono::duration<double>>(Clock::now() - start).count();
  const double elapsed = o.fill > 0 ? took : std::min(o.seconds, took);
  Tally all;
  for (Tally& t : tallies) {
    all.latency_us.insert(all.latency_us.end(), t.latency_us.begin(), t.latency_us.end());
    all.requests += t.requests;
    all.releases += t.releases;
    all.admitted += t.admitted;
    all.queued += t.queued;
    all.denied += t.denied;
    for (const auto& [what, count] : t.errors) all.errors[what] += count;
  }
  int64_t errors = 0;
  for (const auto& [what, count] : all.errors) errors += count;
  const int64_t decisions = all.requests + all.releases;
  const double per_s = static_cast<double>(decisions) / elapsed;
  const double p50 = Percentile(all.latency_us, 0.50);
  const double p99 = Percentile(all.latency_us, 0.99);
  const double p999 = Percentile(all.latency_us, 0.999);
  std::cout << absl::StrFormat(
      "arbiter-load: %d clients over %d channels, %s, %.1f s: %d decisions (%d requests: %d "
      "admitted, %d queued, %d denied; %d releases), %.0f decisions/s, p50 %.2f ms, p99 %.2f ms, "
      "p999 %.2f ms, %d errors\n",
      o.clients, o.channels, o.hot ? "one team and pool" : "spread over teams and pools", elapsed,
      decisions, all.requests, all.admitted, all.queued, all.denied, all.releases, per_s, p50, p99,
      p999, errors);
  for (const auto& [what, count] : all.errors)
    std::cout << "  error x" << count << ": " << what << "\n";
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << absl::StrFormat(
        "{\"clients\": %d, \"channels\": %d, \"hot\": %s, \"seconds\": %.3f, \"decisions\": %d, "
        "\"requests\": %d, \"admitted\": %d, \"queued\": %d, \"denied\": %d, \"releases\": %d, "
        "\"decisions_per_s\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, "
        "\"errors\": %d}\n",
        o.clients, o.channels, o.hot ? "true" : "false", elapsed, decisions, all.requests,
        all.admitted, all.queued, all.denied, all.releases, per_s, p50, p99, p999, errors);
  }
  return errors == 0 && decisions > 0 ? 0 : 1;
}

}  // namespace
}  // namespace arbiter::bench

int main(int argc, char** argv) {
  arbiter::bench::Options o;
  CLI::App app{"arbiter-load: a gRPC load generator for arbiterd"};
  app.require_subcommand(1);
  app.add_option("--target", o.target, "arbiterd host:port (plaintext)")->capture_default_str();
  CLI::App* setup = app.add_subcommand("setup", "register the load inventory, teams and quotas");
  setup->add_option("--gpus", o.gpus, "GPUs in each inventory (8 per node)")->capture_default_str();
  setup->add_option("--pools", o.pools, "pools")->capture_default_str();
  setup->add_option("--teams", o.teams, "teams")->capture_default_str();
  setup->add_option("--cohorts", o.cohorts, "root teams the teams are spread under (0: none)")
      ->capture_default_str();
  CLI::App* run = app.add_subcommand("run", "drive the 50/50 request/release mix");
  run->add_option("--clients", o.clients, "concurrent clients")->capture_default_str();
  run->add_option("--channels", o.channels, "gRPC channels (connections)")->capture_default_str();
  run->add_option("--threads", o.threads, "threads driving the clients")->capture_default_str();
  run->add_option("--seconds", o.seconds, "how long to run")->capture_default_str();
  run->add_option("--pools", o.pools, "pools set up")->capture_default_str();
  run->add_option("--teams", o.teams, "teams set up")->capture_default_str();
  run->add_option("--deadline-ms", o.deadline_ms, "deadline of each call")->capture_default_str();
  run->add_option("--max-held", o.max_held, "most requests a client holds")->capture_default_str();
  run->add_flag("--hot", o.hot, "every request from team-0 to pool-hot");
  run->add_option("--fill", o.fill,
                  "instead of the timed mix: this many small requests, kept (memory runs)");
  run->add_option("--seed", o.seed, "random seed")->capture_default_str();
  run->add_option("--json", o.json, "write the figures as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  return setup->parsed() ? arbiter::bench::Setup(o) : arbiter::bench::Run(o);
}
