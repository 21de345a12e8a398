#include "core/validate.h"

#include "gtest/gtest.h"

#include "tests/core/test_state.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::StatusIs;
using ::arbiter::testing::WholeSpec;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ValidateNameTest, AcceptsIdentifiers) {
  EXPECT_THAT(ValidateName("team", "ml-platform_2.a"), IsOk());
}

TEST(ValidateNameTest, RejectsEmptyLongAndOddNames) {
  EXPECT_THAT(ValidateName("team", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("team: must not be empty")));
  EXPECT_THAT(ValidateName("team", std::string(65, 'a')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 64")));
  EXPECT_THAT(ValidateName("team", "-x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateName("team", "a'; DROP TABLE teams;--"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateName("team", std::string("a\0b", 3)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ValidateDescriptionTest, RejectsInvalidUtf8AndControls) {
  EXPECT_THAT(ValidateDescription("description", "GPU für Tests ✓"), IsOk());
  EXPECT_THAT(ValidateDescription("description", "\xc3\x28"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("UTF-8")));
  EXPECT_THAT(ValidateDescription("description", "\xed\xa0\x80"),  // Surrogate.
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateDescription("description", "\xc0\xaf"),  // Overlong '/'.
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateDescription("description", "line\nbreak"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateDescription("description", std::string(257, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 256")));
}

struct BadSpecCase {
  const char* name;
  void (*mutate)(CapacityRequestSpec&);
  const char* field;
};

class BadRequestSpecTest : public ::testing::TestWithParam<BadSpecCase> {};

TEST_P(BadRequestSpecTest, NamesTheField) {
  CapacityRequestSpec spec = ::arbiter::testing::WholeSpec("k", 1, 1);
  ASSERT_THAT(ValidateRequestSpec(spec), IsOk());
  GetParam().mutate(spec);
  EXPECT_THAT(ValidateRequestSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  StartsWith(std::string(GetParam().field) + ":")));
}

INSTANTIATE_TEST_SUITE_P(
    Fields, BadRequestSpecTest,
    ::testing::Values(
        BadSpecCase{"EmptyKey", [](CapacityRequestSpec& s) { s.idempotency_key = ""; },
                    "idempotency_key"},
        BadSpecCase{"LongKey",
                    [](CapacityRequestSpec& s) { s.idempotency_key = std::string(129, 'k'); },
                    "idempotency_key"},
        BadSpecCase{"KeyWithSpace", [](CapacityRequestSpec& s) { s.idempotency_key = "a b"; },
                    "idempotency_key"},
        BadSpecCase{"EmptyTeam", [](CapacityRequestSpec& s) { s.team = ""; }, "team"},
        BadSpecCase{"EmptyPool", [](CapacityRequestSpec& s) { s.pool = ""; }, "pool"},
        BadSpecCase{"UnspecifiedClass",
                    [](CapacityRequestSpec& s) { s.workload_class = WorkloadClass::kUnspecified; },
                    "workload_class"},
        BadSpecCase{
            "OutOfRangeClass",
            [](CapacityRequestSpec& s) { s.workload_class = static_cast<WorkloadClass>(5); },
            "workload_class"},
        BadSpecCase{"ZeroMembers", [](CapacityRequestSpec& s) { s.members = 0; }, "members"},
        BadSpecCase{"NegativeMembers", [](CapacityRequestSpec& s) { s.members = -3; }, "members"},
        BadSpecCase{"TooManyMembers", [](CapacityRequestSpec& s) { s.members = 1025; }, "members"},
        BadSpecCase{"ZeroGpus", [](CapacityRequestSpec& s) { s.shape.gpu = int32_t{0}; },
                    "shape.whole_gpus"},
        BadSpecCase{"HugeGpus", [](CapacityRequestSpec& s) { s.shape.gpu = int32_t{1 << 30}; },
                    "shape.whole_gpus"},
        BadSpecCase{"ZeroFraction",
                    [](CapacityRequestSpec& s) {
                      s.shape.gpu = GpuFraction{0, 100};
                    },
                    "shape.fraction.gpu_milli"},
        BadSpecCase{"FractionOverOne",
                    [](CapacityRequestSpec& s) {
                      s.shape.gpu = GpuFraction{1001, 100};
                    },
                    "shape.fraction.gpu_milli"},
        BadSpecCase{"NegativeFraction",
                    [](CapacityRequestSpec& s) {
                      s.shape.gpu = GpuFraction{-5, 100};
                    },
                    "shape.fraction.gpu_milli"},
        BadSpecCase{"ZeroFractionMemory",
                    [](CapacityRequestSpec& s) {
                      s.shape.gpu = GpuFraction{500, 0};
                    },
                    "shape.fraction.memory_mib"},
        BadSpecCase{"OverflowingMemory",
                    [](CapacityRequestSpec& s) {
                      s.shape.gpu = GpuFraction{500, std::numeric_limits<int64_t>::max()};
                    },
                    "shape.fraction.memory_mib"},
        BadSpecCase{"NegativeCpu", [](CapacityRequestSpec& s) { s.shape.cpu_milli = -1; },
                    "shape.cpu_milli"},
        BadSpecCase{"NegativeHostMemory", [](CapacityRequestSpec& s) { s.shape.memory_mib = -1; },
                    "shape.memory_mib"},
        BadSpecCase{"BadModelName",
                    [](CapacityRequestSpec& s) {
                      s.gpu_models = {"H100", "bad name"};
                    },
                    "gpu_models[1]"},
        BadSpecCase{"TooManyModels",
                    [](CapacityRequestSpec& s) { s.gpu_models.assign(17, "H100"); }, "gpu_models"},
        BadSpecCase{"BadDescription", [](CapacityRequestSpec& s) { s.description = "\xff"; },
                    "description"}),
    [](const ::testing::TestParamInfo<BadSpecCase>& info) { return info.param.name; });

TEST(ValidateNodeTest, NamesBadGpuFields) {
  Node n = ::arbiter::testing::MakeNode("n1", 2, "H100-80GB");
  ASSERT_THAT(ValidateNode(n), IsOk());
  n.gpus[1].index = 5;
  EXPECT_THAT(ValidateNode(n),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("node.gpus[1].index:")));
  n.gpus.clear();
  EXPECT_THAT(ValidateNode(n),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("node.gpus:")));
}

}  // namespace
}  // namespace arbiter::core
