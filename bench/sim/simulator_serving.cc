// daysim: serving. Every step the autoscaler sizes each service to its load;
// the latency model queues the step's requests at the ready replicas and
// turns each minute's responses into a p99, and the SLO windows into
// incidents. docs/economics.md describes the model.
#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"

#include "bench/sim/simulator_internal.h"
#include "core/externality.h"
#include "core/telemetry.h"

namespace arbiter::daysim {

int64_t ReplicaQueue::Run(const Interval& in, Rng& rng, std::vector<double>& responses) {
  int64_t refused = 0;
  if (in.arrivals_per_second <= 0) {
    next_arrival_ = -1;
  } else {
    const double gap_scale = 1.0 / (in.gap_shape * in.arrivals_per_second);
    const double shape = in.service_cv > 0 ? 1.0 / (in.service_cv * in.service_cv) : 0;
    const double service_scale = in.mean_service_seconds * in.slowdown / std::max(shape, 1.0);
    if (next_arrival_ < 0) next_arrival_ = rng.Gamma(in.gap_shape) * gap_scale;
    while (next_arrival_ < in.seconds) {
      const double t = next_arrival_;
      next_arrival_ += rng.Gamma(in.gap_shape) * gap_scale;
      const auto server = std::min_element(free_at_.begin(), free_at_.end());
      const double wait = std::max(0.0, *server - t);
      if (wait > in.timeout_seconds) {
        responses.push_back(in.timeout_seconds);
        ++refused;
        continue;
      }
      const double service =
          shape > 0 ? rng.Gamma(shape) * service_scale : in.mean_service_seconds * in.slowdown;
      *server = t + wait + service;
      responses.push_back(wait + service);
    }
    next_arrival_ -= in.seconds;
  }
  for (double& f : free_at_) f = std::max(0.0, f - in.seconds);
  return refused;
}

double ReplicaQueue::WaitSeconds() const {
  return *std::min_element(free_at_.begin(), free_at_.end());
}

double WeightedQuantile(std::vector<WeightedSample>& samples, double q) {
  if (samples.empty()) return 0;
  double total = 0, lightest = samples.front().weight;
  for (const WeightedSample& s : samples) {
    total += s.weight;
    lightest = std::min(lightest, s.weight);
  }
  // Only the heaviest responses matter: any k samples weigh at least
  // k x lightest, so the top `k` cover the tail's weight.
  const double tail = (1.0 - q) * total;
  const size_t n = samples.size();
  const size_t k = std::min(n, static_cast<size_t>(tail / lightest) + 1);
  const auto by_seconds = [](const WeightedSample& a, const WeightedSample& b) {
    return a.seconds < b.seconds;
  };
  const auto first = samples.end() - static_cast<std::ptrdiff_t>(k);
  std::nth_element(samples.begin(), first, samples.end(), by_seconds);
  std::sort(first, samples.end(), by_seconds);
  double above = 0;
  for (size_t j = n; j-- > n - k;) {
    if (above + samples[j].weight > tail) return samples[j].seconds;
    above += samples[j].weight;
  }
  return samples[n - k].seconds;
}

namespace internal {

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

int64_t Simulator::WantedReplicas(int32_t i) {
  const ServiceSpec& v = s_.services[i];
  const double per_replica = v.replica_rps * v.target_utilization_permille / 1000.0;
  const int64_t now = std::max<int64_t>(
      v.min_replicas, static_cast<int64_t>(std::ceil(Load(i, now_) / per_replica)));
  if (!proactive()) return now;
  ObserveDemand(i, now);
  LearnBurst(i, now);
  // Ahead of the predicted rise by the grace its victims get plus its cold
  // start: the replicas are ready when the load comes.
  const double ahead = Forecast(i, now_ + s_.arbiter_grace_seconds + v.cold_start_seconds);
  return std::max(now, static_cast<int64_t>(std::ceil(ahead - 1e-9)));
}

namespace {

// Whether absolute quarter hour `k` (from the Unix epoch, a Thursday) falls
// on a Saturday or Sunday.
bool WeekendSlot(int64_t k) {
  const int64_t weekday = (k / kDaySlots + 4) % 7;  // 0: Sunday.
  return weekday == 0 || weekday == 6;
}

int64_t AbsoluteSlot(absl::Time start, int64_t t) {
  return (absl::ToUnixSeconds(start) + t) / kSlotSeconds;
}

}  // namespace

LearntProfile::LearntProfile()
    : by_week_slot(kWeekSlots, -1),
      by_day_type_slot(2 * kDaySlots, -1),
      by_day_slot(kDaySlots, -1) {}

void LearntProfile::Observe(int64_t k, int64_t value, double weight) {
  if (k != slot) {
    if (slot >= 0 && !samples.empty()) {
      std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
      const double median = static_cast<double>(samples[samples.size() / 2]);
      for (double* p : {&by_week_slot[slot % kWeekSlots],
                        &by_day_type_slot[(WeekendSlot(slot) ? kDaySlots : 0) + slot % kDaySlots],
                        &by_day_slot[slot % kDaySlots]}) {
        *p = *p < 0 ? median : *p + weight * (median - *p);
      }
    }
    slot = k;
    samples.clear();
  }
  samples.push_back(value);
}

double LearntProfile::At(int64_t k) const {
  for (double v : {by_week_slot[k % kWeekSlots],
                   by_day_type_slot[(WeekendSlot(k) ? kDaySlots : 0) + k % kDaySlots],
                   by_day_slot[k % kDaySlots]}) {
    if (v >= 0) return v;
  }
  return -1.0;
}

double Simulator::ProfileAt(const LearntProfile& profile, int64_t t) const {
  // Between the centres of the quarter hours around `t`.
  const double x = static_cast<double>(absl::ToUnixSeconds(s_.start) + t) / kSlotSeconds - 0.5;
  const int64_t k = static_cast<int64_t>(std::floor(x));
  const double a = profile.At(k), b = profile.At(k + 1), f = x - static_cast<double>(k);
  if (a < 0 || b < 0) return std::max(a, b);
  return a + f * (b - a);
}

void Simulator::ObserveDemand(int32_t i, int64_t asked) {
  services_[i].profile.Observe(AbsoluteSlot(s_.start, now_), asked,
                               s_.forecast_weight_permille / 1000.0);
}

void Simulator::LearnBurst(int32_t i, int64_t asked) {
  ServiceState& sv = services_[i];
  sv.recent_asks.push_back(asked);
  const int64_t lead = s_.arbiter_grace_seconds + s_.services[i].cold_start_seconds;
  while (static_cast<int64_t>(sv.recent_asks.size() - 1) * s_.autoscale_seconds > lead) {
    sv.recent_asks.pop_front();
  }
  const int64_t low =
      std::max<int64_t>(1, *std::min_element(sv.recent_asks.begin(), sv.recent_asks.end()));
  if (sv.rise_since == kNever) {
    if (asked < kBurstMultiple * static_cast<double>(low)) return;
    sv.rise_since = now_;
    sv.rise_base = low;
    sv.rise_peak = 1.0;
  }
  sv.rise_peak = std::max(sv.rise_peak, static_cast<double>(asked) / sv.rise_base);
  if (asked < kBurstMultiple * static_cast<double>(sv.rise_base)) {  // It fell back: a burst.
    if (now_ - sv.rise_since <= kBurstSeconds) sv.burst = std::max(sv.burst, sv.rise_peak);
    sv.rise_since = kNever;
  } else if (now_ - sv.rise_since > kBurstSeconds) {
    sv.rise_since = kNever;  // It stayed: a new level, not a burst.
  }
}

double Simulator::Forecast(int32_t i, int64_t t) const {
  return ProfileAt(services_[i].profile, t);
}

bool Simulator::LendWithoutLoss(const Job& job, const std::string& pool) const {
  if (!proactive() || job.stream < 0) return true;
  const StreamSpec& st = s_.streams[job.stream];
  const core::Pool* p = state_.FindPool(pool);
  if (p == nullptr) return true;
  // Work without checkpoints must be able to finish: its time limit. Work
  // with them must reach its first checkpoint: one interval.
  const int64_t horizon =
      st.checkpoint_seconds == 0 ? st.max_work_seconds : st.checkpoint_interval_seconds;
  if (p->latency_class != core::LatencyClass::kServing) return KeptFromOwners(job, pool, horizon);
  // The serving demand the profile predicts over that horizon, the room
  // its services' bursts would need on top (free: a burst rises faster than
  // a reclaim), and the headroom. Spot work, which any other work evicts,
  // also leaves room for the rise the borrowers' profiles predict.
  const std::map<std::string, int64_t> now = DemandByTeam(pool);
  const int64_t borrowers_now = job.spec.spot ? OthersDemand(job, pool, -1, now) : 0;
  int64_t need = 0;
  for (int64_t t = now_; t <= now_ + horizon; t += kSlotSeconds) {
    int64_t at = core::HeadroomOf(*p, s_.cluster.gpu_model);
    for (int32_t i = 0; i < static_cast<int32_t>(s_.services.size()); ++i) {
      const ServiceSpec& v = s_.services[i];
      if (HomePool(v.team) != pool) continue;
      const double f = Forecast(i, t);
      if (f < 0) return true;  // Not learnt yet: lend as the reactive policy does.
      at += static_cast<int64_t>(std::ceil(f * services_[i].burst)) * v.replica_milli;
    }
    if (job.spec.spot) at += std::max<int64_t>(0, OthersDemand(job, pool, t, now) - borrowers_now);
    need = std::max(need, at);
  }
  int64_t capacity = 0, allocated = 0, inference = 0;
  for (const core::Node& n : state_.nodes()) {
    if (n.pool != pool) continue;
    for (const core::Gpu& g : n.gpus) {
      capacity += core::kMilliPerGpu;
      allocated += g.allocated_milli;
    }
  }
  for (int32_t i = 0; i < static_cast<int32_t>(s_.services.size()); ++i) {
    for (int32_t id : services_[i].replicas) {
      if (jobs_[id].phase == Phase::kHeld && jobs_[id].pool == pool) {
        inference += jobs_[id].spec.total_gpu_milli();
      }
    }
  }
  const int64_t borrowed = allocated - inference;
  return capacity - borrowed - job.spec.total_gpu_milli() >= need;
}

std::map<std::string, int64_t> Simulator::DemandByTeam(const std::string& pool) const {
  std::map<std::string, int64_t> milli;
  for (const auto* ids : {&state_.HoldingIn(pool), &state_.requests().WaitingIn(pool)}) {
    for (int64_t id : *ids) {
      const core::CapacityRequest* r = state_.FindLiveRequest(id);
      if (r != nullptr && !r->spec.spot && r->spec.workload_class != WorkloadClass::kInference) {
        milli[r->spec.team] += r->spec.total_gpu_milli();
      }
    }
  }
  return milli;
}

void Simulator::ObservePools() {
  const int64_t k = AbsoluteSlot(s_.start, now_);
  for (const char* pool : {"serving", "batch", "dev"}) {
    const std::map<std::string, int64_t> now = DemandByTeam(pool);
    for (const TeamSpec& t : s_.teams) {
      auto it = now.find(t.name);
      pool_demand_[{t.name, pool}].Observe(k, it == now.end() ? 0 : it->second,
                                           s_.forecast_weight_permille / 1000.0);
    }
  }
}

int64_t Simulator::OthersDemand(const Job& job, const std::string& pool, int64_t t,
                                const std::map<std::string, int64_t>& now) const {
  int64_t milli = 0;
  for (const TeamSpec& team : s_.teams) {
    if (!job.spec.spot && team.name == job.team) continue;
    auto held = now.find(team.name);
    const int64_t current = held == now.end() ? 0 : held->second;
    auto it = pool_demand_.find({team.name, pool});
    if (t < 0 || it == pool_demand_.end()) {
      milli += current;
      continue;
    }
    // Work that is not spot fears only the owners, within their nominal;
    // spot work fears all other work.
    int64_t cap = core::kUnlimited;
    if (!job.spec.spot) {
      const core::Quota* q = state_.FindQuota(team.name, pool);
      cap = q == nullptr ? 0 : q->nominal_milli;
    }
    const double f = std::max(0.0, ProfileAt(it->second, t));
    milli += std::max(current, std::min(cap, static_cast<int64_t>(std::ceil(f))));
  }
  return milli;
}

bool Simulator::KeptFromOwners(const Job& job, const std::string& pool, int64_t horizon) const {
  if (job.spec.spot) return true;  // PlaceSpot keeps it off GPUs that waiting work takes.
  const std::map<std::string, int64_t> now = DemandByTeam(pool);
  auto held = now.find(job.team);
  const int64_t mine = job.spec.total_gpu_milli() + (held == now.end() ? 0 : held->second);
  const core::Quota* own = state_.FindQuota(job.team, pool);
  if (own != nullptr && mine <= own->nominal_milli) return true;  // Within nominal: kept.
  // Beyond it the owners may take their nominal back: what they demand
  // there now, or their profile's demand over the horizon when more, must
  // leave room for it.
  int64_t others = 0;
  for (int64_t t = now_; t <= now_ + horizon; t += kSlotSeconds) {
    others = std::max(others, OthersDemand(job, pool, t, now));
  }
  int64_t capacity = 0;
  for (const core::Node& n : state_.nodes()) {
    if (n.pool == pool) capacity += core::kMilliPerGpu * static_cast<int64_t>(n.gpus.size());
  }
  return others + mine <= capacity;
}

void Simulator::Autoscale(int32_t i) {
  const ServiceSpec& v = s_.services[i];
  ServiceState& sv = services_[i];
  std::erase_if(sv.replicas, [&](int32_t id) { return jobs_[id].phase == Phase::kDone; });
  const int64_t want = WantedReplicas(i);
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
  if (Request(id, HomePool(v.team)) == core::RequestState::kQueued) {
    MarkQueued(id);
    AdvanceTo(now_);  // Victims with no grace (spot, a spot grace of 0) go now.
  }
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

double Simulator::ReplicaSlowdown(const Job& job, bool& other_class) const {
  const ServiceSpec& v = s_.services[job.service];
  const core::CapacityRequest* r = state_.FindLiveRequest(job.request_id);
  if (r == nullptr || r->placements.empty() || v.replica_milli >= 1000) return 1.0;
  const core::Placement& p = r->placements.front();
  const core::Gpu& gpu = state_.FindNode(p.node_id)->gpus[p.gpu_indices.front()];
  const int64_t others = gpu.allocated_milli - p.gpu_milli;
  const bool other_classes =
      gpu.class_mask() & ~(uint32_t{1} << static_cast<int>(WorkloadClass::kInference));
  if (other_classes) other_class = true;
  const int32_t permille =
      other_classes ? s_.co_tenancy_slowdown_permille : s_.inference_neighbour_slowdown_permille;
  return 1.0 + permille / 1000.0 * static_cast<double>(others) / 1000.0;
}

std::vector<ReadyReplica> Simulator::ReadyReplicas(int32_t i) {
  ServiceState& sv = services_[i];
  std::vector<ReadyReplica> ready;
  sv.ready_capacity = 0;
  for (int32_t id : sv.replicas) {
    const Job& job = jobs_[id];
    if (job.phase == Phase::kQueued) {
      sv.minute_waiting = true;
      const core::CapacityRequest* r = state_.FindLiveRequest(job.request_id);
      const std::string reason = r == nullptr ? "" : r->reason_code;
      if (reason == core::kReasonPower) {
        sv.minute_waited_power = true;
      } else if (reason != core::kReasonQuotaExceeded && reason != core::kReasonBorrowingLimit &&
                 reason != core::kReasonCohortExhausted) {
        sv.minute_waited_capacity = true;
      }
    }
    if (job.phase != Phase::kHeld) continue;
    if (now_ < job.progress_from) {
      sv.minute_starting = true;
      continue;
    }
    const double slowdown = ReplicaSlowdown(job, sv.minute_slowed);
    ready.push_back({id, slowdown});
    sv.ready_capacity += static_cast<double>(s_.services[i].replica_rps) / slowdown;
  }
  return ready;
}

void Simulator::MeasureLatency(int32_t i) {
  ServiceState& sv = services_[i];
  const std::vector<ReadyReplica> ready = ReadyReplicas(i);
  sv.minute_formula_p99 = std::max(sv.minute_formula_p99, FormulaP99(i, sv.ready_capacity));
  // The queues start an hour before the measured days, so that the first
  // measured minutes inherit a backlog, as every later one does.
  if (now_ >= measure_from_ - kHour) SimulateRequests(i, ready);
  if ((now_ + s_.autoscale_seconds) % kMinute == 0) CloseMinute(i);
}

namespace {

double TimeoutSeconds(const ServiceSpec& v) {
  return static_cast<double>(v.timeout_ms > 0 ? v.timeout_ms : 10 * v.slo_p99_ms) / 1000.0;
}

}  // namespace

void Simulator::SimulateRequests(int32_t i, const std::vector<ReadyReplica>& ready) {
  ServiceState& sv = services_[i];
  const double load = Load(i, now_);
  const double step = static_cast<double>(s_.autoscale_seconds);
  if (ready.empty()) {  // No one serves: every request of the step times out.
    sv.queues.clear();
    sv.minute_samples.push_back({TimeoutSeconds(s_.services[i]), load * step});
    return;
  }
  std::vector<std::pair<double, std::vector<int32_t>>> strata;  // By slowdown.
  for (const ReadyReplica& r : ready) {
    auto it = std::find_if(strata.begin(), strata.end(),
                           [&](const auto& s) { return s.first == r.slowdown; });
    if (it == strata.end()) it = strata.insert(strata.end(), {r.slowdown, {}});
    it->second.push_back(r.id);
  }
  // Enough replicas that about latency_samples_per_minute requests a minute
  // are simulated, at least one per stratum.
  const double per_replica = std::max(1e-9, load * step / static_cast<double>(ready.size()));
  const double budget = s_.latency_samples_per_minute * step / kMinute;
  const double share = std::min(1.0, std::ceil(budget / per_replica) / ready.size());
  absl::flat_hash_map<int32_t, ReplicaQueue> sampled;
  for (const auto& [slowdown, ids] : strata) {
    const size_t n = std::clamp<size_t>(std::lround(share * ids.size()), 1, ids.size());
    const double weight = static_cast<double>(ids.size()) / static_cast<double>(n);
    const ReplicaQueue::Interval in = IntervalOf(i, load, ready.size(), slowdown);
    for (int32_t id : Sample(i, ids, n, sampled)) {
      sv.responses.clear();
      sampled[id].Run(in, sv.rng, sv.responses);
      for (double r : sv.responses) sv.minute_samples.push_back({r, weight});
    }
  }
  sv.queues = std::move(sampled);
}

std::vector<int32_t> Simulator::Sample(int32_t i, const std::vector<int32_t>& stratum, size_t n,
                                       absl::flat_hash_map<int32_t, ReplicaQueue>& sampled) {
  ServiceState& sv = services_[i];
  std::vector<int32_t> chosen;
  std::optional<ReplicaQueue> peer;
  for (int32_t id : stratum) {
    auto it = sv.queues.find(id);
    if (it == sv.queues.end() || chosen.size() == n) continue;
    peer = it->second;
    sampled.emplace(id, std::move(it->second));
    chosen.push_back(id);
  }
  for (int32_t id : stratum) {
    if (chosen.size() == n) break;
    if (sampled.contains(id)) continue;
    const bool fresh = !peer || now_ - jobs_[id].progress_from < s_.autoscale_seconds;
    sampled.emplace(id, fresh ? ReplicaQueue(s_.services[i].replica_concurrency) : *peer);
    chosen.push_back(id);
  }
  return chosen;
}

ReplicaQueue::Interval Simulator::IntervalOf(int32_t i, double load, size_t ready,
                                             double slowdown) const {
  const ServiceSpec& v = s_.services[i];
  ReplicaQueue::Interval in;
  in.seconds = static_cast<double>(s_.autoscale_seconds);
  in.arrivals_per_second = load / static_cast<double>(ready);
  in.gap_shape = v.routing == "random" ? 1 : static_cast<int32_t>(ready);
  in.mean_service_seconds = static_cast<double>(v.replica_concurrency) / v.replica_rps;
  in.service_cv = v.service_cv_permille / 1000.0;
  in.slowdown = slowdown;
  in.timeout_seconds = TimeoutSeconds(v);
  return in;
}

double Simulator::FormulaP99(int32_t i, double capacity) const {
  const ServiceSpec& v = s_.services[i];
  const double rho = capacity > 0 ? Load(i, now_) / capacity : 2.0;
  const double target = v.target_utilization_permille / 1000.0;
  const double p99 = rho >= 0.98 ? kSaturatedP99 * v.base_p99_ms
                                 : v.base_p99_ms * std::max(0.5, (1.0 - target) / (1.0 - rho));
  return std::min(p99, kSaturatedP99 * v.base_p99_ms);
}

void Simulator::CloseMinute(int32_t i) {
  const ServiceSpec& v = s_.services[i];
  ServiceState& sv = services_[i];
  ServiceResult& r = result_.services[i];
  if (Measuring()) {
    const double p99 = 1000.0 * WeightedQuantile(sv.minute_samples, 0.99);
    r.p99_ms_by_minute.push_back(static_cast<int32_t>(std::lround(p99)));
    r.formula_p99_ms_by_minute.push_back(static_cast<int32_t>(std::lround(sv.minute_formula_p99)));
    if (r.formula_p99_ms_by_minute.back() > v.slo_p99_ms) ++r.formula_breach_minutes;
    std::string cause;
    if (r.p99_ms_by_minute.back() > v.slo_p99_ms) {
      cause = BreachCause(i);
      ++r.breach_minutes;
      ++r.breach_minutes_by_cause[cause];
    }
    sv.breach_cause = cause;
  }
  sv.minute_samples.clear();
  sv.minute_formula_p99 = 0;
  sv.minute_waiting = sv.minute_starting = sv.minute_slowed = false;
  sv.minute_waited_capacity = sv.minute_waited_power = false;
  const int64_t minutes_per_window = v.slo_window_seconds / kMinute;
  const int64_t minutes = static_cast<int64_t>(r.p99_ms_by_minute.size());
  if (Measuring() && minutes % minutes_per_window == 0) CloseSloWindow(i);
}

std::string Simulator::BreachCause(int32_t i) const {
  const ServiceState& sv = services_[i];
  if (sv.minute_waiting) {
    // A replica that waited for capacity names what held it; one that
    // waited only for its team's quota (or a watt budget) names that.
    const std::string holder =
        sv.minute_waited_capacity ? HoldingClass(HomePool(s_.services[i].team)) : "";
    if (!holder.empty()) return absl::StrCat("held:", holder);
    return sv.minute_waited_power ? "power" : "quota";
  }
  if (!sv.breach_cause.empty()) return sv.breach_cause;
  if (sv.minute_starting) return "cold_start";
  if (sv.minute_slowed) return "co_tenancy";
  return "load";
}

std::string Simulator::HoldingClass(const std::string& pool) const {
  std::map<std::string, int64_t> held;  // Spot work counts as "spot", whatever its class.
  for (const Job& job : jobs_) {
    if (job.phase != Phase::kHeld || job.pool != pool ||
        job.spec.workload_class == WorkloadClass::kInference) {
      continue;
    }
    held[job.spec.spot ? std::string("spot")
                       : std::string(core::WorkloadClassName(job.spec.workload_class))] +=
        job.spec.total_gpu_milli();
  }
  auto most = std::max_element(held.begin(), held.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  return most == held.end() ? "" : most->first;
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
  in.lent_classes = core::LentClasses(*state_.FindPool(in.slo.pool));
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
  int64_t unallocated = int64_t{s_.cluster.nodes} * s_.cluster.gpus_per_node * 1000;
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
    team_microjoules_[job.team] += MinuteMicrojoules(milli, busy);
    unallocated -= milli;
  }
  unallocated_microjoules_ += MinuteMicrojoules(unallocated, 0);
}

int64_t Simulator::MinuteMicrojoules(int64_t milli, int64_t busy_permille) const {
  const int64_t idle = s_.cluster.gpu_idle_watts;
  const int64_t milliwatts = idle * 1000 + (s_.cluster.gpu_tdp_watts - idle) * busy_permille;
  return milli * milliwatts * kMinute;  // milli-GPU x mW x s = microjoules.
}

bool Simulator::StandingBusy(const std::string& team) const {
  auto it = standing_windows_.find(team);
  if (it == standing_windows_.end()) return false;
  for (const auto& [from, to] : it->second) {
    if (now_ >= from && now_ < to) return true;
  }
  return false;
}

}  // namespace internal
}  // namespace arbiter::daysim
