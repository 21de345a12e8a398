// GovernanceService: teams in a cohort tree, their quotas, and the
// coexistence rules of workload classes.
#include "core/arbitration.h"
#include "core/budget.h"
#include "core/status_macros.h"
#include "server/convert.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {

grpc::ServerUnaryReactor* GovernanceService::CreateTeam(grpc::CallbackServerContext* ctx,
                                                        const v1::CreateTeamRequest* req,
                                                        v1::CreateTeamResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.CreateTeam",
                                        Resource{req->team().parent(), ""});
      !access.ok()) {
    return FinishWith(ctx, access, "CreateTeam");
  }
  core::Team team = TeamFromProto(req->team());
  ToProto(team, resp->mutable_team());
  return RunCommand(ctx, *ctx_.arbiter, "CreateTeam",
                    [team](core::State& state, absl::Time, core::ChangeSet& changes) {
                      return core::CreateTeam(state, team, changes);
                    });
}

grpc::ServerUnaryReactor* GovernanceService::ListTeams(grpc::CallbackServerContext* ctx,
                                                       const v1::ListTeamsRequest*,
                                                       v1::ListTeamsResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.ListTeams", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListTeams");
  }
  return RunRead(ctx, *ctx_.reads, "ListTeams", [this, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto teams, ctx_.store->ListTeams());
    for (const auto& t : teams) ToProto(t, resp->add_teams());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GovernanceService::SetQuota(grpc::CallbackServerContext* ctx,
                                                      const v1::SetQuotaRequest* req,
                                                      v1::SetQuotaResponse* resp) {
  if (absl::Status access =
          CheckAccess(*ctx, ctx_, "GovernanceService.SetQuota", Resource{"", req->quota().pool()});
      !access.ok()) {
    return FinishWith(ctx, access, "SetQuota");
  }
  core::Quota quota = QuotaFromProto(req->quota());
  ToProto(quota, resp->mutable_quota());
  return RunCommand(ctx, *ctx_.arbiter, "SetQuota",
                    [quota](core::State& state, absl::Time now, core::ChangeSet& changes) {
                      return core::SetQuota(state, quota, now, changes);
                    });
}

grpc::ServerUnaryReactor* GovernanceService::ListQuotas(grpc::CallbackServerContext* ctx,
                                                        const v1::ListQuotasRequest* req,
                                                        v1::ListQuotasResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.ListQuotas", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListQuotas");
  }
  return RunRead(ctx, *ctx_.reads, "ListQuotas", [this, req, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto quotas, ctx_.store->ListQuotas(req->team()));
    for (const auto& q : quotas) {
      v1::QuotaUsage* usage = resp->add_quotas();
      ToProto(q.quota, usage->mutable_quota());
      usage->set_used_milli(q.used_milli);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GovernanceService::SetCoexistenceRule(
    grpc::CallbackServerContext* ctx, const v1::SetCoexistenceRuleRequest* req,
    v1::SetCoexistenceRuleResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.SetCoexistenceRule", {});
      !access.ok()) {
    return FinishWith(ctx, access, "SetCoexistenceRule");
  }
  absl::StatusOr<core::ClassRule> rule = ClassRuleFromProto(req->rule());
  if (!rule.ok()) return FinishWith(ctx, rule.status(), "SetCoexistenceRule");
  ToProto(*rule, resp->mutable_rule());
  return RunCommand(ctx, *ctx_.arbiter, "SetCoexistenceRule",
                    [rule = *rule](core::State& state, absl::Time now, core::ChangeSet& changes) {
                      return core::SetCoexistenceRule(state, rule, now, changes);
                    });
}

grpc::ServerUnaryReactor* GovernanceService::ListCoexistenceRules(
    grpc::CallbackServerContext* ctx, const v1::ListCoexistenceRulesRequest*,
    v1::ListCoexistenceRulesResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.ListCoexistenceRules", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListCoexistenceRules");
  }
  return RunRead(ctx, *ctx_.reads, "ListCoexistenceRules", [this, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(core::CoexistenceMatrix matrix, ctx_.store->GetCoexistence());
    for (int a = 1; a <= 4; ++a) {
      for (int b = a; b <= 4; ++b) {
        core::ClassRule rule;
        rule.a = static_cast<core::WorkloadClass>(a);
        rule.b = static_cast<core::WorkloadClass>(b);
        rule.rule = matrix.Rule(rule.a, rule.b);
        ToProto(rule, resp->add_rules());
      }
    }
    return absl::OkStatus();
  });
}

