#include "clients/arbctl/commands.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <yaml-cpp/yaml.h>

#include "clients/arbctl/table.h"
#include "clients/common/channel.h"

namespace arbiter::arbctl {
namespace {

void PrintJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  std::cout << out;
}

// Block style for `node` and everything under it.
void SetBlockStyle(YAML::Node node) {
  node.SetStyle(YAML::EmitterStyle::Block);
  if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it) SetBlockStyle(it->second);
  } else if (node.IsSequence()) {
    for (auto it = node.begin(); it != node.end(); ++it) SetBlockStyle(*it);
  }
}

// "REQUEST_STATE_ADMITTED" -> "admitted".
std::string Short(const std::string& enum_name, const std::string& prefix) {
  return absl::AsciiStrToLower(enum_name.substr(prefix.size()));
}

std::string Milli(int64_t milli) {
  if (milli % 1000 == 0) return absl::StrCat(milli / 1000);
  return absl::StrCat(milli / 1000, ".", absl::StrFormat("%03d", milli % 1000));
}

std::string ShapeText(const v1::CapacityRequest& r) {
  const v1::MemberShape& s = r.placed_shape();
  std::string each;
  if (s.has_whole_gpus()) {
    each = absl::StrCat(s.whole_gpus(), " GPU");
  } else if (s.has_mig_profile()) {
    each = absl::StrCat("MIG ", s.mig_profile());
  } else {
    each = absl::StrCat(s.fraction().gpu_milli(), "m/", s.fraction().memory_mib(), "MiB");
  }
  const char* sized = r.shape().has_model_profile() ? " (sized from the model profile)" : "";
  return absl::StrCat(r.members(), "x", each, sized);
}

std::string PlacementText(const v1::CapacityRequest& r) {
  std::vector<std::string> parts;
  for (const auto& p : r.placements()) {
    parts.push_back(absl::StrCat(p.node(), ":", absl::StrJoin(p.gpu_indices(), ",")));
  }
  return absl::StrJoin(parts, " ");
}

std::string Hint(grpc::StatusCode code, const std::string& endpoint) {
  switch (code) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::StrCat("is arbiterd running at ", endpoint,
                          "? Start it with deploy/local/up, or pass --endpoint / set "
                          "ARBITER_ENDPOINT. Retrying a request with the same --key is safe.");
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "the server did not answer in time; retry with the same --key, or raise --timeout";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "fix the field named above; see `arbctl <command> --help`";
    case grpc::StatusCode::NOT_FOUND:
      return "list what exists with `arbctl teams list`, `arbctl pools list` or "
             "`arbctl models list`";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "the object is not in a state that allows this; see `arbctl requests get ID`";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "the name is taken; choose another";
    default:
      return "";
  }
}

std::string RandomKey() {
  std::random_device rd;
  return absl::StrCat("arbctl-", absl::Hex(rd()), absl::Hex(rd()));
}

