// The gRPC services of arbiter.v1: one thin class per proto service. Each
// method converts the request to core types, calls the use case of the
// application (app/application.h) with the caller, and converts the reply,
// its status mapped once by ToGrpcStatus. See the .proto files for each RPC's
// contract and status codes.
//
// Thread-safe: methods are called concurrently by gRPC.
#pragma once

#include "app/application.h"
#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/chargeback.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"
#include "arbiter/v1/ledger.grpc.pb.h"
#include "arbiter/v1/telemetry.grpc.pb.h"

namespace arbiter::server {

// What every service needs; owned by the server, outlives the services.
struct ServiceContext {
  app::Application* app = nullptr;
  bool insecure = false;  // Plaintext loopback (development): no identities.
};

class InventoryService final : public v1::InventoryService::CallbackService {
 public:
  explicit InventoryService(ServiceContext ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* ListGpuModels(grpc::CallbackServerContext* ctx,
                                          const v1::ListGpuModelsRequest* req,
                                          v1::ListGpuModelsResponse* resp) override;
  grpc::ServerUnaryReactor* CreateCluster(grpc::CallbackServerContext* ctx,
                                          const v1::CreateClusterRequest* req,
                                          v1::CreateClusterResponse* resp) override;
  grpc::ServerUnaryReactor* ListClusters(grpc::CallbackServerContext* ctx,
                                         const v1::ListClustersRequest* req,
                                         v1::ListClustersResponse* resp) override;
  grpc::ServerUnaryReactor* CreatePool(grpc::CallbackServerContext* ctx,
                                       const v1::CreatePoolRequest* req,
                                       v1::CreatePoolResponse* resp) override;
  grpc::ServerUnaryReactor* ListPools(grpc::CallbackServerContext* ctx,
                                      const v1::ListPoolsRequest* req,
                                      v1::ListPoolsResponse* resp) override;
  grpc::ServerUnaryReactor* GetServingForecast(grpc::CallbackServerContext* ctx,
                                               const v1::GetServingForecastRequest* req,
                                               v1::GetServingForecastResponse* resp) override;
  grpc::ServerUnaryReactor* RegisterNode(grpc::CallbackServerContext* ctx,
                                         const v1::RegisterNodeRequest* req,
                                         v1::RegisterNodeResponse* resp) override;
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* ctx,
                                      const v1::ListNodesRequest* req,
                                      v1::ListNodesResponse* resp) override;
  grpc::ServerUnaryReactor* SetGpuModel(grpc::CallbackServerContext* ctx,
                                        const v1::SetGpuModelRequest* req,
                                        v1::SetGpuModelResponse* resp) override;
  grpc::ServerUnaryReactor* UpdateNode(grpc::CallbackServerContext* ctx,
                                       const v1::UpdateNodeRequest* req,
                                       v1::UpdateNodeResponse* resp) override;
  grpc::ServerUnaryReactor* CordonNode(grpc::CallbackServerContext* ctx,
                                       const v1::CordonNodeRequest* req,
                                       v1::CordonNodeResponse* resp) override;
  grpc::ServerUnaryReactor* UncordonNode(grpc::CallbackServerContext* ctx,
                                         const v1::UncordonNodeRequest* req,
                                         v1::UncordonNodeResponse* resp) override;
  grpc::ServerUnaryReactor* DrainNode(grpc::CallbackServerContext* ctx,
                                      const v1::DrainNodeRequest* req,
                                      v1::DrainNodeResponse* resp) override;
  grpc::ServerUnaryReactor* MarkNodeFailed(grpc::CallbackServerContext* ctx,
                                           const v1::MarkNodeFailedRequest* req,
                                           v1::MarkNodeFailedResponse* resp) override;
  grpc::ServerUnaryReactor* RemoveNode(grpc::CallbackServerContext* ctx,
                                       const v1::RemoveNodeRequest* req,
                                       v1::RemoveNodeResponse* resp) override;
  grpc::ServerUnaryReactor* NodeHeartbeat(grpc::CallbackServerContext* ctx,
                                          const v1::NodeHeartbeatRequest* req,
                                          v1::NodeHeartbeatResponse* resp) override;

