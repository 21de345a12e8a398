#include "clients/slurm/limits.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace arbiter::slurm {
namespace {

constexpr char kGpu[] = "gres/gpu";

bool IsGpuTres(const std::string& name) {
  return name == kGpu || absl::StartsWith(name, absl::StrCat(kGpu, ":"));
}

}  // namespace

std::map<std::string, TresLimits> GrpTresFor(
    const std::vector<QuotaLine>& quotas, const std::set<std::string>& pools,
    const std::map<std::string, std::string>& model_types) {
  std::map<std::string, std::map<std::string, int64_t>> milli;  // team -> TRES -> milli.
  for (const QuotaLine& q : quotas) {
    if (pools.count(q.pool) == 0) continue;
    std::string tres = kGpu;
    if (!q.gpu_model.empty()) {
      auto type = model_types.find(q.gpu_model);
      if (type == model_types.end()) continue;
      tres = absl::StrCat(kGpu, ":", type->second);
    }
    int64_t& sum = milli[q.team][tres];
    const int64_t borrowing = q.borrowing_limit_milli.value_or(0);
    if (sum < 0) continue;
    sum = borrowing < 0 ? -1 : sum + q.nominal_milli + borrowing;
  }
  std::map<std::string, TresLimits> out;
  for (const auto& [team, limits] : milli) {
    for (const auto& [tres, m] : limits) out[team][tres] = m < 0 ? -1 : (m + 999) / 1000;
  }
  return out;
}

TresLimits ParseTres(const std::string& text) {
  TresLimits out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    int64_t n = 0;
    if (!kv.first.empty() && absl::SimpleAtoi(kv.second, &n)) out[std::string(kv.first)] = n;
  }
  return out;
}

std::string TresChange(const TresLimits& current, const TresLimits& wanted) {
  TresLimits target;
  for (const auto& [name, n] : current) {
    if (IsGpuTres(name)) target[name] = -1;  // Cleared unless still wanted.
  }
  for (const auto& [name, n] : wanted) target[name] = n;
  std::vector<std::string> items;
  bool changed = false;
  for (const auto& [name, n] : target) {
    auto now = current.find(name);
    const int64_t have = now == current.end() ? -1 : now->second;
    if (have == n) continue;
    changed = true;
    items.push_back(absl::StrCat(name, "=", n));
  }
  return changed ? absl::StrJoin(items, ",") : "";
}

}  // namespace arbiter::slurm
