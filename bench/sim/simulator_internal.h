// The daysim simulator's internals, shared by its translation units
// (simulator.cc: set-up, events, submission and the core's decisions;
// simulator_serving.cc: serving, latency and the minute samples). Not an API.
//
// Thread-compatible: one Simulator runs one policy on one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "bench/sim/simulator.h"
#include "bench/sim/workload.h"
#include "core/arbitration.h"

namespace arbiter::daysim::internal {

using core::WorkloadClass;

constexpr int64_t kMinute = 60;
constexpr int64_t kHour = 3600;
constexpr int64_t kNever = INT64_MAX;
constexpr char kCluster[] = "sim";
constexpr int32_t kReplicaPriority = 100;
constexpr int64_t kMicrojoulesPerWh = 3'600'000'000;
// The p99 formula's value when a service has no ready capacity or is
// saturated, in base p99s.
constexpr double kSaturatedP99 = 50.0;

// Quarter hours of a day and a week.
constexpr int64_t kSlotSeconds = 900;
constexpr int64_t kDaySlots = 86'400 / kSlotSeconds;
constexpr int64_t kWeekSlots = 7 * kDaySlots;
// A rise of a service's asks by this multiple within a reclaim's lead time
// that falls back within kBurstSeconds is a burst (kArbiter).
constexpr double kBurstMultiple = 1.25;
constexpr int64_t kBurstSeconds = 900;

// kParked: waiting with the arbiter (kArbiter), in no pool's queue.
enum class Phase { kWaiting, kQueued, kParked, kHeld, kDone };

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
  std::string pool;           // Of the current or last hold.
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

// A quantity learnt per quarter hour of the week (kArbiter's demand
// profiles): each quarter hour is observed as the median of its samples and
// folded into an exponentially weighted mean per quarter hour of the week,
// of weekdays or weekend days, and of any day (the fallbacks while a slot is
// unseen); negative: unseen.
struct LearntProfile {
  LearntProfile();
  // Adds a sample taken in absolute quarter hour `k` (from the Unix epoch);
  // a new quarter hour folds the previous one's median into the means with
  // weight `weight`.
  void Observe(int64_t k, int64_t value, double weight);
  // The mean for absolute quarter hour `k`; negative when unseen.
  double At(int64_t k) const;
  std::vector<double> by_week_slot, by_day_type_slot, by_day_slot;
  int64_t slot = -1;  // The quarter hour being observed (absolute).
  std::vector<int64_t> samples;
};

// A replica that serves, and how much slower than alone on its GPU.
struct ReadyReplica {
  int32_t id = 0;
  double slowdown = 1;
};

struct ServiceState {
  std::vector<int32_t> replicas;  // Live replica jobs (queued or held).
  int64_t below_since = kNever;   // Since when fewer replicas would do.
  double ready_capacity = 0;      // Requests/s its ready replicas serve, as of the last step.
  // The latency model: the queues of the replicas sampled (by job id), the
  // service's own generator, and the minute's sampled responses.
  absl::flat_hash_map<int32_t, ReplicaQueue> queues;
  Rng rng;
  std::vector<WeightedSample> minute_samples;
  std::vector<double> responses;  // Scratch: one queue's responses of a step.
  double minute_formula_p99 = 0;
  // What the minute saw, for a breach's cause.
  bool minute_waiting = false;  // A replica waited for admission.
  // Of the replicas that waited: one waited for capacity (victims, room,
  // headroom), not for its team's quota; one waited for a watt budget.
  bool minute_waited_capacity = false;
  bool minute_waited_power = false;
  bool minute_starting = false;  // A replica was starting.
  bool minute_slowed = false;    // A ready replica shared its GPU with another class.
  std::string breach_cause;      // The previous minute's, if it breached.
  std::vector<core::WaitingRequest> waits;
  absl::flat_hash_map<int64_t, size_t> wait_index;  // Request id -> waits index.
  // The learnt demand profile (kArbiter): the replicas asked for, each
  // quarter hour observed as the median of its steps' asks, so that a spike
  // of a few minutes does not teach a rise.
  LearntProfile profile;
  // kArbiter: the largest burst seen, as a multiple of the asks before it:
  // a rise by kBurstMultiple or more within a reclaim's lead time (the grace
  // plus the cold start; `recent_asks` holds that window's asks) that falls
  // back within kBurstSeconds. Learnt, like the profile, from what it asked
  // for; a rise that stays is a change of level, not a burst.
  double burst = 1.0;
  std::deque<int64_t> recent_asks;
  // The rise being watched: since when (kNever: none), from what ask, and
  // its highest multiple so far.
  int64_t rise_since = kNever;
  int64_t rise_base = 0;
  double rise_peak = 1.0;
};

// Whether `job` holds GPUs that are busy at `t`, and how busy (permille).
int32_t BusyPermille(const Job& job, const StreamSpec* stream, int64_t t);

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

