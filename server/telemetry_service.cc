// TelemetryService: sample ingestion from agents, and the usage reports.
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include <spdlog/spdlog.h>

#include "core/status_macros.h"
#include "core/validate.h"
#include "server/caller.h"
#include "server/convert.h"
#include "server/grpc_status.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {
namespace {

constexpr int kMaxSamplesPerBatch = 10'000;
constexpr int kMaxIntervalSeconds = 3600;
constexpr size_t kMaxUnknownListed = 20;
constexpr absl::Duration kMaxReportSpan = absl::Hours(24 * 400);

absl::Status Invalid(int64_t batch, const std::string& field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("batch ", batch, ": ", field, ": ", message));
}

template <typename T>
absl::Status CheckRange(int64_t batch, const std::string& field, bool has, T value, T lo, T hi) {
  if (!has || (value >= lo && value <= hi)) return absl::OkStatus();
  return Invalid(batch, field, absl::StrCat("must be in ", lo, "..", hi, ", got ", value));
}

// Text a sample carries into the store: at most `max` bytes of UTF-8
// without control characters (PostgreSQL refuses NUL in text).
absl::Status CheckText(int64_t batch, const std::string& field, const std::string& value,
                       size_t max) {
  if (value.size() > max) {
    return Invalid(batch, field, absl::StrCat("must be at most ", max, " characters"));
  }
  absl::Status clean = core::ValidateDescription(field, value);
  return clean.ok() ? clean : Invalid(batch, field, "must be UTF-8 without control characters");
}

// Checks one batch's fields. INVALID_ARGUMENT naming the first bad field.
absl::Status ValidateBatch(int64_t n, const v1::SampleBatch& b) {
  if (b.interval_seconds() < 1 || b.interval_seconds() > kMaxIntervalSeconds) {
    return Invalid(
        n, "interval_seconds",
        absl::StrCat("must be in 1..", kMaxIntervalSeconds, ", got ", b.interval_seconds()));
  }
  if (b.samples_size() < 1 || b.samples_size() > kMaxSamplesPerBatch) {
    return Invalid(n, "samples",
                   absl::StrCat("must hold 1..", kMaxSamplesPerBatch, ", got ", b.samples_size()));
  }
  if (b.cluster().empty() != b.node().empty()) {
    return Invalid(n, b.cluster().empty() ? "cluster" : "node",
                   "cluster and node are set together or not at all");
  }
  ARBITER_RETURN_IF_ERROR(TimeFromProto(b.has_sent_at(), b.sent_at(), "sent_at").status());
  for (int i = 0; i < b.samples_size(); ++i) {
    const v1::DeviceSample& s = b.samples(i);
    const std::string f = absl::StrCat("samples[", i, "].");
    absl::Status at = TimeFromProto(s.has_at(), s.at(), f + "at").status();
    if (!at.ok()) return Invalid(n, f + "at", at.message());
    ARBITER_RETURN_IF_ERROR(CheckText(n, f + "uuid", s.uuid(), 128));
    ARBITER_RETURN_IF_ERROR(CheckText(n, f + "mig_profile", s.mig_profile(), 32));
    ARBITER_RETURN_IF_ERROR(CheckText(n, f + "pod", s.pod(), 253));
    ARBITER_RETURN_IF_ERROR(CheckText(n, f + "pod_namespace", s.pod_namespace(), 253));
    ARBITER_RETURN_IF_ERROR(
        CheckRange<int32_t>(n, f + "gpu_index", true, s.gpu_index(), 0, core::kMaxGpusPerNode - 1));
    ARBITER_RETURN_IF_ERROR(CheckRange<int32_t>(n, f + "mig_instance", s.has_mig_instance(),
                                                s.mig_instance(), 0, 1'000'000));
    ARBITER_RETURN_IF_ERROR(
        CheckRange<int32_t>(n, f + "util_milli", s.has_util_milli(), s.util_milli(), 0, 1000));
    ARBITER_RETURN_IF_ERROR(CheckRange<int32_t>(n, f + "engine_active_milli",
                                                s.has_engine_active_milli(),
                                                s.engine_active_milli(), 0, 1000));
    ARBITER_RETURN_IF_ERROR(CheckRange<int64_t>(n, f + "fb_used_mib", s.has_fb_used_mib(),
                                                s.fb_used_mib(), 0, int64_t{1} << 40));
    ARBITER_RETURN_IF_ERROR(CheckRange<int64_t>(n, f + "fb_free_mib", s.has_fb_free_mib(),
                                                s.fb_free_mib(), 0, int64_t{1} << 40));
    ARBITER_RETURN_IF_ERROR(
        CheckRange<int64_t>(n, f + "power_mw", s.has_power_mw(), s.power_mw(), 0, 100'000'000));
  }
  return absl::OkStatus();
}

