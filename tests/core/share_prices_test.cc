#include "core/share_prices.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"

#include "core/linear_program.h"
#include "core/placement.h"
#include "tests/core/test_state.h"

namespace arbiter::core {
namespace {

using Outcome = LpSolution::Outcome;

TEST(LinearProgramTest, SolvesATextbookProgram) {
  // max 3x + 5y; x <= 4, 2y <= 12, 3x + 2y <= 18: optimum (2, 6), 36.
  LinearProgram lp{{3, 5}, {{1, 0}, {0, 2}, {3, 2}}, {4, 12, 18}};
  LpSolution s = Maximize(lp);
  ASSERT_EQ(s.outcome, Outcome::kOptimal);
  EXPECT_NEAR(s.x[0], 2, 1e-9);
  EXPECT_NEAR(s.x[1], 6, 1e-9);
  EXPECT_NEAR(s.value, 36, 1e-9);
}

TEST(LinearProgramTest, DoesNotCycleOnBealesDegenerateProgram) {
  // Beale's example cycles under the textbook largest-coefficient rule.
  LinearProgram lp{
      {0.75, -20, 0.5, -6}, {{0.25, -8, -1, 9}, {0.5, -12, -0.5, 3}, {0, 0, 1, 0}}, {0, 0, 1}};
  LpSolution s = Maximize(lp);
  ASSERT_EQ(s.outcome, Outcome::kOptimal);
  EXPECT_NEAR(s.value, 1.25, 1e-9);
}

TEST(LinearProgramTest, ReportsAnUnboundedProgram) {
  LinearProgram lp{{1, 1}, {{1, -1}}, {1}};
  EXPECT_EQ(Maximize(lp).outcome, Outcome::kUnbounded);
}

TEST(LinearProgramTest, StopsAtThePivotLimitWithAFeasiblePoint) {
  LinearProgram lp{{3, 5}, {{1, 0}, {0, 2}, {3, 2}}, {4, 12, 18}};
  LpSolution s = Maximize(lp, 1);
  EXPECT_EQ(s.outcome, Outcome::kIterationLimit);
  EXPECT_LT(s.value, 36);
}

// The best vertex of a 3-variable program, by trying every 3 of its
// constraints (x >= 0 included) as equalities.
double BruteForceMax(const LinearProgram& lp) {
  std::vector<std::vector<double>> rows = lp.constraints;
  std::vector<double> rhs = lp.bounds;
  for (int j = 0; j < 3; ++j) {
    std::vector<double> r(3, 0.0);
    r[j] = -1;
    rows.push_back(r);
    rhs.push_back(0);
  }
  double best = -1e300;
  const size_t n = rows.size();
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      for (size_t c = b + 1; c < n; ++c) {
        // Cramer's rule on the 3x3 system.
        auto det = [](const std::vector<double>& p, const std::vector<double>& q,
                      const std::vector<double>& r) {
          return p[0] * (q[1] * r[2] - q[2] * r[1]) - p[1] * (q[0] * r[2] - q[2] * r[0]) +
                 p[2] * (q[0] * r[1] - q[1] * r[0]);
        };
        const double d = det(rows[a], rows[b], rows[c]);
        if (std::fabs(d) < 1e-9) continue;
        std::vector<double> x(3);
        for (int j = 0; j < 3; ++j) {
          std::vector<double> p = rows[a], q = rows[b], r = rows[c];
          p[j] = rhs[a];
          q[j] = rhs[b];
          r[j] = rhs[c];
          x[j] = det(p, q, r) / d;
        }
        bool feasible = true;
        for (size_t i = 0; i < n && feasible; ++i) {
          double lhs = 0;
          for (int j = 0; j < 3; ++j) lhs += rows[i][j] * x[j];
          feasible = lhs <= rhs[i] + 1e-7;
        }
        if (!feasible) continue;
        double v = 0;
        for (int j = 0; j < 3; ++j) v += lp.objective[j] * x[j];
        best = std::max(best, v);
      }
    }
  }
  return best;
}

