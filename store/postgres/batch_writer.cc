#include "store/postgres/batch_writer.h"

#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "core/budget.h"
#include "store/postgres/pg_rows.h"
#include "store/postgres/statements.h"

namespace arbiter::store {

using rows::ArrayLiteral;

namespace {

// The partition key of a request row (migration 0033): when it ended, or
// INT64_MAX ('infinity') while it is live.
int64_t EndedAtMicros(const core::CapacityRequest& r) {
  return core::IsFinal(r.state) ? rows::ToMicros(r.updated_at)
                                : std::numeric_limits<int64_t>::max();
}

}  // namespace

absl::Time PlacementTime(const core::CapacityRequest& r) {
  return r.admitted_at != absl::InfinitePast() ? r.admitted_at : r.created_at;
}

void BatchWriter::Add(const core::RequestWrite& write) {
  const core::CapacityRequest& r = write.request;
  auto [it, first] = requests_.try_emplace(r.id);
  if (first) order_.push_back(r.id);
  it->second.last = &r;
  it->second.is_new |= write.is_new;
  // Placements are written when a request is admitted (again, with the same
  // placements, if a preemption of it is withdrawn; the insert skips those).
  if (r.state != core::RequestState::kAdmitted) return;
  for (const core::Placement& p : r.placements) {
    placements_.try_emplace({r.id, p.member}, PlacementRow{&p, PlacementTime(r)});
    // The GPU's current layout follows every decision that changes it.
    if (p.mig_layout_cleared || !p.mig_new_layout.empty()) {
      for (int32_t g : p.gpu_indices) {
        layouts_[{p.node_id, g}] = core::FormatMigLayout(p.mig_new_layout);
      }
    }
  }
}

void BatchWriter::Add(const ledger::Entry& entry) { ledger_.push_back(entry); }

void BatchWriter::AddCheckpoint(int64_t seq, const std::string& hash, const std::string& signature,
                                absl::Time at) {
  checkpoints_.push_back(Checkpoint{seq, hash, signature, at});
}

void BatchWriter::Flush(pqxx::transaction_base& tx, int64_t fencing_epoch) {
  std::vector<std::string> params;
  params.reserve(kParams);
  WriteRequests(params);
  WritePlacements(params);
  WriteLedger(params);
  WriteEndedSpend(params);
  params.push_back(std::to_string(fencing_epoch));
  if (params.size() != kParams) {
    throw std::logic_error("BatchWriter: parameter count does not match write_decisions");
  }
  tx.exec_prepared(sql::kWriteDecisions, pqxx::prepare::make_dynamic_params(params));
  order_.clear();
  requests_.clear();
  placements_.clear();
  layouts_.clear();
  ledger_.clear();
  checkpoints_.clear();
}

void BatchWriter::WriteRequests(std::vector<std::string>& params) const {
  // Inserts: 54 columns (statements.cc: the request columns), one array each.
  std::vector<ArrayLiteral> ins(54);
  // Updates: 18 columns after the id.
  std::vector<ArrayLiteral> upd(19);
  for (int64_t id : order_) {
    const Request& w = requests_.at(id);
    const core::CapacityRequest& r = *w.last;
    const std::string state(core::RequestStateName(r.state));
    if (!w.is_new) {
      size_t c = 0;
      upd[c++].Add(r.id);
      upd[c++].Add(state);
      upd[c++].Add(r.reason_code);
      upd[c++].Add(r.reason);
      upd[c++].Add(rows::ToMicros(r.updated_at));
      upd[c++].Add(rows::ToMicrosOrMin(r.admitted_at));
      upd[c++].Add(r.quota_model);
      upd[c++].Add(rows::ToMicrosOrMin(r.preempt_deadline));
      upd[c++].Add(r.preempted_by);
      upd[c++].Add(rows::FormatHolds(r.holds));
      upd[c++].Add(absl::StrJoin(r.approvals, ","));
      upd[c++].Add(absl::StrJoin(r.approvers, ","));
      upd[c++].Add(rows::ToMicrosOrMin(r.approval_deadline));
      upd[c++].Add(r.cost_micros);
      upd[c++].Add(rows::FormatClaims(r.claims));
      upd[c++].Add(rows::ToMicrosOrMin(r.run_started_at));
      upd[c++].Add(rows::ToMicrosOrMin(r.run_ended_at));
      upd[c++].Add(rows::ToMicrosOrMin(r.burst_until));
      upd[c++].Add(EndedAtMicros(r));
      continue;
    }
    const core::MemberShape& shape = r.spec.shape;
    const core::ModelProfile m = r.spec.model_profile.value_or(core::ModelProfile());
    size_t c = 0;
    ins[c++].Add(r.id);
    ins[c++].Add(r.spec.idempotency_key);
    ins[c++].Add(static_cast<int64_t>(r.body_hash));
    ins[c++].Add(r.spec.team);
    ins[c++].Add(r.spec.pool);
    ins[c++].Add(core::WorkloadClassName(r.spec.workload_class));
    ins[c++].Add(int64_t{r.spec.members});
    ins[c++].Add(int64_t{shape.is_whole() ? shape.whole_gpus() : 0});
    ins[c++].Add(shape.is_fraction() ? shape.fraction().gpu_milli : int64_t{0});
    ins[c++].Add(shape.is_fraction() ? shape.fraction().memory_mib : int64_t{0});
    ins[c++].Add(shape.cpu_milli);
    ins[c++].Add(shape.memory_mib);
    ins[c++].Add(rows::TextArrayLiteral(r.spec.gpu_models));
    ins[c++].Add(r.spec.description);
    ins[c++].Add(state);
    ins[c++].Add(r.reason_code);
    ins[c++].Add(r.reason);
    ins[c++].Add(rows::ToMicros(r.created_at));
    ins[c++].Add(rows::ToMicros(r.updated_at));
    ins[c++].Add(shape.is_mig() ? shape.mig().profile : std::string());
    ins[c++].Add(core::TopologyName(r.spec.topology));
    ins[c++].Add(m.parameters);
    ins[c++].Add(m.bytes_per_parameter_milli);
    ins[c++].Add(int64_t{m.layers});
    ins[c++].Add(int64_t{m.kv_heads});
    ins[c++].Add(int64_t{m.head_dim});
    ins[c++].Add(m.kv_bytes_per_element_milli);
    ins[c++].Add(m.token_budget);
    ins[c++].Add(m.overhead_mib);
    ins[c++].Add(shape.gpu_milli());
    ins[c++].Add(int64_t{r.spec.priority});
    ins[c++].AddBool(r.spec.preemptible);
    ins[c++].Add(r.spec.checkpoint_seconds);
    ins[c++].Add(r.spec.checkpoint_interval_seconds);
    ins[c++].AddBool(r.spec.guaranteed);
    ins[c++].Add(rows::ToMicrosOrMin(r.spec.start_at));
    ins[c++].Add(absl::ToInt64Seconds(r.spec.duration));
    ins[c++].Add(rows::ToMicrosOrMin(r.admitted_at));
    ins[c++].Add(r.quota_model);
    ins[c++].Add(rows::ToMicrosOrMin(r.preempt_deadline));
    ins[c++].Add(r.preempted_by);
    ins[c++].Add(rows::FormatHolds(r.holds));
    ins[c++].Add(absl::StrJoin(r.approvals, ","));
    ins[c++].Add(absl::StrJoin(r.approvers, ","));
    ins[c++].Add(rows::ToMicrosOrMin(r.approval_deadline));
    ins[c++].Add(r.cost_micros);
    ins[c++].Add(rows::FormatClaims(r.claims));
    ins[c++].Add(rows::ToMicrosOrMin(r.run_started_at));
    ins[c++].Add(rows::ToMicrosOrMin(r.run_ended_at));
    ins[c++].AddBool(r.spec.spot);
    ins[c++].Add(r.spec.burst_seconds);
    ins[c++].Add(rows::ToMicrosOrMin(r.burst_until));
    ins[c++].Add(r.spec.recurrence.has_value() ? core::FormatRecurringWindow(*r.spec.recurrence)
                                               : std::string());
    ins[c++].Add(EndedAtMicros(r));
  }
  for (const ArrayLiteral& a : ins) params.push_back(a.Done());
  for (const ArrayLiteral& a : upd) params.push_back(a.Done());
}

void BatchWriter::WritePlacements(std::vector<std::string>& params) const {
  std::vector<ArrayLiteral> col(14);
  for (const auto& [key, row] : placements_) {
    const core::Placement* p = row.placement;
    size_t c = 0;
    col[c++].Add(key.first);
    col[c++].Add(int64_t{p->member});
    col[c++].Add(p->node_id);
    col[c++].Add(rows::IntArrayLiteral(p->gpu_indices));
    col[c++].Add(p->gpu_milli);
    col[c++].Add(p->gpu_memory_mib);
    col[c++].Add(p->cpu_milli);
    col[c++].Add(p->memory_mib);
    col[c++].AddBool(p->exclusive);
    col[c++].Add(p->mig_profile);
    col[c++].Add(int64_t{p->mig_start});
    col[c++].Add(core::FormatMigLayout(p->mig_new_layout));
    col[c++].AddBool(p->mig_layout_cleared);
    col[c++].Add(rows::ToMicros(row.admitted_at));
  }
  for (const ArrayLiteral& a : col) params.push_back(a.Done());
  std::vector<ArrayLiteral> layout(3);
  for (const auto& [gpu, text] : layouts_) {
    layout[0].Add(gpu.first);
    layout[1].Add(int64_t{gpu.second});
    layout[2].Add(text);
  }
  for (const ArrayLiteral& a : layout) params.push_back(a.Done());
}

void BatchWriter::WriteLedger(std::vector<std::string>& params) const {
  std::vector<ArrayLiteral> col(8);
  for (const ledger::Entry& e : ledger_) {
    col[0].Add(e.seq);
    col[1].Add(rows::ToMicros(e.at));
    col[2].Add(e.actor);
    col[3].Add(e.action);
    col[4].Add(e.subject);
    col[5].Add(e.payload);
    col[6].Add(e.prev_hash);
    col[7].Add(e.hash);
  }
  for (const ArrayLiteral& a : col) params.push_back(a.Done());
  std::vector<ArrayLiteral> checkpoint(4);
  for (const Checkpoint& c : checkpoints_) {
    checkpoint[0].Add(c.seq);
    checkpoint[1].Add(c.hash);
    checkpoint[2].Add(c.signature);
    checkpoint[3].Add(rows::ToMicros(c.at));
  }
  for (const ArrayLiteral& a : checkpoint) params.push_back(a.Done());
}

void BatchWriter::WriteEndedSpend(std::vector<std::string>& params) const {
  std::map<std::pair<std::string, absl::Time>, int64_t> spend;
  for (int64_t id : order_) {
    const core::CapacityRequest& r = *requests_.at(id).last;
    if (!core::IsFinal(r.state) || r.cost_micros == 0 || r.admitted_at == absl::InfinitePast()) {
      continue;
    }
    spend[{r.spec.team, core::MonthStart(r.admitted_at)}] += r.cost_micros;
  }
  std::vector<ArrayLiteral> col(3);
  for (const auto& [team_month, micros] : spend) {
    col[0].Add(team_month.first);
    col[1].Add(rows::ToMicros(team_month.second));
    col[2].Add(micros);
  }
  for (const ArrayLiteral& a : col) params.push_back(a.Done());
}

}  // namespace arbiter::store
