// arbiter-slurm: the bridge that makes Arbiter the authority for a Slurm
// cluster's GPU jobs (docs/slurm.md). It runs beside slurmctld as the
// SlurmUser (or another Slurm operator), polls `squeue --json`, and carries
// out what clients/slurm/bridge.h decides: asks Arbiter for each job that
// the job_submit plugin held, releases it pinned to its placement once
// admitted, keeps its lease, signals and requeues it on preemption, and
// releases the allocation when the job ends. slurmctld never waits on it:
// a job it has not admitted stays held. Every --sync-every it writes the
// job_submit plugin's policy (teams, GPU types) and adds Arbiter's teams as
// Slurm accounts.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include <CLI/CLI.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "clients/common/channel.h"
#include "clients/common/watch.h"
#include "clients/slurm/bridge.h"
#include "clients/slurm/command.h"
#include "clients/slurm/jobs.h"
#include "clients/slurm/limits.h"

namespace {

namespace v1 = ::arbiter::v1;
namespace slurm = ::arbiter::slurm;
namespace clients = ::arbiter::clients;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

struct Options {
  std::string endpoint = "127.0.0.1:50051";
  std::map<std::string, std::string> gpu_type_map, partition_pools_map;
  std::string ca_file, cert_file, key_file;
  std::string cluster;
  std::vector<std::string> gpu_types, partition_pools;
  std::string preemptible_qos = "preemptible";
  std::string workload_class = "training";
  std::string poll_every = "1s", renew_every = "10s", retry_every = "2s", sync_every = "30s";
  std::string lookup_every = "10s";
  std::string checkpoint_signal = "USR1";
  std::string policy_file;
  bool sync_accounts = true;
};

void Log(const std::string& line) {
  std::cerr << absl::FormatTime("%Y-%m-%dT%H:%M:%SZ ", absl::Now(), absl::UTCTimeZone())
            << "arbiter-slurm: " << line << std::endl;
}

using ::arbiter::clients::Context;
using ::arbiter::clients::StatusOf;

slurm::RequestView ViewOf(const v1::CapacityRequest& r) {
  using Phase = slurm::RequestView::Phase;
  slurm::RequestView view;
  view.id = r.id();
  absl::string_view state = v1::RequestState_Name(r.state());
  absl::ConsumePrefix(&state, "REQUEST_STATE_");
  view.state = std::string(state);
  view.reason_code = r.reason_code();
  view.reason = r.reason();
  for (const v1::Placement& p : r.placements()) view.nodes.push_back(p.node());
  switch (r.state()) {
    case v1::REQUEST_STATE_ADMITTED:
      view.phase = Phase::kAdmitted;
      break;
    case v1::REQUEST_STATE_PREEMPTING:
      view.phase = Phase::kPreempting;
      view.deadline = absl::FromUnixSeconds(r.preempt_deadline().seconds()) +
                      absl::Nanoseconds(r.preempt_deadline().nanos());
      break;
    case v1::REQUEST_STATE_RELEASED:
    case v1::REQUEST_STATE_PREEMPTED:
    case v1::REQUEST_STATE_CANCELLED:
    case v1::REQUEST_STATE_DENIED:
      view.phase = Phase::kEnded;
      break;
    default:
      view.phase = Phase::kWaiting;  // QUEUED, PENDING_APPROVAL, RESERVED.
  }
  return view;
}

// The calls an action makes, on arbiterd and on Slurm.
class Actor {
 public:
  Actor(clients::LeaderChannel& leader, const Options& o, v1::WorkloadClass workload_class)
      : leader_(leader), options_(o), workload_class_(workload_class) {}