TEST(LinearProgramTest, MatchesVertexEnumerationOnRandomBoundedPrograms) {
  const unsigned seed = std::random_device{}();
  std::printf("LinearProgramTest seed %u\n", seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> coef(0, 6), obj(-2, 6), bound(0, 12), rows(1, 5);
  for (int t = 0; t < 300; ++t) {
    LinearProgram lp;
    for (int j = 0; j < 3; ++j) lp.objective.push_back(obj(rng));
    const int m = rows(rng);
    for (int i = 0; i < m; ++i) {
      lp.constraints.push_back({double(coef(rng)), double(coef(rng)), double(coef(rng))});
      lp.bounds.push_back(bound(rng));
    }
    // x_j <= 10 keeps every program bounded.
    for (int j = 0; j < 3; ++j) {
      std::vector<double> r(3, 0.0);
      r[j] = 1;
      lp.constraints.push_back(r);
      lp.bounds.push_back(10);
    }
    LpSolution s = Maximize(lp);
    ASSERT_EQ(s.outcome, Outcome::kOptimal) << "seed " << seed << " program " << t;
    EXPECT_NEAR(s.value, BruteForceMax(lp), 1e-6) << "seed " << seed << " program " << t;
  }
}

SharePrices PricesOf(const std::vector<std::pair<int64_t, int64_t>>& mix) {
  DemandProfile profile;
  for (const auto& [milli, count] : mix) profile.Observe({1, milli, 1000, 0}, count);
  profile.Observe({2, 1000, 0, 0}, 50);  // Whole-GPU work is not priced.
  SharePrices prices;
  prices.Reset(profile);
  return prices;
}

TEST(SharePricesTest, PricesBigFractionsAtAGpuAndScarceFillersAtNothing) {
  // Every 810 needs a GPU of its own; the 160s are too few to fill their holes.
  SharePrices p = PricesOf({{810, 100}, {160, 10}});
  EXPECT_NEAR(p.Price(810), 1.0, 1e-9);
  EXPECT_NEAR(p.Price(160), 0.0, 1e-9);
  EXPECT_NEAR(p.HoleValue(1000), 1.0, 1e-9);
}

TEST(SharePricesTest, PricesPairsAndTriples) {
  EXPECT_NEAR(PricesOf({{500, 7}}).Price(500), 0.5, 1e-9);
  // 650 pairs with one 320; the 320s left over go three to a GPU.
  SharePrices p = PricesOf({{650, 10}, {320, 30}});
  EXPECT_NEAR(p.Price(320), 1.0 / 3, 1e-9);
  EXPECT_NEAR(p.Price(650), 2.0 / 3, 1e-9);
  EXPECT_NEAR(p.HoleValue(350), 1.0 / 3, 1e-9);
  EXPECT_NEAR(p.HoleValue(300), 0.0, 1e-9);
}

TEST(SharePricesTest, A320LosesValueBesideA470ButNotBesideA650) {
  SharePrices p = PricesOf({{650, 10}, {470, 40}, {320, 30}});
  EXPECT_NEAR(p.Loss(350, 320), 0.0, 1e-9);   // Beside a 650: 30 left, nothing lost.
  EXPECT_NEAR(p.Loss(1000, 320), 0.0, 1e-9);  // On an empty GPU: room for a 650.
  EXPECT_GT(p.Loss(530, 320), 0.1);           // Beside a 470: a 210 hole nothing fills.
  EXPECT_NEAR(p.Loss(530, 470), 0.0, 1e-9);
}

TEST(SharePricesTest, NoPatternIsWorthMoreThanAGpuAndNoLossIsNegative) {
  const unsigned seed = std::random_device{}();
  std::printf("SharePricesTest seed %u\n", seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> size(1, 99), count(1, 200), kinds(1, 12);
  for (int t = 0; t < 40; ++t) {
    std::vector<std::pair<int64_t, int64_t>> mix;
    for (int64_t k = kinds(rng); k > 0; --k) mix.push_back({size(rng) * 10, count(rng)});
    SharePrices p = PricesOf(mix);
    // HoleValue(1000) is the best pattern's worth: at most one GPU, and one
    // GPU exactly, since some pattern binds at the optimum.
    EXPECT_NEAR(p.HoleValue(1000), 1.0, 1e-6) << "seed " << seed << " mix " << t;
    // The prices are an LP optimum: no smaller than the volume bound.
    double priced = 0, volume = 0;
    for (const auto& [milli, n] : mix) {
      priced += static_cast<double>(n) * p.Price(milli);
      volume += static_cast<double>(n * milli) / 1000.0;
    }
    EXPECT_GE(priced, volume - 1e-6) << "seed " << seed << " mix " << t;
    for (int64_t had = 10; had <= 1000; had += 10) {
      for (int64_t take = 10; take <= had; take += 10) {
        ASSERT_GE(p.Loss(had, take), -1e-9)
            << "seed " << seed << " had " << had << " take " << take;
      }
    }
  }
}

// 650s ask 4 cores and 1,024 MiB; 320s 3 cores and 1,024 MiB (10) or 2 cores
// and 2,048 MiB (20): their mean ask is 2,333 cores and 1,707 MiB.
DemandProfile HostAskProfile() {
  DemandProfile profile;
  profile.Observe({1, 650, 4000, 1024}, 10);
  profile.Observe({1, 320, 3000, 1024}, 10);
  profile.Observe({1, 320, 2000, 2048}, 20);
  return profile;
}

TEST(SharePricesTest, AHoleTheHostCannotFeedIsWorthNothing) {
  SharePrices p;
  p.Reset(HostAskProfile());
  ASSERT_NEAR(p.HoleValue(350), 1.0 / 3, 1e-9);
  using Free = std::vector<int64_t>;
  EXPECT_NEAR(p.FedHolesValue(Free{350}, 64000, 64000), 1.0 / 3, 1e-9);
  // A 320's mean ask, and one milli-core or MiB short of it.
  EXPECT_NEAR(p.FedHolesValue(Free{350}, 2333, 1707), 1.0 / 3, 1e-9);
  EXPECT_NEAR(p.FedHolesValue(Free{350}, 2333, 1706), 0.0, 1e-9);
  EXPECT_NEAR(p.FedHolesValue(Free{350}, 2332, 64000), 0.0, 1e-9);
  // Full and empty GPUs are not holes.
  EXPECT_NEAR(p.FedHolesValue(Free{0, 1000}, 64000, 64000), 0.0, 1e-9);
}

TEST(SharePricesTest, HolesShareTheHostThatFeedsThem) {
  SharePrices p;
  p.Reset(HostAskProfile());
  using Free = std::vector<int64_t>;
  // Two 350 holes need two 320s' asks; with one milli-core less, one is fed.
  EXPECT_NEAR(p.FedHolesValue(Free{350, 350}, 4666, 3414), 2.0 / 3, 1e-9);
  EXPECT_NEAR(p.FedHolesValue(Free{350, 350}, 4665, 3414), 1.0 / 3, 1e-9);
  // The largest hole is fed first: the 680 hole takes a 320's or a 650's
  // ask of the 4 cores, and the 350 hole is left less than a 320 asks.
  ASSERT_NEAR(p.HoleValue(680), 2.0 / 3, 1e-9);
  EXPECT_NEAR(p.FedHolesValue(Free{350, 680}, 4000, 64000), 2.0 / 3, 1e-9);
}

TEST(SharePricesTest, AnEmptyGpuSetsAsideTheWholeGpuShareOfTheHost) {
  DemandProfile profile = HostAskProfile();
  // Whole-GPU work: 8 cores and 4,096 MiB per GPU on the mean.
  profile.Observe({1, 1000, 6000, 4096}, 2);
  profile.Observe({2, 1000, 20000, 8192}, 1);
  SharePrices p;
  p.Reset(profile);
  using Free = std::vector<int64_t>;
  EXPECT_NEAR(p.FedHolesValue(Free{350, 1000}, 8000 + 2333, 4096 + 1707), 1.0 / 3, 1e-9);
  EXPECT_NEAR(p.FedHolesValue(Free{350, 1000}, 8000 + 2332, 64000), 0.0, 1e-9);
  EXPECT_NEAR(p.FedHolesValue(Free{350}, 2333, 1707), 1.0 / 3, 1e-9);
  // FeedsAll: each hole the largest mean ask (the 650's 4 cores; the 320s'
  // 1,707 MiB), each empty GPU the whole-GPU share.
  EXPECT_TRUE(p.FeedsAll(2, 1, 2 * 4000 + 8000, 2 * 1707 + 4096));
  EXPECT_FALSE(p.FeedsAll(2, 1, 2 * 4000 + 8000 - 1, 2 * 1707 + 4096));
  EXPECT_FALSE(p.FeedsAll(2, 1, 2 * 4000 + 8000, 2 * 1707 + 4096 - 1));
}

TEST(SharePricesTest, AHostThatFeedsAllGivesEveryHoleItsValue) {
  std::mt19937 rng(7);
  const int64_t sizes[] = {110, 230, 320, 470, 650, 810};
  for (int trial = 0; trial < 50; ++trial) {
    DemandProfile profile;
    for (int64_t s : sizes) {
      profile.Observe({1, s, 1000 * (1 + static_cast<int64_t>(rng() % 12)),
                       1024 * (1 + static_cast<int64_t>(rng() % 8))},
                      1 + static_cast<int64_t>(rng() % 50));
    }
    profile.Observe({1, 1000, 1000 * (1 + static_cast<int64_t>(rng() % 16)), 8192}, 20);
    SharePrices p;
    p.Reset(profile);
    std::vector<int64_t> free;
    int64_t holes = 0;
    int64_t empty_gpus = 0;
    double sum = 0;
    for (int g = 0; g < 8; ++g) {
      const int64_t f = static_cast<int64_t>(rng() % 1001);
      free.push_back(f);
      if (f == 1000) ++empty_gpus;
      if (f > 0 && f < 1000) {
        ++holes;
        sum += p.HoleValue(f);
      }
    }
    std::sort(free.begin(), free.end());
    int64_t cpu = 0;
    int64_t memory = 0;
    while (!p.FeedsAll(holes, empty_gpus, cpu, 1 << 30)) cpu += 100;
    while (!p.FeedsAll(holes, empty_gpus, cpu, memory)) memory += 64;
    EXPECT_NEAR(p.FedHolesValue(free, cpu, memory), sum, 1e-9) << "trial " << trial;
    EXPECT_LE(p.FedHolesValue(free, cpu - 100, memory), sum + 1e-9) << "trial " << trial;
  }
}

TEST(SharePricesTest, NoFractionsNoPrices) {
  DemandProfile profile;
  profile.Observe({4, 1000, 0, 0}, 3);
  SharePrices p;
  p.Reset(profile);
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(p.Loss(1000, 300), 0);
}

// A pool of one node with four GPUs. The mix is one-GPU tasks, 810s, 650s,
// 470s and 320s.
class SharePlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = ::arbiter::testing::MakeState();
    ::arbiter::testing::AddNode(state_, ::arbiter::testing::MakeNode("n", 4, "H100-80GB"));
    for (int i = 0; i < 50; ++i) state_.ObserveDemand(::arbiter::testing::WholeSpec("o1", 1, 1));
    for (int i = 0; i < 20; ++i) state_.ObserveDemand(Spec("o810", 810));
    for (int i = 0; i < 10; ++i) state_.ObserveDemand(Spec("o650", 650));
    for (int i = 0; i < 40; ++i) state_.ObserveDemand(Spec("o470", 470));
    for (int i = 0; i < 30; ++i) state_.ObserveDemand(Spec("o320", 320));
  }

  static CapacityRequestSpec Spec(const std::string& key, int64_t milli) {
    return ::arbiter::testing::FractionSpec(key, 1, milli, 1024);
  }

  // Places a fraction (PlaceGang applies it) and returns its GPU index.
  int32_t Place(const std::string& key, int64_t milli) {
    GangPlacement g = PlaceGang(state_, Spec(key, milli));
    EXPECT_EQ(g.result, FitResult::kPlaced) << key;
    if (g.result != FitResult::kPlaced) return -1;
    return g.placements[0].gpu_indices[0];
  }

  State state_;
};

