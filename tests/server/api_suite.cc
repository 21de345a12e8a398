#include "tests/server/api_suite.h"

#include <algorithm>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <unistd.h>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/chargeback.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"
#include "arbiter/v1/ledger.grpc.pb.h"
#include "arbiter/v1/telemetry.grpc.pb.h"
#include "server/convert.h"
#include "store/store.h"
#include "tests/server/api_cases.h"
#include "tests/testing/api_seed.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::ApiCase;
using ::arbiter::testing::Mutation;
using Code = grpc::StatusCode;

constexpr char kAdmin[] = "spiffe://arbiter.local/admin";

// The valid base request of each method, in the order the suite runs them
// (a method's base is sent after its cases, and later bases may rely on
// earlier ones: the node registered before it is updated, the claim before
// its renewal). Text format; $NOW is the clock's Unix seconds, $GET,
// $CLAIM, $RELEASE, $APPROVE and $DENY ids of requests the suite makes
// first.
struct Base {
  const char* method;  // Service.Method
  const char* text;
  // Fields made unique in each case ("-<n>" appended to the base's value),
  // unless the case is about the field: the key of a request, the name of a
  // thing created, so that a case that is accepted does not turn the next
  // one into ALREADY_EXISTS.
  std::vector<const char*> fresh = {};
  // Send the base before the cases: it takes something only one may hold
  // (a claim), or removes what a case with a valid value would remove
  // first (a rule, a delegation).
  bool base_first = false;
};

// A node with a MIG-capable GPU that reports its placements.
constexpr char kAdvNode[] = R"(
  node { cluster: "east" name: "adv-node" pool: "serving" cpu_milli: 1000 memory_mib: 1024
         topology_domain: "rack-1"
         gpus { index: 0 model: "H100-80GB" uuid: "GPU-adv-0"
                reported_mig_placements { profile: "3g.40gb" start_slots: 0 start_slots: 4 } } })";

