// TelemetryService: sample ingestion from agents, and the usage reports.
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include <spdlog/spdlog.h>

#include "core/arbitration.h"
#include "core/status_macros.h"
#include "core/telemetry.h"
#include "core/validate.h"
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
    if (s.uuid().size() > 128) return Invalid(n, f + "uuid", "must be at most 128 characters");
    if (s.mig_profile().size() > 32) {
      return Invalid(n, f + "mig_profile", "must be at most 32 characters");
    }
    if (s.pod().size() > 253 || s.pod_namespace().size() > 253) {
      return Invalid(n, f + (s.pod().size() > 253 ? "pod" : "pod_namespace"),
                     "must be at most 253 characters");
    }
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

// Reads batches one at a time: validate and resolve on the gRPC thread,
// store on the worker pool, then read the next.
class SampleStreamReactor final : public grpc::ServerReadReactor<v1::SampleBatch> {
 public:
  SampleStreamReactor(const ServiceContext& ctx, v1::StreamSamplesResponse* resp)
      : ctx_(ctx), resp_(resp) {
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
    std::vector<core::GpuSample> samples = Resolve(ctx_.clock->TimeNow());
    const bool queued = ctx_.reads->Submit([this, samples = std::move(samples)] {
      absl::StatusOr<int64_t> stored = ctx_.store->InsertSamples(samples);
      if (!stored.ok()) {
        Finish(ToGrpcStatus(stored.status(), "StreamSamples"));
        return;
      }
      resp_->set_stored(resp_->stored() + *stored);
      resp_->set_duplicates(resp_->duplicates() + static_cast<int64_t>(samples.size()) - *stored);
      ctx_.telemetry->MarkDirty(samples);
      StartRead(&batch_);
    });
    if (!queued)
      Finish(ToGrpcStatus(absl::ResourceExhaustedError("server busy; retry"), "StreamSamples"));
  }

  void OnDone() override { delete this; }

 private:
  void Unknown(const std::string& name) {
    resp_->set_unknown_gpu(resp_->unknown_gpu() + 1);
    const auto& listed = resp_->unknown_gpus();
    if (static_cast<size_t>(listed.size()) < kMaxUnknownListed &&
        std::find(listed.begin(), listed.end(), name) == listed.end()) {
      resp_->add_unknown_gpus(name);
    }
  }

  // The batch's samples matched to registered GPUs, with times corrected
  // for the agent's clock skew; the rest counted.
  std::vector<core::GpuSample> Resolve(absl::Time now) {
    const TelemetryOptions& options = ctx_.telemetry->options();
    const absl::Duration skew = *TimeFromProto(true, batch_.sent_at(), "") - now;
    const int64_t skew_ms = absl::ToInt64Milliseconds(skew);
    if (std::abs(skew_ms) > std::abs(resp_->max_skew_ms())) resp_->set_max_skew_ms(skew_ms);
    const bool correct = absl::AbsDuration(skew) > options.max_skew;
    if (correct) resp_->set_skew_corrected_batches(resp_->skew_corrected_batches() + 1);

    std::optional<std::pair<int64_t, int32_t>> node;
    if (!batch_.node().empty()) node = ctx_.nodes->Find(batch_.cluster(), batch_.node());
    const absl::Duration interval = absl::Seconds(batch_.interval_seconds());
    std::vector<core::GpuSample> out;
    out.reserve(batch_.samples_size());
    for (const v1::DeviceSample& s : batch_.samples()) {
      core::GpuSample sample = SampleOf(s, interval);
      if (correct) sample.at -= skew;
      if (sample.at > now + absl::Seconds(1)) {
        resp_->set_in_future(resp_->in_future() + 1);
        continue;
      }
      if (sample.at < now - options.retention) {
        resp_->set_too_old(resp_->too_old() + 1);
        continue;
      }
      // A registered UUID wins; else the named node's GPU at that index,
      // unless that GPU was registered with another UUID.
      if (auto gpu = s.uuid().empty() ? std::nullopt : ctx_.nodes->FindGpu(s.uuid())) {
        sample.node_id = gpu->first;
        sample.gpu_index = gpu->second;
      } else if (node && s.gpu_index() < node->second &&
                 ctx_.nodes->UuidOf(node->first, s.gpu_index()).empty()) {
        sample.node_id = node->first;
      } else {
        Unknown(s.uuid().empty()
                    ? absl::StrCat(batch_.cluster(), "/", batch_.node(), "/gpu", s.gpu_index())
                    : s.uuid());
        continue;
      }
      out.push_back(std::move(sample));
    }
    return out;
  }

