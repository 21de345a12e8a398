#include "store/postgres/pg_rows.h"

#include <climits>
#include <cstdio>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/civil_time.h"

#include "core/status_macros.h"

namespace arbiter::store::rows {
namespace {

// Parses a one-dimensional array field into its element strings.
std::vector<std::string> ArrayElements(const pqxx::field& field) {
  std::vector<std::string> out;
  pqxx::array_parser parser = field.as_array();
  for (;;) {
    auto [juncture, value] = parser.get_next();
    if (juncture == pqxx::array_parser::juncture::done) break;
    if (juncture == pqxx::array_parser::juncture::string_value) out.push_back(std::move(value));
  }
  return out;
}

// "a,b" -> {"a", "b"}; "" -> {}.
std::vector<std::string> SplitList(const std::string& text) {
  if (text.empty()) return {};
  return absl::StrSplit(text, ',');
}

}  // namespace

absl::StatusOr<core::CapacityRequest> RequestFromRow(const pqxx::row& row) {
  core::CapacityRequest r;
  r.id = row[0].as<int64_t>();
  r.spec.idempotency_key = row[1].as<std::string>();
  r.body_hash = static_cast<uint64_t>(row[2].as<int64_t>());
  r.spec.team = row[3].as<std::string>();
  r.spec.pool = row[4].as<std::string>();
  r.spec.workload_class = core::WorkloadClassFromName(row[5].as<std::string>());
  r.spec.members = row[6].as<int32_t>();
  const auto whole = row[7].as<int32_t>();
  const auto mig_profile = row[19].as<std::string>();
  if (whole > 0) {
    r.spec.shape.gpu = whole;
  } else if (!mig_profile.empty()) {
    // The charge as decided; 0 for rows older than migration 0006, which the
    // arbiter re-prices from the catalog when it loads them.
    r.spec.shape.gpu = core::MigShape{mig_profile, row[29].as<int64_t>()};
  } else {
    r.spec.shape.gpu = core::GpuFraction{row[8].as<int64_t>(), row[9].as<int64_t>()};
  }
  r.spec.shape.cpu_milli = row[10].as<int64_t>();
  r.spec.shape.memory_mib = row[11].as<int64_t>();
  r.spec.gpu_models = ArrayElements(row[12]);
  r.spec.description = row[13].as<std::string>();
  r.spec.topology = core::TopologyFromName(row[20].as<std::string>());
  if (row[21].as<int64_t>() > 0) {
    core::ModelProfile m;
    m.parameters = row[21].as<int64_t>();
    m.bytes_per_parameter_milli = row[22].as<int64_t>();
    m.layers = row[23].as<int32_t>();
    m.kv_heads = row[24].as<int32_t>();
    m.head_dim = row[25].as<int32_t>();
    m.kv_bytes_per_element_milli = row[26].as<int64_t>();
    m.token_budget = row[27].as<int64_t>();
    m.overhead_mib = row[28].as<int64_t>();
    r.spec.model_profile = m;
  }
  r.state = core::RequestStateFromName(row[14].as<std::string>());
  r.reason_code = row[15].as<std::string>();
  r.reason = row[16].as<std::string>();
  r.created_at = absl::FromUnixMicros(row[17].as<int64_t>());
  r.updated_at = absl::FromUnixMicros(row[18].as<int64_t>());
  r.spec.priority = row[30].as<int32_t>();
  r.spec.preemptible = row[31].as<bool>();
  r.spec.checkpoint_seconds = row[32].as<int64_t>();
  r.spec.checkpoint_interval_seconds = row[33].as<int64_t>();
  r.spec.guaranteed = row[34].as<bool>();
  r.spec.start_at = FromMicrosOrMin(row[35].as<int64_t>());
  r.spec.duration = absl::Seconds(row[36].as<int64_t>());
  r.admitted_at = FromMicrosOrMin(row[37].as<int64_t>());
  r.quota_model = row[38].as<std::string>();
  r.preempt_deadline = FromMicrosOrMin(row[39].as<int64_t>());
  r.preempted_by = row[40].as<int64_t>();
  absl::StatusOr<std::vector<core::GpuHold>> holds = ParseHolds(row[41].as<std::string>());
  if (!holds.ok()) {
    return absl::InternalError(absl::StrCat("request ", r.id, ": ", holds.status().message()));
  }
  r.holds = std::move(*holds);
  r.approvals = SplitList(row[42].as<std::string>());
  r.approvers = SplitList(row[43].as<std::string>());
  r.approval_deadline = FromMicrosOrMin(row[44].as<int64_t>());
  r.cost_micros = row[45].as<int64_t>();
  absl::StatusOr<std::vector<core::Claim>> claims = ParseClaims(row[46].as<std::string>());
  if (!claims.ok()) {
    return absl::InternalError(absl::StrCat("request ", r.id, ": ", claims.status().message()));
  }
  r.claims = std::move(*claims);
  r.run_started_at = FromMicrosOrMin(row[47].as<int64_t>());
  r.run_ended_at = FromMicrosOrMin(row[48].as<int64_t>());
  r.spec.spot = row[49].as<bool>();
  r.spec.burst_seconds = row[50].as<int64_t>();
  r.burst_until = FromMicrosOrMin(row[51].as<int64_t>());
  if (const std::string recurrence = row[52].as<std::string>(); !recurrence.empty()) {
    absl::StatusOr<core::RecurringWindow> w = core::ParseRecurringWindow(recurrence, "recurrence");
    if (!w.ok())
      return absl::InternalError(absl::StrCat("request ", r.id, ": ", w.status().message()));
    r.spec.recurrence = *std::move(w);
  }
  if (r.state == core::RequestState::kUnspecified ||
      r.spec.workload_class == core::WorkloadClass::kUnspecified) {
    return absl::InternalError(absl::StrCat("request ", r.id, ": unknown state or class"));
  }
  return r;
}

core::Placement PlacementFromRow(const pqxx::row& row, int64_t* request_id) {
  *request_id = row[0].as<int64_t>();
  core::Placement p;
  p.member = row[1].as<int32_t>();
  p.node_id = row[2].as<int64_t>();
  p.gpu_indices = IntArray(row[3]);
  p.gpu_milli = row[4].as<int64_t>();
  p.gpu_memory_mib = row[5].as<int64_t>();
  p.cpu_milli = row[6].as<int64_t>();
  p.memory_mib = row[7].as<int64_t>();
  p.exclusive = row[8].as<bool>();
  p.mig_profile = row[9].as<std::string>();
  p.mig_start = row[10].as<int32_t>();
  (void)core::ParseMigLayout(row[11].as<std::string>(), &p.mig_new_layout);
  p.mig_layout_cleared = row[12].as<bool>();
  return p;
}

void ArrayLiteral::Separate() {
  if (text_.size() > 1) text_ += ',';
}

void ArrayLiteral::Add(int64_t v) {
  Separate();
  absl::StrAppend(&text_, v);
}

void ArrayLiteral::AddBool(bool v) {
  Separate();
  text_ += v ? 't' : 'f';
}

void ArrayLiteral::Add(absl::string_view v) {
  Separate();
  text_ += '"';
  for (char c : v) {
    if (c == '"' || c == '\\') text_ += '\\';
    text_ += c;
  }
  text_ += '"';
}

void CopyText::Separate() {
  if (row_started_) text_ += '\t';
  row_started_ = true;
}

void CopyText::Add(int64_t v) {
  Separate();
  absl::StrAppend(&text_, v);
}

void CopyText::Add(absl::string_view v) {
  Separate();
  for (char c : v) {
    switch (c) {
      case '\\':
        text_ += "\\\\";
        break;
      case '\t':
        text_ += "\\t";
        break;
      case '\n':
        text_ += "\\n";
        break;
      case '\r':
        text_ += "\\r";
        break;
      default:
        text_ += c;
    }
  }
}

void CopyText::Add(absl::Time t) {
  Separate();
  const absl::TimeZone utc = absl::UTCTimeZone();
  const absl::CivilSecond s = absl::ToCivilSecond(t, utc);
  const int64_t micros = absl::ToInt64Microseconds(t - absl::FromCivil(s, utc));
  char buf[40];
  const int n = std::snprintf(buf, sizeof(buf), "%04d-%02d-%02d %02d:%02d:%02d.%06d+00",
                              static_cast<int>(s.year()), s.month(), s.day(), s.hour(), s.minute(),
                              s.second(), static_cast<int>(micros));
  text_.append(buf, static_cast<size_t>(n));
}

void CopyText::EndRow() {
  text_ += '\n';
  row_started_ = false;
}

std::string CopyText::Take() {
  if (!text_.empty() && text_.back() == '\n') text_.pop_back();
  std::string out = std::move(text_);
  text_.clear();
  row_started_ = false;
  return out;
}

std::vector<int32_t> IntArray(const pqxx::field& field) {
  std::vector<int32_t> out;
  for (const std::string& s : ArrayElements(field)) out.push_back(std::stoi(s));
  return out;
}

std::vector<int64_t> BigintArray(const pqxx::field& field) {
  std::vector<int64_t> out;
  for (const std::string& s : ArrayElements(field)) out.push_back(std::stoll(s));
  return out;
}

std::string IntArrayLiteral(const std::vector<int32_t>& values) {
  ArrayLiteral a;
  for (int32_t v : values) a.Add(int64_t{v});
  return a.Done();
}

std::string BigintArrayLiteral(const std::vector<int64_t>& values) {
  ArrayLiteral a;
  for (int64_t v : values) a.Add(v);
  return a.Done();
}

std::string TextArrayLiteral(const std::vector<std::string>& values) {
  ArrayLiteral a;
  for (const std::string& v : values) a.Add(v);
  return a.Done();
}

int64_t ToMicros(absl::Time t) { return absl::ToUnixMicros(t); }

int64_t ToMicrosOrMin(absl::Time t) {
  return t == absl::InfinitePast() ? INT64_MIN : absl::ToUnixMicros(t);
}

absl::Time FromMicrosOrMin(int64_t micros) {
  return micros == INT64_MIN ? absl::InfinitePast() : absl::FromUnixMicros(micros);
}

std::string FormatHolds(const std::vector<core::GpuHold>& holds) {
  std::string out;
  for (const core::GpuHold& h : holds) {
    if (!out.empty()) out += ',';
    absl::StrAppend(&out, h.node_id, ":", h.gpu_index);
    // Host capacity only where held: older rows read as they did.
    if (h.cpu_milli > 0 || h.memory_mib > 0)
      absl::StrAppend(&out, ":", h.cpu_milli, ":", h.memory_mib);
  }
  return out;
}

std::string FormatClaims(const std::vector<core::Claim>& claims) {
  std::string out;
  for (const core::Claim& c : claims) {
    if (!out.empty()) out += ',';
    absl::StrAppend(&out, c.member, ":", absl::ToUnixMicros(c.claimed_at), ":", c.holder);
  }
  return out;
}

absl::StatusOr<std::vector<core::Claim>> ParseClaims(const std::string& text) {
  std::vector<core::Claim> out;
  if (text.empty()) return out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, absl::MaxSplits(':', 2));
    core::Claim c;
    int64_t micros = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &c.member) ||
        !absl::SimpleAtoi(parts[1], &micros) || parts[2].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("bad claim '", item, "'"));
    }
    c.holder = std::string(parts[2]);
    c.claimed_at = absl::FromUnixMicros(micros);
    c.renewed_at = c.claimed_at;  // Renewals are not stored (core::GraceLeases).
    out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<std::vector<core::GpuHold>> ParseHolds(const std::string& text) {
  std::vector<core::GpuHold> out;
  if (text.empty()) return out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    // node:gpu, or node:gpu:cpu_milli:memory_mib with the host part.
    const std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    core::GpuHold h;
    const bool parsed =
        (parts.size() == 2 || parts.size() == 4) && absl::SimpleAtoi(parts[0], &h.node_id) &&
        absl::SimpleAtoi(parts[1], &h.gpu_index) &&
        (parts.size() == 2 ||
         (absl::SimpleAtoi(parts[2], &h.cpu_milli) && absl::SimpleAtoi(parts[3], &h.memory_mib)));
    if (!parsed) return absl::InvalidArgumentError(absl::StrCat("bad held GPU '", item, "'"));
    out.push_back(h);
  }
  return out;
}