const Base kBases[] = {
    {"InventoryService.ListGpuModels", ""},
    {"InventoryService.SetGpuModel",
     R"(gpu_model { name: "adv-gpu" memory_mib: 81920 sm_count: 132 tdp_watts: 700
                    mig_capable: true vendor: "nvidia" nvlink_domain_size: 8
                    mig_profiles { name: "3g.40gb" profile_id: 9 memory_slices: 4
                                   compute_slices: 3 sm_count: 60 memory_mib: 40192
                                   max_instances: 2 start_slots: 0 start_slots: 4 } })",
     {"gpu_model.name"}},
    {"InventoryService.CreateCluster",
     R"(cluster { name: "adv-cluster" description: "d" })",
     {"cluster.name"}},
    {"InventoryService.ListClusters", ""},
    {"InventoryService.CreatePool",
     R"(pool { name: "adv-pool" latency_class: LATENCY_CLASS_SERVING description: "d"
               lends_to: WORKLOAD_CLASS_TRAINING reclaim_grace_seconds: 60
               class_rules { workload_class: WORKLOAD_CLASS_EXPERIMENTATION
                             admission: CLASS_ADMISSION_BORROW }
               spot_grace_seconds: 10
               headroom { gpu_model: "H100-80GB" milli_gpus: 1000 } max_burst_seconds: 600
               queueing: QUEUEING_POLICY_BACKFILL starvation_limit_seconds: 3600
               claim_deadline_seconds: 60 lease_seconds: 60
               proactive_reclaim: true cold_start_seconds: 120 })",
     {"pool.name"}},
    {"InventoryService.ListPools", ""},
    {"InventoryService.GetServingForecast", R"(pool: "adv-pool" hours: 6)"},
    {"InventoryService.RegisterNode", kAdvNode, {"node.name", "node.gpus[0].uuid"}},
    {"InventoryService.ListNodes", R"(cluster: "east" pool: "serving")"},
    {"InventoryService.UpdateNode", kAdvNode},
    {"InventoryService.NodeHeartbeat", R"(cluster: "east" name: "adv-node")"},
    {"InventoryService.CordonNode", R"(cluster: "east" name: "adv-node")"},
    {"InventoryService.UncordonNode", R"(cluster: "east" name: "adv-node")"},
    {"InventoryService.DrainNode", R"(cluster: "east" name: "adv-node" grace_seconds: 60)"},
    {"InventoryService.MarkNodeFailed", R"(cluster: "east" name: "adv-node")"},
    {"InventoryService.RemoveNode", R"(cluster: "east" name: "adv-node")"},
    {"GovernanceService.CreateTeam",
     R"(team { name: "adv-team" parent: "inference" weight_milli: 1000 })",
     {"team.name"}},
    {"GovernanceService.ListTeams", ""},
    {"GovernanceService.SetQuota",
     R"(quota { team: "adv-team" pool: "serving" nominal_milli: 1000 borrowing_limit_milli: 500
                lending_limit_milli: 500 cohort_lending_limit_milli: 500
                cohort_borrowing_limit_milli: 500 })"},
    {"GovernanceService.ListQuotas", R"(team: "inference")"},
    {"GovernanceService.ImportOrganisation",
     R"(teams { name: "adv-imported" parent: "inference" weight_milli: 1000 }
        quotas { team: "inference" pool: "serving" nominal_milli: 8000 })",
     {"teams[0].name"}},
    {"GovernanceService.SetCoexistenceRule",
     R"(rule { class_a: WORKLOAD_CLASS_TRAINING class_b: WORKLOAD_CLASS_INFERENCE
               gpu_isolation: GPU_ISOLATION_MIG_ONLY same_node: true })"},
    {"GovernanceService.ListCoexistenceRules", ""},
    {"GovernanceService.GrantRole",
     R"(binding { subject: "spiffe://arbiter.local/adv" role: ROLE_TEAM_MEMBER
                  scope_kind: SCOPE_KIND_TEAM scope: "inference" })"},
    {"GovernanceService.ListRoleBindings", ""},
    {"GovernanceService.WhoAmI", ""},
    {"GovernanceService.RevokeRole",
     R"(binding { subject: "spiffe://arbiter.local/adv" role: ROLE_TEAM_MEMBER
                  scope_kind: SCOPE_KIND_TEAM scope: "inference" })"},
    {"GovernanceService.SetAuthorityRule",
     R"(rule { pool: "serving" action: APPROVAL_ACTION_LARGE
               approver: "spiffe://arbiter.local/adv-approver" threshold_milli: 1000000 })",
     {"rule.approver"}},
    {"GovernanceService.ListAuthorityRules", ""},
    {"GovernanceService.RemoveAuthorityRule",
     R"(rule { pool: "serving" action: APPROVAL_ACTION_LARGE
               approver: "spiffe://arbiter.local/adv-approver" threshold_milli: 1000000 })",
     {},
     true},
    {"GovernanceService.SetPrice",
     R"(price { gpu_model: "L4" latency_class: LATENCY_CLASS_SERVING
                micros_per_gpu_hour: 1000000 effective_from { seconds: $NOW } })",
     {},
     true},
    {"GovernanceService.ListPrices", R"(at { seconds: $NOW })"},
    {"GovernanceService.SetBudget",
     R"(budget { team: "inference" soft_limit_micros: 1000000000
                 hard_limit_micros: 2000000000 over: OVER_BUDGET_DENY })"},
    {"GovernanceService.ListBudgets", R"(month { seconds: $NOW })"},
    {"GovernanceService.SetPowerBudget",
     R"(power_budget { scope: POWER_SCOPE_POOL name: "serving" watts: 100000 reclaim: true })"},
    {"GovernanceService.ListPowerBudgets", ""},
    {"GovernanceService.Delegate",
     R"(delegation { from: "spiffe://arbiter.local/admin" to: "spiffe://arbiter.local/deputy"
                     expires_at { seconds: $DAY_AFTER } })"},
    {"GovernanceService.ListDelegations", ""},
    {"GovernanceService.RevokeDelegation",
     R"(delegation { from: "spiffe://arbiter.local/admin" to: "spiffe://arbiter.local/deputy" })",
     {},
     true},
    {"AllocationService.RequestCapacity",
     R"(idempotency_key: "adv-base" team: "inference" pool: "serving"
        workload_class: WORKLOAD_CLASS_INFERENCE members: 1
        shape { fraction { gpu_milli: 250 memory_mib: 4096 } } description: "base")",
     {"idempotency_key"}},
    {"AllocationService.GetRequest", "id: $GET"},
    {"AllocationService.ListRequests",
     R"(team: "inference" state: REQUEST_STATE_ADMITTED page_size: 10)"},
    {"AllocationService.WatchAllocations", R"(team: "inference" pool: "serving")"},
    {"AllocationService.ClaimAllocation", R"(id: $CLAIM holder: "pod-a" members: 0)", {}, true},
    {"AllocationService.RenewLease", R"(id: $CLAIM holder: "pod-a")"},
    {"AllocationService.ApproveRequest", "id: $APPROVE"},
    {"AllocationService.DenyRequest", R"(id: $DENY reason: "no")"},
    {"AllocationService.ReleaseAllocation", "id: $RELEASE"},
    {"ChargebackService.SetSlo",
     R"(slo { team: "inference" service: "chat" pool: "serving" p99_target_us: 50000
              window_seconds: 60 penalty_micros_per_minute: 1000 })"},
    {"ChargebackService.ListSlos", R"(team: "inference")"},
    {"ChargebackService.ReportLatency",
     R"(window { team: "inference" service: "chat" start { seconds: $MINUTE_AGO }
                 end { seconds: $NOW } p50_us: 1000 p99_us: 2000
                 requests_milli_per_second: 1000 })"},
    {"ChargebackService.ListIncidents",
     R"(period { from { seconds: $DAY_AGO } to { seconds: $NOW } } team: "inference")"},
    {"ChargebackService.GetChargeback",
     R"(period { from { seconds: $DAY_AGO } to { seconds: $NOW } } team: "inference")"},
    {"ChargebackService.ClosePeriod",
     R"(period { from { seconds: $TWO_DAYS_AGO } to { seconds: $DAY_AGO } })"},
    {"TelemetryService.StreamSamples",
     R"(cluster: "east" node: "n0" sent_at { seconds: $NOW } interval_seconds: 10
        samples { at { seconds: $NOW } gpu_index: 0 util_milli: 500 engine_active_milli: 400
                  fb_used_mib: 100 fb_free_mib: 100 power_mw: 1000 })"},
    {"TelemetryService.GetUtilization",
     R"(from { seconds: $DAY_AGO } to { seconds: $NOW } team: "inference")"},
    {"TelemetryService.ListIdleAllocations", ""},
    {"TelemetryService.GetRightSizing",
     R"(from { seconds: $DAY_AGO } to { seconds: $NOW } team: "inference" headroom_milli: 100)"},
    {"TelemetryService.SetIdlePolicy",
     R"(policy { workload_class: WORKLOAD_CLASS_TRAINING threshold_milli: 50 window_seconds: 3600
                 action: "notify" notice_seconds: 300 })"},
    {"TelemetryService.ListIdlePolicies", ""},
    {"LedgerService.ListLedgerEntries", "page_size: 10"},
    {"LedgerService.ListCheckpoints", "page_size: 10"},
};

