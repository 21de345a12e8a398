#include "bench/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <queue>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

#include "bench/sim/simulator_internal.h"
#include "bench/sim/workload.h"
#include "core/arbitration.h"
#include "core/externality.h"
#include "core/telemetry.h"

namespace arbiter::daysim {

absl::string_view PolicyName(Policy p) {
  switch (p) {
    case Policy::kStatic:
      return "static";
    case Policy::kQuotaOnly:
      return "quota-only";
    case Policy::kArbiter:
      return "arbiter";
    case Policy::kArbiterReactive:
      return "arbiter-reactive";
  }
  return "unknown";
}

bool IsArbiter(Policy p) { return p == Policy::kArbiter || p == Policy::kArbiterReactive; }

namespace internal {

int32_t BusyPermille(const Job& job, const StreamSpec* stream, int64_t t) {
  if (job.phase != Phase::kHeld || t < job.progress_from || t >= job.work_end) return 0;
  if (job.deadline != kNever && stream != nullptr && stream->checkpoint_on_notice &&
      t >= job.deadline - stream->checkpoint_seconds) {
    return 0;  // Writing its last checkpoint.
  }
  return stream == nullptr ? 1000 : stream->busy_permille;
}

Scenario Simulator::WithWarmup(Scenario s) {
  s.start -= absl::Hours(24 * s.warmup_days);
  s.days += s.warmup_days;
  return s;
}

Result Simulator::Run() {
  Setup();
  Schedule();
  while (!events_.empty()) {
    const Event e = events_.top();
    if (e.at >= horizon_) break;
    events_.pop();
    AdvanceTo(e.at);
    Handle(e);
  }
  AdvanceTo(horizon_);
  Finish();
  return std::move(result_);
}

std::string Simulator::HomePool(const std::string& team) const {
  if (policy_ == Policy::kStatic) return absl::StrCat("p-", team);
  if (policy_ == Policy::kQuotaOnly) return "shared";
  return FindTeam(team).pool_class;
}

const TeamSpec& Simulator::FindTeam(const std::string& name) const {
  for (const TeamSpec& t : s_.teams) {
    if (t.name == name) return t;
  }
  return s_.teams.front();  // Unreachable for a validated scenario.
}

core::LatencyClass Simulator::ClassOf(const std::string& pool_class) {
  if (pool_class == "serving") return core::LatencyClass::kServing;
  if (pool_class == "dev") return core::LatencyClass::kDev;
  return core::LatencyClass::kBatch;
}

void Simulator::Check(const absl::Status& status) {
  ++result_.core_calls;
  if (!status.ok()) ++result_.core_errors;
}

void Simulator::Setup() {
  (void)state_.LoadGpuModel(
      {s_.cluster.gpu_model, s_.cluster.gpu_memory_mib, 132, s_.cluster.gpu_tdp_watts, true});
  core::ChangeSet ignored;
  Check(core::CreateCluster(state_, {kCluster, ""}, ignored));
  CreatePools(ignored);
  CreateTeams(ignored);
  RegisterNodes(ignored);
  SetQuotas(ignored);
  if (s_.site_power_budget_watts > 0) {  // A fact of the site: every policy keeps it.
    result_.power_budget_watts = s_.site_power_budget_watts;
    Check(core::SetPowerBudget(
        state_, {core::PowerScope::kSite, kCluster, s_.site_power_budget_watts, false}, Now(0),
        ignored));
  }
  if (policy_ == Policy::kQuotaOnly) {
    core::CoexistenceMatrix all_share;
    for (int a = 1; a <= 4; ++a) {
      for (int b = 1; b <= 4; ++b) {
        all_share.Set(static_cast<WorkloadClass>(a), static_cast<WorkloadClass>(b),
                      {core::Isolation::kSoftSharing, true});
      }
    }
    state_.set_coexistence(all_share);
  }
}

void Simulator::CreatePools(core::ChangeSet& ch) {
  if (policy_ == Policy::kStatic) {
    for (const TeamSpec& t : s_.teams) {
      Check(core::CreatePool(state_, {HomePool(t.name), ClassOf(t.pool_class), ""}, ch));
    }
  } else if (policy_ == Policy::kQuotaOnly) {
    core::Pool shared{"shared", core::LatencyClass::kBatch, ""};
    shared.reclaim_grace_seconds = 86'400;
    for (int c = 1; c <= 4; ++c) {  // No latency classes: it admits every class.
      shared.class_rules.push_back({static_cast<WorkloadClass>(c), core::ClassAdmission::kAdmit});
    }
    Check(core::CreatePool(state_, shared, ch));
  } else {
    for (const char* name : {"serving", "batch", "dev"}) {
      core::Pool pool{name, ClassOf(name), ""};
      pool.reclaim_grace_seconds = s_.arbiter_grace_seconds;
      if (s_.arbiter_spot_grace_seconds >= 0)
        pool.spot_grace_seconds = s_.arbiter_spot_grace_seconds;
      if (pool.latency_class == core::LatencyClass::kServing) {
        pool.lends_to = s_.serving_lends_to;
        if (s_.serving_headroom_milli > 0) {
          pool.headroom.push_back({s_.cluster.gpu_model, s_.serving_headroom_milli});
        }
      }
      Check(core::CreatePool(state_, pool, ch));
    }
  }
}

void Simulator::CreateTeams(core::ChangeSet& ch) {
  const bool cohort = policy_ != Policy::kStatic;
  if (cohort) Check(core::CreateTeam(state_, {"org", "", 1000}, ch));
  for (const TeamSpec& t : s_.teams) {
    Check(core::CreateTeam(state_, {t.name, cohort ? "org" : "", 1000}, ch));
  }
}

void Simulator::RegisterNodes(core::ChangeSet& ch) {
  int32_t n = 0;
  for (const TeamSpec& t : s_.teams) {
    for (int32_t k = 0; k < t.gpus / s_.cluster.gpus_per_node; ++k, ++n) {
      core::Node node;
      node.cluster = kCluster;
      node.name = absl::StrCat("node-", n);
      node.pool = HomePool(t.name);
      node.cpu_milli = s_.cluster.cpu_milli_per_node;
      node.memory_mib = s_.cluster.memory_mib_per_node;
      for (int32_t g = 0; g < s_.cluster.gpus_per_node; ++g) {
        core::Gpu gpu;
        gpu.index = g;
        gpu.model = s_.cluster.gpu_model;
        node.gpus.push_back(gpu);
      }
      auto registered = core::RegisterNode(state_, node, Now(0), ch);
      Check(registered.status());
    }
  }
}

void Simulator::SetQuotas(core::ChangeSet& ch) {
  const bool borrow = policy_ != Policy::kStatic;
  for (const TeamSpec& t : s_.teams) {
    core::Quota q{t.name, HomePool(t.name), int64_t{t.gpus} * 1000};
    q.borrowing_limit_milli = borrow ? core::kUnlimited : 0;
    if (arbiter() && t.pool_class == "serving") {
      const int64_t reserve = q.nominal_milli * s_.serving_reserve_permille / 1000;
      q.lending_limit_milli = q.nominal_milli - reserve / 1000 * 1000;
    }
    // Quotas add up per pool: a second team in a shared pool adds to it.
    Check(core::SetQuota(state_, q, Now(0), ch));
  }
  if (!arbiter()) return;
  // Preemptible work may run on what other pools lend (nominal 0,
  // unlimited borrowing).
  for (const StreamSpec& st : s_.streams) {
    for (const std::string& pool : SpotPools(st.team, SpecOf(st))) {
      if (state_.FindQuota(st.team, pool) != nullptr) continue;
      core::Quota spot{st.team, pool, 0};
      spot.borrowing_limit_milli = core::kUnlimited;
      Check(core::SetQuota(state_, spot, Now(0), ch));
    }
  }
}

void Simulator::Push(int64_t at, EventType type, int32_t job, int32_t gen) {
  events_.push({at, seq_++, type, job, gen});
}

void Simulator::Schedule() {
  for (const JobDraw& d : workload_.jobs) {
    const StreamSpec& st = s_.streams[d.stream];
    if (st.standing_reservation && !arbiter()) {
      standing_windows_[st.team].push_back({d.arrival, d.arrival + d.work_seconds});
      continue;
    }
    Job job;
    job.stream = d.stream;
    job.team = st.team;
    job.spec = SpecOf(st);
    job.arrival = d.arrival;
    job.work = d.work_seconds;
    job.idle_tail = d.idle_tail_seconds;
    job.gang = d.gang;
    jobs_.push_back(std::move(job));
    Push(d.arrival, EventType::kArrive, static_cast<int32_t>(jobs_.size() - 1));
  }
  if (!arbiter()) HoldStandingReservations();
  services_.resize(s_.services.size());
  for (size_t i = 0; i < services_.size(); ++i) {
    services_[i].rng = Rng(s_.seed * 1'000'003 + 104'729 * (i + 1));
  }
  for (const ServiceSpec& v : s_.services) {
    ServiceResult& r = result_.services.emplace_back();
    r.name = v.name;
    r.team = v.team;
    r.base_p99_ms = v.base_p99_ms;
    r.slo_p99_ms = v.slo_p99_ms;
  }
  Push(0, EventType::kStep);
}

core::CapacityRequestSpec Simulator::SpecOf(const StreamSpec& st) const {
  core::CapacityRequestSpec spec;
  spec.team = st.team;
  spec.workload_class = st.workload_class;
  spec.members = st.members;
  if (st.fraction_milli > 0) {
    spec.shape.gpu = core::GpuFraction{st.fraction_milli, st.fraction_memory_mib};
    spec.shape.cpu_milli = 2000;
    spec.shape.memory_mib = 16'384;
  } else {
    spec.shape.gpu = st.gpus_per_member;
    spec.shape.cpu_milli = 8000 * int64_t{st.gpus_per_member};
    spec.shape.memory_mib = 65'536 * int64_t{st.gpus_per_member};
  }
  spec.preemptible = st.preemptible;
  spec.spot = st.spot && arbiter();
  spec.checkpoint_seconds = st.checkpoint_seconds;
  spec.checkpoint_interval_seconds = st.checkpoint_interval_seconds;
  spec.description = st.name;
  return spec;
}

void Simulator::HoldStandingReservations() {
  for (const auto& [team, windows] : standing_windows_) {
    const TeamSpec& t = FindTeam(team);
    Job job;
    job.team = team;
    job.standing = true;
    job.spec.team = team;
    job.spec.workload_class = WorkloadClass::kTraining;
    job.spec.members = t.gpus / s_.cluster.gpus_per_node;
    job.spec.shape.gpu = s_.cluster.gpus_per_node;
    job.spec.description = "standing reservation";
    job.work = horizon_;
    jobs_.push_back(std::move(job));
    Push(0, EventType::kArrive, static_cast<int32_t>(jobs_.size() - 1));
  }
}

void Simulator::AdvanceTo(int64_t t) {
  while (!state_.timers().empty()) {
    const int64_t due = absl::ToInt64Seconds(state_.timers().begin()->first - s_.start);
    if (due > t) break;
    Integrate(std::max(due, now_));
    core::ChangeSet ch;
    core::Tick(state_, Now(now_), ch);
    ++result_.core_calls;
    Apply(ch);
  }
  Integrate(t);
}

void Simulator::Integrate(int64_t t) {
  if (t <= now_) return;
  const int64_t held = InventoryHeldMilli();
  result_.held_by_inventory_milli_seconds += held * (t - now_);
  if (t > measure_from_) {
    // The draw as core/power.h counts it: the TDP times the allocated
    // milli-GPU, in milliwatts; whole watts, rounded up.
    const int64_t watts = (held * s_.cluster.gpu_tdp_watts + 999) / 1000;
    result_.max_draw_watts = std::max(result_.max_draw_watts, watts);
    const int64_t first = (std::max(now_, measure_from_) - measure_from_) / kMinute;
    const int64_t last = (t - 1 - measure_from_) / kMinute;
    std::vector<int64_t>& by_minute = result_.draw_watts_by_minute;
    if (static_cast<int64_t>(by_minute.size()) <= last) by_minute.resize(last + 1, 0);
    for (int64_t m = first; m <= last; ++m) by_minute[m] = std::max(by_minute[m], watts);
  }
  now_ = t;
}

int64_t Simulator::InventoryHeldMilli() const {
  int64_t milli = 0;
  for (const core::Node& n : state_.nodes()) {
    for (const core::Gpu& g : n.gpus) milli += g.allocated_milli;
  }
  return milli;
}

void Simulator::Handle(const Event& e) {
  switch (e.type) {
    case EventType::kArrive:
      Submit(e.job);
      break;
    case EventType::kFinish:
      if (jobs_[e.job].gen == e.gen) WorkDone(e.job);
      break;
    case EventType::kRelease:
      if (jobs_[e.job].gen == e.gen && jobs_[e.job].phase == Phase::kHeld) Release(e.job);
      break;
    case EventType::kIdleCheck:
      if (jobs_[e.job].gen == e.gen) ReclaimIdle(e.job);
      break;
    case EventType::kStep:
      Step();
      if (proactive()) {
        if (now_ % kMinute == 0) ObservePools();
        Reoffer();
      }
      if (now_ + s_.autoscale_seconds < horizon_) {
        Push(now_ + s_.autoscale_seconds, EventType::kStep);
      }
      break;
    case EventType::kPump:
      Pump(e.job);
      break;
  }
}

std::vector<std::string> Simulator::PoolsFor(const Job& job) const {
  const std::string home = HomePool(job.team);
  // kArbiter: home too only where LendWithoutLoss allows (beyond its nominal
  // the team borrows there as well); none allowed: the job waits parked.
  const bool at_home = LendWithoutLoss(job, home);
  std::vector<std::string> pools;
  if (at_home) pools.push_back(home);
  std::vector<std::string> spot = SpotPools(job.team, job.spec);
  std::erase_if(spot, [&](const std::string& pool) { return !LendWithoutLoss(job, pool); });
  if (spot.empty()) return pools;
  pools.insert(pools.end(), spot.begin(), spot.end());
  if (at_home) pools.push_back(home);
  return pools;
}

std::vector<std::string> Simulator::SpotPools(const std::string& team,
                                              const core::CapacityRequestSpec& spec) const {
  std::vector<std::string> out;
  if (!arbiter() || !spec.preemptible || spec.workload_class == WorkloadClass::kInference ||
      spec.workload_class == WorkloadClass::kExperimentation) {
    return out;
  }
  const bool serving_lends =
      std::count(s_.serving_lends_to.begin(), s_.serving_lends_to.end(), spec.workload_class) > 0;
  for (const char* pool : {"serving", "batch", "dev"}) {
    if (pool == HomePool(team) || (pool == std::string("serving") && !serving_lends)) continue;
    out.push_back(pool);
  }
  return out;
}

int32_t Simulator::PendingOf(int32_t stream) const {
  auto it = pending_.find(stream);
  return it == pending_.end() ? 0 : it->second;
}

void Simulator::Submit(int32_t id) {
  Job& job = jobs_[id];
  if (job.stream >= 0 && job.attempt == 0 &&
      PendingOf(job.stream) >= s_.streams[job.stream].max_pending) {
    backlog_[job.stream].push_back(id);
    return;
  }
  const bool fresh = job.attempt == 0;
  auto stopped = daily_stopped_.find(job.stream);
  if (fresh && Daily(job) && stopped != daily_stopped_.end() && stopped->second == job.arrival) {
    Abandon(id);  // An earlier gang of the same batch was not admitted.
    return;
  }
  if (proactive() && job.spec.spot && !(fresh && Daily(job))) {
    // Spot work starts only where it will not be evicted at once.
    std::map<std::string, std::vector<int32_t>> free;
    if (!PlaceSpot(id, free)) Park(id);
    return;
  }
  // A daily gang that nothing admits is dropped; other work waits in the
  // last pool it tried (its home), or where it reclaims.
  const bool all_it_can_get = fresh && Daily(job);
  const std::vector<std::string> pools = PoolsFor(job);
  for (size_t i = 0; i < pools.size(); ++i) {
    const bool wait_here =
        i + 1 == pools.size() && pools[i] == HomePool(job.team) && !all_it_can_get;
    const core::RequestState got = Request(id, pools[i]);
    if (got == core::RequestState::kAdmitted) return;
    if (got == core::RequestState::kQueued) {
      const core::CapacityRequest* r = state_.FindLiveRequest(jobs_[id].request_id);
      if (wait_here || r->reason_code == core::kReasonPreempting) {
        MarkQueued(id);
        return;
      }
      Cancel(id);
    } else if (got == core::RequestState::kDenied && wait_here) {
      jobs_[id].denied = true;
      jobs_[id].phase = Phase::kDone;
      ++result_.jobs_denied;
      return;
    }
  }
  if (all_it_can_get || !proactive()) {
    Abandon(id);
  } else {
    Park(id);  // No pool where it would not be reclaimed: it waits with the arbiter.
  }
}

bool Simulator::Daily(const Job& job) const {
  return job.stream >= 0 && s_.streams[job.stream].kind == "daily" &&
         s_.streams[job.stream].count > 1;
}

void Simulator::Abandon(int32_t id) {
  Job& job = jobs_[id];
  job.abandoned = true;
  job.phase = Phase::kDone;
  daily_stopped_[job.stream] = job.arrival;
}

core::RequestState Simulator::Request(int32_t id, const std::string& pool) {
  Job& job = jobs_[id];
  core::CapacityRequestSpec spec = job.spec;
  spec.pool = pool;
  spec.idempotency_key = absl::StrCat("j", id, "-", job.attempt, "-", pool);
  spec.priority = job.service >= 0 ? kReplicaPriority : 0;
  ++job.attempt;
  core::ChangeSet ch;
  auto outcome = core::RequestCapacity(state_, spec, Now(now_), ch);
  Check(outcome.status());
  if (!outcome.ok()) return core::RequestState::kDenied;
  job.request_id = outcome->request.id;
  by_request_[job.request_id] = id;
  job.phase = Phase::kWaiting;
  Apply(ch);
  return outcome->request.state;
}

void Simulator::Cancel(int32_t id) {
  core::ChangeSet ch;
  Check(core::ReleaseRequest(state_, jobs_[id].request_id, Now(now_), ch).status());
  Apply(ch);
  jobs_[id].phase = Phase::kWaiting;
}

void Simulator::MarkQueued(int32_t id) {
  Job& job = jobs_[id];
  job.phase = Phase::kQueued;
  if (job.stream >= 0) ++pending_[job.stream];
  if (job.service >= 0) {
    ServiceState& sv = services_[job.service];
    sv.wait_index[job.request_id] = sv.waits.size();
    sv.waits.push_back({job.request_id, job.spec.total_gpu_milli(), kReplicaPriority, Now(now_),
                        absl::InfiniteFuture()});
  }
}

void Simulator::LeaveQueue(int32_t id) {
  Job& job = jobs_[id];
  if (job.phase != Phase::kQueued) return;
  if (job.stream >= 0 && --pending_[job.stream] < s_.streams[job.stream].max_pending) {
    Push(now_, EventType::kPump, job.stream);
  }
  if (job.service >= 0) {
    ServiceState& sv = services_[job.service];
    auto it = sv.wait_index.find(job.request_id);
    if (it != sv.wait_index.end()) sv.waits[it->second].until = Now(now_);
  }
}

void Simulator::Pump(int32_t stream) {
  std::deque<int32_t>& waiting = backlog_[stream];
  while (!waiting.empty() && PendingOf(stream) < s_.streams[stream].max_pending) {
    const int32_t id = waiting.front();
    waiting.pop_front();
    Submit(id);
  }
}

std::vector<int32_t> Simulator::FreeGpus(const std::string& pool) const {
  std::vector<int32_t> free;
  for (const core::Node& n : state_.nodes()) {
    if (n.pool != pool) continue;
    int32_t k = 0;
    for (const core::Gpu& g : n.gpus) k += g.allocated_milli == 0 ? 1 : 0;
    free.push_back(k);
  }
  return free;
}

bool Simulator::FitsFree(const Job& job, const std::string& pool,
                         const std::vector<int32_t>& free) const {
  if (!job.spec.shape.is_whole()) return false;  // Fractions stay where they wait.
  const int64_t per_member = job.spec.shape.whole_gpus();
  if (per_member <= 0) return false;
  int64_t members = 0, gpus = 0;
  for (int32_t k : free) {
    members += k / per_member;
    gpus += k;
  }
  const core::Pool* p = state_.FindPool(pool);
  const int64_t headroom = p == nullptr ? 0 : core::HeadroomOf(*p, s_.cluster.gpu_model) / 1000;
  return members >= job.spec.members && gpus - headroom >= job.spec.members * per_member;
}

bool Simulator::NonSpotWaiting(const std::string& pool) const {
  for (int64_t rid : state_.requests().WaitingIn(pool)) {
    const core::CapacityRequest* r = state_.FindLiveRequest(rid);
    if (r != nullptr && !r->spec.spot) return true;
  }
  return false;
}

void Simulator::Park(int32_t id) {
  Job& job = jobs_[id];
  job.phase = Phase::kParked;
  parked_.insert(id);
  ++pending_[job.stream];
}

bool Simulator::PlaceSpot(int32_t id, std::map<std::string, std::vector<int32_t>>& free) {
  // The site's watt budget: the draw as core/power.h counts it.
  const core::PowerBudget* site = state_.power().FindBudget(core::PowerScope::kSite, kCluster);
  if (site != nullptr && state_.power().DrawMilliwatts(core::PowerScope::kSite, kCluster) +
                                 jobs_[id].spec.total_gpu_milli() * s_.cluster.gpu_tdp_watts >
                             site->watts * 1000) {
    jobs_[id].phase = Phase::kWaiting;
    return false;
  }
  std::vector<std::string> pools = PoolsFor(jobs_[id]);
  if (pools.size() > 1) pools.pop_back();  // Home, tried first, ends the list again.
  for (const std::string& pool : pools) {
    if (!free.contains(pool)) free[pool] = FreeGpus(pool);
    if (!FitsFree(jobs_[id], pool, free[pool]) || NonSpotWaiting(pool)) continue;
    const core::RequestState got = Request(id, pool);
    if (got == core::RequestState::kAdmitted) {
      free[pool] = FreeGpus(pool);
      return true;
    }
    if (got == core::RequestState::kQueued) Cancel(id);
  }
  jobs_[id].phase = Phase::kWaiting;
  return false;
}

void Simulator::Reoffer() {
  std::map<std::string, std::vector<int32_t>> free;
  // The jobs of a stream are alike: once one stays parked, nothing has
  // changed for the others of the pass.
  std::set<int32_t> stuck;
  // Work that is not spot first: spot started before it would be evicted
  // by it at once.
  std::vector<int32_t> ids;
  for (bool spot : {false, true}) {
    for (int32_t id : parked_) {
      if (jobs_[id].spec.spot == spot) ids.push_back(id);
    }
  }
  for (int32_t id : ids) {
    Job& job = jobs_[id];
    if (stuck.contains(job.stream)) continue;
    parked_.erase(id);
    --pending_[job.stream];
    job.phase = Phase::kWaiting;
    if (job.spec.spot) {
      if (!PlaceSpot(id, free)) Park(id);
    } else {
      Submit(id);
      free.clear();
    }
    if (jobs_[id].phase == Phase::kParked) {
      stuck.insert(job.stream);
    } else {
      Push(now_, EventType::kPump, job.stream);
    }
  }
}

void Simulator::Apply(const core::ChangeSet& ch) {
  for (const core::Change& c : ch.changes) {
    const auto* w = std::get_if<core::RequestWrite>(&c);
    if (w == nullptr) continue;
    auto it = by_request_.find(w->request.id);
    if (it == by_request_.end()) continue;
    const int32_t id = it->second;
    switch (w->request.state) {
      case core::RequestState::kAdmitted:
        if (jobs_[id].phase != Phase::kHeld) Admitted(id, w->request);
        break;
      case core::RequestState::kPreempting:
        jobs_[id].deadline = absl::ToInt64Seconds(w->request.preempt_deadline - s_.start);
        break;
      case core::RequestState::kPreempted:
        Preempted(id);
        break;
      case core::RequestState::kDenied:
        if (jobs_[id].phase == Phase::kQueued) {
          LeaveQueue(id);
          jobs_[id].phase = Phase::kDone;
          jobs_[id].denied = true;
          ++result_.jobs_denied;
        }
        break;
      default:
        break;
    }
  }
}

int64_t Simulator::RatePermille(const Job& job) const {
  if (job.stream < 0 || s_.streams[job.stream].checkpoint_interval_seconds == 0) return 1000;
  const StreamSpec& st = s_.streams[job.stream];
  return 1000 - 1000 * st.checkpoint_seconds / st.checkpoint_interval_seconds;
}

void Simulator::Admitted(int32_t id, const core::CapacityRequest& request) {
  LeaveQueue(id);
  Job& job = jobs_[id];
  job.phase = Phase::kHeld;
  job.pool = request.spec.pool;
  job.held_since = now_;
  job.deadline = kNever;
  job.first_admitted = std::min(job.first_admitted, now_);
  RecordHeld(job, request);
  if (job.standing) return;
  if (job.service >= 0) {
    job.progress_from = now_ + s_.services[job.service].cold_start_seconds;
    job.work_end = kNever;
    return;
  }
  const StreamSpec& st = s_.streams[job.stream];
  job.progress_from = now_ + (job.resumed ? st.checkpoint_seconds : 0);
  job.done_at_start = job.done;
  const int64_t rate = RatePermille(job);
  job.work_end = job.progress_from + ((job.work - job.done) * 1000 + rate - 1) / rate;
  Push(job.work_end, EventType::kFinish, id, ++job.gen);
}

void Simulator::RecordHeld(const Job& job, const core::CapacityRequest& request) {
  std::vector<size_t>& index = held_index_[request.id];
  for (const core::Placement& p : request.placements) {
    core::HeldMember m;
    m.request_id = request.id;
    m.member = p.member;
    m.team = request.spec.team;
    m.pool = request.spec.pool;
    m.workload_class = request.spec.workload_class;
    m.gpu_model = s_.cluster.gpu_model;
    m.node_id = p.node_id;
    m.gpu_indices = p.gpu_indices;
    m.gpu_milli = p.gpu_milli;
    m.gpu_memory_mib = p.gpu_memory_mib;
    m.exclusive = p.exclusive;
    m.preemptible = request.spec.preemptible;
    m.priority = request.spec.priority;
    m.from = Now(now_);
    index.push_back(held_.size());
    held_.push_back(std::move(m));
  }
}

void Simulator::EndHold(int32_t id) {
  Job& job = jobs_[id];
  result_.held_by_jobs_milli_seconds += job.spec.total_gpu_milli() * (now_ - job.held_since);
  for (size_t i : held_index_[job.request_id]) held_[i].until = Now(now_);
  held_index_.erase(job.request_id);
  ++job.gen;
}

void Simulator::WorkDone(int32_t id) {
  Job& job = jobs_[id];
  job.done = job.work;
  if (job.idle_tail == 0) {
    Release(id);
    return;
  }
  Push(now_ + job.idle_tail, EventType::kRelease, id, job.gen);
  if (!arbiter() || !job.spec.preemptible) return;
  for (const core::IdlePolicy& p : core::DefaultIdlePolicies()) {
    if (p.workload_class == job.spec.workload_class && p.action == core::IdleAction::kRelease) {
      Push(now_ + absl::ToInt64Seconds(p.window), EventType::kIdleCheck, id, job.gen);
    }
  }
}

void Simulator::Release(int32_t id) {
  Job& job = jobs_[id];
  core::ChangeSet ch;
  Check(core::ReleaseRequest(state_, job.request_id, Now(now_), ch).status());
  EndHold(id);
  job.phase = Phase::kDone;
  if (job.stream >= 0) ++result_.jobs_completed;
  Apply(ch);
}

void Simulator::ReclaimIdle(int32_t id) {
  const Job& job = jobs_[id];
  if (job.phase != Phase::kHeld || job.deadline != kNever) return;
  absl::Duration notice = absl::Minutes(15);
  for (const core::IdlePolicy& p : core::DefaultIdlePolicies()) {
    if (p.workload_class == job.spec.workload_class) notice = p.notice;
  }
  core::ChangeSet ch;
  auto r = core::ReclaimIdle(state_, job.request_id, notice, "idle past its class's window",
                             Now(now_), ch);
  Check(r.status());
  if (r.ok() && Measuring()) ++result_.idle_reclaims;
  Apply(ch);
}

void Simulator::Preempted(int32_t id) {
  Job& job = jobs_[id];
  if (job.phase != Phase::kHeld) return;
  const int64_t held = now_ - job.held_since;
  const int64_t milli = job.spec.total_gpu_milli();
  EndHold(id);
  if (job.stream < 0 || job.done >= job.work) {  // Idle reclaim of a finished session.
    job.phase = Phase::kDone;
    ++result_.jobs_completed;
    return;
  }
  const auto [progress, kept] = ProgressKept(job);
  job.done = job.done_at_start + kept;
  job.resumed = job.done > 0;
  if (Measuring()) {
    ++result_.preemptions;
    result_.preempted_at.push_back(now_ - measure_from_);
    const int64_t useful = kept * 1000 / RatePermille(job);
    result_.lost_milli_seconds += milli * std::max<int64_t>(0, held - useful);
    result_.lost_progress_milli_seconds += milli * (progress - kept);
  }
  job.phase = Phase::kWaiting;
  Push(now_, EventType::kArrive, id);
}

std::pair<int64_t, int64_t> Simulator::ProgressKept(const Job& job) const {
  const StreamSpec& st = s_.streams[job.stream];
  const int64_t left = job.work - job.done_at_start;
  if (st.checkpoint_seconds == 0) {  // No checkpoints: all is lost.
    return {std::min(left, std::max<int64_t>(0, now_ - job.progress_from)), 0};
  }
  if (st.checkpoint_on_notice) {  // Its final checkpoint keeps all it did.
    const int64_t worked = std::max<int64_t>(0, now_ - st.checkpoint_seconds - job.progress_from);
    const int64_t kept = std::min(left, worked * RatePermille(job) / 1000);
    return {kept, kept};
  }
  // Periodic checkpoints only: each interval is work, then a checkpoint.
  const int64_t worked = std::max<int64_t>(0, now_ - job.progress_from);
  const int64_t interval = st.checkpoint_interval_seconds;
  const int64_t per_interval = interval - st.checkpoint_seconds;
  const int64_t kept = std::min(left, worked / interval * per_interval);
  const int64_t progress = std::min(left, kept + std::min(worked % interval, per_interval));
  return {progress, kept};
}

void Simulator::Finish() {
  for (int32_t id = 0; id < static_cast<int32_t>(jobs_.size()); ++id) {
    if (jobs_[id].phase == Phase::kHeld) EndHold(id);
  }
  result_.capacity_milli_seconds =
      int64_t{s_.cluster.nodes} * s_.cluster.gpus_per_node * 1000 * (horizon_ - measure_from_);
  Delays();
  Morning();
  Energy();
  for (const TeamSpec& t : s_.teams) {
    TeamResult& r = result_.teams.emplace_back();
    r.name = t.name;
    r.allocated_milli_seconds = team_allocated_[t.name];
    r.used_milli_seconds = team_used_[t.name];
    r.reserved_cost_micros = static_cast<int64_t>(static_cast<__int128>(r.allocated_milli_seconds) *
                                                  s_.price_micros_per_gpu_hour / (1000 * kHour));
    r.externality_charged_micros = team_charged_[t.name];
    r.externality_credited_micros = team_credited_[t.name];
    r.energy_wh = team_microjoules_[t.name] / kMicrojoulesPerWh;
  }
}

void Simulator::Energy() {
  result_.unallocated_energy_wh = unallocated_microjoules_ / kMicrojoulesPerWh;
  result_.energy_wh = result_.unallocated_energy_wh;
  for (const TeamSpec& t : s_.teams) {
    result_.energy_wh += team_microjoules_[t.name] / kMicrojoulesPerWh;
  }
}

void Simulator::Delays() {
  std::map<std::string, std::vector<int64_t>> waits;
  for (const Job& job : jobs_) {
    if (job.standing || job.abandoned || job.denied || job.arrival < measure_from_) continue;
    // Spot streams apart: their wait is for leftovers, by design.
    const std::string cls = job.stream >= 0 && s_.streams[job.stream].spot
                                ? std::string("spot")
                                : std::string(core::WorkloadClassName(job.spec.workload_class));
    DelayStats& d = result_.delay_by_class[cls];
    ++d.jobs;
    const int64_t until = std::min({job.first_admitted, job.wait_end, horizon_});
    if (until == horizon_) ++d.never_started;
    waits[cls].push_back(until - job.arrival);
  }
  // Nearest-rank percentiles.
  auto rank = [](const std::vector<int64_t>& w, size_t pct) {
    return w[(w.size() * pct + 99) / 100 - 1];
  };
  for (auto& [cls, w] : waits) {
    std::sort(w.begin(), w.end());
    result_.delay_by_class[cls].p50_seconds = rank(w, 50);
    result_.delay_by_class[cls].p95_seconds = rank(w, 95);
  }
}

void Simulator::Morning() {
  for (ServiceResult& r : result_.services) {
    r.morning_p99_permille = WorstMorning(r.p99_ms_by_minute, r.base_p99_ms);
    r.formula_morning_p99_permille = WorstMorning(r.formula_p99_ms_by_minute, r.base_p99_ms);
  }
}

int64_t Simulator::WorstMorning(const std::vector<int32_t>& p99_ms, int64_t base_ms) const {
  int64_t worst = 0;
  const int64_t first_day = measure_from_ / 86'400;
  for (int64_t day = 0; day + first_day < s_.days; ++day) {
    if (IsWeekend(s_, day + first_day)) continue;
    const size_t from = static_cast<size_t>(day * 1440 + 7 * 60);
    const size_t to = std::min(p99_ms.size(), static_cast<size_t>(day * 1440 + 11 * 60));
    if (to <= from) continue;
    std::vector<int32_t> m(p99_ms.begin() + from, p99_ms.begin() + to);
    std::nth_element(m.begin(), m.begin() + m.size() / 2, m.end());
    worst = std::max(worst, int64_t{m[m.size() / 2]} * 1000 / base_ms);
  }
  return worst;
}

}  // namespace internal

Result Simulate(const Scenario& scenario, Policy policy) {
  return internal::Simulator(scenario, policy).Run();
}

}  // namespace arbiter::daysim
