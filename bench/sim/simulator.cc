#include "bench/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <queue>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

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
  }
  return "unknown";
}

namespace {

using core::WorkloadClass;

constexpr int64_t kMinute = 60;
constexpr int64_t kHour = 3600;
constexpr int64_t kNever = INT64_MAX;
constexpr char kCluster[] = "sim";
constexpr int32_t kReplicaPriority = 100;
// p99 when a service has no ready capacity or is saturated, in base p99s.
constexpr double kSaturatedP99 = 50.0;

enum class Phase { kWaiting, kQueued, kHeld, kDone };

struct Job {
  int32_t stream = -1;   // -1 for a serving replica and a standing reservation.
  int32_t service = -1;  // Replicas: the service.
  std::string team;
  core::CapacityRequestSpec spec;  // Without pool and key, set per attempt.
  bool standing = false;           // A standing reservation's hold.
  int64_t arrival = 0;
  int64_t work = 0;  // Seconds at full speed.
  int64_t idle_tail = 0;
  int32_t gang = 0;
  Phase phase = Phase::kWaiting;
  int64_t request_id = 0;
  int32_t attempt = 0;
  int32_t gen = 0;  // Bumped whenever a scheduled finish or release goes stale.
  int64_t first_admitted = kNever;
  int64_t held_since = 0;
  int64_t progress_from = 0;  // Work runs from here (after restore / cold start).
  int64_t done_at_start = 0;  // Work done when this hold began.
  int64_t work_end = kNever;  // When the work completes in this hold.
  int64_t deadline = kNever;  // Preemption deadline, when told to vacate.
  bool resumed = false;       // Has a checkpoint to restore from.
  bool abandoned = false;     // A daily gang not needed: never counted.
  bool denied = false;
  int64_t wait_end = kNever;  // Cancelled before it was ever admitted.
  int64_t done = 0;           // Work done and kept, seconds.
};

enum class EventType { kArrive, kFinish, kRelease, kIdleCheck, kStep, kPump };

struct Event {
  int64_t at = 0;
  int64_t seq = 0;
  EventType type = EventType::kStep;
  int32_t job = 0;
  int32_t gen = 0;
  bool operator>(const Event& o) const { return std::tie(at, seq) > std::tie(o.at, o.seq); }
};

struct ServiceState {
  std::vector<int32_t> replicas;  // Live replica jobs (queued or held).
  int64_t below_since = kNever;   // Since when fewer replicas would do.
  double ready_capacity = 0;      // Requests/s its ready replicas serve, as of the last step.
  double minute_p99 = 0;
  bool minute_contention = false;
  std::vector<core::WaitingRequest> waits;
  absl::flat_hash_map<int64_t, size_t> wait_index;  // Request id -> waits index.
};

// Whether `job` holds GPUs that are busy at `t`, and how busy (permille).
int32_t BusyPermille(const Job& job, const StreamSpec* stream, int64_t t) {
  if (job.phase != Phase::kHeld || t < job.progress_from || t >= job.work_end) return 0;
  if (job.deadline != kNever && stream != nullptr &&
      t >= job.deadline - stream->checkpoint_seconds) {
    return 0;  // Writing its last checkpoint.
  }
  return stream == nullptr ? 1000 : stream->busy_permille;
}

class Simulator {
 public:
  // Simulates the warm-up days and then the measured days; the measured
  // days start at `measure_from_`.
  Simulator(const Scenario& s, Policy p)
      : s_(WithWarmup(s)), policy_(p), workload_(DrawWorkload(s_)) {
    result_.policy = p;
    horizon_ = int64_t{s_.days} * 86'400;
    measure_from_ = int64_t{s.warmup_days} * 86'400;
  }

  static Scenario WithWarmup(Scenario s) {
    s.start -= absl::Hours(24 * s.warmup_days);
    s.days += s.warmup_days;
    return s;
  }
  bool Measuring() const { return now_ >= measure_from_; }