TEST_F(SharePlacementTest, A320JoinsThe650NotThe470) {
  const int32_t with_470 = Place("a", 470);
  const int32_t with_650 = Place("b", 650);
  ASSERT_NE(with_470, with_650);
  EXPECT_EQ(Place("c", 320), with_650);
}

TEST_F(SharePlacementTest, A320OpensAnEmptyGpuRatherThanStrandA470sHole) {
  // Best fit, and FGD's fragmentation growth, would put the 320 beside the
  // 470: the 530 hole is useless to whole GPUs and 810s anyway, while a 680
  // hole on an empty GPU is new fragmentation for them. But the 210 left
  // beside the 470 is lost for good, and a 650 will fill the 680.
  const int32_t with_470 = Place("a", 470);
  const int32_t c = Place("c", 320);
  EXPECT_NE(c, with_470);
  // The 470's hole stays for another 470.
  EXPECT_EQ(Place("d", 470), with_470);
}

// Two nodes of two GPUs: "poor" (H100s) with little CPU, "rich" (A100s)
// with 64 cores. The mix: 650s, 320s that pair with them, and whole GPUs,
// none limited to a model, each kind asking its own CPU.
class FedHolePlacementTest : public ::testing::Test {
 protected:
  void Make(int64_t poor_cpu, int64_t cpu_650, int64_t cpu_320, int64_t cpu_whole) {
    state_ = ::arbiter::testing::MakeState();
    ::arbiter::testing::AddNode(
        state_, ::arbiter::testing::MakeNode("poor", 2, "H100-80GB", "serving", poor_cpu));
    ::arbiter::testing::AddNode(state_, ::arbiter::testing::MakeNode("rich", 2, "A100-40GB"));
    // 64 tasks: the packer's models are made again after the 32nd and the
    // 64th (PackingModel's epoch), so the last snapshot holds them all.
    for (int i = 0; i < 10; ++i) state_.ObserveDemand(Fraction("o650", 650, cpu_650));
    for (int i = 0; i < 30; ++i) state_.ObserveDemand(Fraction("o320", 320, cpu_320));
    for (int i = 0; i < 24; ++i) state_.ObserveDemand(Whole("o1", cpu_whole));
  }