  slurm::Outcome Do(const slurm::Action& a) {
    slurm::Outcome out;
    const std::string job = absl::StrCat(a.job);
    switch (a.kind) {
      case slurm::Action::kAsk: {
        v1::RequestCapacityRequest req;
        req.set_idempotency_key(a.ask.idempotency_key);
        req.set_team(a.ask.team);
        req.set_pool(a.ask.pool);
        req.set_workload_class(workload_class_);
        req.set_members(a.ask.members);
        req.mutable_shape()->set_whole_gpus(a.ask.gpus_per_member);
        if (!a.ask.gpu_model.empty()) req.add_gpu_models(a.ask.gpu_model);
        req.set_preemptible(a.ask.preemptible);
        req.set_duration_seconds(a.ask.duration_seconds);
        req.set_description(a.ask.description);
        v1::RequestCapacityResponse resp;
        out.status = Call(Alloc()->RequestCapacity(Context().get(), req, &resp));
        if (!out.status.ok()) break;
        out.request = ViewOf(resp.request());
        // Recorded on the job before anything else, so that a restarted
        // bridge finds the request.
        std::vector<std::string> update = {
            "scontrol", "update", "JobId=" + job,
            "AdminComment=" + slurm::AdminCommentFor(resp.request().id(), a.restart)};
        if (out.request->phase == slurm::RequestView::Phase::kWaiting) {
          update.push_back("Comment=" + slurm::CommentFor(*out.request));
        }
        out.status = Slurm(update);
        break;
      }
      case slurm::Action::kLookup: {
        v1::GetRequestRequest req;
        req.set_id(a.request);
        v1::GetRequestResponse resp;
        out.status = Call(Alloc()->GetRequest(Context().get(), req, &resp));
        if (out.status.ok()) out.request = ViewOf(resp.request());
        break;
      }
      case slurm::Action::kShow:
        out.status = Slurm({"scontrol", "update", "JobId=" + job, "Comment=" + a.text});
        break;
      case slurm::Action::kAdmit: {
        // Claimed, pinned, then released: in this order, so that the job
        // never runs on an allocation that is not its own.
        v1::ClaimAllocationRequest req;
        req.set_id(a.request);
        req.set_holder(a.holder);
        v1::ClaimAllocationResponse resp;
        out.status = Call(Alloc()->ClaimAllocation(Context().get(), req, &resp));
        if (!out.status.ok()) break;
        out.request = ViewOf(resp.request());
        std::vector<std::string> pin = {"scontrol", "update", "JobId=" + job,
                                        "ReqNodeList=" + absl::StrJoin(a.nodes, ","),
                                        "Comment=" + a.text};
        // Slurm delays a requeued job's start (its begin time); Arbiter
        // has admitted this run now.
        if (a.restart > 0) pin.push_back("StartTime=now");
        out.status = Slurm(pin);
        if (out.status.ok()) out.status = Slurm({"scontrol", "release", job});
        break;
      }
      case slurm::Action::kRenew: {
        v1::RenewLeaseRequest req;
        req.set_id(a.request);
        req.set_holder(a.holder);
        v1::RenewLeaseResponse resp;
        out.status = Call(Alloc()->RenewLease(Context().get(), req, &resp));
        if (out.status.ok()) out.request = ViewOf(resp.request());
        break;
      }
      case slurm::Action::kRelease: {
        v1::ReleaseAllocationRequest req;
        req.set_id(a.request);
        if (a.run_started > 0) {
          req.mutable_workload_started_at()->set_seconds(a.run_started);
          req.mutable_workload_ended_at()->set_seconds(a.run_ended);
        }
        v1::ReleaseAllocationResponse resp;
        out.status = Call(Alloc()->ReleaseAllocation(Context().get(), req, &resp));
        break;
      }
      case slurm::Action::kHold:
        out.status = Slurm({"scontrol", "hold", job});
        break;
      case slurm::Action::kSignal:
        out.status = Slurm({"scancel", "--signal=" + options_.checkpoint_signal, "--full", job});
        break;
      case slurm::Action::kRequeue:
        out.status = Slurm({"scontrol", "update", "JobId=" + job, "Comment=" + a.text});
        if (out.status.ok()) {
          out.status =
              a.requeueable ? Slurm({"scontrol", "requeuehold", job}) : Slurm({"scancel", job});
        }
        break;
      case slurm::Action::kCancel:
        out.status = Slurm({"scontrol", "update", "JobId=" + job, "Comment=" + a.text});
        if (out.status.ok()) out.status = Slurm({"scancel", job});
        break;
    }
    return out;
  }