// Fields that name a thing which must exist: they also get a name (or id)
// that names nothing.
const std::vector<std::string> kReferences = {
    "team",  "pool",   "cluster", "node",     "parent",  "gpu_model",  "gpu_models",
    "model", "id",     "scope",   "approver", "service", "request_id", "mig_profile",
    "name",  "holder", "from",    "to",       "subject", "profile"};

// Values that are valid for a field although the generator produced them as
// bad ones: (method, field path, mutation) -> why. Everything else sent to
// a method that writes must be refused.
struct Valid {
  const char* method;
  const char* field;
  Mutation mutation;
  const char* why;
};

// An empty method matches every method; a field matches its path or the
// end of one ("description" matches "pool.description").
const Valid kValid[] = {
    {"", "description", Mutation::kEmpty, "a description is optional"},
    {"", "topology_domain", Mutation::kEmpty, "optional"},
    {"", "uuid", Mutation::kEmpty, "a GPU's UUID is optional"},
    {"", "reported_mig_placements", Mutation::kRepeatedEmpty, "optional: the model's own table"},
    {"", "profile_id", Mutation::kZero, "NVML's id of the 7g profiles is 0"},
    {"", "vendor", Mutation::kEmpty, "empty means nvidia"},
    {"", "nvlink_domain_size", Mutation::kZero, "0 when unknown or none"},
    {"", "lends_to", Mutation::kRepeatedEmpty, "a serving pool may lend to no class"},
    {"", "reclaim_grace_seconds", Mutation::kZero, "0: reclaim at once"},
    {"", "class_rules", Mutation::kRepeatedEmpty, "no rules: the latency class's defaults"},
    {"", "spot_grace_seconds", Mutation::kZero, "0: spot work goes at once"},
    {"", "headroom", Mutation::kRepeatedEmpty, "no headroom (refused only with a burst limit)"},
    {"", "max_burst_seconds", Mutation::kZero, "0: no bursts"},
    {"", "queueing", Mutation::kUnspecifiedEnum, "unset: the default policy"},
    {"", "starvation_limit_seconds", Mutation::kZero, "0: none"},
    {"", "claim_deadline_seconds", Mutation::kZero, "0: no claim required"},
    {"", "lease_seconds", Mutation::kZero, "0: no lease"},
    {"", "proactive_reclaim", Mutation::kFlipped, "off: the pool reclaims only when asked"},
    {"", "cold_start_seconds", Mutation::kZero, "0: replicas serve at once"},
    {"InventoryService.GetServingForecast", "hours", Mutation::kZero, "0: 24 hours"},
    {"InventoryService.DrainNode", "grace_seconds", Mutation::kZero, "0: the pool's reclaim grace"},
    {"InventoryService.MarkNodeFailed", "failed_at", Mutation::kTimePast,
     "a failure is reported after it happened; only the future is refused"},
    {"", "parent", Mutation::kEmpty, "a root team"},
    {"", "weight_milli", Mutation::kZero, "0 on create: the default weight"},
    {"", "nominal_milli", Mutation::kZero, "a quota of nothing (borrowing only)"},
    {"", "borrowing_limit_milli", Mutation::kZero, "0: no borrowing"},
    {"", "borrowing_limit_milli", Mutation::kMinusOne, "-1: no limit"},
    {"", "lending_limit_milli", Mutation::kZero, "0: lends nothing"},
    {"", "lending_limit_milli", Mutation::kMinusOne, "-1: lends all of nominal"},
    {"", "cohort_lending_limit_milli", Mutation::kZero, "0: the subtree lends nothing outside"},
    {"", "cohort_lending_limit_milli", Mutation::kMinusOne, "-1: the subtree lends all"},
    {"", "cohort_borrowing_limit_milli", Mutation::kZero,
     "0: the subtree borrows nothing from outside"},
    {"", "cohort_borrowing_limit_milli", Mutation::kMinusOne, "-1: no limit of its own"},
    {"GovernanceService.ImportOrganisation", "teams", Mutation::kRepeatedEmpty,
     "an import of quotas only"},
    {"GovernanceService.ImportOrganisation", "quotas", Mutation::kRepeatedEmpty,
     "an import of teams only"},
    {"GovernanceService.ImportOrganisation", "teams", Mutation::kRepeatedDuplicate,
     "the first team's name is made unique for the case, so the two teams differ"},
    {"", "subject", Mutation::kAbsent, "principals are not registered"},
    {"", "approver", Mutation::kAbsent, "principals are not registered"},
    {"GovernanceService.Delegate", "to", Mutation::kAbsent, "principals are not registered"},
    {"GovernanceService.RevokeDelegation", "to", Mutation::kAbsent,
     "Delegate's case of the same name delegated to it"},
    {"GovernanceService.SetAuthorityRule", "pool", Mutation::kEmpty, "an organisation-wide rule"},
    {"", "limit_milli", Mutation::kMinusOne, "-1: any"},
    {"", "limit_seconds", Mutation::kMinusOne, "-1: any"},
    {"", "limit_micros", Mutation::kMinusOne, "-1: any"},
    {"", "threshold_milli", Mutation::kZero, "every request needs approval"},
    {"GovernanceService.SetPrice", "micros_per_gpu_hour", Mutation::kZero, "free capacity"},
    {"GovernanceService.SetPrice", "effective_from", Mutation::kTimePast,
     "prices are versioned: one may start in the past"},
    {"GovernanceService.SetBudget", "soft_limit_micros", Mutation::kZero, "warn from the start"},
    {"GovernanceService.SetPowerBudget", "watts", Mutation::kZero,
     "a budget of nothing: no admission"},
    {"GovernanceService.SetPowerBudget", "name", Mutation::kAbsent,
     "a rack is a topology domain, which need not be registered yet"},
    {"AllocationService.RequestCapacity", "priority", Mutation::kMinusOne, "-1000..1000"},
    {"AllocationService.ClaimAllocation", "holder", Mutation::kAbsent,
     "a holder names a workload, not a registered thing"},
    {"AllocationService.ClaimAllocation", "members", Mutation::kRepeatedEmpty,
     "no members: every member"},
    {"ChargebackService.SetSlo", "service", Mutation::kAbsent, "an SLO declares its service"},
    {"ChargebackService.SetSlo", "penalty_micros_per_minute", Mutation::kZero,
     "an SLO that charges nothing"},
    {"ChargebackService.ReportLatency", "service", Mutation::kAbsent,
     "SetSlo's case of the same name declared an SLO for it"},
    {"ChargebackService.ReportLatency", "p50_us", Mutation::kZero, "a fast service"},
    {"ChargebackService.ReportLatency", "requests_milli_per_second", Mutation::kZero,
     "an idle window"},
    {"TelemetryService.SetIdlePolicy", "notice_seconds", Mutation::kZero, "0 to 1 day"},
    {"TelemetryService.StreamSamples", "samples", Mutation::kRepeatedDuplicate,
     "a duplicate sample is counted, the first stored"},
    {"TelemetryService.StreamSamples", "at", Mutation::kTimePast,
     "a sample within the retention is stored late"},
};

