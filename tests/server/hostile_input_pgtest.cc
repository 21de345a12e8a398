// Hostile input through a real arbiterd (in process, plaintext on loopback)
// on a real database, beyond the field-by-field cases of server_pgtest.cc:
// bytes that are no message, messages over the size limit, huge strings and
// repeated fields, quantities that overflow, NUL bytes and SQL in text, keys
// replayed with other bodies, and a deadline that expires while the
// decision's transaction waits. Each gets its own status, the server keeps
// serving, and nothing is written; the expired deadline's decision is
// written exactly once and its replay names it.
#include <condition_variable>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "tests/server/server_fixture.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;
using Code = grpc::StatusCode;
constexpr char kRequestCapacity[] = "/arbiter.v1.AllocationService/RequestCapacity";

class HostileInputTest : public ServerTest {
 protected:
  // Sends `bytes` as the body of a unary call of `method` (RequestCapacity
  // by default), unparsed.
  grpc::Status SendRaw(const std::string& bytes, const char* method = kRequestCapacity) {
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    grpc::GenericStub stub(channel);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext ctx;
    std::mutex mu;
    std::condition_variable done_cv;
    bool done = false;
    grpc::Status result;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status status) {
                     std::lock_guard<std::mutex> lock(mu);
                     result = std::move(status);
                     done = true;
                     done_cv.notify_one();
                   });
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return done; });
    return result;
  }

  // The server still decides: a fresh valid request is admitted.
  void ExpectServing(const std::string& key) {
    v1::RequestCapacityResponse resp;
    grpc::Status status = Request(ValidRequest(key), &resp);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(resp.request().state(), v1::REQUEST_STATE_ADMITTED);
  }
};

TEST_F(HostileInputTest, BytesThatAreNoMessageAreRefusedAndWriteNothing) {
  SeedOrganisation();
  const std::string valid = ValidRequest("raw").SerializeAsString();
  struct Body {
    std::string name;
    std::string bytes;
    Code code;
  };
  // The protobuf runtime refuses a body that does not parse before any
  // handler runs, so no field can be named: INTERNAL, as gRPC's conventions
  // give for a request that does not parse.
  const std::vector<Body> bodies = {
      {"garbage", std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11), Code::INTERNAL},
      {"truncated", valid.substr(0, valid.size() - 1), Code::INTERNAL},
      // Field 1 claims 1 GiB of bytes that do not follow.
      {"length past the end", std::string("\x0a\x80\x80\x80\x80\x04", 6), Code::INTERNAL},
      // A group start tag that never ends.
      {"unterminated group", std::string("\x0b", 1), Code::INTERNAL},
      // Field 1 (idempotency_key, a string) sent as a varint parses as an
      // unknown field: the request then lacks its fields and validation
      // names the first one missing.
      {"wrong wire type", std::string("\x08\x01", 2), Code::INVALID_ARGUMENT},
  };
  const std::string before = RowCounts();
  for (const Body& body : bodies) {
    SCOPED_TRACE(body.name);
    grpc::Status status = SendRaw(body.bytes);
    EXPECT_EQ(status.error_code(), body.code) << status.error_message();
    if (body.code == Code::INTERNAL) {
      EXPECT_EQ(status.error_message(),
                std::string("request: the body does not parse as the request message of ") +
                    kRequestCapacity);
    }
    EXPECT_EQ(RowCounts(), before);
  }
  // The same for every method, reads and writes alike.
  for (const char* method :
       {"/arbiter.v1.InventoryService/ListClusters", "/arbiter.v1.GovernanceService/CreateTeam",
        "/arbiter.v1.LedgerService/ListLedgerEntries"}) {
    SCOPED_TRACE(method);
    EXPECT_EQ(SendRaw(bodies[0].bytes, method).error_code(), Code::INTERNAL);
  }
  // An unknown method is still UNIMPLEMENTED.
  EXPECT_EQ(SendRaw(valid, "/arbiter.v1.AllocationService/NoSuchMethod").error_code(),
            Code::UNIMPLEMENTED);
  // The valid body, sent the same raw way, is decided.
  EXPECT_TRUE(SendRaw(valid).ok());
  ExpectServing("after-raw");
}