  // Writes the job_submit plugin's policy (the teams, the GPU types) and
  // adds each team as a Slurm account. Errors are logged; the next sync
  // tries again.
  void Sync(bool accounts, uid_t bridge_uid) {
    v1::ListTeamsResponse teams;
    const absl::Status listed =
        Call(v1::GovernanceService::NewStub(leader_.Get())
                 ->ListTeams(Context().get(), v1::ListTeamsRequest(), &teams));
    if (!listed.ok()) {
      Log(absl::StrCat("sync: listing teams: ", listed.ToString()));
      return;
    }
    std::vector<std::string> names;
    for (const v1::Team& t : teams.teams()) {
      if (LuaSafe(t.name())) names.push_back(t.name());
    }
    if (!options_.policy_file.empty()) WritePolicy(names, bridge_uid);
    if (!accounts) return;
    absl::StatusOr<std::string> existing = slurm::RunCommand(
        {"sacctmgr", "--noheader", "--parsable2", "list", "account", "format=account"});
    if (!existing.ok()) {
      Log(absl::StrCat("sync: listing accounts: ", existing.status().ToString()));
      return;
    }
    std::set<std::string> have;
    for (absl::string_view line : absl::StrSplit(*existing, '\n', absl::SkipWhitespace())) {
      have.insert(std::string(absl::StripAsciiWhitespace(line)));
    }
    for (const std::string& name : names) {
      if (have.count(name) > 0) continue;
      const absl::Status added =
          Slurm({"sacctmgr", "--immediate", "add", "account", name,
                 "Description=Arbiter team " + name, "Organization=arbiter"});
      Log(absl::StrCat("sync: account ", name, ": ", added.ok() ? "added" : added.ToString()));
    }
    SyncLimits(names);
    SyncQos(names);
  }

  // The preemptible QOS exists, and every team account may use it: a job
  // in it is asked for as preemptible (it may borrow beyond quota, and is
  // what Arbiter reclaims first). Arbiter preempts; Slurm's own preemption
  // stays off for it.
  void SyncQos(const std::vector<std::string>& teams) {
    const std::string& qos = options_.preemptible_qos;
    if (qos.empty() || !LuaSafe(qos)) return;
    absl::StatusOr<std::string> existing =
        slurm::RunCommand({"sacctmgr", "--noheader", "--parsable2", "show", "qos", "format=name"});
    absl::StatusOr<std::string> associations =
        slurm::RunCommand({"sacctmgr", "--noheader", "--parsable2", "show", "association",
                           "format=account,user,qos"});
    if (!existing.ok() || !associations.ok()) {
      Log(absl::StrCat("sync: qos: ", !existing.ok() ? existing.status().ToString()
                                                     : associations.status().ToString()));
      return;
    }
    bool have = false;
    for (absl::string_view line : absl::StrSplit(*existing, '\n', absl::SkipWhitespace())) {
      have = have || absl::StripAsciiWhitespace(line) == qos;
    }
    if (!have) {
      const absl::Status added =
          Slurm({"sacctmgr", "--immediate", "add", "qos", qos,
                 "Description=Arbiter: preemptible, may borrow beyond quota"});
      Log(absl::StrCat("sync: qos ", qos, ": ", added.ok() ? "added" : added.ToString()));
      if (!added.ok()) return;
    }
    std::map<std::string, std::set<std::string>> allowed;  // Account -> its QOS.
    for (absl::string_view line : absl::StrSplit(*associations, '\n', absl::SkipWhitespace())) {
      std::vector<std::string> f = absl::StrSplit(line, '|');
      if (f.size() != 3 || !f[1].empty()) continue;
      for (absl::string_view q : absl::StrSplit(f[2], ',', absl::SkipEmpty())) {
        allowed[f[0]].insert(std::string(q));
      }
      allowed[f[0]];  // An account with no QOS listed.
    }
    for (const std::string& team : teams) {
      auto it = allowed.find(team);
      if (it == allowed.end() || it->second.count(qos) > 0) continue;
      const absl::Status set = Slurm({"sacctmgr", "--immediate", "modify", "account", "where",
                                      "name=" + team, "set", "QOS+=" + qos});
      Log(absl::StrCat("sync: account ", team, " QOS+=", qos, ": ",
                       set.ok() ? "set" : set.ToString()));
    }
  }