// The file's text; "" for no path, or with a message on stderr when it
// cannot be read.
std::string ReadFileOrWarn(const std::string& path, const char* what) {
  if (path.empty()) return "";
  std::ifstream in(path);
  if (!in.good()) {
    std::cerr << "arbctl: cannot read " << what << " " << path << "\n";
    return "";
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::shared_ptr<grpc::ChannelCredentials> CredentialsFor(const GlobalOptions& o) {
  if (o.ca_file.empty() && o.cert_file.empty() && o.key_file.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFileOrWarn(o.ca_file, "--tls-ca");
  ssl.pem_cert_chain = ReadFileOrWarn(o.cert_file, "--tls-cert");
  ssl.pem_private_key = ReadFileOrWarn(o.key_file, "--tls-key");
  return grpc::SslCredentials(ssl);
}

}  // namespace

Commands::Commands(GlobalOptions options) : options_(std::move(options)) {
  if (options_.json) options_.output = "json";
  options_.json = options_.output == "json" || options_.output == "yaml";
  Connect(options_.endpoint);
}

void Commands::Connect(const std::string& endpoint) const {
  endpoint_ = endpoint;
  auto channel = grpc::CreateChannel(endpoint, CredentialsFor(options_));
  inventory_ = v1::InventoryService::NewStub(channel);
  governance_ = v1::GovernanceService::NewStub(channel);
  allocation_ = v1::AllocationService::NewStub(channel);
  ledger_ = v1::LedgerService::NewStub(channel);
  chargeback_ = v1::ChargebackService::NewStub(channel);
  telemetry_ = v1::TelemetryService::NewStub(channel);
}

std::string Commands::LeaderNamedIn(const grpc::Status& status) {
  return clients::LeaderNamedIn(status);
}

void Commands::Deadline(grpc::ClientContext& ctx) const {
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::seconds(options_.timeout_seconds));
}

int Commands::Fail(const grpc::Status& status) const {
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  std::cerr << "arbctl: " << absl::StatusCodeToString(code) << ": " << status.error_message()
            << "\n";
  const std::string hint = Hint(status.error_code(), endpoint_);
  if (!hint.empty()) std::cerr << "hint: " << hint << "\n";
  return 1;
}

int Commands::ListModels() {
  v1::ListGpuModelsResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::ListGpuModels, v1::ListGpuModelsRequest(),
            &resp))
    return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"MODEL", "VENDOR", "MEMORY_MIB", "SMS", "TDP_W", "NVLINK", "MIG_PROFILES"});
  for (const auto& m : resp.gpu_models()) {
    std::vector<std::string> profiles;
    for (const auto& p : m.mig_profiles()) profiles.push_back(p.name());
    t.AddRow({m.name(), m.vendor(), absl::StrCat(m.memory_mib()), absl::StrCat(m.sm_count()),
              absl::StrCat(m.tdp_watts()), absl::StrCat(m.nvlink_domain_size()),
              profiles.empty() ? "-" : absl::StrJoin(profiles, ",")});
  }
  PrintTable(t);
  return 0;
}

int Commands::ListClusters() {
  v1::ListClustersResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::ListClusters, v1::ListClustersRequest(),
            &resp))
    return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"CLUSTER", "DESCRIPTION"});
  for (const auto& c : resp.clusters()) t.AddRow({c.name(), c.description()});
  PrintTable(t);
  return 0;
}

int Commands::ListPools() {
  v1::ListPoolsResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::ListPools, v1::ListPoolsRequest(), &resp))
    return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"POOL", "LATENCY_CLASS", "ADMITS", "BORROWS", "GRACE_S", "SPOT_GRACE_S", "QUEUEING",
           "STARVATION_S", "DESCRIPTION"});
  for (const auto& p : resp.pools()) {
    std::vector<std::string> admits, borrows;
    for (const v1::PoolClassRule& r : p.effective_class_rules()) {
      const std::string c = absl::AsciiStrToLower(
          Short(v1::WorkloadClass_Name(r.workload_class()), "WORKLOAD_CLASS_"));
      if (r.admission() == v1::CLASS_ADMISSION_ADMIT) admits.push_back(c);
      if (r.admission() == v1::CLASS_ADMISSION_BORROW) {
        borrows.push_back(r.window().empty() ? c : absl::StrCat(c, "[", r.window(), "]"));
      }
    }
    t.AddRow(
        {p.name(), Short(v1::LatencyClass_Name(p.latency_class()), "LATENCY_CLASS_"),
         admits.empty() ? "-" : absl::StrJoin(admits, ","),
         borrows.empty() ? "-" : absl::StrJoin(borrows, ","),
         absl::StrCat(p.reclaim_grace_seconds()),
         p.has_spot_grace_seconds() ? absl::StrCat(p.spot_grace_seconds()) : "-",
         absl::AsciiStrToLower(Short(v1::QueueingPolicy_Name(p.queueing()), "QUEUEING_POLICY_")),
         absl::StrCat(p.starvation_limit_seconds()), p.description()});
  }
  PrintTable(t);
  return 0;
}

