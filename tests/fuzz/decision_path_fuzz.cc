// Fuzz target: the whole decision path, structure-aware. An input is a
// serialized arbiter.fuzz.DecisionPathInput (decision_path_input.proto): a
// sequence of arbiter.v1 request messages (RequestCapacity,
// ReleaseAllocation, ClaimAllocation, RenewLease, ApproveRequest,
// DenyRequest, SetQuota), each made by one of six callers, with simulated
// time passing between them. Each call goes the way arbiterd's gRPC services
// send it (server/allocation_service.cc, server/governance_service.cc): the
// message converted by server/convert.h, then the application's use case
// (app/allocations.h, app/governance.h), which checks access, decides in the
// engine and commits to a MemoryStore before it answers, as
// tests/app/request_path_test.cc drives it, without a socket.
//
// Debian 12 has no libprotobuf-mutator: LLVMFuzzerCustomMutator below parses
// the input, changes one thing through protobuf reflection (adds, drops,
// duplicates or swaps a call; sets an integer to a boundary or a nearby
// value, an enum to an unknown number, a string to a known name or a
// damaged one; sets, clears or switches a message or oneof), and serializes
// it again, so that almost every input the fuzzer runs parses and most
// calls get past conversion into the engine.
//
// After every call (a finding aborts):
//   - nothing is admitted that validation would refuse: every live request,
//     in the engine and as stored, passes core::ValidateRequestSpec and is
//     the spec of a call that was answered OK; an answered request or
//     replay was a valid spec; a caller without a role is never answered OK;
//   - no capacity is overcommitted (capacity_check.h), in the engine's state
//     and in the state the store loads back (what a restart would decide on);
//   - the ledger is continuous: it verifies from genesis (ledger::VerifyChain:
//     sequence numbers without gaps, each entry linked to the previous
//     one's hash, each hash matching its entry), its head is the store's,
//     what was there before is unchanged, and the last entry of every stored
//     live request names the state it is stored in;
//   - no call fails as a healthy store never should (UNAVAILABLE, INTERNAL,
//     UNKNOWN, DATA_LOSS).
// Replayed over tests/fuzz/corpus/decision_path by `tests/run`.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#include "app/application.h"
#include "core/arbitration.h"
#include "core/fingerprint.h"
#include "core/validate.h"
#include "ledger/chain.h"
#include "server/convert.h"
#include "store/memory/memory_store.h"
#include "tests/fuzz/capacity_check.h"
#include "tests/fuzz/decision_path_input.pb.h"
#include "tests/testing/simulated_clock.h"

namespace {

namespace v1 = ::arbiter::v1;
namespace app = ::arbiter::app;
namespace core = ::arbiter::core;
using ::arbiter::fuzz::DecisionPathInput;
using ::arbiter::fuzz::Operation;

constexpr int kMaxOperations = 48;
constexpr int64_t kStartUnixSeconds = 1'800'000'000;

// ARBITER_FUZZ_TRACE=1 prints each call and its answer (to read a finding).
bool Tracing() {
  static const bool kTracing = std::getenv("ARBITER_FUZZ_TRACE") != nullptr;
  return kTracing;
}

void Check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "decision path invariant broken: %s\n", what.c_str());
  std::abort();
}

// The callers an Operation names. Roles are bound in Organisation().
enum CallerIndex { kDeveloper, kAdmin, kMember, kAgent, kAuthority, kStranger, kCallerCount };

app::Caller CallerOf(uint32_t index) {
  app::Caller c;
  switch (index % kCallerCount) {
    case kDeveloper:
      c.insecure = true;  // A plaintext development server: may do everything.
      break;
    case kAdmin:
      c.principal = "root";  // Platform admin by configuration.
      break;
    case kMember:
      c.principal = "alice";  // Member of team a (and a.x below it).
      break;
    case kAgent:
      c.principal = "agent-0";  // The agent role: claims, renewals, runs.
      break;
    case kAuthority:
      c.principal = "boss";  // Pool p's authority, the approver of its rules.
      break;
    default:
      c.principal = "mallory";  // No role at all.
  }
  return c;
}

