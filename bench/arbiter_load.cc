// arbiter-load: drives a running arbiterd with N concurrent clients over K
// gRPC channels, every call under a deadline and every response checked
// against what was asked. Prints decisions/s, latency percentiles and
// errors, and writes them as JSON with --json. Clients are asynchronous:
// `--threads` threads (default 2) drive them all.
//
//   arbiter-load --target 127.0.0.1:7443 setup --gpus 10000 [--mix realistic]
//   arbiter-load --target 127.0.0.1:7443 run --clients 64 --seconds 30 [--hot] [--json F]
//   arbiter-load --target 127.0.0.1:7443 --certs DIR run --mix realistic --seconds 60
//
// The default mix is 50/50 RequestCapacity (random shapes: whole GPUs,
// fractions, MIG instances) and ReleaseAllocation of the client's own
// requests. `setup` registers two inventories of `--gpus` 8-GPU H100 nodes
// each: one split over `--pools` batch pools, and one in the single pool
// "pool-hot"; and `--teams` teams with a quota in every pool that never
// binds. `run` spreads clients over teams and the split pools, or with --hot
// sends everything as team-0 to pool-hot: the same capacity, one team and
// one pool.
//
// The realistic mix (`--mix realistic`, for setup and run alike) is what a
// day of an organisation looks like, all of it checked:
//   - most clients as the default mix on the split pools, and one request in
//     `--large-every` a gang of 2 x 8 GPUs that needs approval (an authority
//     rule: more than 8 GPUs in any pool is LARGE);
//   - `--tight-clients` clients of two teams on "pool-tight", a small pool
//     (`--tight-gpus`) that is full: their requests queue and are admitted
//     when others release. Their work is preemptible at priority 0, and one
//     request in `--urgent-every` has priority 100: it preempts the team's
//     own work. A watch of PREEMPTING notices tells each victim's client,
//     which releases it at once, as a workload would;
//   - an approver (its own principal) that polls ListRequests for PENDING
//     requests and approves them, or denies one in `--deny-every`;
//   - `--report-clients` finance clients that query, every
//     `--report-every-ms`, ListRequests of a team, the tail of the ledger
//     (checking its hash chain) and one request's ledger history; and every
//     `--chargeback-every-s` the chargeback statement of the current hour;
//   - an agent (its own principal) that streams one telemetry batch per node
//     of `--telemetry-nodes` every `--telemetry-interval` seconds, and
//     reports a serving latency window (SLO) every minute, over its target
//     (an incident) every `--breach-every` minutes.
// Decisions (RequestCapacity, ReleaseAllocation, ApproveRequest,
// DenyRequest) are counted apart from queries and telemetry. The realistic
// mix needs mutual TLS (approvals need a principal): `--certs DIR` holds
// deploy/local/make-certs's CA and the certificates of the principals
// load (a platform admin: arbiterd --admin), approver, finance and agent.
// Without --certs the client talks plaintext to an arbiterd started with
// --insecure-loopback.
//
// The empty mix (`--mix empty`, run only) is the ceiling that gRPC itself
// sets on this set-up: every client calls grpc.health.v1.Health/Check,
// which arbiterd answers without touching its engine or PostgreSQL, over
// the same channels, credentials and client threads. Its calls are counted
// as the run's decisions, so that bench/run-load can quote decisions/s as a
// share of it.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include <grpcpp/alarm.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/chargeback.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"
#include "arbiter/v1/ledger.grpc.pb.h"
#include "arbiter/v1/telemetry.grpc.pb.h"

namespace arbiter::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The realistic mix's fixed terms.
constexpr char kPrincipalPrefix[] = "spiffe://arbiter.local/";
constexpr char kTightPool[] = "pool-tight";
constexpr int64_t kLargeThresholdMilli = 8'000;  // LARGE: more than 8 GPUs.
constexpr char kDenyReason[] = "not in this quarter's plan (load test)";
constexpr char kSloTeam[] = "team-0";
constexpr char kSloService[] = "load-chat";
constexpr int64_t kSloTargetUs = 50'000;
constexpr int64_t kSloWindowSeconds = 60;
constexpr int kGpusPerNode = 8;

struct Options {
  std::string target = "127.0.0.1:7443";
  std::string certs;  // make-certs directory; empty: plaintext.
  std::string mix = "default";
  int gpus = 10'000;
  int pools = 4;
  int teams = 16;
  int cohorts = 0;      // Teams under this many root teams; 0: each its own.
  bool import = false;  // Teams and quotas through ImportOrganisation.
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
  // Realistic mix.
  int tight_gpus = 64;
  int tight_clients = 8;
  int large_every = 25;
  int urgent_every = 8;
  int deny_every = 5;
  int report_clients = 2;
  int report_every_ms = 1'000;
  int report_deadline_ms = 30'000;
  int chargeback_every_s = 60;
  int breach_every = 30;  // Minutes; 0: never.
  int telemetry_nodes = 64;
  int telemetry_interval_s = 10;

  bool realistic() const { return mix == "realistic"; }
  bool empty() const { return mix == "empty"; }
};

std::string Principal(const std::string& name) { return absl::StrCat(kPrincipalPrefix, name); }

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) {
    std::cerr << "arbiter-load: cannot read " << path << "\n";
    std::exit(2);
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Plaintext without --certs; otherwise mutual TLS as principal `who`
// (DIR/who.pem and DIR/who.key, signed by DIR/ca.pem).
std::shared_ptr<grpc::ChannelCredentials> CredentialsFor(const Options& o, const std::string& who) {
  if (o.certs.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFileOrDie(o.certs + "/ca.pem");
  ssl.pem_cert_chain = ReadFileOrDie(absl::StrCat(o.certs, "/", who, ".pem"));
  ssl.pem_private_key = ReadFileOrDie(absl::StrCat(o.certs, "/", who, ".key"));
  return grpc::SslCredentials(ssl);
}

std::shared_ptr<grpc::Channel> Connect(const Options& o, const std::string& who, int n) {
  grpc::ChannelArguments args;
  // A distinct argument per channel keeps each on its own connection.
  args.SetInt("arbiter.load.channel", n);
  args.SetString("arbiter.load.principal", who);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(o.target, CredentialsFor(o, who), args);
}

void SetDeadline(grpc::ClientContext& ctx, int ms) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(ms));
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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

bool RegisterNode(v1::InventoryService::Stub& inventory, const std::string& name,
                  const std::string& pool, const std::string& domain) {
  v1::RegisterNodeRequest req;
  v1::Node* node = req.mutable_node();
  node->set_cluster("load");
  node->set_name(name);
  node->set_pool(pool);
  node->set_topology_domain(domain);
  node->set_cpu_milli(kGpusPerNode * 16'000);
  node->set_memory_mib(kGpusPerNode * 128 * 1024);
  for (int g = 0; g < kGpusPerNode; ++g) {
    v1::Gpu* gpu = node->add_gpus();
    gpu->set_index(g);
    gpu->set_model("H100-80GB");
  }
  v1::RegisterNodeResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx, 30'000);
  return Check(inventory.RegisterNode(&ctx, req, &resp), "register node");
}

// The realistic mix's governance: who approves what, who reads and reports,
// and the SLO the agent reports against.
bool SetupGovernance(v1::GovernanceService::Stub& governance,
                     v1::ChargebackService::Stub& chargeback) {
  const std::pair<const char*, v1::Role> grants[] = {
      {"approver", v1::ROLE_AUDITOR}, {"finance", v1::ROLE_FINANCE}, {"agent", v1::ROLE_AGENT}};
  for (const auto& [who, role] : grants) {
    v1::GrantRoleRequest req;
    req.mutable_binding()->set_subject(Principal(who));
    req.mutable_binding()->set_role(role);
    req.mutable_binding()->set_scope_kind(v1::SCOPE_KIND_ORG);
    v1::GrantRoleResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, 30'000);
    if (!Check(governance.GrantRole(&ctx, req, &resp), "grant role")) return false;
  }
  {
    v1::SetAuthorityRuleRequest req;
    v1::AuthorityRule* rule = req.mutable_rule();
    rule->set_action(v1::APPROVAL_ACTION_LARGE);
    rule->set_approver(Principal("approver"));
    rule->set_threshold_milli(kLargeThresholdMilli);
    v1::SetAuthorityRuleResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, 30'000);
    if (!Check(governance.SetAuthorityRule(&ctx, req, &resp), "set authority rule")) return false;
  }
  v1::SetSloRequest req;
  v1::Slo* slo = req.mutable_slo();
  slo->set_team(kSloTeam);
  slo->set_service(kSloService);
  slo->set_pool("pool-0");
  slo->set_p99_target_us(kSloTargetUs);
  slo->set_window_seconds(kSloWindowSeconds);
  slo->set_penalty_micros_per_minute(1'000'000);
  v1::SetSloResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx, 30'000);
  return Check(chargeback.SetSlo(&ctx, req, &resp), "set SLO");
}

// The load's teams (under o.cohorts root teams, when set) and a quota for
// each in every pool, one call each: cohort roots first, then teams and
// quotas by many callers in parallel (quotas by 64), so that the arbiter
// commits them in batches. Prints the time the quotas took.
bool RegisterOneByOne(const Options& o, v1::GovernanceService::Stub& governance,
                      const std::vector<std::string>& pools) {
  for (int c = 0; c < o.cohorts; ++c) {
    v1::CreateTeamRequest req;
    req.mutable_team()->set_name(absl::StrCat("cohort-", c));
    v1::CreateTeamResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, 30'000);
    if (!Check(governance.CreateTeam(&ctx, req, &resp), "create cohort")) return false;
  }
  const bool teams_made = Parallel(o.teams, [&](int t) {
    v1::CreateTeamRequest req;
    req.mutable_team()->set_name(absl::StrCat("team-", t));
    if (o.cohorts > 0) req.mutable_team()->set_parent(absl::StrCat("cohort-", t % o.cohorts));
    v1::CreateTeamResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, 30'000);
    return Check(governance.CreateTeam(&ctx, req, &resp), "create team");
  });
  if (!teams_made) return false;
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
        return Check(governance.SetQuota(&qc, q, &qr), "set quota");
      },
      /*threads=*/64);
  if (!quotas_set) return false;
  const double quota_s = std::chrono::duration<double>(Clock::now() - quotas_start).count();
  std::cout << "arbiter-load: set " << o.teams * n_pools << " quotas in "
            << absl::StrFormat("%.1f", quota_s) << " s\n";
  return true;
}

