// QuotaBook: teams, their quotas and cohorts, and what each team holds
// against each quota. A part of core::State, which checks that a quota names
// a known pool and model before it is kept here. Team and Quota are their
// own change types (core/model.h): a team is inserted, a quota upserted.
//
// Every lookup a decision makes costs what it touches, not the size of the
// organisation: quotas are indexed by (team, pool, model); each team's
// cohort is resolved when the team is loaded (parents never change); and
// each subtree's use of a pool and model (what its teams lend, and how much
// of that is in use) is kept as a running sum that every quota change and
// every charge updates along the path to the root: O(depth).
//
// Nested cohorts. Every team heads the cohort of its subtree. For one pool
// and model, a team's own quota lends `lendable` and uses `max(0, used -
// guaranteed)` of what is lent; a subtree S pools what its members lend:
//   pooled(S) = lendable(own) + sum over child subtrees C of up(C)
//   shared(S) = shared(own)   + sum over child subtrees C of over(C)
// where, with S's cohort lending limit LL (kept(S) = max(0, pooled(S) - LL),
// 0 without a limit):
//   up(S)   = pooled(S) - kept(S)          what S lends to its parent
//   over(S) = max(0, shared(S) - kept(S))  what S uses of its parent's pool.
// A charge fits when, on the path from the team to its root, every subtree
// with a cohort borrowing limit BL keeps shared(S) <= pooled(S) + BL, and
// the root keeps shared <= pooled. Without cohort limits kept is 0
// everywhere, and the root's sums are the flat cohort's (what its teams
// lend, and their use beyond what they keep).
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
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"

#include "core/model.h"

namespace arbiter::core {

// What a subtree's teams lend in one pool and model (`lendable`, pooled(S)
// above), and how much of it is in use (`shared_used`, shared(S)).
struct CohortUse {
  int64_t lendable = 0;
  int64_t shared_used = 0;
  bool operator==(const CohortUse&) const = default;
};

// Whether a change of one team's use fits every cohort on its path; when it
// does not, the first subtree it would overrun, from the team up.
struct CohortFit {
  bool ok = true;
  std::string cohort;            // The team heading the subtree overrun.
  bool borrowing_limit = false;  // Its cohort borrowing limit, not the root's pool.
  CohortUse use;                 // Its sums before the change.
  int64_t limit = 0;             // What shared use may reach there.
  int64_t after = 0;             // Shared use after the change.
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
  // Whether a loaded team is the parent of another.
  bool HasChildren(const std::string& team) const { return parents_.contains(team); }

  // The quota of `team` in `pool` for `gpu_model` ("" the pool-wide one),
  // or nullptr when none is set.
  const Quota* FindQuota(const std::string& team, const std::string& pool,
                         const std::string& gpu_model = "") const;
  // Every quota of `team` in `pool`: per-model ones by model name, then the
  // pool-wide one.
  std::vector<const Quota*> QuotasOf(const std::string& team, const std::string& pool) const;
  // The use of the quotas of the subtree `cohort` heads (a root: the whole
  // cohort) in `pool` for `gpu_model`.
  CohortUse CohortUseOf(const std::string& cohort, const std::string& pool,
                        const std::string& gpu_model) const;
  // Whether `team` using `need` more milli-GPU (negative: less) against its
  // quota for (`pool`, `gpu_model`) fits every cohort on its path.
  // REQUIRES: that quota is set.
  CohortFit FitCohorts(const std::string& team, const std::string& pool,
                       const std::string& gpu_model, int64_t need) const;
  // The subtrees from `team`'s own up to its root's.
  // REQUIRES: `team` is loaded.
  std::vector<std::string> PathOf(const std::string& team) const;

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

  // What the team's own quota and use of `key` add to its subtree's sums.
  CohortUse OwnShare(const QuotaKey& key) const;
  // What a subtree with sums `sums` and cohort lending limit
  // `cohort_lending_limit` lends to its parent and uses of its parent's
  // pool (up(S), over(S)).
  static CohortUse UpShare(int64_t cohort_lending_limit, const CohortUse& sums);
  // The cohort lending limit of the subtree `node` heads: that of its
  // quota for the key (kUnlimited without one).
  int64_t CohortLendingLimit(const std::string& node, const std::string& pool,
                             const std::string& model) const;
  // Adds `delta` to the sums of the subtree `team` heads, and what that
  // changes in its parent's, up to the root.
  void Propagate(const std::string& team, const std::string& pool, const std::string& model,
                 CohortUse delta);

  std::map<std::string, Team> teams_;
  absl::flat_hash_map<std::string, std::string> cohort_of_;  // Team -> root team.
  absl::flat_hash_set<std::string> parents_;                 // Teams with children.
  std::map<QuotaKey, Quota> quotas_;
  std::map<QuotaKey, int64_t> used_milli_;
  std::map<std::pair<std::string, std::string>, int64_t> used_pool_milli_;
  std::map<CohortKey, CohortUse> cohort_use_;
};

}  // namespace arbiter::core