// The organisation every input starts from, built through the engine as the
// governance calls would: two pools (p: batch, backfill, two nodes of four
// H100s, approval by "boss" beyond 6 GPUs, a price; s: serving, lending to
// training, claims required within 5 minutes under 10-minute leases,
// approval by "boss" to borrow, one node of two A100-40GB), teams a (with
// a.x under it) and b with quotas that borrow, and the role bindings of
// CallerOf.
absl::Status Organisation(core::State& s, absl::Time now, core::ChangeSet& ch) {
  auto all = [](std::initializer_list<absl::Status> steps) {
    for (const absl::Status& st : steps) {
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  };
  absl::Status st = all({core::CreateCluster(s, {"c", ""}, ch),
                         core::CreatePool(s, {"p", core::LatencyClass::kBatch, ""}, ch)});
  if (!st.ok()) return st;
  core::Pool serving{"s", core::LatencyClass::kServing, ""};
  serving.lends_to = {core::WorkloadClass::kTraining};
  serving.claim_deadline_seconds = 300;
  serving.lease_seconds = 600;
  serving.reclaim_grace_seconds = 60;
  st = all({core::CreatePool(s, serving, ch), core::CreateTeam(s, {"a", "", 1000}, ch),
            core::CreateTeam(s, {"b", "", 2000}, ch), core::CreateTeam(s, {"a.x", "a", 1000}, ch)});
  if (!st.ok()) return st;
  core::Quota a_p{"a", "p", 4000};
  a_p.borrowing_limit_milli = 2000;
  core::Quota b_p{"b", "p", 4000};
  b_p.borrowing_limit_milli = core::kUnlimited;
  core::Quota x_p{"a.x", "p", 1000};
  core::Quota a_s{"a", "s", 1000};
  core::Quota b_s{"b", "s", 1000, "A100-40GB"};
  for (const core::Quota& q : {a_p, b_p, x_p, a_s, b_s}) {
    if (st = core::SetQuota(s, q, now, ch); !st.ok()) return st;
  }
  auto node = [](const std::string& name, const std::string& pool, int gpus,
                 const std::string& model) {
    core::Node n;
    n.cluster = "c";
    n.name = name;
    n.pool = pool;
    n.cpu_milli = 64'000;
    n.memory_mib = 512'000;
    for (int i = 0; i < gpus; ++i) {
      core::Gpu g;
      g.index = i;
      g.model = model;
      n.gpus.push_back(g);
    }
    return n;
  };
  for (const core::Node& n : {node("n0", "p", 4, "H100-80GB"), node("n1", "p", 4, "H100-80GB"),
                              node("n2", "s", 2, "A100-40GB")}) {
    if (auto registered = core::RegisterNode(s, n, now, ch); !registered.ok()) {
      return registered.status();
    }
  }
  using core::Role;
  using core::ScopeKind;
  for (const core::RoleBinding& b :
       {core::RoleBinding{"alice", Role::kTeamMember, ScopeKind::kTeam, "a"},
        core::RoleBinding{"agent-0", Role::kAgent, ScopeKind::kOrg, ""},
        core::RoleBinding{"boss", Role::kPoolAuthority, ScopeKind::kPool, "p"}}) {
    if (st = core::GrantRole(s, b, ch); !st.ok()) return st;
  }
  core::AuthorityRule large;
  large.pool = "p";
  large.action = core::ApprovalAction::kLarge;
  large.approver = "boss";
  large.threshold_milli = 6000;
  core::AuthorityRule borrow;
  borrow.pool = "s";
  borrow.action = core::ApprovalAction::kBorrow;
  borrow.approver = "boss";
  for (const core::AuthorityRule& r : {large, borrow}) {
    if (st = core::SetAuthorityRule(s, r, ch); !st.ok()) return st;
  }
  return core::SetPrice(s, {"H100-80GB", core::LatencyClass::kBatch, 2'000'000, now}, ch);
}

// One reply of a use case, waited for.
template <typename T>
class Awaited {
 public:
  app::Reply<T> reply() {
    return [this](absl::StatusOr<T> result) {
      result_ = std::move(result);
      done_.Notify();
    };
  }
  absl::StatusOr<T> get() {
    done_.WaitForNotification();
    return std::move(result_);
  }

 private:
  absl::Notification done_;
  absl::StatusOr<T> result_ = absl::UnknownError("no reply");
};

void CheckCode(const absl::Status& status, const char* call) {
  const absl::StatusCode code = status.code();
  Check(code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kInternal &&
            code != absl::StatusCode::kUnknown && code != absl::StatusCode::kDataLoss,
        absl::StrCat(call, " failed as a healthy store never should: ", status.ToString()));
}

// One input's world: a fresh store and application, the specs answered OK by
// request id, and how far the ledger was verified.
class DecisionPath {
 public:
  DecisionPath() : store_(std::make_unique<arbiter::store::MemoryStore>()) {
    app::ApplicationOptions options;
    options.admins = {"root"};
    options.read_threads = 1;
    options.telemetry.rollup_every = absl::ZeroDuration();  // No background rollups.
    absl::StatusOr<std::unique_ptr<app::Application>> made =
        app::Application::Create(store_.get(), &clock_, options);
    Check(made.ok(), "the application starts");
    app_ = *std::move(made);
    Check(Run(Organisation).ok(), "the organisation builds");
    CheckAll();
  }

  void Do(const Operation& op) {
    clock_.Advance(absl::Seconds(op.after_seconds() % 86'400));
    if (Tracing()) {
      std::fprintf(stderr, "at +%llds, caller %u: %s\n",
                   static_cast<long long>(absl::ToInt64Seconds(
                       clock_.TimeNow() - absl::FromUnixSeconds(kStartUnixSeconds))),
                   op.caller() % kCallerCount, op.ShortDebugString().c_str());
    }
    const app::Caller caller = CallerOf(op.caller());
    const bool stranger = op.caller() % kCallerCount == kStranger;
    switch (op.call_case()) {
      case Operation::kRequestCapacity:
        RequestCapacity(caller, stranger, op.request_capacity());
        break;
      case Operation::kReleaseAllocation:
        ReleaseAllocation(caller, stranger, op.release_allocation());
        break;
      case Operation::kClaimAllocation: {
        const v1::ClaimAllocationRequest& m = op.claim_allocation();
        Awaited<core::CapacityRequest> r;
        app_->allocations().ClaimAllocation(
            caller, m.id(), m.holder(),
            std::vector<int32_t>(m.members().begin(), m.members().end()), r.reply());
        Answered(r.get().status(), stranger, "ClaimAllocation");
        break;
      }
      case Operation::kRenewLease: {
        Awaited<core::CapacityRequest> r;
        app_->allocations().RenewLease(caller, op.renew_lease().id(), op.renew_lease().holder(),
                                       r.reply());
        Answered(r.get().status(), stranger, "RenewLease");
        break;
      }
      case Operation::kApproveRequest: {
        Awaited<core::CapacityRequest> r;
        app_->allocations().ApproveRequest(caller, op.approve_request().id(), r.reply());
        Answered(r.get().status(), stranger, "ApproveRequest");
        break;
      }
      case Operation::kDenyRequest: {
        Awaited<core::CapacityRequest> r;
        app_->allocations().DenyRequest(caller, op.deny_request().id(), op.deny_request().reason(),
                                        r.reply());
        Answered(r.get().status(), stranger, "DenyRequest");
        break;
      }
      case Operation::kSetQuota: {
        // As GovernanceService::SetQuota converts it.
        Awaited<app::Done> r;
        app_->governance().SetQuota(caller, arbiter::server::QuotaFromProto(op.set_quota().quota()),
                                    r.reply());
        Answered(r.get().status(), stranger, "SetQuota");
        break;
      }
      default:
        // Time passing only: a command that decides nothing, so that what
        // came due runs first in its batch (app/arbiter.h).
        Check(Run([](core::State&, absl::Time, core::ChangeSet&) { return absl::OkStatus(); }).ok(),
              "an empty command");
    }
    CheckAll();
  }

 private:
  // Runs one command on the engine and waits for its answer.
  absl::Status Run(app::Arbiter::Decide decide) {
    absl::Notification done;
    absl::Status result;
    app_->arbiter().Submit(std::move(decide), [&](const absl::Status& status) {
      result = status;
      done.Notify();
    });
    done.WaitForNotification();
    return result;
  }

  void Answered(const absl::Status& status, bool stranger, const char* call) {
    if (Tracing()) std::fprintf(stderr, "  %s: %s\n", call, status.ToString().c_str());
    CheckCode(status, call);
    Check(!(stranger && status.ok()),
          absl::StrCat(call, " answered OK to a caller without a role"));
  }

  // As AllocationService::RequestCapacity sends it.
  void RequestCapacity(const app::Caller& caller, bool stranger,
                       const v1::RequestCapacityRequest& m) {
    absl::StatusOr<core::CapacityRequestSpec> spec = arbiter::server::SpecFromProto(m);
    Awaited<app::RequestDecision> r;
    app_->allocations().RequestCapacity(caller, app::Resource{m.team(), m.pool()}, spec, r.reply());
    absl::StatusOr<app::RequestDecision> d = r.get();
    Answered(d.status(), stranger, "RequestCapacity");
    if (!d.ok()) return;
    if (Tracing()) {
      std::fprintf(stderr, "  -> request %lld %s%s: %s\n", static_cast<long long>(d->request.id),
                   std::string(core::RequestStateName(d->request.state)).c_str(),
                   d->replayed ? " (replayed)" : "", d->request.reason.c_str());
    }
    Check(spec.ok(), "a request answered OK whose message does not convert");
    const absl::Status valid = core::ValidateRequestSpec(*spec);
    Check(valid.ok(), "a request answered OK that validation refuses: " + valid.ToString());
    Check(d->request.id > 0, "a decided request without an id");
    if (d->replayed) {
      auto it = specs_.find(d->request.id);
      Check(it != specs_.end(), "a replay of a request never answered");
      Check(core::FingerprintRequestSpec(it->second) == core::FingerprintRequestSpec(*spec),
            "a replay of a different body");
      return;
    }
    Check(specs_.find(d->request.id) == specs_.end(), "a request id decided twice");
    Check(d->request.spec.idempotency_key == spec->idempotency_key, "the decision's key");
    if (d->request.state == core::RequestState::kAdmitted) {
      const absl::Status admitted = core::ValidateRequestSpec(d->request.spec);
      Check(admitted.ok(), "admitted a spec that validation refuses: " + admitted.ToString());
    }
    specs_.emplace(d->request.id, *spec);
  }

  // As AllocationService::ReleaseAllocation converts the run.
  void ReleaseAllocation(const app::Caller& caller, bool stranger,
                         const v1::ReleaseAllocationRequest& m) {
    absl::StatusOr<core::WorkloadRun> run = arbiter::server::WorkloadRunFromProto(m);
    if (!run.ok()) return;  // Answered before the application.
    Awaited<core::CapacityRequest> r;
    app_->allocations().ReleaseAllocation(caller, m.id(), *run, r.reply());
    Answered(r.get().status(), stranger, "ReleaseAllocation");
  }

  // What every live request must be: a valid spec that a call was answered
  // OK for (a reservation decided at its start keeps its id and spec).
  void CheckRequests(const core::State& s, const char* where) const {
    for (const auto& [id, r] : s.live_requests()) {
      const absl::Status valid = core::ValidateRequestSpec(r.spec);
      Check(valid.ok(),
            absl::StrCat(where, ": live request ", id, " (", core::RequestStateName(r.state),
                         ") fails validation: ", valid.ToString()));
      auto it = specs_.find(id);
      Check(it != specs_.end(), absl::StrCat(where, ": live request ", id, " never answered OK"));
      Check(r.body_hash == core::FingerprintRequestSpec(it->second),
            absl::StrCat(where, ": live request ", id, " is not the spec answered"));
    }
    const std::string problem = arbiter::fuzz::CapacityProblem(s);
    Check(problem.empty(), absl::StrCat(where, ": ", problem));
  }

  void CheckAll() {
    // The engine's state, on its thread.
    Check(Run([this](core::State& s, absl::Time, core::ChangeSet&) {
            CheckRequests(s, "engine");
            return absl::OkStatus();
          }).ok(),
          "the engine's check runs");
    // What the store would load on a restart.
    absl::StatusOr<core::State> stored = store_->LoadState();
    Check(stored.ok(), "the store loads: " + stored.status().ToString());
    CheckRequests(*stored, "store");
    CheckLedger(*stored);
  }

  // After each call: the entries written since the last check continue the
  // chain from the head verified then, which is still there unchanged.
  void CheckLedger(const core::State& stored) {
    arbiter::store::LedgerFilter since;
    since.after_seq = verdict_.head_seq > 0 ? verdict_.head_seq - 1 : 0;
    since.limit = 1 << 30;
    absl::StatusOr<std::vector<arbiter::ledger::Entry>> entries = store_->ListLedger(since);
    Check(entries.ok(), "the ledger reads");
    size_t first_new = 0;
    if (verdict_.head_seq > 0) {
      Check(
          !entries->empty() && entries->front().seq == verdict_.head_seq &&
              entries->front().hash == verdict_.head_hash,
          absl::StrCat("entry ", verdict_.head_seq, " changed or vanished after it was verified"));
      first_new = 1;
    }
    const std::vector<arbiter::ledger::Entry> added(entries->begin() + first_new, entries->end());
    arbiter::ledger::Continue(verdict_, added);
    Check(verdict_.ok,
          absl::StrCat("the ledger breaks at ", verdict_.first_bad_seq, ": ", verdict_.problem));
    Check(verdict_.head_seq == store_->LedgerHead(), "the ledger's head is the store's");
    for (const arbiter::ledger::Entry& e : added) last_action_[e.subject] = e.action;
    for (const auto& [id, r] : stored.live_requests()) {
      auto it = last_action_.find(absl::StrCat("request/", id));
      Check(it != last_action_.end(), absl::StrCat("live request ", id, " has no ledger entry"));
      Check(it->second == absl::StrCat("request.", core::RequestStateName(r.state)),
            absl::StrCat("request ", id, " is stored ", core::RequestStateName(r.state),
                         " but its last ledger entry is ", it->second));
    }
  }

 public:
  // After the last call: the whole ledger verifies from genesis, to the head
  // verified call by call.
  void Finish() {
    arbiter::store::LedgerFilter all;
    all.limit = 1 << 30;
    absl::StatusOr<std::vector<arbiter::ledger::Entry>> entries = store_->ListLedger(all);
    Check(entries.ok(), "the ledger reads");
    const arbiter::ledger::Verdict whole =
        arbiter::ledger::VerifyChain(*entries, 0, arbiter::ledger::kGenesisHash);
    Check(whole.ok,
          absl::StrCat("the ledger breaks at ", whole.first_bad_seq, ": ", whole.problem));
    Check(whole.count == static_cast<int64_t>(entries->size()) &&
              whole.head_seq == verdict_.head_seq && whole.head_hash == verdict_.head_hash,
          "the whole ledger ends at the head verified call by call");
  }

 private:
  arbiter::testing::SimulatedClock clock_{absl::FromUnixSeconds(kStartUnixSeconds)};
  std::unique_ptr<arbiter::store::MemoryStore> store_;
  std::unique_ptr<app::Application> app_;
  // Specs answered OK, by request id. Read on the engine's thread while
  // this one waits for it.
  std::map<int64_t, core::CapacityRequestSpec> specs_;
  // The ledger verified so far: from genesis (0, kGenesisHash).
  arbiter::ledger::Verdict verdict_{true, 0, 0, arbiter::ledger::kGenesisHash};
  std::map<std::string, std::string> last_action_;  // By subject.
};

// --- The structure-aware mutator.

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

class Mutator {
 public:
  explicit Mutator(unsigned seed) : rng_(seed) {}

  // Changes `in` in one place.
  void Mutate(DecisionPathInput& in) {
    if (in.ops_size() == 0 || Below(8) == 0) return AddOperation(in);
    switch (Below(8)) {
      case 0:
        return AddOperation(in);
      case 1: {  // Drop one.
        Swap(in, static_cast<int>(Below(in.ops_size())), in.ops_size() - 1);
        in.mutable_ops()->RemoveLast();
        return;
      }
      case 2: {  // Repeat one (a retry), somewhere later.
        *in.add_ops() = in.ops(static_cast<int>(Below(in.ops_size())));
        return;
      }
      case 3:
        return Swap(in, static_cast<int>(Below(in.ops_size())),
                    static_cast<int>(Below(in.ops_size())));
      default:
        return MutateField(in);
    }
  }

  // Keeps a prefix of `a` and a suffix of `b`.
  void Cross(const DecisionPathInput& a, const DecisionPathInput& b, DecisionPathInput& out) {
    const int keep = a.ops_size() == 0 ? 0 : static_cast<int>(Below(a.ops_size() + 1));
    const int from = b.ops_size() == 0 ? 0 : static_cast<int>(Below(b.ops_size() + 1));
    for (int i = 0; i < keep; ++i) *out.add_ops() = a.ops(i);
    for (int i = from; i < b.ops_size() && out.ops_size() < kMaxOperations; ++i) {
      *out.add_ops() = b.ops(i);
    }
  }

 private:
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo + 1)));
  }
  bool OneIn(uint64_t n) { return Below(n) == 0; }
  template <typename T, size_t N>
  const T& Pick(const T (&options)[N]) {
    return options[Below(N)];
  }

  void Swap(DecisionPathInput& in, int i, int j) {
    if (i != j) in.mutable_ops()->SwapElements(i, j);
  }

  void AddOperation(DecisionPathInput& in) {
    if (in.ops_size() >= kMaxOperations) return;
    *in.add_ops() = RandomOperation();
    const int at = static_cast<int>(Below(in.ops_size()));
    for (int i = in.ops_size() - 1; i > at; --i) Swap(in, i, i - 1);
  }

  int64_t RequestId() { return OneIn(16) ? Between(-2, 100) : Between(1, 12); }

  std::string Holder() { return absl::StrCat("pod:ns/w", Below(4)); }

  void RandomTime(google::protobuf::Timestamp& t) {
    t.set_seconds(kStartUnixSeconds + Between(-600, 4 * 3600));
    t.set_nanos(OneIn(4) ? static_cast<int32_t>(Below(1'000'000'000)) : 0);
  }

  void RandomRequest(v1::RequestCapacityRequest& m) {
    static const char* const kTeams[] = {"a", "a", "b", "b", "a.x", "ghost"};
    static const char* const kProfiles[] = {"1g.5gb",  "2g.10gb", "3g.20gb", "7g.40gb",
                                            "1g.10gb", "3g.40gb", "7g.80gb", "9g.99gb"};
    m.set_idempotency_key(absl::StrCat("k", Below(16)));
    m.set_team(Pick(kTeams));
    m.set_pool(OneIn(3) ? "s" : "p");
    m.set_workload_class(static_cast<v1::WorkloadClass>(Between(1, 4)));
    m.set_members(static_cast<int32_t>(OneIn(4) ? Between(2, 4) : 1));
    v1::MemberShape& shape = *m.mutable_shape();
    switch (Below(5)) {
      case 0:
      case 1:
        shape.set_whole_gpus(static_cast<int32_t>(Between(1, 4)));
        break;
      case 2:
        shape.mutable_fraction()->set_gpu_milli(Between(1, 10) * 100);
        shape.mutable_fraction()->set_memory_mib(Between(1, 40) * 1024);
        break;
      case 3:
        shape.set_mig_profile(Pick(kProfiles));
        break;
      default: {
        v1::ModelProfile& model = *shape.mutable_model_profile();
        model.set_parameters(Between(1, 70) * 1'000'000'000);
        model.set_bytes_per_parameter_milli(2000);
        model.set_layers(static_cast<int32_t>(Between(8, 80)));
        model.set_kv_heads(8);
        model.set_head_dim(128);
        model.set_kv_bytes_per_element_milli(2000);
        model.set_token_budget(Between(1, 64) * 1024);
      }
    }
    if (OneIn(3)) shape.set_cpu_milli(Between(0, 32) * 1000);
    if (OneIn(3)) shape.set_memory_mib(Between(0, 64) * 1024);
    if (OneIn(4)) m.add_gpu_models(OneIn(2) ? "H100-80GB" : "A100-40GB");
    if (OneIn(6)) m.set_topology(v1::TOPOLOGY_SAME_NODE);
    m.set_priority(static_cast<int32_t>(Between(-2, 2) * 100));
    m.set_preemptible(OneIn(2));
    if (!m.preemptible() && OneIn(8)) m.set_guaranteed(true);
    if (OneIn(3)) m.set_checkpoint_seconds(Between(0, 120));
    if (OneIn(3)) m.set_duration_seconds(Between(1, 12) * 600);
    if (OneIn(6)) {
      RandomTime(*m.mutable_start_time());
      if (m.duration_seconds() == 0) m.set_duration_seconds(3600);
    }
  }

  Operation RandomOperation() {
    Operation op;
    op.set_caller(static_cast<uint32_t>(OneIn(2) ? uint64_t{kDeveloper} : Below(kCallerCount)));
    op.set_after_seconds(static_cast<uint32_t>(OneIn(3) ? Between(1, 900) : 0));
    switch (Below(12)) {
      case 0:
      case 1:
      case 2:
      case 3:
        RandomRequest(*op.mutable_request_capacity());
        break;
      case 4:
      case 5: {
        v1::ReleaseAllocationRequest& m = *op.mutable_release_allocation();
        m.set_id(RequestId());
        if (OneIn(4)) {
          RandomTime(*m.mutable_workload_started_at());
          RandomTime(*m.mutable_workload_ended_at());
        }
        break;
      }
      case 6: {
        v1::ClaimAllocationRequest& m = *op.mutable_claim_allocation();
        m.set_id(RequestId());
        m.set_holder(Holder());
        if (OneIn(2)) m.add_members(static_cast<int32_t>(Below(3)));
        break;
      }
      case 7:
        op.mutable_renew_lease()->set_id(RequestId());
        op.mutable_renew_lease()->set_holder(Holder());
        break;
      case 8:
        op.mutable_approve_request()->set_id(RequestId());
        break;
      case 9:
        op.mutable_deny_request()->set_id(RequestId());
        op.mutable_deny_request()->set_reason("not now");
        break;
      case 10: {
        v1::Quota& q = *op.mutable_set_quota()->mutable_quota();
        q.set_team(OneIn(2) ? "a" : "b");
        q.set_pool(OneIn(3) ? "s" : "p");
        q.set_nominal_milli(Between(0, 16) * 500);
        if (OneIn(2)) q.set_borrowing_limit_milli(Between(-1, 8) * 500);
        if (OneIn(4)) q.set_gpu_model("H100-80GB");
        break;
      }
      default:
        op.set_tick(true);
        op.set_after_seconds(static_cast<uint32_t>(Between(1, 7200)));
    }
    return op;
  }

  // A field somewhere in `in`, and (for repeated scalars) an element.
  struct Site {
    Message* message;
    const FieldDescriptor* field;
    int index;  // -1: the field itself.
  };

  void Collect(Message* m, std::vector<Site>& out) {
    const Descriptor* d = m->GetDescriptor();
    const Reflection* r = m->GetReflection();
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      out.push_back({m, f, -1});
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        if (f->is_repeated()) {
          for (int j = 0; j < r->FieldSize(*m, f); ++j) {
            Collect(r->MutableRepeatedMessage(m, f, j), out);
          }
        } else if (r->HasField(*m, f)) {
          Collect(r->MutableMessage(m, f), out);
        }
      } else if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(*m, f); ++j) out.push_back({m, f, j});
      }
    }
  }

  void MutateField(DecisionPathInput& in) {
    std::vector<Site> sites;
    for (int i = 0; i < in.ops_size(); ++i) Collect(in.mutable_ops(i), sites);
    if (sites.empty()) return;
    const Site site = sites[Below(sites.size())];
    Message* m = site.message;
    const FieldDescriptor* f = site.field;
    const Reflection* r = m->GetReflection();
    if (f->is_repeated() && site.index < 0) {
      const int size = r->FieldSize(*m, f);
      if (size > 0 && OneIn(2)) {
        r->SwapElements(m, f, static_cast<int>(Below(size)), size - 1);
        r->RemoveLast(m, f);
        return;
      }
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_MESSAGE:
          r->AddMessage(m, f);
          return;
        case FieldDescriptor::CPPTYPE_STRING:
          r->AddString(m, f, Text(f, ""));
          return;
        case FieldDescriptor::CPPTYPE_INT32:
          r->AddInt32(m, f, static_cast<int32_t>(Int(f, 0)));
          return;
        default:
          return;  // No other repeated scalars in these messages.
      }
    }
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE:
        if (r->HasField(*m, f) && OneIn(3)) {
          r->ClearField(m, f);
        } else {
          SetMessage(r->MutableMessage(m, f));  // Sets a oneof's alternative too.
        }
        return;
      case FieldDescriptor::CPPTYPE_INT32:
        if (site.index >= 0) {
          r->SetRepeatedInt32(m, f, site.index,
                              static_cast<int32_t>(Int(f, r->GetRepeatedInt32(*m, f, site.index))));
        } else {
          r->SetInt32(m, f, static_cast<int32_t>(Int(f, r->GetInt32(*m, f))));
        }
        return;
      case FieldDescriptor::CPPTYPE_INT64:
        r->SetInt64(m, f, Int(f, r->GetInt64(*m, f)));
        return;
      case FieldDescriptor::CPPTYPE_UINT32:
        r->SetUInt32(m, f, static_cast<uint32_t>(Int(f, r->GetUInt32(*m, f))));
        return;
      case FieldDescriptor::CPPTYPE_UINT64:
        r->SetUInt64(m, f,
                     static_cast<uint64_t>(Int(f, static_cast<int64_t>(r->GetUInt64(*m, f)))));
        return;
      case FieldDescriptor::CPPTYPE_BOOL:
        r->SetBool(m, f, !r->GetBool(*m, f));
        return;
      case FieldDescriptor::CPPTYPE_ENUM: {
        const google::protobuf::EnumDescriptor* e = f->enum_type();
        const int value = OneIn(4) ? static_cast<int>(Between(-1, 20))
                                   : e->value(static_cast<int>(Below(e->value_count())))->number();
        r->SetEnumValue(m, f, value);
        return;
      }
      case FieldDescriptor::CPPTYPE_STRING:
        if (site.index >= 0) {
          r->SetRepeatedString(m, f, site.index, Text(f, r->GetRepeatedString(*m, f, site.index)));
        } else {
          r->SetString(m, f, Text(f, r->GetString(*m, f)));
        }
        return;
      default:
        return;
    }
  }

  // A message newly set (or set again): a plausible one where it is known.
  void SetMessage(Message* m) {
    m->Clear();
    if (auto* t = dynamic_cast<google::protobuf::Timestamp*>(m)) return RandomTime(*t);
    if (auto* req = dynamic_cast<v1::RequestCapacityRequest*>(m)) return RandomRequest(*req);
    if (auto* rel = dynamic_cast<v1::ReleaseAllocationRequest*>(m)) {
      return rel->set_id(RequestId());
    }
    if (auto* fraction = dynamic_cast<v1::GpuFraction*>(m)) {
      fraction->set_gpu_milli(Between(1, 10) * 100);
      return fraction->set_memory_mib(Between(1, 80) * 1024);
    }
    // Others start empty; their fields are mutated one at a time.
  }

  int64_t Int(const FieldDescriptor* f, int64_t old) {
    const std::string& name = f->name();
    if (name == "id") return RequestId();
    if (name == "seconds") return kStartUnixSeconds + Between(-900, 8 * 3600);
    if (name == "caller") return Between(0, kCallerCount - 1);
    // Boundaries of the API's ranges (members, GPUs per member, milli,
    // memory, seconds, host quantities, quotas) and of the integer types.
    // clang-format off
    static const int64_t kEdges[] = {
        0, 1, -1, 2, 63, 64, 65, 999, 1000, 1001, 1024, 1025, 40960, 81920, 81921,
        86'400, 86'401, 31'622'400, 31'622'401, int64_t{1} << 40, (int64_t{1} << 40) + 1,
        int64_t{1} << 50, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN};
    // clang-format on
    switch (Below(5)) {
      case 0:
        return Pick(kEdges);
      case 1:
        return Between(-3, 16);
      case 2:
        return static_cast<int64_t>(static_cast<uint64_t>(old) +
                                    static_cast<uint64_t>(Between(-16, 16)));
      case 3:
        return static_cast<int64_t>(static_cast<uint64_t>(old) * 2);
      default:
        return static_cast<int64_t>(rng_());
    }
  }

  // A string for field `f`: a name that exists, one that does not, or `old`
  // damaged. Never invalid UTF-8 in a `string` field: gRPC would refuse to
  // parse the message before any service saw it.
  std::string Text(const FieldDescriptor* f, const std::string& old) {
    const std::string& name = f->name();
    if (OneIn(3)) {
      static const char* const kAny[] = {"",   " ",   "a",      "p", "x\x01y", "\xc3\xa9t\xc3\xa9",
                                         "-a", "a/b", "group:x"};
      if (OneIn(3)) return std::string(OneIn(2) ? 64 : 300, OneIn(2) ? 'k' : 'a');
      return Pick(kAny);
    }
    if (name == "idempotency_key") return absl::StrCat("k", Below(16));
    if (name == "team") {
      static const char* const kTeams[] = {"a", "b", "a.x", "ghost"};
      return Pick(kTeams);
    }
    if (name == "pool") return OneIn(2) ? "p" : (OneIn(2) ? "s" : "q");
    if (name == "holder") return Holder();
    if (name == "mig_profile") {
      static const char* const kProfiles[] = {"1g.5gb",  "2g.10gb", "3g.20gb",   "4g.20gb",
                                              "7g.40gb", "1g.10gb", "1g.10gb+me"};
      return Pick(kProfiles);
    }
    if (name == "gpu_models" || name == "gpu_model") {
      static const char* const kModels[] = {"H100-80GB", "A100-40GB", "L4", "H200-141GB", "nope"};
      return Pick(kModels);
    }
    std::string s = old;
    switch (Below(4)) {
      case 0:
        s.insert(s.begin() + static_cast<std::ptrdiff_t>(Below(s.size() + 1)),
                 static_cast<char>(Between(0x20, 0x7e)));
        return s;
      case 1:
        if (!s.empty()) s.erase(s.begin() + static_cast<std::ptrdiff_t>(Below(s.size())));
        return s;
      case 2:
        s.push_back(OneIn(2) ? '\0' : '\t');
        return s;
      default:
        if (f->type() == FieldDescriptor::TYPE_BYTES) s.push_back('\xff');
        return s + "\xe2\x82\xac";
    }
  }

  std::minstd_rand rng_;
};

