#include "core/quota_book.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

#include "core/status_macros.h"

namespace arbiter::core {

absl::Status QuotaBook::LoadTeam(Team team) {
  std::string cohort = team.name;
  if (!team.parent.empty()) {
    auto parent = cohort_of_.find(team.parent);
    if (parent == cohort_of_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("team ", team.name, " has unknown parent ", team.parent));
    }
    cohort = parent->second;
  }
  const std::string name = team.name;
  if (!teams_.emplace(name, std::move(team)).second) {
    return absl::FailedPreconditionError(absl::StrCat("duplicate team ", name));
  }
  cohort_of_[name] = std::move(cohort);
  const std::string& parent = teams_.at(name).parent;
  if (!parent.empty()) parents_.insert(parent);
  return absl::OkStatus();
}

void QuotaBook::PutQuota(Quota quota) {
  ARBITER_CHECK(cohort_of_.contains(quota.team));
  QuotaKey key{quota.team, quota.pool, quota.gpu_model};
  const auto& [team, pool, model] = key;
  // The subtree's own share, and what it passes up under its cohort lending
  // limit, both change with the quota: take the old ones out, put the new in.
  const CohortUse own_before = OwnShare(key);
  const CohortUse up_before =
      UpShare(CohortLendingLimit(team, pool, model), CohortUseOf(team, pool, model));
  quotas_[key] = std::move(quota);
  const CohortUse own_after = OwnShare(key);
  CohortUse& sums = cohort_use_[CohortKey{team, pool, model}];
  sums.lendable += own_after.lendable - own_before.lendable;
  sums.shared_used += own_after.shared_used - own_before.shared_used;
  const CohortUse up_after = UpShare(CohortLendingLimit(team, pool, model), sums);
  const std::string& parent = teams_.at(team).parent;
  if (!parent.empty()) {
    Propagate(
        parent, pool, model,
        {up_after.lendable - up_before.lendable, up_after.shared_used - up_before.shared_used});
  }
}

const Team* QuotaBook::FindTeam(const std::string& name) const {
  auto it = teams_.find(name);
  return it == teams_.end() ? nullptr : &it->second;
}

const std::string& QuotaBook::CohortOf(const std::string& team) const {
  auto it = cohort_of_.find(team);
  ARBITER_CHECK(it != cohort_of_.end());
  return it->second;
}

const Quota* QuotaBook::FindQuota(const std::string& team, const std::string& pool,
                                  const std::string& gpu_model) const {
  auto it = quotas_.find(QuotaKey{team, pool, gpu_model});
  return it == quotas_.end() ? nullptr : &it->second;
}

std::vector<const Quota*> QuotaBook::QuotasOf(const std::string& team,
                                              const std::string& pool) const {
  std::vector<const Quota*> out;
  const Quota* pool_wide = nullptr;
  for (auto it = quotas_.lower_bound(QuotaKey{team, pool, ""});
       it != quotas_.end() && std::get<0>(it->first) == team && std::get<1>(it->first) == pool;
       ++it) {
    if (it->second.gpu_model.empty()) {
      pool_wide = &it->second;
    } else {
      out.push_back(&it->second);
    }
  }
  if (pool_wide != nullptr) out.push_back(pool_wide);
  return out;
}

CohortUse QuotaBook::CohortUseOf(const std::string& cohort, const std::string& pool,
                                 const std::string& gpu_model) const {
  auto it = cohort_use_.find(CohortKey{cohort, pool, gpu_model});
  return it == cohort_use_.end() ? CohortUse{} : it->second;
}

int64_t QuotaBook::UsedMilli(const std::string& team, const std::string& pool) const {
  auto it = used_pool_milli_.find({team, pool});
  return it == used_pool_milli_.end() ? 0 : it->second;
}

int64_t QuotaBook::UsedMilli(const std::string& team, const std::string& pool,
                             const std::string& gpu_model) const {
  auto it = used_milli_.find(QuotaKey{team, pool, gpu_model});
  return it == used_milli_.end() ? 0 : it->second;
}

void QuotaBook::Charge(const std::string& team, const std::string& pool,
                       const std::string& gpu_model, int64_t milli) {
  QuotaKey key{team, pool, gpu_model};
  const CohortUse before = OwnShare(key);
  used_milli_[key] += milli;
  used_pool_milli_[{team, pool}] += milli;
  const CohortUse after = OwnShare(key);
  if (!(before == after)) {
    Propagate(team, pool, gpu_model,
              {after.lendable - before.lendable, after.shared_used - before.shared_used});
  }
}