  const ServiceContext ctx_;
  v1::StreamSamplesResponse* const resp_;
  v1::SampleBatch batch_;
};

// [from, to) of a report: both set, from < to, at most 400 days.
absl::Status ReportSpan(const google::protobuf::Timestamp& from_pb, bool has_from,
                        const google::protobuf::Timestamp& to_pb, bool has_to, absl::Time* from,
                        absl::Time* to) {
  ARBITER_ASSIGN_OR_RETURN(*from, TimeFromProto(has_from, from_pb, "from"));
  ARBITER_ASSIGN_OR_RETURN(*to, TimeFromProto(has_to, to_pb, "to"));
  if (*to <= *from) return absl::InvalidArgumentError("to: must be after from");
  if (*to - *from > kMaxReportSpan) {
    return absl::InvalidArgumentError("to: the span from..to must be at most 400 days");
  }
  return absl::OkStatus();
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

grpc::ServerReadReactor<v1::SampleBatch>* TelemetryService::StreamSamples(
    grpc::CallbackServerContext* ctx, v1::StreamSamplesResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "TelemetryService.StreamSamples", {});
      !access.ok()) {
    class Refused final : public grpc::ServerReadReactor<v1::SampleBatch> {
     public:
      explicit Refused(const absl::Status& s) { Finish(ToGrpcStatus(s, "StreamSamples")); }
      void OnDone() override { delete this; }
    };
    return new Refused(access);
  }
  return new SampleStreamReactor(ctx_, resp);
}

grpc::ServerUnaryReactor* TelemetryService::GetUtilization(grpc::CallbackServerContext* ctx,
                                                           const v1::GetUtilizationRequest* req,
                                                           v1::GetUtilizationResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "TelemetryService.GetUtilization", {});
      !access.ok()) {
    return FinishWith(ctx, access, "GetUtilization");
  }
  absl::Time from, to;
  if (absl::Status span =
          ReportSpan(req->from(), req->has_from(), req->to(), req->has_to(), &from, &to);
      !span.ok()) {
    return FinishWith(ctx, span, "GetUtilization");
  }
  from = HourOf(from);
  to = HourOf(to) == to ? to : HourOf(to) + absl::Hours(1);
  return RunRead(
      ctx, *ctx_.reads, "GetUtilization",
      [this, from, to, team = req->team(), resp]() -> absl::Status {
        ARBITER_ASSIGN_OR_RETURN(auto rows, ctx_.store->ListUtilization(from, to, team));
        core::MemberUsage total;
        for (const store::UtilizationRow& r : rows) {
          v1::UtilizationRow* out = resp->add_rows();
          out->set_team(r.team);
          out->set_pool(r.pool);
          out->set_workload_class(static_cast<v1::WorkloadClass>(r.workload_class));
          out->set_gpu_model(r.gpu_model);
          ToProto(r.usage, out);
          total.allocated_milli_seconds += r.usage.allocated_milli_seconds;
          total.sampled_milli_seconds += r.usage.sampled_milli_seconds;
          total.used_milli_seconds += r.usage.used_milli_seconds;
          total.energy_mwh += r.usage.energy_mwh;
          total.peak_busy_milli = std::max(total.peak_busy_milli, r.usage.peak_busy_milli);
          total.peak_memory_mib = std::max(total.peak_memory_mib, r.usage.peak_memory_mib);
        }
        ToProto(total, resp->mutable_total());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* TelemetryService::ListIdleAllocations(
    grpc::CallbackServerContext* ctx, const v1::ListIdleAllocationsRequest*,
    v1::ListIdleAllocationsResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "TelemetryService.ListIdleAllocations", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListIdleAllocations");
  }
  const absl::Time now = ctx_.clock->TimeNow();
  return RunRead(ctx, *ctx_.reads, "ListIdleAllocations", [this, now, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(std::vector<core::IdleFinding> idle, ctx_.telemetry->FindIdle(now));
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
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TelemetryService::GetRightSizing(grpc::CallbackServerContext* ctx,
                                                           const v1::GetRightSizingRequest* req,
                                                           v1::GetRightSizingResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "TelemetryService.GetRightSizing", {});
      !access.ok()) {
    return FinishWith(ctx, access, "GetRightSizing");
  }
  absl::Time from, to;
  if (absl::Status span =
          ReportSpan(req->from(), req->has_from(), req->to(), req->has_to(), &from, &to);
      !span.ok()) {
    return FinishWith(ctx, span, "GetRightSizing");
  }
  if (to - from < absl::Hours(1)) {
    return FinishWith(ctx, absl::InvalidArgumentError("to: the window must be at least one hour"),
                      "GetRightSizing");
  }
  if (req->headroom_milli() < 0 || req->headroom_milli() > 10'000) {
    return FinishWith(ctx, absl::InvalidArgumentError("headroom_milli: must be in 0..10000"),
                      "GetRightSizing");
  }
  const int32_t headroom = req->headroom_milli() == 0 ? 200 : req->headroom_milli();
  return RunRead(
      ctx, *ctx_.reads, "GetRightSizing",
      [this, from, to, headroom, team = req->team(), resp]() -> absl::Status {
        ARBITER_ASSIGN_OR_RETURN(auto models, ctx_.store->ListGpuModels());
        ARBITER_ASSIGN_OR_RETURN(auto members, ctx_.store->ListHeldMembers(from, to));
        ARBITER_ASSIGN_OR_RETURN(auto usage, ctx_.store->ListMemberUsage(from, to));
        std::map<std::pair<int64_t, int32_t>, core::MemberUsage> by_member;
        for (const core::MemberUsage& u : usage) by_member[{u.request_id, u.member}] = u;
        std::vector<std::pair<core::RightSizeAdvice, const core::HeldMember*>> found;
        for (const core::HeldMember& m : members) {
          if (m.until != absl::InfiniteFuture() || (!team.empty() && m.team != team)) {
            continue;
          }
          auto u = by_member.find({m.request_id, m.member});
          auto model = std::find_if(models.begin(), models.end(),
                                    [&](const auto& g) { return g.name == m.gpu_model; });
          if (u == by_member.end() || model == models.end()) continue;
          core::RightSizeAdvice a = core::AdviseRightSize(m, u->second, *model, headroom);
          if (a.saving_milli > 0) found.emplace_back(a, &m);
        }
        std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
          return a.first.saving_milli > b.first.saving_milli;
        });
        for (const auto& [a, m] : found) {
          v1::RightSizing* out = resp->add_advice();
          out->set_request_id(a.request_id);
          out->set_member(a.member);
          out->set_team(m->team);
          out->set_gpu_model(m->gpu_model);
          out->set_current_milli(a.current_milli);
          out->set_peak_busy_milli(a.peak_busy_milli);
          out->set_peak_memory_mib(a.peak_memory_mib);
          out->set_advised_mig_profile(a.advised_mig_profile);
          out->set_advised_milli(a.advised_milli);
          out->set_advised_memory_mib(a.advised_memory_mib);
        }
        return absl::OkStatus();
      });
}

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

