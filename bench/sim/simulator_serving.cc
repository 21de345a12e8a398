// daysim: serving. Every step the autoscaler sizes each service to its load;
// the latency model turns the capacity its ready replicas have into a p99,
// minute by minute, and the SLO windows into incidents.
#include <algorithm>
#include <cmath>

#include "bench/sim/simulator_internal.h"
#include "core/externality.h"
#include "core/telemetry.h"

namespace arbiter::daysim::internal {

double Simulator::Diurnal(const ServiceSpec& v, int64_t t) const {
  const double hour = static_cast<double>(t % 86'400) / 3600.0;
  const double trough = v.trough_hour, peak = v.peak_hour;
  double phase;  // 0 at the trough, 1 at the peak.
  if (hour >= trough && hour < peak) {
    phase = (hour - trough) / (peak - trough);
  } else {
    const double since_peak = std::fmod(hour - peak + 24.0, 24.0);
    phase = 1.0 - since_peak / (24.0 - (peak - trough));
  }
  const double low = v.trough_permille / 1000.0;
  double level = low + (1.0 - low) * (1.0 - std::cos(M_PI * phase)) / 2.0;
  if (IsWeekend(s_, t / 86'400)) level *= v.weekend_permille / 1000.0;
  return level;
}

double Simulator::Load(int32_t i, int64_t t) const {
  const ServiceSpec& v = s_.services[i];
  double factor = 1.0;
  for (int64_t start : workload_.spikes[i]) {
    if (t < start || t >= start + v.spike_ramp_seconds + v.spike_minutes * kMinute) continue;
    const double ramp = std::min(
        1.0, static_cast<double>(t - start + 1) / std::max<int64_t>(1, v.spike_ramp_seconds));
    factor = std::max(factor, 1.0 + (v.spike_factor - 1) * ramp);
  }
  return static_cast<double>(v.peak_rps) * Diurnal(v, t) * factor;
}

void Simulator::Step() {
  for (int32_t i = 0; i < static_cast<int32_t>(s_.services.size()); ++i) {
    Autoscale(i);
    MeasureLatency(i);
  }
  if (now_ % kMinute == 0 && Measuring()) SampleMinute();
}

void Simulator::Autoscale(int32_t i) {
  const ServiceSpec& v = s_.services[i];
  ServiceState& sv = services_[i];
  std::erase_if(sv.replicas, [&](int32_t id) { return jobs_[id].phase == Phase::kDone; });
  const double per_replica = v.replica_rps * v.target_utilization_permille / 1000.0;
  const int64_t want = std::max<int64_t>(
      v.min_replicas, static_cast<int64_t>(std::ceil(Load(i, now_) / per_replica)));
  const int64_t have = static_cast<int64_t>(sv.replicas.size());
  if (want >= have) sv.below_since = kNever;
  for (int64_t k = have; k < want; ++k) AddReplica(i);
  if (want < have) {
    if (sv.below_since == kNever) sv.below_since = now_;
    if (now_ - sv.below_since >= v.scale_down_delay_seconds) {
      for (int64_t k = want; k < have; ++k) RemoveReplica(i);
      sv.below_since = kNever;
    }
  }
}

void Simulator::AddReplica(int32_t i) {
  const ServiceSpec& v = s_.services[i];
  Job job;
  job.service = i;
  job.team = v.team;
  job.arrival = now_;
  job.spec.team = v.team;
  job.spec.workload_class = WorkloadClass::kInference;
  if (v.replica_milli < 1000) {
    job.spec.shape.gpu = core::GpuFraction{v.replica_milli, v.replica_memory_mib};
  }
  job.spec.shape.cpu_milli = 4000;
  job.spec.shape.memory_mib = 32'768;
  job.spec.description = v.name;
  jobs_.push_back(std::move(job));
  const int32_t id = static_cast<int32_t>(jobs_.size() - 1);
  services_[i].replicas.push_back(id);
  if (Request(id, HomePool(v.team)) == core::RequestState::kQueued) MarkQueued(id);
}

void Simulator::RemoveReplica(int32_t i) {
  std::vector<int32_t>& replicas = services_[i].replicas;
  auto it = std::find_if(replicas.begin(), replicas.end(),
                         [&](int32_t id) { return jobs_[id].phase == Phase::kQueued; });
  if (it == replicas.end()) it = replicas.end() - 1;
  const int32_t id = *it;
  replicas.erase(it);
  if (jobs_[id].phase == Phase::kQueued) {
    LeaveQueue(id);
    Cancel(id);
    jobs_[id].phase = Phase::kDone;
    jobs_[id].wait_end = now_;
  } else if (jobs_[id].phase == Phase::kHeld) {
    Release(id);
  }
}

double Simulator::ReplicaCapacity(const Job& job, bool& contended) const {
  const ServiceSpec& v = s_.services[job.service];
  const core::CapacityRequest* r = state_.FindLiveRequest(job.request_id);
  if (r == nullptr || r->placements.empty() || v.replica_milli >= 1000) return v.replica_rps;
  const core::Placement& p = r->placements.front();
  const core::Gpu& gpu = state_.FindNode(p.node_id)->gpus[p.gpu_indices.front()];
  const int64_t others = gpu.allocated_milli - p.gpu_milli;
  const bool other_classes =
      gpu.class_mask() & ~(uint32_t{1} << static_cast<int>(WorkloadClass::kInference));
  if (other_classes) contended = true;
  const int32_t permille =
      other_classes ? s_.co_tenancy_slowdown_permille : s_.inference_neighbour_slowdown_permille;
  return v.replica_rps / (1.0 + permille / 1000.0 * static_cast<double>(others) / 1000.0);
}

void Simulator::MeasureLatency(int32_t i) {
  const ServiceSpec& v = s_.services[i];
  ServiceState& sv = services_[i];
  double capacity = 0;
  bool contention = false;
  for (int32_t id : sv.replicas) {
    const Job& job = jobs_[id];
    if (job.phase == Phase::kQueued) contention = true;
    if (job.phase == Phase::kHeld && now_ >= job.progress_from) {
      capacity += ReplicaCapacity(job, contention);
    }
  }
  sv.ready_capacity = capacity;
  const double rho = capacity > 0 ? Load(i, now_) / capacity : 2.0;
  const double target = v.target_utilization_permille / 1000.0;
  const double p99 = rho >= 0.98 ? kSaturatedP99 * v.base_p99_ms
                                 : v.base_p99_ms * std::max(0.5, (1.0 - target) / (1.0 - rho));
  sv.minute_p99 = std::max(sv.minute_p99, std::min(p99, kSaturatedP99 * v.base_p99_ms));
  sv.minute_contention = sv.minute_contention || contention;
  if ((now_ + s_.autoscale_seconds) % kMinute == 0) CloseMinute(i);
}

void Simulator::CloseMinute(int32_t i) {
  const ServiceSpec& v = s_.services[i];
  ServiceState& sv = services_[i];
  ServiceResult& r = result_.services[i];
  if (!Measuring()) {
    sv.minute_p99 = 0;
    sv.minute_contention = false;
    return;
  }
  r.p99_ms_by_minute.push_back(static_cast<int32_t>(std::lround(sv.minute_p99)));
  if (sv.minute_p99 > v.slo_p99_ms) {
    ++r.breach_minutes;
    if (sv.minute_contention) ++r.contention_breach_minutes;
  }
  sv.minute_p99 = 0;
  sv.minute_contention = false;
  const int64_t minutes_per_window = v.slo_window_seconds / kMinute;
  if (static_cast<int64_t>(r.p99_ms_by_minute.size()) % minutes_per_window == 0) {
    CloseSloWindow(i);
  }
}

void Simulator::CloseSloWindow(int32_t i) {
  const ServiceSpec& v = s_.services[i];
  ServiceResult& r = result_.services[i];
  const int64_t minutes = v.slo_window_seconds / kMinute;
  const auto begin = r.p99_ms_by_minute.end() - minutes;
  const int32_t p99 = *std::max_element(begin, r.p99_ms_by_minute.end());
  if (p99 <= v.slo_p99_ms) return;
  core::AttributionInputs in;
  in.slo = {v.team,
            v.name,
            HomePool(v.team),
            v.slo_p99_ms * 1000,
            absl::Seconds(v.slo_window_seconds),
            v.penalty_micros_per_minute};
  const absl::Time end =
      Now(measure_from_ + static_cast<int64_t>(r.p99_ms_by_minute.size()) * kMinute);
  const absl::Time start = end - absl::Seconds(v.slo_window_seconds);
  in.window = {v.team, v.name, start, end, p99 * 1000 / 3, int64_t{p99} * 1000, 0};
  for (const core::HeldMember& m : held_) {
    if (m.from < end && m.until > start) in.held.push_back(m);
  }
  for (const core::WaitingRequest& w : services_[i].waits) {
    if (w.from < end && w.until > start) in.waiting.push_back(w);
  }
  for (const TeamSpec& t : s_.teams) {
    const core::Quota* q = state_.FindQuota(t.name, in.slo.pool);
    if (q != nullptr) in.nominal_milli[t.name] = q->nominal_milli;
  }
  in.serving_pool = state_.FindPool(in.slo.pool)->latency_class == core::LatencyClass::kServing;
  in.micros_per_gpu_hour[s_.cluster.gpu_model] = s_.price_micros_per_gpu_hour;
  const core::Attribution a = core::AttributeIncident(in);
  ++r.incidents;
  ++result_.incidents;
  for (size_t k = 0; k < a.causes.size(); ++k) {
    team_charged_[a.causes[k].team] += a.charges_micros[k];
    team_credited_[v.team] += a.charges_micros[k];
    result_.externality_micros += a.charges_micros[k];
  }
}

void Simulator::SampleMinute() {
  std::vector<double> rho(s_.services.size(), 0);
  for (size_t i = 0; i < s_.services.size(); ++i) {
    const double capacity = services_[i].ready_capacity;  // This step's (MeasureLatency).
    rho[i] = capacity > 0 ? std::min(1.0, Load(static_cast<int32_t>(i), now_) / capacity) : 0;
  }
  const size_t hour = static_cast<size_t>((now_ - measure_from_) / kHour);
  result_.allocated_by_hour.resize(std::max(result_.allocated_by_hour.size(), hour + 1));
  result_.used_by_hour.resize(result_.allocated_by_hour.size());
  for (const Job& job : jobs_) {
    if (job.phase != Phase::kHeld) continue;
    const int64_t milli = job.spec.total_gpu_milli();
    int64_t busy = 0;
    if (job.service >= 0) {
      busy = now_ >= job.progress_from ? std::lround(rho[job.service] * 1000) : 0;
    } else if (job.standing) {
      busy = StandingBusy(job.team) ? 900 : 0;
    } else {
      busy = BusyPermille(job, &s_.streams[job.stream], now_);
    }
    const int64_t allocated = milli * kMinute;
    const int64_t used = allocated * busy / 1000;
    result_.allocated_milli_seconds += allocated;
    result_.used_milli_seconds += used;
    result_.allocated_by_hour[hour] += allocated;
    result_.used_by_hour[hour] += used;
    team_allocated_[job.team] += allocated;
    team_used_[job.team] += used;
  }
}

bool Simulator::StandingBusy(const std::string& team) const {
  auto it = standing_windows_.find(team);
  if (it == standing_windows_.end()) return false;
  for (const auto& [from, to] : it->second) {
    if (now_ >= from && now_ < to) return true;
  }
  return false;
}

}  // namespace arbiter::daysim::internal