  // Sets each team account's GrpTRES to what Arbiter's quotas in the
  // cluster's pools allow it (clients/slurm/limits.h).
  void SyncLimits(const std::vector<std::string>& teams) {
    v1::ListQuotasResponse quotas;
    const absl::Status listed =
        Call(v1::GovernanceService::NewStub(leader_.Get())
                 ->ListQuotas(Context().get(), v1::ListQuotasRequest(), &quotas));
    absl::StatusOr<std::string> partitions =
        slurm::RunCommand({"sinfo", "--noheader", "--format=%R"});
    absl::StatusOr<std::string> associations =
        slurm::RunCommand({"sacctmgr", "--noheader", "--parsable2", "show", "association",
                           "format=account,user,grptres"});
    if (!listed.ok() || !partitions.ok() || !associations.ok()) {
      Log(absl::StrCat("sync: limits: ", !listed.ok()       ? listed.ToString()
                                         : !partitions.ok() ? partitions.status().ToString()
                                                            : associations.status().ToString()));
      return;
    }
    std::set<std::string> pools;
    for (absl::string_view p : absl::StrSplit(*partitions, '\n', absl::SkipWhitespace())) {
      const std::string partition(absl::StripAsciiWhitespace(p));
      auto mapped = options_.partition_pools_map.find(partition);
      pools.insert(mapped == options_.partition_pools_map.end() ? partition : mapped->second);
    }
    std::map<std::string, std::string> model_types;
    for (const auto& [type, model] : options_.gpu_type_map) model_types[model] = type;
    std::vector<slurm::QuotaLine> lines;
    for (const v1::QuotaUsage& u : quotas.quotas()) {
      const v1::Quota& q = u.quota();
      slurm::QuotaLine line{q.team(), q.pool(), q.gpu_model(), q.nominal_milli(), std::nullopt};
      if (q.has_borrowing_limit_milli()) line.borrowing_limit_milli = q.borrowing_limit_milli();
      lines.push_back(line);
    }
    const std::map<std::string, slurm::TresLimits> wanted =
        slurm::GrpTresFor(lines, pools, model_types);
    std::map<std::string, slurm::TresLimits> current;
    for (absl::string_view line : absl::StrSplit(*associations, '\n', absl::SkipWhitespace())) {
      std::vector<std::string> f = absl::StrSplit(line, '|');
      if (f.size() == 3 && f[1].empty()) current[f[0]] = slurm::ParseTres(f[2]);
    }
    for (const std::string& team : teams) {
      if (current.count(team) == 0) continue;  // No account (yet).
      auto w = wanted.find(team);
      const std::string change =
          slurm::TresChange(current[team], w == wanted.end() ? slurm::TresLimits{} : w->second);
      if (change.empty()) continue;
      const absl::Status set = Slurm({"sacctmgr", "--immediate", "modify", "account", "where",
                                      "name=" + team, "set", "GrpTRES=" + change});
      Log(absl::StrCat("sync: account ", team, " GrpTRES=", change, ": ",
                       set.ok() ? "set" : set.ToString()));
    }
  }

 private:
  v1::AllocationService::Stub* Alloc() {
    stub_ = v1::AllocationService::NewStub(leader_.Get());
    return stub_.get();
  }

  absl::Status Call(const grpc::Status& s) {
    leader_.Follow(s);
    return StatusOf(s);
  }

  static absl::Status Slurm(const std::vector<std::string>& argv) {
    absl::StatusOr<std::string> out = slurm::RunCommand(argv);
    return out.ok() ? absl::OkStatus() : out.status();
  }

  // A name written into the Lua policy as it is.
  static bool LuaSafe(const std::string& name) {
    if (name.empty()) return false;
    for (char c : name) {
      if (!absl::ascii_isalnum(c) && c != '_' && c != '-' && c != '.') return false;
    }
    return true;
  }

  void WritePolicy(const std::vector<std::string>& teams, uid_t bridge_uid) {
    std::string text =
        "-- Written by arbiter-slurm (docs/slurm.md); read by job_submit.lua.\nreturn {\n"
        "  accounts = {";
    for (const std::string& t : teams) absl::StrAppend(&text, " [\"", t, "\"] = true,");
    absl::StrAppend(&text, " },\n  gpu_types = {");
    std::vector<std::string> types;
    for (const std::string& pair : options_.gpu_types) {
      const std::string type = pair.substr(0, pair.find('='));
      if (!LuaSafe(type)) continue;
      types.push_back(type);
      absl::StrAppend(&text, " [\"", type, "\"] = true,");
    }
    absl::StrAppend(&text, " },\n  known_types = \"", absl::StrJoin(types, ", "), "\",\n",
                    "  bridge_uid = ", bridge_uid, ",\n}\n");
    if (text == written_) return;
    const std::string temp = options_.policy_file + ".tmp";
    {
      std::ofstream out(temp, std::ios::trunc);
      out << text;
      if (!out) {
        Log("sync: cannot write " + temp);
        return;
      }
    }
    chmod(temp.c_str(), 0644);
    if (std::rename(temp.c_str(), options_.policy_file.c_str()) != 0) {
      Log("sync: cannot replace " + options_.policy_file);
      return;
    }
    written_ = text;
    Log(absl::StrCat("sync: policy written: ", teams.size(), " teams, ", types.size(),
                     " GPU types"));
  }

