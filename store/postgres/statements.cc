#include "store/postgres/statements.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include <pqxx/pqxx>

namespace arbiter::store::sql {
namespace {

// Timestamps travel as integer microseconds since the Unix epoch.
#define TS(n) "('epoch'::timestamptz + $" #n "::bigint * interval '1 microsecond')"
// An optional time: INT64_MIN (rows::ToMicrosOrMin of InfinitePast) is NULL.
#define OPT_TS(n) "(CASE WHEN $" #n "::bigint = -9223372036854775808 THEN NULL ELSE " TS(n) " END)"
// The ids of the requests that hold placements now. Placements are in
// partitions by admission month (migration 0033): a join finds them by
// "p.request_id = ANY(<ids>)", an index scan of each partition, where a
// join on the request would scan the partitions whole.
#define ARBITER_HOLDING_IDS                                                                 \
  "ARRAY(SELECT id FROM requests WHERE state IN ('admitted', 'preempting') AND ended_at = " \
  "'infinity')"
// Requests (alias r) that held capacity at some time in [$1, $2): admitted
// before $2, and live or ended after $1 (a request's last update is when it
// ended), found through the partial indexes requests_live and
// requests_ended. By "ended_at > $1" alone each month's partition would be
// read whole (its primary key is (id, ended_at)); that condition only
// prunes the months that ended before $1 (HeldMembersPlanTest).
#define ARBITER_HELD_IN_WINDOW \
  "r.state IN ('admitted', 'preempting', 'released', 'preempted', 'cancelled') "           \
  "AND r.admitted_at < " TS(2) " AND (r.state IN ('admitted', 'preempting') OR (r.state " \
                               "NOT IN " ARBITER_LIVE_STATES " AND r.updated_at > " TS(   \
                                   1) ")) AND r.ended_at > " TS(1)
#define OPT_MICROS(column) \
  "COALESCE((extract(epoch FROM " column ") * 1000000)::bigint, -9223372036854775808)"

struct Statement {
  const char* name;
  const char* text;
};

constexpr Statement kStatements[] = {
    {kInsertCluster, "INSERT INTO clusters (name, description) VALUES ($1, $2)"},
    {kInsertPool,
     "INSERT INTO pools (name, latency_class, description, lends_to, reclaim_grace_seconds, "
     "queueing, starvation_limit_seconds, claim_deadline_seconds, lease_seconds, class_rules, "
     "spot_grace_seconds, headroom, max_burst_seconds, proactive_reclaim, cold_start_seconds) "
     "VALUES ($1, $2, $3, $4::text[], $5, $6, $7, $8, $9, $10::text[], NULLIF($11, -1), "
     "$12::text[], $13, $14, $15)"},
    {kInsertNode,
     "INSERT INTO nodes (id, cluster, name, pool, topology_domain, cpu_milli, memory_mib) "
     "VALUES ($1, $2, $3, $4, $5, $6, $7)"},
    {kInsertGpu,
     "INSERT INTO gpus (node_id, gpu_index, model, mig_placements, uuid) "
     "VALUES ($1, $2, $3, $4, $5)"},
    {kInsertTeam, "INSERT INTO teams (name, parent, weight_milli) VALUES ($1, NULLIF($2, ''), $3)"},
    {kUpsertQuota,
     "INSERT INTO quotas (team, pool, nominal_milli, gpu_model, borrowing_limit_milli, "
     "lending_limit_milli, cohort_lending_limit_milli, cohort_borrowing_limit_milli) "
     "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
     "ON CONFLICT (team, pool, gpu_model) DO UPDATE SET nominal_milli = EXCLUDED.nominal_milli, "
     "borrowing_limit_milli = EXCLUDED.borrowing_limit_milli, "
     "lending_limit_milli = EXCLUDED.lending_limit_milli, "
     "cohort_lending_limit_milli = EXCLUDED.cohort_lending_limit_milli, "
     "cohort_borrowing_limit_milli = EXCLUDED.cohort_borrowing_limit_milli, updated_at = now()"},
    {kSelectGpuModels,
     "SELECT name, memory_mib, sm_count, tdp_watts, mig_capable, vendor, nvlink_domain_size, "
     "mig_profiles FROM gpu_models ORDER BY name"},
    {kUpsertGpuModel,
     "INSERT INTO gpu_models (name, memory_mib, sm_count, tdp_watts, mig_capable, vendor, "
     "nvlink_domain_size, mig_profiles) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
     "ON CONFLICT (name) DO UPDATE SET memory_mib = EXCLUDED.memory_mib, "
     "sm_count = EXCLUDED.sm_count, tdp_watts = EXCLUDED.tdp_watts, "
     "mig_capable = EXCLUDED.mig_capable, vendor = EXCLUDED.vendor, "
     "nvlink_domain_size = EXCLUDED.nvlink_domain_size, mig_profiles = EXCLUDED.mig_profiles"},
    {kSelectClusters, "SELECT name, description FROM clusters ORDER BY name"},
    {kSelectPools,
     "SELECT name, latency_class, description, lends_to, reclaim_grace_seconds, queueing, "
     "starvation_limit_seconds, claim_deadline_seconds, lease_seconds, class_rules, "
     "COALESCE(spot_grace_seconds, -1), headroom, max_burst_seconds, proactive_reclaim, "
     "cold_start_seconds FROM pools ORDER BY name"},
    // $1 cluster, $2 pool ('' = any).
    {kSelectNodes,
     "SELECT id, cluster, name, pool, topology_domain, cpu_milli, memory_mib, cordoned, "
     "health, " OPT_MICROS("drain_deadline") ", " OPT_MICROS("failed_at") ", " OPT_MICROS(
         "last_heartbeat") " FROM nodes "
                           "WHERE removed_at IS NULL AND ($1 = '' OR cluster = $1) "
                           "AND ($2 = '' OR pool = $2) ORDER BY cluster, name"},
    {kSelectGpus,
     "SELECT g.node_id, g.gpu_index, g.model, g.mig_layout, g.mig_placements, g.uuid FROM gpus g "
     "JOIN nodes n ON n.id = g.node_id "
     "WHERE n.removed_at IS NULL AND ($1 = '' OR n.cluster = $1) AND ($2 = '' OR n.pool = $2) "
     "ORDER BY g.node_id, g.gpu_index"},
    // Removed nodes included: their ids are never handed out again.
    {kSelectMaxNodeId, "SELECT COALESCE(max(id), 0) FROM nodes"},
    // The primary key's last entry.
    // Ids go on after those of archived requests too (migration 0033).
    {kSelectMaxRequestId,
     "SELECT GREATEST((SELECT COALESCE(max(id), 0) FROM requests),"
     " (SELECT COALESCE(max(max_request_id), 0) FROM history_archives))"},
    // $1 id; $4..$6 optional times (OPT_TS).
    {kUpdateNodeLifecycle,
     "UPDATE nodes SET cordoned = $2, health = $3, drain_deadline = " OPT_TS(
         4) ", failed_at = " OPT_TS(5) ", last_heartbeat = " OPT_TS(6) " WHERE id = $1"},
    {kUpdateNodeFacts,
     "UPDATE nodes SET topology_domain = $2, cpu_milli = $3, memory_mib = $4 WHERE id = $1"},
    {kUpdateGpuFacts,
     "UPDATE gpus SET uuid = $3, mig_placements = $4 WHERE node_id = $1 AND gpu_index = $2"},
    {kRemoveNode, "UPDATE nodes SET removed_at = " TS(2) " WHERE id = $1 AND removed_at IS NULL"},
    {kClearGpuUuids, "UPDATE gpus SET uuid = '' WHERE node_id = $1"},
    // Parents before children, so that the cohort tree loads in one pass.
    {kSelectTeams,
     "WITH RECURSIVE tree AS ("
     " SELECT name, parent, weight_milli, 0 AS depth FROM teams WHERE parent IS NULL"
     " UNION ALL"
     " SELECT t.name, t.parent, t.weight_milli, tree.depth + 1 FROM teams t"
     " JOIN tree ON t.parent = tree.name)"
     " SELECT name, COALESCE(parent, ''), weight_milli FROM tree ORDER BY depth, name"},
    {kSelectQuotas,
     "SELECT team, pool, nominal_milli, gpu_model, borrowing_limit_milli, lending_limit_milli,"
     " cohort_lending_limit_milli, cohort_borrowing_limit_milli"
     " FROM quotas ORDER BY team, pool, gpu_model"},
    {kSelectQuotaUsage,
     "SELECT q.team, q.pool, q.nominal_milli, q.gpu_model, q.borrowing_limit_milli,"
     " q.lending_limit_milli, q.cohort_lending_limit_milli, q.cohort_borrowing_limit_milli,"
     " COALESCE(sum(r.members::bigint * r.gpu_milli_per_member), 0)::bigint"
     " FROM quotas q LEFT JOIN requests r ON r.team = q.team AND r.pool = q.pool"
     " AND r.quota_model = q.gpu_model AND r.state IN ('admitted', 'preempting')"
     " AND r.ended_at = 'infinity'"
     " WHERE ($1 = '' OR q.team = $1)"
     " GROUP BY q.team, q.pool, q.gpu_model ORDER BY q.team, q.pool, q.gpu_model"},
    {kSelectLiveRequests,
     "SELECT " ARBITER_REQUEST_COLUMNS " FROM requests"
     " WHERE state IN " ARBITER_LIVE_STATES " AND ended_at = 'infinity' ORDER BY id"},
    // $1: ended at or after, in microseconds (the window's start).
    {kSelectEndedKeys,
     "SELECT id, idempotency_key, body_hash, state,"
     " (extract(epoch FROM updated_at) * 1000000)::bigint FROM requests"
     " WHERE state NOT IN " ARBITER_LIVE_STATES
     " AND updated_at >= " TS(1) " AND ended_at >= " TS(1) " ORDER BY updated_at, id"},
    // $1: the keys (text[]); $2: ended at or after, in microseconds. The
    // latest ended request of each key (a key is used again only after its
    // last request ended), kept if it ended since $2. The scan's index
    // condition is the key's, through requests_ended_key (migration 0032);
    // "ended_at >= $2" only prunes the months before the window (0033),
    // and the latest request of a key is the last to end, so it drops no
    // key's latest request. PgStore's key lookups plan it once
    // (PrepareKeyLookups), with sequential scans, hash and merge joins off,
    // so that the plan made while `requests` is empty still finds the keys
    // through requests_ended_key as the table grows (KeyLookupPlanTest).
    {kFindEndedKeys,
     "SELECT idempotency_key, id, body_hash FROM (SELECT DISTINCT ON (r.idempotency_key)"
     " r.idempotency_key, r.id, r.body_hash, r.updated_at FROM unnest($1::text[]) AS k(key),"
     " LATERAL (SELECT idempotency_key, id, body_hash, updated_at FROM requests"
     " WHERE idempotency_key = k.key AND state NOT IN " ARBITER_LIVE_STATES
     " AND ended_at >= " TS(2) " OFFSET 0) r ORDER BY r.idempotency_key, r.id DESC)"
                               " latest WHERE updated_at >= " TS(2)},
    // $1: months starting at or after, in microseconds.
    {kSelectEndedSpend,
     "SELECT team, (extract(epoch FROM month) * 1000000)::bigint, micros FROM ended_spend"
     " WHERE month >= " TS(1)},
    {kSelectLivePlacements,
     "SELECT p.request_id, p.member, p.node_id, p.gpu_indices, p.gpu_milli, p.gpu_memory_mib,"
     " p.cpu_milli, p.memory_mib, p.exclusive, p.mig_profile, p.mig_start, p.mig_new_layout,"
     " p.mig_layout_cleared FROM placements p WHERE p.request_id = ANY(" ARBITER_HOLDING_IDS
     ") ORDER BY p.request_id, p.member"},
    {kSelectRequest, "SELECT " ARBITER_REQUEST_COLUMNS " FROM requests WHERE id = $1"},
    // $1 team, $2 state ('' = any), $3 before id (0 = newest), $4 limit.
    {kSelectRequests,
     "SELECT " ARBITER_REQUEST_COLUMNS " FROM requests"
     " WHERE ($1 = '' OR team = $1) AND ($2 = '' OR state = $2) AND ($3 = 0 OR id < $3)"
     " ORDER BY id DESC LIMIT $4"},
    {kUpsertClassRule,
     "INSERT INTO coexistence_rules (class_a, class_b, gpu_isolation, same_node)"
     " VALUES (LEAST($1, $2), GREATEST($1, $2), $3, $4) ON CONFLICT (class_a, class_b)"
     " DO UPDATE SET gpu_isolation = EXCLUDED.gpu_isolation, same_node = EXCLUDED.same_node,"
     " updated_at = now()"},
    {kSelectClassRules,
     "SELECT class_a, class_b, gpu_isolation, same_node FROM coexistence_rules"
     " ORDER BY class_a, class_b"},
    {kInsertRoleBinding,
     "INSERT INTO role_bindings (subject, role, scope_kind, scope) VALUES ($1, $2, $3, $4)"},
    {kDeleteRoleBinding,
     "DELETE FROM role_bindings WHERE subject = $1 AND role = $2 AND scope_kind = $3"
     " AND scope = $4"},
    {kSelectRoleBindings,
     "SELECT subject, role, scope_kind, scope FROM role_bindings"
     " ORDER BY subject, role, scope_kind, scope"},
    {kInsertAccessDenial,
     "INSERT INTO access_denials (principal, method, code, reason) VALUES ($1, $2, $3, $4)"},
    {kInsertAuthorityRule,
     "INSERT INTO authority_rules (pool, action, approver, limit_milli, threshold_milli,"
     " threshold_seconds, limit_seconds, limit_micros) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"},
    {kDeleteAuthorityRule,
     "DELETE FROM authority_rules WHERE pool = $1 AND action = $2 AND approver = $3"
     " AND limit_milli = $4 AND threshold_milli = $5 AND threshold_seconds = $6"
     " AND limit_seconds = $7 AND limit_micros = $8"},
    {kSelectAuthorityRules,
     "SELECT pool, action, approver, limit_milli, threshold_milli, threshold_seconds,"
     " limit_seconds, limit_micros FROM authority_rules"
     " ORDER BY pool, action, approver"},
    {kInsertPrice,
     "INSERT INTO prices (gpu_model, latency_class, micros_per_gpu_hour, effective_from, "
     "burst_micros_per_gpu_hour) VALUES ($1, $2, $3, " TS(4) ", $5)"},
    {kSelectPrices,
     "SELECT gpu_model, latency_class, micros_per_gpu_hour,"
     " (extract(epoch FROM effective_from) * 1000000)::bigint, burst_micros_per_gpu_hour"
     " FROM prices"
     " ORDER BY gpu_model, latency_class, effective_from"},
    {kUpsertPowerBudget,
     "INSERT INTO power_budgets (scope, name, watts, reclaim) VALUES ($1, $2, $3, $4) "
     "ON CONFLICT (scope, name) DO UPDATE SET watts = EXCLUDED.watts, "
     "reclaim = EXCLUDED.reclaim, updated_at = now()"},
    {kSelectPowerBudgets,
     "SELECT scope, name, watts, reclaim FROM power_budgets ORDER BY scope, name"},
    {kUpsertDemandSlot,
     "INSERT INTO serving_demand (pool, slot, learnt_milli, peak_milli, week) "
     "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (pool, slot) DO UPDATE SET "
     "learnt_milli = EXCLUDED.learnt_milli, peak_milli = EXCLUDED.peak_milli, "
     "week = EXCLUDED.week"},
    {kSelectDemandSlots,
     "SELECT pool, slot, learnt_milli, peak_milli, week FROM serving_demand ORDER BY pool, slot"},
    // The fence of a commit that writes no decision (arbiter_fence,
    // migration 0021); 0: unfenced.
    {kFence, "SELECT CASE WHEN $1::bigint = 0 THEN 0 ELSE arbiter_fence($1) END"},
    {kUpsertBudget,
     "INSERT INTO budgets (team, soft_limit_micros, hard_limit_micros, over) VALUES ($1, $2, $3, "
     "$4)"
     " ON CONFLICT (team) DO UPDATE SET soft_limit_micros = EXCLUDED.soft_limit_micros,"
     " hard_limit_micros = EXCLUDED.hard_limit_micros, over = EXCLUDED.over, updated_at = now()"},
    {kSelectBudgets,
     "SELECT team, soft_limit_micros, hard_limit_micros, over FROM budgets ORDER BY team"},
    // $1, $2: the month's bounds in microseconds.
    // Telemetry (migrations/0016_add_telemetry.sql).
    {kEnsureSamplePartition, "SELECT arbiter_ensure_sample_partition($1::date)"},
    {kDropSamplePartitions, "SELECT arbiter_drop_sample_partitions($1::date)"},
    {kSelectSamples,
     "SELECT (extract(epoch FROM at) * 1000000)::bigint, node_id, gpu_index, mig_instance, "
     "mig_profile, interval_ms, util_milli, engine_active_milli, fb_used_mib, fb_free_mib, "
     "power_mw, pod, pod_namespace FROM gpu_samples WHERE at >= " TS(1) " AND at < " TS(2)},
#define ARBITER_MEMBER_COLUMNS                                                           \
  "SELECT r.id, p.member, r.team, r.pool, r.workload_class, "                            \
  "COALESCE((SELECT g.model FROM gpus g WHERE g.node_id = p.node_id "                    \
  "AND g.gpu_index = p.gpu_indices[1]), ''), p.node_id, p.gpu_indices, p.gpu_milli, "    \
  "p.gpu_memory_mib, p.mig_profile, p.exclusive, r.preemptible, r.guaranteed, "          \
  "(extract(epoch FROM COALESCE(r.run_started_at, r.admitted_at)) * 1000000)::bigint, "  \
  "CASE WHEN r.state IN ('admitted', 'preempting') THEN -9223372036854775808 "           \
  "ELSE (extract(epoch FROM COALESCE(r.run_ended_at, r.updated_at)) * 1000000)::bigint " \
  "END, r.priority, r.spot, r.burst_until IS NOT NULL "                                  \
  "FROM requests r JOIN placements p ON p.request_id = r.id "
// Members held at some time in [$1, $2) of the requests that also meet
// `requests_too` (a condition on r, "" for none). Their placements are
// found by the ids of the requests (ARBITER_HOLDING_IDS explains why), so
// the condition is in both parts: the ids and the requests joined.
#define ARBITER_SELECT_HELD_MEMBERS(requests_too) \
  ARBITER_MEMBER_COLUMNS "WHERE " ARBITER_HELD_IN_WINDOW requests_too " AND p.admitted_at < " \
      TS(2) " AND p.request_id = ANY(ARRAY(SELECT r.id "                                     \
            "FROM requests r WHERE " ARBITER_HELD_IN_WINDOW requests_too                      \
            ")) ORDER BY r.id, p.member"
    {kSelectHeldMembers, ARBITER_SELECT_HELD_MEMBERS("")},
    {kSelectHeldMembersInPool, ARBITER_SELECT_HELD_MEMBERS(" AND r.pool = $3")},
    // The same rows through a cursor, 4,096 at a time (a FETCH's count
    // cannot be a parameter). Its plan is the SELECT's only while the
    // transaction sets cursor_tuple_fraction to 1.
    {kDeclareHeldMembers,
     "DECLARE held_members NO SCROLL CURSOR FOR " ARBITER_SELECT_HELD_MEMBERS("")},
    {kFetchHeldMembers, "FETCH FORWARD 4096 FROM held_members"},
#undef ARBITER_SELECT_HELD_MEMBERS
    {kSelectLiveMembers, ARBITER_MEMBER_COLUMNS
     "WHERE r.state IN ('admitted', 'preempting') AND r.ended_at = 'infinity' "
     "AND p.request_id = ANY(" ARBITER_HOLDING_IDS ") ORDER BY r.id, p.member"},
#undef ARBITER_MEMBER_COLUMNS
    {kDeleteUsageHour, "WITH members AS (DELETE FROM usage_hourly WHERE hour = " TS(
                           1) ") DELETE FROM usage_team_hourly WHERE hour = " TS(1)},
    {kDeleteUsageProgress, "DELETE FROM usage_progress WHERE hour = " TS(1)},
    {kSelectUsageProgress,
     "SELECT (extract(epoch FROM rolled_to) * 1000000)::bigint FROM usage_progress "
     "WHERE hour = " TS(1)},
    // Moves an hour's progress from $2 to $3; no row when it was not at $2.
    {kAdvanceUsageProgress, "UPDATE usage_progress SET rolled_to = " TS(3) " WHERE hour = " TS(
                                1) " AND rolled_to = " TS(2) " RETURNING 1"},
    {kInsertUsageProgress, "INSERT INTO usage_progress (hour, rolled_to) VALUES (" TS(1) ", " TS(
                               2) ") ON CONFLICT (hour) DO NOTHING RETURNING 1"},
    {kSelectUtilization,
     "SELECT team, pool, workload_class, gpu_model, sum(allocated_milli_seconds)::bigint, "
     "sum(sampled_milli_seconds)::bigint, sum(used_milli_seconds)::bigint, "
     "sum(energy_mwh)::bigint, max(peak_busy_milli), max(peak_memory_mib) FROM usage_team_hourly "
     "WHERE hour >= " TS(1) " AND hour < " TS(2) " AND ($3 = '' OR team = $3) "
                                                 "GROUP BY team, pool, workload_class, gpu_model "
                                                 "ORDER BY team, pool, workload_class, gpu_model"},
    {kSelectMemberUsage,
     "SELECT request_id, member, sum(allocated_milli_seconds)::bigint, "
     "sum(sampled_milli_seconds)::bigint, sum(used_milli_seconds)::bigint, "
     "max(peak_busy_milli), max(peak_memory_mib), sum(energy_mwh)::bigint FROM usage_hourly "
     "WHERE hour >= " TS(1) " AND hour < " TS(2) " GROUP BY request_id, member "
                                                 "ORDER BY request_id, member"},
    // SLOs, incidents and chargeback (migrations/0017).
    {kUpsertSlo,
     "INSERT INTO slos (team, service, pool, p99_target_us, window_seconds, "
     "penalty_micros_per_minute) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (team, service) "
     "DO UPDATE SET pool = EXCLUDED.pool, p99_target_us = EXCLUDED.p99_target_us, "
     "window_seconds = EXCLUDED.window_seconds, "
     "penalty_micros_per_minute = EXCLUDED.penalty_micros_per_minute, updated_at = now()"},
    {kSelectSlos,
     "SELECT team, service, pool, p99_target_us, window_seconds, penalty_micros_per_minute "
     "FROM slos WHERE ($1 = '' OR team = $1) ORDER BY team, service"},
    {kInsertLatencyWindow,
     "INSERT INTO latency_windows (team, service, window_start, window_end, p50_us, p99_us, "
     "requests_milli_per_second, reported_at) VALUES ($1, $2, " TS(3) ", " TS(
         4) ", $5, $6, $7, " TS(8) ") ON CONFLICT DO NOTHING"},
    {kSelectLatencyWindow,
     "SELECT (extract(epoch FROM window_end) * 1000000)::bigint, p50_us, p99_us, "
     "requests_milli_per_second FROM latency_windows WHERE team = $1 AND service = $2 AND "
     "window_start = " TS(3)},
    {kInsertIncident,
     "INSERT INTO incidents (id, team, service, pool, window_start, window_end, p50_us, p99_us, "
     "p99_target_us, cost_micros, cost_basis, attributed_micros, recorded_at) VALUES ($1, $2, $3, "
     "$4, " TS(5) ", " TS(6) ", $7, $8, $9, $10, $11, $12, " TS(13) ")"},
    {kInsertExternalityCharge,
     "INSERT INTO externality_charges (incident_id, team, micros, borrowed_milli_seconds, "
     "co_tenancy_milli_seconds, admission_delay_milli_seconds, request_ids, method, booked_at) "
     "VALUES ($1, $2, $3, $4, $5, $6, $7::bigint[], $8, " TS(9) ")"},
    {kSelectIncidentKeys,
     "SELECT team, service, (extract(epoch FROM window_start) * 1000000)::bigint, id "
     "FROM incidents"},
    {kSelectIncidents,
     "SELECT i.id, i.team, i.service, i.pool, (extract(epoch FROM i.window_start) * "
     "1000000)::bigint, "
     "(extract(epoch FROM i.window_end) * 1000000)::bigint, i.p50_us, i.p99_us, i.p99_target_us, "
     "i.cost_micros, i.cost_basis, (extract(epoch FROM i.recorded_at) * 1000000)::bigint, "
     "COALESCE(s.window_seconds, 0), COALESCE(s.penalty_micros_per_minute, 0) "
     "FROM incidents i LEFT JOIN slos s ON s.team = i.team AND s.service = i.service "
     "WHERE i.recorded_at >= " TS(1) " AND i.recorded_at < " TS(
         2) " AND ($3 = '' OR i.team = $3 "
            "OR EXISTS (SELECT 1 FROM externality_charges c WHERE c.incident_id = i.id AND c.team "
            "= $3)) "
            "AND ($4 = 0 OR i.id = $4) ORDER BY i.id"},
    {kSelectIncidentCharges,
     "SELECT incident_id, team, micros, borrowed_milli_seconds, co_tenancy_milli_seconds, "
     "admission_delay_milli_seconds, request_ids, (extract(epoch FROM booked_at) * "
     "1000000)::bigint "
     "FROM externality_charges WHERE incident_id = ANY($1::bigint[]) ORDER BY incident_id, "
     "micros < 0, team"},
    {kSelectChargesBooked,
     "SELECT incident_id, team, micros, borrowed_milli_seconds, co_tenancy_milli_seconds, "
     "admission_delay_milli_seconds, request_ids, (extract(epoch FROM booked_at) * "
     "1000000)::bigint "
     "FROM externality_charges WHERE booked_at >= " TS(1) " AND booked_at < " TS(
         2) " "
            "ORDER BY incident_id, team"},
    // The victim's requests in a pool that waited at some time in [$3, $4):
    // from creation to admission (or to their end, or still waiting).
    {kSelectWaitingRequests,
     "SELECT id, gpu_milli_per_member * members, priority, (extract(epoch FROM created_at) * "
     "1000000)::bigint, "
     "CASE WHEN admitted_at IS NOT NULL THEN (extract(epoch FROM admitted_at) * 1000000)::bigint "
     "WHEN state IN ('queued', 'pending_approval') THEN 9223372036854775807 "
     "ELSE (extract(epoch FROM updated_at) * 1000000)::bigint END AS until_us "
     "FROM requests WHERE team = $1 AND pool = $2 AND created_at < " TS(
         4) " "
            "AND (admitted_at IS NULL OR admitted_at > " TS(
                3) ") AND state <> 'denied' "
                   "AND state <> 'reserved' "
                   // A request that ended before the window waited before it too: the
                   // live ones, and those ended since the window's start, through the
                   // partial indexes requests_live and requests_ended, not the history.
                   "AND (state IN " ARBITER_LIVE_STATES " OR (state NOT IN " ARBITER_LIVE_STATES
                   " AND updated_at > " TS(3) ")) AND ended_at > " TS(3) " ORDER BY id"},
    {kInsertChargebackPeriod,
     "INSERT INTO chargeback_periods (period_from, period_to, closed_at, statements_json, hash, "
     "teams, net_cost_micros) VALUES (" TS(1) ", " TS(2) ", " TS(3) ", $4, $5, $6, $7)"},
    {kSelectChargebackPeriods,
     "SELECT (extract(epoch FROM period_from) * 1000000)::bigint, "
     "(extract(epoch FROM period_to) * 1000000)::bigint FROM chargeback_periods"},
    {kSelectChargebackPeriod,
     "SELECT (extract(epoch FROM closed_at) * 1000000)::bigint, statements_json, hash, teams, "
     "net_cost_micros FROM chargeback_periods WHERE period_from = " TS(1) " AND period_to = " TS(
         2)},
    // Milli-GPU seconds held in [$1, $2) by every allocation, computed here
    // independently of the statements (a conservation check).
    {kSelectClusterReserved,
     "SELECT COALESCE(sum(p.gpu_milli * cardinality(p.gpu_indices) * "
     "GREATEST(0, (extract(epoch FROM LEAST(CASE WHEN r.state IN ('admitted', 'preempting') "
     "THEN " TS(
         2) " "
            "ELSE COALESCE(r.run_ended_at, r.updated_at) END, " TS(
                2) ")) * 1000000)::bigint - "
                   "(extract(epoch FROM GREATEST(COALESCE(r.run_started_at, r.admitted_at), " TS(
                       1) ")) * 1000000)::bigint) / 1000000), 0)::bigint "
                          "FROM requests r JOIN placements p ON p.request_id = r.id "
                          "WHERE " ARBITER_HELD_IN_WINDOW " AND p.admitted_at < " TS(2)},
    {kSelectUsedByHour,
     "SELECT (extract(epoch FROM hour) * 1000000)::bigint, sum(used_milli_seconds)::bigint "
     "FROM usage_team_hourly WHERE hour >= " TS(1) " AND hour < " TS(
         2) " AND ($3 = '' OR team = $3) "
            "GROUP BY hour ORDER BY hour"},
    {kUpsertIdlePolicy,
     "INSERT INTO idle_policies (workload_class, threshold_milli, window_seconds, action, "
     "notice_seconds) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (workload_class) DO UPDATE SET "
     "threshold_milli = EXCLUDED.threshold_milli, window_seconds = EXCLUDED.window_seconds, "
     "action = EXCLUDED.action, notice_seconds = EXCLUDED.notice_seconds, updated_at = now()"},
    {kSelectIdlePolicies,
     "SELECT workload_class, threshold_milli, window_seconds, action, notice_seconds "
     "FROM idle_policies ORDER BY workload_class"},
    {kSelectSpend,
     "SELECT team, COALESCE(sum(cost_micros), 0)::bigint FROM requests"
     " WHERE admitted_at >= " TS(1) " AND admitted_at < " TS(2) " AND ended_at >= " TS(
         1) " GROUP BY team"},
    // $1 the month's start, $2 the next month's: the ended requests' sums
    // (ended_spend, by month of admission) and the live requests, through
    // requests_live: a cost that does not grow with history.
    {kSelectMonthSpend,
     "SELECT team, sum(micros)::bigint FROM ("
     " SELECT team, micros FROM ended_spend WHERE month = " TS(
         1) " UNION ALL SELECT team, cost_micros FROM requests WHERE state IN " ARBITER_LIVE_STATES
            " AND ended_at = 'infinity' AND admitted_at >= " TS(1) " AND admitted_at < " TS(
                2) ") s GROUP BY team"},
    {kUpsertDelegation,
     "INSERT INTO delegations (from_principal, to_principal, expires_at) VALUES ($1, $2, " TS(
         3) ") ON CONFLICT (from_principal, to_principal) DO UPDATE SET expires_at = "
            "EXCLUDED.expires_at"},
    {kDeleteDelegation, "DELETE FROM delegations WHERE from_principal = $1 AND to_principal = $2"},
    {kSelectDelegations,
     "SELECT from_principal, to_principal, (extract(epoch FROM expires_at) * 1000000)::bigint"
     " FROM delegations ORDER BY from_principal, to_principal"},
    // Whole GPUs count gpu_milli (1000) once per GPU; a fraction or a MIG
    // instance holds one GPU index. The model is that of the first GPU.
    {kSelectAllocatedGauges,
     "SELECT r.pool, r.workload_class, r.team, COALESCE(g.model, ''),"
     " sum(p.gpu_milli * cardinality(p.gpu_indices))::bigint"
     " FROM requests r JOIN placements p ON p.request_id = r.id"
     " LEFT JOIN gpus g ON g.node_id = p.node_id AND g.gpu_index = p.gpu_indices[1]"
     " WHERE r.state IN ('admitted', 'preempting') AND r.ended_at = 'infinity'"
     " AND p.request_id = ANY(" ARBITER_HOLDING_IDS ") GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"},
    {kSelectLastHourGauges,
     "SELECT pool, workload_class, team, gpu_model, (sum(allocated_milli_seconds) / 3600)::bigint,"
     " (sum(used_milli_seconds) / 3600)::bigint FROM usage_team_hourly"
     " WHERE hour = (SELECT max(hour) FROM usage_team_hourly) GROUP BY 1, 2, 3, 4"
     " ORDER BY 1, 2, 3, 4"},
    {kSelectStateCounts,
     "SELECT (SELECT count(*) FROM requests WHERE state = 'pending_approval'"
     " AND ended_at = 'infinity'),"
     " (SELECT count(*) FROM requests WHERE state = 'queued' AND ended_at = 'infinity'),"
     " (SELECT COALESCE(max(seq), 0) FROM ledger)"},
    {kSelectIncidentCounts, "SELECT team, count(*) FROM incidents GROUP BY team ORDER BY team"},
    {kSelectLedgerHead, "SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1"},
    // $1 after seq, $2 limit, $3 subject, $4 actor, $5 action ('' = any).
    {kSelectLedger,
     "SELECT seq, (extract(epoch FROM at) * 1000000)::bigint, actor, action, subject, payload,"
     " prev_hash, hash FROM ledger WHERE seq > $1 AND ($3 = '' OR subject = $3)"
     " AND ($4 = '' OR actor = $4) AND ($5 = '' OR action = $5) ORDER BY seq LIMIT $2"},
    {kSelectLastCheckpoint, "SELECT seq FROM ledger_checkpoints ORDER BY seq DESC LIMIT 1"},
    // $1: a day of the month whose partitions must exist: the ledger's,
    // and those of the requests ended, the placements admitted and the
    // usage of that month (migrations 0030 and 0033).
    {kEnsureMonthPartitions, "SELECT arbiter_ensure_month_partitions($1::date)"},
    {kEnsureUsagePartition,
     "SELECT arbiter_ensure_history_partition('usage_hourly', $1::date), "
     "arbiter_ensure_history_partition('usage_team_hourly', $1::date)"},
    // Ledger retention. from_at NULL (the legacy partition) reads as INT64_MIN.
    {kSelectLedgerPartitions,
     "SELECT name, " OPT_MICROS(
         "from_at") ", (extract(epoch FROM to_at) * 1000000)::bigint,"
                    " archived_at IS NOT NULL, COALESCE(last_seq, 0), COALESCE(last_hash, ''),"
                    " COALESCE(file, '') FROM ledger_partitions ORDER BY to_at"},
    {kSelectLedgerHeadTime,
     "SELECT (extract(epoch FROM at) * 1000000)::bigint FROM ledger ORDER BY seq DESC LIMIT 1"},
    // $1 from (INT64_MIN: from the beginning), $2 to, $3 after seq, $4
    // limit: the bounds prune to the one partition.
    {kSelectLedgerPartitionPage,
     "SELECT seq, (extract(epoch FROM at) * 1000000)::bigint, actor, action, subject, payload,"
     " prev_hash, hash FROM ledger WHERE (" OPT_TS(1) " IS NULL OR at >= " OPT_TS(
         1) ")"
            " AND at < " TS(2) " AND seq > $3 ORDER BY seq LIMIT $4"},
    // $1 partition, $2 entries, $3 first seq, $4 last seq, $5 last hash
    // (NULL for an empty one), $6 file (migration 0030).
    {kRetireLedgerPartition, "SELECT arbiter_retire_ledger_partition($1, $2, $3, $4, $5, $6)"},
    // History retention (migration 0033): the partitions not archived yet,
    // from_at NULL (a legacy partition) as INT64_MIN.
    {kSelectHistoryPartitions,
     "SELECT parent, partition, " OPT_MICROS(
         "from_at") ", (extract(epoch FROM to_at) * 1000000)::bigint"
                    " FROM history_partition_months ORDER BY to_at, parent, partition"},
    // $1 a table: its columns, in order.
    {kSelectTableColumns,
     "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0"
     " AND NOT attisdropped ORDER BY attnum"},
    // $1 from (INT64_MIN: from the beginning), $2 to: the live requests
    // holding a placement admitted in [$1, $2).
    {kCountLivePlacements,
     "SELECT count(*) FROM placements p JOIN requests_live_partition r ON r.id = p.request_id"
     " WHERE (" OPT_TS(1) " IS NULL OR p.admitted_at >= " OPT_TS(1) ") AND p.admitted_at < " TS(2)},
    // $1 partition, $2 rows, $3 file, $4 the file's SHA-256.
    {kRetireHistoryPartition, "SELECT arbiter_retire_history_partition($1, $2, $3, $4)"},
    // $1 after seq, $2 limit.
    {kSelectCheckpoints,
     "SELECT seq, hash, signature, (extract(epoch FROM at) * 1000000)::bigint"
     " FROM ledger_checkpoints WHERE seq > $1 ORDER BY seq LIMIT $2"},
    {kSelectPlacementsOf,
     "SELECT " ARBITER_PLACEMENT_COLUMNS
     " FROM placements WHERE request_id = ANY($1::bigint[]) ORDER BY request_id, member"},
};

// How one element of a column's array becomes the column's value.
enum class Value {
  kPlain,           // As it is.
  kTextArray,       // An array literal in a text element, cast to text[].
  kIntArray,        // An array literal in a text element, cast to integer[].
  kTime,            // Microseconds since the Unix epoch, to timestamptz.
  kTimeOrNull,      // The same, NULL for INT64_MIN.
  kTimeOrInfinity,  // The same, 'infinity' for INT64_MAX.
};

// One column of a multi-row statement: its name, the type of the array its
// values travel in (one element per row), and how an element becomes a value.
struct Column {
  const char* name;
  const char* array_type;
  Value value = Value::kPlain;
};

// "SELECT <values> FROM unnest($1::t1, ...) AS u(c1, ...)": one row per
// array position. Bigint elements go into integer columns by assignment cast.
std::string UnnestSelect(const std::vector<Column>& columns, size_t first_param = 1) {
  std::vector<std::string> values, params, names;
  for (size_t i = 0; i < columns.size(); ++i) {
    const std::string c = absl::StrCat("u.c", i + 1);
    const std::string micros =
        absl::StrCat("'epoch'::timestamptz + ", c, " * interval '1 microsecond'");
    switch (columns[i].value) {
      case Value::kPlain:
        values.push_back(c);
        break;
      case Value::kTextArray:
        values.push_back(absl::StrCat(c, "::text[]"));
        break;
      case Value::kIntArray:
        values.push_back(absl::StrCat(c, "::integer[]"));
        break;
      case Value::kTime:
        values.push_back(absl::StrCat("(", micros, ")"));
        break;
      case Value::kTimeOrNull:
        values.push_back(absl::StrCat("(CASE WHEN ", c, " = -9223372036854775808 THEN NULL ELSE ",
                                      micros, " END)"));
        break;
      case Value::kTimeOrInfinity:
        values.push_back(absl::StrCat("(CASE WHEN ", c,
                                      " = 9223372036854775807 THEN 'infinity'::timestamptz ELSE ",
                                      micros, " END)"));
        break;
    }
    params.push_back(absl::StrCat("$", first_param + i, "::", columns[i].array_type));
    names.push_back(absl::StrCat("c", i + 1));
  }
  return absl::StrCat("SELECT ", absl::StrJoin(values, ", "), " FROM unnest(",
                      absl::StrJoin(params, ", "), ") AS u(", absl::StrJoin(names, ", "), ")");
}

std::string Names(const std::vector<Column>& columns) {
  return absl::StrJoin(columns, ", ",
                       [](std::string* out, const Column& c) { out->append(c.name); });
}

std::string InsertRows(const char* table, const std::vector<Column>& columns,
                       size_t first_param = 1) {
  return absl::StrCat("INSERT INTO ", table, " (", Names(columns), ") ",
                      UnnestSelect(columns, first_param));
}

// The SET list of an upsert of usage rows into `table`: times and energy
// summed, peaks the highest.
std::string AddUsage(const char* table) {
  std::vector<std::string> sets;
  for (const char* sum :
       {"allocated_milli_seconds", "sampled_milli_seconds", "used_milli_seconds", "energy_mwh"}) {
    sets.push_back(absl::StrCat(sum, " = ", table, ".", sum, " + EXCLUDED.", sum));
  }
  for (const char* peak : {"peak_busy_milli", "peak_memory_mib"}) {
    sets.push_back(absl::StrCat(peak, " = greatest(", table, ".", peak, ", EXCLUDED.", peak, ")"));
  }
  return absl::StrJoin(sets, ", ");
}

// The multi-row statements of a commit (see store/postgres/batch_writer.h).
// Their parameters are arrays in the order of these columns.
std::vector<std::pair<const char*, std::string>> BatchStatements() {
  constexpr const char* B = "bigint[]";
  constexpr const char* T = "text[]";
  constexpr const char* O = "boolean[]";
  const std::vector<Column> request = {{"id", B},
                                       {"idempotency_key", T},
                                       {"body_hash", B},
                                       {"team", T},
                                       {"pool", T},
                                       {"workload_class", T},
                                       {"members", B},
                                       {"whole_gpus", B},
                                       {"fraction_milli", B},
                                       {"fraction_memory_mib", B},
                                       {"cpu_milli", B},
                                       {"memory_mib", B},
                                       {"gpu_models", T, Value::kTextArray},
                                       {"description", T},
                                       {"state", T},
                                       {"reason_code", T},
                                       {"reason", T},
                                       {"created_at", B, Value::kTime},
                                       {"updated_at", B, Value::kTime},
                                       {"mig_profile", T},
                                       {"topology", T},
                                       {"model_parameters", B},
                                       {"model_bytes_per_parameter_milli", B},
                                       {"model_layers", B},
                                       {"model_kv_heads", B},
                                       {"model_head_dim", B},
                                       {"model_kv_bytes_per_element_milli", B},
                                       {"model_token_budget", B},
                                       {"model_overhead_mib", B},
                                       {"gpu_milli_per_member", B},
                                       {"priority", B},
                                       {"preemptible", O},
                                       {"checkpoint_seconds", B},
                                       {"checkpoint_interval_seconds", B},
                                       {"guaranteed", O},
                                       {"start_at", B, Value::kTimeOrNull},
                                       {"duration_seconds", B},
                                       {"admitted_at", B, Value::kTimeOrNull},
                                       {"quota_model", T},
                                       {"preempt_deadline", B, Value::kTimeOrNull},
                                       {"preempted_by", B},
                                       {"holds", T},
                                       {"approvals", T},
                                       {"approvers", T},
                                       {"approval_deadline", B, Value::kTimeOrNull},
                                       {"cost_micros", B},
                                       {"claims", T},
                                       {"run_started_at", B, Value::kTimeOrNull},
                                       {"run_ended_at", B, Value::kTimeOrNull},
                                       {"spot", O},
                                       {"burst_seconds", B},
                                       {"burst_until", B, Value::kTimeOrNull},
                                       {"recurrence", T},
                                       // The partition key (migration 0033).
                                       {"ended_at", B, Value::kTimeOrInfinity}};
  // The columns a decision changes, after the id; typed as in `request`.
  std::vector<Column> request_update;
  for (absl::string_view name :
       {"id", "state", "reason_code", "reason", "updated_at", "admitted_at", "quota_model",
        "preempt_deadline", "preempted_by", "holds", "approvals", "approvers", "approval_deadline",
        "cost_micros", "claims", "run_started_at", "run_ended_at", "burst_until", "ended_at"}) {
    for (const Column& c : request) {
      if (name == c.name) request_update.push_back(c);
    }
  }
  std::vector<std::string> sets;
  for (size_t i = 1; i < request_update.size(); ++i) {
    sets.push_back(absl::StrCat(request_update[i].name, " = v.", request_update[i].name));
  }
  const std::vector<Column> placement = {{"request_id", B},
                                         {"member", B},
                                         {"node_id", B},
                                         {"gpu_indices", T, Value::kIntArray},
                                         {"gpu_milli", B},
                                         {"gpu_memory_mib", B},
                                         {"cpu_milli", B},
                                         {"memory_mib", B},
                                         {"exclusive", O},
                                         {"mig_profile", T},
                                         {"mig_start", B},
                                         {"mig_new_layout", T},
                                         {"mig_layout_cleared", O},
                                         {"admitted_at", B, Value::kTime}};
  const std::vector<Column> layout = {{"node_id", B}, {"gpu_index", B}, {"mig_layout", T}};
  const std::vector<Column> ledger = {
      {"seq", B},     {"at", B, Value::kTime}, {"actor", T},     {"action", T},
      {"subject", T}, {"payload", T},          {"prev_hash", T}, {"hash", T}};
  const std::vector<Column> sample = {
      {"at", B, Value::kTime}, {"node_id", B},     {"gpu_index", B},  {"mig_instance", B},
      {"mig_profile", T},      {"interval_ms", B}, {"util_milli", B}, {"engine_active_milli", B},
      {"fb_used_mib", B},      {"fb_free_mib", B}, {"power_mw", B},   {"pod", T},
      {"pod_namespace", T}};
  const std::vector<Column> usage = {{"hour", B, Value::kTime},
                                     {"request_id", B},
                                     {"member", B},
                                     {"team", T},
                                     {"pool", T},
                                     {"workload_class", T},
                                     {"gpu_model", T},
                                     {"allocated_milli_seconds", B},
                                     {"sampled_milli_seconds", B},
                                     {"used_milli_seconds", B},
                                     {"peak_busy_milli", B},
                                     {"peak_memory_mib", B},
                                     {"energy_mwh", B},
                                     {"computed_at", B, Value::kTime}};
  // usage_team_hourly's: the same but for the member's keys and the time
  // of computing.
  std::vector<Column> team_usage;
  for (const Column& c : usage) {
    const absl::string_view name = c.name;
    if (name != "request_id" && name != "member" && name != "computed_at") team_usage.push_back(c);
  }
  const std::vector<Column> checkpoint = {
      {"seq", B}, {"hash", T}, {"signature", T}, {"at", B, Value::kTime}};
  const std::vector<Column> spend = {{"team", T}, {"month", B, Value::kTime}, {"micros", B}};
  // kWriteDecisions: every row of a commit in one statement, its parts in
  // the order of BatchWriter's parameters. The updates also name their keys
  // with "= ANY(ids)", so that even a plan made while a table was empty
  // reads only the rows of the batch (it otherwise walked the whole primary
  // key once the table had grown). A request updated is live, so its row is
  // in the live partition ("ended_at = 'infinity'" keeps the plan to it,
  // migration 0033); a decision that ends it moves the row to its month's.
  // The statement fails, whole, unless every update found its row
  // (arbiter_expect_updated).
  size_t next = 1;
  auto take = [&next](const std::vector<Column>& columns) {
    const size_t first = next;
    next += columns.size();
    return first;
  };
  const size_t request_at = take(request);
  const size_t update_at = take(request_update);
  const size_t placement_at = take(placement);
  const size_t layout_at = take(layout);
  const size_t ledger_at = take(ledger);
  const size_t checkpoint_at = take(checkpoint);
  const size_t spend_at = take(spend);
  // The last parameter is the writer's leader epoch (0: unfenced); the
  // final SELECT reads `fence`, so that its check always runs.
  const size_t epoch_at = next;
  std::string write_decisions = absl::StrCat(
      "WITH fence AS (SELECT CASE WHEN $", epoch_at, "::bigint = 0 THEN 0 ELSE arbiter_fence($",
      epoch_at, "::bigint) END AS epoch), new_requests AS (",
      InsertRows("requests", request, request_at), "), changed_requests AS (UPDATE requests r SET ",
      absl::StrJoin(sets, ", "), " FROM (", UnnestSelect(request_update, update_at), ") AS v(",
      Names(request_update), ") WHERE r.id = v.id AND r.id = ANY($", update_at,
      "::bigint[]) AND r.ended_at = 'infinity' RETURNING 1), new_placements AS (",
      InsertRows("placements", placement, placement_at),
      " ON CONFLICT (request_id, member, admitted_at) DO NOTHING), changed_layouts AS (UPDATE gpus "
      "g SET "
      "mig_layout = v.mig_layout FROM (",
      UnnestSelect(layout, layout_at), ") AS v(", Names(layout),
      ") WHERE g.node_id = v.node_id AND g.gpu_index = v.gpu_index AND g.node_id = ANY($",
      layout_at, "::bigint[])), new_entries AS (", InsertRows("ledger", ledger, ledger_at),
      "), new_checkpoints AS (", InsertRows("ledger_checkpoints", checkpoint, checkpoint_at),
      "), ended AS (", InsertRows("ended_spend", spend, spend_at),
      " ON CONFLICT (team, month) DO UPDATE SET micros = ended_spend.micros + EXCLUDED.micros)"
      " SELECT epoch, arbiter_expect_updated(cardinality($",
      update_at, "::bigint[]), (SELECT count(*) FROM changed_requests)) FROM fence");
  return {
      {kWriteDecisions, std::move(write_decisions)},
      // A reading already stored (same device and time) is a duplicate.
      // PgStore::InsertSampleBatches COPYs the samples first, and comes to
      // this statement, batch by batch, only when the COPY met a duplicate.
      {kInsertSamples, absl::StrCat(InsertRows("gpu_samples", sample), " ON CONFLICT DO NOTHING")},
      // A slice adds to the rows of the members already rolled up.
      {kAddUsageRows,
       absl::StrCat(InsertRows("usage_hourly", usage),
                    " ON CONFLICT (hour, request_id, member) DO UPDATE SET ",
                    AddUsage("usage_hourly"), ", computed_at = EXCLUDED.computed_at")},
      // And to its teams' rows (migration 0039), by the same sums.
      {kAddTeamUsageRows,
       absl::StrCat(InsertRows("usage_team_hourly", team_usage),
                    " ON CONFLICT (hour, team, pool, workload_class, gpu_model) DO UPDATE SET ",
                    AddUsage("usage_team_hourly"))},
  };
}

}  // namespace

std::string StatementText(const std::string& name) {
  for (const Statement& s : kStatements) {
    if (name == s.name) return s.text;
  }
  return "";
}

void PrepareAll(pqxx::connection& conn) { Prepare(conn, PlanMode::kCustom); }

void PrepareWriter(pqxx::connection& conn) { Prepare(conn, PlanMode::kGeneric); }

void PrepareKeyLookups(pqxx::connection& conn) { Prepare(conn, PlanMode::kGeneric); }

void Prepare(pqxx::connection& conn, PlanMode mode) {
  {
    pqxx::nontransaction tx(conn);
    tx.exec("SET statement_timeout = '30s'");
    tx.exec("SET lock_timeout = '10s'");
    if (mode == PlanMode::kCustom) {
      // Plan each execution for its own arguments ("$1 = '' OR team = $1").
      tx.exec("SET plan_cache_mode = force_custom_plan");
    } else {
      // One plan per statement, made at its first execution, for the
      // multi-row inserts, the writes by key and the foreign-key checks they
      // fire (planning each execution was a quarter of PostgreSQL's time per
      // decision). Every one of them finds its rows by key, so the plans are
      // kept to index scans and nested loops: a generic plan made while a
      // table was small would otherwise keep scanning it whole as it grows
      // (measured: 4,566 to 2,176 decisions/s over four 8-second runs).
      tx.exec("SET plan_cache_mode = force_generic_plan");
      tx.exec("SET enable_seqscan = off");
      tx.exec("SET enable_hashjoin = off");
      tx.exec("SET enable_mergejoin = off");
    }
  }
  for (const Statement& s : kStatements) conn.prepare(s.name, s.text);
  for (const auto& [name, text] : BatchStatements()) conn.prepare(name, text);
}

}  // namespace arbiter::store::sql
