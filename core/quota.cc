#include "core/quota.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace arbiter::core {
namespace {

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// " (model M)" for a per-model quota, "" for the pool-wide one.
std::string ModelText(const Quota& quota) {
  return quota.gpu_model.empty() ? std::string() : absl::StrCat(" for ", quota.gpu_model);
}

std::string LimitText(const Quota& quota) {
  if (quota.borrowing_limit_milli == 0) return absl::StrCat("nominal ", quota.nominal_milli);
  if (quota.borrowing_limit_milli == kUnlimited) {
    return absl::StrCat("nominal ", quota.nominal_milli, ", unlimited borrowing");
  }
  return absl::StrCat(quota.ceiling_milli(), " (nominal ", quota.nominal_milli, " + borrowing ",
                      quota.borrowing_limit_milli, ")");
}

}  // namespace

std::vector<Flavor> FlavorsOf(const State& state, const CapacityRequestSpec& spec) {
  const std::vector<const Quota*> quotas = state.QuotasOf(spec.team, spec.pool);
  std::vector<std::string> per_model;
  for (const Quota* q : quotas) {
    if (!q->gpu_model.empty()) per_model.push_back(q->gpu_model);
  }
  std::vector<Flavor> out;
  for (const Quota* q : quotas) {
    if (!q->gpu_model.empty()) {
      if (spec.allows_model(q->gpu_model)) {
        out.push_back(Flavor{q, {q->gpu_model}});
      }
      continue;
    }
    if (per_model.empty()) {
      out.push_back(Flavor{q, spec.gpu_models});
      continue;
    }
    // The pool-wide quota covers the allowed models that have no quota of
    // their own.
    std::vector<std::string> models;
    if (spec.gpu_models.empty()) {
      for (const auto& [name, model] : state.gpu_models()) {
        if (!Contains(per_model, name)) models.push_back(name);
      }
    } else {
      for (const std::string& name : spec.gpu_models) {
        if (!Contains(per_model, name)) models.push_back(name);
      }
    }
    if (!models.empty()) out.push_back(Flavor{q, std::move(models)});
  }
  return out;
}

bool WithinNominal(const State& state, const CapacityRequestSpec& spec, const Quota& quota,
                   int64_t need) {
  return state.UsedMilli(spec.team, spec.pool, quota.gpu_model) + need <= quota.nominal_milli;
}

QuotaCheck CheckQuota(const State& state, const CapacityRequestSpec& spec, const Quota& quota,
                      int64_t need) {
  QuotaCheck check;
  const int64_t used = state.UsedMilli(spec.team, spec.pool, quota.gpu_model);
  const int64_t ceiling = quota.ceiling_milli();
  const std::string where = absl::StrCat("pool ", spec.pool, ModelText(quota));
  if (ceiling != kUnlimited && need > ceiling) {
    check.never = true;
    check.reason_code = kReasonQuotaExceeded;
    check.reason = absl::StrCat("request needs ", need, " milli-GPU; team ", spec.team,
                                "'s quota in ", where, " allows at most ", LimitText(quota));
    return check;
  }
  check.borrowing = used + need > quota.nominal_milli;
  if (ceiling != kUnlimited && used + need > ceiling) {
    check.reason_code =
        quota.borrowing_limit_milli > 0 ? kReasonBorrowingLimit : kReasonQuotaExceeded;
    check.reason = absl::StrCat("team ", spec.team, " holds ", used, " of its ", LimitText(quota),
                                " milli-GPU in ", where, "; request needs ", need, " (over by ",
                                used + need - ceiling, ")");
    return check;
  }
  if (check.borrowing && !spec.preemptible) {
    check.reason_code = kReasonNotPreemptible;
    check.reason = absl::StrCat("request needs ", need, " milli-GPU; team ", spec.team, " holds ",
                                used, " of its nominal ", quota.nominal_milli, " in ", where,
                                ", and only preemptible work may borrow beyond nominal");
    return check;
  }
  const CohortFit fit = state.quota_book().FitCohorts(spec.team, spec.pool, quota.gpu_model, need);
  if (!fit.ok) {
    const int64_t over = fit.after - fit.limit;
    if (fit.borrowing_limit) {
      check.reason_code = kReasonCohortBorrowingLimit;
      check.reason =
          absl::StrCat("cohort ", fit.cohort, " (", fit.cohort, " and the teams under it) lends ",
                       fit.use.lendable, " milli-GPU in ", where, " and may borrow ",
                       fit.limit - fit.use.lendable, " more; ", fit.use.shared_used,
                       " is in use; request needs ", need, " (over by ", over, ")");
    } else {
      check.reason_code = kReasonCohortExhausted;
      check.reason = absl::StrCat(
          "cohort ", fit.cohort, " lends ", fit.use.lendable, " milli-GPU in ", where, " and ",
          fit.use.shared_used, " of it is in use; request needs ", need, " (over by ", over, ")");
    }
    return check;
  }
  check.ok = true;
  return check;
}

namespace {

// A team's fair-share weight in milli (1000 when unknown), at least 1.
int64_t WeightOf(const State& state, const std::string& team) {
  const Team* t = state.FindTeam(team);
  return t == nullptr ? 1000 : std::max<int64_t>(1, t->weight_milli);
}

// `over` milli-GPU beyond what a subtree lends, over what its parent's
// subtree pools (`parent`), divided by the weight, in millionths; 0 when
// not over.
int64_t ShareOf(int64_t over, const CohortUse& parent, int64_t weight) {
  if (over <= 0) return 0;
  const int64_t lendable = std::max<int64_t>(1, parent.lendable);
  // 128-bit: quotas reach 2^50 milli-GPU.
  const __int128 scaled = static_cast<__int128>(over) * 1'000'000'000 / lendable / weight;
  return static_cast<int64_t>(std::min<__int128>(scaled, INT64_MAX));
}

}  // namespace

int64_t MeasuredShare(const State& state, const std::string& team) {
  const int64_t weight = WeightOf(state, team);
  return static_cast<int64_t>(static_cast<__int128>(state.MeasuredUsage(team)) * 1000 / weight);
}

FairShare DominantShare(const State& state, const std::string& team, const std::string& pool) {
  const QuotaBook& book = state.quota_book();
  const std::vector<std::string> path = book.PathOf(team);  // Team first, root last.
  // One share per subtree below the root, root side first, then the team's
  // own when it heads a subtree of its own (the root, or a team with
  // children): its use beside its children's.
  const bool own_level = path.size() == 1 || book.HasChildren(team);
  FairShare shares(path.size() - 1 + (own_level ? 1 : 0), 0);
  for (const Quota* q : state.QuotasOf(team, pool)) {
    const std::string& model = q->gpu_model;
    size_t at = 0;
    for (size_t i = path.size() - 1; i-- > 0;) {  // path[i]: below path[i + 1].
      const std::string& node = path[i];
      const CohortUse sums = book.CohortUseOf(node, pool, model);
      const int64_t over = sums.shared_used - sums.lendable;
      shares[at] = std::max(shares[at], ShareOf(over, book.CohortUseOf(path[i + 1], pool, model),
                                                WeightOf(state, node)));
      ++at;
    }
    if (own_level) {
      const int64_t over = state.UsedMilli(team, pool, model) - q->nominal_milli;
      shares[at] = std::max(
          shares[at], ShareOf(over, book.CohortUseOf(team, pool, model), WeightOf(state, team)));
    }
  }
  return shares;
}

}  // namespace arbiter::core
