// arbctl's commands over the arbiter.v1 stubs. Each returns the process exit
// code: 0 on success, 1 when the server answered an error (printed with a
// hint of what to do next).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"

#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/chargeback.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"
#include "arbiter/v1/ledger.grpc.pb.h"
#include "arbiter/v1/telemetry.grpc.pb.h"
#include "clients/arbctl/table.h"

namespace arbiter::arbctl {

// LedgerVerify from the newest checkpoint.
inline constexpr int64_t kLatestCheckpoint = -1;

// A LedgerVerify under way (ledger.cc).
struct LedgerWalk;

namespace v1 = ::arbiter::v1;

// Parses an RFC 3339 time, or "+<duration>" / "-<duration>" from now (e.g.
// "+2h", "-90m"); false when it is neither.
bool ParseWhen(const std::string& text, absl::Time* out);

// "ready", "cordoned", "draining", "unreachable" or "failed" (nodes.cc).
const char* NodeStateWord(v1::NodeState s);

struct GlobalOptions {
  std::string endpoint = "127.0.0.1:50051";  // Env ARBITER_ENDPOINT.
  // table (for people), json (the proto3 JSON mapping), yaml (the same
  // document as YAML) or csv (the table's columns). Env ARBITER_OUTPUT.
  std::string output = "table";
  bool json = false;         // Set by Commands: output is json or yaml.
  int timeout_seconds = 10;  // Deadline of each call.
  // TLS: the CA that signed arbiterd's certificate, and this principal's
  // certificate and key (PEM files). All empty: plaintext (a server started
  // with --insecure-loopback). Env ARBITER_CA_FILE, ARBITER_CERT_FILE,
  // ARBITER_KEY_FILE.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // The ledger's Ed25519 public key (PEM file) for `ledger verify`.
  std::string ledger_public_key;
};

// What `arbctl watch` streams: the fields of WatchAllocationsRequest.
struct WatchOptions {
  std::string team;
  std::string pool;
  std::string cluster;
  std::string node;
  int64_t request_id = 0;
  // Event type names ("admitted", "preempting", ...); empty: every type.
  std::vector<std::string> types;
  // Events after this revision (0: from now on).
  int64_t from_revision = 0;
};

// `arbctl pools create`'s flags. `queueing` "" and negative seconds: the
// server's defaults.
struct PoolOptions {
  std::string name;
  std::string latency_class;
  std::vector<std::string> lends_to;
  // "class=admission", e.g. "inference=borrow".
  std::vector<std::string> class_rules;
  std::string description;
  std::string queueing;
  int64_t starvation_limit_seconds = -1;
  int64_t spot_grace_seconds = -1;
  // "MODEL=MILLI", e.g. "H100-80GB=2000".
  std::vector<std::string> headroom;
  int64_t max_burst_seconds = 0;
  int64_t reclaim_grace_seconds = -1;
  bool proactive_reclaim = false;
  int64_t cold_start_seconds = 0;
  int64_t claim_deadline_seconds = 0;
  int64_t lease_seconds = 0;
};

struct RequestOptions {
  std::string key;  // Empty: a fresh random key.
  std::string team;
  std::string pool;
  std::string workload_class = "training";
  int members = 1;
  int gpus = 0;             // Whole GPUs per member; 0 with `milli` for a fraction.
  std::string mig_profile;  // One MIG instance per member, e.g. "3g.40gb".
  std::string topology;     // "", "same-node" or "same-domain".
  int64_t milli = 0;
  int64_t gpu_memory_mib = 0;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::vector<std::string> models;
  std::string description;
  int32_t priority = 0;
  bool preemptible = false;
  bool guaranteed = false;
  bool spot = false;
  int64_t burst_seconds = 0;
  // A recurring window, e.g. "weekdays 01:00-06:00 Europe/Berlin"; empty: none.
  std::string recurrence;
  int64_t checkpoint_seconds = 0;
  int64_t checkpoint_every_seconds = 0;
  // RFC 3339 time, or "+<duration>" from now (e.g. "+2h"); empty: now.
  std::string start;
  std::string duration;  // e.g. "90m"; empty: open-ended.
};

class Commands {
 public:
  // The channel is made on first use; a TLS file that cannot be read is
  // reported then.
  explicit Commands(GlobalOptions options);