  static Scenario WithWarmup(Scenario s);
  bool Measuring() const { return now_ >= measure_from_; }
  bool arbiter() const { return IsArbiter(policy_); }
  bool proactive() const { return policy_ == Policy::kArbiter; }

  Result Run();

 private:
  // --- Set-up: the same inventory and teams in every policy, arranged into
  // pools and quotas as the policy has it.
  std::string HomePool(const std::string& team) const;
  const TeamSpec& FindTeam(const std::string& name) const;
  static core::LatencyClass ClassOf(const std::string& pool_class);
  void Check(const absl::Status& status);
  void Setup();
  void CreatePools(core::ChangeSet& ch);
  void CreateTeams(core::ChangeSet& ch);
  void RegisterNodes(core::ChangeSet& ch);
  void SetQuotas(core::ChangeSet& ch);

  // --- The week's events.
  void Push(int64_t at, EventType type, int32_t job = 0, int32_t gen = 0);
  void Schedule();
  core::CapacityRequestSpec SpecOf(const StreamSpec& st) const;

  // Static and quota-only: each team with a standing-reservation stream
  // holds its whole partition all week, from the start.
  void HoldStandingReservations();
  absl::Time Now(int64_t t) const { return s_.start + absl::Seconds(t); }

  // --- Time: the core's timers fire at their instants, and the inventory's
  // holding is integrated, before anything else happens at `t`.
  void AdvanceTo(int64_t t);
  void Integrate(int64_t t);
  int64_t InventoryHeldMilli() const;
  void Handle(const Event& e);

  // --- Submission: the pools a job tries, in order; it stays queued in the
  // last one if that is its home (or where it waits for victims it started
  // to preempt). Under kArbiter only the pools LendWithoutLoss allows, its
  // home included: with none, the job is parked.
  std::vector<std::string> PoolsFor(const Job& job) const;

  // Arbiter: the other pools whose lent capacity `spec` may borrow, as
  // preemptible work: serving where it lends to the class, and the batch
  // and dev pools. Interactive and serving work stays home.
  std::vector<std::string> SpotPools(const std::string& team,
                                     const core::CapacityRequestSpec& spec) const;
  int32_t PendingOf(int32_t stream) const;
  void Submit(int32_t id);

  // A daily batch of gangs that asks for all it can get.
  bool Daily(const Job& job) const;
  void Abandon(int32_t id);

  // One RequestCapacity; returns the request's state after the decision.
  core::RequestState Request(int32_t id, const std::string& pool);
  void Cancel(int32_t id);
  void MarkQueued(int32_t id);
  void LeaveQueue(int32_t id);

  // Submits what waits with the submitter, up to the stream's limit.
  void Pump(int32_t stream);