grpc::ServerUnaryReactor* TelemetryService::SetIdlePolicy(grpc::CallbackServerContext* ctx,
                                                          const v1::SetIdlePolicyRequest* req,
                                                          v1::SetIdlePolicyResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "TelemetryService.SetIdlePolicy", {});
      !access.ok()) {
    return FinishWith(ctx, access, "SetIdlePolicy");
  }
  absl::StatusOr<core::IdlePolicy> policy = IdlePolicyFromProto(req->policy());
  if (policy.ok()) {
    if (absl::Status valid = core::ValidateIdlePolicy(*policy); !valid.ok()) policy = valid;
  }
  if (!policy.ok()) return FinishWith(ctx, policy.status(), "SetIdlePolicy");
  ToProto(*policy, resp->mutable_policy());
  return RunCommand(ctx, *ctx_.arbiter, "SetIdlePolicy",
                    [p = *policy](core::State& state, absl::Time, core::ChangeSet& changes) {
                      return core::SetIdlePolicy(state, p, changes);
                    });
}

grpc::ServerUnaryReactor* TelemetryService::ListIdlePolicies(grpc::CallbackServerContext* ctx,
                                                             const v1::ListIdlePoliciesRequest*,
                                                             v1::ListIdlePoliciesResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "TelemetryService.ListIdlePolicies", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListIdlePolicies");
  }
  return RunRead(ctx, *ctx_.reads, "ListIdlePolicies", [this, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto stored, ctx_.store->ListIdlePolicies());
    for (const core::IdlePolicy& p : core::IdlePoliciesInForce(stored)) {
      ToProto(p, resp->add_policies());
    }
    return absl::OkStatus();
  });
}

}  // namespace arbiter::server
