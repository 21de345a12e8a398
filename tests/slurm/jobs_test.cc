#include "clients/slurm/jobs.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace arbiter::slurm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

GpuAsk Parsed(absl::string_view tres) {
  absl::StatusOr<GpuAsk> ask = ParseGpuTres(tres);
  EXPECT_TRUE(ask.ok()) << tres << ": " << ask.status();
  return ask.ok() ? *ask : GpuAsk{};
}

TEST(ParseGpuTresTest, TypeAndCountWithColons) {
  const GpuAsk ask = Parsed("gres:gpu:h100:2");
  EXPECT_TRUE(ask.any);
  EXPECT_EQ(ask.type, "h100");
  EXPECT_EQ(ask.per_node, 2);
}

TEST(ParseGpuTresTest, TypeAndCountInSlurm23Form) {
  const GpuAsk ask = Parsed("gres/gpu:h100=2");
  EXPECT_TRUE(ask.any);
  EXPECT_EQ(ask.type, "h100");
  EXPECT_EQ(ask.per_node, 2);
}

TEST(ParseGpuTresTest, CountWithoutType) {
  const GpuAsk ask = Parsed("gres:gpu:2");
  EXPECT_TRUE(ask.any);
  EXPECT_EQ(ask.type, "");
  EXPECT_EQ(ask.per_node, 2);
}

TEST(ParseGpuTresTest, BareGpuIsOneOfAnyType) {
  const GpuAsk ask = Parsed("gres:gpu");
  EXPECT_TRUE(ask.any);
  EXPECT_EQ(ask.type, "");
  EXPECT_EQ(ask.per_node, 1);
}

TEST(ParseGpuTresTest, TypeWithoutCountIsOneOfThatType) {
  const GpuAsk ask = Parsed("gres:gpu:h100");
  EXPECT_TRUE(ask.any);
  EXPECT_EQ(ask.type, "h100");
  EXPECT_EQ(ask.per_node, 1);
}

TEST(ParseGpuTresTest, GpuMemoryIsNotAGpuAsk) {
  const GpuAsk ask = Parsed("gres:gpumem:10");
  EXPECT_FALSE(ask.any);
  EXPECT_EQ(ask.per_node, 0);
}

TEST(ParseGpuTresTest, EmptyIsNoAsk) {
  const GpuAsk ask = Parsed("");
  EXPECT_FALSE(ask.any);
  EXPECT_EQ(ask.per_node, 0);
}

TEST(ParseGpuTresTest, FindsTheGpuItemAmongOthers) {
  const GpuAsk ask = Parsed("gres:nic:1,gres:gpu:a100:3");
  EXPECT_TRUE(ask.any);
  EXPECT_EQ(ask.type, "a100");
  EXPECT_EQ(ask.per_node, 3);
}

TEST(ParseGpuTresTest, BadCountIsInvalidArgumentNamingTheItem) {
  absl::StatusOr<GpuAsk> ask = ParseGpuTres("gres:gpu:h100:x");
  ASSERT_FALSE(ask.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ask.status())) << ask.status();
  EXPECT_THAT(std::string(ask.status().message()), HasSubstr("gres:gpu:h100:x"));
}

TEST(ParseGpuTresTest, ZeroCountIsInvalidArgument) {
  for (const char* tres : {"gres:gpu:h100:0", "gres:gpu:0", "gres/gpu:h100=0"}) {
    absl::StatusOr<GpuAsk> ask = ParseGpuTres(tres);
    ASSERT_FALSE(ask.ok()) << tres;
    EXPECT_TRUE(absl::IsInvalidArgument(ask.status())) << tres << ": " << ask.status();
  }
}

std::vector<std::string> Hosts(absl::string_view list) {
  absl::StatusOr<std::vector<std::string>> hosts = ExpandHostList(list);
  EXPECT_TRUE(hosts.ok()) << list << ": " << hosts.status();
  return hosts.ok() ? *hosts : std::vector<std::string>{};
}

TEST(ExpandHostListTest, RangesListsAndPlainNames) {
  EXPECT_THAT(Hosts("n[1-3,7],gpu-a"), ElementsAre("n1", "n2", "n3", "n7", "gpu-a"));
}

TEST(ExpandHostListTest, KeepsZeroPadding) {
  EXPECT_THAT(Hosts("n[01-03]"), ElementsAre("n01", "n02", "n03"));
  EXPECT_THAT(Hosts("n[08-10]"), ElementsAre("n08", "n09", "n10"));
}

TEST(ExpandHostListTest, OneHost) { EXPECT_THAT(Hosts("gpu-a"), ElementsAre("gpu-a")); }

TEST(ExpandHostListTest, EmptyIsNoHosts) { EXPECT_THAT(Hosts(""), IsEmpty()); }

