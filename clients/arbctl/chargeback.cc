// arbctl slo set|list, latency report, incidents list, chargeback show|close.
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include "clients/arbctl/commands.h"
#include "clients/arbctl/report.h"
#include "clients/arbctl/table.h"

namespace arbiter::arbctl {
namespace {

using google::protobuf::util::TimeUtil;

// [from, to) rounded out to whole hours. False (and a message) when either
// does not parse or the period is empty.
bool ParsePeriod(const std::string& from, const std::string& to, v1::Period* out) {
  absl::Time a, b;
  if (!ParseWhen(from, &a) || !ParseWhen(to, &b)) {
    std::cerr << "arbctl: --from and --to are RFC 3339 times or +/-<duration> from now\n";
    return false;
  }
  a = absl::UnixEpoch() + absl::Floor(a - absl::UnixEpoch(), absl::Hours(1));
  b = absl::UnixEpoch() + absl::Ceil(b - absl::UnixEpoch(), absl::Hours(1));
  if (b <= a) {
    std::cerr << "arbctl: --to must be after --from\n";
    return false;
  }
  out->mutable_from()->set_seconds(absl::ToUnixSeconds(a));
  out->mutable_to()->set_seconds(absl::ToUnixSeconds(b));
  return true;
}

bool Write(const std::string& output, const std::string& text) {
  if (output.empty()) {
    std::cout << text;
    return true;
  }
  std::ofstream f(output, std::ios::binary | std::ios::trunc);
  f << text;
  if (!f.good()) {
    std::cerr << "arbctl: cannot write " << output << "\n";
    return false;
  }
  return true;
}

std::string Json(const google::protobuf::Message& m) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &json, options);
  return json;
}

}  // namespace