namespace {

// The team a team admin must hold to grant or revoke `b`: its team, for team
// roles at team scope; none otherwise (only platform admins may).
Resource GrantScope(const core::RoleBinding& b) {
  const bool team_role = b.role == core::Role::kTeamAdmin || b.role == core::Role::kTeamMember;
  if (team_role && b.scope_kind == core::ScopeKind::kTeam) return Resource{b.scope, ""};
  return Resource{};
}

}  // namespace

grpc::ServerUnaryReactor* GovernanceService::GrantRole(grpc::CallbackServerContext* ctx,
                                                       const v1::GrantRoleRequest* req,
                                                       v1::GrantRoleResponse* resp) {
  absl::StatusOr<core::RoleBinding> binding = RoleBindingFromProto(req->binding());
  if (!binding.ok()) return FinishWith(ctx, binding.status(), "GrantRole");
  if (absl::Status access =
          CheckAccess(*ctx, ctx_, "GovernanceService.GrantRole", GrantScope(*binding));
      !access.ok()) {
    return FinishWith(ctx, access, "GrantRole");
  }
  ToProto(*binding, resp->mutable_binding());
  return RunCommand(ctx, *ctx_.arbiter, "GrantRole",
                    [b = *binding](core::State& state, absl::Time, core::ChangeSet& changes) {
                      return core::GrantRole(state, b, changes);
                    });
}

grpc::ServerUnaryReactor* GovernanceService::RevokeRole(grpc::CallbackServerContext* ctx,
                                                        const v1::RevokeRoleRequest* req,
                                                        v1::RevokeRoleResponse* resp) {
  absl::StatusOr<core::RoleBinding> binding = RoleBindingFromProto(req->binding());
  if (!binding.ok()) return FinishWith(ctx, binding.status(), "RevokeRole");
  if (absl::Status access =
          CheckAccess(*ctx, ctx_, "GovernanceService.RevokeRole", GrantScope(*binding));
      !access.ok()) {
    return FinishWith(ctx, access, "RevokeRole");
  }
  ToProto(*binding, resp->mutable_binding());
  return RunCommand(ctx, *ctx_.arbiter, "RevokeRole",
                    [b = *binding](core::State& state, absl::Time, core::ChangeSet& changes) {
                      return core::RevokeRole(state, b, changes);
                    });
}

grpc::ServerUnaryReactor* GovernanceService::ListRoleBindings(grpc::CallbackServerContext* ctx,
                                                              const v1::ListRoleBindingsRequest*,
                                                              v1::ListRoleBindingsResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.ListRoleBindings", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListRoleBindings");
  }
  return RunRead(ctx, *ctx_.reads, "ListRoleBindings", [this, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto bindings, ctx_.store->ListRoleBindings());
    for (const auto& b : bindings) ToProto(b, resp->add_bindings());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GovernanceService::SetAuthorityRule(
    grpc::CallbackServerContext* ctx, const v1::SetAuthorityRuleRequest* req,
    v1::SetAuthorityRuleResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.SetAuthorityRule", {});
      !access.ok()) {
    return FinishWith(ctx, access, "SetAuthorityRule");
  }
  absl::StatusOr<core::AuthorityRule> rule = AuthorityRuleFromProto(req->rule());
  if (!rule.ok()) return FinishWith(ctx, rule.status(), "SetAuthorityRule");
  ToProto(*rule, resp->mutable_rule());
  return RunCommand(ctx, *ctx_.arbiter, "SetAuthorityRule",
                    [r = *rule](core::State& state, absl::Time, core::ChangeSet& changes) {
                      return core::SetAuthorityRule(state, r, changes);
                    });
}

