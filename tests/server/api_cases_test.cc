// The case generator of the adversarial suite (api_cases.h): what it makes
// of a real request, and that a field added to a request message gets its
// cases without a hand-written one.
#include "tests/server/api_cases.h"

#include <algorithm>
#include <memory>
#include <set>

#include "gtest/gtest.h"
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/text_format.h>

#include "arbiter/v1/allocation.pb.h"

namespace arbiter::testing {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

v1::RequestCapacityRequest Base() {
  v1::RequestCapacityRequest r;
  r.set_idempotency_key("k");
  r.set_team("inference");
  r.set_pool("serving");
  r.set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
  r.set_members(1);
  r.mutable_shape()->mutable_fraction()->set_gpu_milli(250);
  return r;
}

const ApiCase* Find(const std::vector<ApiCase>& cases, const std::string& field, Mutation m) {
  auto it = std::find_if(cases.begin(), cases.end(),
                         [&](const ApiCase& c) { return c.field == field && c.mutation == m; });
  return it == cases.end() ? nullptr : &*it;
}

TEST(ApiCasesTest, EachCaseChangesOneFieldOfTheBase) {
  const std::vector<ApiCase> cases = GenerateCases(Base(), kNow, {"team"});
  const ApiCase* c = Find(cases, "shape.fraction.gpu_milli", Mutation::kMinusOne);
  ASSERT_NE(c, nullptr);
  v1::RequestCapacityRequest sent;
  ASSERT_TRUE(sent.ParseFromString(c->body));
  EXPECT_EQ(sent.shape().fraction().gpu_milli(), -1);
  v1::RequestCapacityRequest expected = Base();
  expected.mutable_shape()->mutable_fraction()->set_gpu_milli(-1);
  EXPECT_EQ(sent.SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(c->names, std::vector<std::string>{"gpu_milli"});

  // A number the base gives is also cleared; one it leaves 0 is not.
  EXPECT_NE(Find(cases, "members", Mutation::kZero), nullptr);
  EXPECT_EQ(Find(cases, "priority", Mutation::kZero), nullptr);
  // Only the named references get a name of nothing.
  EXPECT_NE(Find(cases, "team", Mutation::kAbsent), nullptr);
  EXPECT_EQ(Find(cases, "pool", Mutation::kAbsent), nullptr);
  // Enums, times, repeated fields and the window of a start and a duration.
  EXPECT_NE(Find(cases, "workload_class", Mutation::kUnknownEnum), nullptr);
  EXPECT_NE(Find(cases, "start_time", Mutation::kTimePast), nullptr);
  EXPECT_NE(Find(cases, "gpu_models[0]", Mutation::kOverLong), nullptr);
  const ApiCase* huge = Find(cases, "description", Mutation::kOverLong);
  ASSERT_NE(huge, nullptr);
  ASSERT_TRUE(sent.ParseFromString(huge->body));
  EXPECT_EQ(sent.description().size(), 70'000u);
}

TEST(ApiCasesTest, InvalidUtf8IsSentAsBytesThatDoNotParse) {
  const std::vector<ApiCase> cases = GenerateCases(Base(), kNow, {});
  const ApiCase* c = Find(cases, "team", Mutation::kInvalidUtf8);
  ASSERT_NE(c, nullptr);
  v1::RequestCapacityRequest sent;
  EXPECT_FALSE(sent.ParseFromString(c->body));
}

TEST(ApiCasesTest, EveryFieldPathIsReached) {
  const std::vector<ApiCase> cases = GenerateCases(Base(), kNow, {});
  std::set<std::string> reached;
  for (const ApiCase& c : cases) reached.insert(c.field);
  const std::vector<std::string> paths = FieldPaths(*v1::RequestCapacityRequest::descriptor());
  EXPECT_GE(paths.size(), 25u);
  for (const std::string& path : paths) EXPECT_TRUE(reached.contains(path)) << path;
}

TEST(ApiCasesTest, WindowsAreReversedEmptiedAndStretched) {
  v1::ReleaseAllocationRequest release;
  release.set_id(7);
  const std::vector<ApiCase> cases = GenerateCases(release, kNow, {});
  const ApiCase* reversed =
      Find(cases, "workload_started_at..workload_ended_at", Mutation::kWindowReversed);
  ASSERT_NE(reversed, nullptr);
  v1::ReleaseAllocationRequest sent;
  ASSERT_TRUE(sent.ParseFromString(reversed->body));
  EXPECT_GT(sent.workload_started_at().seconds(), sent.workload_ended_at().seconds());
  EXPECT_NE(Find(cases, "workload_started_at..workload_ended_at", Mutation::kWindowCenturies),
            nullptr);
}

// The request message as a later version of the API might have it: a copy
// of allocation.proto in its own package, over the compiled-in types, with
// two fields RequestCapacityRequest does not have today.
TEST(ApiCasesTest, AFieldAddedToARequestGetsItsCasesWithoutAHandWrittenOne) {
  google::protobuf::FileDescriptorProto file;
  v1::RequestCapacityRequest::descriptor()->file()->CopyTo(&file);
  file.set_name("probe/allocation.proto");
  file.set_package("arbiter.probe");
  file.clear_service();
  file.add_dependency("arbiter/v1/allocation.proto");
  google::protobuf::DescriptorProto* message = nullptr;
  for (auto& m : *file.mutable_message_type()) {
    if (m.name() == "RequestCapacityRequest") message = &m;
  }
  ASSERT_NE(message, nullptr);
  google::protobuf::FieldDescriptorProto* added = message->add_field();
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"(name: "added_later" number: 1000 type: TYPE_INT64 label: LABEL_OPTIONAL)", added));
  added = message->add_field();
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"(name: "added_label" number: 1001 type: TYPE_STRING label: LABEL_OPTIONAL)", added));

  google::protobuf::DescriptorPool pool(google::protobuf::DescriptorPool::generated_pool());
  ASSERT_NE(pool.BuildFile(file), nullptr);
  const google::protobuf::Descriptor* grown =
      pool.FindMessageTypeByName("arbiter.probe.RequestCapacityRequest");
  ASSERT_NE(grown, nullptr);
  google::protobuf::DynamicMessageFactory factory(&pool);
  std::unique_ptr<google::protobuf::Message> base(factory.GetPrototype(grown)->New());
  ASSERT_TRUE(base->ParseFromString(Base().SerializeAsString()));

  const std::vector<ApiCase> cases = GenerateCases(*base, kNow, {});
  for (Mutation m : {Mutation::kMinusOne, Mutation::kTypeMin, Mutation::kTypeMax}) {
    EXPECT_NE(Find(cases, "added_later", m), nullptr) << MutationName(m);
  }
  for (Mutation m : {Mutation::kOverLong, Mutation::kControlCharacter, Mutation::kNulByte,
                     Mutation::kInvalidUtf8}) {
    EXPECT_NE(Find(cases, "added_label", m), nullptr) << MutationName(m);
  }
  const std::vector<std::string> paths = FieldPaths(*grown);
  EXPECT_NE(std::find(paths.begin(), paths.end(), "added_later"), paths.end());
  // The fields of today are all still there.
  EXPECT_EQ(paths.size(), FieldPaths(*v1::RequestCapacityRequest::descriptor()).size() + 2);
}

}  // namespace
}  // namespace arbiter::testing
