// arbctl prices list|set, budgets list|set.
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include <google/protobuf/util/time_util.h>

#include "clients/arbctl/commands.h"
#include "clients/arbctl/table.h"

namespace arbiter::arbctl {
namespace {

// Micros as units with two decimals, e.g. 2500000 -> "2.50".
std::string Money(int64_t micros) {
  return absl::StrFormat("%d.%02d", micros / 1'000'000, (micros % 1'000'000) / 10'000);
}

}  // namespace

bool ParseWhen(const std::string& text, absl::Time* out) {
  absl::Duration after;
  std::string err;
  if (!text.empty() && (text[0] == '+' || text[0] == '-') &&
      absl::ParseDuration(text.substr(1), &after)) {
    *out = absl::Now() + (text[0] == '+' ? after : -after);
    return true;
  }
  return absl::ParseTime(absl::RFC3339_full, text, out, &err);
}

int Commands::ListPrices(const std::string& at) {
  v1::ListPricesRequest req;
  if (!at.empty()) {
    absl::Time t;
    if (!ParseWhen(at, &t)) {
      std::cerr << "arbctl: --at must be an RFC 3339 time or +<duration>\n";
      return 2;
    }
    req.mutable_at()->set_seconds(absl::ToUnixSeconds(t));
  }
  v1::ListPricesResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::ListPrices, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"MODEL", "LATENCY_CLASS", "PER_GPU_HOUR", "FROM"});
  for (const v1::Price& p : resp.prices()) {
    t.AddRow({p.gpu_model(),
              absl::AsciiStrToLower(v1::LatencyClass_Name(p.latency_class()).substr(14)),
              Money(p.micros_per_gpu_hour()),
              google::protobuf::util::TimeUtil::ToString(p.effective_from())});
  }
  PrintTable(t);
  return 0;
}

int Commands::SetPrice(const std::string& model, const std::string& latency_class,
                       int64_t micros_per_gpu_hour, const std::string& from,
                       int64_t burst_micros_per_gpu_hour) {
  v1::SetPriceRequest req;
  v1::LatencyClass lc = v1::LATENCY_CLASS_UNSPECIFIED;
  if (!v1::LatencyClass_Parse("LATENCY_CLASS_" + absl::AsciiStrToUpper(latency_class), &lc)) {
    std::cerr << "arbctl: the class is serving, batch, spot or dev\n";
    return 2;
  }
  absl::Time when = absl::Now();
  if (!from.empty() && !ParseWhen(from, &when)) {
    std::cerr << "arbctl: --from must be an RFC 3339 time or +<duration>\n";
    return 2;
  }
  req.mutable_price()->set_gpu_model(model);
  req.mutable_price()->set_latency_class(lc);
  req.mutable_price()->set_micros_per_gpu_hour(micros_per_gpu_hour);
  req.mutable_price()->set_burst_micros_per_gpu_hour(burst_micros_per_gpu_hour);
  req.mutable_price()->mutable_effective_from()->set_seconds(absl::ToUnixSeconds(when));
  v1::SetPriceResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::SetPrice, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << model << " in " << latency_class << " pools: " << Money(micros_per_gpu_hour)
            << " per GPU-hour from "
            << google::protobuf::util::TimeUtil::ToString(resp.price().effective_from()) << "\n";
  return 0;
}

int Commands::ListBudgets() {
  v1::ListBudgetsResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::ListBudgets, v1::ListBudgetsRequest(),
            &resp)) {
    return 1;
  }
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"TEAM", "SPENT", "SOFT", "HARD", "OVER_HARD"});
  for (const v1::BudgetUsage& u : resp.budgets()) {
    const v1::Budget& b = u.budget();
    t.AddRow({b.team(), Money(u.spent_micros()), Money(b.soft_limit_micros()),
              Money(b.hard_limit_micros()),
              b.over() == v1::OVER_BUDGET_APPROVAL ? "approval" : "deny"});
  }
  PrintTable(t);
  return 0;
}

int Commands::ListPowerBudgets() {
  v1::ListPowerBudgetsResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::ListPowerBudgets,
            v1::ListPowerBudgetsRequest(), &resp)) {
    return 1;
  }
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"SCOPE", "NAME", "WATTS", "RECLAIM"});
  for (const v1::PowerBudget& b : resp.power_budgets()) {
    std::string scope = v1::PowerScope_Name(b.scope());
    scope = absl::AsciiStrToLower(absl::StripPrefix(scope, "POWER_SCOPE_"));
    t.AddRow({scope, b.name(), absl::StrCat(b.watts()), b.reclaim() ? "yes" : "no"});
  }
  PrintTable(t);
  return 0;
}

int Commands::SetPowerBudget(const std::string& scope, const std::string& name, int64_t watts,
                             bool reclaim) {
  v1::SetPowerBudgetRequest req;
  v1::PowerScope s = v1::POWER_SCOPE_UNSPECIFIED;
  if (!v1::PowerScope_Parse("POWER_SCOPE_" + absl::AsciiStrToUpper(scope), &s) ||
      s == v1::POWER_SCOPE_UNSPECIFIED) {
    std::cerr << "arbctl: the scope is pool, rack or site\n";
    return 2;
  }
  req.mutable_power_budget()->set_scope(s);
  req.mutable_power_budget()->set_name(name);
  req.mutable_power_budget()->set_watts(watts);
  req.mutable_power_budget()->set_reclaim(reclaim);
  v1::SetPowerBudgetResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::SetPowerBudget, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "power budget of " << scope << " " << name << ": " << watts << " W"
            << (reclaim ? ", reclaiming preemptible work beyond it" : "") << "\n";
  return 0;
}

int Commands::SetBudget(const std::string& team, int64_t soft_micros, int64_t hard_micros,
                        const std::string& over) {
  v1::SetBudgetRequest req;
  req.mutable_budget()->set_team(team);
  req.mutable_budget()->set_soft_limit_micros(soft_micros);
  req.mutable_budget()->set_hard_limit_micros(hard_micros);
  if (over == "approval") {
    req.mutable_budget()->set_over(v1::OVER_BUDGET_APPROVAL);
  } else if (over == "deny") {
    req.mutable_budget()->set_over(v1::OVER_BUDGET_DENY);
  } else {
    std::cerr << "arbctl: --over must be deny or approval\n";
    return 2;
  }
  v1::SetBudgetResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::SetBudget, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "budget of " << team << ": warn past " << Money(soft_micros) << ", " << over
            << " past " << Money(hard_micros) << " a month\n";
  return 0;
}

}  // namespace arbiter::arbctl
