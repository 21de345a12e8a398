// daysim's scenario: the cluster, the teams with their static partitions,
// the serving services and the job streams of one simulated week. Loaded
// from YAML (bench/scenarios/*.yaml); every field has a default, so a
// scenario names only what it changes. docs/economics.md describes the model.
//
// Quantities are integers: milli-GPU, MiB, seconds, permille (1000 = 100%),
// micros of currency. Thread-compatible value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "core/model.h"

namespace arbiter::daysim {

struct ClusterSpec {
  int32_t nodes = 125;
  int32_t gpus_per_node = 8;
  std::string gpu_model = "H100-80GB";
  int64_t gpu_memory_mib = 81920;
  int64_t cpu_milli_per_node = 192'000;
  int64_t memory_mib_per_node = 2'097'152;
  // A GPU draws gpu_idle_watts when nothing on it is busy, rising linearly
  // with its busy share to gpu_tdp_watts; every GPU is powered all week.
  // Default: an H100 SXM, 700 W TDP, 100 W idle.
  int32_t gpu_tdp_watts = 700;
  int32_t gpu_idle_watts = 100;
};

// A team and its static partition (whole nodes, in GPUs). The partition is
// also the team's nominal quota under the sharing policies.
struct TeamSpec {
  std::string name;
  int32_t gpus = 0;  // A multiple of the cluster's gpus_per_node.
  // The latency class of the team's own pool under static partitioning and
  // Arbiter: "serving", "batch" or "dev".
  std::string pool_class = "batch";
};

// An inference service whose replicas an autoscaler requests and releases.
// Load follows a diurnal curve (trough at trough_hour, peak at peak_hour,
// lower at weekends) with spikes: the load rises to spike_factor x within
// spike_ramp_seconds and stays there for spike_minutes. Requests arrive as a
// Poisson stream at that rate; each ready replica is a FIFO queue
// (docs/economics.md, "The latency model").
struct ServiceSpec {
  std::string name;
  std::string team;
  int64_t peak_rps = 1000;
  int32_t trough_permille = 150;   // Load at the trough, of the peak.
  int32_t weekend_permille = 700;  // Weekend load, of the weekday load.
  int32_t trough_hour = 4;
  int32_t peak_hour = 14;
  int64_t replica_milli = 1000;  // 1000: a whole GPU; less: a fraction.
  int64_t replica_memory_mib = 0;
  int64_t replica_rps = 50;  // Requests/s one replica serves when saturated.
  // The autoscaler keeps load per replica at this share of replica_rps.
  int32_t target_utilization_permille = 500;
  int32_t min_replicas = 2;
  int64_t cold_start_seconds = 60;  // Admission to serving (weights, warm-up).
  int64_t scale_down_delay_seconds = 600;
  // p99 at the target utilization, alone on its GPUs: the anchor of the
  // p99 formula kept as a cross-check, and the unit of the p99 figures.
  int64_t base_p99_ms = 100;
  int64_t slo_p99_ms = 300;
  // Requests a replica serves at once, each slot a server; a request's
  // service time at full speed is gamma distributed with mean
  // replica_concurrency / replica_rps and this coefficient of variation
  // (permille; 1000: exponential). Co-tenancy stretches it by the
  // replica's slowdown. Default: 1 server, CV 500.
  int32_t replica_concurrency = 1;
  int32_t service_cv_permille = 500;
  // How the balancer spreads requests over the ready replicas:
  // "round_robin" (each gets every c-th request of the c ready replicas) or
  // "random" (each request to a replica drawn uniformly). Default:
  // round_robin.
  std::string routing = "round_robin";
  // A request that would wait longer than this is refused at once and counts
  // as a response of this length. Default: 0, meaning 10 x slo_p99_ms.
  int64_t timeout_ms = 0;
  int64_t slo_window_seconds = 300;
  int64_t penalty_micros_per_minute = 0;  // 0: the team's reserved cost.
  int32_t spikes_per_week = 0;
  int32_t spike_factor = 10;
  int64_t spike_ramp_seconds = 60;
  int32_t spike_minutes = 5;
};

// A stream of jobs. kind "poisson": arrivals at per_day (spread over the
// hours [from_hour, to_hour), weekdays only when set); kind "daily": `count`
// gangs submitted at from_hour each day, until one is not admitted ("asks
// for everything it can get" when count is large).
struct StreamSpec {
  std::string name;
  std::string team;
  std::string kind = "poisson";
  core::WorkloadClass workload_class = core::WorkloadClass::kBatchAnalytics;
  int32_t per_day = 10;
  int32_t count = 1;
  int32_t from_hour = 0;
  int32_t to_hour = 24;
  bool weekdays_only = false;
  int32_t members = 1;
  int32_t gpus_per_member = 0;  // Whole GPUs per member; or set fraction_milli.
  int64_t fraction_milli = 0;
  int64_t fraction_memory_mib = 0;
  int64_t min_work_seconds = 3600;  // Work, at full speed, drawn uniformly.
  int64_t max_work_seconds = 3600;
  bool preemptible = true;
  // Under the Arbiter policies the stream's work is spot (docs/pools.md):
  // priced lowest, preempted before any other work, never preempting; it
  // runs on whatever any pool lends. Under static and quota-only it is
  // ordinary preemptible work of its team (neither has spot capacity).
  bool spot = false;
  int64_t checkpoint_seconds = 0;  // Write (and restore) time; 0: no checkpoints.
  int64_t checkpoint_interval_seconds = 0;
  // Told to vacate, the job writes a checkpoint before its deadline (the
  // core grants at least checkpoint_seconds) and loses no progress; when
  // false only its periodic checkpoints count, and the work since the last
  // one is lost. Default: true.
  bool checkpoint_on_notice = true;
  int32_t busy_permille = 900;  // GPU busy while working.
  // Interactive sessions: the GPUs are held this much longer, idle, after
  // the work ends (a notebook left open). Drawn uniformly.
  int64_t min_idle_tail_seconds = 0;
  int64_t max_idle_tail_seconds = 0;
  // Most requests of the stream waiting in the arbiter at once; later
  // arrivals wait with the submitter (the delay counts from arrival).
  int32_t max_pending = 50;
  // Held all week under static partitioning and quota-only sharing: the
  // team reserves its whole partition at the start and runs this stream's
  // jobs inside it (a sponsor's standing reservation). Under Arbiter each
  // job is requested when it starts, with the team's nominal quota and
  // reclaim as the guarantee.
  bool standing_reservation = false;
};

struct Scenario {
  std::string name;
  uint64_t seed = 1;
  int32_t days = 7;
  // Simulated before `start` and not measured, so that the measured week
  // starts with queues, backlogs and long runs in flight, not an empty
  // cluster.
  int32_t warmup_days = 1;
  absl::Time start;  // Default: Monday 2026-11-02 00:00 UTC.
  ClusterSpec cluster;
  std::vector<TeamSpec> teams;
  std::vector<ServiceSpec> services;
  std::vector<StreamSpec> streams;
  int64_t price_micros_per_gpu_hour = 2'500'000;
  int64_t autoscale_seconds = 15;  // Autoscaler and latency step.
  // Requests the latency model simulates per service and minute: the
  // requests of a sample of the ready replicas (docs/economics.md).
  // Default: 1000.
  int32_t latency_samples_per_minute = 1000;
  // Interference of soft-shared neighbours: a fractional replica's speed is
  // divided by 1 + this / 1000 x (neighbours' milli on its GPU) / 1000;
  // the first when any other class shares its GPU, the second when only
  // inference does.
  int32_t co_tenancy_slowdown_permille = 1000;
  int32_t inference_neighbour_slowdown_permille = 200;
  // Arbiter: serving teams keep this share of their nominal quota unlent
  // (for spikes), lending the rest.
  int32_t serving_reserve_permille = 100;
  int64_t arbiter_grace_seconds = 30;
  // Arbiter: the time spot work gets to vacate (Pool.spot_grace_seconds);
  // -1: unset, the pool's grace.
  int64_t arbiter_spot_grace_seconds = -1;
  // Arbiter: milli-GPU of the cluster's model that the serving pool keeps
  // free for inference (Pool.headroom); work it lends to, and spot work, may
  // not take it. 0: none.
  int64_t serving_headroom_milli = 0;
  // Arbiter (proactive): the weight of each new observation in the learnt
  // demand profiles (the services' asks and each team's demand in each
  // pool: an exponentially weighted mean per quarter hour of the week),
  // permille.
  int32_t forecast_weight_permille = 300;
  // A watt budget for the whole site (the cluster), by the core's TDP
  // accounting (core/power.h): under every policy admission keeps the
  // allocated draw within it. 0: none.
  int64_t site_power_budget_watts = 0;
  // Arbiter: the classes the serving pool lends to (always preemptible).
  std::vector<core::WorkloadClass> serving_lends_to = {core::WorkloadClass::kTraining,
                                                       core::WorkloadClass::kBatchAnalytics};
};

// Reads and validates a scenario. Errors: NOT_FOUND (no file),
// INVALID_ARGUMENT naming the field (e.g. "services[1].replica_rps").
absl::StatusOr<Scenario> LoadScenario(const std::string& path);
// Parses YAML text; as LoadScenario.
absl::StatusOr<Scenario> ParseScenario(const std::string& yaml_text);
// INVALID_ARGUMENT naming the first bad field.
absl::Status ValidateScenario(const Scenario& s);

}  // namespace arbiter::daysim
