// arbctl usage, idle list|policies|set-policy, rightsize.
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

#include "clients/arbctl/commands.h"
#include "clients/arbctl/report.h"
#include "clients/arbctl/table.h"

namespace arbiter::arbctl {
namespace {

// Sets `from` and `to` (whole hours around the given times). False, with a
// message, when either does not parse.
template <typename Request>
bool SetSpan(const std::string& from, const std::string& to, Request* req) {
  absl::Time a, b;
  if (!ParseWhen(from, &a) || !ParseWhen(to, &b)) {
    std::cerr << "arbctl: --from and --to are RFC 3339 times or +/-<duration> from now\n";
    return false;
  }
  req->mutable_from()->set_seconds(absl::ToUnixSeconds(a));
  req->mutable_to()->set_seconds(absl::ToUnixSeconds(b));
  return true;
}

}  // namespace

int Commands::Usage(const std::string& from, const std::string& to, const std::string& team) {
  v1::GetUtilizationRequest req;
  if (!SetSpan(from, to, &req)) return 2;
  req.set_team(team);
  v1::GetUtilizationResponse resp;
  if (!Call(telemetry_, &v1::TelemetryService::Stub::GetUtilization, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"TEAM", "POOL", "CLASS", "MODEL", "ALLOCATED_GPU_H", "USED_GPU_H", "COVERAGE",
           "PEAK_BUSY", "PEAK_MEM_MIB", "KWH"});
  auto row = [&](const v1::UtilizationRow& r, const std::string& team_name) {
    const int64_t alloc = r.allocated_milli_gpu_seconds();
    t.AddRow({team_name, r.pool(), r.workload_class() == 0 ? "" : ClassText(r.workload_class()),
              r.gpu_model(), GpuHoursText(alloc), GpuHoursText(r.used_milli_gpu_seconds()),
              alloc == 0 ? "-" : PercentText(r.sampled_milli_gpu_seconds() * 1000 / alloc),
              PercentText(r.peak_busy_milli()), absl::StrCat(r.peak_memory_mib()),
              KwhText(r.energy_mwh())});
  };
  for (const v1::UtilizationRow& r : resp.rows()) row(r, r.team());
  row(resp.total(), "TOTAL");
  PrintTable(t);
  return 0;
}

int Commands::ListIdle() {
  v1::ListIdleAllocationsResponse resp;
  if (!Call(telemetry_, &v1::TelemetryService::Stub::ListIdleAllocations,
            v1::ListIdleAllocationsRequest(), &resp)) {
    return 1;
  }
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"REQUEST", "TEAM", "POOL", "CLASS", "PEAK_BUSY", "IDLE_GPU_H", "ACTION"});
  for (const v1::IdleAllocation& a : resp.allocations()) {
    t.AddRow({absl::StrCat(a.request_id()), a.team(), a.pool(), ClassText(a.workload_class()),
              PercentText(a.peak_busy_milli()), GpuHoursText(a.idle_milli_gpu_seconds()),
              a.action()});
  }
  PrintTable(t);
  return 0;
}

int Commands::ListIdlePolicies() {
  v1::ListIdlePoliciesResponse resp;
  if (!Call(telemetry_, &v1::TelemetryService::Stub::ListIdlePolicies,
            v1::ListIdlePoliciesRequest(), &resp)) {
    return 1;
  }
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"CLASS", "IDLE_UNDER", "FOR_S", "ACTION", "NOTICE_S"});
  for (const v1::IdlePolicy& p : resp.policies()) {
    t.AddRow({ClassText(p.workload_class()), PercentText(p.threshold_milli()),
              absl::StrCat(p.window_seconds()), p.action(), absl::StrCat(p.notice_seconds())});
  }
  PrintTable(t);
  return 0;
}

int Commands::SetIdlePolicy(const std::string& workload_class, int32_t threshold_milli,
                            int64_t window_seconds, const std::string& action,
                            int64_t notice_seconds) {
  v1::WorkloadClass cls = v1::WORKLOAD_CLASS_UNSPECIFIED;
  if (!v1::WorkloadClass_Parse("WORKLOAD_CLASS_" + absl::AsciiStrToUpper(workload_class), &cls)) {
    std::cerr << "arbctl: the class is training, inference, batch_analytics or experimentation\n";
    return 2;
  }
  v1::SetIdlePolicyRequest req;
  req.mutable_policy()->set_workload_class(cls);
  req.mutable_policy()->set_threshold_milli(threshold_milli);
  req.mutable_policy()->set_window_seconds(window_seconds);
  req.mutable_policy()->set_action(action);
  req.mutable_policy()->set_notice_seconds(notice_seconds);
  v1::SetIdlePolicyResponse resp;
  if (!Call(telemetry_, &v1::TelemetryService::Stub::SetIdlePolicy, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << workload_class << ": idle under " << PercentText(threshold_milli) << " for "
            << window_seconds << " s -> " << action << " (notice " << notice_seconds << " s)\n";
  return 0;
}

int Commands::RightSize(const std::string& from, const std::string& to, const std::string& team) {
  v1::GetRightSizingRequest req;
  if (!SetSpan(from, to, &req)) return 2;
  req.set_team(team);
  v1::GetRightSizingResponse resp;
  if (!Call(telemetry_, &v1::TelemetryService::Stub::GetRightSizing, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t(
      {"REQUEST", "MEMBER", "TEAM", "MODEL", "NOW_MILLI", "PEAK_BUSY", "PEAK_MEM_MIB", "ADVICE"});
  for (const v1::RightSizing& a : resp.advice()) {
    const std::string advice =
        a.advised_mig_profile().empty()
            ? absl::StrCat(a.advised_milli(), " milli, ", a.advised_memory_mib(), " MiB")
            : absl::StrCat("MIG ", a.advised_mig_profile());
    t.AddRow({absl::StrCat(a.request_id()), absl::StrCat(a.member()), a.team(), a.gpu_model(),
              absl::StrCat(a.current_milli()), PercentText(a.peak_busy_milli()),
              absl::StrCat(a.peak_memory_mib()), advice});
  }
  PrintTable(t);
  return 0;
}

}  // namespace arbiter::arbctl

namespace arbiter::arbctl {

int Commands::SendSample(const SampleOptions& s) {
  v1::SampleBatch batch;
  batch.set_cluster(s.cluster);
  batch.set_node(s.node);
  batch.set_interval_seconds(s.interval_seconds);
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  batch.mutable_sent_at()->set_seconds(now);
  v1::DeviceSample* d = batch.add_samples();
  d->mutable_at()->set_seconds(now);
  d->set_gpu_index(s.gpu_index);
  d->set_uuid(s.uuid);
  if (s.util_milli >= 0) d->set_util_milli(s.util_milli);
  if (s.fb_used_mib >= 0) d->set_fb_used_mib(s.fb_used_mib);
  if (s.power_mw >= 0) d->set_power_mw(s.power_mw);
  d->set_pod(s.pod);
  d->set_pod_namespace(s.pod_namespace);
  grpc::ClientContext ctx;
  Deadline(ctx);
  v1::StreamSamplesResponse resp;
  auto writer = telemetry_->StreamSamples(&ctx, &resp);
  writer->Write(batch);
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return Fail(status);
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << "stored " << resp.stored() << ", duplicates " << resp.duplicates()
            << ", unknown GPU " << resp.unknown_gpu() << ", too old " << resp.too_old()
            << ", in the future " << resp.in_future() << "\n";
  return resp.stored() == 1 ? 0 : 1;
}

}  // namespace arbiter::arbctl
