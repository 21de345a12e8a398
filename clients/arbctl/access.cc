// arbctl's role bindings and the inventory's clusters and pools
// (GrantRole, RevokeRole, ListRoleBindings, CreateCluster, CreatePool,
// RegisterNode).
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include "clients/arbctl/commands.h"
#include "clients/arbctl/table.h"

namespace arbiter::arbctl {
namespace {

std::string Lower(const std::string& enum_name, const std::string& prefix) {
  return absl::AsciiStrToLower(enum_name.substr(prefix.size()));
}

// A binding from the command line; false (and a message) when a word is not
// one the API knows.
bool ParseBinding(const std::string& subject, const std::string& role, const std::string& scope,
                  v1::RoleBinding* out) {
  v1::Role r = v1::ROLE_UNSPECIFIED;
  if (!v1::Role_Parse("ROLE_" + absl::AsciiStrToUpper(role), &r) || r == v1::ROLE_UNSPECIFIED) {
    std::cerr << "arbctl: --role must be platform_admin, pool_authority, team_admin, "
                 "team_member, finance, auditor or agent (see `arbctl roles grant --help`)\n";
    return false;
  }
  // "org", "team:NAME" or "pool:NAME".
  const std::vector<std::string> parts = absl::StrSplit(scope, absl::MaxSplits(':', 1));
  v1::ScopeKind kind = v1::SCOPE_KIND_UNSPECIFIED;
  if (!v1::ScopeKind_Parse("SCOPE_KIND_" + absl::AsciiStrToUpper(parts[0]), &kind) ||
      kind == v1::SCOPE_KIND_UNSPECIFIED || (kind == v1::SCOPE_KIND_ORG) != (parts.size() == 1)) {
    std::cerr << "arbctl: --scope must be org, team:NAME or pool:NAME\n";
    return false;
  }
  out->set_subject(subject);
  out->set_role(r);
  out->set_scope_kind(kind);
  out->set_scope(parts.size() == 2 ? parts[1] : "");
  return true;
}

std::string ScopeOf(const v1::RoleBinding& b) {
  const std::string kind = Lower(v1::ScopeKind_Name(b.scope_kind()), "SCOPE_KIND_");
  return b.scope().empty() ? kind : kind + ":" + b.scope();
}

// One row per binding: subject, role, scope.
Table BindingsTable(const google::protobuf::RepeatedPtrField<v1::RoleBinding>& bindings) {
  Table t({"SUBJECT", "ROLE", "SCOPE"});
  for (const v1::RoleBinding& b : bindings) {
    t.AddRow({b.subject(), Lower(v1::Role_Name(b.role()), "ROLE_"), ScopeOf(b)});
  }
  return t;
}

}  // namespace

int Commands::ListRoles() {
  v1::ListRoleBindingsResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::ListRoleBindings,
            v1::ListRoleBindingsRequest(), &resp)) {
    return 1;
  }
  if (options_.json) return PrintJsonMessage(resp), 0;
  PrintTable(BindingsTable(resp.bindings()));
  return 0;
}

int Commands::WhoAmI() {
  v1::WhoAmIResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::WhoAmI, v1::WhoAmIRequest(), &resp)) {
    return 1;
  }
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "principal: " << resp.principal() << "\n";
  std::cout << "groups: " << absl::StrJoin(resp.groups(), ", ") << "\n";
  std::cout << "platform admin: " << (resp.platform_admin() ? "yes" : "no") << "\n";
  PrintTable(BindingsTable(resp.bindings()));
  return 0;
}

int Commands::GrantRole(const std::string& subject, const std::string& role,
                        const std::string& scope, bool revoke) {
  v1::RoleBinding binding;
  if (!ParseBinding(subject, role, scope, &binding)) return 2;
  v1::RoleBinding done;
  if (revoke) {
    v1::RevokeRoleRequest req;
    *req.mutable_binding() = binding;
    v1::RevokeRoleResponse resp;
    if (!Call(governance_, &v1::GovernanceService::Stub::RevokeRole, req, &resp)) return 1;
    if (options_.json) return PrintJsonMessage(resp), 0;
    done = resp.binding();
  } else {
    v1::GrantRoleRequest req;
    *req.mutable_binding() = binding;
    v1::GrantRoleResponse resp;
    if (!Call(governance_, &v1::GovernanceService::Stub::GrantRole, req, &resp)) return 1;
    if (options_.json) return PrintJsonMessage(resp), 0;
    done = resp.binding();
  }
  std::cout << (revoke ? "revoked " : "granted ") << Lower(v1::Role_Name(done.role()), "ROLE_")
            << " on " << ScopeOf(done) << (revoke ? " from " : " to ") << done.subject() << "\n";
  return 0;
}

int Commands::CreateCluster(const std::string& name, const std::string& description) {
  v1::CreateClusterRequest req;
  req.mutable_cluster()->set_name(name);
  req.mutable_cluster()->set_description(description);
  v1::CreateClusterResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::CreateCluster, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "created cluster " << resp.cluster().name() << "\n";
  return 0;
}