  int ListModels();
  int ListClusters();
  int ListPools();
  // `pool`'s serving forecast for `hours` ahead: its figures now, the
  // quarter hours ahead, and the allocations told to vacate ahead of it.
  int ServingForecast(const std::string& pool, int32_t hours);
  int ListInventory(const std::string& cluster, const std::string& pool);
  struct NodeOptions {
    std::string cluster;
    std::string name;
    std::string pool;
    std::string model;
    int gpus = 8;
    int64_t cpu_milli = 128'000;
    int64_t memory_mib = 1'024'000;
    std::string topology_domain;
    std::vector<std::string> uuids;  // Per GPU index, optional.
  };
  int RegisterNode(const NodeOptions& node);
  // The node `n` describes: GPUs 0..gpus-1 of `model`, with the UUIDs given.
  static v1::Node NodeOf(const NodeOptions& n);
  // Sets every GPU model of the catalog file `path` (organisation.cc).
  int ApplyCatalog(const std::string& path);
  // Node lifecycle (nodes.cc): `n` names the node; UpdateNode sends all of
  // its facts.
  int UpdateNode(const NodeOptions& n);
  int CordonNode(const std::string& cluster, const std::string& name, bool cordon);
  int DrainNode(const std::string& cluster, const std::string& name, int64_t grace_seconds);
  // `failed_at`: ParseWhen's text; "" for now.
  int MarkNodeFailed(const std::string& cluster, const std::string& name,
                     const std::string& failed_at);
  int RemoveNode(const std::string& cluster, const std::string& name);
  int NodeHeartbeat(const std::string& cluster, const std::string& name);
  int ListTeams();
  int CreateTeam(const std::string& name, const std::string& parent, int64_t weight_milli);
  int ListQuotas(const std::string& team);
  // A quota's limits as the flags give them.
  struct QuotaLimits {
    int64_t borrow_milli = -2;  // -1 no limit, -2 leave the server's default (none).
    int64_t lend_milli = -1;    // -1: all of nominal (the default).
    // The cohort limits of the subtree the team heads; -1: none.
    int64_t cohort_lend_milli = -1;
    int64_t cohort_borrow_milli = -1;
  };
  int SetQuota(const std::string& team, const std::string& pool, int64_t nominal_milli,
               const std::string& gpu_model, const QuotaLimits& limits);
  // Imports the teams and quotas of `path` (an ImportOrganisationRequest as
  // protobuf JSON) in calls of at most 20,000 entries, teams first
  // (clients/arbctl/organisation.cc).
  int ImportOrganisation(const std::string& path);
  int ListCoexistence();
  // `isolation`: forbidden, mig_only or soft_sharing.
  int SetCoexistence(const std::string& class_a, const std::string& class_b,
                     const std::string& isolation, bool same_node);
  int Request(const RequestOptions& r);
  int ListRequests(const std::string& team, const std::string& state, int limit);
  int GetRequest(int64_t id);
  int Release(int64_t id);
  // `members` empty: all of them.
  int Claim(int64_t id, const std::string& holder, const std::vector<int32_t>& members);
  int Renew(int64_t id, const std::string& holder);
  int Watch(const WatchOptions& w);
  // Approvals and authority rules (clients/arbctl/authority.cc).
  int Approve(int64_t id);
  int Deny(int64_t id, const std::string& reason);
  int ListAuthority();
  // `until`: RFC 3339 or +<duration>.
  int Delegate(const std::string& from, const std::string& to, const std::string& until);
  int RevokeDelegation(const std::string& from, const std::string& to);
  int ListDelegations();
  // Kueue objects (YAML, kueue.x-k8s.io/v1beta2) enforcing Arbiter's teams,
  // cohorts and quotas (clients/arbctl/kueue.cc); LocalQueues are named
  // `queue_name`.
  int ExportKueue(const std::string& queue_name);
  // Sends one GPU reading through StreamSamples, as the agent does (for a
  // node without the agent, or to try telemetry by hand). Fields below 0
  // are not measured.
  struct SampleOptions {
    std::string cluster;
    std::string node;
    int32_t gpu_index = 0;
    std::string uuid;
    int32_t util_milli = -1;
    int64_t fb_used_mib = -1;
    int64_t power_mw = -1;
    int32_t interval_seconds = 10;
    std::string pod;
    std::string pod_namespace;
  };
  int SendSample(const SampleOptions& sample);
  // `action`: borrow, guaranteed, large, over_budget or long; `pool` empty
  // for every pool.
  struct AuthorityLimits {
    int64_t limit_milli = -1;
    int64_t threshold_milli = 0;
    int64_t threshold_seconds = 0;
    int64_t limit_seconds = -1;
    int64_t limit_micros = -1;
  };
  int SetAuthority(const std::string& pool, const std::string& action, const std::string& approver,
                   const AuthorityLimits& limits, bool remove);
  // Prices and budgets (clients/arbctl/money.cc). Money is in micros.
  int ListPrices(const std::string& at);
  // `burst_micros_per_gpu_hour` 0: bursts pay the price itself.
  int SetPrice(const std::string& model, const std::string& latency_class,
               int64_t micros_per_gpu_hour, const std::string& from,
               int64_t burst_micros_per_gpu_hour = 0);
  int ListBudgets();
  // Watt budgets (clients/arbctl/money.cc). `scope`: pool, rack or site.
  int ListPowerBudgets();
  int SetPowerBudget(const std::string& scope, const std::string& name, int64_t watts,
                     bool reclaim);
  int SetBudget(const std::string& team, int64_t soft_micros, int64_t hard_micros,
                const std::string& over);
  // Ledger (clients/arbctl/ledger.cc).
  int LedgerList(int64_t after_seq, int limit, const std::string& subject);
  int LedgerCheckpoints();
  // Recomputes the chain from genesis and checks every checkpoint's
  // signature with `public_key_file` (Ed25519 PEM; empty: signatures are
  // not checked). Exit 0 and "OK ..." when intact; 3 and the first bad entry
  // otherwise; 2 for a key, checkpoint or archive file it cannot use.
  // `from_checkpoint`: 0 from genesis, kLatestCheckpoint from the newest
  // signed checkpoint (genesis when there is none), else that checkpoint
  // (whose signature must verify).
  // `archive_dir`: "" for none; else the chain starts at genesis in the
  // archive files there (every "*.ledger", ordered by the seq of its first
  // entry; ledger/archive.h), read a page at a time, and continues into the
  // entries the server holds after the archive's last. Checkpoints in the
  // archive's range are matched against its entries. Needs
  // `from_checkpoint` 0.
  int LedgerVerify(const std::string& public_key_file, int64_t from_checkpoint = 0,
                   const std::string& archive_dir = "");
  // SLOs, incidents and chargeback (clients/arbctl/chargeback.cc). Times are
  // RFC 3339 or +/-<duration> from now; periods are rounded out to whole
  // hours.
  int SetSlo(const std::string& team, const std::string& service, const std::string& pool,
             int64_t p99_target_us, int64_t window_seconds, int64_t penalty_micros_per_minute);
  int ListSlos(const std::string& team);
  int ReportLatency(const std::string& team, const std::string& service, const std::string& start,
                    int64_t window_seconds, int64_t p50_us, int64_t p99_us,
                    int64_t requests_milli_per_second);
  int ListIncidents(const std::string& from, const std::string& to, const std::string& team);
  // `format`: table, json, csv, csv-lines or html; `output` "" for stdout.
  int Chargeback(const std::string& from, const std::string& to, const std::string& team,
                 const std::string& format, const std::string& output);
  int ClosePeriod(const std::string& from, const std::string& to);
  // Telemetry reads and idle policies (clients/arbctl/telemetry.cc).
  int Usage(const std::string& from, const std::string& to, const std::string& team);
  int ListIdle();
  int ListIdlePolicies();
  // `action`: report, notify or release.
  int SetIdlePolicy(const std::string& workload_class, int32_t threshold_milli,
                    int64_t window_seconds, const std::string& action, int64_t notice_seconds);
  int RightSize(const std::string& from, const std::string& to, const std::string& team);
  // Loads the demo organisation; what already exists is left as it is.
  int LoadDemo();
  // Role bindings, clusters and pools (clients/arbctl/access.cc). `scope`:
  // "org", "team:NAME" or "pool:NAME"; `role` and classes in lower case, as
  // the API's enum names without their prefix.
  int ListRoles();
  // Who the configured identity is to arbiterd: principal, groups, the
  // bindings that apply, platform admin or not (WhoAmI).
  int WhoAmI();
  int GrantRole(const std::string& subject, const std::string& role, const std::string& scope,
                bool revoke);
  int CreateCluster(const std::string& name, const std::string& description);
  int CreatePool(const PoolOptions& options);

