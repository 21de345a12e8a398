// PgStore: telemetry samples and usage rollups.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include <pqxx/pqxx>
#include <pqxx/tablewriter>

#include "core/status_macros.h"
#include "store/postgres/pg_rows.h"
#include "store/postgres/pg_store.h"
#include "store/postgres/statements.h"

namespace arbiter::store {
namespace {

// "YYYY-MM-DD" of the UTC day of `t`.
std::string DayOf(absl::Time t) {
  return absl::FormatCivilTime(absl::ToCivilDay(t, absl::UTCTimeZone()));
}

// The columns of gpu_samples that a sample fills, in the order
// ForEachSampleField hands their values over.
const std::vector<std::string>& SampleColumnNames() {
  static const auto* columns = new std::vector<std::string>{
      "at",          "node_id",    "gpu_index",           "mig_instance", "mig_profile",
      "interval_ms", "util_milli", "engine_active_milli", "fb_used_mib",  "fb_free_mib",
      "power_mw",    "pod",        "pod_namespace"};
  return *columns;
}

// Calls `field` with each value of `s`, in SampleColumnNames' order: the
// time as absl::Time, numbers as int64_t, text as absl::string_view.
template <typename Field>
void ForEachSampleField(const core::GpuSample& s, Field&& field) {
  field(s.at);
  field(s.node_id);
  field(int64_t{s.gpu_index});
  field(int64_t{s.mig_instance});
  field(absl::string_view(s.mig_profile));
  field(absl::ToInt64Milliseconds(s.interval));
  field(int64_t{s.util_milli});
  field(int64_t{s.engine_active_milli});
  field(s.fb_used_mib);
  field(s.fb_free_mib);
  field(s.power_mw);
  field(absl::string_view(s.pod));
  field(absl::string_view(s.pod_namespace));
}

// The columns of gpu_samples as array parameters (kInsertSamples), filled
// batch by batch; the time as microseconds.
class SampleColumns {
 public:
  void Add(const std::vector<core::GpuSample>& samples) {
    for (const core::GpuSample& s : samples) {
      size_t i = 0;
      ForEachSampleField(s, [&](auto value) {
        if constexpr (std::is_same_v<decltype(value), absl::Time>) {
          cols_[i++].Add(rows::ToMicros(value));
        } else {
          cols_[i++].Add(value);
        }
      });
    }
  }

  pqxx::result Exec(pqxx::transaction_base& tx, const char* statement) {
    return tx.exec_prepared(statement, cols_[0].Done(), cols_[1].Done(), cols_[2].Done(),
                            cols_[3].Done(), cols_[4].Done(), cols_[5].Done(), cols_[6].Done(),
                            cols_[7].Done(), cols_[8].Done(), cols_[9].Done(), cols_[10].Done(),
                            cols_[11].Done(), cols_[12].Done());
  }