grpc::ServerUnaryReactor* GovernanceService::RemoveAuthorityRule(
    grpc::CallbackServerContext* ctx, const v1::RemoveAuthorityRuleRequest* req,
    v1::RemoveAuthorityRuleResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.RemoveAuthorityRule", {});
      !access.ok()) {
    return FinishWith(ctx, access, "RemoveAuthorityRule");
  }
  absl::StatusOr<core::AuthorityRule> rule = AuthorityRuleFromProto(req->rule());
  if (!rule.ok()) return FinishWith(ctx, rule.status(), "RemoveAuthorityRule");
  ToProto(*rule, resp->mutable_rule());
  return RunCommand(ctx, *ctx_.arbiter, "RemoveAuthorityRule",
                    [r = *rule](core::State& state, absl::Time, core::ChangeSet& changes) {
                      return core::RemoveAuthorityRule(state, r, changes);
                    });
}

grpc::ServerUnaryReactor* GovernanceService::ListAuthorityRules(
    grpc::CallbackServerContext* ctx, const v1::ListAuthorityRulesRequest*,
    v1::ListAuthorityRulesResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.ListAuthorityRules", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListAuthorityRules");
  }
  return RunRead(ctx, *ctx_.reads, "ListAuthorityRules", [this, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto rules, ctx_.store->ListAuthorityRules());
    for (const auto& r : rules) ToProto(r, resp->add_rules());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GovernanceService::SetPrice(grpc::CallbackServerContext* ctx,
                                                      const v1::SetPriceRequest* req,
                                                      v1::SetPriceResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.SetPrice", {});
      !access.ok()) {
    return FinishWith(ctx, access, "SetPrice");
  }
  absl::StatusOr<core::Price> price = PriceFromProto(req->price());
  if (!price.ok()) return FinishWith(ctx, price.status(), "SetPrice");
  ToProto(*price, resp->mutable_price());
  return RunCommand(ctx, *ctx_.arbiter, "SetPrice",
                    [p = *price](core::State& state, absl::Time, core::ChangeSet& changes) {
                      return core::SetPrice(state, p, changes);
                    });
}

grpc::ServerUnaryReactor* GovernanceService::ListPrices(grpc::CallbackServerContext* ctx,
                                                        const v1::ListPricesRequest* req,
                                                        v1::ListPricesResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.ListPrices", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListPrices");
  }
  const bool at_set = req->has_at();
  const absl::Time at = absl::FromUnixSeconds(req->at().seconds());
  return RunRead(ctx, *ctx_.reads, "ListPrices", [this, at_set, at, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto prices, ctx_.store->ListPrices());
    for (size_t i = 0; i < prices.size(); ++i) {
      const core::Price& p = prices[i];
      if (at_set) {
        // Ordered by model, class, time: keep the last one in force at `at`.
        if (p.effective_from > at) continue;
        const bool superseded = i + 1 < prices.size() && prices[i + 1].gpu_model == p.gpu_model &&
                                prices[i + 1].latency_class == p.latency_class &&
                                prices[i + 1].effective_from <= at;
        if (superseded) continue;
      }
      ToProto(p, resp->add_prices());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GovernanceService::SetBudget(grpc::CallbackServerContext* ctx,
                                                       const v1::SetBudgetRequest* req,
                                                       v1::SetBudgetResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.SetBudget", {});
      !access.ok()) {
    return FinishWith(ctx, access, "SetBudget");
  }
  absl::StatusOr<core::Budget> budget = BudgetFromProto(req->budget());
  if (!budget.ok()) return FinishWith(ctx, budget.status(), "SetBudget");
  ToProto(*budget, resp->mutable_budget());
  return RunCommand(ctx, *ctx_.arbiter, "SetBudget",
                    [b = *budget](core::State& state, absl::Time, core::ChangeSet& changes) {
                      return core::SetBudget(state, b, changes);
                    });
}

grpc::ServerUnaryReactor* GovernanceService::ListBudgets(grpc::CallbackServerContext* ctx,
                                                         const v1::ListBudgetsRequest* req,
                                                         v1::ListBudgetsResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.ListBudgets", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListBudgets");
  }
  const absl::Time when =
      req->has_month() ? absl::FromUnixSeconds(req->month().seconds()) : ctx_.clock->TimeNow();
  const absl::Time from = core::MonthStart(when), to = core::NextMonthStart(when);
  return RunRead(ctx, *ctx_.reads, "ListBudgets", [this, from, to, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto budgets, ctx_.store->ListBudgets());
    ARBITER_ASSIGN_OR_RETURN(auto spend, ctx_.store->SpendBetween(from, to));
    for (const core::Budget& b : budgets) {
      v1::BudgetUsage* usage = resp->add_budgets();
      ToProto(b, usage->mutable_budget());
      usage->set_spent_micros(spend[b.team]);
    }
    resp->mutable_month_start()->set_seconds(absl::ToUnixSeconds(from));
    return absl::OkStatus();
  });
}

