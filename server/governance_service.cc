// GovernanceService: teams in a cohort tree and their quotas.
#include "core/arbitration.h"
#include "core/status_macros.h"
#include "server/convert.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {

grpc::ServerUnaryReactor* GovernanceService::CreateTeam(grpc::CallbackServerContext* ctx,
                                                        const v1::CreateTeamRequest* req,
                                                        v1::CreateTeamResponse* resp) {
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
  return RunRead(ctx, *ctx_.reads, "ListTeams", [this, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto teams, ctx_.store->ListTeams());
    for (const auto& t : teams) ToProto(t, resp->add_teams());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GovernanceService::SetQuota(grpc::CallbackServerContext* ctx,
                                                      const v1::SetQuotaRequest* req,
                                                      v1::SetQuotaResponse* resp) {
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

}  // namespace arbiter::server