  static CapacityRequestSpec Fraction(const std::string& key, int64_t milli, int64_t cpu) {
    CapacityRequestSpec spec = ::arbiter::testing::FractionSpec(key, 1, milli, 1024);
    spec.shape.cpu_milli = cpu;
    return spec;
  }
  static CapacityRequestSpec Whole(const std::string& key, int64_t cpu) {
    CapacityRequestSpec spec = ::arbiter::testing::WholeSpec(key, 1, 1);
    spec.shape.cpu_milli = cpu;
    return spec;
  }

  // Places `spec` (PlaceGang applies it) and returns its node's name.
  std::string Place(const CapacityRequestSpec& spec) {
    GangPlacement g = PlaceGang(state_, spec);
    EXPECT_EQ(g.result, FitResult::kPlaced) << spec.idempotency_key;
    if (g.result != FitResult::kPlaced) return "";
    return state_.FindNode(g.placements[0].node_id)->name;
  }

  State state_;
};

TEST_F(FedHolePlacementTest, AWholeGpuLeavesTheCpuThatAHoleNeeds) {
  // 650s and whole GPUs of 4 cores, 320s of 2; "poor" has 9 cores. A 650
  // on each node (each limited to the node's model); a whole GPU on "poor"
  // would leave 1 core there and strand the 650's hole.
  Make(9'000, 4'000, 2'000, 4'000);
  CapacityRequestSpec a = Fraction("a", 650, 4'000);
  a.gpu_models = {"H100-80GB"};
  CapacityRequestSpec b = Fraction("b", 650, 4'000);
  b.gpu_models = {"A100-40GB"};
  ASSERT_EQ(Place(a), "poor");
  ASSERT_EQ(Place(b), "rich");
  EXPECT_EQ(Place(Whole("w", 4'000)), "rich");
}

}  // namespace
}  // namespace arbiter::core