// A method that creates a thing takes a new name for it.
std::vector<std::string> ReferencesOf(const std::string& method) {
  const std::string name = method.substr(method.find('.') + 1);
  const bool creates = absl::StartsWith(name, "Create") || absl::StartsWith(name, "Register") ||
                       name == "SetGpuModel" || name == "ImportOrganisation";
  std::vector<std::string> refs = kReferences;
  if (creates) refs.erase(std::remove(refs.begin(), refs.end(), "name"), refs.end());
  return refs;
}

// Fields the API documents as output only, ignored on input
// (types.proto): any value is accepted and changes nothing it stores.
const char* const kOutputOnly[] = {
    "node.state",      "node.drain_deadline", "node.failed_at",
    "node.heartbeats", "allocated_milli",     "allocated_memory_mib",
    "exclusive",       "mig_instances",       "effective_class_rules",
};

bool IsOutputOnly(const std::string& field) {
  for (const char* name : kOutputOnly) {
    if (absl::StrContains(field, name)) return true;
  }
  return false;
}

bool IsRead(const std::string& method) {
  const std::string name = method.substr(method.find('.') + 1);
  return absl::StartsWith(name, "List") || absl::StartsWith(name, "Get") ||
         absl::StartsWith(name, "Watch");
}

enum class Expect { kRefused, kRefusedOrAccepted, kMalformed };

Expect ExpectationOf(const std::string& method, const ApiCase& c) {
  if (c.mutation == Mutation::kInvalidUtf8) return Expect::kMalformed;
  const bool output_only_window =
      !c.names.empty() && IsOutputOnly(absl::StrCat(c.field, ".", c.names[0]));
  if (c.mutation == Mutation::kFlipped || IsOutputOnly(c.field) || output_only_window) {
    return Expect::kRefusedOrAccepted;
  }
  for (const Valid& v : kValid) {
    if ((v.method[0] == '\0' || method == v.method) &&
        (c.field == v.field || absl::EndsWith(c.field, absl::StrCat(".", v.field))) &&
        c.mutation == v.mutation) {
      return Expect::kRefusedOrAccepted;
    }
  }
  if (IsRead(method)) {
    // A filter that matches nothing is an empty answer; a value that no
    // filter can hold is refused.
    switch (c.mutation) {
      case Mutation::kUnknownEnum:
      case Mutation::kMinusOne:
      case Mutation::kTypeMin:
      case Mutation::kTimeOutOfRange:
      case Mutation::kTimeInvalidNanos:
      case Mutation::kWindowReversed:
        return Expect::kRefused;
      default:
        return Expect::kRefusedOrAccepted;
    }
  }
  return Expect::kRefused;
}

// PERMISSION_DENIED is the refusal of a value the caller may not give (the
// authority of another to delegate); the suite calls as a platform admin.
bool IsRefusal(Code code) {
  return code == Code::INVALID_ARGUMENT || code == Code::NOT_FOUND ||
         code == Code::PERMISSION_DENIED || code == Code::FAILED_PRECONDITION ||
         code == Code::OUT_OF_RANGE || code == Code::ALREADY_EXISTS;
}

// `path` without its element indices: "node.gpus[0].model" -> "node.gpus.model".
std::string WithoutIndices(const std::string& path) {
  std::string out;
  bool in_index = false;
  for (char ch : path) {
    if (ch == '[') in_index = true;
    if (!in_index) out.push_back(ch);
    if (ch == ']') in_index = false;
  }
  return out;
}

// True when `prefix` is `path` or a message on the way to it.
bool IsPathPrefix(const std::string& prefix, const std::string& path) {
  return path == prefix || absl::StartsWith(path, prefix + ".");
}