int Commands::ServingForecast(const std::string& pool, int32_t hours) {
  v1::GetServingForecastRequest req;
  req.set_pool(pool);
  req.set_hours(hours);
  v1::GetServingForecastResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::GetServingForecast, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  auto utc = [](const google::protobuf::Timestamp& t) {
    return absl::FormatTime("%Y-%m-%dT%H:%MZ", absl::FromUnixSeconds(t.seconds()),
                            absl::UTCTimeZone());
  };
  Table t({"QUARTER_HOUR", "FORECAST_GPU", "OBSERVED"});
  for (const v1::ForecastSlot& s : resp.slots()) {
    t.AddRow({utc(s.start()), Milli(s.forecast_milli()), s.observed() ? "yes" : "no"});
  }
  if (options_.output == "csv") return PrintTable(t), 0;  // The quarter hours only.
  std::cout << "pool " << resp.pool() << ": capacity " << Milli(resp.capacity_milli())
            << " GPU, own classes hold " << Milli(resp.own_milli()) << " (+"
            << Milli(resp.asked_milli()) << " asked), lent " << Milli(resp.lent_milli())
            << ", leaving " << Milli(resp.leaving_milli()) << ", free " << Milli(resp.free_milli())
            << "\n";
  std::cout << "lead " << resp.lead_seconds() << " s: peak forecast " << Milli(resp.peak_milli())
            << " GPU" << (resp.peak_milli() > 0 ? " from " + utc(resp.peak_at()) : "")
            << "; reclaim now " << Milli(resp.reclaim_milli()) << " GPU\n";
  PrintTable(t);
  if (resp.notices_size() > 0) {
    Table n({"NOTICE", "TEAM", "GPU", "VACATE_BY", "REASON"});
    for (const v1::CapacityRequest& r : resp.notices()) {
      n.AddRow(
          {absl::StrCat(r.id()), r.team(), ShapeText(r), utc(r.preempt_deadline()), r.reason()});
    }
    PrintTable(n);
  }
  return 0;
}

int Commands::ListInventory(const std::string& cluster, const std::string& pool) {
  v1::ListNodesRequest req;
  req.set_cluster(cluster);
  req.set_pool(pool);
  v1::ListNodesResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::ListNodes, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"CLUSTER", "NODE", "POOL", "STATE", "GPUS", "MODEL", "ALLOCATED_GPU", "FREE_WHOLE_GPUS",
           "MIG_GPUS"});
  for (const auto& n : resp.nodes()) {
    int64_t allocated = 0;
    int free_whole = 0;
    int partitioned = 0;
    for (const auto& g : n.gpus()) {
      allocated += g.allocated_milli();
      if (g.allocated_milli() == 0) ++free_whole;
      if (g.mig_instances_size() > 0) ++partitioned;
    }
    t.AddRow({n.cluster(), n.name(), n.pool(), NodeStateWord(n.state()),
              absl::StrCat(n.gpus_size()), n.gpus_size() > 0 ? n.gpus(0).model() : "",
              Milli(allocated), absl::StrCat(free_whole), absl::StrCat(partitioned)});
  }
  PrintTable(t);
  return 0;
}

int Commands::ListTeams() {
  v1::ListTeamsResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::ListTeams, v1::ListTeamsRequest(), &resp))
    return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"TEAM", "PARENT", "WEIGHT"});
  for (const auto& team : resp.teams()) {
    t.AddRow(
        {team.name(), team.parent().empty() ? "-" : team.parent(), Milli(team.weight_milli())});
  }
  PrintTable(t);
  return 0;
}

int Commands::CreateTeam(const std::string& name, const std::string& parent, int64_t weight_milli) {
  v1::CreateTeamRequest req;
  req.mutable_team()->set_name(name);
  req.mutable_team()->set_parent(parent);
  req.mutable_team()->set_weight_milli(weight_milli);
  v1::CreateTeamResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::CreateTeam, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "created team " << resp.team().name() << "\n";
  return 0;
}

int Commands::ListQuotas(const std::string& team) {
  v1::ListQuotasRequest req;
  req.set_team(team);
  v1::ListQuotasResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::ListQuotas, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"TEAM", "POOL", "MODEL", "NOMINAL_GPU", "BORROW_GPU", "LEND_GPU", "USED_GPU",
           "COHORT_LEND_GPU", "COHORT_BORROW_GPU"});
  // A limit that may be unset (-1 or absent): "-" then.
  auto limit = [](bool has, int64_t milli) { return has && milli >= 0 ? Milli(milli) : "-"; };
  for (const auto& q : resp.quotas()) {
    const v1::Quota& quota = q.quota();
    t.AddRow(
        {quota.team(), quota.pool(), quota.gpu_model().empty() ? "*" : quota.gpu_model(),
         Milli(quota.nominal_milli()),
         quota.borrowing_limit_milli() < 0 ? "unlimited" : Milli(quota.borrowing_limit_milli()),
         Milli(quota.lending_limit_milli()), Milli(q.used_milli()),
         limit(quota.has_cohort_lending_limit_milli(), quota.cohort_lending_limit_milli()),
         limit(quota.has_cohort_borrowing_limit_milli(), quota.cohort_borrowing_limit_milli())});
  }
  PrintTable(t);
  return 0;
}