std::string ClassesLiteral(const std::vector<core::WorkloadClass>& classes) {
  std::vector<std::string> names;
  for (core::WorkloadClass c : classes) names.emplace_back(core::WorkloadClassName(c));
  return TextArrayLiteral(names);
}

std::string ClassRulesLiteral(const std::vector<core::PoolClassRule>& rules) {
  std::vector<std::string> items;
  for (const core::PoolClassRule& r : rules) {
    std::string item = absl::StrCat(core::WorkloadClassName(r.workload_class), "=",
                                    core::ClassAdmissionName(r.admission));
    if (r.window.has_value()) absl::StrAppend(&item, "@", core::FormatRecurringWindow(*r.window));
    items.push_back(std::move(item));
  }
  return TextArrayLiteral(items);
}

std::string HeadroomLiteral(const std::vector<core::Headroom>& headroom) {
  std::vector<std::string> items;
  for (const core::Headroom& h : headroom) items.push_back(absl::StrCat(h.gpu_model, "=", h.milli));
  return TextArrayLiteral(items);
}

absl::StatusOr<std::vector<core::PoolClassRule>> ClassRulesFromField(const pqxx::field& field) {
  std::vector<core::PoolClassRule> out;
  for (const std::string& item : ArrayElements(field)) {
    // "class=admission" or "class=admission@window".
    const std::pair<std::string, std::string> rule_window =
        absl::StrSplit(item, absl::MaxSplits('@', 1));
    const std::pair<std::string, std::string> parts = absl::StrSplit(rule_window.first, '=');
    core::PoolClassRule rule{core::WorkloadClassFromName(parts.first),
                             core::ClassAdmissionFromName(parts.second)};
    if (!rule_window.second.empty()) {
      ARBITER_ASSIGN_OR_RETURN(rule.window,
                               core::ParseRecurringWindow(rule_window.second, "pools.class_rules"));
    }
    out.push_back(std::move(rule));
  }
  return out;
}