// The same organisation as RegisterOneByOne through ImportOrganisation, as
// `arbctl org import` sends it: calls of 20,000 entries, teams first, one
// after another. Prints the time the whole import took.
bool ImportOrganisation(const Options& o, v1::GovernanceService::Stub& governance,
                        const std::vector<std::string>& pools) {
  constexpr int kChunk = 20'000;
  const Clock::time_point start = Clock::now();
  v1::ImportOrganisationRequest chunk;
  auto flush = [&]() {
    if (chunk.teams_size() + chunk.quotas_size() == 0) return true;
    v1::ImportOrganisationResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, 120'000);
    const bool ok = Check(governance.ImportOrganisation(&ctx, chunk, &resp), "import");
    chunk.Clear();
    return ok;
  };
  for (int c = 0; c < o.cohorts; ++c) chunk.add_teams()->set_name(absl::StrCat("cohort-", c));
  for (int t = 0; t < o.teams; ++t) {
    v1::Team* team = chunk.add_teams();
    team->set_name(absl::StrCat("team-", t));
    if (o.cohorts > 0) team->set_parent(absl::StrCat("cohort-", t % o.cohorts));
    if (chunk.teams_size() == kChunk && !flush()) return false;
  }
  for (int t = 0; t < o.teams; ++t) {
    for (const std::string& pool : pools) {
      v1::Quota* q = chunk.add_quotas();
      q->set_team(absl::StrCat("team-", t));
      q->set_pool(pool);
      q->set_nominal_milli(int64_t{o.gpus} * 1000);
      if (chunk.teams_size() + chunk.quotas_size() == kChunk && !flush()) return false;
    }
  }
  if (!flush()) return false;
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << "arbiter-load: imported " << o.cohorts + o.teams << " teams and "
            << o.teams * static_cast<int>(pools.size()) << " quotas in "
            << absl::StrFormat("%.1f", took) << " s\n";
  return true;
}

int Setup(const Options& o) {
  auto channel = Connect(o, "load", 0);
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
  const int nodes = o.gpus / kGpusPerNode;
  std::vector<std::string> pools;
  for (int p = 0; p < o.pools; ++p) pools.push_back(absl::StrCat("pool-", p));
  pools.push_back("pool-hot");
  if (o.realistic()) pools.push_back(kTightPool);
  for (const std::string& pool : pools) {
    v1::CreatePoolRequest req;
    req.mutable_pool()->set_name(pool);
    req.mutable_pool()->set_latency_class(v1::LATENCY_CLASS_BATCH);
    // The mix sends inference to the same pools.
    v1::PoolClassRule* inference = req.mutable_pool()->add_class_rules();
    inference->set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
    inference->set_admission(v1::CLASS_ADMISSION_ADMIT);
    v1::CreatePoolResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, 30'000);
    if (!Check(inventory->CreatePool(&ctx, req, &resp), "create pool")) return 1;
  }
  if (!(o.import ? ImportOrganisation(o, *governance, pools)
                 : RegisterOneByOne(o, *governance, pools))) {
    return 1;
  }
  // The realistic mix leaves pool-hot empty: nothing asks for it.
  const int registered = o.realistic() ? nodes : 2 * nodes;
  const bool nodes_made = Parallel(registered, [&](int n) {
    return RegisterNode(*inventory, absl::StrCat("n", n),
                        n < nodes ? absl::StrCat("pool-", n % o.pools) : "pool-hot",
                        absl::StrCat("nvl-", n / 4));
  });
  if (!nodes_made) return 1;
  if (!o.realistic()) {
    std::cout << "arbiter-load: set up " << nodes << " nodes (" << nodes * kGpusPerNode
              << " GPUs) in " << o.pools << " pools and as many in pool-hot, " << o.teams
              << " teams\n";
    return 0;
  }
  const int tight_nodes = std::max(1, o.tight_gpus / kGpusPerNode);
  const bool tight_made = Parallel(tight_nodes, [&](int n) {
    return RegisterNode(*inventory, absl::StrCat("t", n), kTightPool, absl::StrCat("nvl-t", n / 4));
  });
  if (!tight_made) return 1;
  auto chargeback = v1::ChargebackService::NewStub(channel);
  if (!SetupGovernance(*governance, *chargeback)) return 1;
  std::cout << "arbiter-load: set up " << nodes << " nodes (" << nodes * kGpusPerNode
            << " GPUs) in " << o.pools << " pools, " << tight_nodes * kGpusPerNode << " GPUs in "
            << kTightPool << ", " << o.teams << " teams; LARGE (> " << kLargeThresholdMilli
            << " milli-GPU) approved by " << Principal("approver") << "\n";
  return 0;
}

// --- run: what is counted

// Every RPC the mix makes, by kind. Decisions change state through the
// arbiter; queries and telemetry are counted apart.
enum Kind : int {
  kRequest,
  kRelease,
  kApprove,
  kDeny,
  kListPending,
  kListRequests,
  kLedgerTail,
  kLedgerSubject,
  kChargeback,
  kSamples,
  kLatencyReport,
  kEmpty,
  kKinds,
};
constexpr const char* kKindNames[kKinds] = {"RequestCapacity",        "ReleaseAllocation",
                                            "ApproveRequest",         "DenyRequest",
                                            "ListRequests.pending",   "ListRequests.team",
                                            "ListLedgerEntries.tail", "ListLedgerEntries.subject",
                                            "GetChargeback",          "StreamSamples",
                                            "ReportLatency",          "Health.Check"};
// The empty mix's calls stand in for decisions (its runs make no others).
bool IsDecision(int k) { return k <= kDeny || k == kEmpty; }
bool IsQuery(int k) { return k >= kListPending && k <= kChargeback; }

// What one actor saw. Confined to the actor's thread until merged.
struct Tally {
  std::array<std::vector<int64_t>, kKinds> latency_us;
  std::array<int64_t, kKinds> errors{};
  std::map<std::string, int64_t> problems;  // What went wrong -> count.
  // Outcomes.
  int64_t admitted = 0, queued = 0, denied = 0, pending = 0;
  int64_t approved = 0, approved_admitted = 0, approved_queued = 0, denied_by_authority = 0;
  int64_t queued_then_admitted = 0;  // Held as queued, answered RELEASED.
  int64_t notices = 0, victim_releases = 0, stale_notices = 0;
  int64_t samples_stored = 0, windows = 0, windows_duplicate = 0, incidents = 0;
  int64_t ledger_entries_read = 0;
  int64_t cleanup_releases = 0;  // After the timed mix, not counted as decisions.
  int64_t chargeback_open_mismatches = 0;
  int64_t chargeback_largest_mismatch = 0;  // Milli-GPU seconds.