core::GpuSample SampleOf(const v1::DeviceSample& s, absl::Duration interval) {
  core::GpuSample out;
  out.at = *TimeFromProto(true, s.at(), "at");
  out.gpu_index = s.gpu_index();
  out.mig_instance = s.has_mig_instance() ? s.mig_instance() : -1;
  out.mig_profile = s.mig_profile();
  out.interval = interval;
  out.util_milli = s.has_util_milli() ? s.util_milli() : -1;
  out.engine_active_milli = s.has_engine_active_milli() ? s.engine_active_milli() : -1;
  out.fb_used_mib = s.has_fb_used_mib() ? s.fb_used_mib() : -1;
  out.fb_free_mib = s.has_fb_free_mib() ? s.fb_free_mib() : -1;
  out.power_mw = s.has_power_mw() ? s.power_mw() : -1;
  out.pod = s.pod();
  out.pod_namespace = s.pod_namespace();
  return out;
}

// Reads batches one at a time: validate and convert on the gRPC thread,
// ingest through the application (stored on its read workers), then read
// the next.
class SampleStreamReactor final : public grpc::ServerReadReactor<v1::SampleBatch> {
 public:
  SampleStreamReactor(const app::Telemetry* telemetry, v1::StreamSamplesResponse* resp)
      : telemetry_(telemetry), resp_(resp) {
    StartRead(&batch_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // The agent closed the stream (or the call ended).
      Finish(grpc::Status::OK);
      return;
    }
    const int64_t n = resp_->batches() + 1;
    resp_->set_batches(n);
    if (absl::Status valid = ValidateBatch(n, batch_); !valid.ok()) {
      Finish(ToGrpcStatus(valid, "StreamSamples"));
      return;
    }
    telemetry_->Ingest(BatchOf(batch_), [this](absl::StatusOr<app::IngestOutcome> outcome) {
      if (!outcome.ok()) {
        Finish(ToGrpcStatus(outcome.status(), "StreamSamples"));
        return;
      }
      Count(*outcome);
      StartRead(&batch_);
    });
  }

  void OnDone() override { delete this; }

 private:
  static app::SampleBatch BatchOf(const v1::SampleBatch& b) {
    app::SampleBatch out;
    out.cluster = b.cluster();
    out.node = b.node();
    out.sent_at = *TimeFromProto(true, b.sent_at(), "");
    const absl::Duration interval = absl::Seconds(b.interval_seconds());
    out.samples.reserve(b.samples_size());
    for (const v1::DeviceSample& s : b.samples()) {
      out.samples.push_back(app::ReportedSample{s.uuid(), SampleOf(s, interval)});
    }
    return out;
  }

  // Adds one batch's outcome to the stream's totals.
  void Count(const app::IngestOutcome& o) {
    if (std::abs(o.skew_ms) > std::abs(resp_->max_skew_ms())) resp_->set_max_skew_ms(o.skew_ms);
    if (o.skew_corrected) resp_->set_skew_corrected_batches(resp_->skew_corrected_batches() + 1);
    resp_->set_in_future(resp_->in_future() + o.in_future);
    resp_->set_too_old(resp_->too_old() + o.too_old);
    for (const std::string& name : o.unknown) {
      resp_->set_unknown_gpu(resp_->unknown_gpu() + 1);
      const auto& listed = resp_->unknown_gpus();
      if (static_cast<size_t>(listed.size()) < kMaxUnknownListed &&
          std::find(listed.begin(), listed.end(), name) == listed.end()) {
        resp_->add_unknown_gpus(name);
      }
    }
    resp_->set_stored(resp_->stored() + o.stored);
    resp_->set_duplicates(resp_->duplicates() + o.duplicates);
  }

