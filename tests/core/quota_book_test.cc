// QuotaBook's nested cohorts: the running sums along the tree agree with a
// computation from scratch after every change, and FitCohorts admits
// exactly the charges after which every subtree stays within its limits.
#include "core/quota_book.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace arbiter::core {
namespace {

constexpr char kPool[] = "p";

// The tree's sums recomputed from the definitions in core/quota_book.h.
struct Scratch {
  const QuotaBook& book;
  const std::map<std::string, int64_t>& used;

  int64_t Kept(const std::string& node, int64_t pooled) const {
    const Quota* q = book.FindQuota(node, kPool);
    if (q == nullptr || q->cohort_lending_limit_milli == kUnlimited) return 0;
    return std::max<int64_t>(0, pooled - q->cohort_lending_limit_milli);
  }
  CohortUse Sums(const std::string& node) const {
    CohortUse sums;
    if (const Quota* q = book.FindQuota(node, kPool); q != nullptr) {
      auto it = used.find(node);
      const int64_t u = it == used.end() ? 0 : it->second;
      sums.lendable = q->lendable_milli();
      sums.shared_used = std::max<int64_t>(0, u - q->guaranteed_milli());
    }
    for (const auto& [name, team] : book.teams()) {
      if (team.parent != node) continue;
      const CohortUse child = Sums(name);
      const int64_t kept = Kept(name, child.lendable);
      sums.lendable += child.lendable - kept;
      sums.shared_used += std::max<int64_t>(0, child.shared_used - kept);
    }
    return sums;
  }
  // Whether every subtree is within its limits.
  bool Fits() const {
    for (const auto& [name, team] : book.teams()) {
      const CohortUse s = Sums(name);
      if (team.parent.empty()) {
        if (s.shared_used > s.lendable) return false;
        continue;
      }
      const Quota* q = book.FindQuota(name, kPool);
      if (q != nullptr && q->cohort_borrowing_limit_milli != kUnlimited &&
          s.shared_used > s.lendable + q->cohort_borrowing_limit_milli) {
        return false;
      }
    }
    return true;
  }
};

TEST(QuotaBookTest, NestedSumsAndFitsAgreeWithAComputationFromScratch) {
  int64_t fits = 0, refusals = 0, by_borrowing_limit = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    std::mt19937 rng(seed);
    auto uniform = [&rng](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    QuotaBook book;
    std::vector<std::string> names;
    for (int i = 0; i < 12; ++i) {
      const std::string name = absl::StrCat("t", i);
      // Two roots; each later team under a random earlier one.
      const std::string parent = i < 2 ? "" : names[uniform(0, i - 1)];
      ASSERT_TRUE(book.LoadTeam({name, parent, 1000}).ok());
      names.push_back(name);
    }
    std::map<std::string, int64_t> used;
    auto random_quota = [&](const std::string& team) {
      Quota q{team, kPool, uniform(0, 8) * 1000};
      q.borrowing_limit_milli = kUnlimited;
      if (uniform(0, 2) == 0) q.lending_limit_milli = uniform(0, q.nominal_milli / 1000) * 1000;
      if (uniform(0, 2) == 0) q.cohort_lending_limit_milli = uniform(0, 10) * 1000;
      if (uniform(0, 2) == 0) q.cohort_borrowing_limit_milli = uniform(0, 10) * 1000;
      return q;
    };
    for (const std::string& name : names) {
      if (uniform(0, 3) != 0) book.PutQuota(random_quota(name));
    }
    for (int step = 0; step < 400; ++step) {
      const std::string& team = names[uniform(0, names.size() - 1)];
      if (book.FindQuota(team, kPool) == nullptr || uniform(0, 20) == 0) {
        book.PutQuota(random_quota(team));  // Limits change under use too.
      } else {
        const int64_t need = uniform(-2, 3) * 500;
        if (used[team] + need < 0) continue;
        Scratch scratch{book, used};
        const bool fit_before = scratch.Fits();
        const CohortFit fit = book.FitCohorts(team, kPool, "", need);
        used[team] += need;
        Scratch after{book, used};
        // From a state within every limit, FitCohorts says yes exactly
        // when the state after is within every limit too.
        if (fit_before && need > 0) {
          EXPECT_EQ(fit.ok, after.Fits()) << team << " " << need << " step " << step;
          ++(fit.ok ? fits : refusals);
          if (!fit.ok && fit.borrowing_limit) ++by_borrowing_limit;
        }
        if (!fit.ok && fit_before) {
          used[team] -= need;  // Refused: not charged.
          continue;
        }
        book.Charge(team, kPool, "", need);
      }
      Scratch scratch{book, used};
      for (const std::string& name : names) {
        ASSERT_EQ(book.CohortUseOf(name, kPool, ""), scratch.Sums(name))
            << name << " at step " << step;
      }
    }
  }
  // Both answers, and both kinds of refusal, were exercised.
  EXPECT_GT(fits, 100);
  EXPECT_GT(refusals, 100);
  EXPECT_GT(by_borrowing_limit, 10);
  EXPECT_GT(refusals - by_borrowing_limit, 10);
}

TEST(QuotaBookTest, PathRunsFromTheTeamToItsRoot) {
  QuotaBook book;
  ASSERT_TRUE(book.LoadTeam({"org", "", 1000}).ok());
  ASSERT_TRUE(book.LoadTeam({"ml", "org", 1000}).ok());
  ASSERT_TRUE(book.LoadTeam({"cv", "ml", 1000}).ok());
  EXPECT_EQ(book.PathOf("cv"), (std::vector<std::string>{"cv", "ml", "org"}));
  EXPECT_EQ(book.CohortOf("cv"), "org");
  EXPECT_TRUE(book.HasChildren("ml"));
  EXPECT_FALSE(book.HasChildren("cv"));
}

}  // namespace
}  // namespace arbiter::core