TEST(ExpandHostListTest, UnbalancedBracketsAreInvalidArgument) {
  for (const char* list : {"n[1-3", "n1-3]", "n[1-3]],m1", "n[1-2],m[3"}) {
    absl::StatusOr<std::vector<std::string>> hosts = ExpandHostList(list);
    ASSERT_FALSE(hosts.ok()) << list;
    EXPECT_TRUE(absl::IsInvalidArgument(hosts.status())) << list << ": " << hosts.status();
  }
}

TEST(ExpandHostListTest, ReversedAndNonNumericRangesAreInvalidArgument) {
  for (const char* list : {"n[3-1]", "n[a-b]", "n[1-x]", "n[]"}) {
    absl::StatusOr<std::vector<std::string>> hosts = ExpandHostList(list);
    ASSERT_FALSE(hosts.ok()) << list;
    EXPECT_TRUE(absl::IsInvalidArgument(hosts.status())) << list << ": " << hosts.status();
  }
}

TEST(AdminCommentTest, RoundTrip) {
  EXPECT_EQ(AdminCommentFor(42, 3), "arbiter:request=42;restart=3");
  EXPECT_EQ(RequestIn(AdminCommentFor(42, 3), 3), 42);
  EXPECT_EQ(RequestIn(AdminCommentFor(9'000'000'000, 0), 0), 9'000'000'000);
}

TEST(AdminCommentTest, AnEarlierRunsRequestIsNotThisRuns) {
  EXPECT_EQ(RequestIn(AdminCommentFor(42, 0), 1), 0);
  EXPECT_EQ(RequestIn(AdminCommentFor(42, 2), 1), 0);
}

TEST(AdminCommentTest, ForeignOrMalformedCommentsNameNoRequest) {
  EXPECT_EQ(RequestIn("", 0), 0);
  EXPECT_EQ(RequestIn("reserved for the storage team", 0), 0);
  EXPECT_EQ(RequestIn("arbiter:request=42", 0), 0);
  EXPECT_EQ(RequestIn("arbiter:request=x;restart=0", 0), 0);
  EXPECT_EQ(RequestIn("arbiter:request=0;restart=0", 0), 0);
  EXPECT_EQ(RequestIn("arbiter:request=-5;restart=0", 0), 0);
}

// Shaped like Slurm 22.05's `squeue --json` (data_parser v0.0.38): a meta
// object, errors, and jobs with many more fields than the bridge reads.
constexpr char kSqueue[] = R"json({
  "meta": {
    "plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
    "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}
  },
  "errors": [],
  "jobs": [
    {
      "account": "research",
      "accrue_time": 1700000000,
      "admin_comment": "arbiter:request=42;restart=1",
      "array_job_id": 0,
      "batch_flag": true,
      "comment": "arbiter: queued: QUOTA_EXCEEDED",
      "cpus": 16,
      "job_id": 101,
      "job_state": "PENDING",
      "name": "train-llm",
      "node_count": 2,
      "nodes": "",
      "partition": "gpu",
      "priority": 0,
      "qos": "normal",
      "requeue": true,
      "restart_cnt": 1,
      "state_reason": "JobHeldAdmin",
      "time_limit": 90,
      "tres_per_job": "",
      "tres_per_node": "gres:gpu:h100:2",
      "tres_per_socket": "",
      "tres_per_task": "",
      "user_name": "alice"
    },
    {
      "account": "vision",
      "admin_comment": "",
      "comment": "",
      "job_id": 102,
      "job_state": "RUNNING",
      "name": "eval",
      "node_count": 3,
      "nodes": "gpu[01-02],spare",
      "partition": "short",
      "priority": 4294901758,
      "qos": "preemptible",
      "requeue": false,
      "restart_cnt": 0,
      "state_reason": "None",
      "time_limit": 4294967295,
      "tres_per_job": "gres:gpu:4",
      "tres_per_node": "",
      "tres_per_socket": "",
      "tres_per_task": "",
      "user_name": "bob"
    },
    {
      "account": "research",
      "job_id": 103,
      "job_state": "COMPLETED",
      "name": "cpu-only",
      "node_count": 1,
      "nodes": "n7",
      "partition": "cpu",
      "priority": 100,
      "qos": "normal",
      "requeue": true,
      "restart_cnt": 0,
      "state_reason": "None",
      "time_limit": 4294967294,
      "tres_per_job": "",
      "tres_per_node": "",
      "tres_per_socket": "",
      "tres_per_task": "gres:gpu:1",
      "user_name": "carol"
    }
  ]
})json";