 private:
  void Deadline(grpc::ClientContext& ctx) const;
  int Fail(const grpc::Status& status) const;
  // Every checkpoint, page by page, into `out`; false (after printing the
  // error) when a page fails.
  bool AllCheckpoints(v1::ListCheckpointsResponse* out) const;
  // Continues `walk` with the entries the server holds after its head, page
  // by page, until the end or a break; false (after printing the error)
  // when a call fails.
  bool VerifyStoredEntries(LedgerWalk& walk) const;

  // Makes one unary call under the deadline. A follower's answer naming the
  // leader ("leader=host:port", docs/operations.md) sends the call there, up
  // to three times. On failure prints the error with a hint and returns
  // false.
  template <typename Stub, typename Req, typename Resp>
  bool Call(const std::unique_ptr<Stub>& stub,
            grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*), const Req& req,
            Resp* resp) const {
    grpc::Status status;
    for (int hop = 0;; ++hop) {
      grpc::ClientContext ctx;
      Deadline(ctx);
      status = ((*stub).*method)(&ctx, req, resp);
      const std::string leader = LeaderNamedIn(status);
      if (leader.empty() || hop == 3) break;
      Connect(leader);
    }
    if (!status.ok()) Fail(status);
    return status.ok();
  }
  // Points every stub at `endpoint`.
  void Connect(const std::string& endpoint) const;
  // The leader's address a follower named in `status`; "" when none.
  static std::string LeaderNamedIn(const grpc::Status& status);
  void PrintRequest(const v1::CapacityRequest& r) const;
  // Prints a response as JSON (proto3 JSON mapping) or YAML (--output).
  void PrintJsonMessage(const google::protobuf::Message& m) const;
  // Prints a table, or its CSV with --output csv.
  void PrintTable(const Table& t) const;

  GlobalOptions options_;
  // Replaced when a follower names the leader (Connect).
  mutable std::string endpoint_;
  mutable std::unique_ptr<v1::InventoryService::Stub> inventory_;
  mutable std::unique_ptr<v1::GovernanceService::Stub> governance_;
  mutable std::unique_ptr<v1::AllocationService::Stub> allocation_;
  mutable std::unique_ptr<v1::LedgerService::Stub> ledger_;
  mutable std::unique_ptr<v1::ChargebackService::Stub> chargeback_;
  mutable std::unique_ptr<v1::TelemetryService::Stub> telemetry_;
};

}  // namespace arbiter::arbctl