// A refusal names the field when its message starts with the field's path
// ("shape.fraction.gpu_milli: ..."), with the path of a message holding it
// ("binding: no such role binding") or of a field inside it
// ("failed_at.nanos: ..."), with a field of a message the case had to make,
// or with the field's name as a step of its path; or when the rest of the
// message gives the field's path. A message that starts with no path names
// it in its text. A reference to nothing may be named
// by its value.
bool NamesField(const ApiCase& c, const std::string& message) {
  if (c.mutation == Mutation::kAbsent &&
      (absl::StrContains(message, "absent-ref") || absl::StrContains(message, "987654321"))) {
    return true;
  }
  const size_t colon = message.find(": ");
  const std::string lead = colon == std::string::npos ? "" : message.substr(0, colon);
  if (lead.empty() || absl::StrContains(lead, " ")) {
    for (const std::string& name : c.names) {
      if (absl::StrContains(message, name)) return true;
    }
    return false;
  }
  const std::string named = WithoutIndices(lead);
  const std::string field = WithoutIndices(c.field);
  if (IsPathPrefix(named, field) || IsPathPrefix(field, named)) return true;
  if (!c.made.empty() && IsPathPrefix(WithoutIndices(c.made), named)) return true;
  for (const std::string& name : c.names) {
    if (IsPathPrefix(name, named) || absl::StrContains(named, "." + name)) return true;
  }
  // A rule between two fields, named by the other one's path
  // ("workload_ended_at: required with workload_started_at").
  return absl::StrContains(message.substr(colon), c.field);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// A channel as the platform admin, over mutual TLS.
std::shared_ptr<grpc::Channel> AdminChannel(int port, const std::string& certs) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(certs + "/ca.pem");
  ssl.pem_cert_chain = ReadFile(certs + "/admin.pem");
  ssl.pem_private_key = ReadFile(certs + "/admin.key");
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::SslCredentials(ssl));
}

class Client {
 public:
  Client(int port, const std::string& certs)
      : channel_(AdminChannel(port, certs)), stub_(channel_) {}

  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

  // One call of `method` ("Service.Method") with `body` as its request.
  // A streaming call is accepted (OK) once the server sends a message or
  // keeps the stream open for 250 ms (a refusal comes at once; under the
  // suite's simulated clock no bookmark falls due).
  grpc::Status Call(const google::protobuf::MethodDescriptor& method, const std::string& body,
                    std::string* response = nullptr) {
    const std::string path = absl::StrCat("/", method.service()->full_name(), "/", method.name());
    if (method.client_streaming() || method.server_streaming()) {
      return Stream(path, body, method.server_streaming(), response);
    }
    grpc::Slice slice(body);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    std::promise<grpc::Status> done;
    stub_.UnaryCall(&ctx, path, grpc::StubOptions(), &request, &reply,
                    [&done](grpc::Status status) { done.set_value(std::move(status)); });
    grpc::Status status = done.get_future().get();
    if (status.ok() && response != nullptr) *response = Bytes(reply);
    return status;
  }

 private:
  static std::string Bytes(const grpc::ByteBuffer& buffer) {
    std::vector<grpc::Slice> slices;
    std::string out;
    if (!buffer.Dump(&slices).ok()) return out;
    for (const grpc::Slice& s : slices)
      out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    return out;
  }

  grpc::Status Stream(const std::string& path, const std::string& body, bool server_streaming,
                      std::string* response) {
    grpc::CompletionQueue cq;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(250));
    auto next = [&cq] {
      void* tag = nullptr;
      bool ok = false;
      cq.Next(&tag, &ok);
      return ok;
    };
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub_.PrepareCall(&ctx, path, &cq);
    call->StartCall(reinterpret_cast<void*>(1));
    next();
    grpc::Slice slice(body);
    grpc::ByteBuffer request(&slice, 1);
    call->Write(request, reinterpret_cast<void*>(2));
    next();
    call->WritesDone(reinterpret_cast<void*>(3));
    next();
    grpc::ByteBuffer reply;
    call->Read(&reply, reinterpret_cast<void*>(4));
    const bool got_message = next();
    if (got_message && response != nullptr) *response = Bytes(reply);
    if (got_message && server_streaming) ctx.TryCancel();
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(5));
    next();
    if (got_message) return grpc::Status::OK;
    // A watch the server kept open until the deadline was accepted.
    if (server_streaming && status.error_code() == Code::DEADLINE_EXCEEDED) {
      return grpc::Status::OK;
    }
    return status;
  }

  std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub stub_;
};

const google::protobuf::MethodDescriptor* FindMethod(const std::string& name) {
  return google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
      absl::StrCat("arbiter.v1.", name));
}

// The engine's in-memory state, read on its own thread.
std::string EngineDigest(app::Application& app) {
  std::promise<std::string> digest;
  auto out = std::make_shared<std::string>();
  app.arbiter().Submit(
      [out, &app](core::State& state, absl::Time, core::ChangeSet&) {
        auto add = [&out](const google::protobuf::Message& m) {
          absl::StrAppend(out.get(), m.SerializeAsString(), "|");
        };
        for (const core::Node& n : state.nodes()) {
          v1::Node p;
          ToProto(n, &p);
          add(p);
        }
        for (const auto& [name, model] : state.gpu_models()) {
          v1::GpuModel p;
          ToProto(model, &p);
          add(p);
        }
        for (const auto& [name, team] : state.teams()) {
          v1::Team p;
          ToProto(team, &p);
          add(p);
        }
        std::vector<int64_t> ids;
        for (const auto& [id, r] : state.live_requests()) ids.push_back(id);
        std::sort(ids.begin(), ids.end());
        for (int64_t id : ids) {
          v1::CapacityRequest p;
          ToProto(state.live_requests().at(id), app.nodes(), &p);
          add(p);
        }
        for (const core::RoleBinding& b : state.role_bindings()) {
          v1::RoleBinding p;
          ToProto(b, &p);
          add(p);
        }
        for (const core::AuthorityRule& r : state.authority_rules()) {
          v1::AuthorityRule p;
          ToProto(r, &p);
          add(p);
        }
        for (const core::Delegation& d : state.delegations()) {
          v1::Delegation p;
          ToProto(d, &p);
          add(p);
        }
        absl::StrAppend(out.get(), "slos:", state.slos().size());
        return absl::OkStatus();
      },
      [out, &digest](const absl::Status& status) {
        digest.set_value(status.ok() ? *out : absl::StrCat("error: ", status.ToString()));
      });
  return digest.get_future().get();
}