  // kArbiter: spot work starts only on free GPUs (`free`: FreeGpus by pool,
  // kept up to date) of a pool that PoolsFor allows and where no other work
  // waits (that work would evict it at once). Whether it started; if not it
  // is in Phase::kWaiting.
  bool PlaceSpot(int32_t id, std::map<std::string, std::vector<int32_t>>& free);
  // kArbiter: work with no pool to start in now (spot work: no free room;
  // other work: no pool where it would not be reclaimed) waits with the
  // arbiter, counted as pending, in no pool's queue.
  void Park(int32_t id);
  // kArbiter, every step: the parked work, oldest first, is offered the
  // pools again.
  void Reoffer();
  // Whether work other than spot waits in `pool`'s queue.
  bool NonSpotWaiting(const std::string& pool) const;
  // Whether `job` would fit on free whole GPUs of `pool` now, beyond the
  // pool's headroom: `free` is each of the pool's nodes' free GPUs.
  bool FitsFree(const Job& job, const std::string& pool, const std::vector<int32_t>& free) const;
  std::vector<int32_t> FreeGpus(const std::string& pool) const;

  // --- What the core decided, for the jobs it concerns.
  void Apply(const core::ChangeSet& ch);
  int64_t RatePermille(const Job& job) const;
  void Admitted(int32_t id, const core::CapacityRequest& request);
  void RecordHeld(const Job& job, const core::CapacityRequest& request);

  // Ends `job`'s current hold at now: the held members close and the
  // milli-GPU seconds held add up.
  void EndHold(int32_t id);
  void WorkDone(int32_t id);
  void Release(int32_t id);

  // Arbiter's idle reclaim of a session left idle for its class's window:
  // notice, then the core takes the capacity back at the deadline.
  void ReclaimIdle(int32_t id);

  // The core took `id`'s capacity back at its deadline: what was
  // checkpointed is kept, the rest is lost, and unfinished work asks again.
  void Preempted(int32_t id);
  // Of a job preempted now: the work it did in this hold and the part of it
  // its checkpoints keep, in seconds at full speed.
  std::pair<int64_t, int64_t> ProgressKept(const Job& job) const;

  // --- Serving: every step the autoscaler sizes each service to its load,
  // and the requests of the step queue at its ready replicas.
  double Diurnal(const ServiceSpec& v, int64_t t) const;
  double Load(int32_t i, int64_t t) const;
  void Step();
  void Autoscale(int32_t i);

  // The replicas service `i` asks for now. Reactive: sized to the load at
  // this step. A policy that acts ahead of predicted demand (headroom,
  // proactive reclaim) would size to a forecast here.
  int64_t WantedReplicas(int32_t i);

  // --- The demand profile (kArbiter). Observes the replicas service `i`
  // asks for at this step (reactively: for the load now).
  void ObserveDemand(int32_t i, int64_t asked);
  // Learns service `i`'s bursts from its ask at this step (ServiceState::burst).
  void LearnBurst(int32_t i, int64_t asked);
  // The replicas the profile predicts service `i` asks for at `t`,
  // interpolated between quarter hours; negative when it has not seen the
  // time of day yet.
  double Forecast(int32_t i, int64_t t) const;
  // `profile` at `t` (seconds from the start), interpolated between
  // quarter hours; negative while unseen.
  double ProfileAt(const LearntProfile& profile, int64_t t) const;
  // Whether `job` may start in `pool` without being reclaimed before its
  // time limit (no checkpoints) or its next checkpoint (kArbiter). Serving:
  // the services' profiles times their bursts, the headroom and (for spot
  // work) the rise the other borrowers' profiles predict leave room for it
  // over that horizon. Batch and dev pools: KeptFromOwners. Always true
  // under the other policies.
  bool LendWithoutLoss(const Job& job, const std::string& pool) const;
  // The batch and dev pools (kArbiter): work within its team's nominal is
  // kept; beyond it, what the other teams demand in `pool` now, or their
  // learnt demand within their nominal over `horizon` when more, must leave
  // room for it. Spot work: always (PlaceSpot decides).
  bool KeptFromOwners(const Job& job, const std::string& pool, int64_t horizon) const;
  // Milli-GPU that each team's work, not spot and not inference, holds or
  // waits for in `pool`.
  std::map<std::string, int64_t> DemandByTeam(const std::string& pool) const;
  // What the other teams demand in `pool` (for spot work: every team): `now`
  // (DemandByTeam) when `t` < 0, else the larger of now and their profile at
  // `t`, within their nominal when `job` is not spot.
  int64_t OthersDemand(const Job& job, const std::string& pool, int64_t t,
                       const std::map<std::string, int64_t>& now) const;
  // Observes each team's DemandByTeam in each pool into pool_demand_; once
  // a minute.
  void ObservePools();
  void AddReplica(int32_t i);

