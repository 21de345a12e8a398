// The main of every test binary (arbiter_cc_test): GoogleTest's, plus one
// rule. When a suite's SetUpTestSuite fails, GoogleTest marks each of its
// tests skipped, and ctest, which reads "[  SKIPPED ]" in the output as a
// skip whatever the exit code, would count a fixture that never ran as
// passed. So the run ends at once, with status 1 and the suite named,
// before any of its tests is reported skipped.
#include <cstdio>
#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

class EndRunOnSuiteSetUpFailure final : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& test) override {
    const ::testing::TestSuite* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
    if (suite == nullptr || !suite->ad_hoc_test_result().Failed()) return;
    std::fprintf(stderr,
                 "[  FAILED  ] %s: SetUpTestSuite failed (above); %s and the rest of the suite "
                 "did not run\n",
                 suite->name(), test.name());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleMock(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new EndRunOnSuiteSetUpFailure);
  return RUN_ALL_TESTS();
}
