// Every SQL statement of the PostgreSQL store, as named constants with `$n`
// parameters. `PrepareAll` prepares them on a new connection.
#pragma once

#include <string>

#include <pqxx/connection>

namespace arbiter::store::sql {

// The states of a live request; every other state is final. The partial
// indexes requests_live and requests_ended name the same list.
#define ARBITER_LIVE_STATES "('admitted', 'queued', 'preempting', 'reserved', 'pending_approval')"
// Columns of a request row, in the order `RequestFromRow` reads them.
// A nullable timestamp as integer microseconds, INT64_MIN for NULL.
#define ARBITER_MICROS_OR_MIN(col) \
  "COALESCE((extract(epoch FROM " col ") * 1000000)::bigint, -9223372036854775808)"
#define ARBITER_REQUEST_COLUMNS \
  "id, idempotency_key, body_hash, team, pool, workload_class, members, whole_gpus, "          \
  "fraction_milli, fraction_memory_mib, cpu_milli, memory_mib, gpu_models, description, "      \
  "state, reason_code, reason, (extract(epoch FROM created_at) * 1000000)::bigint, "           \
  "(extract(epoch FROM updated_at) * 1000000)::bigint, mig_profile, topology, "                \
  "model_parameters, model_bytes_per_parameter_milli, model_layers, model_kv_heads, "          \
  "model_head_dim, model_kv_bytes_per_element_milli, model_token_budget, model_overhead_mib, " \
  "gpu_milli_per_member, priority, preemptible, checkpoint_seconds, "                           \
  "checkpoint_interval_seconds, guaranteed, " ARBITER_MICROS_OR_MIN("start_at") ", "           \
  "duration_seconds, " ARBITER_MICROS_OR_MIN("admitted_at") ", quota_model, "                  \
  ARBITER_MICROS_OR_MIN("preempt_deadline") ", preempted_by, holds, approvals, approvers, "     \
  ARBITER_MICROS_OR_MIN("approval_deadline") ", cost_micros, claims, "                         \
  ARBITER_MICROS_OR_MIN("run_started_at") ", " ARBITER_MICROS_OR_MIN("run_ended_at") ", spot, burst_seconds, " \
  ARBITER_MICROS_OR_MIN("burst_until") ", recurrence"
#define ARBITER_PLACEMENT_COLUMNS                                                                \
  "request_id, member, node_id, gpu_indices, gpu_milli, gpu_memory_mib, cpu_milli, memory_mib, " \
  "exclusive, mig_profile, mig_start, mig_new_layout, mig_layout_cleared"

inline constexpr const char* kInsertCluster = "insert_cluster";
inline constexpr const char* kInsertPool = "insert_pool";
inline constexpr const char* kInsertNode = "insert_node";
inline constexpr const char* kInsertGpu = "insert_gpu";
inline constexpr const char* kUpsertGpuModel = "upsert_gpu_model";
inline constexpr const char* kUpdateNodeLifecycle = "update_node_lifecycle";
inline constexpr const char* kUpdateNodeFacts = "update_node_facts";
inline constexpr const char* kUpdateGpuFacts = "update_gpu_facts";
inline constexpr const char* kRemoveNode = "remove_node";
inline constexpr const char* kSelectMaxNodeId = "select_max_node_id";
inline constexpr const char* kSelectMaxRequestId = "select_max_request_id";
inline constexpr const char* kClearGpuUuids = "clear_gpu_uuids";
inline constexpr const char* kInsertTeam = "insert_team";
inline constexpr const char* kUpsertQuota = "upsert_quota";
// Multi-row statements: each parameter is an array with one element per row
// (see BatchStatements in statements.cc for the columns).
// Every row a commit writes (requests inserted and updated, placements, MIG
// layouts, ledger entries, ledger checkpoints), one array per column, in one
// statement (store/postgres/batch_writer.h).
inline constexpr const char* kWriteDecisions = "write_decisions";
inline constexpr const char* kSelectGpuModels = "select_gpu_models";
inline constexpr const char* kSelectClusters = "select_clusters";
inline constexpr const char* kSelectPools = "select_pools";
inline constexpr const char* kSelectNodes = "select_nodes";
inline constexpr const char* kSelectGpus = "select_gpus";
inline constexpr const char* kSelectTeams = "select_teams";
inline constexpr const char* kSelectQuotas = "select_quotas";
inline constexpr const char* kSelectQuotaUsage = "select_quota_usage";
inline constexpr const char* kSelectLiveRequests = "select_live_requests";
inline constexpr const char* kSelectEndedKeys = "select_ended_keys";
inline constexpr const char* kFindEndedKeys = "find_ended_keys";
inline constexpr const char* kSelectEndedSpend = "select_ended_spend";
inline constexpr const char* kSelectLivePlacements = "select_live_placements";
inline constexpr const char* kSelectRequest = "select_request";
inline constexpr const char* kSelectRequests = "select_requests";
inline constexpr const char* kSelectPlacementsOf = "select_placements_of";
inline constexpr const char* kUpsertClassRule = "upsert_class_rule";
inline constexpr const char* kSelectClassRules = "select_class_rules";
inline constexpr const char* kInsertRoleBinding = "insert_role_binding";
inline constexpr const char* kDeleteRoleBinding = "delete_role_binding";
inline constexpr const char* kSelectRoleBindings = "select_role_bindings";
inline constexpr const char* kInsertAccessDenial = "insert_access_denial";
inline constexpr const char* kInsertAuthorityRule = "insert_authority_rule";
inline constexpr const char* kInsertPrice = "insert_price";
inline constexpr const char* kSelectPrices = "select_prices";
inline constexpr const char* kUpsertBudget = "upsert_budget";
inline constexpr const char* kSelectBudgets = "select_budgets";
inline constexpr const char* kUpsertPowerBudget = "upsert_power_budget";
inline constexpr const char* kSelectPowerBudgets = "select_power_budgets";
inline constexpr const char* kUpsertDemandSlot = "upsert_demand_slot";
inline constexpr const char* kSelectDemandSlots = "select_demand_slots";
inline constexpr const char* kFence = "fence";
inline constexpr const char* kSelectSpend = "select_spend";
inline constexpr const char* kSelectMonthSpend = "select_month_spend";
inline constexpr const char* kUpsertDelegation = "upsert_delegation";
inline constexpr const char* kDeleteDelegation = "delete_delegation";
inline constexpr const char* kSelectDelegations = "select_delegations";
inline constexpr const char* kDeleteAuthorityRule = "delete_authority_rule";
inline constexpr const char* kSelectAuthorityRules = "select_authority_rules";
inline constexpr const char* kSelectLedgerHead = "select_ledger_head";
inline constexpr const char* kSelectLedger = "select_ledger";
inline constexpr const char* kSelectLastCheckpoint = "select_last_checkpoint";
inline constexpr const char* kSelectCheckpoints = "select_checkpoints";
inline constexpr const char* kEnsureMonthPartitions = "ensure_month_partitions";
inline constexpr const char* kEnsureUsagePartition = "ensure_usage_partition";
// Ledger retention (store/postgres/ledger_archive.h).
inline constexpr const char* kSelectLedgerPartitions = "select_ledger_partitions";
inline constexpr const char* kSelectLedgerHeadTime = "select_ledger_head_time";
inline constexpr const char* kSelectLedgerPartitionPage = "select_ledger_partition_page";
inline constexpr const char* kRetireLedgerPartition = "retire_ledger_partition";
// History retention (store/postgres/history_archive.h).
inline constexpr const char* kSelectHistoryPartitions = "select_history_partitions";
inline constexpr const char* kSelectTableColumns = "select_table_columns";
inline constexpr const char* kCountLivePlacements = "count_live_placements";
inline constexpr const char* kRetireHistoryPartition = "retire_history_partition";

// Metrics.
inline constexpr const char* kSelectAllocatedGauges = "select_allocated_gauges";
inline constexpr const char* kSelectLastHourGauges = "select_last_hour_gauges";
inline constexpr const char* kSelectStateCounts = "select_state_counts";
inline constexpr const char* kSelectIncidentCounts = "select_incident_counts";

// Telemetry.
inline constexpr const char* kEnsureSamplePartition = "ensure_sample_partition";
inline constexpr const char* kDropSamplePartitions = "drop_sample_partitions";
inline constexpr const char* kInsertSamples = "insert_samples";
inline constexpr const char* kSelectSamples = "select_samples";
inline constexpr const char* kSelectHeldMembers = "select_held_members";
// kSelectHeldMembers of the requests of pool $3 alone.
inline constexpr const char* kSelectHeldMembersInPool = "select_held_members_in_pool";
// kSelectHeldMembers as cursor `held_members`, and its next few thousand
// rows (none once it is read to the end).
inline constexpr const char* kDeclareHeldMembers = "declare_held_members";
inline constexpr const char* kFetchHeldMembers = "fetch_held_members";
inline constexpr const char* kSelectLiveMembers = "select_live_members";
inline constexpr const char* kDeleteUsageHour = "delete_usage_hour";
inline constexpr const char* kAddUsageRows = "add_usage_rows";
inline constexpr const char* kAddTeamUsageRows = "add_team_usage_rows";
inline constexpr const char* kDeleteUsageProgress = "delete_usage_progress";
inline constexpr const char* kSelectUsageProgress = "select_usage_progress";
inline constexpr const char* kAdvanceUsageProgress = "advance_usage_progress";
inline constexpr const char* kInsertUsageProgress = "insert_usage_progress";
inline constexpr const char* kSelectUtilization = "select_utilization";
inline constexpr const char* kSelectMemberUsage = "select_member_usage";

// SLOs, incidents and chargeback.
inline constexpr const char* kUpsertSlo = "upsert_slo";
inline constexpr const char* kSelectSlos = "select_slos";
inline constexpr const char* kInsertLatencyWindow = "insert_latency_window";
inline constexpr const char* kSelectLatencyWindow = "select_latency_window";
inline constexpr const char* kInsertIncident = "insert_incident";
inline constexpr const char* kInsertExternalityCharge = "insert_externality_charge";
inline constexpr const char* kSelectIncidentKeys = "select_incident_keys";
inline constexpr const char* kSelectIncidents = "select_incidents";
inline constexpr const char* kSelectIncidentCharges = "select_incident_charges";
inline constexpr const char* kSelectChargesBooked = "select_charges_booked";
inline constexpr const char* kSelectWaitingRequests = "select_waiting_requests";
inline constexpr const char* kInsertChargebackPeriod = "insert_chargeback_period";
inline constexpr const char* kSelectChargebackPeriods = "select_chargeback_periods";
inline constexpr const char* kSelectChargebackPeriod = "select_chargeback_period";
inline constexpr const char* kSelectClusterReserved = "select_cluster_reserved";
inline constexpr const char* kSelectUsedByHour = "select_used_by_hour";
inline constexpr const char* kUpsertIdlePolicy = "upsert_idle_policy";
inline constexpr const char* kSelectIdlePolicies = "select_idle_policies";

// How a connection plans its prepared statements.
enum class PlanMode {
  kCustom,   // Every execution planned for its own parameters.
  kGeneric,  // One generic plan per statement, index scans and nested loops.
};

// Prepares every statement above on `conn` and sets its session options.
void Prepare(pqxx::connection& conn, PlanMode mode);
// Prepare(conn, kCustom): the read connections.
void PrepareAll(pqxx::connection& conn);
// Prepare(conn, kGeneric): the writer's connection.
void PrepareWriter(pqxx::connection& conn);
// Prepare(conn, kGeneric): the idempotency key lookups' connection
// (kFindEndedKeys, run for every new request), whose one statement finds
// its rows by key: planning it at each execution was about a third of
// PostgreSQL's time per decision.
void PrepareKeyLookups(pqxx::connection& conn);
// The SQL of the statement named `name` above (not the batch writes), for
// tests that EXPLAIN it; empty if there is none.
std::string StatementText(const std::string& name);

}  // namespace arbiter::store::sql