  // Removes the replica that serves least: a queued one, else the newest.
  void RemoveReplica(int32_t i);

  // How much slower a ready replica serves than alone, from its soft-shared
  // neighbours: lightly for other inference, heavily when any other class
  // shares the GPU (then `other_class` is set). 1 for whole GPUs.
  double ReplicaSlowdown(const Job& job, bool& other_class) const;
  // The service's ready replicas; notes waiting, starting and slowed
  // replicas in the minute's flags.
  std::vector<ReadyReplica> ReadyReplicas(int32_t i);
  void MeasureLatency(int32_t i);

  // The step's requests at a sample of the ready replicas, stratified by
  // slowdown, into the minute's samples (docs/economics.md).
  void SimulateRequests(int32_t i, const std::vector<ReadyReplica>& ready);
  // The replicas of `stratum` (ids, ascending) whose queues to simulate:
  // those already simulated first, then the lowest ids. A replica new to
  // the sample starts empty if it just became ready, else with a copy of a
  // sampled peer's queue.
  std::vector<int32_t> Sample(int32_t i, const std::vector<int32_t>& stratum, size_t n,
                              absl::flat_hash_map<int32_t, ReplicaQueue>& sampled);
  ReplicaQueue::Interval IntervalOf(int32_t i, double load, size_t ready, double slowdown) const;
  double FormulaP99(int32_t i, double capacity) const;
  void CloseMinute(int32_t i);
  std::string BreachCause(int32_t i) const;
  // The class, other than inference, that holds the most of `pool` ("spot"
  // for spot work of any class); empty when none does.
  std::string HoldingClass(const std::string& pool) const;

  // A breached SLO window is an incident, attributed by the core's method.
  void CloseSloWindow(int32_t i);

  // Allocated and busy milli-GPU over the last minute, per team and hour,
  // and the energy the GPUs drew.
  void SampleMinute();
  bool StandingBusy(const std::string& team) const;
  // Microjoules a minute of `milli` GPU draws at `busy_permille`.
  int64_t MinuteMicrojoules(int64_t milli, int64_t busy_permille) const;

  // --- The week is over: what stays held counts up to the end.
  void Finish();
  void Delays();
  void Morning();
  // The median p99 of 07:00-11:00 of the worst weekday, permille of `base_ms`.
  int64_t WorstMorning(const std::vector<int32_t>& p99_ms, int64_t base_ms) const;
  // Watt-hours from the minutes' microjoules: the total is the teams' plus
  // the unallocated GPUs', each rounded down.
  void Energy();
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
  std::set<int32_t> parked_;  // Jobs in Phase::kParked.
  // kArbiter: each (team, pool)'s demand, learnt.
  std::map<std::pair<std::string, std::string>, LearntProfile> pool_demand_;
  std::map<int32_t, int64_t> daily_stopped_;  // Stream -> arrival of the batch that stopped.
  std::map<int32_t, std::deque<int32_t>> backlog_;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> standing_windows_;
  std::vector<core::HeldMember> held_;
  absl::flat_hash_map<int64_t, std::vector<size_t>> held_index_;
  std::map<std::string, int64_t> team_allocated_, team_used_, team_charged_, team_credited_;
  std::map<std::string, int64_t> team_microjoules_;
  int64_t unallocated_microjoules_ = 0;
};

}  // namespace arbiter::daysim::internal
