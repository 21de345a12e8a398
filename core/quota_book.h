// QuotaBook: teams, their quotas and cohorts, and what each team holds
// against each quota. A part of core::State, which checks that a quota names
// a known pool and model before it is kept here. Team and Quota are their
// own change types (core/model.h): a team is inserted, a quota upserted.
//
// Every lookup a decision makes costs what it touches, not the size of the
// organisation: quotas are indexed by (team, pool, model); each team's
// cohort is resolved when the team is loaded (parents never change); and
// each cohort's use of a pool and model (what
// it lends, and how much of that is in use) is kept as a running sum that
// every quota change and every charge updates.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

#include "core/model.h"

namespace arbiter::core {

// What a cohort lends in one pool and model, and how much of it its members
// use beyond their guaranteed share.
struct CohortUse {
  int64_t lendable = 0;
  int64_t shared_used = 0;
  bool operator==(const CohortUse&) const = default;
};

class QuotaBook {
 public:
  // FAILED_PRECONDITION for a duplicate name or an unknown parent.
  [[nodiscard]] absl::Status LoadTeam(Team team);
  // Sets or replaces the quota of (team, pool, model).
  // REQUIRES: quota.team is loaded.
  void PutQuota(Quota quota);

  const Team* FindTeam(const std::string& name) const;
  const std::map<std::string, Team>& teams() const { return teams_; }
  // The cohort `team` belongs to: the name of its root team.
  // REQUIRES: `team` is loaded.
  const std::string& CohortOf(const std::string& team) const;

  // The quota of `team` in `pool` for `gpu_model` ("" the pool-wide one),
  // or nullptr when none is set.
  const Quota* FindQuota(const std::string& team, const std::string& pool,
                         const std::string& gpu_model = "") const;
  // Every quota of `team` in `pool`: per-model ones by model name, then the
  // pool-wide one.
  std::vector<const Quota*> QuotasOf(const std::string& team, const std::string& pool) const;
  // The use of the quotas of `cohort` in `pool` for `gpu_model`.
  CohortUse CohortUseOf(const std::string& cohort, const std::string& pool,
                        const std::string& gpu_model) const;

  // Milli-GPU held by `team` in `pool`: in all, or charged to its quota for
  // `gpu_model`.
  int64_t UsedMilli(const std::string& team, const std::string& pool) const;
  int64_t UsedMilli(const std::string& team, const std::string& pool,
                    const std::string& gpu_model) const;
  // Adds `milli` (negative to free) to what `team` holds in `pool` against
  // its quota for `gpu_model`. REQUIRES: `team` is loaded.
  void Charge(const std::string& team, const std::string& pool, const std::string& gpu_model,
              int64_t milli);

 private:
  using QuotaKey = std::tuple<std::string, std::string, std::string>;   // Team, pool, model.
  using CohortKey = std::tuple<std::string, std::string, std::string>;  // Cohort, pool, model.

  // Adds (`sign` +1) or removes (-1) what the quota and usage of `key`
  // contribute to its cohort's use.
  void Contribute(const QuotaKey& key, int sign);

  std::map<std::string, Team> teams_;
  absl::flat_hash_map<std::string, std::string> cohort_of_;  // Team -> root team.
  std::map<QuotaKey, Quota> quotas_;
  std::map<QuotaKey, int64_t> used_milli_;
  std::map<std::pair<std::string, std::string>, int64_t> used_pool_milli_;
  std::map<CohortKey, CohortUse> cohort_use_;
};

}  // namespace arbiter::core