int Commands::SetQuota(const std::string& team, const std::string& pool, int64_t nominal_milli,
                       const std::string& gpu_model, const QuotaLimits& limits) {
  v1::SetQuotaRequest req;
  v1::Quota* quota = req.mutable_quota();
  quota->set_team(team);
  quota->set_pool(pool);
  quota->set_nominal_milli(nominal_milli);
  quota->set_gpu_model(gpu_model);
  if (limits.borrow_milli != -2) quota->set_borrowing_limit_milli(limits.borrow_milli);
  if (limits.lend_milli >= 0) quota->set_lending_limit_milli(limits.lend_milli);
  if (limits.cohort_lend_milli >= 0)
    quota->set_cohort_lending_limit_milli(limits.cohort_lend_milli);
  if (limits.cohort_borrow_milli >= 0) {
    quota->set_cohort_borrowing_limit_milli(limits.cohort_borrow_milli);
  }
  v1::SetQuotaResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::SetQuota, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "quota of " << team << " in " << pool << ": " << Milli(nominal_milli) << " GPU\n";
  return 0;
}

int Commands::ListCoexistence() {
  v1::ListCoexistenceRulesResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::ListCoexistenceRules,
            v1::ListCoexistenceRulesRequest(), &resp))
    return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"CLASS_A", "CLASS_B", "SHARE_GPU", "SAME_NODE"});
  for (const auto& r : resp.rules()) {
    t.AddRow({Short(v1::WorkloadClass_Name(r.class_a()), "WORKLOAD_CLASS_"),
              Short(v1::WorkloadClass_Name(r.class_b()), "WORKLOAD_CLASS_"),
              Short(v1::GpuIsolation_Name(r.gpu_isolation()), "GPU_ISOLATION_"),
              r.same_node() ? "yes" : "no"});
  }
  PrintTable(t);
  return 0;
}

int Commands::SetCoexistence(const std::string& class_a, const std::string& class_b,
                             const std::string& isolation, bool same_node) {
  v1::SetCoexistenceRuleRequest req;
  v1::WorkloadClass a = v1::WORKLOAD_CLASS_UNSPECIFIED, b = v1::WORKLOAD_CLASS_UNSPECIFIED;
  v1::GpuIsolation iso = v1::GPU_ISOLATION_UNSPECIFIED;
  if (!v1::WorkloadClass_Parse("WORKLOAD_CLASS_" + absl::AsciiStrToUpper(class_a), &a) ||
      !v1::WorkloadClass_Parse("WORKLOAD_CLASS_" + absl::AsciiStrToUpper(class_b), &b)) {
    std::cerr << "arbctl: classes are training, inference, batch_analytics or experimentation\n";
    return 2;
  }
  if (!v1::GpuIsolation_Parse("GPU_ISOLATION_" + absl::AsciiStrToUpper(isolation), &iso)) {
    std::cerr << "arbctl: --gpu must be forbidden, mig_only or soft_sharing\n";
    return 2;
  }
  req.mutable_rule()->set_class_a(a);
  req.mutable_rule()->set_class_b(b);
  req.mutable_rule()->set_gpu_isolation(iso);
  req.mutable_rule()->set_same_node(same_node);
  v1::SetCoexistenceRuleResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::SetCoexistenceRule, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << class_a << " next to " << class_b << ": " << isolation
            << (same_node ? "" : ", not on the same node") << "\n";
  return 0;
}