 private:
  ServiceContext ctx_;
};

class GovernanceService final : public v1::GovernanceService::CallbackService {
 public:
  explicit GovernanceService(ServiceContext ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* CreateTeam(grpc::CallbackServerContext* ctx,
                                       const v1::CreateTeamRequest* req,
                                       v1::CreateTeamResponse* resp) override;
  grpc::ServerUnaryReactor* ListTeams(grpc::CallbackServerContext* ctx,
                                      const v1::ListTeamsRequest* req,
                                      v1::ListTeamsResponse* resp) override;
  grpc::ServerUnaryReactor* SetQuota(grpc::CallbackServerContext* ctx,
                                     const v1::SetQuotaRequest* req,
                                     v1::SetQuotaResponse* resp) override;
  grpc::ServerUnaryReactor* ImportOrganisation(grpc::CallbackServerContext* ctx,
                                               const v1::ImportOrganisationRequest* req,
                                               v1::ImportOrganisationResponse* resp) override;
  grpc::ServerUnaryReactor* ListQuotas(grpc::CallbackServerContext* ctx,
                                       const v1::ListQuotasRequest* req,
                                       v1::ListQuotasResponse* resp) override;
  grpc::ServerUnaryReactor* SetCoexistenceRule(grpc::CallbackServerContext* ctx,
                                               const v1::SetCoexistenceRuleRequest* req,
                                               v1::SetCoexistenceRuleResponse* resp) override;
  grpc::ServerUnaryReactor* ListCoexistenceRules(grpc::CallbackServerContext* ctx,
                                                 const v1::ListCoexistenceRulesRequest* req,
                                                 v1::ListCoexistenceRulesResponse* resp) override;
  grpc::ServerUnaryReactor* GrantRole(grpc::CallbackServerContext* ctx,
                                      const v1::GrantRoleRequest* req,
                                      v1::GrantRoleResponse* resp) override;
  grpc::ServerUnaryReactor* RevokeRole(grpc::CallbackServerContext* ctx,
                                       const v1::RevokeRoleRequest* req,
                                       v1::RevokeRoleResponse* resp) override;
  grpc::ServerUnaryReactor* ListRoleBindings(grpc::CallbackServerContext* ctx,
                                             const v1::ListRoleBindingsRequest* req,
                                             v1::ListRoleBindingsResponse* resp) override;
  grpc::ServerUnaryReactor* WhoAmI(grpc::CallbackServerContext* ctx, const v1::WhoAmIRequest* req,
                                   v1::WhoAmIResponse* resp) override;
  grpc::ServerUnaryReactor* SetAuthorityRule(grpc::CallbackServerContext* ctx,
                                             const v1::SetAuthorityRuleRequest* req,
                                             v1::SetAuthorityRuleResponse* resp) override;
  grpc::ServerUnaryReactor* RemoveAuthorityRule(grpc::CallbackServerContext* ctx,
                                                const v1::RemoveAuthorityRuleRequest* req,
                                                v1::RemoveAuthorityRuleResponse* resp) override;
  grpc::ServerUnaryReactor* ListAuthorityRules(grpc::CallbackServerContext* ctx,
                                               const v1::ListAuthorityRulesRequest* req,
                                               v1::ListAuthorityRulesResponse* resp) override;
  grpc::ServerUnaryReactor* SetPrice(grpc::CallbackServerContext* ctx,
                                     const v1::SetPriceRequest* req,
                                     v1::SetPriceResponse* resp) override;
  grpc::ServerUnaryReactor* ListPrices(grpc::CallbackServerContext* ctx,
                                       const v1::ListPricesRequest* req,
                                       v1::ListPricesResponse* resp) override;
  grpc::ServerUnaryReactor* SetBudget(grpc::CallbackServerContext* ctx,
                                      const v1::SetBudgetRequest* req,
                                      v1::SetBudgetResponse* resp) override;
  grpc::ServerUnaryReactor* ListBudgets(grpc::CallbackServerContext* ctx,
                                        const v1::ListBudgetsRequest* req,
                                        v1::ListBudgetsResponse* resp) override;
  grpc::ServerUnaryReactor* SetPowerBudget(grpc::CallbackServerContext* ctx,
                                           const v1::SetPowerBudgetRequest* req,
                                           v1::SetPowerBudgetResponse* resp) override;
  grpc::ServerUnaryReactor* ListPowerBudgets(grpc::CallbackServerContext* ctx,
                                             const v1::ListPowerBudgetsRequest* req,
                                             v1::ListPowerBudgetsResponse* resp) override;
  grpc::ServerUnaryReactor* Delegate(grpc::CallbackServerContext* ctx,
                                     const v1::DelegateRequest* req,
                                     v1::DelegateResponse* resp) override;
  grpc::ServerUnaryReactor* RevokeDelegation(grpc::CallbackServerContext* ctx,
                                             const v1::RevokeDelegationRequest* req,
                                             v1::RevokeDelegationResponse* resp) override;
  grpc::ServerUnaryReactor* ListDelegations(grpc::CallbackServerContext* ctx,
                                            const v1::ListDelegationsRequest* req,
                                            v1::ListDelegationsResponse* resp) override;

 private:
  ServiceContext ctx_;
};

// The unary methods are served on the callback API; WatchAllocations on
// the asynchronous raw (bytes) API, by WatchServer (server/watch_server.h).
class AllocationService final
    : public v1::AllocationService::WithCallbackMethod_RequestCapacity<
          v1::AllocationService::WithCallbackMethod_GetRequest<
              v1::AllocationService::WithCallbackMethod_ListRequests<
                  v1::AllocationService::WithCallbackMethod_ReleaseAllocation<
                      v1::AllocationService::WithCallbackMethod_ApproveRequest<
                          v1::AllocationService::WithCallbackMethod_DenyRequest<
                              v1::AllocationService::WithCallbackMethod_ClaimAllocation<
                                  v1::AllocationService::WithCallbackMethod_RenewLease<
                                      v1::AllocationService::WithRawMethod_WatchAllocations<
                                          v1::AllocationService::Service>>>>>>>>> {
 public:
  explicit AllocationService(ServiceContext ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* RequestCapacity(grpc::CallbackServerContext* ctx,
                                            const v1::RequestCapacityRequest* req,
                                            v1::RequestCapacityResponse* resp) override;
  grpc::ServerUnaryReactor* GetRequest(grpc::CallbackServerContext* ctx,
                                       const v1::GetRequestRequest* req,
                                       v1::GetRequestResponse* resp) override;
  grpc::ServerUnaryReactor* ListRequests(grpc::CallbackServerContext* ctx,
                                         const v1::ListRequestsRequest* req,
                                         v1::ListRequestsResponse* resp) override;
  grpc::ServerUnaryReactor* ApproveRequest(grpc::CallbackServerContext* ctx,
                                           const v1::ApproveRequestRequest* req,
                                           v1::ApproveRequestResponse* resp) override;
  grpc::ServerUnaryReactor* DenyRequest(grpc::CallbackServerContext* ctx,
                                        const v1::DenyRequestRequest* req,
                                        v1::DenyRequestResponse* resp) override;
  grpc::ServerUnaryReactor* ReleaseAllocation(grpc::CallbackServerContext* ctx,
                                              const v1::ReleaseAllocationRequest* req,
                                              v1::ReleaseAllocationResponse* resp) override;
  grpc::ServerUnaryReactor* ClaimAllocation(grpc::CallbackServerContext* ctx,
                                            const v1::ClaimAllocationRequest* req,
                                            v1::ClaimAllocationResponse* resp) override;
  grpc::ServerUnaryReactor* RenewLease(grpc::CallbackServerContext* ctx,
                                       const v1::RenewLeaseRequest* req,
                                       v1::RenewLeaseResponse* resp) override;

 private:
  ServiceContext ctx_;
};

class LedgerService final : public v1::LedgerService::CallbackService {
 public:
  explicit LedgerService(ServiceContext ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* ListLedgerEntries(grpc::CallbackServerContext* ctx,
                                              const v1::ListLedgerEntriesRequest* req,
                                              v1::ListLedgerEntriesResponse* resp) override;
  grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* ctx,
                                            const v1::ListCheckpointsRequest* req,
                                            v1::ListCheckpointsResponse* resp) override;

 private:
  ServiceContext ctx_;
};

class TelemetryService final : public v1::TelemetryService::CallbackService {
 public:
  explicit TelemetryService(ServiceContext ctx) : ctx_(ctx) {}

  grpc::ServerReadReactor<v1::SampleBatch>* StreamSamples(grpc::CallbackServerContext* ctx,
                                                          v1::StreamSamplesResponse* resp) override;
  grpc::ServerUnaryReactor* GetUtilization(grpc::CallbackServerContext* ctx,
                                           const v1::GetUtilizationRequest* req,
                                           v1::GetUtilizationResponse* resp) override;
  grpc::ServerUnaryReactor* ListIdleAllocations(grpc::CallbackServerContext* ctx,
                                                const v1::ListIdleAllocationsRequest* req,
                                                v1::ListIdleAllocationsResponse* resp) override;
  grpc::ServerUnaryReactor* GetRightSizing(grpc::CallbackServerContext* ctx,
                                           const v1::GetRightSizingRequest* req,
                                           v1::GetRightSizingResponse* resp) override;
  grpc::ServerUnaryReactor* SetIdlePolicy(grpc::CallbackServerContext* ctx,
                                          const v1::SetIdlePolicyRequest* req,
                                          v1::SetIdlePolicyResponse* resp) override;
  grpc::ServerUnaryReactor* ListIdlePolicies(grpc::CallbackServerContext* ctx,
                                             const v1::ListIdlePoliciesRequest* req,
                                             v1::ListIdlePoliciesResponse* resp) override;

 private:
  ServiceContext ctx_;
};

class ChargebackService final : public v1::ChargebackService::CallbackService {
 public:
  explicit ChargebackService(ServiceContext ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* SetSlo(grpc::CallbackServerContext* ctx, const v1::SetSloRequest* req,
                                   v1::SetSloResponse* resp) override;
  grpc::ServerUnaryReactor* ListSlos(grpc::CallbackServerContext* ctx,
                                     const v1::ListSlosRequest* req,
                                     v1::ListSlosResponse* resp) override;
  grpc::ServerUnaryReactor* ReportLatency(grpc::CallbackServerContext* ctx,
                                          const v1::ReportLatencyRequest* req,
                                          v1::ReportLatencyResponse* resp) override;
  grpc::ServerUnaryReactor* ListIncidents(grpc::CallbackServerContext* ctx,
                                          const v1::ListIncidentsRequest* req,
                                          v1::ListIncidentsResponse* resp) override;
  grpc::ServerUnaryReactor* GetChargeback(grpc::CallbackServerContext* ctx,
                                          const v1::GetChargebackRequest* req,
                                          v1::GetChargebackResponse* resp) override;
  grpc::ServerUnaryReactor* ClosePeriod(grpc::CallbackServerContext* ctx,
                                        const v1::ClosePeriodRequest* req,
                                        v1::ClosePeriodResponse* resp) override;

 private:
  ServiceContext ctx_;
};

}  // namespace arbiter::server