  Result Run() {
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

 private:
  // --- Set-up: the same inventory and teams in every policy, arranged into
  // pools and quotas as the policy has it.
  std::string HomePool(const std::string& team) const {
    if (policy_ == Policy::kStatic) return absl::StrCat("p-", team);
    if (policy_ == Policy::kQuotaOnly) return "shared";
    return FindTeam(team).pool_class;
  }
  const TeamSpec& FindTeam(const std::string& name) const {
    for (const TeamSpec& t : s_.teams) {
      if (t.name == name) return t;
    }
    return s_.teams.front();  // Unreachable for a validated scenario.
  }
  static core::LatencyClass ClassOf(const std::string& pool_class) {
    if (pool_class == "serving") return core::LatencyClass::kServing;
    if (pool_class == "dev") return core::LatencyClass::kDev;
    return core::LatencyClass::kBatch;
  }

  void Check(const absl::Status& status) {
    ++result_.core_calls;
    if (!status.ok()) ++result_.core_errors;
  }

  void Setup() {
    (void)state_.LoadGpuModel({s_.cluster.gpu_model, s_.cluster.gpu_memory_mib, 132, 700, true});
    core::ChangeSet ignored;
    Check(core::CreateCluster(state_, {kCluster, ""}, ignored));
    CreatePools(ignored);
    CreateTeams(ignored);
    RegisterNodes(ignored);
    SetQuotas(ignored);
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

  void CreatePools(core::ChangeSet& ch) {
    if (policy_ == Policy::kStatic) {
      for (const TeamSpec& t : s_.teams) {
        Check(core::CreatePool(state_, {HomePool(t.name), ClassOf(t.pool_class), ""}, ch));
      }
    } else if (policy_ == Policy::kQuotaOnly) {
      core::Pool shared{"shared", core::LatencyClass::kBatch, ""};
      shared.reclaim_grace_seconds = 86'400;
      Check(core::CreatePool(state_, shared, ch));
    } else {
      for (const char* name : {"serving", "batch", "dev"}) {
        core::Pool pool{name, ClassOf(name), ""};
        pool.reclaim_grace_seconds = s_.arbiter_grace_seconds;
        if (pool.latency_class == core::LatencyClass::kServing) {
          pool.lends_to = s_.serving_lends_to;
        }
        Check(core::CreatePool(state_, pool, ch));
      }
    }
  }

  void CreateTeams(core::ChangeSet& ch) {
    const bool cohort = policy_ != Policy::kStatic;
    if (cohort) Check(core::CreateTeam(state_, {"org", "", 1000}, ch));
    for (const TeamSpec& t : s_.teams) {
      Check(core::CreateTeam(state_, {t.name, cohort ? "org" : "", 1000}, ch));
    }
  }

  void RegisterNodes(core::ChangeSet& ch) {
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

  void SetQuotas(core::ChangeSet& ch) {
    const bool borrow = policy_ != Policy::kStatic;
    for (const TeamSpec& t : s_.teams) {
      core::Quota q{t.name, HomePool(t.name), int64_t{t.gpus} * 1000};
      q.borrowing_limit_milli = borrow ? core::kUnlimited : 0;
      if (policy_ == Policy::kArbiter && t.pool_class == "serving") {
        const int64_t reserve = q.nominal_milli * s_.serving_reserve_permille / 1000;
        q.lending_limit_milli = q.nominal_milli - reserve / 1000 * 1000;
      }
      // Quotas add up per pool: a second team in a shared pool adds to it.
      Check(core::SetQuota(state_, q, Now(0), ch));
    }
    if (policy_ != Policy::kArbiter) return;
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

  // --- The week's events.
  void Push(int64_t at, EventType type, int32_t job = 0, int32_t gen = 0) {
    events_.push({at, seq_++, type, job, gen});
  }

  void Schedule() {
    for (const JobDraw& d : workload_.jobs) {
      const StreamSpec& st = s_.streams[d.stream];
      if (st.standing_reservation && policy_ != Policy::kArbiter) {
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
    if (policy_ != Policy::kArbiter) HoldStandingReservations();
    services_.resize(s_.services.size());
    for (const ServiceSpec& v : s_.services) {
      ServiceResult& r = result_.services.emplace_back();
      r.name = v.name;
      r.team = v.team;
      r.base_p99_ms = v.base_p99_ms;
      r.slo_p99_ms = v.slo_p99_ms;
    }
    Push(0, EventType::kStep);
  }

  core::CapacityRequestSpec SpecOf(const StreamSpec& st) const {
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
    spec.checkpoint_seconds = st.checkpoint_seconds;
    spec.checkpoint_interval_seconds = st.checkpoint_interval_seconds;
    spec.description = st.name;
    return spec;
  }

  // Static and quota-only: each team with a standing-reservation stream
  // holds its whole partition all week, from the start.
  void HoldStandingReservations() {
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

  absl::Time Now(int64_t t) const { return s_.start + absl::Seconds(t); }

  // --- Time: the core's timers fire at their instants, and the inventory's
  // holding is integrated, before anything else happens at `t`.
  void AdvanceTo(int64_t t) {
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

  void Integrate(int64_t t) {
    if (t <= now_) return;
    result_.held_by_inventory_milli_seconds += InventoryHeldMilli() * (t - now_);
    now_ = t;
  }

  int64_t InventoryHeldMilli() const {
    int64_t milli = 0;
    for (const core::Node& n : state_.nodes()) {
      for (const core::Gpu& g : n.gpus) milli += g.allocated_milli;
    }
    return milli;
  }

  void Handle(const Event& e) {
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
        if (now_ + s_.autoscale_seconds < horizon_) {
          Push(now_ + s_.autoscale_seconds, EventType::kStep);
        }
        break;
      case EventType::kPump:
        Pump(e.job);
        break;
    }
  }

  // --- Submission: the pools a job tries, in order; it stays queued in the
  // last one (or where it waits for victims it started to preempt).
  std::vector<std::string> PoolsFor(const Job& job) const {
    const std::string home = HomePool(job.team);
    std::vector<std::string> pools = {home};
    const std::vector<std::string> spot = SpotPools(job.team, job.spec);
    if (spot.empty()) return pools;
    pools.insert(pools.end(), spot.begin(), spot.end());
    pools.push_back(home);
    return pools;
  }

  // Arbiter: the other pools whose lent capacity `spec` may borrow, as
  // preemptible work: serving where it lends to the class, and the batch
  // and dev pools. Interactive and serving work stays home.
  std::vector<std::string> SpotPools(const std::string& team,
                                     const core::CapacityRequestSpec& spec) const {
    std::vector<std::string> out;
    if (policy_ != Policy::kArbiter || !spec.preemptible ||
        spec.workload_class == WorkloadClass::kInference ||
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

  int32_t PendingOf(int32_t stream) const {
    auto it = pending_.find(stream);
    return it == pending_.end() ? 0 : it->second;
  }

  void Submit(int32_t id) {
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
    // A daily gang that nothing admits is dropped; other work waits in the
    // last pool it tried (its home), or where it reclaims.
    const bool all_it_can_get = fresh && Daily(job);
    const std::vector<std::string> pools = PoolsFor(job);
    for (size_t i = 0; i < pools.size(); ++i) {
      const bool wait_here = i + 1 == pools.size() && !all_it_can_get;
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
    Abandon(id);
  }

  // A daily batch of gangs that asks for all it can get.
  bool Daily(const Job& job) const {
    return job.stream >= 0 && s_.streams[job.stream].kind == "daily" &&
           s_.streams[job.stream].count > 1;
  }

  void Abandon(int32_t id) {
    Job& job = jobs_[id];
    job.abandoned = true;
    job.phase = Phase::kDone;
    daily_stopped_[job.stream] = job.arrival;
  }

  // One RequestCapacity; returns the request's state after the decision.
  core::RequestState Request(int32_t id, const std::string& pool) {
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

  void Cancel(int32_t id) {
    core::ChangeSet ch;
    Check(core::ReleaseRequest(state_, jobs_[id].request_id, Now(now_), ch).status());
    Apply(ch);
    jobs_[id].phase = Phase::kWaiting;
  }

  void MarkQueued(int32_t id) {
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

  void LeaveQueue(int32_t id) {
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

  // Submits what waits with the submitter, up to the stream's limit.
  void Pump(int32_t stream) {
    std::deque<int32_t>& waiting = backlog_[stream];
    while (!waiting.empty() && PendingOf(stream) < s_.streams[stream].max_pending) {
      const int32_t id = waiting.front();
      waiting.pop_front();
      Submit(id);
    }
  }

  // --- What the core decided, for the jobs it concerns.
  void Apply(const core::ChangeSet& ch) {
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

  int64_t RatePermille(const Job& job) const {
    if (job.stream < 0 || s_.streams[job.stream].checkpoint_interval_seconds == 0) return 1000;
    const StreamSpec& st = s_.streams[job.stream];
    return 1000 - 1000 * st.checkpoint_seconds / st.checkpoint_interval_seconds;
  }

  void Admitted(int32_t id, const core::CapacityRequest& request) {
    LeaveQueue(id);
    Job& job = jobs_[id];
    job.phase = Phase::kHeld;
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

  void RecordHeld(const Job& job, const core::CapacityRequest& request) {
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

  // Ends `job`'s current hold at now: the held members close and the
  // milli-GPU seconds held add up.
  void EndHold(int32_t id) {
    Job& job = jobs_[id];
    result_.held_by_jobs_milli_seconds += job.spec.total_gpu_milli() * (now_ - job.held_since);
    for (size_t i : held_index_[job.request_id]) held_[i].until = Now(now_);
    held_index_.erase(job.request_id);
    ++job.gen;
  }

  void WorkDone(int32_t id) {
    Job& job = jobs_[id];
    job.done = job.work;
    if (job.idle_tail == 0) {
      Release(id);
      return;
    }
    Push(now_ + job.idle_tail, EventType::kRelease, id, job.gen);
    if (policy_ != Policy::kArbiter || !job.spec.preemptible) return;
    for (const core::IdlePolicy& p : core::DefaultIdlePolicies()) {
      if (p.workload_class == job.spec.workload_class && p.action == core::IdleAction::kRelease) {
        Push(now_ + absl::ToInt64Seconds(p.window), EventType::kIdleCheck, id, job.gen);
      }
    }
  }

  void Release(int32_t id) {
    Job& job = jobs_[id];
    core::ChangeSet ch;
    Check(core::ReleaseRequest(state_, job.request_id, Now(now_), ch).status());
    EndHold(id);
    job.phase = Phase::kDone;
    if (job.stream >= 0) ++result_.jobs_completed;
    Apply(ch);
  }

  // Arbiter's idle reclaim of a session left idle for its class's window:
  // notice, then the core takes the capacity back at the deadline.
  void ReclaimIdle(int32_t id) {
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

  // The core took `id`'s capacity back at its deadline: what was
  // checkpointed is kept, the rest is lost, and unfinished work asks again.
  void Preempted(int32_t id) {
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
    if (Measuring()) ++result_.preemptions;
    const StreamSpec& st = s_.streams[job.stream];
    int64_t kept = 0;
    if (st.checkpoint_seconds > 0) {
      const int64_t worked = std::max<int64_t>(0, now_ - st.checkpoint_seconds - job.progress_from);
      kept = std::min(job.work - job.done_at_start, worked * RatePermille(job) / 1000);
      job.done = job.done_at_start + kept;
      job.resumed = job.done > 0;
    } else {
      job.done = 0;
    }
    const int64_t useful = kept * 1000 / RatePermille(job);
    if (Measuring()) result_.lost_milli_seconds += milli * std::max<int64_t>(0, held - useful);
    job.phase = Phase::kWaiting;
    Push(now_, EventType::kArrive, id);
  }

  // --- Serving: every step the autoscaler sizes each service to its load
  // and each service's latency follows its load per ready replica.
  double Diurnal(const ServiceSpec& v, int64_t t) const {
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

  double Load(int32_t i, int64_t t) const {
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

  void Step() {
    for (int32_t i = 0; i < static_cast<int32_t>(s_.services.size()); ++i) {
      Autoscale(i);
      MeasureLatency(i);
    }
    if (now_ % kMinute == 0 && Measuring()) SampleMinute();
  }

  void Autoscale(int32_t i) {
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

  void AddReplica(int32_t i) {
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

  // Removes the replica that serves least: a queued one, else the newest.
  void RemoveReplica(int32_t i) {
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

  // Requests/s a ready replica serves, slowed by soft-shared neighbours:
  // lightly by other inference, heavily when any other class shares the GPU
  // (then `contended` is set).
  double ReplicaCapacity(const Job& job, bool& contended) const {
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

  void MeasureLatency(int32_t i) {
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

  void CloseMinute(int32_t i) {
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

  // A breached SLO window is an incident, attributed by the core's method.
  void CloseSloWindow(int32_t i) {
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

  // Allocated and busy milli-GPU over the last minute, per team and hour.
  void SampleMinute() {
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

  bool StandingBusy(const std::string& team) const {
    auto it = standing_windows_.find(team);
    if (it == standing_windows_.end()) return false;
    for (const auto& [from, to] : it->second) {
      if (now_ >= from && now_ < to) return true;
    }
    return false;
  }

  // --- The week is over: what stays held counts up to the end.
  void Finish() {
    for (int32_t id = 0; id < static_cast<int32_t>(jobs_.size()); ++id) {
      if (jobs_[id].phase == Phase::kHeld) EndHold(id);
    }
    result_.capacity_milli_seconds =
        int64_t{s_.cluster.nodes} * s_.cluster.gpus_per_node * 1000 * (horizon_ - measure_from_);
    Delays();
    Morning();
    for (const TeamSpec& t : s_.teams) {
      TeamResult& r = result_.teams.emplace_back();
      r.name = t.name;
      r.allocated_milli_seconds = team_allocated_[t.name];
      r.used_milli_seconds = team_used_[t.name];
      r.reserved_cost_micros =
          static_cast<int64_t>(static_cast<__int128>(r.allocated_milli_seconds) *
                               s_.price_micros_per_gpu_hour / (1000 * kHour));
      r.externality_charged_micros = team_charged_[t.name];
      r.externality_credited_micros = team_credited_[t.name];
    }
  }

  void Delays() {
    std::map<std::string, std::vector<int64_t>> waits;
    for (const Job& job : jobs_) {
      if (job.standing || job.abandoned || job.denied || job.arrival < measure_from_) continue;
      const std::string cls(core::WorkloadClassName(job.spec.workload_class));
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

  void Morning() {
    for (ServiceResult& r : result_.services) {
      const int64_t first_day = measure_from_ / 86'400;
      for (int64_t day = 0; day + first_day < s_.days; ++day) {
        if (IsWeekend(s_, day + first_day)) continue;
        const size_t from = static_cast<size_t>(day * 1440 + 7 * 60);
        const size_t to =
            std::min(r.p99_ms_by_minute.size(), static_cast<size_t>(day * 1440 + 11 * 60));
        if (to <= from) continue;
        std::vector<int32_t> m(r.p99_ms_by_minute.begin() + from, r.p99_ms_by_minute.begin() + to);
        std::nth_element(m.begin(), m.begin() + m.size() / 2, m.end());
        r.morning_p99_permille =
            std::max(r.morning_p99_permille, int64_t{m[m.size() / 2]} * 1000 / r.base_p99_ms);
      }
    }
  }

  const Scenario s_;  // Starts with the warm-up.
  const Policy policy_;
  const Workload workload_;
  int64_t horizon_ = 0;
  int64_t measure_from_ = 0;
  int64_t now_ = 0;
  int64_t seq_ = 0;
  core::State state_;
  Result result_;
  std::vector<Job> jobs_;
  std::vector<ServiceState> services_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  absl::flat_hash_map<int64_t, int32_t> by_request_;
  std::map<int32_t, int32_t> pending_;
  std::map<int32_t, int64_t> daily_stopped_;  // Stream -> arrival of the batch that stopped.
  std::map<int32_t, std::deque<int32_t>> backlog_;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> standing_windows_;
  std::vector<core::HeldMember> held_;
  absl::flat_hash_map<int64_t, std::vector<size_t>> held_index_;
  std::map<std::string, int64_t> team_allocated_, team_used_, team_charged_, team_credited_;
};

}  // namespace

Result Simulate(const Scenario& scenario, Policy policy) {
  return Simulator(scenario, policy).Run();
}

}  // namespace arbiter::daysim
