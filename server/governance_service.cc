// GovernanceService: teams, quotas, coexistence rules, role bindings,
// authority rules, prices, budgets and delegations (app/governance.h).
#include "server/caller.h"
#include "server/convert.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {
grpc::ServerUnaryReactor* GovernanceService::CreateTeam(grpc::CallbackServerContext* ctx,
                                                        const v1::CreateTeamRequest* req,
                                                        v1::CreateTeamResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core::Team team = TeamFromProto(req->team());
  ctx_.app->governance().CreateTeam(
      CallerOf(*ctx, ctx_.insecure), team,
      Echo(reactor, "CreateTeam", absl::StatusOr<core::Team>(team), resp->mutable_team()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::ListTeams(grpc::CallbackServerContext* ctx,
                                                       const v1::ListTeamsRequest*,
                                                       v1::ListTeamsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->governance().ListTeams(
      CallerOf(*ctx, ctx_.insecure),
      Answer<std::vector<core::Team>>(
          reactor, "ListTeams", ListFiller<core::Team>([resp] { return resp->add_teams(); })));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::SetQuota(grpc::CallbackServerContext* ctx,
                                                      const v1::SetQuotaRequest* req,
                                                      v1::SetQuotaResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core::Quota quota = QuotaFromProto(req->quota());
  ctx_.app->governance().SetQuota(
      CallerOf(*ctx, ctx_.insecure), quota,
      Echo(reactor, "SetQuota", absl::StatusOr<core::Quota>(quota), resp->mutable_quota()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::ImportOrganisation(
    grpc::CallbackServerContext* ctx, const v1::ImportOrganisationRequest* req,
    v1::ImportOrganisationResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core::Organisation org;
  org.teams.reserve(req->teams_size());
  for (const v1::Team& t : req->teams()) org.teams.push_back(TeamFromProto(t));
  org.quotas.reserve(req->quotas_size());
  for (const v1::Quota& q : req->quotas()) org.quotas.push_back(QuotaFromProto(q));
  ctx_.app->governance().ImportOrganisation(
      CallerOf(*ctx, ctx_.insecure), std::move(org),
      Answer<core::ImportCounts>(reactor, "ImportOrganisation",
                                 [resp](const core::ImportCounts& counts) {
                                   resp->set_teams_created(counts.teams_created);
                                   resp->set_teams_unchanged(counts.teams_unchanged);
                                   resp->set_quotas_set(counts.quotas_set);
                                   resp->set_quotas_unchanged(counts.quotas_unchanged);
                                 }));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::ListQuotas(grpc::CallbackServerContext* ctx,
                                                        const v1::ListQuotasRequest* req,
                                                        v1::ListQuotasResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->governance().ListQuotas(
      CallerOf(*ctx, ctx_.insecure), req->team(),
      Answer<std::vector<store::QuotaUsage>>(reactor, "ListQuotas",
                                             [resp](const std::vector<store::QuotaUsage>& quotas) {
                                               for (const store::QuotaUsage& q : quotas) {
                                                 v1::QuotaUsage* usage = resp->add_quotas();
                                                 ToProto(q.quota, usage->mutable_quota());
                                                 usage->set_used_milli(q.used_milli);
                                               }
                                             }));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::SetCoexistenceRule(
    grpc::CallbackServerContext* ctx, const v1::SetCoexistenceRuleRequest* req,
    v1::SetCoexistenceRuleResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<core::ClassRule> rule = ClassRuleFromProto(req->rule());
  ctx_.app->governance().SetCoexistenceRule(
      CallerOf(*ctx, ctx_.insecure), rule,
      Echo(reactor, "SetCoexistenceRule", rule, resp->mutable_rule()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::ListCoexistenceRules(
    grpc::CallbackServerContext* ctx, const v1::ListCoexistenceRulesRequest*,
    v1::ListCoexistenceRulesResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->governance().ListCoexistenceRules(
      CallerOf(*ctx, ctx_.insecure),
      Answer<std::vector<core::ClassRule>>(
          reactor, "ListCoexistenceRules",
          ListFiller<core::ClassRule>([resp] { return resp->add_rules(); })));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::GrantRole(grpc::CallbackServerContext* ctx,
                                                       const v1::GrantRoleRequest* req,
                                                       v1::GrantRoleResponse* resp) {
  // The binding names the scope the access check needs: converted first.
  absl::StatusOr<core::RoleBinding> binding = RoleBindingFromProto(req->binding());
  if (!binding.ok()) return FinishWith(ctx, binding.status(), "GrantRole");
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->governance().GrantRole(CallerOf(*ctx, ctx_.insecure), *binding,
                                   Echo(reactor, "GrantRole", binding, resp->mutable_binding()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::RevokeRole(grpc::CallbackServerContext* ctx,
                                                        const v1::RevokeRoleRequest* req,
                                                        v1::RevokeRoleResponse* resp) {
  absl::StatusOr<core::RoleBinding> binding = RoleBindingFromProto(req->binding());
  if (!binding.ok()) return FinishWith(ctx, binding.status(), "RevokeRole");
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->governance().RevokeRole(CallerOf(*ctx, ctx_.insecure), *binding,
                                    Echo(reactor, "RevokeRole", binding, resp->mutable_binding()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::ListRoleBindings(grpc::CallbackServerContext* ctx,
                                                              const v1::ListRoleBindingsRequest*,
                                                              v1::ListRoleBindingsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->governance().ListRoleBindings(
      CallerOf(*ctx, ctx_.insecure),
      Answer<std::vector<core::RoleBinding>>(
          reactor, "ListRoleBindings",
          ListFiller<core::RoleBinding>([resp] { return resp->add_bindings(); })));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::WhoAmI(grpc::CallbackServerContext* ctx,
                                                    const v1::WhoAmIRequest*,
                                                    v1::WhoAmIResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->governance().WhoAmI(
      CallerOf(*ctx, ctx_.insecure),
      Answer<app::CallerView>(reactor, "WhoAmI", [resp](const app::CallerView& view) {
        resp->set_principal(view.principal);
        for (const std::string& group : view.groups) resp->add_groups(group);
        for (const core::RoleBinding& b : view.bindings) ToProto(b, resp->add_bindings());
        resp->set_platform_admin(view.platform_admin);
      }));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::SetAuthorityRule(
    grpc::CallbackServerContext* ctx, const v1::SetAuthorityRuleRequest* req,
    v1::SetAuthorityRuleResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<core::AuthorityRule> rule = AuthorityRuleFromProto(req->rule());
  ctx_.app->governance().SetAuthorityRule(
      CallerOf(*ctx, ctx_.insecure), rule,
      Echo(reactor, "SetAuthorityRule", rule, resp->mutable_rule()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::RemoveAuthorityRule(
    grpc::CallbackServerContext* ctx, const v1::RemoveAuthorityRuleRequest* req,
    v1::RemoveAuthorityRuleResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<core::AuthorityRule> rule = AuthorityRuleFromProto(req->rule());
  ctx_.app->governance().RemoveAuthorityRule(
      CallerOf(*ctx, ctx_.insecure), rule,
      Echo(reactor, "RemoveAuthorityRule", rule, resp->mutable_rule()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::ListAuthorityRules(
    grpc::CallbackServerContext* ctx, const v1::ListAuthorityRulesRequest*,
    v1::ListAuthorityRulesResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->governance().ListAuthorityRules(
      CallerOf(*ctx, ctx_.insecure),
      Answer<std::vector<core::AuthorityRule>>(
          reactor, "ListAuthorityRules",
          ListFiller<core::AuthorityRule>([resp] { return resp->add_rules(); })));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::SetPrice(grpc::CallbackServerContext* ctx,
                                                      const v1::SetPriceRequest* req,
                                                      v1::SetPriceResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<core::Price> price = PriceFromProto(req->price());
  ctx_.app->governance().SetPrice(CallerOf(*ctx, ctx_.insecure), price,
                                  Echo(reactor, "SetPrice", price, resp->mutable_price()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::ListPrices(grpc::CallbackServerContext* ctx,
                                                        const v1::ListPricesRequest* req,
                                                        v1::ListPricesResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::optional<absl::Time> at;
  if (req->has_at()) {
    absl::StatusOr<absl::Time> t = TimeFromProto(true, req->at(), "at");
    if (!t.ok()) return FinishWith(ctx, t.status(), "ListPrices");
    at = *t;
  }
  ctx_.app->governance().ListPrices(
      CallerOf(*ctx, ctx_.insecure), at,
      Answer<std::vector<core::Price>>(
          reactor, "ListPrices", ListFiller<core::Price>([resp] { return resp->add_prices(); })));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::SetBudget(grpc::CallbackServerContext* ctx,
                                                       const v1::SetBudgetRequest* req,
                                                       v1::SetBudgetResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<core::Budget> budget = BudgetFromProto(req->budget());
  ctx_.app->governance().SetBudget(CallerOf(*ctx, ctx_.insecure), budget,
                                   Echo(reactor, "SetBudget", budget, resp->mutable_budget()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::SetPowerBudget(grpc::CallbackServerContext* ctx,
                                                            const v1::SetPowerBudgetRequest* req,
                                                            v1::SetPowerBudgetResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<core::PowerBudget> budget = PowerBudgetFromProto(req->power_budget());
  ctx_.app->governance().SetPowerBudget(
      CallerOf(*ctx, ctx_.insecure), budget,
      Echo(reactor, "SetPowerBudget", budget, resp->mutable_power_budget()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::ListPowerBudgets(
    grpc::CallbackServerContext* ctx, const v1::ListPowerBudgetsRequest* req,
    v1::ListPowerBudgetsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->governance().ListPowerBudgets(
      CallerOf(*ctx, ctx_.insecure),
      Answer<std::vector<core::PowerBudget>>(
          reactor, "ListPowerBudgets",
          ListFiller<core::PowerBudget>([resp] { return resp->add_power_budgets(); })));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::ListBudgets(grpc::CallbackServerContext* ctx,
                                                         const v1::ListBudgetsRequest* req,
                                                         v1::ListBudgetsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::optional<absl::Time> month;
  if (req->has_month()) {
    absl::StatusOr<absl::Time> t = TimeFromProto(true, req->month(), "month");
    if (!t.ok()) return FinishWith(ctx, t.status(), "ListBudgets");
    month = *t;
  }
  ctx_.app->governance().ListBudgets(
      CallerOf(*ctx, ctx_.insecure), month,
      Answer<app::BudgetReport>(reactor, "ListBudgets", [resp](const app::BudgetReport& report) {
        for (const app::BudgetUsage& b : report.budgets) {
          v1::BudgetUsage* usage = resp->add_budgets();
          ToProto(b.budget, usage->mutable_budget());
          usage->set_spent_micros(b.spent_micros);
        }
        resp->mutable_month_start()->set_seconds(absl::ToUnixSeconds(report.month_start));
      }));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::Delegate(grpc::CallbackServerContext* ctx,
                                                      const v1::DelegateRequest* req,
                                                      v1::DelegateResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<core::Delegation> d = DelegationFromProto(req->delegation());
  ctx_.app->governance().Delegate(CallerOf(*ctx, ctx_.insecure), d,
                                  Echo(reactor, "Delegate", d, resp->mutable_delegation()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::RevokeDelegation(
    grpc::CallbackServerContext* ctx, const v1::RevokeDelegationRequest* req,
    v1::RevokeDelegationResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const core::Delegation d{req->delegation().from(), req->delegation().to(), absl::InfinitePast()};
  ctx_.app->governance().RevokeDelegation(
      CallerOf(*ctx, ctx_.insecure), d,
      Echo(reactor, "RevokeDelegation", absl::StatusOr<core::Delegation>(d),
           resp->mutable_delegation()));
  return reactor;
}

grpc::ServerUnaryReactor* GovernanceService::ListDelegations(grpc::CallbackServerContext* ctx,
                                                             const v1::ListDelegationsRequest*,
                                                             v1::ListDelegationsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->governance().ListDelegations(
      CallerOf(*ctx, ctx_.insecure),
      Answer<std::vector<core::Delegation>>(
          reactor, "ListDelegations",
          ListFiller<core::Delegation>([resp] { return resp->add_delegations(); })));
  return reactor;
}

}  // namespace arbiter::server
