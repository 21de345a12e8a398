// TelemetryService through a real server and database: samples matched to
// registered GPUs (or counted as unknown, duplicate, skewed, in the future),
// hourly rollups, idle detection and right-sizing.
#include "app/telemetry_maintenance.h"
#include "arbiter/v1/telemetry.grpc.pb.h"
#include "clients/agent/dcgm_text.h"
#include "clients/agent/sample.h"
#include "server/convert.h"
#include "tests/server/server_fixture.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;

class TelemetryTest : public ServerTest {
 public:
  void SetUp() override {
    ServerTest::SetUp();
    testing::SeedSpec seed;
    seed.nodes = 0;
    seed.pool = "batch";
    seed.latency_class = v1::LATENCY_CLASS_BATCH;
    ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, seed), IsOk());
    v1::RegisterNodeRequest node;
    node.mutable_node()->set_cluster("east");
    node.mutable_node()->set_name("n1");
    node.mutable_node()->set_pool("batch");
    node.mutable_node()->set_cpu_milli(64'000);
    node.mutable_node()->set_memory_mib(512'000);
    for (int i = 0; i < 2; ++i) {
      v1::Gpu* gpu = node.mutable_node()->add_gpus();
      gpu->set_index(i);
      gpu->set_model("L4");
      gpu->set_uuid(absl::StrCat("GPU-0000000", i));
    }
    grpc::ClientContext ctx;
    v1::RegisterNodeResponse registered;
    ASSERT_TRUE(inventory_->RegisterNode(&ctx, node, &registered).ok());
    telemetry_ = v1::TelemetryService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  }

  // Admits one preemptible whole-GPU batch job; returns the GPU it got.
  int32_t AdmitBatchJob() {
    v1::RequestCapacityRequest req = ValidRequest("batch-job");
    req.set_workload_class(v1::WORKLOAD_CLASS_BATCH_ANALYTICS);
    req.set_pool("batch");
    req.set_preemptible(true);
    req.mutable_shape()->set_whole_gpus(1);
    v1::RequestCapacityResponse resp;
    EXPECT_TRUE(Request(req, &resp).ok());
    EXPECT_EQ(resp.request().state(), v1::REQUEST_STATE_ADMITTED) << resp.request().reason();
    return resp.request().placements(0).gpu_indices(0);
  }

  static v1::DeviceSample Sample(absl::Time at, const std::string& uuid, int32_t util_milli) {
    v1::DeviceSample s;
    *s.mutable_at() = TimestampOf(at);
    s.set_uuid(uuid);
    s.set_util_milli(util_milli);
    s.set_fb_used_mib(2000);
    s.set_power_mw(50'000);
    return s;
  }

  static v1::SampleBatch Batch(absl::Time sent_at) {
    v1::SampleBatch b;
    b.set_cluster("east");
    b.set_node("n1");
    b.set_interval_seconds(10);
    *b.mutable_sent_at() = TimestampOf(sent_at);
    return b;
  }

  grpc::Status Stream(const std::vector<v1::SampleBatch>& batches,
                      v1::StreamSamplesResponse* resp) {
    grpc::ClientContext ctx;
    auto writer = telemetry_->StreamSamples(&ctx, resp);
    for (const v1::SampleBatch& b : batches) {
      if (!writer->Write(b)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  std::unique_ptr<v1::TelemetryService::Stub> telemetry_;
};

TEST_F(TelemetryTest, SamplesAreMatchedCountedRolledUpAndReported) {
  const absl::Time t0 = clock_.TimeNow();
  const int32_t held = AdmitBatchJob();
  const std::string held_uuid = absl::StrCat("GPU-0000000", held);
  const std::string other_uuid = absl::StrCat("GPU-0000000", 1 - held);
  clock_.Advance(absl::Hours(1));
  const absl::Time now = clock_.TimeNow();

  v1::SampleBatch hour = Batch(now);
  for (absl::Time t = t0; t < now; t += absl::Seconds(10)) {
    *hour.add_samples() = Sample(t, held_uuid, 20);
    *hour.add_samples() = Sample(t, other_uuid, 0);
  }
  *hour.add_samples() = Sample(now - absl::Seconds(5), "GPU-unknown", 0);
  v1::DeviceSample by_index = Sample(now - absl::Seconds(5), "", 0);
  by_index.set_gpu_index(1);  // Registered with a UUID: an index alone does not match.
  *hour.add_samples() = by_index;
  *hour.add_samples() = Sample(now + absl::Hours(1), held_uuid, 0);
  v1::SampleBatch again = Batch(now);
  for (int i = 0; i < 10; ++i) *again.add_samples() = hour.samples(i);
  // The agent's clock runs 30 s ahead: its "now" is stored as Arbiter's.
  v1::SampleBatch skewed = Batch(now + absl::Seconds(30));
  *skewed.add_samples() = Sample(now + absl::Seconds(30), held_uuid, 20);

  v1::StreamSamplesResponse resp;
  ASSERT_TRUE(Stream({hour, again, skewed}, &resp).ok());
  EXPECT_EQ(resp.batches(), 3);
  EXPECT_EQ(resp.stored(), 721);
  EXPECT_EQ(resp.duplicates(), 10);
  EXPECT_EQ(resp.unknown_gpu(), 2);
  EXPECT_THAT(resp.unknown_gpus(), ::testing::ElementsAre("GPU-unknown", "east/n1/gpu1"));
  EXPECT_EQ(resp.in_future(), 1);
  EXPECT_EQ(resp.skew_corrected_batches(), 1);
  EXPECT_EQ(resp.max_skew_ms(), 30'000);
  EXPECT_THAT(db_->QueryValue("SELECT count(*) FROM gpu_samples"),
              ::arbiter::testing::IsOkAndHolds(std::string("721")));
  EXPECT_THAT(db_->QueryValue("SELECT count(*) FROM gpu_samples WHERE at = to_timestamp(" +
                              std::to_string(absl::ToUnixSeconds(now)) + ")"),
              ::arbiter::testing::IsOkAndHolds(std::string("1")));

  ASSERT_THAT(server_->telemetry().RunOnce(now), IsOk());
  v1::GetUtilizationRequest usage_req;
  *usage_req.mutable_from() = TimestampOf(t0);
  *usage_req.mutable_to() = TimestampOf(now);
  v1::GetUtilizationResponse usage;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(telemetry_->GetUtilization(&ctx, usage_req, &usage).ok());
  }
  ASSERT_EQ(usage.rows_size(), 1);
  const v1::UtilizationRow& row = usage.rows(0);
  EXPECT_EQ(row.team(), "inference");
  EXPECT_EQ(row.pool(), "batch");
  EXPECT_EQ(row.workload_class(), v1::WORKLOAD_CLASS_BATCH_ANALYTICS);
  EXPECT_EQ(row.gpu_model(), "L4");
  EXPECT_EQ(row.allocated_milli_gpu_seconds(), 3'600'000);
  EXPECT_EQ(row.sampled_milli_gpu_seconds(), 3'600'000);
  EXPECT_EQ(row.used_milli_gpu_seconds(), 72'000);  // 2% of one GPU-hour.
  // 50 W for an hour, rolled up in 5-minute slices that each round down.
  EXPECT_NEAR(row.energy_mwh(), 50'000, 12);
  EXPECT_EQ(row.peak_memory_mib(), 2000);
  EXPECT_EQ(usage.total().used_milli_gpu_seconds(), 72'000);

  // Under 5% for the batch class's 30 minutes, and preemptible: release.
  v1::ListIdleAllocationsResponse idle;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(telemetry_->ListIdleAllocations(&ctx, {}, &idle).ok());
  }
  ASSERT_EQ(idle.allocations_size(), 1);
  EXPECT_EQ(idle.allocations(0).action(), "release");
  EXPECT_EQ(idle.allocations(0).peak_busy_milli(), 20);

  // 2% busy and 2,000 MiB with 20% headroom: a 50-milli fraction of 2,400 MiB.
  v1::GetRightSizingRequest size_req;
  *size_req.mutable_from() = TimestampOf(t0);
  *size_req.mutable_to() = TimestampOf(now);
  v1::GetRightSizingResponse sizing;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(telemetry_->GetRightSizing(&ctx, size_req, &sizing).ok());
  }
  ASSERT_EQ(sizing.advice_size(), 1);
  EXPECT_EQ(sizing.advice(0).current_milli(), 1000);
  EXPECT_EQ(sizing.advice(0).advised_milli(), 50);
  EXPECT_EQ(sizing.advice(0).advised_memory_mib(), 2400);

  // Past retention the day's partition is dropped; the rollups stay.
  ASSERT_THAT(server_->telemetry().RunOnce(now + absl::Hours(24 * 32)), IsOk());
  EXPECT_THAT(db_->QueryValue("SELECT count(*) FROM gpu_samples"),
              ::arbiter::testing::IsOkAndHolds(std::string("0")));
  EXPECT_THAT(db_->QueryValue("SELECT used_milli_seconds FROM usage_hourly WHERE hour = "
                              "to_timestamp(" +
                              std::to_string(absl::ToUnixSeconds(t0)) + ")"),
              ::arbiter::testing::IsOkAndHolds(std::string("72000")));
}

// Each pass adds what happened since the last one to the hour's rows; a
// sample older than how far its hour is rolled up makes the hour start
// over, and counts, without counting anything twice.
TEST_F(TelemetryTest, TheRollupAddsSlicesAndStartsTheHourOverForLateSamples) {
  const absl::Time hour = app::HourOf(clock_.TimeNow()) + absl::Hours(1);
  clock_.Advance(hour - clock_.TimeNow());
  const std::string uuid = absl::StrCat("GPU-0000000", AdmitBatchJob());
  auto stream = [&](absl::Time from, absl::Time to, int32_t util, absl::Duration offset) {
    v1::SampleBatch batch = Batch(clock_.TimeNow());
    for (absl::Time t = from + offset; t < to; t += absl::Seconds(10)) {
      *batch.add_samples() = Sample(t, uuid, util);
    }
    v1::StreamSamplesResponse resp;
    ASSERT_TRUE(Stream({batch}, &resp).ok());
    ASSERT_EQ(resp.stored(), batch.samples_size());
  };
  auto rows = [&] {
    return db_->QueryValue(
        "SELECT string_agg(concat_ws(' ', allocated_milli_seconds, used_milli_seconds), ',') "
        "FROM usage_hourly");
  };
  auto rolled_to = [&] {
    return db_->QueryValue(
        "SELECT extract(epoch FROM rolled_to - hour)::bigint FROM usage_progress "
        "ORDER BY hour DESC LIMIT 1");
  };

  clock_.Advance(absl::Minutes(20));
  stream(hour, hour + absl::Minutes(20), 20, absl::ZeroDuration());  // 2% busy.
  ASSERT_THAT(server_->telemetry().RunOnce(clock_.TimeNow()), IsOk());
  EXPECT_THAT(rolled_to(), ::arbiter::testing::IsOkAndHolds(std::string("1200")));
  EXPECT_THAT(rows(), ::arbiter::testing::IsOkAndHolds(std::string("1200000 24000")));

  clock_.Advance(absl::Minutes(20));
  stream(hour + absl::Minutes(20), hour + absl::Minutes(40), 50, absl::ZeroDuration());
  ASSERT_THAT(server_->telemetry().RunOnce(clock_.TimeNow()), IsOk());
  EXPECT_THAT(rolled_to(), ::arbiter::testing::IsOkAndHolds(std::string("2400")));
  EXPECT_THAT(rows(), ::arbiter::testing::IsOkAndHolds(
                          std::string("2400000 84000")));  // + 5% of 20 minutes.

  // Late readings 5 s after each of minutes 5 to 6, fully busy: each ends
  // the 2% reading before it 5 s early and stands 5 s.
  stream(hour + absl::Minutes(5), hour + absl::Minutes(6), 1000, absl::Seconds(5));
  ASSERT_THAT(server_->telemetry().RunOnce(clock_.TimeNow()), IsOk());
  EXPECT_THAT(rolled_to(), ::arbiter::testing::IsOkAndHolds(std::string("2400")));
  EXPECT_THAT(rows(),
              ::arbiter::testing::IsOkAndHolds(std::string("2400000 113400")));  // + 6 x 5 s x 98%.
}

// The agent's path end to end: a capture in dcgm-exporter's format, parsed
// and put on the wire as arbiter-agent does, streamed for 65 minutes (the
// agent's clock simulated). The idle batch job is advised a 50-milli
// fraction, given notice to vacate by the arbiter itself (with the notice
// of the class policy the platform set), and preempted when it runs out.
TEST_F(TelemetryTest, AnIdleCaptureLeadsToRightSizingAndIdleReclaim) {
  const absl::Time t0 = clock_.TimeNow();
  v1::RequestCapacityRequest job = ValidRequest("idle-job");
  job.set_workload_class(v1::WORKLOAD_CLASS_BATCH_ANALYTICS);
  job.set_pool("batch");
  job.set_preemptible(true);
  job.mutable_shape()->set_whole_gpus(1);
  v1::RequestCapacityResponse admitted;
  ASSERT_TRUE(Request(job, &admitted).ok());
  ASSERT_EQ(admitted.request().state(), v1::REQUEST_STATE_ADMITTED);
  const int32_t gpu = admitted.request().placements(0).gpu_indices(0);
  const std::string labels =
      absl::StrCat("{gpu=\"", gpu, "\",UUID=\"GPU-0000000", gpu, "\",device=\"nvidia", gpu,
                   "\",modelName=\"NVIDIA L4\",Hostname=\"n1\"}");
  const std::string capture = absl::StrCat(
      "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
      "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n",
      "DCGM_FI_DEV_GPU_UTIL", labels, " 1\n", "DCGM_FI_DEV_FB_USED", labels, " 1800\n",
      "DCGM_FI_DEV_FB_FREE", labels, " 21000\n", "DCGM_FI_DEV_POWER_USAGE", labels, " 31.5\n");
  const agent::Scrape scrape = agent::ParseDcgmScrape(capture);
  ASSERT_TRUE(scrape.problems.empty());
  ASSERT_EQ(scrape.devices.size(), 1u);

  clock_.Advance(absl::Minutes(65));
  const absl::Time now = clock_.TimeNow();
  v1::SampleBatch batch = Batch(now);
  batch.set_interval_seconds(60);
  for (absl::Time t = t0; t < now; t += absl::Minutes(1)) {
    *batch.add_samples() = agent::ToSample(scrape.devices[0], TimestampOf(t));
  }
  v1::StreamSamplesResponse streamed;
  ASSERT_TRUE(Stream({batch}, &streamed).ok());
  EXPECT_EQ(streamed.stored(), 65);
  // The platform shortens batch analytics' notice to 5 minutes.
  v1::SetIdlePolicyRequest policy;
  policy.mutable_policy()->set_workload_class(v1::WORKLOAD_CLASS_BATCH_ANALYTICS);
  policy.mutable_policy()->set_threshold_milli(50);
  policy.mutable_policy()->set_window_seconds(1800);
  policy.mutable_policy()->set_action("release");
  policy.mutable_policy()->set_notice_seconds(300);
  {
    grpc::ClientContext ctx;
    v1::SetIdlePolicyResponse set;
    ASSERT_TRUE(telemetry_->SetIdlePolicy(&ctx, policy, &set).ok());
    grpc::ClientContext bad_ctx;
    v1::SetIdlePolicyRequest bad = policy;
    bad.mutable_policy()->set_action("delete");
    const grpc::Status refused = telemetry_->SetIdlePolicy(&bad_ctx, bad, &set);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("policy.action"));
    grpc::ClientContext list_ctx;
    v1::ListIdlePoliciesResponse policies;
    ASSERT_TRUE(telemetry_->ListIdlePolicies(&list_ctx, {}, &policies).ok());
    ASSERT_EQ(policies.policies_size(), 4);
    for (const v1::IdlePolicy& p : policies.policies()) {
      if (p.workload_class() == v1::WORKLOAD_CLASS_BATCH_ANALYTICS) {
        EXPECT_EQ(p.notice_seconds(), 300);
      }
    }
  }
  ASSERT_THAT(server_->telemetry().RunOnce(now), IsOk());

  // 1% busy and 1,800 MiB with 20% headroom: a 50-milli fraction of 2,160 MiB.
  v1::GetRightSizingRequest size_req;
  *size_req.mutable_from() = TimestampOf(t0);
  *size_req.mutable_to() = TimestampOf(now);
  v1::GetRightSizingResponse sizing;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(telemetry_->GetRightSizing(&ctx, size_req, &sizing).ok());
  }
  ASSERT_EQ(sizing.advice_size(), 1);
  EXPECT_EQ(sizing.advice(0).advised_milli(), 50);
  EXPECT_EQ(sizing.advice(0).advised_memory_mib(), 2160);

  // The batch class releases after 30 idle minutes, with the 5 minutes' notice set.
  const int64_t id = admitted.request().id();
  auto state_of = [&]() {
    grpc::ClientContext ctx;
    v1::GetRequestRequest req;
    req.set_id(id);
    v1::GetRequestResponse resp;
    EXPECT_TRUE(allocation_->GetRequest(&ctx, req, &resp).ok());
    return resp.request();
  };
  auto await = [&](v1::RequestState state) {
    for (int i = 0; i < 200 && state_of().state() != state; ++i) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    return state_of();
  };
  const v1::CapacityRequest noticed = await(v1::REQUEST_STATE_PREEMPTING);
  ASSERT_EQ(noticed.state(), v1::REQUEST_STATE_PREEMPTING);
  EXPECT_EQ(noticed.reason_code(), "IDLE_RECLAIM");
  EXPECT_EQ(noticed.preempt_deadline().seconds(), absl::ToUnixSeconds(now + absl::Minutes(5)));
  clock_.Advance(absl::Minutes(5) + absl::Seconds(1));
  EXPECT_EQ(await(v1::REQUEST_STATE_PREEMPTED).state(), v1::REQUEST_STATE_PREEMPTED);
}

TEST_F(TelemetryTest, AMalformedBatchNamesTheFieldAndIsNotStored) {
  const absl::Time now = clock_.TimeNow();
  v1::SampleBatch good = Batch(now);
  *good.add_samples() = Sample(now - absl::Seconds(10), "GPU-00000000", 10);
  v1::SampleBatch bad = Batch(now);
  *bad.add_samples() = Sample(now, "GPU-00000000", 10);
  *bad.add_samples() = Sample(now, "GPU-00000001", 1001);
  v1::StreamSamplesResponse resp;
  grpc::Status status = Stream({good, bad}, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("batch 2: samples[1].util_milli"));
  EXPECT_THAT(db_->QueryValue("SELECT count(*) FROM gpu_samples"),
              ::arbiter::testing::IsOkAndHolds(std::string("1")));

  v1::SampleBatch no_interval = Batch(now);
  no_interval.set_interval_seconds(0);
  *no_interval.add_samples() = Sample(now, "GPU-00000000", 10);
  status = Stream({no_interval}, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("batch 1: interval_seconds"));

  v1::RegisterNodeRequest twin;
  twin.mutable_node()->set_cluster("east");
  twin.mutable_node()->set_name("n2");
  twin.mutable_node()->set_pool("batch");
  twin.mutable_node()->set_cpu_milli(1000);
  twin.mutable_node()->set_memory_mib(1000);
  v1::Gpu* gpu = twin.mutable_node()->add_gpus();
  gpu->set_model("L4");
  gpu->set_uuid("GPU-00000001");
  grpc::ClientContext ctx;
  v1::RegisterNodeResponse registered;
  status = inventory_->RegisterNode(&ctx, twin, &registered);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("node.gpus[0].uuid"));
}

}  // namespace
}  // namespace arbiter::server