CohortUse QuotaBook::OwnShare(const QuotaKey& key) const {
  auto quota = quotas_.find(key);
  if (quota == quotas_.end()) return {};  // Usage without a quota lends nothing.
  const Quota& q = quota->second;
  const int64_t used = UsedMilli(q.team, q.pool, q.gpu_model);
  return {q.lendable_milli(), std::max<int64_t>(0, used - q.guaranteed_milli())};
}

int64_t QuotaBook::CohortLendingLimit(const std::string& node, const std::string& pool,
                                      const std::string& model) const {
  const Quota* q = FindQuota(node, pool, model);
  return q == nullptr ? kUnlimited : q->cohort_lending_limit_milli;
}

CohortUse QuotaBook::UpShare(int64_t cohort_lending_limit, const CohortUse& sums) {
  const int64_t kept = cohort_lending_limit == kUnlimited
                           ? 0
                           : std::max<int64_t>(0, sums.lendable - cohort_lending_limit);
  return {sums.lendable - kept, std::max<int64_t>(0, sums.shared_used - kept)};
}

void QuotaBook::Propagate(const std::string& team, const std::string& pool,
                          const std::string& model, CohortUse delta) {
  for (const std::string* node = &team; delta.lendable != 0 || delta.shared_used != 0;
       node = &teams_.at(*node).parent) {
    CohortUse& sums = cohort_use_[CohortKey{*node, pool, model}];
    const bool root = teams_.at(*node).parent.empty();
    const int64_t limit = root ? kUnlimited : CohortLendingLimit(*node, pool, model);
    const CohortUse up_before = UpShare(limit, sums);
    sums.lendable += delta.lendable;
    sums.shared_used += delta.shared_used;
    if (root) return;
    const CohortUse up_after = UpShare(limit, sums);
    delta = {up_after.lendable - up_before.lendable, up_after.shared_used - up_before.shared_used};
  }
}

CohortFit QuotaBook::FitCohorts(const std::string& team, const std::string& pool,
                                const std::string& gpu_model, int64_t need) const {
  QuotaKey key{team, pool, gpu_model};
  const Quota& q = quotas_.at(key);
  const int64_t used = UsedMilli(team, pool, gpu_model);
  const int64_t guaranteed = q.guaranteed_milli();
  CohortUse delta{
      0, std::max<int64_t>(0, used + need - guaranteed) - std::max<int64_t>(0, used - guaranteed)};
  // Walks up from the team's subtree while the change reaches the next one.
  for (const std::string* node = &team;; node = &teams_.at(*node).parent) {
    const CohortUse sums = CohortUseOf(*node, pool, gpu_model);
    const CohortUse after{sums.lendable, sums.shared_used + delta.shared_used};
    const bool root = teams_.at(*node).parent.empty();
    const Quota* head = root ? nullptr : FindQuota(*node, pool, gpu_model);
    const int64_t borrowing = head == nullptr ? kUnlimited : head->cohort_borrowing_limit_milli;
    const int64_t lending = head == nullptr ? kUnlimited : head->cohort_lending_limit_milli;
    // Only a growing use can overrun: a shrinking one always fits.
    if (delta.shared_used > 0) {
      if (root && after.shared_used > after.lendable) {
        return CohortFit{false, *node, false, sums, after.lendable, after.shared_used};
      }
      if (!root && borrowing != kUnlimited && after.shared_used > after.lendable + borrowing) {
        return CohortFit{false, *node, true, sums, after.lendable + borrowing, after.shared_used};
      }
    }
    if (root) return CohortFit{};
    const CohortUse up_before = UpShare(lending, sums);
    const CohortUse up_after = UpShare(lending, after);
    delta = {0, up_after.shared_used - up_before.shared_used};
    if (delta.shared_used == 0) return CohortFit{};
  }
}

std::vector<std::string> QuotaBook::PathOf(const std::string& team) const {
  std::vector<std::string> path;
  for (const std::string* node = &team; !node->empty(); node = &teams_.at(*node).parent) {
    path.push_back(*node);
  }
  return path;
}

}  // namespace arbiter::core