  const app::Telemetry* const telemetry_;
  v1::StreamSamplesResponse* const resp_;
  v1::SampleBatch batch_;
};

// [from, to) of a report: both set, from < to, at most 400 days.
absl::StatusOr<app::Span> ReportSpan(const google::protobuf::Timestamp& from_pb, bool has_from,
                                     const google::protobuf::Timestamp& to_pb, bool has_to) {
  app::Span span;
  ARBITER_ASSIGN_OR_RETURN(span.from, TimeFromProto(has_from, from_pb, "from"));
  ARBITER_ASSIGN_OR_RETURN(span.to, TimeFromProto(has_to, to_pb, "to"));
  if (span.to <= span.from) return absl::InvalidArgumentError("to: must be after from");
  if (span.to - span.from > kMaxReportSpan) {
    return absl::InvalidArgumentError("to: the span from..to must be at most 400 days");
  }
  return span;
}

void ToProto(const core::MemberUsage& u, v1::UtilizationRow* out) {
  out->set_allocated_milli_gpu_seconds(u.allocated_milli_seconds);
  out->set_sampled_milli_gpu_seconds(u.sampled_milli_seconds);
  out->set_used_milli_gpu_seconds(u.used_milli_seconds);
  out->set_energy_mwh(u.energy_mwh);
  out->set_peak_busy_milli(u.peak_busy_milli);
  out->set_peak_memory_mib(u.peak_memory_mib);
}

}  // namespace

namespace {

void ToProto(const core::IdlePolicy& p, v1::IdlePolicy* out) {
  out->set_workload_class(static_cast<v1::WorkloadClass>(p.workload_class));
  out->set_threshold_milli(p.threshold_milli);
  out->set_window_seconds(absl::ToInt64Seconds(p.window));
  out->set_action(std::string(core::IdleActionName(p.action)));
  out->set_notice_seconds(absl::ToInt64Seconds(p.notice));
}

absl::StatusOr<core::IdlePolicy> IdlePolicyFromProto(const v1::IdlePolicy& p) {
  core::IdlePolicy out;
  if (!v1::WorkloadClass_IsValid(p.workload_class())) {
    return absl::InvalidArgumentError("policy.workload_class: unknown class");
  }
  out.workload_class = static_cast<core::WorkloadClass>(p.workload_class());
  out.threshold_milli = p.threshold_milli();
  out.window = absl::Seconds(p.window_seconds());
  if (p.action() != "report" && p.action() != "notify" && p.action() != "release") {
    return absl::InvalidArgumentError("policy.action: must be report, notify or release");
  }
  out.action = core::IdleActionFromName(p.action());
  out.notice = absl::Seconds(p.notice_seconds());
  return out;
}

}  // namespace

grpc::ServerReadReactor<v1::SampleBatch>* TelemetryService::StreamSamples(
    grpc::CallbackServerContext* ctx, v1::StreamSamplesResponse* resp) {
  const app::Telemetry& telemetry = ctx_.app->telemetry_reports();
  if (absl::Status access = telemetry.CheckStream(CallerOf(*ctx, ctx_.insecure)); !access.ok()) {
    class Refused final : public grpc::ServerReadReactor<v1::SampleBatch> {
     public:
      explicit Refused(const absl::Status& s) { Finish(ToGrpcStatus(s, "StreamSamples")); }
      void OnDone() override { delete this; }
    };
    return new Refused(access);
  }
  return new SampleStreamReactor(&telemetry, resp);
}

grpc::ServerUnaryReactor* TelemetryService::GetUtilization(grpc::CallbackServerContext* ctx,
                                                           const v1::GetUtilizationRequest* req,
                                                           v1::GetUtilizationResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->telemetry_reports().GetUtilization(
      CallerOf(*ctx, ctx_.insecure),
      ReportSpan(req->from(), req->has_from(), req->to(), req->has_to()), req->team(),
      Answer<app::UtilizationReport>(
          reactor, "GetUtilization", [resp](const app::UtilizationReport& report) {
            for (const store::UtilizationRow& r : report.rows) {
              v1::UtilizationRow* out = resp->add_rows();
              out->set_team(r.team);
              out->set_pool(r.pool);
              out->set_workload_class(static_cast<v1::WorkloadClass>(r.workload_class));
              out->set_gpu_model(r.gpu_model);
              ToProto(r.usage, out);
            }
            ToProto(report.total, resp->mutable_total());
          }));
  return reactor;
}