namespace {

absl::StatusOr<core::Delegation> DelegationFromProto(const v1::Delegation& d) {
  if (!d.has_expires_at()) {
    return absl::InvalidArgumentError("delegation.expires_at: must be set");
  }
  return core::Delegation{d.from(), d.to(), absl::FromUnixSeconds(d.expires_at().seconds())};
}

void ToProto(const core::Delegation& d, v1::Delegation* out) {
  out->set_from(d.from);
  out->set_to(d.to);
  out->mutable_expires_at()->set_seconds(absl::ToUnixSeconds(d.expires_at));
}

}  // namespace

grpc::ServerUnaryReactor* GovernanceService::Delegate(grpc::CallbackServerContext* ctx,
                                                      const v1::DelegateRequest* req,
                                                      v1::DelegateResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.Delegate", {});
      !access.ok()) {
    return FinishWith(ctx, access, "Delegate");
  }
  absl::StatusOr<core::Delegation> d = DelegationFromProto(req->delegation());
  if (!d.ok()) return FinishWith(ctx, d.status(), "Delegate");
  ToProto(*d, resp->mutable_delegation());
  // On a plaintext development server there are no identities: anyone may.
  const std::string caller = ctx_.insecure ? "" : CallerOf(*ctx, false).principal;
  return RunCommand(
      ctx, *ctx_.arbiter, "Delegate",
      [this, caller, d = *d](core::State& state, absl::Time now, core::ChangeSet& changes) {
        absl::Status status = core::Delegate(state, d, caller, now, changes);
        if (absl::IsPermissionDenied(status)) {
          RecordRefusal(ctx_, caller, "GovernanceService.Delegate", status);
        }
        return status;
      });
}

grpc::ServerUnaryReactor* GovernanceService::RevokeDelegation(
    grpc::CallbackServerContext* ctx, const v1::RevokeDelegationRequest* req,
    v1::RevokeDelegationResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.RevokeDelegation", {});
      !access.ok()) {
    return FinishWith(ctx, access, "RevokeDelegation");
  }
  core::Delegation d{req->delegation().from(), req->delegation().to(), absl::InfinitePast()};
  ToProto(d, resp->mutable_delegation());
  const std::string caller = ctx_.insecure ? "" : CallerOf(*ctx, false).principal;
  return RunCommand(ctx, *ctx_.arbiter, "RevokeDelegation",
                    [this, caller, d](core::State& state, absl::Time, core::ChangeSet& changes) {
                      absl::Status status = core::RevokeDelegation(state, d, caller, changes);
                      if (absl::IsPermissionDenied(status)) {
                        RecordRefusal(ctx_, caller, "GovernanceService.RevokeDelegation", status);
                      }
                      return status;
                    });
}

grpc::ServerUnaryReactor* GovernanceService::ListDelegations(grpc::CallbackServerContext* ctx,
                                                             const v1::ListDelegationsRequest*,
                                                             v1::ListDelegationsResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "GovernanceService.ListDelegations", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListDelegations");
  }
  return RunRead(ctx, *ctx_.reads, "ListDelegations", [this, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto delegations, ctx_.store->ListDelegations());
    for (const auto& d : delegations) ToProto(d, resp->add_delegations());
    return absl::OkStatus();
  });
}

}  // namespace arbiter::server
