// Arbiter's quotas as Slurm association limits (clients/slurm/limits.h).
#include "clients/slurm/limits.h"

#include <gtest/gtest.h>

namespace arbiter::slurm {
namespace {

const std::map<std::string, std::string> kTypes = {{"H100-80GB", "h100"}, {"A100-80GB", "a100"}};

TEST(GrpTresForTest, SumsNominalAndBorrowingOverTheClustersPoolsInWholeGpus) {
  const std::vector<QuotaLine> quotas = {
      {"research", "gpu", "", 4000, std::nullopt},
      {"research", "debug", "", 1500, 500},
      {"research", "cloud", "", 64000, std::nullopt},  // Not a partition here.
      {"vision", "gpu", "", 2000, 6000},
      {"vision", "gpu", "H100-80GB", 2500, std::nullopt},
  };
  const auto limits = GrpTresFor(quotas, {"gpu", "debug"}, kTypes);
  EXPECT_EQ(limits.at("research"), (TresLimits{{"gres/gpu", 6}}));
  EXPECT_EQ(limits.at("vision"), (TresLimits{{"gres/gpu", 8}, {"gres/gpu:h100", 3}}));
}

TEST(GrpTresForTest, UnlimitedBorrowingIsNoLimit) {
  const auto limits = GrpTresFor({{"t", "gpu", "", 4000, -1}, {"t", "debug", "", 1000, 0}},
                                 {"gpu", "debug"}, kTypes);
  EXPECT_EQ(limits.at("t"), (TresLimits{{"gres/gpu", -1}}));
}

TEST(GrpTresForTest, AModelWithoutASlurmTypeIsLeftOut) {
  const auto limits = GrpTresFor({{"t", "gpu", "MI300X", 8000, std::nullopt}}, {"gpu"}, kTypes);
  EXPECT_TRUE(limits.empty());
}

TEST(ParseTresTest, ReadsWhatSacctmgrPrints) {
  EXPECT_EQ(ParseTres("cpu=8,gres/gpu:h100=6,gres/gpu=4"),
            (TresLimits{{"cpu", 8}, {"gres/gpu:h100", 6}, {"gres/gpu", 4}}));
  EXPECT_TRUE(ParseTres("").empty());
  EXPECT_EQ(ParseTres("bad,gres/gpu=x,gres/gpu=2"), (TresLimits{{"gres/gpu", 2}}));
}

TEST(TresChangeTest, NothingWhenEqual) {
  EXPECT_EQ(TresChange({{"gres/gpu", 4}, {"cpu", 8}}, {{"gres/gpu", 4}}), "");
  EXPECT_EQ(TresChange({}, {}), "");
  EXPECT_EQ(TresChange({}, {{"gres/gpu", -1}}), "");  // No limit either way.
}

TEST(TresChangeTest, SetsWhatChangedAndClearsGpuLimitsNoLongerWanted) {
  EXPECT_EQ(TresChange({{"gres/gpu", 4}, {"gres/gpu:a100", 2}, {"cpu", 8}},
                       {{"gres/gpu", 6}, {"gres/gpu:h100", 1}}),
            "gres/gpu=6,gres/gpu:a100=-1,gres/gpu:h100=1");
}

}  // namespace
}  // namespace arbiter::slurm
