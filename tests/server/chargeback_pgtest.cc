// The nightly scenario through a real server and database (simulated
// clock): a batch team's fine-tune borrows serving capacity at 02:00, the
// serving load ramps at 09:30 and Arbiter reclaims the capacity with the
// pool's grace period. If the serving platform reports a breached window
// meanwhile, the incident is charged to the batch team and credited to the
// serving team, and the statements, the ledger and the closed period agree.
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

#include "arbiter/v1/chargeback.grpc.pb.h"
#include "arbiter/v1/ledger.grpc.pb.h"
#include "arbiter/v1/telemetry.grpc.pb.h"
#include "server/convert.h"
#include "tests/server/server_fixture.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::IsOkAndHolds;

constexpr int64_t kPrice = 2'000'000;    // Micros per L4 GPU-hour in serving pools.
constexpr int64_t kPenalty = 1'000'000;  // Micros per minute of breach.
constexpr int64_t kTargetUs = 200'000;   // p99 target.

class NightlyScenarioTest : public ServerTest {
 public:
  void SetUp() override {
    ServerTest::SetUp();
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                       grpc::InsecureChannelCredentials());
    chargeback_ = v1::ChargebackService::NewStub(channel);
    telemetry_ = v1::TelemetryService::NewStub(channel);
    ledger_ = v1::LedgerService::NewStub(channel);
    // Midnight (UTC) after the clock's start: the night being played.
    const absl::Time start = clock_.TimeNow();
    midnight_ = absl::UnixEpoch() + absl::Ceil(start - absl::UnixEpoch(), absl::Hours(24));
    clock_.Advance(At(1, 0) - start);
    Seed();
  }

  absl::Time At(int hour, int minute) const {
    return midnight_ + absl::Hours(hour) + absl::Minutes(minute);
  }

  void Seed() {
    grpc::ClientContext c1, c2, c3;
    v1::CreateClusterRequest cluster;
    cluster.mutable_cluster()->set_name("east");
    v1::CreateClusterResponse cluster_resp;
    ASSERT_TRUE(inventory_->CreateCluster(&c1, cluster, &cluster_resp).ok());
    v1::CreatePoolRequest pool;
    pool.mutable_pool()->set_name("serving");
    pool.mutable_pool()->set_latency_class(v1::LATENCY_CLASS_SERVING);
    pool.mutable_pool()->add_lends_to(v1::WORKLOAD_CLASS_BATCH_ANALYTICS);
    pool.mutable_pool()->set_reclaim_grace_seconds(300);
    v1::CreatePoolResponse pool_resp;
    ASSERT_TRUE(inventory_->CreatePool(&c2, pool, &pool_resp).ok());
    v1::RegisterNodeRequest node;
    node.mutable_node()->set_cluster("east");
    node.mutable_node()->set_name("s1");
    node.mutable_node()->set_pool("serving");
    node.mutable_node()->set_cpu_milli(64'000);
    node.mutable_node()->set_memory_mib(512'000);
    for (int i = 0; i < 4; ++i) {
      v1::Gpu* gpu = node.mutable_node()->add_gpus();
      gpu->set_index(i);
      gpu->set_model("L4");
      gpu->set_uuid(absl::StrCat("GPU-s1-", i));
    }
    v1::RegisterNodeResponse node_resp;
    ASSERT_TRUE(inventory_->RegisterNode(&c3, node, &node_resp).ok());
    for (const char* team : {"org", "serving-team", "batch-team"}) {
      grpc::ClientContext ctx;
      v1::CreateTeamRequest req;
      req.mutable_team()->set_name(team);
      if (std::string(team) != "org") req.mutable_team()->set_parent("org");
      v1::CreateTeamResponse resp;
      ASSERT_TRUE(governance_->CreateTeam(&ctx, req, &resp).ok()) << team;
    }
    SetQuota("serving-team", 4000, 0);
    SetQuota("batch-team", 0, 4000);
    grpc::ClientContext c4, c5, c6;
    v1::SetPriceRequest price;
    price.mutable_price()->set_gpu_model("L4");
    price.mutable_price()->set_latency_class(v1::LATENCY_CLASS_SERVING);
    price.mutable_price()->set_micros_per_gpu_hour(kPrice);
    *price.mutable_price()->mutable_effective_from() = TimestampOf(midnight_ - absl::Hours(24));
    v1::SetPriceResponse price_resp;
    ASSERT_TRUE(governance_->SetPrice(&c4, price, &price_resp).ok());
    v1::SetBudgetRequest budget;
    budget.mutable_budget()->set_team("batch-team");
    budget.mutable_budget()->set_soft_limit_micros(5'000'000'000);
    budget.mutable_budget()->set_hard_limit_micros(10'000'000'000);
    budget.mutable_budget()->set_over(v1::OVER_BUDGET_DENY);
    v1::SetBudgetResponse budget_resp;
    ASSERT_TRUE(governance_->SetBudget(&c5, budget, &budget_resp).ok());
    v1::SetSloRequest slo;
    slo.mutable_slo()->set_team("serving-team");
    slo.mutable_slo()->set_service("chat-api");
    slo.mutable_slo()->set_pool("serving");
    slo.mutable_slo()->set_p99_target_us(kTargetUs);
    slo.mutable_slo()->set_window_seconds(300);
    slo.mutable_slo()->set_penalty_micros_per_minute(kPenalty);
    v1::SetSloResponse slo_resp;
    ASSERT_TRUE(chargeback_->SetSlo(&c6, slo, &slo_resp).ok());
  }

  void SetQuota(const std::string& team, int64_t nominal, int64_t borrowing) {
    grpc::ClientContext ctx;
    v1::SetQuotaRequest req;
    req.mutable_quota()->set_team(team);
    req.mutable_quota()->set_pool("serving");
    req.mutable_quota()->set_nominal_milli(nominal);
    req.mutable_quota()->set_borrowing_limit_milli(borrowing);
    v1::SetQuotaResponse resp;
    ASSERT_TRUE(governance_->SetQuota(&ctx, req, &resp).ok()) << team;
  }

  v1::CapacityRequest Ask(const std::string& key, const std::string& team, v1::WorkloadClass cls,
                          bool preemptible) {
    v1::RequestCapacityRequest req = ValidRequest(key);
    req.set_team(team);
    req.set_pool("serving");
    req.set_workload_class(cls);
    req.set_members(2);
    req.mutable_shape()->set_whole_gpus(1);
    req.set_preemptible(preemptible);
    v1::RequestCapacityResponse resp;
    EXPECT_TRUE(Request(req, &resp).ok()) << key;
    return resp.request();
  }

  v1::RequestState StateOf(int64_t id) {
    grpc::ClientContext ctx;
    v1::GetRequestRequest req;
    req.set_id(id);
    v1::GetRequestResponse resp;
    EXPECT_TRUE(allocation_->GetRequest(&ctx, req, &resp).ok());
    return resp.request().state();
  }

  // Waits (real time, at most 10 s) for the arbiter to act on a due timer.
  bool AwaitState(int64_t id, v1::RequestState state) {
    for (int i = 0; i < 200; ++i) {
      if (StateOf(id) == state) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  // One sample a minute over [from, to) for each GPU, busy as given.
  void StreamSamples(absl::Time from, absl::Time to, const std::map<int, int32_t>& busy) {
    grpc::ClientContext ctx;
    v1::StreamSamplesResponse resp;
    auto writer = telemetry_->StreamSamples(&ctx, &resp);
    for (absl::Time hour = from; hour < to; hour += absl::Hours(1)) {
      v1::SampleBatch batch;
      batch.set_cluster("east");
      batch.set_node("s1");
      batch.set_interval_seconds(60);
      *batch.mutable_sent_at() = TimestampOf(clock_.TimeNow());
      for (absl::Time t = hour; t < std::min(hour + absl::Hours(1), to); t += absl::Minutes(1)) {
        for (const auto& [gpu, milli] : busy) {
          v1::DeviceSample* s = batch.add_samples();
          *s->mutable_at() = TimestampOf(t);
          s->set_uuid(absl::StrCat("GPU-s1-", gpu));
          s->set_util_milli(milli);
          s->set_fb_used_mib(8000);
          s->set_power_mw(60'000);
        }
      }
      ASSERT_TRUE(writer->Write(batch));
    }
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
  }

  grpc::Status Report(absl::Time start, int64_t p99_us, v1::ReportLatencyResponse* resp,
                      absl::Duration length = absl::Minutes(5)) {
    grpc::ClientContext ctx;
    v1::ReportLatencyRequest req;
    v1::LatencyWindow* w = req.mutable_window();
    w->set_team("serving-team");
    w->set_service("chat-api");
    *w->mutable_start() = TimestampOf(start);
    *w->mutable_end() = TimestampOf(start + length);
    w->set_p50_us(p99_us / 3);
    w->set_p99_us(p99_us);
    w->set_requests_milli_per_second(1'200'000);
    return chargeback_->ReportLatency(&ctx, req, resp);
  }

  v1::GetChargebackResponse Chargeback(absl::Time from, absl::Time to,
                                       const std::string& team = "") {
    grpc::ClientContext ctx;
    v1::GetChargebackRequest req;
    *req.mutable_period()->mutable_from() = TimestampOf(from);
    *req.mutable_period()->mutable_to() = TimestampOf(to);
    req.set_team(team);
    v1::GetChargebackResponse resp;
    const grpc::Status s = chargeback_->GetChargeback(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  std::vector<v1::LedgerEntry> Ledger(const std::string& action) {
    grpc::ClientContext ctx;
    v1::ListLedgerEntriesRequest req;
    req.set_action(action);
    v1::ListLedgerEntriesResponse resp;
    EXPECT_TRUE(ledger_->ListLedgerEntries(&ctx, req, &resp).ok());
    return {resp.entries().begin(), resp.entries().end()};
  }

  static std::string Field(const std::string& payload, const std::string& key) {
    for (absl::string_view kv : absl::StrSplit(payload, ';')) {
      std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      if (p.first == key) return p.second;
    }
    return "";
  }

  // Plays 01:00 to 11:00; the window 09:30-09:35 is reported with `p99_us`.
  void PlayTheNight(int64_t ramp_p99_us) {
    const v1::CapacityRequest base =
        Ask("chat-base", "serving-team", v1::WORKLOAD_CLASS_INFERENCE, false);
    ASSERT_EQ(base.state(), v1::REQUEST_STATE_ADMITTED);
    clock_.Advance(At(2, 0) - clock_.TimeNow());
    finetune_ = Ask("finetune", "batch-team", v1::WORKLOAD_CLASS_BATCH_ANALYTICS, true);
    ASSERT_EQ(finetune_.state(), v1::REQUEST_STATE_ADMITTED) << finetune_.reason();
    std::map<int, int32_t> busy;
    for (const v1::Placement& p : base.placements()) busy[p.gpu_indices(0)] = 300;
    for (const v1::Placement& p : finetune_.placements()) busy[p.gpu_indices(0)] = 900;
    clock_.Advance(At(9, 30) - clock_.TimeNow());
    StreamSamples(At(1, 0), At(9, 30), busy);

    ramp_ = Ask("chat-ramp", "serving-team", v1::WORKLOAD_CLASS_INFERENCE, false);
    ASSERT_EQ(ramp_.state(), v1::REQUEST_STATE_QUEUED);
    ASSERT_EQ(ramp_.reason_code(), "WAITING_FOR_PREEMPTION");
    ASSERT_EQ(StateOf(finetune_.id()), v1::REQUEST_STATE_PREEMPTING);
    v1::ReportLatencyResponse calm;
    ASSERT_TRUE(Report(At(9, 25), 150'000, &calm).ok());
    EXPECT_FALSE(calm.breached());

    clock_.Advance(At(9, 35) - clock_.TimeNow());
    ASSERT_TRUE(AwaitState(finetune_.id(), v1::REQUEST_STATE_PREEMPTED));
    ASSERT_TRUE(AwaitState(ramp_.id(), v1::REQUEST_STATE_ADMITTED));
    const grpc::Status s = Report(At(9, 30), ramp_p99_us, &ramp_window_);
    ASSERT_TRUE(s.ok()) << s.error_message();
    clock_.Advance(At(9, 40) - clock_.TimeNow());
    v1::ReportLatencyResponse after;
    ASSERT_TRUE(Report(At(9, 35), 140'000, &after).ok());
    EXPECT_FALSE(after.breached());
    clock_.Advance(At(11, 0) - clock_.TimeNow());
    ASSERT_THAT(server_->telemetry().RunOnce(clock_.TimeNow()), IsOk());
  }

  // The checks that hold in every scenario.
  void ExpectConservation(const v1::GetChargebackResponse& cb) {
    int64_t reserved = 0, charged = 0, credited = 0;
    for (const v1::Statement& s : cb.statements()) {
      reserved += s.reserved_milli_seconds();
      charged += s.externality_charged_micros();
      credited += s.externality_credited_micros();
      EXPECT_LE(s.used_milli_seconds(), s.sampled_milli_seconds()) << s.team();
      EXPECT_LE(s.sampled_milli_seconds(), s.reserved_milli_seconds()) << s.team();
      EXPECT_EQ(s.net_cost_micros(), s.reserved_cost_micros() + s.externality_charged_micros() -
                                         s.externality_credited_micros())
          << s.team();
    }
    EXPECT_EQ(reserved, cb.cluster_reserved_milli_seconds());
    EXPECT_EQ(charged, cb.incidents_attributed_micros());
    EXPECT_EQ(credited, cb.incidents_attributed_micros());
    // The statements equal the ledger: every charge and credit entry, by team.
    std::map<std::string, int64_t> ledger_by_team, statement_by_team;
    for (const char* action : {"externality.charge", "externality.credit"}) {
      for (const v1::LedgerEntry& e : Ledger(action)) {
        int64_t micros = 0;
        ASSERT_TRUE(absl::SimpleAtoi(Field(e.payload(), "micros"), &micros));
        ledger_by_team[e.subject().substr(std::string("team/").size())] += micros;
      }
    }
    for (const v1::Statement& s : cb.statements()) {
      const int64_t net = s.externality_charged_micros() - s.externality_credited_micros();
      if (net != 0 || ledger_by_team.contains(s.team())) statement_by_team[s.team()] = net;
    }
    EXPECT_EQ(ledger_by_team, statement_by_team);
  }

  const v1::Statement& StatementOf(const v1::GetChargebackResponse& cb, const std::string& team) {
    for (const v1::Statement& s : cb.statements()) {
      if (s.team() == team) return s;
    }
    ADD_FAILURE() << "no statement for " << team;
    return cb.statements(0);
  }

  absl::Time midnight_;
  v1::CapacityRequest finetune_, ramp_;
  v1::ReportLatencyResponse ramp_window_;
  std::unique_ptr<v1::ChargebackService::Stub> chargeback_;
  std::unique_ptr<v1::TelemetryService::Stub> telemetry_;
  std::unique_ptr<v1::LedgerService::Stub> ledger_;
};

TEST_F(NightlyScenarioTest, BreachDuringTheReclaimIsChargedToTheBorrower) {
  PlayTheNight(450'000);
  ASSERT_TRUE(ramp_window_.breached());
  EXPECT_FALSE(ramp_window_.duplicate());
  const v1::Incident& incident = ramp_window_.incident();
  EXPECT_GT(incident.id(), 0);
  EXPECT_EQ(incident.cost_basis(), "penalty");
  EXPECT_EQ(incident.cost_micros(), 5 * kPenalty);
  EXPECT_EQ(incident.attributed_micros(), 5 * kPenalty);
  EXPECT_EQ(incident.method(), "interference-gpu-seconds/v1");
  ASSERT_EQ(incident.charges_size(), 1);
  EXPECT_EQ(incident.charges(0).team(), "batch-team");
  EXPECT_EQ(incident.charges(0).micros(), 5 * kPenalty);
  // Two borrowed GPUs the serving team was short of, for the 300 s window.
  EXPECT_EQ(incident.charges(0).borrowed_milli_seconds(), 2000 * 300);
  EXPECT_THAT(incident.charges(0).request_ids(), ::testing::ElementsAre(finetune_.id()));

  // Reported again, even with other figures: the first report stands, the
  // same incident is answered, nothing is written twice.
  const size_t charges_before = Ledger("externality.charge").size();
  v1::ReportLatencyResponse again;
  ASSERT_TRUE(Report(At(9, 30), 120'000, &again).ok());
  EXPECT_TRUE(again.breached());
  EXPECT_EQ(again.incident().window().p99_us(), 450'000);
  EXPECT_TRUE(again.duplicate());
  EXPECT_EQ(again.incident().id(), incident.id());
  EXPECT_EQ(again.incident().charges(0).micros(), 5 * kPenalty);
  EXPECT_EQ(Ledger("externality.charge").size(), charges_before);

  const v1::GetChargebackResponse cb = Chargeback(midnight_, At(11, 0));
  ExpectConservation(cb);
  EXPECT_FALSE(cb.closed());
  ASSERT_EQ(cb.incidents_size(), 1);
  const v1::Statement& batch = StatementOf(cb, "batch-team");
  // 2 GPUs from 02:00 to the reclaim at 09:35, all of it lent serving capacity.
  EXPECT_EQ(batch.reserved_milli_seconds(), 2000 * 27'300);
  EXPECT_EQ(batch.borrowed_milli_seconds(), 2000 * 27'300);
  EXPECT_EQ(batch.externality_charged_micros(), 5 * kPenalty);
  EXPECT_EQ(batch.incidents_caused(), 1);
  EXPECT_EQ(batch.reserved_cost_micros(), 2 * 15'166'667);  // 27,300 s at 2 per GPU-hour, each.
  EXPECT_GT(batch.used_milli_seconds(), 0);
  ASSERT_TRUE(batch.has_budget_micros());
  EXPECT_EQ(batch.remainder_micros(), batch.budget_micros() - batch.net_cost_micros());
  const v1::Statement& serving = StatementOf(cb, "serving-team");
  EXPECT_EQ(serving.reserved_milli_seconds(), 2000 * 36'000 + 2000 * 5'100);
  EXPECT_EQ(serving.externality_credited_micros(), 5 * kPenalty);
  EXPECT_EQ(serving.incidents_suffered(), 1);
  EXPECT_EQ(serving.borrowed_milli_seconds(), 0);
  EXPECT_GT(serving.idle_cost_micros(), 0);  // 30% busy: most of it idle.
  EXPECT_FALSE(serving.has_budget_micros());
  ASSERT_EQ(cb.hours_size(), 11);
  EXPECT_EQ(cb.hours(0).reserved_milli_seconds(), 0);
  EXPECT_EQ(cb.hours(5).reserved_milli_seconds(), 4000 * 3600);
  EXPECT_GT(cb.hours(5).used_milli_seconds(), 0);

  // Closing freezes the statements; their hash is in the ledger.
  grpc::ClientContext close_ctx;
  v1::ClosePeriodRequest close;
  *close.mutable_period()->mutable_from() = TimestampOf(midnight_);
  *close.mutable_period()->mutable_to() = TimestampOf(At(11, 0));
  v1::ClosePeriodResponse closed;
  ASSERT_TRUE(chargeback_->ClosePeriod(&close_ctx, close, &closed).ok());
  EXPECT_TRUE(closed.chargeback().closed());
  EXPECT_EQ(closed.chargeback().sha256().size(), 64u);
  const std::vector<v1::LedgerEntry> closes = Ledger("chargeback.close");
  ASSERT_EQ(closes.size(), 1u);
  EXPECT_EQ(Field(closes[0].payload(), "sha256"), closed.chargeback().sha256());
  auto stored = db_->QueryValue(
      "SELECT encode(sha256(convert_to(statements_json, 'UTF8')), "
      "'hex') FROM chargeback_periods");
  EXPECT_THAT(stored, IsOkAndHolds(closed.chargeback().sha256()));
  // Late data cannot change a closed statement.
  const v1::GetChargebackResponse frozen = Chargeback(midnight_, At(11, 0));
  EXPECT_TRUE(frozen.closed());
  EXPECT_EQ(frozen.sha256(), closed.chargeback().sha256());
  EXPECT_EQ(frozen.statements_size(), cb.statements_size());
  EXPECT_EQ(StatementOf(frozen, "batch-team").net_cost_micros(), batch.net_cost_micros());
  const v1::GetChargebackResponse one = Chargeback(midnight_, At(11, 0), "batch-team");
  ASSERT_EQ(one.statements_size(), 1);
  EXPECT_EQ(one.incidents_size(), 1);
  grpc::ClientContext again_ctx;
  v1::ClosePeriodResponse twice;
  const grpc::Status overlap = chargeback_->ClosePeriod(&again_ctx, close, &twice);
  EXPECT_EQ(overlap.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(overlap.error_message(), ::testing::HasSubstr("period"));
  EXPECT_THAT(db_->QueryValue("UPDATE incidents SET cost_micros = 0"), ::testing::Not(IsOk()));
}

TEST_F(NightlyScenarioTest, ReclaimedInTimeNoIncidentNoCharge) {
  PlayTheNight(180'000);
  EXPECT_FALSE(ramp_window_.breached());
  const v1::GetChargebackResponse cb = Chargeback(midnight_, At(11, 0));
  ExpectConservation(cb);
  EXPECT_EQ(cb.incidents_size(), 0);
  EXPECT_EQ(StatementOf(cb, "batch-team").externality_charged_micros(), 0);
  EXPECT_EQ(StatementOf(cb, "serving-team").externality_credited_micros(), 0);
  EXPECT_TRUE(Ledger("externality.charge").empty());
}

TEST_F(NightlyScenarioTest, BadWindowsAreRefusedNamingTheFieldAndWriteNothing) {
  clock_.Advance(absl::Hours(1));
  auto before = db_->QueryValue(
      "SELECT (SELECT count(*) FROM latency_windows) || ',' || "
      "(SELECT count(*) FROM incidents) || ',' || (SELECT max(seq) "
      "FROM ledger)");
  ASSERT_THAT(before, IsOk());
  v1::ReportLatencyResponse resp;
  grpc::Status s = Report(At(1, 0), 450'000, &resp, absl::Minutes(4));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("window.end"));
  s = Report(At(3, 0), 450'000, &resp);  // Not over yet.
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("window.end"));
  {
    grpc::ClientContext ctx;
    v1::ReportLatencyRequest req;
    req.mutable_window()->set_team("serving-team");
    req.mutable_window()->set_service("unknown");
    *req.mutable_window()->mutable_start() = TimestampOf(At(1, 0));
    *req.mutable_window()->mutable_end() = TimestampOf(At(1, 5));
    s = chargeback_->ReportLatency(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), ::testing::HasSubstr("window.service"));
  }
  {
    grpc::ClientContext ctx;
    v1::SetSloRequest req;
    req.mutable_slo()->set_team("serving-team");
    req.mutable_slo()->set_service("x");
    req.mutable_slo()->set_pool("serving");
    req.mutable_slo()->set_p99_target_us(1000);
    req.mutable_slo()->set_window_seconds(30);
    v1::SetSloResponse slo_resp;
    s = chargeback_->SetSlo(&ctx, req, &slo_resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), ::testing::HasSubstr("slo.window_seconds"));
  }
  {
    grpc::ClientContext ctx;
    v1::GetChargebackRequest req;
    *req.mutable_period()->mutable_from() = TimestampOf(At(0, 30));
    *req.mutable_period()->mutable_to() = TimestampOf(At(1, 0));
    v1::GetChargebackResponse cb;
    s = chargeback_->GetChargeback(&ctx, req, &cb);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), ::testing::HasSubstr("period.from"));
  }
  {
    grpc::ClientContext ctx;
    v1::ClosePeriodRequest req;
    *req.mutable_period()->mutable_from() = TimestampOf(At(0, 0));
    *req.mutable_period()->mutable_to() = TimestampOf(At(5, 0));
    v1::ClosePeriodResponse closed;
    s = chargeback_->ClosePeriod(&ctx, req, &closed);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), ::testing::HasSubstr("period.to"));
  }
  EXPECT_THAT(db_->QueryValue("SELECT (SELECT count(*) FROM latency_windows) || ',' || "
                              "(SELECT count(*) FROM incidents) || ',' || (SELECT max(seq) "
                              "FROM ledger)"),
              IsOkAndHolds(*before));
}

}  // namespace
}  // namespace arbiter::server