std::string Substitute(const std::string& text, const std::map<std::string, int64_t>& values) {
  std::vector<std::pair<std::string, std::string>> replacements;
  for (const auto& [name, value] : values) replacements.emplace_back(name, absl::StrCat(value));
  // Longest first, so that $DAY_AGO is not read as $DAY.
  std::sort(replacements.begin(), replacements.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return absl::StrReplaceAll(text, replacements);
}

// Makes the requests the bases refer to; returns their ids by placeholder.
std::map<std::string, int64_t> Prepare(Client& client, Clock& clock) {
  const int64_t now = absl::ToUnixSeconds(clock.TimeNow());
  std::map<std::string, int64_t> values = {
      {"$NOW", now},
      {"$MINUTE_AGO", now - 60},
      {"$DAY_AGO", now - 86'400},
      {"$TWO_DAYS_AGO", now - 2 * 86'400},
      {"$DAY_AFTER", now + 86'400},
  };
  auto stubs_inventory = v1::InventoryService::NewStub(client.channel());
  auto stubs_governance = v1::GovernanceService::NewStub(client.channel());
  testing::SeedSpec seed;
  seed.nodes = 2;
  seed.nominal_milli = 8000;
  EXPECT_TRUE(testing::SeedOrganisation(*stubs_inventory, *stubs_governance, seed).ok());
  auto allocation = v1::AllocationService::NewStub(client.channel());
  auto request = [&](const std::string& key, int whole_gpus) -> int64_t {
    v1::RequestCapacityRequest r;
    r.set_idempotency_key(key);
    r.set_team("inference");
    r.set_pool("serving");
    r.set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
    r.set_members(1);
    if (whole_gpus > 0) {
      r.mutable_shape()->set_whole_gpus(whole_gpus);
    } else {
      r.mutable_shape()->mutable_fraction()->set_gpu_milli(250);
      r.mutable_shape()->mutable_fraction()->set_memory_mib(4096);
    }
    grpc::ClientContext ctx;
    v1::RequestCapacityResponse resp;
    grpc::Status status = allocation->RequestCapacity(&ctx, r, &resp);
    EXPECT_TRUE(status.ok()) << key << ": " << status.error_message();
    return resp.request().id();
  };
  values["$GET"] = request("adv-get", 0);
  values["$CLAIM"] = request("adv-claim", 0);
  values["$RELEASE"] = request("adv-release", 0);
  // Requests of two GPUs wait for the pool authority's approval.
  v1::SetAuthorityRuleRequest rule;
  rule.mutable_rule()->set_pool("serving");
  rule.mutable_rule()->set_action(v1::APPROVAL_ACTION_LARGE);
  rule.mutable_rule()->set_approver(kAdmin);
  rule.mutable_rule()->set_threshold_milli(1500);
  {
    grpc::ClientContext ctx;
    v1::SetAuthorityRuleResponse resp;
    EXPECT_TRUE(stubs_governance->SetAuthorityRule(&ctx, rule, &resp).ok());
  }
  values["$APPROVE"] = request("adv-approve", 2);
  values["$DENY"] = request("adv-deny", 2);
  return values;
}

// Sets the field at `path` ("a.b[0].c") of `m` to its value with `suffix`
// appended. REQUIRES: a text field that `m` has along the path.
void AppendToField(google::protobuf::Message* m, const std::string& path,
                   const std::string& suffix) {
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    int index = -1;
    std::string name(part);
    if (const size_t bracket = name.find('['); bracket != std::string::npos) {
      index = std::stoi(name.substr(bracket + 1));
      name = name.substr(0, bracket);
    }
    const google::protobuf::FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(name);
    const google::protobuf::Reflection* r = m->GetReflection();
    if (f == nullptr || (index >= 0 && index >= r->FieldSize(*m, f))) return;
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      m = index >= 0 ? r->MutableRepeatedMessage(m, f, index) : r->MutableMessage(m, f);
      continue;
    }
    if (index >= 0) {
      r->SetRepeatedString(m, f, index, r->GetRepeatedString(*m, f, index) + suffix);
    } else {
      r->SetString(m, f, r->GetString(*m, f) + suffix);
    }
  }
}

// The case's body with each `fresh` field but the case's own made unique.
// A body that does not parse (invalid UTF-8) is sent as it is.
std::string Freshen(const google::protobuf::Message& prototype, const std::string& body,
                    const std::vector<const char*>& fresh, const std::string& field, int serial) {
  std::unique_ptr<google::protobuf::Message> m(prototype.New());
  if (!m->ParseFromString(body)) return body;
  for (const char* path : fresh) {
    if (field != path) AppendToField(m.get(), path, absl::StrCat("-", serial));
  }
  return m->SerializeAsString();
}

// Repeated message fields that `m` (or a message beneath it) leaves empty:
// the generator would reach their fields through a default-made element,
// whose refusal may name another field of it.
void EmptyRepeatedMessages(const google::protobuf::Message& m, const std::string& prefix,
                           std::vector<std::string>* out) {
  const google::protobuf::Descriptor* type = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < type->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = type->field(i);
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE ||
        f->message_type()->full_name() == "google.protobuf.Timestamp") {
      continue;
    }
    const std::string path = absl::StrCat(prefix, f->name());
    if (f->is_repeated()) {
      if (r->FieldSize(m, f) == 0) {
        out->push_back(path);
      } else {
        EmptyRepeatedMessages(r->GetRepeatedMessage(m, f, 0), path + "[0].", out);
      }
    } else {
      EmptyRepeatedMessages(r->GetMessage(m, f), path + ".", out);
    }
  }
}

// What a case's answer means, and what is wrong with it (empty: nothing).
struct Outcome {
  bool accepted = false;
  std::string error;
};

