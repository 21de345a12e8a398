#include "store/postgres/statements.h"

#include <pqxx/pqxx>

namespace arbiter::store::sql {
namespace {

// Timestamps travel as integer microseconds since the Unix epoch.
#define TS(n) "('epoch'::timestamptz + $" #n "::bigint * interval '1 microsecond')"
// The same, NULL for INT64_MIN (an unset time).
#define TSN(n) "(CASE WHEN $" #n "::bigint = -9223372036854775808 THEN NULL ELSE " TS(n) " END)"

struct Statement {
  const char* name;
  const char* text;
};

constexpr Statement kStatements[] = {
    {kInsertCluster, "INSERT INTO clusters (name, description) VALUES ($1, $2)"},
    {kInsertPool,
     "INSERT INTO pools (name, latency_class, description, lends_to, reclaim_grace_seconds) "
     "VALUES ($1, $2, $3, $4::text[], $5)"},
    {kInsertNode,
     "INSERT INTO nodes (id, cluster, name, pool, topology_domain, cpu_milli, memory_mib) "
     "VALUES ($1, $2, $3, $4, $5, $6, $7)"},
    {kInsertGpu,
     "INSERT INTO gpus (node_id, gpu_index, model, mig_placements) VALUES ($1, $2, $3, $4)"},
    {kInsertTeam, "INSERT INTO teams (name, parent, weight_milli) VALUES ($1, NULLIF($2, ''), $3)"},
    {kUpsertQuota,
     "INSERT INTO quotas (team, pool, nominal_milli, gpu_model, borrowing_limit_milli, "
     "lending_limit_milli) VALUES ($1, $2, $3, $4, $5, $6) "
     "ON CONFLICT (team, pool, gpu_model) DO UPDATE SET nominal_milli = EXCLUDED.nominal_milli, "
     "borrowing_limit_milli = EXCLUDED.borrowing_limit_milli, "
     "lending_limit_milli = EXCLUDED.lending_limit_milli, updated_at = now()"},
    // clang-format off
    {kInsertRequest,
     "INSERT INTO requests (id, idempotency_key, body_hash, team, pool, workload_class, members, "
     "whole_gpus, fraction_milli, fraction_memory_mib, cpu_milli, memory_mib, gpu_models, "
     "description, state, reason_code, reason, created_at, updated_at, mig_profile, topology, "
     "model_parameters, model_bytes_per_parameter_milli, model_layers, model_kv_heads, "
     "model_head_dim, model_kv_bytes_per_element_milli, model_token_budget, model_overhead_mib, "
     "gpu_milli_per_member, priority, preemptible, checkpoint_seconds, "
     "checkpoint_interval_seconds, guaranteed, start_at, duration_seconds, admitted_at, "
     "quota_model, preempt_deadline, preempted_by, holds, approvals, approvers, "
     "approval_deadline, cost_micros) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, "
     "$13::text[], $14, $15, $16, $17, " TS(18) ", " TS(19) ", $20, $21, $22, $23, $24, $25, "
     "$26, $27, $28, $29, $30, $31, $32, $33, $34, $35, " TSN(36) ", $37, " TSN(38) ", $39, "
     TSN(40) ", $41, $42, $43, $44, " TSN(45) ", $46)"},
    {kUpdateRequest,
     "UPDATE requests SET state = $2, reason_code = $3, reason = $4, updated_at = " TS(5)
     ", admitted_at = " TSN(6) ", quota_model = $7, preempt_deadline = " TSN(8)
     ", preempted_by = $9, holds = $10, approvals = $11, approvers = $12,"
     " approval_deadline = " TSN(13) ", cost_micros = $14 WHERE id = $1"},
    // clang-format on
    {kInsertPlacement,
     "INSERT INTO placements (" ARBITER_PLACEMENT_COLUMNS
     ") VALUES ($1, $2, $3, $4::integer[], $5, $6, $7, $8, $9, $10, $11, $12, $13)"
     // A withdrawn preemption makes a request admitted again, with the same
     // placements.
     " ON CONFLICT (request_id, member) DO NOTHING"},
    {kUpdateGpuLayout, "UPDATE gpus SET mig_layout = $3 WHERE node_id = $1 AND gpu_index = $2"},
    {kSelectGpuModels,
     "SELECT name, memory_mib, sm_count, tdp_watts, mig_capable FROM gpu_models ORDER BY name"},
    {kSelectClusters, "SELECT name, description FROM clusters ORDER BY name"},
    {kSelectPools,
     "SELECT name, latency_class, description, lends_to, reclaim_grace_seconds FROM pools "
     "ORDER BY name"},
    // $1 cluster, $2 pool ('' = any).
    {kSelectNodes,
     "SELECT id, cluster, name, pool, topology_domain, cpu_milli, memory_mib FROM nodes "
     "WHERE ($1 = '' OR cluster = $1) AND ($2 = '' OR pool = $2) ORDER BY cluster, name"},
    {kSelectGpus,
     "SELECT g.node_id, g.gpu_index, g.model, g.mig_layout, g.mig_placements FROM gpus g "
     "JOIN nodes n ON n.id = g.node_id "
     "WHERE ($1 = '' OR n.cluster = $1) AND ($2 = '' OR n.pool = $2) "
     "ORDER BY g.node_id, g.gpu_index"},
    // Parents before children, so that the cohort tree loads in one pass.
    {kSelectTeams,
     "WITH RECURSIVE tree AS ("
     " SELECT name, parent, weight_milli, 0 AS depth FROM teams WHERE parent IS NULL"
     " UNION ALL"
     " SELECT t.name, t.parent, t.weight_milli, tree.depth + 1 FROM teams t"
     " JOIN tree ON t.parent = tree.name)"
     " SELECT name, COALESCE(parent, ''), weight_milli FROM tree ORDER BY depth, name"},
    {kSelectQuotas,
     "SELECT team, pool, nominal_milli, gpu_model, borrowing_limit_milli, lending_limit_milli"
     " FROM quotas ORDER BY team, pool, gpu_model"},
    {kSelectQuotaUsage,
     "SELECT q.team, q.pool, q.nominal_milli, q.gpu_model, q.borrowing_limit_milli,"
     " q.lending_limit_milli, COALESCE(sum(r.members::bigint * r.gpu_milli_per_member), 0)::bigint"
     " FROM quotas q LEFT JOIN requests r ON r.team = q.team AND r.pool = q.pool"
     " AND r.quota_model = q.gpu_model AND r.state IN ('admitted', 'preempting')"
     " WHERE ($1 = '' OR q.team = $1)"
     " GROUP BY q.team, q.pool, q.gpu_model ORDER BY q.team, q.pool, q.gpu_model"},
    {kSelectLiveRequests,
     "SELECT " ARBITER_REQUEST_COLUMNS " FROM requests"
     " WHERE state IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval')"
     " ORDER BY id"},
    {kSelectFinishedKeys,
     "SELECT id, idempotency_key, body_hash, state, team, cost_micros, " ARBITER_MICROS_OR_MIN(
         "admitted_at") " FROM requests"
                        " WHERE state NOT IN ('admitted', 'queued', 'preempting', 'reserved', "
                        "'pending_approval')"
                        " ORDER BY id"},
    {kSelectLivePlacements,
     "SELECT p.request_id, p.member, p.node_id, p.gpu_indices, p.gpu_milli, p.gpu_memory_mib,"
     " p.cpu_milli, p.memory_mib, p.exclusive, p.mig_profile, p.mig_start, p.mig_new_layout,"
     " p.mig_layout_cleared FROM placements p"
     " JOIN requests r ON r.id = p.request_id WHERE r.state IN ('admitted', 'preempting')"
     " ORDER BY p.request_id, p.member"},
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
    {kInsertLedger,
     "INSERT INTO ledger (seq, at, actor, action, subject, payload, prev_hash, hash)"
     " VALUES ($1, " TS(2) ", $3, $4, $5, $6, $7, $8)"},
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
     "INSERT INTO prices (gpu_model, latency_class, micros_per_gpu_hour, effective_from)"
     " VALUES ($1, $2, $3, " TS(4) ")"},
    {kSelectPrices,
     "SELECT gpu_model, latency_class, micros_per_gpu_hour,"
     " (extract(epoch FROM effective_from) * 1000000)::bigint FROM prices"
     " ORDER BY gpu_model, latency_class, effective_from"},
    {kUpsertBudget,
     "INSERT INTO budgets (team, soft_limit_micros, hard_limit_micros, over) VALUES ($1, $2, $3, "
     "$4)"
     " ON CONFLICT (team) DO UPDATE SET soft_limit_micros = EXCLUDED.soft_limit_micros,"
     " hard_limit_micros = EXCLUDED.hard_limit_micros, over = EXCLUDED.over, updated_at = now()"},
    {kSelectBudgets,
     "SELECT team, soft_limit_micros, hard_limit_micros, over FROM budgets ORDER BY team"},
    // $1, $2: the month's bounds in microseconds.
    {kSelectSpend,
     "SELECT team, COALESCE(sum(cost_micros), 0)::bigint FROM requests"
     " WHERE admitted_at >= " TS(1) " AND admitted_at < " TS(2) " GROUP BY team"},
    {kUpsertDelegation,
     "INSERT INTO delegations (from_principal, to_principal, expires_at) VALUES ($1, $2, " TS(
         3) ") ON CONFLICT (from_principal, to_principal) DO UPDATE SET expires_at = "
            "EXCLUDED.expires_at"},
    {kDeleteDelegation, "DELETE FROM delegations WHERE from_principal = $1 AND to_principal = $2"},
    {kSelectDelegations,
     "SELECT from_principal, to_principal, (extract(epoch FROM expires_at) * 1000000)::bigint"
     " FROM delegations ORDER BY from_principal, to_principal"},
    {kSelectLedgerHead, "SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1"},
    // $1 after seq, $2 limit, $3 subject, $4 actor, $5 action ('' = any).
    {kSelectLedger,
     "SELECT seq, (extract(epoch FROM at) * 1000000)::bigint, actor, action, subject, payload,"
     " prev_hash, hash FROM ledger WHERE seq > $1 AND ($3 = '' OR subject = $3)"
     " AND ($4 = '' OR actor = $4) AND ($5 = '' OR action = $5) ORDER BY seq LIMIT $2"},
    {kInsertCheckpoint,
     "INSERT INTO ledger_checkpoints (seq, hash, signature, at) VALUES ($1, $2, $3, " TS(4) ")"},
    {kSelectLastCheckpoint, "SELECT seq FROM ledger_checkpoints ORDER BY seq DESC LIMIT 1"},
    {kSelectCheckpoints,
     "SELECT seq, hash, signature, (extract(epoch FROM at) * 1000000)::bigint"
     " FROM ledger_checkpoints ORDER BY seq"},
    {kSelectPlacementsOf,
     "SELECT " ARBITER_PLACEMENT_COLUMNS
     " FROM placements WHERE request_id = ANY($1::bigint[]) ORDER BY request_id, member"},
};

}  // namespace

void PrepareAll(pqxx::connection& conn) {
  {
    pqxx::nontransaction tx(conn);
    tx.exec("SET statement_timeout = '30s'");
    tx.exec("SET lock_timeout = '10s'");
  }
  for (const Statement& s : kStatements) conn.prepare(s.name, s.text);
}

}  // namespace arbiter::store::sql
