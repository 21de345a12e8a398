// Runs every scenario under tests/core/scenarios/ as its own test.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "tests/core/scenario_runner.h"

namespace arbiter::testing {
namespace {

std::vector<std::string> ScenarioFiles() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(ARBITER_SCENARIO_DIR)) {
    if (entry.path().extension() == ".scenario") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class ScenarioTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ScenarioTest, Holds) { RunScenarioFile(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Scenarios, ScenarioTest, ::testing::ValuesIn(ScenarioFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = std::filesystem::path(info.param).stem().string();
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(ScenarioFilesTest, ThereAreScenarios) { EXPECT_GE(ScenarioFiles().size(), 5u); }

}  // namespace
}  // namespace arbiter::testing