  clients::LeaderChannel& leader_;
  const Options& options_;
  const v1::WorkloadClass workload_class_;
  std::unique_ptr<v1::AllocationService::Stub> stub_;
  std::string written_;
};

bool ParseFlagDuration(const std::string& flag, const std::string& text, absl::Duration min,
                       absl::Duration* out) {
  if (!absl::ParseDuration(text, out) || *out < min || *out > absl::Hours(24)) {
    std::cerr << "arbiter-slurm: --" << flag << " must be a duration in "
              << absl::FormatDuration(min) << "..24h, got " << text << "\n";
    return false;
  }
  return true;
}

// "a=b" pairs into a map; false (naming the flag) on a malformed pair.
bool ParsePairs(const std::string& flag, const std::vector<std::string>& pairs,
                std::map<std::string, std::string>* out) {
  for (const std::string& pair : pairs) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == pair.size()) {
      std::cerr << "arbiter-slurm: --" << flag << " takes SLURM=ARBITER, got " << pair << "\n";
      return false;
    }
    (*out)[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "arbiter-slurm: the bridge that admits, pins, renews, preempts and releases Slurm's GPU "
      "jobs through Arbiter\n"
      "  arbiter-slurm --endpoint arbiter:7443 --tls-ca ca.pem --tls-cert slurm.pem \\\n"
      "      --tls-key slurm.key --cluster hpc --gpu-type h100=H100-80GB \\\n"
      "      --policy-file /etc/slurm/arbiter-policy.lua"};
  app.add_option("--endpoint", o.endpoint, "arbiterd host:port")->capture_default_str();
  app.add_option("--tls-ca", o.ca_file, "CA that signed arbiterd's certificate (PEM)");
  app.add_option("--tls-cert", o.cert_file,
                 "this bridge's certificate (PEM): team_member of the Slurm teams");
  app.add_option("--tls-key", o.key_file, "this bridge's private key (PEM)");
  app.add_option("--cluster", o.cluster, "the Arbiter cluster the Slurm nodes are in")->required();
  app.add_option("--gpu-type", o.gpu_types,
                 "a Slurm GRES type and the Arbiter GPU model it is, TYPE=MODEL (repeat)");
  app.add_option("--partition-pool", o.partition_pools,
                 "a partition and the Arbiter pool it is, PARTITION=POOL (repeat); default: the "
                 "pool of the partition's name");
  app.add_option("--preemptible-qos", o.preemptible_qos,
                 "jobs in this QOS are asked for as preemptible (may borrow)")
      ->capture_default_str();
  app.add_option("--workload-class", o.workload_class,
                 "the workload class of the jobs: training, batch_analytics, experimentation")
      ->capture_default_str();
  app.add_option("--poll-every", o.poll_every, "read squeue this often")->capture_default_str();
  app.add_option("--renew-every", o.renew_every, "renew each admitted job's lease this often")
      ->capture_default_str();
  app.add_option("--retry-every", o.retry_every,
                 "look at a waiting request, or retry a failed call, this often")
      ->capture_default_str();
  app.add_option("--lookup-every", o.lookup_every,
                 "look at a waiting request this often (admissions come through the watch)")
      ->capture_default_str();
  app.add_option("--sync-every", o.sync_every,
                 "write the policy file and add missing accounts this often")
      ->capture_default_str();
  app.add_option("--checkpoint-signal", o.checkpoint_signal,
                 "the signal a preempted job gets at the notice (its checkpoint)")
      ->capture_default_str();
  app.add_option("--policy-file", o.policy_file,
                 "where job_submit.lua reads its policy (arbiter-policy.lua beside it)");
  app.add_flag("!--no-sync-accounts", o.sync_accounts,
               "do not add Arbiter's teams as Slurm accounts (sacctmgr)");
  CLI11_PARSE(app, argc, argv);

