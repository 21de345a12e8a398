#include "core/model_sizing.h"

#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "tests/core/test_state.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::AddNode;
using ::arbiter::testing::IsOk;
using ::arbiter::testing::IsOkAndHolds;
using ::arbiter::testing::kT0;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::MakeState;
using ::arbiter::testing::StatusIs;
using ::arbiter::testing::WholeSpec;
using ::testing::StartsWith;

// An 8B-parameter FP16 model, 32 layers of 8 KV heads x 128, FP16 cache for
// 32768 tokens, 2 GiB overhead: 15258.8 + 4096 + 2048 MiB.
ModelProfile Llama8B() { return {8'000'000'000, 2000, 32, 8, 128, 2000, 32768, 2048}; }

CapacityRequestSpec ModelSpec(const std::string& key, const ModelProfile& m) {
  CapacityRequestSpec spec = WholeSpec(key, 1, 1);
  spec.model_profile = m;
  return spec;
}

TEST(ModelSizingTest, AddsWeightsKvCacheAndOverhead) {
  EXPECT_THAT(ModelMemoryMib(Llama8B()), IsOkAndHolds(21403));
  ModelProfile no_cache = {1'000'000'000, 500, 0, 0, 0, 0, 0, 0};  // 4-bit, 1B.
  EXPECT_THAT(ModelMemoryMib(no_cache), IsOkAndHolds(477));
  ModelProfile absurd = {100'000'000'000'000, 8000, 10'000, 10'000, 100'000, 8000,
                         1'000'000'000,       0};
  EXPECT_THAT(ModelMemoryMib(absurd),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("shape.model_profile:")));
}

TEST(ModelSizingTest, ChoosesTheCheapestForm) {
  State s = MakeState();
  AddNode(s, MakeNode("h", 2, "H100-80GB"));
  // 21403 MiB: a 262-milli fraction is cheaper than a 454-milli 3g.40gb.
  auto form = ChooseGpuForm(s, ModelSpec("a", Llama8B()), 21403);
  ASSERT_THAT(form, IsOk());
  EXPECT_EQ(std::get<GpuFraction>(*form), (GpuFraction{262, 21403}));
  // 9000 MiB: a 110-milli fraction is cheaper than a 1g.10gb (121 milli).
  form = ChooseGpuForm(s, ModelSpec("b", Llama8B()), 9000);
  ASSERT_THAT(form, IsOk());
  EXPECT_EQ(std::get<GpuFraction>(*form).gpu_milli, 110);
  // 140 GB of weights: two whole H100s.
  form = ChooseGpuForm(s, ModelSpec("c", Llama8B()), 140'000);
  ASSERT_THAT(form, IsOk());
  EXPECT_EQ(std::get<int32_t>(*form), 2);
}

TEST(ModelSizingTest, ChoosesMigWhenItIsCheaper) {
  State s = MakeState();
  AddNode(s, MakeNode("h", 1, "H100-80GB"));
  // 40000 MiB: a 3g.40gb instance (454 milli) is cheaper than a fraction
  // with that memory (489 milli).
  auto form = ChooseGpuForm(s, ModelSpec("a", Llama8B()), 40000);
  ASSERT_THAT(form, IsOk());
  ASSERT_TRUE(std::holds_alternative<MigShape>(*form));
  EXPECT_EQ(std::get<MigShape>(*form).profile, "3g.40gb");
  EXPECT_EQ(std::get<MigShape>(*form).milli, 454);
}

TEST(ModelSizingTest, RequestWithAModelProfileIsPlacedInTheChosenForm) {
  State s = MakeState();
  AddNode(s, MakeNode("h", 2, "H100-80GB"));
  ChangeSet ch;
  auto out = RequestCapacity(s, ModelSpec("m", Llama8B()), kT0, ch);
  ASSERT_THAT(out, IsOk());
  ASSERT_EQ(out->request.state, RequestState::kAdmitted);
  EXPECT_EQ(out->request.spec.shape.fraction(), (GpuFraction{262, 21403}));
  EXPECT_EQ(s.UsedMilli("t", "serving"), 262);
  // The same model again is a replay; a different one is a different body.
  auto replay = RequestCapacity(s, ModelSpec("m", Llama8B()), kT0, ch);
  ASSERT_THAT(replay, IsOk());
  EXPECT_TRUE(replay->replayed);
  ModelProfile bigger = Llama8B();
  bigger.token_budget *= 2;
  EXPECT_THAT(RequestCapacity(s, ModelSpec("m", bigger), kT0, ch),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ModelProfile bad = Llama8B();
  bad.bytes_per_parameter_milli = 0;
  EXPECT_THAT(RequestCapacity(s, ModelSpec("x", bad), kT0, ch),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("shape.model_profile.bytes_per_parameter_milli:")));
}

}  // namespace
}  // namespace arbiter::core