// A batch of samples is answered OK with what was stored; a sample that
// is not stored (unknown GPU, out of the retention, ...) is counted, which
// is how the telemetry API refuses one.
bool StoredNothing(const std::string& method, const std::string& response) {
  if (method != "TelemetryService.StreamSamples") return false;
  v1::StreamSamplesResponse r;
  return r.ParseFromString(response) && r.stored() == 0;
}

Outcome Judge(const std::string& method, const ApiCase& c, const grpc::Status& status,
              const std::string& response) {
  const Expect expect = ExpectationOf(method, c);
  Outcome out;
  if (status.ok() && !StoredNothing(method, response)) {
    out.accepted = true;
    if (expect != Expect::kRefusedOrAccepted) out.error = "accepted a value it must refuse";
    return out;
  }
  if (status.ok()) return out;  // Counted and not stored.
  const std::string answer =
      absl::StrCat("code ", status.error_code(), " \"", status.error_message(), "\"");
  if (expect == Expect::kMalformed) {
    if (status.error_code() != Code::INTERNAL)
      out.error = "a body that does not parse got " + answer;
    return out;
  }
  if (!IsRefusal(status.error_code())) {
    out.error = "refused with a code that is no refusal of the input: " + answer;
  } else if (expect == Expect::kRefused && !NamesField(c, status.error_message())) {
    // A valid value may be refused for the state it meets (a claim another
    // holder has); a bad one must be refused for itself.
    out.error = "the refusal does not name the field: " + answer;
  }
  return out;
}

void SendBase(Client& client, const google::protobuf::MethodDescriptor& method,
              const google::protobuf::Message& base) {
  const grpc::Status status = client.Call(method, base.SerializeAsString());
  EXPECT_TRUE(status.ok()) << method.full_name() << " base: " << status.error_code() << " "
                           << status.error_message();
}

// The base gives an element of every repeated message (output-only ones
// aside), so that each case differs from it in one field, and every field
// of the request is reached by a case.
void CheckBaseReachesEveryField(const std::string& method, const google::protobuf::Message& base) {
  std::vector<std::string> empty;
  EmptyRepeatedMessages(base, "", &empty);
  for (const std::string& path : empty) {
    EXPECT_TRUE(IsOutputOnly(path)) << method << ": the base gives no element of " << path;
  }
  std::set<std::string> reached;
  for (const ApiCase& c : testing::GenerateCases(base, absl::Now(), {})) reached.insert(c.field);
  for (const std::string& path : testing::FieldPaths(*base.GetDescriptor())) {
    EXPECT_TRUE(reached.contains(path)) << method << ": no case for " << path;
  }
}

struct Tally {
  int cases = 0;
  int refused = 0;
  int accepted = 0;
  int malformed = 0;
};

}  // namespace

std::string StoreReadsDigest(store::Store& store, const app::NodeDirectory& nodes) {
  std::string out;
  auto add = [&out](const google::protobuf::Message& m) {
    absl::StrAppend(&out, m.SerializeAsString(), "|");
  };
  auto each = [&out](const auto& listed, auto&& write) {
    if (!listed.ok()) return absl::StrAppend(&out, "error: ", listed.status().ToString(), "\n");
    for (const auto& item : *listed) write(item);
    absl::StrAppend(&out, "\n");
  };
  auto proto = [&add]<typename P>(const auto& item, P* scratch) {
    scratch->Clear();
    ToProto(item, scratch);
    add(*scratch);
  };
  v1::GpuModel model;
  v1::Cluster cluster;
  v1::Pool pool;
  v1::Node node;
  v1::Team team;
  v1::Quota quota;
  v1::CapacityRequest request;
  v1::RoleBinding binding;
  v1::AuthorityRule rule;
  v1::Price price;
  v1::Budget budget;
  v1::Delegation delegation;
  each(store.ListGpuModels(), [&](const core::GpuModel& m) { proto(m, &model); });
  each(store.ListClusters(), [&](const core::Cluster& c) { proto(c, &cluster); });
  each(store.ListPools(), [&](const core::Pool& p) { proto(p, &pool); });
  each(store.ListNodes("", ""), [&](const core::Node& n) { proto(n, &node); });
  each(store.ListTeams(), [&](const core::Team& t) { proto(t, &team); });
  each(store.ListQuotas(""), [&](const store::QuotaUsage& q) {
    proto(q.quota, &quota);
    absl::StrAppend(&out, q.used_milli, "|");
  });
  store::RequestFilter all;
  all.limit = 1'000'000;
  each(store.ListRequests(all), [&](const core::CapacityRequest& r) {
    request.Clear();
    ToProto(r, nodes, &request);
    add(request);
  });
  each(store.ListRoleBindings(), [&](const core::RoleBinding& b) { proto(b, &binding); });
  each(store.ListAuthorityRules(), [&](const core::AuthorityRule& r) { proto(r, &rule); });
  each(store.ListPrices(), [&](const core::Price& p) { proto(p, &price); });
  each(store.ListBudgets(), [&](const core::Budget& b) { proto(b, &budget); });
  each(store.ListDelegations(), [&](const core::Delegation& d) { proto(d, &delegation); });
  each(store.ListSlos(""), [&](const core::Slo& slo) {
    absl::StrAppend(&out, slo.team, "/", slo.service, "/", slo.pool, "/", slo.p99_target_us, "/",
                    absl::FormatDuration(slo.window), "/", slo.penalty_micros_per_minute, "|");
  });
  each(store.ListIdlePolicies(), [&](const core::IdlePolicy& p) {
    absl::StrAppend(&out, static_cast<int>(p.workload_class), "/", p.threshold_milli, "/",
                    absl::FormatDuration(p.window), "/", static_cast<int>(p.action), "/",
                    absl::FormatDuration(p.notice), "|");
  });
  absl::StatusOr<core::CoexistenceMatrix> coexistence = store.GetCoexistence();
  if (coexistence.ok()) {
    for (int a = 0; a <= static_cast<int>(core::WorkloadClass::kExperimentation); ++a) {
      for (int b = 0; b <= static_cast<int>(core::WorkloadClass::kExperimentation); ++b) {
        const core::CoexistenceRule& r = coexistence->Rule(static_cast<core::WorkloadClass>(a),
                                                           static_cast<core::WorkloadClass>(b));
        absl::StrAppend(&out, static_cast<int>(r.gpu), r.same_node ? "s" : "-");
      }
    }
  }
  absl::StrAppend(&out, "ledger head: ", store.LedgerHead(), "\n");
  absl::StatusOr<std::vector<core::GpuSample>> samples =
      store.ListSamples(absl::InfinitePast(), absl::InfiniteFuture());
  absl::StrAppend(&out, "samples: ", samples.ok() ? samples->size() : 0, "\n");
  return out;
}