  void Call(Kind k, int64_t us) { latency_us[k].push_back(us); }
  void Error(Kind k, const std::string& what) {
    ++errors[k];
    ++problems[absl::StrCat(kKindNames[k], ": ", what)];
  }
  void Add(const Tally& t) {
    for (int k = 0; k < kKinds; ++k) {
      latency_us[k].insert(latency_us[k].end(), t.latency_us[k].begin(), t.latency_us[k].end());
      errors[k] += t.errors[k];
    }
    for (const auto& [what, n] : t.problems) problems[what] += n;
    chargeback_open_mismatches += t.chargeback_open_mismatches;
    chargeback_largest_mismatch =
        std::max(chargeback_largest_mismatch, t.chargeback_largest_mismatch);
    admitted += t.admitted;
    queued += t.queued;
    denied += t.denied;
    pending += t.pending;
    approved += t.approved;
    approved_admitted += t.approved_admitted;
    approved_queued += t.approved_queued;
    denied_by_authority += t.denied_by_authority;
    queued_then_admitted += t.queued_then_admitted;
    notices += t.notices;
    victim_releases += t.victim_releases;
    stale_notices += t.stale_notices;
    samples_stored += t.samples_stored;
    windows += t.windows;
    windows_duplicate += t.windows_duplicate;
    incidents += t.incidents;
    ledger_entries_read += t.ledger_entries_read;
    cleanup_releases += t.cleanup_releases;
  }
};

// Where the approver and the watch hand a requester what concerns its
// requests. Thread-safe.
struct Mailbox {
  std::mutex mu;
  std::vector<v1::CapacityRequest> decided;  // Answers to its pending requests.
  std::vector<int64_t> notices;              // PREEMPTING notices.
  std::atomic<bool> any{false};
};

// What the actors of one run share. Thread-safe.
struct Shared {
  explicit Shared(int requesters) : mail(static_cast<size_t>(requesters)) {}
  std::string run;  // In every idempotency key: "load-<run>-<client>-<n>".
  std::vector<Mailbox> mail;
  std::atomic<int64_t> unresolved{0};  // Pending approvals not yet decided.
  std::atomic<int> mixing{0};          // Requesters still in the timed mix.
  std::atomic<int64_t> last_id{0};     // A recently decided request.

  // The requester that asked for `key`; -1 for a key of another run.
  int OwnerOf(const std::string& key) const {
    absl::string_view rest = key;
    const std::string prefix = absl::StrCat("load-", run, "-");
    if (!absl::ConsumePrefix(&rest, prefix)) return -1;
    const size_t dash = rest.find('-');
    int owner = -1;
    if (dash == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dash), &owner) ||
        owner < 0 || owner >= static_cast<int>(mail.size())) {
      return -1;
    }
    return owner;
  }
  void Decided(const v1::CapacityRequest& r) {
    const int owner = OwnerOf(r.idempotency_key());
    if (owner < 0) return;
    Mailbox& m = mail[static_cast<size_t>(owner)];
    std::lock_guard<std::mutex> lock(m.mu);
    m.decided.push_back(r);
    m.any = true;
  }
  void Notice(const v1::CapacityRequest& r) {
    const int owner = OwnerOf(r.idempotency_key());
    if (owner < 0) return;
    Mailbox& m = mail[static_cast<size_t>(owner)];
    std::lock_guard<std::mutex> lock(m.mu);
    m.notices.push_back(r.id());
    m.any = true;
  }
};

// --- run: requests and their checks

struct Held {
  int64_t id;
  bool admitted;
};

// The shape of a random request, and what a correct answer must show.
struct Ask {
  v1::RequestCapacityRequest req;
  int64_t milli_per_member = 0;  // 0 for MIG (charged at the SM share).
  bool needs_approval = false;   // Realistic mix: more than the LARGE threshold.
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

// A training gang of 2 x 8 GPUs: over the LARGE threshold.
Ask LargeAsk(const std::string& team, const std::string& pool, const std::string& key) {
  Ask a = NewAsk(team, pool, key);
  a.req.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  a.req.set_members(2);
  a.req.set_description("large training run (needs approval)");
  a.req.mutable_shape()->set_whole_gpus(8);
  a.req.mutable_shape()->set_cpu_milli(64'000);
  a.req.mutable_shape()->set_memory_mib(512 * 1024);
  a.milli_per_member = 8'000;
  return a;
}

// Work on the tight pool: 1, 2 or 4 whole GPUs, preemptible at priority 0,
// or (urgent) at priority 100 and not preemptible.
Ask TightAsk(std::mt19937_64& rng, const std::string& team, bool urgent, const std::string& key) {
  static constexpr int kSizes[] = {1, 1, 2, 2, 4};
  Ask a = NewAsk(team, kTightPool, key);
  a.req.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  a.req.mutable_shape()->set_whole_gpus(kSizes[rng() % 5]);
  a.req.mutable_shape()->set_cpu_milli(4'000);
  a.req.mutable_shape()->set_memory_mib(32 * 1024);
  a.milli_per_member = 1000 * a.req.shape().whole_gpus();
  if (urgent) {
    a.req.set_priority(100);
    a.req.set_description("urgent: preempts the team's preemptible work");
  } else {
    a.req.set_preemptible(true);
  }
  return a;
}

// Whether `got` answers `ask` correctly; names the first problem otherwise.
// PENDING_APPROVAL is right exactly when the ask needs approval.
std::string CheckDecision(const Ask& ask, const v1::CapacityRequest& got) {
  if (got.id() <= 0) return "response without an id";
  if (got.team() != ask.req.team() || got.pool() != ask.req.pool()) return "wrong team or pool";
  if (got.idempotency_key() != ask.req.idempotency_key()) return "wrong idempotency key";
  if (got.priority() != ask.req.priority() || got.preemptible() != ask.req.preemptible()) {
    return "wrong priority or preemptible";
  }
  if (ask.needs_approval && got.state() != v1::REQUEST_STATE_PENDING_APPROVAL &&
      got.approvals_size() == 0) {
    return absl::StrCat("over the LARGE threshold but ", v1::RequestState_Name(got.state()),
                        " without approval");
  }
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
    case v1::REQUEST_STATE_PENDING_APPROVAL:
      if (!ask.needs_approval) return "pending approval under the LARGE threshold";
      if (got.placements_size() != 0 || got.reason().empty()) return "pending with placements";
      if (got.approvers_size() != 1 || got.approvers(0) != Principal("approver")) {
        return "pending approval naming the wrong approvers";
      }
      return "";
    default:
      return absl::StrCat("unexpected state ", v1::RequestState_Name(got.state()));
  }
}

// --- run: the actors

// One actor of the run: one call (or one pause) at a time, the next started
// when the last completes. Actors are driven by a few threads, each polling
// a completion queue (Drive), so that the load generator spends little CPU
// of the machine it shares with arbiterd and PostgreSQL. Not thread-safe:
// one driver each.
class Actor {
 public:
  virtual ~Actor() = default;
  // Starts the next call (or pause) on `cq`, tagged with this actor.
  // Returns false when the actor has nothing left to do.
  virtual bool Start(grpc::CompletionQueue* cq) = 0;
  // Handles the completion of what Start started last.
  virtual void Complete() = 0;

 protected:
  void Begin(int deadline_ms) {
    ctx_ = std::make_unique<grpc::ClientContext>();
    SetDeadline(*ctx_, deadline_ms);
    started_ = Clock::now();
  }
  int64_t ElapsedUs() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count();
  }
  // Completes on `cq` after `ms`, with nothing to check.
  void Pause(grpc::CompletionQueue* cq, int ms) {
    alarm_ = std::make_unique<grpc::Alarm>();
    alarm_->Set(cq, std::chrono::system_clock::now() + std::chrono::milliseconds(ms), this);
  }

  std::unique_ptr<grpc::ClientContext> ctx_;
  Clock::time_point started_;
  grpc::Status status_;
  std::unique_ptr<grpc::Alarm> alarm_;
};

// A client of the empty mix: grpc.health.v1.Health/Check in a loop, each
// answer checked (SERVING).
class EmptyCaller final : public Actor {
 public:
  EmptyCaller(const Options& o, grpc::GenericStub* stub, Clock::time_point end, Tally& tally)
      : o_(o), stub_(stub), end_(end), t_(tally) {
    // HealthCheckRequest{service: ""}: no bytes.
    grpc::Slice none("", 0);
    request_ = grpc::ByteBuffer(&none, 1);
  }

  bool Start(grpc::CompletionQueue* cq) override {
    if (Clock::now() >= end_) return false;
    Begin(o_.deadline_ms);
    call_ = stub_->PrepareUnaryCall(ctx_.get(), "/grpc.health.v1.Health/Check", request_, cq);
    call_->StartCall();
    call_->Finish(&response_, &status_, this);
    return true;
  }

  void Complete() override {
    t_.Call(kEmpty, ElapsedUs());
    if (!status_.ok()) {
      t_.Error(kEmpty, absl::StrCat(status_.error_code(), ": ", status_.error_message()));
      return;
    }
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (response_.Dump(&slices).ok()) {
      for (const grpc::Slice& slice : slices) {
        bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
      }
    }
    // HealthCheckResponse{status: SERVING (1)}: field 1, varint 1.
    if (bytes != std::string("\x08\x01", 2)) t_.Error(kEmpty, "not SERVING");
  }