 private:
  rows::ArrayLiteral cols_[13];
};

// Streams every sample of `batches` into gpu_samples with COPY FROM STDIN:
// the data travels in COPY's own escaped format, never as SQL text. Throws
// what pqxx throws; pqxx::unique_violation when a sample is already stored.
void CopySamples(pqxx::work& tx, absl::Span<const std::vector<core::GpuSample>> batches) {
  // The chunk handed to libpq at once; rows need not align with messages.
  constexpr size_t kChunkBytes = 256 << 10;
  const std::vector<std::string>& columns = SampleColumnNames();
  // pqxx 6.4's stream_to offers no raw line; tablewriter does, deprecated.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  pqxx::tablewriter copy(tx, "gpu_samples", columns.begin(), columns.end());
#pragma GCC diagnostic pop
  rows::CopyText text;
  for (const std::vector<core::GpuSample>& batch : batches) {
    for (const core::GpuSample& s : batch) {
      ForEachSampleField(s, [&text](auto value) { text.Add(value); });
      text.EndRow();
      if (text.size() >= kChunkBytes) copy.write_raw_line(text.Take());
    }
  }
  if (text.size() > 0) copy.write_raw_line(text.Take());
  copy.complete();
}

core::GpuSample SampleFromRow(const pqxx::row& row) {
  rows::FieldCursor f(row);
  core::GpuSample s;
  s.at = absl::FromUnixMicros(f.Next<int64_t>());
  s.node_id = f.Next<int64_t>();
  s.gpu_index = f.Next<int32_t>();
  s.mig_instance = f.Next<int32_t>();
  s.mig_profile = f.Next<std::string>();
  s.interval = absl::Milliseconds(f.Next<int64_t>());
  s.util_milli = f.Next<int32_t>();
  s.engine_active_milli = f.Next<int32_t>();
  s.fb_used_mib = f.Next<int64_t>();
  s.fb_free_mib = f.Next<int64_t>();
  s.power_mw = f.Next<int64_t>();
  s.pod = f.Next<std::string>();
  s.pod_namespace = f.Next<std::string>();
  return s;
}

core::HeldMember HeldMemberFromRow(const pqxx::row& row) {
  core::HeldMember m;
  m.request_id = row[0].as<int64_t>();
  m.member = row[1].as<int32_t>();
  m.team = row[2].as<std::string>();
  m.pool = row[3].as<std::string>();
  m.workload_class = core::WorkloadClassFromName(row[4].as<std::string>());
  m.gpu_model = row[5].as<std::string>();
  m.node_id = row[6].as<int64_t>();
  m.gpu_indices = rows::IntArray(row[7]);
  m.gpu_milli = row[8].as<int64_t>();
  m.gpu_memory_mib = row[9].as<int64_t>();
  m.mig_profile = row[10].as<std::string>();
  m.exclusive = row[11].as<bool>();
  m.preemptible = row[12].as<bool>();
  m.guaranteed = row[13].as<bool>();
  m.from = absl::FromUnixMicros(row[14].as<int64_t>());
  const absl::Time until = rows::FromMicrosOrMin(row[15].as<int64_t>());
  m.until = until == absl::InfinitePast() ? absl::InfiniteFuture() : until;
  m.priority = row[16].as<int32_t>();
  m.spot = row[17].as<bool>();
  m.burst = row[18].as<bool>();
  return m;
}

std::vector<core::HeldMember> HeldMembersOf(const pqxx::result& rows) {
  std::vector<core::HeldMember> out;
  out.reserve(rows.size());
  for (const pqxx::row& row : rows) out.push_back(HeldMemberFromRow(row));
  return out;
}

core::MemberUsage UsageFromColumns(const pqxx::row& row, int first) {
  core::MemberUsage u;
  u.allocated_milli_seconds = row[first].as<int64_t>();
  u.sampled_milli_seconds = row[first + 1].as<int64_t>();
  u.used_milli_seconds = row[first + 2].as<int64_t>();
  return u;
}

// Hands the members held in [from, to) to `part`, at most `max_part` at a
// time, read through a cursor in `tx` (so libpq holds a fetch's rows, not
// the window's). REQUIRES: max_part > 0.
absl::Status ScanHeldThroughCursor(pqxx::transaction_base& tx, absl::Time from, absl::Time to,
                                   size_t max_part, const TelemetryStore::HeldPart& part) {
  // A cursor is planned for its first tenth by default (an index scan in
  // the ORDER BY's order over all of `requests`); the scan reads it all.
  tx.exec0("SET LOCAL cursor_tuple_fraction = 1");
  tx.exec_prepared(sql::kDeclareHeldMembers, rows::ToMicros(from), rows::ToMicros(to));
  std::vector<core::HeldMember> members;
  members.reserve(max_part);
  for (;;) {
    const pqxx::result r = tx.exec_prepared(sql::kFetchHeldMembers);
    if (r.empty()) break;
    for (const pqxx::row& row : r) {
      members.push_back(HeldMemberFromRow(row));
      if (members.size() == max_part) {
        ARBITER_RETURN_IF_ERROR(part(members));
        members.clear();
      }
    }
  }
  tx.exec0("CLOSE held_members");
  if (!members.empty()) return part(members);
  return absl::OkStatus();
}

// The rollup of one team, pool, workload class and GPU model.
using TeamKey = std::tuple<std::string, std::string, core::WorkloadClass, std::string>;

// Appends the measures of `u` to cols[0..5], in the order of the rollup
// tables' columns: allocated, sampled and used time, the peaks, energy.
void AddMeasures(rows::ArrayLiteral* cols, const core::MemberUsage& u) {
  cols[0].Add(u.allocated_milli_seconds);
  cols[1].Add(u.sampled_milli_seconds);
  cols[2].Add(u.used_milli_seconds);
  cols[3].Add(int64_t{u.peak_busy_milli});
  cols[4].Add(u.peak_memory_mib);
  cols[5].Add(u.energy_mwh);
}

// Adds the sums of `by_team` to the team rollups of `hour`.
void AddTeamUsageRows(pqxx::work& tx, absl::Time hour,
                      const std::map<TeamKey, core::MemberUsage>& by_team) {
  rows::ArrayLiteral cols[11];
  for (const auto& [key, u] : by_team) {
    const auto& [team, pool, workload_class, gpu_model] = key;
    cols[0].Add(rows::ToMicros(hour));
    cols[1].Add(team);
    cols[2].Add(pool);
    cols[3].Add(core::WorkloadClassName(workload_class));
    cols[4].Add(gpu_model);
    AddMeasures(cols + 5, u);
  }
  tx.exec_prepared(sql::kAddTeamUsageRows, cols[0].Done(), cols[1].Done(), cols[2].Done(),
                   cols[3].Done(), cols[4].Done(), cols[5].Done(), cols[6].Done(), cols[7].Done(),
                   cols[8].Done(), cols[9].Done(), cols[10].Done());
}

// Adds usage[i] of members[i] (those that held nothing are left out) to the
// rollups of `hour`, the members' and their teams'. `*partitioned` is set
// once the month's partitions are made sure of.
void AddUsageRows(pqxx::work& tx, absl::Time hour, absl::Time computed_at,
                  absl::Span<const core::HeldMember> members,
                  absl::Span<const core::MemberUsage> usage, bool* partitioned) {
  rows::ArrayLiteral cols[14];
  std::map<TeamKey, core::MemberUsage> by_team;
  size_t n = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const core::HeldMember& m = members[i];
    const core::MemberUsage& u = usage[i];
    if (u.allocated_milli_seconds == 0) continue;
    ++n;
    auto [sum, fresh] = by_team.try_emplace({m.team, m.pool, m.workload_class, m.gpu_model}, u);
    if (!fresh) core::AddUsage(sum->second, u);
    cols[0].Add(rows::ToMicros(hour));
    cols[1].Add(m.request_id);
    cols[2].Add(int64_t{m.member});
    cols[3].Add(m.team);
    cols[4].Add(m.pool);
    cols[5].Add(core::WorkloadClassName(m.workload_class));
    cols[6].Add(m.gpu_model);
    AddMeasures(cols + 7, u);
    cols[13].Add(rows::ToMicros(computed_at));
  }
  if (n == 0) return;
  if (!*partitioned) {
    // The partitions of the hour's month (migrations 0033 and 0039).
    tx.exec_prepared(sql::kEnsureUsagePartition,
                     absl::FormatCivilTime(absl::ToCivilDay(hour, absl::UTCTimeZone())));
    *partitioned = true;
  }
  tx.exec_prepared(sql::kAddUsageRows, cols[0].Done(), cols[1].Done(), cols[2].Done(),
                   cols[3].Done(), cols[4].Done(), cols[5].Done(), cols[6].Done(), cols[7].Done(),
                   cols[8].Done(), cols[9].Done(), cols[10].Done(), cols[11].Done(),
                   cols[12].Done(), cols[13].Done());
  AddTeamUsageRows(tx, hour, by_team);
}

// Records that `hour` is rolled up to `to` from `from`, locking its
// progress row until commit (a concurrent pass waits, then finds the new
// end). ABORTED when the hour is no longer rolled up to `from`.
absl::Status AdvanceUsageProgress(pqxx::work& tx, absl::Time hour, absl::Time from, absl::Time to) {
  const int64_t h = rows::ToMicros(hour);
  const int64_t f = rows::ToMicros(from);
  const int64_t t = rows::ToMicros(to);
  bool advanced = !tx.exec_prepared(sql::kAdvanceUsageProgress, h, f, t).empty();
  if (!advanced && f == h) advanced = !tx.exec_prepared(sql::kInsertUsageProgress, h, t).empty();
  if (!advanced) {
    return absl::AbortedError(
        "add usage slice: the hour is no longer rolled up to the slice's start");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> PgStore::InsertSampleBatches(
    absl::Span<const std::vector<core::GpuSample>> batches) {
  std::vector<int64_t> stored(batches.size(), 0);
  // The UTC days the samples fall on, as days since the epoch: formatting
  // each sample's day would cost more than the rest of its row.
  std::set<int64_t> days;
  size_t samples = 0;
  for (const std::vector<core::GpuSample>& batch : batches) {
    samples += batch.size();
    for (const core::GpuSample& s : batch) {
      days.insert(absl::ToInt64Seconds(absl::Floor(s.at - absl::UnixEpoch(), absl::Hours(24))) /
                  86400);
    }
  }
  if (samples == 0) return stored;
  return WithConnection(
      "insert samples", [&](pqxx::connection& c) -> absl::StatusOr<std::vector<int64_t>> {
        pqxx::work tx(c);
        for (int64_t day : days) {
          tx.exec_prepared(sql::kEnsureSamplePartition,
                           DayOf(absl::UnixEpoch() + absl::Hours(24 * day)));
        }
        // Almost always every sample is new: one COPY for all the batches,
        // without the duplicate check of ON CONFLICT (which costs an index
        // probe per row) and without parsing array parameters. A duplicate
        // fails it on the primary key; then, back at the savepoint, a
        // statement per batch skips the duplicates and counts each batch's
        // new samples.
        bool all_new = true;
        tx.exec0("SAVEPOINT new_samples");
        try {
          CopySamples(tx, batches);
          tx.exec0("RELEASE SAVEPOINT new_samples");
        } catch (const pqxx::unique_violation&) {
          tx.exec0("ROLLBACK TO SAVEPOINT new_samples");
          all_new = false;
        }
        for (size_t b = 0; b < batches.size(); ++b) {
          if (all_new) {
            stored[b] = static_cast<int64_t>(batches[b].size());
          } else if (!batches[b].empty()) {
            SampleColumns cols;
            cols.Add(batches[b]);
            stored[b] = static_cast<int64_t>(cols.Exec(tx, sql::kInsertSamples).affected_rows());
          }
        }
        tx.commit();
        return stored;
      });
}

absl::StatusOr<int32_t> PgStore::DropSamplesBefore(absl::Time day) {
  return WithConnection("drop samples", [&](pqxx::connection& c) -> absl::StatusOr<int32_t> {
    pqxx::work tx(c);
    const int32_t dropped =
        tx.exec_prepared1(sql::kDropSamplePartitions, DayOf(day))[0].as<int32_t>();
    tx.commit();
    return dropped;
  });
}

absl::StatusOr<std::vector<core::GpuSample>> PgStore::ListSamples(absl::Time from, absl::Time to) {
  // The span is read in parts, so that libpq's result (the rows as text) is
  // never much more than kRowsPerStatement rows at once: a telemetry pass
  // reads a minute of the fleet, 600,000 rows at 100,000 GPUs (about 190
  // MiB as one result), or five minutes after a pause. A part starts at 10
  // s and doubles while its rows are few, halves while they are many, so
  // that a sparse span takes a few statements.
  constexpr size_t kRowsPerStatement = 100'000;
  return WithConnection(
      "list samples", [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::GpuSample>> {
        pqxx::read_transaction tx(c);
        std::vector<core::GpuSample> out;
        absl::Duration part = absl::Seconds(10);
        for (absl::Time at = from; at < to;) {
          const absl::Time end = to - at > part ? at + part : to;
          const pqxx::result r =
              tx.exec_prepared(sql::kSelectSamples, rows::ToMicros(at), rows::ToMicros(end));
          if (out.empty()) out.reserve(r.size());  // Then push_back's doubling.
          for (const pqxx::row& row : r) out.push_back(SampleFromRow(row));
          at = end;
          if (r.size() < kRowsPerStatement / 4) {
            part = std::min(part * 2, to - from);
          } else if (r.size() > kRowsPerStatement) {
            part = std::max(part / 2, absl::Seconds(1));
          }
        }
        return out;
      });
}

absl::StatusOr<std::vector<core::HeldMember>> PgStore::ListHeldMembers(absl::Time from,
                                                                       absl::Time to) {
  return WithConnection("list held members",
                        [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::HeldMember>> {
                          pqxx::read_transaction tx(c);
                          return HeldMembersOf(tx.exec_prepared(
                              sql::kSelectHeldMembers, rows::ToMicros(from), rows::ToMicros(to)));
                        });
}

absl::StatusOr<std::vector<core::HeldMember>> PgStore::ListHeldMembersInPool(
    const std::string& pool, absl::Time from, absl::Time to) {
  return WithConnection(
      "list held members in pool",
      [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::HeldMember>> {
        pqxx::read_transaction tx(c);
        return HeldMembersOf(tx.exec_prepared(sql::kSelectHeldMembersInPool, rows::ToMicros(from),
                                              rows::ToMicros(to), pool));
      });
}

absl::StatusOr<absl::Time> PgStore::UsageRolledTo(absl::Time hour) {
  return WithConnection("usage rolled to", [&](pqxx::connection& c) -> absl::StatusOr<absl::Time> {
    pqxx::read_transaction tx(c);
    const pqxx::result r = tx.exec_prepared(sql::kSelectUsageProgress, rows::ToMicros(hour));
    if (r.empty()) return hour;
    return absl::FromUnixMicros(r[0][0].as<int64_t>());
  });
}

absl::Status PgStore::ScanHeldMembers(absl::Time from, absl::Time to, size_t max_part,
                                      const HeldPart& part) {
  return WithConnection("scan held members", [&](pqxx::connection& c) -> absl::Status {
    pqxx::read_transaction tx(c);
    return ScanHeldThroughCursor(tx, from, to, max_part, part);
  });
}

absl::Status PgStore::AddUsageSlice(const UsageSlice& slice) {
  if (slice.members.size() != slice.usage.size()) {
    return absl::InternalError("AddUsageSlice: members and usage differ in length");
  }
  return WithConnection("add usage slice", [&](pqxx::connection& c) -> absl::Status {
    pqxx::work tx(c);
    ARBITER_RETURN_IF_ERROR(AdvanceUsageProgress(tx, slice.hour, slice.from, slice.to));
    bool partitioned = false;
    AddUsageRows(tx, slice.hour, slice.computed_at, slice.members, slice.usage, &partitioned);
    tx.commit();
    return absl::OkStatus();
  });
}

absl::Status PgStore::RollUpSlice(absl::Time hour, absl::Time from, absl::Time to,
                                  absl::Time computed_at, size_t max_part, const RollPart& roll) {
  return WithConnection("roll up usage slice", [&](pqxx::connection& c) -> absl::Status {
    pqxx::work tx(c);
    ARBITER_RETURN_IF_ERROR(AdvanceUsageProgress(tx, hour, from, to));
    bool partitioned = false;
    ARBITER_RETURN_IF_ERROR(ScanHeldThroughCursor(
        tx, from, to, max_part, [&](absl::Span<const core::HeldMember> members) -> absl::Status {
          const std::vector<core::MemberUsage> usage = roll(members);
          if (usage.size() != members.size()) {
            return absl::InternalError("RollUpSlice: members and usage differ in length");
          }
          AddUsageRows(tx, hour, computed_at, members, usage, &partitioned);
          return absl::OkStatus();
        }));
    tx.commit();
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<core::HeldMember>> PgStore::ListLiveMembers() {
  return WithConnection("list live members",
                        [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::HeldMember>> {
                          pqxx::read_transaction tx(c);
                          return HeldMembersOf(tx.exec_prepared(sql::kSelectLiveMembers));
                        });
}

absl::Status PgStore::ResetUsageHour(absl::Time hour) {
  return WithConnection("reset usage hour", [&](pqxx::connection& c) -> absl::Status {
    pqxx::work tx(c);
    tx.exec_prepared(sql::kDeleteUsageHour, rows::ToMicros(hour));
    tx.exec_prepared(sql::kDeleteUsageProgress, rows::ToMicros(hour));
    tx.commit();
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<UtilizationRow>> PgStore::ListUtilization(absl::Time from, absl::Time to,
                                                                     const std::string& team) {
  return WithConnection(
      "list utilization", [&](pqxx::connection& c) -> absl::StatusOr<std::vector<UtilizationRow>> {
        pqxx::read_transaction tx(c);
        std::vector<UtilizationRow> out;
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectUtilization, rows::ToMicros(from),
                                                     rows::ToMicros(to), team)) {
          UtilizationRow r;
          r.team = row[0].as<std::string>();
          r.pool = row[1].as<std::string>();
          r.workload_class = core::WorkloadClassFromName(row[2].as<std::string>());
          r.gpu_model = row[3].as<std::string>();
          r.usage = UsageFromColumns(row, 4);
          r.usage.energy_mwh = row[7].as<int64_t>();
          r.usage.peak_busy_milli = row[8].as<int32_t>();
          r.usage.peak_memory_mib = row[9].as<int64_t>();
          out.push_back(std::move(r));
        }
        return out;
      });
}

absl::StatusOr<std::vector<core::MemberUsage>> PgStore::ListMemberUsage(absl::Time from,
                                                                        absl::Time to) {
  return WithConnection(
      "list member usage",
      [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::MemberUsage>> {
        pqxx::read_transaction tx(c);
        std::vector<core::MemberUsage> out;
        for (const pqxx::row& row :
             tx.exec_prepared(sql::kSelectMemberUsage, rows::ToMicros(from), rows::ToMicros(to))) {
          core::MemberUsage u = UsageFromColumns(row, 2);
          u.request_id = row[0].as<int64_t>();
          u.member = row[1].as<int32_t>();
          u.peak_busy_milli = row[5].as<int32_t>();
          u.peak_memory_mib = row[6].as<int64_t>();
          u.energy_mwh = row[7].as<int64_t>();
          out.push_back(u);
        }
        return out;
      });
}

}  // namespace arbiter::store