std::string MakeSuiteCertificates() {
  static int made = 0;
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/api-suite-certs-", getpid(), "-", ++made);
  const std::string cmd =
      absl::StrCat(ARBITER_SOURCE_DIR, "/deploy/local/make-certs ", dir, " admin >/dev/null");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir;
}

ServerOptions SuiteServerOptions(const std::string& certs) {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.tls = TlsFiles{certs + "/server.pem", certs + "/server.key", certs + "/ca.pem"};
  options.admins = {kAdmin};
  options.telemetry.rollup_every = absl::ZeroDuration();
  options.telemetry.settle = absl::ZeroDuration();
  options.watch.bookmark_every = absl::Milliseconds(20);
  return options;
}

void RunApiSuite(const SuiteTarget& target) {
  Client client(target.port, target.certs);
  const std::map<std::string, int64_t> values = Prepare(client, *target.clock);
  auto digest = [&] {
    return absl::StrCat("engine:", EngineDigest(*target.app), "\nstore:", target.store_digest());
  };

  // Every method of arbiter.v1 has a base.
  std::set<std::string> api;
  for (const char* file :
       {"arbiter/v1/inventory.proto", "arbiter/v1/governance.proto", "arbiter/v1/allocation.proto",
        "arbiter/v1/telemetry.proto", "arbiter/v1/chargeback.proto", "arbiter/v1/ledger.proto"}) {
    const google::protobuf::FileDescriptor* fd =
        google::protobuf::DescriptorPool::generated_pool()->FindFileByName(file);
    ASSERT_NE(fd, nullptr) << file;
    for (int s = 0; s < fd->service_count(); ++s) {
      for (int m = 0; m < fd->service(s)->method_count(); ++m) {
        api.insert(absl::StrCat(fd->service(s)->name(), ".", fd->service(s)->method(m)->name()));
      }
    }
  }
  std::set<std::string> based;
  for (const Base& b : kBases) based.insert(b.method);
  EXPECT_EQ(based, api) << "every RPC needs a base request in kBases";

  std::map<std::string, Tally> tallies;
  int serial = 0;
  for (const Base& b : kBases) {
    SCOPED_TRACE(b.method);
    const google::protobuf::MethodDescriptor* method = FindMethod(b.method);
    ASSERT_NE(method, nullptr) << b.method;
    std::unique_ptr<google::protobuf::Message> base(
        google::protobuf::MessageFactory::generated_factory()
            ->GetPrototype(method->input_type())
            ->New());
    ASSERT_TRUE(
        google::protobuf::TextFormat::ParseFromString(Substitute(b.text, values), base.get()))
        << b.method << ": " << b.text;
    CheckBaseReachesEveryField(b.method, *base);
    std::vector<ApiCase> cases =
        testing::GenerateCases(*base, target.clock->TimeNow(), ReferencesOf(b.method));
    if (b.base_first) SendBase(client, *method, *base);
    std::string known;  // The digest after the last refusal, when known_valid.
    bool known_valid = false;
    Tally& tally = tallies[b.method];
    for (const ApiCase& c : cases) {
      std::string body = c.body;
      if (!b.fresh.empty()) body = Freshen(*base, body, b.fresh, c.field, ++serial);
      // The state after the last refusal is the state before this case.
      const std::string before = known_valid ? known : digest();
      known_valid = false;
      std::string response;
      const grpc::Status status = client.Call(*method, body, &response);
      ++tally.cases;
      const Outcome outcome = Judge(b.method, c, status, response);
      if (outcome.accepted) {
        ++tally.accepted;
      } else if (status.error_code() == Code::INTERNAL) {
        ++tally.malformed;
      } else {
        ++tally.refused;
      }
      EXPECT_TRUE(outcome.error.empty()) << b.method << " " << c.label() << ": " << outcome.error;
      if (!outcome.accepted || IsRead(b.method)) {
        known = digest();
        known_valid = true;
        EXPECT_EQ(known, before) << b.method << " " << c.label()
                                 << (outcome.accepted ? ": a read" : ": a refusal")
                                 << " wrote something";
      }
    }
    if (!b.base_first) SendBase(client, *method, *base);
  }

  int total = 0;
  std::cout << "cases per RPC (refused / accepted / malformed body):\n";
  for (const auto& [method, t] : tallies) {
    std::cout << "  " << method << ": " << t.cases << " (" << t.refused << " / " << t.accepted
              << " / " << t.malformed << ")\n";
    total += t.cases;
  }
  std::cout << "total: " << total << " cases over " << tallies.size() << " RPCs\n";
}

}  // namespace arbiter::server