 private:
  const Options& o_;
  grpc::GenericStub* const stub_;
  const Clock::time_point end_;
  Tally& t_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> call_;
};

// A client of a team: asks for capacity and releases its own. Roles: the
// default mix (spread over the split pools, or hot), a fill, and in the
// realistic mix also large asks (approval) and the tight pool (queueing and
// preemption).
class Requester final : public Actor {
 public:
  Requester(const Options& o, int id, bool tight, v1::AllocationService::Stub* stub,
            Clock::time_point end, Tally& tally, Shared& shared)
      : o_(o),
        id_(id),
        tight_(tight),
        stub_(stub),
        end_(end),
        t_(tally),
        shared_(shared),
        rng_(o.seed * 1'000'003 + static_cast<uint64_t>(id)),
        fill_(o.fill / o.clients + (id < o.fill % o.clients ? 1 : 0)) {
    ++shared_.mixing;
  }

  bool Start(grpc::CompletionQueue* cq) override {
    what_ = What::kNone;
    if (o_.realistic()) CollectMail();
    const bool mixing = o_.fill > 0 ? n_ < fill_ : Clock::now() < end_;
    if (!mixing && mixing_) {
      mixing_ = false;
      --shared_.mixing;
    }
    // A victim's workload vacates as soon as it is told.
    while (!victims_.empty()) {
      const int64_t id = victims_.back();
      victims_.pop_back();
      auto it = std::find_if(held_.begin(), held_.end(), [&](const Held& h) { return h.id == id; });
      if (it == held_.end()) {
        ++t_.stale_notices;  // Released before the notice came.
        continue;
      }
      StartRelease(cq, static_cast<size_t>(it - held_.begin()), /*counted=*/mixing,
                   /*victim=*/true);
      return true;
    }
    if (!mixing) {
      // Leave nothing behind (but a fill): release what is still held, not
      // counted, and wait for the approver's answers to pending requests.
      if (o_.fill > 0) return false;
      if (!held_.empty()) {
        StartRelease(cq, held_.size() - 1, /*counted=*/false, /*victim=*/false);
        return true;
      }
      if (pending_.empty()) return false;
      if (Clock::now() > end_ + std::chrono::seconds(60)) {
        // The approver never answered: withdraw them (and say so).
        for (int64_t id : pending_ids_) {
          t_.Error(kApprove, "request pending approval never decided");
          held_.push_back({id, false});
          --shared_.unresolved;
        }
        pending_.clear();
        pending_ids_.clear();
        StartRelease(cq, held_.size() - 1, /*counted=*/false, /*victim=*/false);
        return true;
      }
      what_ = What::kPause;
      Pause(cq, 20);
      return true;
    }
    const bool release =
        o_.fill == 0 && !held_.empty() &&
        (static_cast<int>(held_.size() + pending_.size()) >= o_.max_held || rng_() % 2 == 0);
    if (release) {
      StartRelease(cq, rng_() % held_.size(), /*counted=*/true, /*victim=*/false);
      return true;
    }
    if (tight_) {
      const bool urgent = rng_() % static_cast<uint64_t>(o_.urgent_every) == 0;
      ask_ = TightAsk(rng_, absl::StrCat("team-", id_ % 2), urgent, NextKey());
    } else {
      const int team = o_.hot ? 0 : id_ % o_.teams;
      const std::string pool =
          o_.hot ? "pool-hot" : absl::StrCat("pool-", static_cast<int>(rng_() % o_.pools));
      const std::string key = NextKey();
      const std::string name = absl::StrCat("team-", team);
      if (o_.fill > 0) {
        ask_ = SmallAsk(rng_, name, pool, key);
      } else if (o_.realistic() && rng_() % static_cast<uint64_t>(o_.large_every) == 0) {
        ask_ = LargeAsk(name, pool, key);
      } else {
        ask_ = RandomAsk(rng_, name, pool, key);
      }
    }
    ask_.needs_approval =
        o_.realistic() && ask_.req.members() * ask_.milli_per_member > kLargeThresholdMilli;
    Begin(o_.deadline_ms);
    what_ = What::kRequest;
    request_ = stub_->AsyncRequestCapacity(ctx_.get(), ask_.req, cq);
    request_->Finish(&request_resp_, &status_, this);
    return true;
  }

  void Complete() override {
    const int64_t us = ElapsedUs();
    switch (what_) {
      case What::kRequest:
        CompleteRequest(us);
        break;
      case What::kRelease:
        CompleteRelease(us);
        break;
      case What::kNone:
      case What::kPause:
        break;
    }
  }

 private:
  enum class What { kNone, kRequest, kRelease, kPause };

  std::string NextKey() { return absl::StrCat("load-", shared_.run, "-", id_, "-", n_++); }

  // Takes the approver's answers and the preemption notices for this
  // client's requests.
  void CollectMail() {
    Mailbox& m = shared_.mail[static_cast<size_t>(id_)];
    if (!m.any) return;
    std::vector<v1::CapacityRequest> decided;
    std::vector<int64_t> notices;
    {
      std::lock_guard<std::mutex> lock(m.mu);
      decided.swap(m.decided);
      notices.swap(m.notices);
      m.any = false;
    }
    for (const v1::CapacityRequest& got : decided) Decided(got);
    victims_.insert(victims_.end(), notices.begin(), notices.end());
  }

  // The approver decided one of this client's pending requests.
  void Decided(const v1::CapacityRequest& got) {
    auto it = std::find(pending_ids_.begin(), pending_ids_.end(), got.id());
    if (it == pending_ids_.end()) {
      t_.Error(kApprove, "decision for a request this client does not wait for");
      return;
    }
    const size_t k = static_cast<size_t>(it - pending_ids_.begin());
    const Ask ask = pending_[k];
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(k));
    pending_ids_.erase(it);
    if (got.state() == v1::REQUEST_STATE_DENIED && absl::StrContains(got.reason(), kDenyReason)) {
      ++t_.denied_by_authority;
      return;
    }
    if (const std::string bad = CheckDecision(ask, got); !bad.empty()) {
      t_.Error(kApprove, bad);
      return;
    }
    ++t_.approved;
    if (got.state() == v1::REQUEST_STATE_ADMITTED) {
      ++t_.approved_admitted;
      held_.push_back({got.id(), true});
    } else if (got.state() == v1::REQUEST_STATE_QUEUED) {
      ++t_.approved_queued;
      held_.push_back({got.id(), false});
    }
  }

  void StartRelease(grpc::CompletionQueue* cq, size_t k, bool counted, bool victim) {
    releasing_held_ = held_[k];
    held_[k] = held_.back();
    held_.pop_back();
    what_ = What::kRelease;
    counted_ = counted;
    victim_ = victim;
    Begin(o_.deadline_ms);
    v1::ReleaseAllocationRequest req;
    req.set_id(releasing_held_.id);
    release_ = stub_->AsyncReleaseAllocation(ctx_.get(), req, cq);
    release_->Finish(&release_resp_, &status_, this);
  }

  void CompleteRelease(int64_t us) {
    if (counted_) t_.Call(kRelease, us);
    if (!status_.ok()) {
      t_.Error(kRelease, absl::StrCat(status_.error_code(), ": ", status_.error_message()));
      return;
    }
    const Held& h = releasing_held_;
    const v1::RequestState want =
        h.admitted ? v1::REQUEST_STATE_RELEASED : v1::REQUEST_STATE_CANCELLED;
    const v1::CapacityRequest& got = release_resp_.request();
    // A queued request may have been admitted since: then it is released.
    if (got.id() != h.id ||
        (got.state() != want && !(got.state() == v1::REQUEST_STATE_RELEASED && !h.admitted))) {
      t_.Error(kRelease, "answered with a wrong id or state");
      return;
    }
    if (!counted_) {
      ++t_.cleanup_releases;
      return;
    }
    if (!h.admitted && got.state() == v1::REQUEST_STATE_RELEASED) ++t_.queued_then_admitted;
    if (victim_) ++t_.victim_releases;
  }

  void CompleteRequest(int64_t us) {
    t_.Call(kRequest, us);
    if (!status_.ok()) {
      t_.Error(kRequest, absl::StrCat(status_.error_code(), ": ", status_.error_message()));
      return;
    }
    const v1::CapacityRequest& got = request_resp_.request();
    if (const std::string bad = CheckDecision(ask_, got); !bad.empty()) {
      t_.Error(kRequest, bad);
      return;
    }
    shared_.last_id = got.id();
    switch (got.state()) {
      case v1::REQUEST_STATE_ADMITTED:
        ++t_.admitted;
        held_.push_back({got.id(), true});
        break;
      case v1::REQUEST_STATE_QUEUED:
        ++t_.queued;
        held_.push_back({got.id(), false});
        break;
      case v1::REQUEST_STATE_PENDING_APPROVAL:
        ++t_.pending;
        ++shared_.unresolved;
        pending_.push_back(ask_);
        pending_ids_.push_back(got.id());
        break;
      default:
        ++t_.denied;
    }
  }