int Commands::Request(const RequestOptions& r) {
  v1::RequestCapacityRequest req;
  req.set_idempotency_key(r.key.empty() ? RandomKey() : r.key);
  req.set_team(r.team);
  req.set_pool(r.pool);
  v1::WorkloadClass wc = v1::WORKLOAD_CLASS_UNSPECIFIED;
  if (!v1::WorkloadClass_Parse("WORKLOAD_CLASS_" + absl::AsciiStrToUpper(r.workload_class), &wc)) {
    std::cerr << "arbctl: --class must be training, inference, batch_analytics or "
                 "experimentation\n";
    return 2;
  }
  req.set_workload_class(wc);
  req.set_members(r.members);
  if (r.topology == "same-node") {
    req.set_topology(v1::TOPOLOGY_SAME_NODE);
  } else if (r.topology == "same-domain") {
    req.set_topology(v1::TOPOLOGY_SAME_DOMAIN);
  } else if (!r.topology.empty()) {
    std::cerr << "arbctl: --topology must be same-node or same-domain\n";
    return 2;
  }
  if (!r.mig_profile.empty()) {
    req.mutable_shape()->set_mig_profile(r.mig_profile);
  } else if (r.milli > 0) {
    req.mutable_shape()->mutable_fraction()->set_gpu_milli(r.milli);
    req.mutable_shape()->mutable_fraction()->set_memory_mib(r.gpu_memory_mib);
  } else {
    req.mutable_shape()->set_whole_gpus(r.gpus);
  }
  req.mutable_shape()->set_cpu_milli(r.cpu_milli);
  req.mutable_shape()->set_memory_mib(r.memory_mib);
  for (const std::string& m : r.models) req.add_gpu_models(m);
  req.set_description(r.description);
  req.set_priority(r.priority);
  req.set_preemptible(r.preemptible);
  req.set_guaranteed(r.guaranteed);
  req.set_spot(r.spot);
  req.set_burst_seconds(r.burst_seconds);
  req.set_recurrence(r.recurrence);  // The server parses and validates it.
  req.set_checkpoint_seconds(r.checkpoint_seconds);
  req.set_checkpoint_interval_seconds(r.checkpoint_every_seconds);
  if (!r.duration.empty()) {
    absl::Duration d;
    if (!absl::ParseDuration(r.duration, &d)) {
      std::cerr << "arbctl: --duration must be a duration such as 90m or 2h\n";
      return 2;
    }
    req.set_duration_seconds(absl::ToInt64Seconds(d));
  }
  if (!r.start.empty()) {
    absl::Time start;
    if (!ParseWhen(r.start, &start)) {
      std::cerr << "arbctl: --start must be an RFC 3339 time or +<duration> (e.g. +2h)\n";
      return 2;
    }
    req.mutable_start_time()->set_seconds(absl::ToUnixSeconds(start));
  }
  v1::RequestCapacityResponse resp;
  if (!Call(allocation_, &v1::AllocationService::Stub::RequestCapacity, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  PrintRequest(resp.request());
  if (resp.replayed()) std::cout << "(replayed: this key was answered before)\n";
  return 0;
}

void Commands::PrintRequest(const v1::CapacityRequest& r) const {
  std::cout << "request " << r.id() << " (key " << r.idempotency_key()
            << "): " << Short(v1::RequestState_Name(r.state()), "REQUEST_STATE_") << "\n"
            << "  team " << r.team() << ", pool " << r.pool() << ", "
            << Short(v1::WorkloadClass_Name(r.workload_class()), "WORKLOAD_CLASS_") << ", "
            << ShapeText(r) << " = " << Milli(r.total_gpu_milli()) << " GPU\n";
  if (r.priority() != 0 || r.preemptible() || r.guaranteed()) {
    std::cout << "  priority " << r.priority()
              << (r.guaranteed()    ? ", guaranteed (never preempted)"
                  : r.spot()        ? ", spot (preempted first, at the spot price)"
                  : r.preemptible() ? ", preemptible"
                                    : "")
              << "\n";
  }
  if (r.has_start_time()) {
    std::cout << "  starts " << google::protobuf::util::TimeUtil::ToString(r.start_time());
    if (r.duration_seconds() > 0) std::cout << " for " << r.duration_seconds() << " s";
    if (!r.recurrence().empty()) std::cout << ", one of the series '" << r.recurrence() << "'";
    std::cout << "\n";
  }
  if (!r.reason().empty()) {
    std::cout << "  why: " << r.reason_code() << ": " << r.reason() << "\n";
  }
  for (const auto& c : r.claims()) {
    std::cout << "  member " << c.member() << " claimed by " << c.holder() << " since "
              << google::protobuf::util::TimeUtil::ToString(c.claimed_at()) << ", renewed "
              << google::protobuf::util::TimeUtil::ToString(c.renewed_at()) << "\n";
  }
  if (r.has_enforce_at()) {
    std::cout << "  ends at " << google::protobuf::util::TimeUtil::ToString(r.enforce_at())
              << " unless " << (r.claims_size() < r.members() ? "claimed" : "renewed") << "\n";
  }
  if (r.queue_position() > 0) {
    std::cout << "  queue position: " << r.queue_position() << " in pool " << r.pool() << "\n";
  }
  if (r.has_planned_start()) {
    std::cout << "  planned start: "
              << google::protobuf::util::TimeUtil::ToString(r.planned_start())
              << " (head of the queue, " << r.holds_size() << " GPUs held for it from then)\n";
  }
  if (r.has_preempt_deadline() && r.state() == v1::REQUEST_STATE_PREEMPTING) {
    std::cout << "  must vacate by "
              << google::protobuf::util::TimeUtil::ToString(r.preempt_deadline()) << "\n";
  }
  if (r.state() == v1::REQUEST_STATE_PENDING_APPROVAL) {
    std::cout << "  approvers: " << absl::StrJoin(r.approvers(), ", ") << " (until "
              << google::protobuf::util::TimeUtil::ToString(r.approval_deadline()) << ")\n";
  }
  if (r.cost_micros() != 0) {
    std::cout << "  cost: " << r.cost_micros() << " micros"
              << (r.state() == v1::REQUEST_STATE_ADMITTED ? " (projected)" : "") << "\n";
  }
  if (r.approvals_size() > 0) {
    std::cout << "  approved: " << absl::StrJoin(r.approvals(), ", ") << "\n";
  }
  if (r.holds_size() > 0) {
    std::vector<std::string> held;
    for (const auto& h : r.holds()) {
      held.push_back(absl::StrCat(h.cluster(), "/", h.node(), ":", h.gpu_index()));
    }
    std::cout << "  holds GPUs " << absl::StrJoin(held, " ") << "\n";
  }
  for (const auto& p : r.placements()) {
    std::cout << "  member " << p.member() << " -> " << p.cluster() << "/" << p.node() << " GPU "
              << absl::StrJoin(p.gpu_indices(), ",") << " (" << Milli(p.gpu_milli()) << " each)";
    if (!p.mig_profile().empty()) {
      std::cout << " MIG " << p.mig_profile() << " at slot " << p.mig_start_slot();
    }
    std::cout << "\n";
    if (p.mig_new_layout_size() > 0) {
      std::vector<std::string> layout;
      for (const auto& i : p.mig_new_layout()) {
        layout.push_back(absl::StrCat(i.profile(), "@", i.start_slot()));
      }
      std::cout << "    partitions the GPU first: " << absl::StrJoin(layout, ",") << "\n";
    }
    if (p.mig_layout_cleared()) std::cout << "    removes the GPU's MIG layout first\n";
  }
}

int Commands::ListRequests(const std::string& team, const std::string& state, int limit) {
  v1::ListRequestsRequest req;
  req.set_team(team);
  if (!state.empty()) {
    v1::RequestState st = v1::REQUEST_STATE_UNSPECIFIED;
    if (!v1::RequestState_Parse("REQUEST_STATE_" + absl::AsciiStrToUpper(state), &st)) {
      std::cerr << "arbctl: --state must be admitted, queued, reserved, preempting, preempted, "
                   "denied, released or cancelled\n";
      return 2;
    }
    req.set_state(st);
  }
  req.set_page_size(limit);
  v1::ListRequestsResponse resp;
  if (!Call(allocation_, &v1::AllocationService::Stub::ListRequests, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"ID", "TEAM", "POOL", "STATE", "POS", "SHAPE", "GPU", "PLACEMENT / WHY"});
  for (const auto& r : resp.requests()) {
    std::string why = r.placements_size() > 0 ? PlacementText(r) : r.reason_code();
    if (r.has_planned_start()) {
      absl::StrAppend(&why, " (planned start ",
                      google::protobuf::util::TimeUtil::ToString(r.planned_start()), ")");
    }
    t.AddRow({absl::StrCat(r.id()), r.team(), r.pool(),
              Short(v1::RequestState_Name(r.state()), "REQUEST_STATE_"),
              r.queue_position() > 0 ? absl::StrCat(r.queue_position()) : "-", ShapeText(r),
              Milli(r.total_gpu_milli()), why});
  }
  PrintTable(t);
  return 0;
}

int Commands::GetRequest(int64_t id) {
  v1::GetRequestRequest req;
  req.set_id(id);
  v1::GetRequestResponse resp;
  if (!Call(allocation_, &v1::AllocationService::Stub::GetRequest, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  PrintRequest(resp.request());
  return 0;
}

int Commands::Release(int64_t id) {
  v1::ReleaseAllocationRequest req;
  req.set_id(id);
  v1::ReleaseAllocationResponse resp;
  if (!Call(allocation_, &v1::AllocationService::Stub::ReleaseAllocation, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  PrintRequest(resp.request());
  return 0;
}

int Commands::Claim(int64_t id, const std::string& holder, const std::vector<int32_t>& members) {
  v1::ClaimAllocationRequest req;
  req.set_id(id);
  req.set_holder(holder);
  for (int32_t m : members) req.add_members(m);
  v1::ClaimAllocationResponse resp;
  if (!Call(allocation_, &v1::AllocationService::Stub::ClaimAllocation, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  PrintRequest(resp.request());
  return 0;
}

int Commands::Renew(int64_t id, const std::string& holder) {
  v1::RenewLeaseRequest req;
  req.set_id(id);
  req.set_holder(holder);
  v1::RenewLeaseResponse resp;
  if (!Call(allocation_, &v1::AllocationService::Stub::RenewLease, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  PrintRequest(resp.request());
  return 0;
}

int Commands::Watch(const WatchOptions& w) {
  grpc::ClientContext ctx;  // No deadline: a watch runs until interrupted.
  v1::WatchAllocationsRequest req;
  req.set_team(w.team);
  req.set_pool(w.pool);
  req.set_cluster(w.cluster);
  req.set_node(w.node);
  req.set_request_id(w.request_id);
  req.set_start_revision(w.from_revision);
  for (const std::string& name : w.types) {
    v1::AllocationEventType type;
    if (!v1::AllocationEventType_Parse(
            absl::StrCat("ALLOCATION_EVENT_TYPE_", absl::AsciiStrToUpper(name)), &type) ||
        type == v1::ALLOCATION_EVENT_TYPE_UNSPECIFIED) {
      std::cerr << "arbctl: --type: unknown event type \"" << name << "\"" << std::endl;
      return 2;
    }
    req.add_types(type);
  }
  auto reader = allocation_->WatchAllocations(&ctx, req);
  v1::WatchAllocationsResponse event;
  int64_t revision = w.from_revision;
  while (reader->Read(&event)) {
    revision = std::max(revision, event.revision());
    if (options_.output == "yaml") {  // One YAML document per event.
      std::cout << "---\n";
      PrintJsonMessage(event);
      std::cout << std::flush;
      continue;
    }
    if (options_.json) {  // One JSON object per line.
      std::string out;
      (void)google::protobuf::util::MessageToJsonString(event, &out);
      std::cout << out << std::endl;
      continue;
    }
    if (event.bookmark()) continue;  // Only the position moves.
    const auto& r = event.request();
    std::cout << "rev " << event.revision() << "  "
              << google::protobuf::util::TimeUtil::ToString(event.committed_at()) << "  "
              << Short(v1::AllocationEventType_Name(event.type()), "ALLOCATION_EVENT_TYPE_")
              << "  request " << r.id() << "  " << r.team() << "/" << r.pool() << "  "
              << ShapeText(r) << "  " << (r.placements_size() ? PlacementText(r) : r.reason());
    if (event.type() == v1::ALLOCATION_EVENT_TYPE_PREEMPTING) {
      std::cout << "  vacate by "
                << google::protobuf::util::TimeUtil::ToString(r.preempt_deadline()) << " ("
                << r.reason() << ")";
    }
    std::cout << std::endl;
  }
  grpc::Status s = reader->Finish();
  if (s.ok()) return 0;
  if (revision > 0 && s.error_code() != grpc::StatusCode::OUT_OF_RANGE) {
    std::cerr << "arbctl: the watch ended at revision " << revision
              << "; resume with --from-revision " << revision << std::endl;
  }
  return Fail(s);
}

void Commands::PrintJsonMessage(const google::protobuf::Message& m) const {
  if (options_.output != "yaml") return PrintJson(m);
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &json, opts);
  // JSON is YAML; re-emitted in block style (loaded JSON is flow style).
  YAML::Node node = YAML::Load(json);
  SetBlockStyle(node);
  YAML::Emitter out;
  out << node;
  std::cout << out.c_str() << "\n";
}

void Commands::PrintTable(const Table& t) const {
  if (options_.output == "csv") return t.PrintCsv(std::cout);
  t.Print(std::cout);
}

}  // namespace arbiter::arbctl
