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
  return absl::OkStatus();
}

void QuotaBook::PutQuota(Quota quota) {
  ARBITER_CHECK(cohort_of_.contains(quota.team));
  QuotaKey key{quota.team, quota.pool, quota.gpu_model};
  Contribute(key, -1);
  quotas_[key] = std::move(quota);
  Contribute(key, +1);
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
  Contribute(key, -1);
  used_milli_[key] += milli;
  used_pool_milli_[{team, pool}] += milli;
  Contribute(key, +1);
}

void QuotaBook::Contribute(const QuotaKey& key, int sign) {
  auto quota = quotas_.find(key);
  if (quota == quotas_.end()) return;  // Usage without a quota lends nothing.
  const Quota& q = quota->second;
  const int64_t used = UsedMilli(q.team, q.pool, q.gpu_model);
  CohortUse& use = cohort_use_[CohortKey{CohortOf(q.team), q.pool, q.gpu_model}];
  use.lendable += sign * q.lendable_milli();
  use.shared_used += sign * std::max<int64_t>(0, used - q.guaranteed_milli());
}

}  // namespace arbiter::core