TEST(ParseSqueueJsonTest, ReadsTheFieldsTheBridgeDecidesOn) {
  absl::StatusOr<std::vector<SlurmJob>> jobs = ParseSqueueJson(kSqueue);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 3u);

  const SlurmJob& held = (*jobs)[0];
  EXPECT_EQ(held.id, 101);
  EXPECT_EQ(held.name, "train-llm");
  EXPECT_EQ(held.user, "alice");
  EXPECT_EQ(held.state, "PENDING");
  EXPECT_TRUE(held.Pending());
  EXPECT_FALSE(held.Active());
  EXPECT_FALSE(held.Ended());
  EXPECT_EQ(held.reason, "JobHeldAdmin");
  EXPECT_TRUE(held.held);
  EXPECT_EQ(held.account, "research");
  EXPECT_EQ(held.partition, "gpu");
  EXPECT_EQ(held.qos, "normal");
  EXPECT_EQ(held.nodes, 2);
  EXPECT_TRUE(held.gpus.any);
  EXPECT_EQ(held.gpus.type, "h100");
  EXPECT_EQ(held.gpus.per_node, 2);
  EXPECT_FALSE(held.gpus_not_per_node);
  EXPECT_EQ(held.comment, "arbiter: queued: QUOTA_EXCEEDED");
  EXPECT_EQ(held.admin_comment, "arbiter:request=42;restart=1");
  EXPECT_EQ(held.restart_count, 1);
  EXPECT_TRUE(held.requeue);
  EXPECT_EQ(held.time_limit_minutes, 90);
  EXPECT_THAT(held.node_list, IsEmpty());

  const SlurmJob& running = (*jobs)[1];
  EXPECT_EQ(running.id, 102);
  EXPECT_EQ(running.state, "RUNNING");
  EXPECT_TRUE(running.Active());
  EXPECT_FALSE(running.held);
  EXPECT_EQ(running.account, "vision");
  EXPECT_EQ(running.qos, "preemptible");
  EXPECT_EQ(running.nodes, 3);
  EXPECT_FALSE(running.gpus.any);
  EXPECT_TRUE(running.gpus_not_per_node) << "tres_per_job asks for GPUs";
  EXPECT_FALSE(running.requeue);
  EXPECT_EQ(running.time_limit_minutes, 0) << "INFINITE";
  EXPECT_THAT(running.node_list, ElementsAre("gpu01", "gpu02", "spare"));

  const SlurmJob& done = (*jobs)[2];
  EXPECT_EQ(done.id, 103);
  EXPECT_TRUE(done.Ended());
  EXPECT_FALSE(done.Active());
  EXPECT_FALSE(done.held);
  EXPECT_FALSE(done.gpus.any);
  EXPECT_TRUE(done.gpus_not_per_node) << "tres_per_task asks for GPUs";
  EXPECT_EQ(done.time_limit_minutes, 0) << "NO_VAL";
  EXPECT_EQ(done.admin_comment, "");
  EXPECT_THAT(done.node_list, ElementsAre("n7"));
}

TEST(ParseSqueueJsonTest, NoJobs) {
  absl::StatusOr<std::vector<SlurmJob>> jobs = ParseSqueueJson(R"({"meta": {}, "jobs": []})");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, IsEmpty());
}

TEST(ParseSqueueJsonTest, MalformedDocumentsAreInvalidArgument) {
  for (const char* text : {"", "not json", "{\"jobs\": [", "[]", "{\"jobs\": 3}", "{}"}) {
    absl::StatusOr<std::vector<SlurmJob>> jobs = ParseSqueueJson(text);
    ASSERT_FALSE(jobs.ok()) << text;
    EXPECT_TRUE(absl::IsInvalidArgument(jobs.status())) << text << ": " << jobs.status();
  }
}

TEST(ParseSqueueJsonTest, AJobWithoutIdIsInvalidArgument) {
  absl::StatusOr<std::vector<SlurmJob>> jobs =
      ParseSqueueJson(R"({"jobs": [{"name": "x", "job_state": "PENDING"}]})");
  ASSERT_FALSE(jobs.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(jobs.status())) << jobs.status();
}

TEST(ParseSqueueJsonTest, AMalformedJobIsInvalidArgumentNamingTheJob) {
  absl::StatusOr<std::vector<SlurmJob>> jobs =
      ParseSqueueJson(R"({"jobs": [{"job_id": 55, "tres_per_node": "gres:gpu:h100:x"}]})");
  ASSERT_FALSE(jobs.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(jobs.status())) << jobs.status();
  EXPECT_THAT(std::string(jobs.status().message()), HasSubstr("job 55"));

  jobs = ParseSqueueJson(R"({"jobs": [{"job_id": 56, "nodes": "n[3-1]"}]})");
  ASSERT_FALSE(jobs.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(jobs.status())) << jobs.status();
  EXPECT_THAT(std::string(jobs.status().message()), HasSubstr("job 56"));
}

}  // namespace
}  // namespace arbiter::slurm