namespace {

// "inference=borrow" as a class rule; false for anything else.
bool ParseClassRule(const std::string& text, v1::PoolClassRule* rule) {
  // CLASS=ADMISSION or CLASS=ADMISSION@WINDOW.
  const std::pair<std::string, std::string> rule_window =
      absl::StrSplit(text, absl::MaxSplits('@', 1));
  const std::pair<std::string, std::string> parts =
      absl::StrSplit(rule_window.first, absl::MaxSplits('=', 1));
  v1::WorkloadClass c = v1::WORKLOAD_CLASS_UNSPECIFIED;
  v1::ClassAdmission a = v1::CLASS_ADMISSION_UNSPECIFIED;
  if (!v1::WorkloadClass_Parse("WORKLOAD_CLASS_" + absl::AsciiStrToUpper(parts.first), &c) ||
      !v1::ClassAdmission_Parse("CLASS_ADMISSION_" + absl::AsciiStrToUpper(parts.second), &a) ||
      c == v1::WORKLOAD_CLASS_UNSPECIFIED || a == v1::CLASS_ADMISSION_UNSPECIFIED) {
    return false;
  }
  rule->set_workload_class(c);
  rule->set_admission(a);
  rule->set_window(rule_window.second);  // The server validates it.
  return true;
}

}  // namespace

int Commands::CreatePool(const PoolOptions& o) {
  v1::CreatePoolRequest req;
  v1::Pool* pool = req.mutable_pool();
  pool->set_name(o.name);
  pool->set_description(o.description);
  v1::LatencyClass lc = v1::LATENCY_CLASS_UNSPECIFIED;
  if (!v1::LatencyClass_Parse("LATENCY_CLASS_" + absl::AsciiStrToUpper(o.latency_class), &lc) ||
      lc == v1::LATENCY_CLASS_UNSPECIFIED) {
    std::cerr << "arbctl: --class must be serving, batch, spot or dev\n";
    return 2;
  }
  pool->set_latency_class(lc);
  for (const std::string& c : o.lends_to) {
    v1::WorkloadClass wc = v1::WORKLOAD_CLASS_UNSPECIFIED;
    if (!v1::WorkloadClass_Parse("WORKLOAD_CLASS_" + absl::AsciiStrToUpper(c), &wc)) {
      std::cerr << "arbctl: --lends-to must name workload classes: training, inference, "
                   "batch_analytics, experimentation\n";
      return 2;
    }
    pool->add_lends_to(wc);
  }
  for (const std::string& text : o.class_rules) {
    if (!ParseClassRule(text, pool->add_class_rules())) {
      std::cerr << "arbctl: --class-rule must be CLASS=ADMISSION[@WINDOW], e.g. "
                   "inference=borrow or \"training=borrow@weekdays 01:00-06:00 Europe/Berlin\" "
                   "(classes: training, inference, batch_analytics, experimentation; admissions: "
                   "admit, borrow, deny)\n";
      return 2;
    }
  }
  for (const std::string& text : o.headroom) {
    const std::pair<std::string, std::string> parts = absl::StrSplit(text, absl::MaxSplits('=', 1));
    int64_t milli = 0;
    if (parts.first.empty() || !absl::SimpleAtoi(parts.second, &milli) || milli <= 0) {
      std::cerr << "arbctl: --headroom must be MODEL=MILLI, e.g. H100-80GB=2000\n";
      return 2;
    }
    v1::Headroom* h = pool->add_headroom();
    h->set_gpu_model(parts.first);
    h->set_milli_gpus(milli);
  }
  pool->set_max_burst_seconds(o.max_burst_seconds);
  if (o.reclaim_grace_seconds >= 0) pool->set_reclaim_grace_seconds(o.reclaim_grace_seconds);
  pool->set_proactive_reclaim(o.proactive_reclaim);
  pool->set_cold_start_seconds(o.cold_start_seconds);
  if (!o.queueing.empty()) {
    v1::QueueingPolicy q = v1::QUEUEING_POLICY_UNSPECIFIED;
    if (!v1::QueueingPolicy_Parse("QUEUEING_POLICY_" + absl::AsciiStrToUpper(o.queueing), &q) ||
        q == v1::QUEUEING_POLICY_UNSPECIFIED) {
      std::cerr << "arbctl: --queueing must be backfill, best_effort or strict\n";
      return 2;
    }
    pool->set_queueing(q);
  }
  if (o.starvation_limit_seconds >= 0) {
    pool->set_starvation_limit_seconds(o.starvation_limit_seconds);
  }
  if (o.spot_grace_seconds >= 0) pool->set_spot_grace_seconds(o.spot_grace_seconds);
  pool->set_claim_deadline_seconds(o.claim_deadline_seconds);
  pool->set_lease_seconds(o.lease_seconds);
  v1::CreatePoolResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::CreatePool, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "created pool " << resp.pool().name() << "\n";
  return 0;
}

v1::Node Commands::NodeOf(const NodeOptions& n) {
  v1::Node node;
  node.set_cluster(n.cluster);
  node.set_name(n.name);
  node.set_pool(n.pool);
  node.set_cpu_milli(n.cpu_milli);
  node.set_memory_mib(n.memory_mib);
  node.set_topology_domain(n.topology_domain);
  for (int i = 0; i < n.gpus; ++i) {
    v1::Gpu* gpu = node.add_gpus();
    gpu->set_index(i);
    gpu->set_model(n.model);
    if (static_cast<size_t>(i) < n.uuids.size()) gpu->set_uuid(n.uuids[static_cast<size_t>(i)]);
  }
  return node;
}

int Commands::RegisterNode(const NodeOptions& n) {
  v1::RegisterNodeRequest req;
  *req.mutable_node() = NodeOf(n);
  v1::RegisterNodeResponse resp;
  if (!Call(inventory_, &v1::InventoryService::Stub::RegisterNode, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "registered node " << n.cluster << "/" << n.name << " in pool " << n.pool << " with "
            << n.gpus << " " << n.model << "\n";
  return 0;
}

}  // namespace arbiter::arbctl