grpc::ServerUnaryReactor* TelemetryService::ListIdleAllocations(
    grpc::CallbackServerContext* ctx, const v1::ListIdleAllocationsRequest*,
    v1::ListIdleAllocationsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->telemetry_reports().ListIdleAllocations(
      CallerOf(*ctx, ctx_.insecure),
      Answer<std::vector<core::IdleFinding>>(
          reactor, "ListIdleAllocations", [resp](const std::vector<core::IdleFinding>& idle) {
            for (const core::IdleFinding& f : idle) {
              v1::IdleAllocation* out = resp->add_allocations();
              out->set_request_id(f.request_id);
              out->set_team(f.team);
              out->set_pool(f.pool);
              out->set_workload_class(static_cast<v1::WorkloadClass>(f.workload_class));
              out->set_peak_busy_milli(f.peak_busy_milli);
              out->set_idle_milli_gpu_seconds(f.idle_milli_seconds);
              out->set_action(std::string(core::IdleActionName(f.action)));
            }
          }));
  return reactor;
}

grpc::ServerUnaryReactor* TelemetryService::GetRightSizing(grpc::CallbackServerContext* ctx,
                                                           const v1::GetRightSizingRequest* req,
                                                           v1::GetRightSizingResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->telemetry_reports().GetRightSizing(
      CallerOf(*ctx, ctx_.insecure),
      ReportSpan(req->from(), req->has_from(), req->to(), req->has_to()), req->headroom_milli(),
      req->team(),
      Answer<std::vector<app::RightSizing>>(reactor, "GetRightSizing",
                                            [resp](const std::vector<app::RightSizing>& advice) {
                                              for (const app::RightSizing& r : advice) {
                                                const core::RightSizeAdvice& a = r.advice;
                                                v1::RightSizing* out = resp->add_advice();
                                                out->set_request_id(a.request_id);
                                                out->set_member(a.member);
                                                out->set_team(r.team);
                                                out->set_gpu_model(r.gpu_model);
                                                out->set_current_milli(a.current_milli);
                                                out->set_peak_busy_milli(a.peak_busy_milli);
                                                out->set_peak_memory_mib(a.peak_memory_mib);
                                                out->set_advised_mig_profile(a.advised_mig_profile);
                                                out->set_advised_milli(a.advised_milli);
                                                out->set_advised_memory_mib(a.advised_memory_mib);
                                              }
                                            }));
  return reactor;
}

grpc::ServerUnaryReactor* TelemetryService::SetIdlePolicy(grpc::CallbackServerContext* ctx,
                                                          const v1::SetIdlePolicyRequest* req,
                                                          v1::SetIdlePolicyResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<core::IdlePolicy> policy = IdlePolicyFromProto(req->policy());
  ctx_.app->telemetry_reports().SetIdlePolicy(
      CallerOf(*ctx, ctx_.insecure), policy,
      Answer<app::Done>(reactor, "SetIdlePolicy",
                        [policy = policy.value_or(core::IdlePolicy{}), resp](const app::Done&) {
                          ToProto(policy, resp->mutable_policy());
                        }));
  return reactor;
}

grpc::ServerUnaryReactor* TelemetryService::ListIdlePolicies(grpc::CallbackServerContext* ctx,
                                                             const v1::ListIdlePoliciesRequest*,
                                                             v1::ListIdlePoliciesResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->telemetry_reports().ListIdlePolicies(
      CallerOf(*ctx, ctx_.insecure),
      Answer<std::vector<core::IdlePolicy>>(reactor, "ListIdlePolicies",
                                            [resp](const std::vector<core::IdlePolicy>& policies) {
                                              for (const core::IdlePolicy& p : policies)
                                                ToProto(p, resp->add_policies());
                                            }));
  return reactor;
}

}  // namespace arbiter::server