  const Options& o_;
  const int id_;
  const bool tight_;
  v1::AllocationService::Stub* const stub_;
  const Clock::time_point end_;
  Tally& t_;
  Shared& shared_;
  std::mt19937_64 rng_;
  const int64_t fill_;
  int64_t n_ = 0;
  bool mixing_ = true;
  std::vector<Held> held_;
  std::vector<Ask> pending_;  // Waiting for the approver, with their ids.
  std::vector<int64_t> pending_ids_;
  std::vector<int64_t> victims_;  // Notified; released first.

  // The call in flight.
  What what_ = What::kNone;
  bool counted_ = true;
  bool victim_ = false;
  Ask ask_;
  Held releasing_held_{0, false};
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::RequestCapacityResponse>> request_;
  v1::RequestCapacityResponse request_resp_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ReleaseAllocationResponse>> release_;
  v1::ReleaseAllocationResponse release_resp_;
};

// The authority: polls the PENDING_APPROVAL requests (its inbox) and
// approves each, or denies one in `--deny-every`, then hands the answer to
// the requester. Runs until every requester left the mix and every pending
// request is decided.
class Approver final : public Actor {
 public:
  Approver(const Options& o, v1::AllocationService::Stub* stub, Clock::time_point end, Tally& tally,
           Shared& shared)
      : o_(o), stub_(stub), end_(end), t_(tally), shared_(shared), rng_(o.seed * 7'919) {}

  bool Start(grpc::CompletionQueue* cq) override {
    if (!inbox_.empty()) {
      const int64_t id = inbox_.back();
      inbox_.pop_back();
      Begin(o_.deadline_ms);
      deciding_ = id;
      if (rng_() % o_.deny_every == 0) {
        what_ = kDeny;
        v1::DenyRequestRequest req;
        req.set_id(id);
        req.set_reason(kDenyReason);
        deny_ = stub_->AsyncDenyRequest(ctx_.get(), req, cq);
        deny_->Finish(&deny_resp_, &status_, this);
      } else {
        what_ = kApprove;
        v1::ApproveRequestRequest req;
        req.set_id(id);
        approve_ = stub_->AsyncApproveRequest(ctx_.get(), req, cq);
        approve_->Finish(&approve_resp_, &status_, this);
      }
      return true;
    }
    const auto now = Clock::now();
    if (now >= end_ && shared_.mixing == 0 && shared_.unresolved <= 0) return false;
    if (now > end_ + std::chrono::seconds(60)) return false;  // The requesters say why.
    if (idle_) {
      idle_ = false;
      what_ = kKinds;
      Pause(cq, 50);
      return true;
    }
    what_ = kListPending;
    Begin(o_.report_deadline_ms);
    v1::ListRequestsRequest req;
    req.set_state(v1::REQUEST_STATE_PENDING_APPROVAL);
    req.set_page_size(100);
    list_ = stub_->AsyncListRequests(ctx_.get(), req, cq);
    list_->Finish(&list_resp_, &status_, this);
    return true;
  }

  void Complete() override {
    if (what_ == kKinds) return;  // A pause.
    const Kind kind = static_cast<Kind>(what_);
    t_.Call(kind, ElapsedUs());
    if (!status_.ok()) {
      t_.Error(kind, absl::StrCat(status_.error_code(), ": ", status_.error_message()));
      idle_ = true;
      return;
    }
    if (kind == kListPending) {
      for (const v1::CapacityRequest& r : list_resp_.requests()) {
        if (r.state() != v1::REQUEST_STATE_PENDING_APPROVAL) {
          t_.Error(kind, "listed a request in another state");
          continue;
        }
        inbox_.push_back(r.id());
      }
      idle_ = inbox_.empty();
      return;
    }
    const v1::CapacityRequest& got =
        kind == kApprove ? approve_resp_.request() : deny_resp_.request();
    if (got.id() != deciding_) {
      t_.Error(kind, "answered for another request");
      return;
    }
    if (kind == kDeny) {
      if (got.state() != v1::REQUEST_STATE_DENIED ||
          !absl::StrContains(got.reason(), kDenyReason)) {
        t_.Error(kind, "not denied with the reason given");
        return;
      }
    } else {
      const std::string given = absl::StrCat(":", Principal("approver"));
      if (std::none_of(got.approvals().begin(), got.approvals().end(),
                       [&](const std::string& a) { return absl::EndsWith(a, given); })) {
        t_.Error(kind, "approved without this approver's approval");
        return;
      }
      if (got.state() != v1::REQUEST_STATE_ADMITTED && got.state() != v1::REQUEST_STATE_QUEUED &&
          got.state() != v1::REQUEST_STATE_DENIED) {
        t_.Error(kind, absl::StrCat("approved into ", v1::RequestState_Name(got.state())));
        return;
      }
    }
    --shared_.unresolved;
    shared_.Decided(got);
  }

 private:
  const Options& o_;
  v1::AllocationService::Stub* const stub_;
  const Clock::time_point end_;
  Tally& t_;
  Shared& shared_;
  std::mt19937_64 rng_;
  std::vector<int64_t> inbox_;
  bool idle_ = false;  // The last poll found nothing: pause before the next.

  int what_ = kKinds;  // A Kind, or kKinds for a pause.
  int64_t deciding_ = 0;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ListRequestsResponse>> list_;
  v1::ListRequestsResponse list_resp_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ApproveRequestResponse>> approve_;
  v1::ApproveRequestResponse approve_resp_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::DenyRequestResponse>> deny_;
  v1::DenyRequestResponse deny_resp_;
};

// Finance's dashboards: one query every `--report-every-ms`, in turn a team's
// requests, the tail of the ledger and one request's history; and the first
// reporter, every `--chargeback-every-s`, the chargeback statement of the
// current hour. Each answer is checked. The statement of an open period is
// computed while decisions commit, so its conservation (the statements' sum
// against the same sum in SQL) is noted when it fails, not counted as an
// error: arbiterd reads the two from different snapshots.
class Reporter final : public Actor {
 public:
  Reporter(const Options& o, int id, const std::shared_ptr<grpc::Channel>& channel,
           Clock::time_point end, Tally& tally, Shared& shared)
      : o_(o),
        id_(id),
        requests_(v1::AllocationService::NewStub(channel)),
        ledger_(v1::LedgerService::NewStub(channel)),
        chargeback_(v1::ChargebackService::NewStub(channel)),
        end_(end),
        t_(tally),
        shared_(shared),
        rng_(o.seed * 104'729 + static_cast<uint64_t>(id)),
        next_chargeback_(Clock::now()) {}

  bool Start(grpc::CompletionQueue* cq) override {
    if (Clock::now() >= end_) return false;
    if (!paused_) {
      // Staggered: reporter i starts i/N of a period late.
      paused_ = true;
      what_ = kKinds;
      const int ms =
          n_ == 0 ? o_.report_every_ms * id_ / std::max(1, o_.report_clients) : o_.report_every_ms;
      Pause(cq, std::max(1, ms));
      return true;
    }
    paused_ = false;
    static constexpr Kind kCycle[] = {kListRequests, kLedgerTail, kLedgerSubject};
    Kind kind = kCycle[n_++ % 3];
    if (id_ == 0 && o_.chargeback_every_s > 0 && Clock::now() >= next_chargeback_) {
      kind = kChargeback;
      next_chargeback_ = Clock::now() + std::chrono::seconds(o_.chargeback_every_s);
    }
    if (kind == kLedgerTail && revision_ == 0) kind = kListRequests;
    if (kind == kLedgerSubject && shared_.last_id == 0) kind = kListRequests;
    what_ = kind;
    Begin(o_.report_deadline_ms);
    switch (kind) {
      case kListRequests: {
        v1::ListRequestsRequest req;
        team_ = absl::StrCat("team-", rng_() % static_cast<uint64_t>(o_.teams));
        req.set_team(team_);
        req.set_page_size(100);
        list_ = requests_->AsyncListRequests(ctx_.get(), req, cq);
        list_->Finish(&list_resp_, &status_, this);
        break;
      }
      case kLedgerTail:
      case kLedgerSubject: {
        v1::ListLedgerEntriesRequest req;
        req.set_page_size(100);
        if (kind == kLedgerTail) {
          after_seq_ = std::max<int64_t>(0, revision_ - 100);
          req.set_after_seq(after_seq_);
        } else {
          after_seq_ = 0;
          subject_ = absl::StrCat("request/", shared_.last_id.load());
          req.set_subject(subject_);
        }
        entries_ = ledger_->AsyncListLedgerEntries(ctx_.get(), req, cq);
        entries_->Finish(&entries_resp_, &status_, this);
        break;
      }
      default: {
        v1::GetChargebackRequest req;
        const int64_t hour = UnixSeconds() / 3600 * 3600;
        period_from_ = hour;
        req.mutable_period()->mutable_from()->set_seconds(hour);
        req.mutable_period()->mutable_to()->set_seconds(hour + 3600);
        statement_ = chargeback_->AsyncGetChargeback(ctx_.get(), req, cq);
        statement_->Finish(&statement_resp_, &status_, this);
        break;
      }
    }
    return true;
  }

  void Complete() override {
    if (what_ == kKinds) return;
    const Kind kind = static_cast<Kind>(what_);
    t_.Call(kind, ElapsedUs());
    if (!status_.ok()) {
      t_.Error(kind, absl::StrCat(status_.error_code(), ": ", status_.error_message()));
      return;
    }
    if (const std::string bad = Problem(kind); !bad.empty()) t_.Error(kind, bad);
  }

 private:
  std::string Problem(Kind kind) {
    switch (kind) {
      case kListRequests: {
        int64_t last = INT64_MAX;
        if (list_resp_.requests_size() > 100) return "more than a page";
        for (const v1::CapacityRequest& r : list_resp_.requests()) {
          if (r.team() != team_) return "a request of another team";
          if (r.id() >= last) return "not newest first";
          last = r.id();
        }
        if (list_resp_.revision() <= 0) return "no revision";
        revision_ = std::max(revision_, list_resp_.revision());
        return "";
      }
      case kLedgerTail:
      case kLedgerSubject: {
        const auto& entries = entries_resp_.entries();
        t_.ledger_entries_read += entries.size();
        if (entries.empty()) return "no entries";
        if (entries.size() > 100) return "more than a page";
        int64_t last = after_seq_;
        const v1::LedgerEntry* prev = nullptr;
        for (const v1::LedgerEntry& e : entries) {
          if (e.seq() <= last) return "entries out of order";
          if (e.hash().size() != 64) return "entry without a hash";
          if (kind == kLedgerSubject && e.subject() != subject_) return "entry of another subject";
          // Consecutive entries of the tail link: the chain holds.
          if (kind == kLedgerTail && prev != nullptr && e.seq() == prev->seq() + 1 &&
              e.prev_hash() != prev->hash()) {
            return absl::StrCat("hash chain broken at seq ", e.seq());
          }
          last = e.seq();
          prev = &e;
        }
        return "";
      }
      default: {
        const v1::GetChargebackResponse& c = statement_resp_;
        int64_t reserved = 0;
        for (const v1::Statement& s : c.statements()) reserved += s.reserved_milli_seconds();
        if (reserved != c.cluster_reserved_milli_seconds()) {
          ++t_.chargeback_open_mismatches;
          t_.chargeback_largest_mismatch =
              std::max(t_.chargeback_largest_mismatch,
                       std::abs(reserved - c.cluster_reserved_milli_seconds()));
        }
        if (c.period().from().seconds() != period_from_) return "statement of another period";
        int64_t attributed = 0;
        for (const v1::Incident& i : c.incidents()) attributed += i.attributed_micros();
        if (attributed != c.incidents_attributed_micros()) return "incident charges do not add up";
        return "";
      }
    }
  }

  const Options& o_;
  const int id_;
  std::unique_ptr<v1::AllocationService::Stub> requests_;
  std::unique_ptr<v1::LedgerService::Stub> ledger_;
  std::unique_ptr<v1::ChargebackService::Stub> chargeback_;
  const Clock::time_point end_;
  Tally& t_;
  Shared& shared_;
  std::mt19937_64 rng_;
  int64_t n_ = 0;
  bool paused_ = false;
  int64_t revision_ = 0;  // The newest revision a listing reflected.
  Clock::time_point next_chargeback_;
  int64_t period_from_ = 0;

  int what_ = kKinds;
  std::string team_, subject_;
  int64_t after_seq_ = 0;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ListRequestsResponse>> list_;
  v1::ListRequestsResponse list_resp_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ListLedgerEntriesResponse>> entries_;
  v1::ListLedgerEntriesResponse entries_resp_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::GetChargebackResponse>> statement_;
  v1::GetChargebackResponse statement_resp_;
};

// Runs `actors` to completion on one completion queue.
void Drive(std::vector<Actor*> actors) {
  grpc::CompletionQueue cq;
  size_t active = 0;
  for (Actor* a : actors) active += a->Start(&cq) ? 1 : 0;
  void* tag = nullptr;
  bool ok = false;
  while (active > 0 && cq.Next(&tag, &ok)) {
    Actor* a = static_cast<Actor*>(tag);
    a->Complete();
    if (!a->Start(&cq)) --active;
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// The tight pool's workloads learn of preemption from a watch of PREEMPTING
// notices, from `start_revision` on (none is missed), until `ctx` is
// cancelled.
void Watch(v1::AllocationService::Stub* stub, grpc::ClientContext* ctx, int64_t start_revision,
           Tally& t, Shared& shared) {
  v1::WatchAllocationsRequest req;
  req.set_pool(kTightPool);
  req.add_types(v1::ALLOCATION_EVENT_TYPE_PREEMPTING);
  req.set_start_revision(start_revision);
  req.set_batched(true);
  std::unique_ptr<grpc::ClientReader<v1::WatchAllocationsResponse>> reader =
      stub->WatchAllocations(ctx, req);
  v1::WatchAllocationsResponse msg;
  auto notice = [&](v1::AllocationEventType type, const v1::CapacityRequest& r) {
    if (type != v1::ALLOCATION_EVENT_TYPE_PREEMPTING || r.pool() != kTightPool) {
      ++t.problems["WatchAllocations: an event not asked for"];
      return;
    }
    ++t.notices;
    shared.Notice(r);
  };
  while (reader->Read(&msg)) {
    if (msg.bookmark()) continue;
    for (const v1::AllocationEvent& e : msg.events()) notice(e.type(), e.request());
    if (msg.type() != v1::ALLOCATION_EVENT_TYPE_UNSPECIFIED) notice(msg.type(), msg.request());
  }
  const grpc::Status s = reader->Finish();
  if (s.error_code() != grpc::StatusCode::CANCELLED) {
    ++t.problems[absl::StrCat("WatchAllocations ended: ", s.error_code(), ": ", s.error_message())];
  }
}

// The agent beside `--telemetry-nodes` nodes: one batch of 8 GPU samples per
// node every `--telemetry-interval` s; and the serving platform's latency
// window of the SLO for every minute that ends while it runs, over its
// target in the minutes divisible by `--breach-every` (an incident). Until
// `end`.
void Agent(const Options& o, const std::shared_ptr<grpc::Channel>& channel, Clock::time_point end,
           Tally& t) {
  auto telemetry = v1::TelemetryService::NewStub(channel);
  auto chargeback = v1::ChargebackService::NewStub(channel);
  // Windows that ended before the run are an earlier run's to report.
  int64_t reported_until = UnixSeconds() / kSloWindowSeconds * kSloWindowSeconds;
  for (int64_t round = 0; Clock::now() < end; ++round) {
    const Clock::time_point next = Clock::now() + std::chrono::seconds(o.telemetry_interval_s);
    for (int n = 0; n < o.telemetry_nodes && Clock::now() < end; ++n) {
      v1::SampleBatch batch;
      batch.set_cluster("load");
      batch.set_node(absl::StrCat("n", n));
      batch.set_interval_seconds(o.telemetry_interval_s);
      const int64_t now = UnixSeconds();
      batch.mutable_sent_at()->set_seconds(now);
      for (int g = 0; g < kGpusPerNode; ++g) {
        v1::DeviceSample* s = batch.add_samples();
        s->mutable_at()->set_seconds(now);
        s->set_gpu_index(g);
        s->set_util_milli(static_cast<int32_t>((n * 37 + g * 101 + round * 13) % 1000));
        s->set_engine_active_milli(static_cast<int32_t>((n * 17 + g * 53 + round * 7) % 1000));
        s->set_fb_used_mib(4'000 + 1'000 * g);
        s->set_fb_free_mib(76'000 - 1'000 * g);
        s->set_power_mw(300'000 + 10'000 * g);
      }
      grpc::ClientContext ctx;
      SetDeadline(ctx, o.deadline_ms);
      v1::StreamSamplesResponse resp;
      const Clock::time_point started = Clock::now();
      auto writer = telemetry->StreamSamples(&ctx, &resp);
      writer->Write(batch);
      writer->WritesDone();
      const grpc::Status s = writer->Finish();
      t.Call(kSamples,
             std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count());
      if (!s.ok()) {
        t.Error(kSamples, absl::StrCat(s.error_code(), ": ", s.error_message()));
      } else if (resp.batches() != 1 || resp.stored() + resp.duplicates() != kGpusPerNode ||
                 resp.unknown_gpu() != 0 || resp.too_old() != 0 || resp.in_future() != 0) {
        t.Error(kSamples, "samples not stored");
      } else {
        t.samples_stored += resp.stored();
      }
    }
    const int64_t window_end = UnixSeconds() / kSloWindowSeconds * kSloWindowSeconds;
    if (window_end > reported_until) {
      reported_until = window_end;
      const bool breach =
          o.breach_every > 0 && (window_end / kSloWindowSeconds) % o.breach_every == 0;
      v1::ReportLatencyRequest req;
      v1::LatencyWindow* w = req.mutable_window();
      w->set_team(kSloTeam);
      w->set_service(kSloService);
      w->mutable_start()->set_seconds(window_end - kSloWindowSeconds);
      w->mutable_end()->set_seconds(window_end);
      w->set_p50_us(12'000);
      w->set_p99_us(breach ? 2 * kSloTargetUs : kSloTargetUs / 2);
      w->set_requests_milli_per_second(250'000);
      grpc::ClientContext ctx;
      SetDeadline(ctx, o.report_deadline_ms);
      v1::ReportLatencyResponse resp;
      const Clock::time_point started = Clock::now();
      const grpc::Status s = chargeback->ReportLatency(&ctx, req, &resp);
      t.Call(kLatencyReport,
             std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count());
      if (!s.ok()) {
        t.Error(kLatencyReport, absl::StrCat(s.error_code(), ": ", s.error_message()));
      } else if (resp.breached() != breach) {
        t.Error(kLatencyReport, "breach not as reported");
      } else if (breach && !resp.duplicate() &&
                 (resp.incident().team() != kSloTeam || resp.incident().service() != kSloService)) {
        t.Error(kLatencyReport, "incident of another service");
      } else {
        ++t.windows;
        if (resp.duplicate()) ++t.windows_duplicate;
        if (breach && !resp.duplicate()) ++t.incidents;
      }
    }
    while (Clock::now() < next && Clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

double Percentile(std::vector<int64_t>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]) / 1000.0;
}

// Latencies in buckets 5% wide (bucket b holds [1.05^b, 1.05^(b+1)) us), so
// that runs can be merged (bench/soak): "[[b, n], ...]".
constexpr double kHistogramBase = 1.05;
std::string HistogramJson(const std::vector<int64_t>& us) {
  std::map<int, int64_t> buckets;
  for (int64_t v : us) {
    ++buckets[static_cast<int>(std::floor(std::log(static_cast<double>(std::max<int64_t>(v, 1))) /
                                          std::log(kHistogramBase)))];
  }
  std::vector<std::string> parts;
  for (const auto& [b, n] : buckets) parts.push_back(absl::StrCat("[", b, ", ", n, "]"));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

// The latest revision: where the watch starts so that no notice is missed.
int64_t CurrentRevision(v1::AllocationService::Stub& stub, const Options& o) {
  v1::ListRequestsRequest req;
  req.set_page_size(1);
  v1::ListRequestsResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx, o.report_deadline_ms);
  const grpc::Status s = stub.ListRequests(&ctx, req, &resp);
  if (!s.ok()) {
    std::cerr << "arbiter-load: ListRequests: " << s.error_message() << "\n";
    return -1;
  }
  return resp.revision();
}

int Run(const Options& o) {
  if (o.realistic() && o.certs.empty()) {
    std::cerr << "arbiter-load: --mix realistic needs --certs (approvals need a principal)\n";
    return 2;
  }
  if (o.realistic() && (o.hot || o.fill > 0 || o.tight_clients >= o.clients)) {
    std::cerr << "arbiter-load: --mix realistic takes neither --hot nor --fill, and needs more "
                 "--clients than --tight-clients\n";
    return 2;
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::AllocationService::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::GenericStub>> generic_stubs;
  for (int c = 0; c < o.channels; ++c) {
    channels.push_back(Connect(o, "load", c));
    stubs.push_back(v1::AllocationService::NewStub(channels.back()));
    generic_stubs.push_back(std::make_unique<grpc::GenericStub>(channels.back()));
  }
  Shared shared(o.clients);
  // Two runs in the same second (bench/queue-depth's fill, then its mix)
  // must not share keys: the process id tells them apart.
  shared.run = absl::StrCat(o.seed, "-", UnixSeconds(), "-", getpid());
  const int tight = o.realistic() ? o.tight_clients : 0;
  const int reporters = o.realistic() ? o.report_clients : 0;
  // Tallies: requesters, the approver, reporters, the watch, the agent.
  std::vector<Tally> tallies(static_cast<size_t>(o.clients + 1 + reporters + 2));
  Tally& approver_tally = tallies[static_cast<size_t>(o.clients)];
  Tally& watch_tally = tallies[tallies.size() - 2];
  Tally& agent_tally = tallies.back();

  // The realistic mix's other principals, each on its own connection.
  std::shared_ptr<grpc::Channel> approver_channel, finance_channel, agent_channel;
  std::unique_ptr<v1::AllocationService::Stub> approver_stub;
  grpc::ClientContext watch_ctx;
  std::thread watcher;
  if (o.realistic()) {
    const int64_t revision = CurrentRevision(*stubs[0], o);
    if (revision < 0) return 1;
    watcher = std::thread(Watch, stubs[0].get(), &watch_ctx, revision, std::ref(watch_tally),
                          std::ref(shared));
    approver_channel = Connect(o, "approver", 0);
    approver_stub = v1::AllocationService::NewStub(approver_channel);
    finance_channel = Connect(o, "finance", 0);
    agent_channel = Connect(o, "agent", 0);
  }

  const auto start = Clock::now();
  const auto end = start + std::chrono::microseconds(static_cast<int64_t>(o.seconds * 1e6));
  std::vector<std::unique_ptr<Actor>> actors;
  for (int c = 0; c < o.clients; ++c) {
    if (o.empty()) {
      actors.push_back(
          std::make_unique<EmptyCaller>(o, generic_stubs[static_cast<size_t>(c % o.channels)].get(),
                                        end, tallies[static_cast<size_t>(c)]));
      continue;
    }
    actors.push_back(std::make_unique<Requester>(o, c, c < tight,
                                                 stubs[static_cast<size_t>(c % o.channels)].get(),
                                                 end, tallies[static_cast<size_t>(c)], shared));
  }
  std::thread agent;
  if (o.realistic()) {
    actors.push_back(
        std::make_unique<Approver>(o, approver_stub.get(), end, approver_tally, shared));
    for (int r = 0; r < reporters; ++r) {
      actors.push_back(std::make_unique<Reporter>(
          o, r, finance_channel, end, tallies[static_cast<size_t>(o.clients + 1 + r)], shared));
    }
    agent = std::thread(Agent, std::cref(o), std::cref(agent_channel), end, std::ref(agent_tally));
  }
  std::vector<std::vector<Actor*>> per_thread(static_cast<size_t>(std::max(1, o.threads)));
  for (size_t a = 0; a < actors.size(); ++a) {
    per_thread[a % per_thread.size()].push_back(actors[a].get());
  }
  std::vector<std::thread> threads;
  for (std::vector<Actor*>& group : per_thread) threads.emplace_back(Drive, group);
  for (std::thread& t : threads) t.join();
  const double took =
      std::chrono::duration_cast<std::chrono::duration<double>>(Clock::now() - start).count();
  if (agent.joinable()) agent.join();
  if (watcher.joinable()) {
    watch_ctx.TryCancel();
    watcher.join();
  }
  const double elapsed = o.fill > 0 ? took : std::min(o.seconds, took);
  Tally all;
  for (Tally& t : tallies) all.Add(t);

  int64_t errors = 0;
  for (const auto& [what, count] : all.problems) errors += count;
  std::vector<int64_t> decision_us, query_us;
  int64_t queries = 0, telemetry_calls = 0;
  for (int k = 0; k < kKinds; ++k) {
    std::vector<int64_t>& into = IsDecision(k) ? decision_us : query_us;
    if (IsDecision(k) || IsQuery(k)) {
      into.insert(into.end(), all.latency_us[k].begin(), all.latency_us[k].end());
    }
    if (IsQuery(k)) queries += static_cast<int64_t>(all.latency_us[k].size());
    if (!IsDecision(k) && !IsQuery(k))
      telemetry_calls += static_cast<int64_t>(all.latency_us[k].size());
  }
  const std::string histogram = HistogramJson(decision_us);
  const int64_t requests = static_cast<int64_t>(all.latency_us[kRequest].size());
  const int64_t releases = static_cast<int64_t>(all.latency_us[kRelease].size());
  const int64_t decisions = static_cast<int64_t>(decision_us.size());
  const double per_s = static_cast<double>(decisions) / elapsed;
  const double p50 = Percentile(decision_us, 0.50);
  const double p99 = Percentile(decision_us, 0.99);
  const double p999 = Percentile(decision_us, 0.999);
  const double query_p50 = Percentile(query_us, 0.50);
  const double query_p99 = Percentile(query_us, 0.99);
  const std::string where = o.empty()       ? "empty calls (grpc.health.v1.Health/Check)"
                            : o.realistic() ? "realistic mix"
                            : o.hot         ? "one team and pool"
                                            : "spread over teams and pools";
  std::cout << absl::StrFormat(
      "arbiter-load: %d clients over %d channels, %s, %.1f s: %d decisions (%d requests: %d "
      "admitted, %d queued, %d denied; %d releases), %.0f decisions/s, p50 %.2f ms, p99 %.2f ms, "
      "p999 %.2f ms, %d errors\n",
      o.clients, o.channels, where, elapsed, decisions, requests, all.admitted, all.queued,
      all.denied, releases, per_s, p50, p99, p999, errors);
  if (o.realistic()) {
    std::cout << absl::StrFormat(
        "  approvals: %d pending, %d approved (%d admitted, %d queued), %d denied by the "
        "authority; %d queued requests admitted later; preemption: %d notices, %d victims "
        "released on notice, %d notices after release\n"
        "  queries: %d (%.1f/s), p50 %.2f ms, p99 %.2f ms, %d ledger entries read; telemetry: %d "
        "calls, %d samples stored, %d SLO windows (%d repeated), %d incidents\n",
        all.pending, all.approved, all.approved_admitted, all.approved_queued,
        all.denied_by_authority, all.queued_then_admitted, all.notices, all.victim_releases,
        all.stale_notices, queries, static_cast<double>(queries) / elapsed, query_p50, query_p99,
        all.ledger_entries_read, telemetry_calls, all.samples_stored, all.windows,
        all.windows_duplicate, all.incidents);
    for (int k = 0; k < kKinds; ++k) {
      std::vector<int64_t>& v = all.latency_us[k];
      std::cout << absl::StrFormat("  %-27s %8d calls  p50 %8.2f ms  p99 %8.2f ms  %d errors\n",
                                   kKindNames[k], v.size(), Percentile(v, 0.5), Percentile(v, 0.99),
                                   all.errors[k]);
    }
  }
  for (const auto& [what, count] : all.problems) {
    std::cout << "  error x" << count << ": " << what << "\n";
  }
  if (all.chargeback_open_mismatches > 0) {
    std::cout << "  note x" << all.chargeback_open_mismatches
              << ": GetChargeback of the open hour: the statements' reserved milli-GPU seconds "
                 "differ from the cluster's (by up to "
              << all.chargeback_largest_mismatch << ")\n";
  }
  if (!o.json.empty()) {
    std::vector<std::string> kinds;
    for (int k = 0; k < kKinds; ++k) {
      std::vector<int64_t>& v = all.latency_us[k];
      kinds.push_back(absl::StrFormat(
          "\"%s\": {\"calls\": %d, \"errors\": %d, \"p50_ms\": %.3f, \"p99_ms\": %.3f}",
          kKindNames[k], v.size(), all.errors[k], Percentile(v, 0.5), Percentile(v, 0.99)));
    }
    std::ofstream out(o.json);
    out << absl::StrFormat(
        "{\"mix\": \"%s\", \"clients\": %d, \"channels\": %d, \"hot\": %s, \"seconds\": %.3f, "
        "\"decisions\": %d, \"requests\": %d, \"admitted\": %d, \"queued\": %d, \"denied\": %d, "
        "\"releases\": %d, \"decisions_per_s\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
        "\"p999_ms\": %.3f, \"errors\": %d, \"queries\": %d, \"queries_per_s\": %.2f, "
        "\"query_p50_ms\": %.3f, \"query_p99_ms\": %.3f, \"telemetry_calls\": %d, "
        "\"pending_approval\": %d, \"approved\": %d, \"approved_admitted\": %d, "
        "\"approved_queued\": %d, \"denied_by_authority\": %d, \"queued_then_admitted\": %d, "
        "\"preempt_notices\": %d, \"victim_releases\": %d, \"stale_notices\": %d, "
        "\"samples_stored\": %d, \"slo_windows\": %d, \"incidents\": %d, "
        "\"ledger_entries_read\": %d, \"cleanup_releases\": %d, \"chargeback_open_mismatches\": "
        "%d, \"rpcs\": {%s}, "
        "\"decision_latency_hist_base\": %.2f, "
        "\"decision_latency_hist\": %s}\n",
        o.mix, o.clients, o.channels, o.hot ? "true" : "false", elapsed, decisions, requests,
        all.admitted, all.queued, all.denied, releases, per_s, p50, p99, p999, errors, queries,
        static_cast<double>(queries) / elapsed, query_p50, query_p99, telemetry_calls, all.pending,
        all.approved, all.approved_admitted, all.approved_queued, all.denied_by_authority,
        all.queued_then_admitted, all.notices, all.victim_releases, all.stale_notices,
        all.samples_stored, all.windows, all.incidents, all.ledger_entries_read,
        all.cleanup_releases, all.chargeback_open_mismatches, absl::StrJoin(kinds, ", "),
        kHistogramBase, histogram);
  }
  return errors == 0 && decisions > 0 ? 0 : 1;
}

}  // namespace
}  // namespace arbiter::bench

int main(int argc, char** argv) {
  arbiter::bench::Options o;
  CLI::App app{"arbiter-load: a gRPC load generator for arbiterd"};
  app.require_subcommand(1);
  app.add_option("--target", o.target, "arbiterd host:port")->capture_default_str();
  app.add_option("--certs", o.certs,
                 "mutual TLS with the certificates of deploy/local/make-certs in this directory "
                 "(ca.pem, load.pem/.key, and for the realistic mix approver, finance, agent); "
                 "default: plaintext");
  const std::vector<std::string> mixes = {"default", "realistic", "empty"};
  CLI::App* setup = app.add_subcommand("setup", "register the load inventory, teams and quotas");
  setup->add_option("--gpus", o.gpus, "GPUs in each inventory (8 per node)")->capture_default_str();
  setup->add_option("--pools", o.pools, "pools")->capture_default_str();
  setup->add_option("--teams", o.teams, "teams")->capture_default_str();
  setup->add_option("--cohorts", o.cohorts, "root teams the teams are spread under (0: none)")
      ->capture_default_str();
  setup->add_flag("--import", o.import,
                  "register the teams and quotas with ImportOrganisation (20,000 a call) "
                  "instead of one call each");
  setup
      ->add_option("--mix", o.mix,
                   "also set up what the mix needs (realistic: the tight pool, "
                   "the LARGE authority rule, roles and an SLO)")
      ->check(CLI::IsMember(mixes))
      ->capture_default_str();
  setup->add_option("--tight-gpus", o.tight_gpus, "GPUs of pool-tight (realistic)")
      ->capture_default_str();
  CLI::App* run = app.add_subcommand("run", "drive the mix");
  run->add_option("--mix", o.mix,
                  "default: 50/50 request/release; realistic: see the header; empty: "
                  "grpc.health.v1.Health/Check, gRPC's own ceiling")
      ->check(CLI::IsMember(mixes))
      ->capture_default_str();
  run->add_option("--clients", o.clients, "concurrent requesting clients")->capture_default_str();
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
  run->add_option("--tight-clients", o.tight_clients, "realistic: clients on pool-tight")
      ->capture_default_str();
  run->add_option("--large-every", o.large_every,
                  "realistic: one request in N is a 2 x 8 GPU gang that needs approval")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--urgent-every", o.urgent_every,
                  "realistic: one tight request in N has priority 100 and preempts")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--deny-every", o.deny_every, "realistic: the approver denies one in N")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--report-clients", o.report_clients, "realistic: finance clients")
      ->capture_default_str();
  run->add_option("--report-every-ms", o.report_every_ms,
                  "realistic: each finance client's period between queries")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--report-deadline-ms", o.report_deadline_ms, "deadline of each query")
      ->capture_default_str();
  run->add_option("--chargeback-every-s", o.chargeback_every_s,
                  "realistic: the first finance client's period between chargeback statements "
                  "of the current hour (the first at once); 0: none")
      ->capture_default_str();
  run->add_option("--breach-every", o.breach_every,
                  "realistic: the SLO window of each minute divisible by N is over its target "
                  "(an incident); 0: none")
      ->capture_default_str();
  run->add_option("--telemetry-nodes", o.telemetry_nodes,
                  "realistic: nodes whose agent streams samples")
      ->capture_default_str();
  run->add_option("--telemetry-interval", o.telemetry_interval_s,
                  "realistic: seconds between an agent's batches")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return setup->parsed() ? arbiter::bench::Setup(o) : arbiter::bench::Run(o);
}
