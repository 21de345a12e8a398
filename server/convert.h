// Conversion between arbiter.v1 messages and core types: the only place where
// generated protobuf types meet the domain. Conversions from proto reject
// what core cannot express (unknown enum numbers, an unset oneof) with
// INVALID_ARGUMENT naming the field; everything else is validated by core.
#pragma once

#include "absl/status/statusor.h"

#include "app/node_directory.h"
#include "app/watch_hub.h"
#include "arbiter/v1/allocation.pb.h"
#include "arbiter/v1/governance.pb.h"
#include "arbiter/v1/inventory.pb.h"
#include "arbiter/v1/types.pb.h"
#include "core/model.h"
#include "store/store.h"

namespace arbiter::server {

namespace v1 = ::arbiter::v1;

absl::StatusOr<core::CapacityRequestSpec> SpecFromProto(const v1::RequestCapacityRequest& req);
// The workload's run a release reports: empty when neither time is set;
// with one of the two missing, that one is InfinitePast (the core's check
// names it). INVALID_ARGUMENT naming a time that is no valid Timestamp.
absl::StatusOr<core::WorkloadRun> WorkloadRunFromProto(const v1::ReleaseAllocationRequest& req);
core::Cluster ClusterFromProto(const v1::Cluster& c);
absl::StatusOr<core::Pool> PoolFromProto(const v1::Pool& p);
core::Node NodeFromProto(const v1::Node& n);
core::GpuModel GpuModelFromProto(const v1::GpuModel& m);
// A weight of 0 means the default, 1000.
core::Team TeamFromProto(const v1::Team& t);
// A time as a protobuf Timestamp, to the microsecond.
google::protobuf::Timestamp TimestampOf(absl::Time t);
// A Timestamp as a time. INVALID_ARGUMENT naming `field` when unset, when
// nanos is outside 0..999999999, or outside the years 2000..2200.
absl::StatusOr<absl::Time> TimeFromProto(bool has, const google::protobuf::Timestamp& t,
                                         absl::string_view field);

core::Quota QuotaFromProto(const v1::Quota& q);
// INVALID_ARGUMENT (rule.class_a, rule.class_b, rule.gpu_isolation) for an
// unspecified or unknown enum.
absl::StatusOr<core::ClassRule> ClassRuleFromProto(const v1::CoexistenceRule& r);
void ToProto(const core::ClassRule& r, v1::CoexistenceRule* out);
// INVALID_ARGUMENT (binding.role, binding.scope_kind) for an unknown enum.
absl::StatusOr<core::RoleBinding> RoleBindingFromProto(const v1::RoleBinding& b);
void ToProto(const core::RoleBinding& b, v1::RoleBinding* out);
// INVALID_ARGUMENT (rule.action) for an unknown enum.
absl::StatusOr<core::AuthorityRule> AuthorityRuleFromProto(const v1::AuthorityRule& r);
void ToProto(const core::AuthorityRule& r, v1::AuthorityRule* out);
// INVALID_ARGUMENT (price.latency_class, price.effective_from) for an unknown
// enum or a missing time.
absl::StatusOr<core::Price> PriceFromProto(const v1::Price& p);
void ToProto(const core::Price& p, v1::Price* out);
// INVALID_ARGUMENT (budget.over) for an unknown enum.
absl::StatusOr<core::Budget> BudgetFromProto(const v1::Budget& b);
absl::StatusOr<core::PowerBudget> PowerBudgetFromProto(const v1::PowerBudget& b);
void ToProto(const core::PowerBudget& b, v1::PowerBudget* out);
void ToProto(const core::Budget& b, v1::Budget* out);
// INVALID_ARGUMENT "delegation.expires_at" when it is unset.
absl::StatusOr<core::Delegation> DelegationFromProto(const v1::Delegation& d);
void ToProto(const core::Delegation& d, v1::Delegation* out);
// UNSPECIFIED maps to kUnspecified (no filter); an unknown number is an error.
absl::StatusOr<core::RequestState> RequestStateFromProto(int value, absl::string_view field);

void ToProto(const core::MigInstance& inst, v1::MigInstance* out);
void ToProto(const core::GpuModel& m, v1::GpuModel* out);
void ToProto(const core::Cluster& c, v1::Cluster* out);
void ToProto(const core::Pool& p, v1::Pool* out);
void ToProto(const core::Node& n, v1::Node* out);
// The lifecycle state a node reads as (proto NodeState).
v1::NodeState NodeStateOf(const core::Node& n);
void ToProto(const core::Team& t, v1::Team* out);
void ToProto(const core::Quota& q, v1::Quota* out);
void ToProto(const core::CapacityRequest& r, const app::NodeDirectory& nodes,
             v1::CapacityRequest* out);
v1::AllocationEventType ToProto(app::EventType type);

}  // namespace arbiter::server