TEST_F(HostileInputTest, OversizedAndHugeMessagesGetTheirStatus) {
  SeedOrganisation();
  const std::string before = RowCounts();
  struct Case {
    std::string name;
    std::function<void(v1::RequestCapacityRequest&)> mutate;
    Code code;
    std::string field;  // The message must start with "<field>:" (unless empty).
  };
  const std::vector<Case> cases = {
      // Over the 4 MiB receive limit: refused by gRPC before parsing.
      {"5 MiB description",
       [](v1::RequestCapacityRequest& r) { r.set_description(std::string(5 << 20, 'd')); },
       Code::RESOURCE_EXHAUSTED, ""},
      {"3 MiB description",
       [](v1::RequestCapacityRequest& r) { r.set_description(std::string(3 << 20, 'd')); },
       Code::INVALID_ARGUMENT, "description"},
      {"1 MiB key",
       [](v1::RequestCapacityRequest& r) { r.set_idempotency_key(std::string(1 << 20, 'k')); },
       Code::INVALID_ARGUMENT, "idempotency_key"},
      {"1 MiB team", [](v1::RequestCapacityRequest& r) { r.set_team(std::string(1 << 20, 't')); },
       Code::INVALID_ARGUMENT, "team"},
      {"200,000 gpu models",
       [](v1::RequestCapacityRequest& r) {
         for (int i = 0; i < 200'000; ++i) r.add_gpu_models("L4");
       },
       Code::INVALID_ARGUMENT, "gpu_models"},
      {"a 1 MiB gpu model name",
       [](v1::RequestCapacityRequest& r) { r.add_gpu_models(std::string(1 << 20, 'm')); },
       Code::INVALID_ARGUMENT, "gpu_models[0]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::RequestCapacityRequest req = ValidRequest("huge");
    c.mutate(req);
    v1::RequestCapacityResponse resp;
    grpc::Status status = Request(req, &resp);
    EXPECT_EQ(status.error_code(), c.code) << status.error_message().substr(0, 200);
    if (!c.field.empty()) {
      EXPECT_EQ(status.error_message().rfind(c.field + ":", 0), 0u)
          << status.error_message().substr(0, 200);
    }
    // A refusal does not echo the input back.
    EXPECT_LT(status.error_message().size(), 1024u);
    EXPECT_EQ(RowCounts(), before);
  }
  ExpectServing("after-huge");
}

TEST_F(HostileInputTest, OverflowingQuantitiesAndTextAreRefusedWithTheirField) {
  SeedOrganisation();
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  using RC = v1::RequestCapacityRequest;
  struct Case {
    std::string name;
    std::function<void(RC&)> mutate;
    std::string field;
  };
  auto model = [](RC& r) {
    v1::ModelProfile* m = r.mutable_shape()->mutable_model_profile();
    m->set_parameters(7'000'000'000);
    m->set_bytes_per_parameter_milli(2000);
    m->set_layers(32);
    m->set_kv_heads(8);
    m->set_head_dim(128);
    m->set_kv_bytes_per_element_milli(2000);
    m->set_token_budget(4096);
    return m;
  };
  const std::vector<Case> cases = {
      {"fraction memory int64 max",
       [&](RC& r) { r.mutable_shape()->mutable_fraction()->set_memory_mib(kMax); },
       "shape.fraction.memory_mib"},
      {"fraction gpu int64 min",
       [&](RC& r) { r.mutable_shape()->mutable_fraction()->set_gpu_milli(kMin); },
       "shape.fraction.gpu_milli"},
      {"host memory int64 max", [&](RC& r) { r.mutable_shape()->set_memory_mib(kMax); },
       "shape.memory_mib"},
      {"negative cpu", [&](RC& r) { r.mutable_shape()->set_cpu_milli(-1); }, "shape.cpu_milli"},
      {"whole gpus int32 min", [&](RC& r) { r.mutable_shape()->set_whole_gpus(INT32_MIN); },
       "shape.whole_gpus"},
      {"members int32 max", [&](RC& r) { r.set_members(INT32_MAX); }, "members"},
      {"priority int32 min", [&](RC& r) { r.set_priority(INT32_MIN); }, "priority"},
      {"checkpoint int64 max", [&](RC& r) { r.set_checkpoint_seconds(kMax); },
       "checkpoint_seconds"},
      {"duration int64 max", [&](RC& r) { r.set_duration_seconds(kMax); }, "duration_seconds"},
      {"start time int64 max", [&](RC& r) { r.mutable_start_time()->set_seconds(kMax); },
       "start_time"},
      {"model parameters int64 max", [&](RC& r) { model(r)->set_parameters(kMax); },
       "shape.model_profile.parameters"},
      {"model whose product overflows",
       [&](RC& r) {
         v1::ModelProfile* m = model(r);
         m->set_layers(1'000'000);
         m->set_kv_heads(1'000'000);
         m->set_head_dim(1'000'000);
         m->set_token_budget(1'000'000'000);
       },
       "shape.model_profile"},
      {"model with negative layers", [&](RC& r) { model(r)->set_layers(-1); },
       "shape.model_profile.layers"},
      {"NUL in team", [](RC& r) { r.set_team(std::string("infer\0ence", 10)); }, "team"},
      {"NUL in key", [](RC& r) { r.set_idempotency_key(std::string("k\0", 2)); },
       "idempotency_key"},
      {"NUL in description", [](RC& r) { r.set_description(std::string("a\0b", 3)); },
       "description"},
      {"SQL in pool", [](RC& r) { r.set_pool("serving' OR '1'='1"); }, "pool"},
      {"SQL in a model", [](RC& r) { r.add_gpu_models("L4'); DELETE FROM gpus; --"); },
       "gpu_models[0]"},
      {"space in key", [](RC& r) { r.set_idempotency_key("a key"); }, "idempotency_key"},
  };
  const std::string before = RowCounts();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RC req = ValidRequest("overflow");
    c.mutate(req);
    v1::RequestCapacityResponse resp;
    grpc::Status status = Request(req, &resp);
    EXPECT_EQ(status.error_code(), Code::INVALID_ARGUMENT) << status.error_message();
    EXPECT_EQ(status.error_message().rfind(c.field, 0), 0u) << status.error_message();
    EXPECT_EQ(RowCounts(), before);
  }
  ExpectServing("after-overflow");
}

// Text that is allowed (a key of printable ASCII, a free-form description)
// may look like SQL: it is stored and returned verbatim and runs nothing.
TEST_F(HostileInputTest, SqlInAllowedTextIsStoredVerbatim) {
  SeedOrganisation();
  v1::RequestCapacityRequest req = ValidRequest("k';DROP/**/TABLE/**/requests;--");
  req.set_description("'); DELETE FROM ledger; -- \xe2\x9c\x93 $1 %s \\x00");
  v1::RequestCapacityResponse resp;
  ASSERT_TRUE(Request(req, &resp).ok());
  v1::GetRequestRequest get;
  get.set_id(resp.request().id());
  v1::GetRequestResponse got;
  grpc::ClientContext ctx;
  ASSERT_TRUE(allocation_->GetRequest(&ctx, get, &got).ok());
  EXPECT_EQ(got.request().idempotency_key(), req.idempotency_key());
  EXPECT_EQ(got.request().description(), req.description());
  auto ledger = db_->QueryValue("SELECT count(*) > 0 FROM ledger");
  ASSERT_THAT(ledger, IsOk());
  EXPECT_EQ(*ledger, "t");
  ExpectServing("after-sql");
}

// A key names one request: any other body under it is FAILED_PRECONDITION
// (idempotency_key), however it differs, and the first body still replays.
TEST_F(HostileInputTest, AKeyReplayedWithAnotherBodyIsRefused) {
  SeedOrganisation();
  v1::RequestCapacityResponse first;
  ASSERT_TRUE(Request(ValidRequest("once"), &first).ok());
  const std::string before = RowCounts();
  using RC = v1::RequestCapacityRequest;
  const std::vector<std::pair<std::string, std::function<void(RC&)>>> changes = {
      {"fraction", [](RC& r) { r.mutable_shape()->mutable_fraction()->set_gpu_milli(251); }},
      {"whole gpus", [](RC& r) { r.mutable_shape()->set_whole_gpus(1); }},
      {"priority", [](RC& r) { r.set_priority(1); }},
      {"preemptible", [](RC& r) { r.set_preemptible(true); }},
      {"class", [](RC& r) { r.set_workload_class(v1::WORKLOAD_CLASS_EXPERIMENTATION); }},
      {"models", [](RC& r) { r.add_gpu_models("L4"); }},
  };
  for (const auto& [name, change] : changes) {
    SCOPED_TRACE(name);
    RC req = ValidRequest("once");
    change(req);
    v1::RequestCapacityResponse resp;
    grpc::Status status = Request(req, &resp);
    EXPECT_EQ(status.error_code(), Code::FAILED_PRECONDITION) << status.error_message();
    EXPECT_EQ(status.error_message().rfind("idempotency_key:", 0), 0u) << status.error_message();
    EXPECT_EQ(RowCounts(), before);
  }
  v1::RequestCapacityResponse replay;
  ASSERT_TRUE(Request(ValidRequest("once"), &replay).ok());
  EXPECT_TRUE(replay.replayed());
  EXPECT_EQ(replay.request().id(), first.request().id());
}

// The client's deadline passes while the decision's transaction waits for a
// lock. The client gets DEADLINE_EXCEEDED; the server keeps serving; the
// decision commits once the lock goes, exactly once, and the retry with the
// same key replays it instead of deciding again.
TEST_F(HostileInputTest, ADeadlineThatExpiresMidTransactionDecidesExactlyOnce) {
  SeedOrganisation();
  auto requests = [&] {
    auto n = db_->QueryValue("SELECT count(*) FROM requests");
    EXPECT_THAT(n, IsOk());
    return n.value_or("");
  };
  ASSERT_EQ(requests(), "0");
  {
    auto lock = db_->LockTable("requests");
    ASSERT_THAT(lock, IsOk());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    v1::RequestCapacityResponse resp;
    grpc::Status status = allocation_->RequestCapacity(&ctx, ValidRequest("late"), &resp);
    EXPECT_EQ(status.error_code(), Code::DEADLINE_EXCEEDED) << status.error_message();
    EXPECT_EQ(requests(), "0");  // Still waiting for the lock: nothing committed.
  }
  // The lock is gone: the stalled batch commits. A retry with the key
  // replays the one decision.
  v1::RequestCapacityResponse retry;
  ASSERT_TRUE(Request(ValidRequest("late"), &retry).ok());
  EXPECT_TRUE(retry.replayed());
  EXPECT_EQ(retry.request().state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(requests(), "1");
  ExpectServing("after-deadline");
  EXPECT_EQ(requests(), "2");
}

// The engine keeps an ended request's key for seconds only; for the
// rest of the 24-hour window PostgreSQL finds it (requests_ended_key): a
// retry replays the stored decision exactly, a preview replays it too,
// another body is refused naming the key, and nothing is written. Past the
// window the key starts a new request.
TEST_F(HostileInputTest, AnEndedRequestsKeyReplaysForTheWholeWindow) {
  SeedOrganisation();
  v1::RequestCapacityResponse first;
  ASSERT_TRUE(Request(ValidRequest("nightly"), &first).ok());
  ASSERT_EQ(first.request().state(), v1::REQUEST_STATE_ADMITTED);
  {
    grpc::ClientContext ctx;
    v1::ReleaseAllocationRequest release;
    release.set_id(first.request().id());
    v1::ReleaseAllocationResponse released;
    ASSERT_TRUE(allocation_->ReleaseAllocation(&ctx, release, &released).ok());
  }
  clock_.Advance(absl::Hours(3));
  const std::string before = RowCounts();

  v1::RequestCapacityResponse again;
  ASSERT_TRUE(Request(ValidRequest("nightly"), &again).ok());
  EXPECT_TRUE(again.replayed());
  v1::GetRequestResponse stored;
  {
    grpc::ClientContext ctx;
    v1::GetRequestRequest get;
    get.set_id(first.request().id());
    ASSERT_TRUE(allocation_->GetRequest(&ctx, get, &stored).ok());
  }
  EXPECT_EQ(again.request().SerializeAsString(), stored.request().SerializeAsString());
  EXPECT_EQ(again.request().state(), v1::REQUEST_STATE_RELEASED);

  v1::RequestCapacityRequest preview = ValidRequest("nightly");
  preview.set_validate_only(true);
  v1::RequestCapacityResponse previewed;
  ASSERT_TRUE(Request(preview, &previewed).ok());
  EXPECT_TRUE(previewed.replayed());
  EXPECT_EQ(previewed.request().id(), first.request().id());

  v1::RequestCapacityRequest other = ValidRequest("nightly");
  other.mutable_shape()->mutable_fraction()->set_gpu_milli(500);
  v1::RequestCapacityResponse refused;
  const grpc::Status status = Request(other, &refused);
  EXPECT_EQ(status.error_code(), Code::FAILED_PRECONDITION) << status.error_message();
  EXPECT_EQ(status.error_message().rfind("idempotency_key:", 0), 0u) << status.error_message();
  EXPECT_NE(status.error_message().find(absl::StrCat("request ", first.request().id())),
            std::string::npos)
      << status.error_message();
  EXPECT_EQ(RowCounts(), before);

  clock_.Advance(absl::Hours(22));  // 25 hours after it ended.
  v1::RequestCapacityResponse fresh;
  ASSERT_TRUE(Request(ValidRequest("nightly"), &fresh).ok());
  EXPECT_FALSE(fresh.replayed());
  EXPECT_NE(fresh.request().id(), first.request().id());
}

}  // namespace
}  // namespace arbiter::server