int Commands::SetSlo(const std::string& team, const std::string& service, const std::string& pool,
                     int64_t p99_target_us, int64_t window_seconds,
                     int64_t penalty_micros_per_minute) {
  v1::SetSloRequest req;
  v1::Slo* slo = req.mutable_slo();
  slo->set_team(team);
  slo->set_service(service);
  slo->set_pool(pool);
  slo->set_p99_target_us(p99_target_us);
  slo->set_window_seconds(window_seconds);
  slo->set_penalty_micros_per_minute(penalty_micros_per_minute);
  v1::SetSloResponse resp;
  if (!Call(chargeback_, &v1::ChargebackService::Stub::SetSlo, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "SLO " << team << "/" << service << " in " << pool
            << ": p99 <= " << p99_target_us / 1000.0 << " ms per " << window_seconds
            << " s window\n";
  return 0;
}

int Commands::ListSlos(const std::string& team) {
  v1::ListSlosRequest req;
  req.set_team(team);
  v1::ListSlosResponse resp;
  if (!Call(chargeback_, &v1::ChargebackService::Stub::ListSlos, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"TEAM", "SERVICE", "POOL", "P99_TARGET_MS", "WINDOW_S", "PENALTY_PER_MIN"});
  for (const v1::Slo& s : resp.slos()) {
    t.AddRow({s.team(), s.service(), s.pool(), absl::StrCat(s.p99_target_us() / 1000.0),
              absl::StrCat(s.window_seconds()),
              s.penalty_micros_per_minute() == 0 ? "reserved cost"
                                                 : MoneyText(s.penalty_micros_per_minute())});
  }
  PrintTable(t);
  return 0;
}

int Commands::ReportLatency(const std::string& team, const std::string& service,
                            const std::string& start, int64_t window_seconds, int64_t p50_us,
                            int64_t p99_us, int64_t requests_milli_per_second) {
  absl::Time begin;
  if (!ParseWhen(start, &begin)) {
    std::cerr << "arbctl: --start is an RFC 3339 time or +/-<duration> from now\n";
    return 2;
  }
  if (window_seconds == 0) {  // The SLO's own window.
    v1::ListSlosRequest list;
    list.set_team(team);
    v1::ListSlosResponse slos;
    if (!Call(chargeback_, &v1::ChargebackService::Stub::ListSlos, list, &slos)) return 1;
    for (const v1::Slo& s : slos.slos()) {
      if (s.service() == service) window_seconds = s.window_seconds();
    }
    if (window_seconds == 0) {
      std::cerr << "arbctl: team " << team << " declared no SLO for " << service
                << " (arbctl slo set)\n";
      return 1;
    }
  }
  if (begin + absl::Seconds(window_seconds) > absl::Now()) {
    std::cerr << "arbctl: --start: the window starting then has not ended yet; report a window "
                 "once it has ended\n";
    return 2;
  }
  v1::ReportLatencyRequest req;
  v1::LatencyWindow* w = req.mutable_window();
  w->set_team(team);
  w->set_service(service);
  w->mutable_start()->set_seconds(absl::ToUnixSeconds(begin));
  w->mutable_end()->set_seconds(absl::ToUnixSeconds(begin) + window_seconds);
  w->set_p50_us(p50_us);
  w->set_p99_us(p99_us);
  w->set_requests_milli_per_second(requests_milli_per_second);
  v1::ReportLatencyResponse resp;
  if (!Call(chargeback_, &v1::ChargebackService::Stub::ReportLatency, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  if (!resp.breached()) {
    std::cout << "within the SLO" << (resp.duplicate() ? " (reported before)" : "") << "\n";
    return 0;
  }
  const v1::Incident& i = resp.incident();
  std::cout << "incident " << i.id() << (resp.duplicate() ? " (reported before)" : "") << ": cost "
            << MoneyText(i.cost_micros()) << " (" << i.cost_basis() << "), "
            << MoneyText(i.attributed_micros()) << " charged";
  for (const v1::ExternalityCharge& c : i.charges()) {
    std::cout << "; " << c.team() << " " << MoneyText(c.micros());
  }
  std::cout << "\n";
  return 0;
}

int Commands::ListIncidents(const std::string& from, const std::string& to,
                            const std::string& team) {
  v1::ListIncidentsRequest req;
  if (!ParsePeriod(from, to, req.mutable_period())) return 2;
  req.set_team(team);
  v1::ListIncidentsResponse resp;
  if (!Call(chargeback_, &v1::ChargebackService::Stub::ListIncidents, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"ID", "TEAM", "SERVICE", "WINDOW_START", "P99_MS", "TARGET_MS", "COST", "CHARGED_TO"});
  for (const v1::Incident& i : resp.incidents()) {
    std::string to_whom;
    for (const v1::ExternalityCharge& c : i.charges()) {
      absl::StrAppend(&to_whom, to_whom.empty() ? "" : ", ", c.team(), " ", MoneyText(c.micros()));
    }
    t.AddRow({absl::StrCat(i.id()), i.team(), i.service(), TimeUtil::ToString(i.window().start()),
              absl::StrCat(i.window().p99_us() / 1000.0), absl::StrCat(i.p99_target_us() / 1000.0),
              MoneyText(i.cost_micros()), to_whom.empty() ? "-" : to_whom});
  }
  PrintTable(t);
  return 0;
}

int Commands::Chargeback(const std::string& from, const std::string& to, const std::string& team,
                         const std::string& format, const std::string& output) {
  v1::GetChargebackRequest req;
  if (!ParsePeriod(from, to, req.mutable_period())) return 2;
  req.set_team(team);
  v1::GetChargebackResponse resp;
  if (!Call(chargeback_, &v1::ChargebackService::Stub::GetChargeback, req, &resp)) return 1;
  const std::string f = options_.json ? "json" : format;
  if (f == "json") return Write(output, Json(resp)) ? 0 : 1;
  if (f == "csv") return Write(output, ChargebackCsv(resp, false)) ? 0 : 1;
  if (f == "csv-lines") return Write(output, ChargebackCsv(resp, true)) ? 0 : 1;
  if (f == "html") return Write(output, ChargebackHtml(resp)) ? 0 : 1;
  if (f != "table") {
    std::cerr << "arbctl: --format is table, json, csv, csv-lines or html\n";
    return 2;
  }
  Table t({"TEAM", "RESERVED_GPU_H", "USED_GPU_H", "BORROWED_GPU_H", "COST", "IDLE_COST", "PAID",
           "CREDITED", "NET", "REMAINDER"});
  for (const v1::Statement& s : resp.statements()) {
    t.AddRow({s.team(), GpuHoursText(s.reserved_milli_seconds()),
              GpuHoursText(s.used_milli_seconds()), GpuHoursText(s.borrowed_milli_seconds()),
              MoneyText(s.reserved_cost_micros()), MoneyText(s.idle_cost_micros()),
              MoneyText(s.externality_charged_micros()), MoneyText(s.externality_credited_micros()),
              MoneyText(s.net_cost_micros()),
              s.has_budget_micros() ? MoneyText(s.remainder_micros()) : "-"});
  }
  std::ostringstream out;
  t.Print(out);
  out << (resp.closed() ? absl::StrCat("closed; sha256 ", resp.sha256()) : "open period") << "\n";
  return Write(output, out.str()) ? 0 : 1;
}

int Commands::ClosePeriod(const std::string& from, const std::string& to) {
  v1::ClosePeriodRequest req;
  if (!ParsePeriod(from, to, req.mutable_period())) return 2;
  v1::ClosePeriodResponse resp;
  if (!Call(chargeback_, &v1::ChargebackService::Stub::ClosePeriod, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "closed " << TimeUtil::ToString(req.period().from()) << " to "
            << TimeUtil::ToString(req.period().to()) << ": " << resp.chargeback().statements_size()
            << " statements, sha256 " << resp.chargeback().sha256() << " (in the ledger)\n";
  return 0;
}

}  // namespace arbiter::arbctl