std::string Serialize(const DecisionPathInput& in) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  in.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

size_t WriteInput(const DecisionPathInput& in, uint8_t* data, size_t size, size_t max_size) {
  const std::string out = Serialize(in);
  if (out.size() > max_size) return size;  // Too big: leave the input as it was.
  std::copy(out.begin(), out.end(), data);
  return out.size();
}

void Silence() {
  // The runtime logs every string it refuses to serialize or parse.
  static const bool kSilenced = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)kSilenced;
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  Silence();
  DecisionPathInput in;
  if (!in.ParseFromArray(data, static_cast<int>(size))) in.Clear();
  Mutator(seed).Mutate(in);
  return WriteInput(in, data, size, max_size);
}

extern "C" size_t LLVMFuzzerCustomCrossOver(const uint8_t* data1, size_t size1,
                                            const uint8_t* data2, size_t size2, uint8_t* out,
                                            size_t max_out_size, unsigned int seed) {
  Silence();
  DecisionPathInput a, b, crossed;
  if (!a.ParseFromArray(data1, static_cast<int>(size1))) a.Clear();
  if (!b.ParseFromArray(data2, static_cast<int>(size2))) b.Clear();
  Mutator(seed).Cross(a, b, crossed);
  return WriteInput(crossed, out, 0, max_out_size);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Silence();
  DecisionPathInput in;
  if (!in.ParseFromArray(data, static_cast<int>(size))) return 0;
  DecisionPath path;
  for (int i = 0; i < in.ops_size() && i < kMaxOperations; ++i) path.Do(in.ops(i));
  path.Finish();
  return 0;
}