  absl::Duration poll_every, renew_every, retry_every, sync_every, lookup_every;
  if (!ParseFlagDuration("poll-every", o.poll_every, absl::Milliseconds(100), &poll_every) ||
      !ParseFlagDuration("renew-every", o.renew_every, absl::Seconds(1), &renew_every) ||
      !ParseFlagDuration("retry-every", o.retry_every, absl::Milliseconds(100), &retry_every) ||
      !ParseFlagDuration("sync-every", o.sync_every, absl::Seconds(1), &sync_every) ||
      !ParseFlagDuration("lookup-every", o.lookup_every, absl::Milliseconds(100), &lookup_every)) {
    return 2;
  }
  slurm::BridgeOptions options;
  options.cluster = o.cluster;
  options.preemptible_qos = o.preemptible_qos;
  options.renew_every = renew_every;
  options.retry_every = retry_every;
  options.lookup_every = lookup_every;
  if (!ParsePairs("gpu-type", o.gpu_types, &options.gpu_types) ||
      !ParsePairs("partition-pool", o.partition_pools, &options.partition_pools)) {
    return 2;
  }
  o.gpu_type_map = options.gpu_types;
  o.partition_pools_map = options.partition_pools;
  v1::WorkloadClass workload_class;
  if (!v1::WorkloadClass_Parse("WORKLOAD_CLASS_" + absl::AsciiStrToUpper(o.workload_class),
                               &workload_class) ||
      workload_class == v1::WORKLOAD_CLASS_UNSPECIFIED) {
    std::cerr << "arbiter-slurm: --workload-class: unknown class " << o.workload_class << "\n";
    return 2;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> opened =
      clients::OpenChannel(o.endpoint, {o.ca_file, o.cert_file, o.key_file});
  if (!opened.ok()) {
    std::cerr << "arbiter-slurm: " << opened.status().message() << "\n";
    return 2;
  }
  clients::LeaderChannel leader(o.endpoint, {o.ca_file, o.cert_file, o.key_file}, *opened);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  slurm::Bridge bridge(options);
  std::mutex mu;  // Serialises the bridge's calls: the loop and the watch.
  // The cluster's admissions, preemption notices and endings, so that a
  // waiting job is released and a preempted one signalled at once rather
  // than at the next lookup or renewal.
  v1::WatchAllocationsRequest watch;
  watch.set_cluster(o.cluster);
  for (v1::AllocationEventType type :
       {v1::ALLOCATION_EVENT_TYPE_ADMITTED, v1::ALLOCATION_EVENT_TYPE_PREEMPTING,
        v1::ALLOCATION_EVENT_TYPE_RELEASED, v1::ALLOCATION_EVENT_TYPE_PREEMPTED}) {
    watch.add_types(type);
  }
  clients::WatchCallbacks on_watch;
  on_watch.on_event = [&](const v1::WatchAllocationsResponse& event) {
    std::lock_guard<std::mutex> lock(mu);
    bridge.AllocationChanged(ViewOf(event.request()));
  };
  on_watch.log = Log;
  std::thread watch_thread([&] { clients::FollowAllocations(leader, watch, g_stop, on_watch); });
  Actor actor(leader, o, workload_class);
  absl::Time synced_at = absl::InfinitePast();
  std::string last_error;
  Log(absl::StrCat("bridging Slurm to ", o.endpoint, " for cluster ", o.cluster));
  while (!g_stop.load()) {
    const absl::Time started = absl::Now();
    if (started - synced_at >= sync_every) {
      actor.Sync(o.sync_accounts, geteuid());
      synced_at = started;
    }
    absl::StatusOr<std::string> listed = slurm::RunCommand({"squeue", "--json"});
    absl::StatusOr<std::vector<slurm::SlurmJob>> jobs =
        listed.ok() ? slurm::ParseSqueueJson(*listed)
                    : absl::StatusOr<std::vector<slurm::SlurmJob>>(listed.status());
    if (!jobs.ok()) {
      // Nothing is decided on an old picture: held jobs stay held.
      const std::string error = jobs.status().ToString();
      if (error != last_error) Log("squeue: " + error);
      last_error = error;
    } else {
      last_error.clear();
      std::vector<slurm::Action> actions;
      {
        std::lock_guard<std::mutex> lock(mu);
        bridge.Jobs(*jobs, absl::Now());
        actions = bridge.Plan(absl::Now());
      }
      for (const slurm::Action& a : actions) {
        const slurm::Outcome outcome = actor.Do(a);
        if ((a.kind != slurm::Action::kRenew && a.kind != slurm::Action::kLookup) ||
            !outcome.status.ok()) {
          Log(absl::StrCat(a.Describe(), ": ",
                           outcome.status.ok() ? "done" : outcome.status.ToString()));
        }
        std::lock_guard<std::mutex> lock(mu);
        bridge.Done(a, outcome, absl::Now());
      }
    }
    while (!g_stop.load() && absl::Now() - started < poll_every) {
      absl::SleepFor(std::min(absl::Milliseconds(50), poll_every));
    }
  }
  watch_thread.join();
  Log("stopped");
  return 0;
}