std::vector<core::WorkloadClass> ClassesFromField(const pqxx::field& field) {
  std::vector<core::WorkloadClass> out;
  for (const std::string& name : ArrayElements(field)) {
    out.push_back(core::WorkloadClassFromName(name));
  }
  return out;
}

absl::StatusOr<core::Pool> PoolFromRow(const pqxx::row& row) {
  core::Pool p;
  p.name = row[0].as<std::string>();
  p.latency_class = core::LatencyClassFromName(row[1].as<std::string>());
  p.description = row[2].as<std::string>();
  p.lends_to = ClassesFromField(row[3]);
  p.reclaim_grace_seconds = row[4].as<int64_t>();
  p.queueing = core::QueueingPolicyFromName(row[5].as<std::string>());
  p.starvation_limit_seconds = row[6].as<int64_t>();
  p.claim_deadline_seconds = row[7].as<int64_t>();
  p.lease_seconds = row[8].as<int64_t>();
  ARBITER_ASSIGN_OR_RETURN(p.class_rules, ClassRulesFromField(row[9]));
  if (const int64_t spot_grace = row[10].as<int64_t>(); spot_grace >= 0) {
    p.spot_grace_seconds = spot_grace;
  }
  for (const std::string& item : ArrayElements(row[11])) {
    const std::pair<std::string, std::string> parts = absl::StrSplit(item, '=');
    core::Headroom h{parts.first, 0};
    if (!absl::SimpleAtoi(parts.second, &h.milli)) h.milli = 0;
    p.headroom.push_back(std::move(h));
  }
  p.max_burst_seconds = row[12].as<int64_t>();
  p.proactive_reclaim = row[13].as<bool>();
  p.cold_start_seconds = row[14].as<int64_t>();
  return p;
}

core::Quota QuotaFromRow(const pqxx::row& row) {
  core::Quota q;
  q.team = row[0].as<std::string>();
  q.pool = row[1].as<std::string>();
  q.nominal_milli = row[2].as<int64_t>();
  q.gpu_model = row[3].as<std::string>();
  q.borrowing_limit_milli = row[4].as<int64_t>();
  q.lending_limit_milli = row[5].as<int64_t>();
  q.cohort_lending_limit_milli = row[6].as<int64_t>();
  q.cohort_borrowing_limit_milli = row[7].as<int64_t>();
  return q;
}

ledger::Entry LedgerEntryFromRow(const pqxx::row& row) {
  ledger::Entry e;
  e.seq = row[0].as<int64_t>();
  e.at = absl::FromUnixMicros(row[1].as<int64_t>());
  e.actor = row[2].as<std::string>();
  e.action = row[3].as<std::string>();
  e.subject = row[4].as<std::string>();
  e.payload = row[5].as<std::string>();
  e.prev_hash = row[6].as<std::string>();
  e.hash = row[7].as<std::string>();
  return e;
}

}  // namespace arbiter::store::rows
