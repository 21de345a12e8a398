// The demo organisation of `deploy/local/up`: four teams under one org, two
// clusters (H100 in us-east, A100 in us-west) and pools by latency class.
// Loaded through the public API, so it exercises what a platform would call;
// objects that already exist are left as they are.
#include <iostream>

#include "absl/strings/str_cat.h"

#include "clients/arbctl/commands.h"

namespace arbiter::arbctl {
namespace {

struct DemoNode {
  const char* cluster;
  const char* prefix;
  const char* pool;
  const char* model;
  int count;
  int gpus;
};

constexpr DemoNode kNodes[] = {
    {"us-east", "h100-serve", "serving", "H100-80GB", 4, 8},
    {"us-east", "h100-train", "batch", "H100-80GB", 4, 8},
    {"us-west", "a100-train", "batch", "A100-80GB", 2, 8},
    {"us-west", "a100-dev", "dev", "A100-40GB", 2, 8},
    {"us-west", "a100-spot", "spot", "A100-40GB", 1, 8},
};

struct DemoQuota {
  const char* team;
  const char* pool;
  int64_t nominal_milli;
  int64_t borrowing_limit_milli;  // -1: no limit.
};

// Teams under acme lend unused batch quota to each other; research may borrow
// without limit there, analytics up to 8 GPUs; training may use the serving
// pool's spare GPUs as preemptible work (see the serving pool's lending rule).
constexpr DemoQuota kQuotas[] = {
    {"inference", "serving", 24'000, 0},  {"training", "batch", 40'000, 0},
    {"training", "dev", 4'000, 0},        {"training", "serving", 0, 8'000},
    {"analytics", "batch", 8'000, 8'000}, {"analytics", "spot", 8'000, 0},
    {"research", "dev", 12'000, 0},       {"research", "batch", 4'000, -1},
};

// OK and ALREADY_EXISTS both mean the object is there.
bool Present(const grpc::Status& s, const std::string& what) {
  if (s.ok() || s.error_code() == grpc::StatusCode::ALREADY_EXISTS) return true;
  std::cerr << "arbctl: demo: " << what << ": " << s.error_message() << "\n";
  return false;
}

}  // namespace

int Commands::LoadDemo() {
  bool ok = true;
  for (const char* name : {"us-east", "us-west"}) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::CreateClusterRequest req;
    req.mutable_cluster()->set_name(name);
    req.mutable_cluster()->set_description(absl::StrCat("demo cluster ", name));
    v1::CreateClusterResponse resp;
    ok &= Present(inventory_->CreateCluster(&ctx, req, &resp), name);
  }
  const std::pair<const char*, v1::LatencyClass> pools[] = {{"serving", v1::LATENCY_CLASS_SERVING},
                                                            {"batch", v1::LATENCY_CLASS_BATCH},
                                                            {"dev", v1::LATENCY_CLASS_DEV},
                                                            {"spot", v1::LATENCY_CLASS_SPOT}};
  for (const auto& [name, latency] : pools) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::CreatePoolRequest req;
    req.mutable_pool()->set_name(name);
    req.mutable_pool()->set_latency_class(latency);
    if (latency == v1::LATENCY_CLASS_SERVING) {
      // Spare serving GPUs may run training, taken back within two minutes.
      req.mutable_pool()->add_lends_to(v1::WORKLOAD_CLASS_TRAINING);
      req.mutable_pool()->set_reclaim_grace_seconds(120);
    }
    v1::CreatePoolResponse resp;
    ok &= Present(inventory_->CreatePool(&ctx, req, &resp), name);
  }
  for (const DemoNode& n : kNodes) {
    for (int i = 0; i < n.count; ++i) {
      grpc::ClientContext ctx;
      Deadline(ctx);
      v1::RegisterNodeRequest req;
      v1::Node* node = req.mutable_node();
      node->set_cluster(n.cluster);
      node->set_name(absl::StrCat(n.prefix, "-", i));
      node->set_pool(n.pool);
      node->set_cpu_milli(128'000);
      node->set_memory_mib(1'024'000);
      node->set_topology_domain(absl::StrCat(n.prefix, "-nvl-", i / 2));
      for (int g = 0; g < n.gpus; ++g) {
        v1::Gpu* gpu = node->add_gpus();
        gpu->set_index(g);
        gpu->set_model(n.model);
      }
      v1::RegisterNodeResponse resp;
      ok &= Present(inventory_->RegisterNode(&ctx, req, &resp), node->name());
    }
  }
  const std::pair<const char*, const char*> teams[] = {{"acme", ""},
                                                       {"training", "acme"},
                                                       {"inference", "acme"},
                                                       {"analytics", "acme"},
                                                       {"research", "acme"}};
  for (const auto& [name, parent] : teams) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::CreateTeamRequest req;
    req.mutable_team()->set_name(name);
    req.mutable_team()->set_parent(parent);
    v1::CreateTeamResponse resp;
    ok &= Present(governance_->CreateTeam(&ctx, req, &resp), name);
  }
  for (const DemoQuota& q : kQuotas) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::SetQuotaRequest req;
    req.mutable_quota()->set_team(q.team);
    req.mutable_quota()->set_pool(q.pool);
    req.mutable_quota()->set_nominal_milli(q.nominal_milli);
    req.mutable_quota()->set_borrowing_limit_milli(q.borrowing_limit_milli);
    v1::SetQuotaResponse resp;
    ok &= Present(governance_->SetQuota(&ctx, req, &resp), absl::StrCat(q.team, "@", q.pool));
  }
  // Demo principals (deploy/local/up issues their certificates).
  const struct {
    const char* who;
    v1::Role role;
    v1::ScopeKind kind;
    const char* scope;
  } bindings[] = {
      {"alice", v1::ROLE_TEAM_MEMBER, v1::SCOPE_KIND_TEAM, "training"},
      {"bob", v1::ROLE_TEAM_MEMBER, v1::SCOPE_KIND_TEAM, "inference"},
      {"carol", v1::ROLE_POOL_AUTHORITY, v1::SCOPE_KIND_POOL, "serving"},
      {"dave", v1::ROLE_AUDITOR, v1::SCOPE_KIND_ORG, ""},
      {"erin", v1::ROLE_FINANCE, v1::SCOPE_KIND_ORG, ""},
  };
  for (const auto& b : bindings) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::GrantRoleRequest req;
    req.mutable_binding()->set_subject(absl::StrCat("spiffe://arbiter.local/", b.who));
    req.mutable_binding()->set_role(b.role);
    req.mutable_binding()->set_scope_kind(b.kind);
    req.mutable_binding()->set_scope(b.scope);
    v1::GrantRoleResponse resp;
    ok &= Present(governance_->GrantRole(&ctx, req, &resp), b.who);
  }
  // Declared authority: borrowing on the serving pool needs carol; guaranteed
  // work needs the platform admin (the org authority).
  const struct {
    const char* pool;
    v1::ApprovalAction action;
    const char* approver;
  } rules[] = {{"serving", v1::APPROVAL_ACTION_BORROW, "spiffe://arbiter.local/carol"},
               {"", v1::APPROVAL_ACTION_GUARANTEED, "spiffe://arbiter.local/admin"}};
  for (const auto& r : rules) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::SetAuthorityRuleRequest req;
    req.mutable_rule()->set_pool(r.pool);
    req.mutable_rule()->set_action(r.action);
    req.mutable_rule()->set_approver(r.approver);
    v1::SetAuthorityRuleResponse resp;
    ok &= Present(governance_->SetAuthorityRule(&ctx, req, &resp), r.approver);
  }
  // Prices per GPU-hour, from 2026-01-01, and a budget for research.
  const struct {
    const char* model;
    v1::LatencyClass latency_class;
    int64_t micros;
  } prices[] = {{"H100-80GB", v1::LATENCY_CLASS_SERVING, 4'000'000},
                {"H100-80GB", v1::LATENCY_CLASS_BATCH, 2'500'000},
                {"A100-80GB", v1::LATENCY_CLASS_BATCH, 1'500'000},
                {"A100-40GB", v1::LATENCY_CLASS_DEV, 1'000'000},
                {"A100-40GB", v1::LATENCY_CLASS_SPOT, 400'000}};
  for (const auto& p : prices) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::SetPriceRequest req;
    req.mutable_price()->set_gpu_model(p.model);
    req.mutable_price()->set_latency_class(p.latency_class);
    req.mutable_price()->set_micros_per_gpu_hour(p.micros);
    req.mutable_price()->mutable_effective_from()->set_seconds(1'767'225'600);  // 2026-01-01.
    v1::SetPriceResponse resp;
    ok &= Present(governance_->SetPrice(&ctx, req, &resp), p.model);
  }
  {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::SetBudgetRequest req;
    req.mutable_budget()->set_team("research");
    req.mutable_budget()->set_soft_limit_micros(500'000'000);
    req.mutable_budget()->set_hard_limit_micros(1'000'000'000);
    req.mutable_budget()->set_over(v1::OVER_BUDGET_DENY);
    v1::SetBudgetResponse resp;
    ok &= Present(governance_->SetBudget(&ctx, req, &resp), "research budget");
  }
  if (!ok) return 1;
  std::cout << "demo organisation loaded: 2 clusters, 4 pools, 13 nodes (104 GPUs), 5 teams, "
               "8 quotas, 5 role bindings, 2 authority rules, 5 prices, 1 budget\n";
  return 0;
}

}  // namespace arbiter::arbctl
