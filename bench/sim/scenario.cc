#include "bench/sim/scenario.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "yaml-cpp/yaml.h"

#include "core/status_macros.h"

namespace arbiter::daysim {
namespace {

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// Reads `node[key]` into `out` when present; a value of the wrong type is
// INVALID_ARGUMENT naming `prefix + key`.
template <typename T>
absl::Status Read(const YAML::Node& node, const char* key, const std::string& prefix, T& out) {
  const YAML::Node v = node[key];
  if (!v) return absl::OkStatus();
  try {
    out = v.as<T>();
  } catch (const YAML::Exception&) {
    return Invalid(prefix + key, absl::StrCat("cannot read '", YAML::Dump(v), "'"));
  }
  return absl::OkStatus();
}

absl::Status ReadClass(const YAML::Node& node, const std::string& prefix,
                       core::WorkloadClass& out) {
  std::string name(core::WorkloadClassName(out));
  ARBITER_RETURN_IF_ERROR(Read(node, "class", prefix, name));
  out = core::WorkloadClassFromName(name);
  if (out == core::WorkloadClass::kUnspecified) {
    return Invalid(prefix + "class", absl::StrCat("unknown workload class '", name, "'"));
  }
  return absl::OkStatus();
}

absl::Status ReadCluster(const YAML::Node& n, ClusterSpec& c) {
  const std::string p = "cluster.";
  ARBITER_RETURN_IF_ERROR(Read(n, "nodes", p, c.nodes));
  ARBITER_RETURN_IF_ERROR(Read(n, "gpus_per_node", p, c.gpus_per_node));
  ARBITER_RETURN_IF_ERROR(Read(n, "gpu_model", p, c.gpu_model));
  ARBITER_RETURN_IF_ERROR(Read(n, "gpu_memory_mib", p, c.gpu_memory_mib));
  ARBITER_RETURN_IF_ERROR(Read(n, "cpu_milli_per_node", p, c.cpu_milli_per_node));
  ARBITER_RETURN_IF_ERROR(Read(n, "gpu_tdp_watts", p, c.gpu_tdp_watts));
  ARBITER_RETURN_IF_ERROR(Read(n, "gpu_idle_watts", p, c.gpu_idle_watts));
  return Read(n, "memory_mib_per_node", p, c.memory_mib_per_node);
}

absl::Status ReadService(const YAML::Node& n, const std::string& p, ServiceSpec& s) {
  ARBITER_RETURN_IF_ERROR(Read(n, "name", p, s.name));
  ARBITER_RETURN_IF_ERROR(Read(n, "team", p, s.team));
  ARBITER_RETURN_IF_ERROR(Read(n, "peak_rps", p, s.peak_rps));
  ARBITER_RETURN_IF_ERROR(Read(n, "trough_permille", p, s.trough_permille));
  ARBITER_RETURN_IF_ERROR(Read(n, "weekend_permille", p, s.weekend_permille));
  ARBITER_RETURN_IF_ERROR(Read(n, "trough_hour", p, s.trough_hour));
  ARBITER_RETURN_IF_ERROR(Read(n, "peak_hour", p, s.peak_hour));
  ARBITER_RETURN_IF_ERROR(Read(n, "replica_milli", p, s.replica_milli));
  ARBITER_RETURN_IF_ERROR(Read(n, "replica_memory_mib", p, s.replica_memory_mib));
  ARBITER_RETURN_IF_ERROR(Read(n, "replica_rps", p, s.replica_rps));
  ARBITER_RETURN_IF_ERROR(Read(n, "target_utilization_permille", p, s.target_utilization_permille));
  ARBITER_RETURN_IF_ERROR(Read(n, "min_replicas", p, s.min_replicas));
  ARBITER_RETURN_IF_ERROR(Read(n, "cold_start_seconds", p, s.cold_start_seconds));
  ARBITER_RETURN_IF_ERROR(Read(n, "scale_down_delay_seconds", p, s.scale_down_delay_seconds));
  ARBITER_RETURN_IF_ERROR(Read(n, "base_p99_ms", p, s.base_p99_ms));
  ARBITER_RETURN_IF_ERROR(Read(n, "slo_p99_ms", p, s.slo_p99_ms));
  ARBITER_RETURN_IF_ERROR(Read(n, "replica_concurrency", p, s.replica_concurrency));
  ARBITER_RETURN_IF_ERROR(Read(n, "service_cv_permille", p, s.service_cv_permille));
  ARBITER_RETURN_IF_ERROR(Read(n, "routing", p, s.routing));
  ARBITER_RETURN_IF_ERROR(Read(n, "timeout_ms", p, s.timeout_ms));
  ARBITER_RETURN_IF_ERROR(Read(n, "slo_window_seconds", p, s.slo_window_seconds));
  ARBITER_RETURN_IF_ERROR(Read(n, "penalty_micros_per_minute", p, s.penalty_micros_per_minute));
  ARBITER_RETURN_IF_ERROR(Read(n, "spikes_per_week", p, s.spikes_per_week));
  ARBITER_RETURN_IF_ERROR(Read(n, "spike_factor", p, s.spike_factor));
  ARBITER_RETURN_IF_ERROR(Read(n, "spike_ramp_seconds", p, s.spike_ramp_seconds));
  return Read(n, "spike_minutes", p, s.spike_minutes);
}

absl::Status ReadStream(const YAML::Node& n, const std::string& p, StreamSpec& s) {
  ARBITER_RETURN_IF_ERROR(Read(n, "name", p, s.name));
  ARBITER_RETURN_IF_ERROR(Read(n, "team", p, s.team));
  ARBITER_RETURN_IF_ERROR(Read(n, "kind", p, s.kind));
  ARBITER_RETURN_IF_ERROR(ReadClass(n, p, s.workload_class));
  ARBITER_RETURN_IF_ERROR(Read(n, "per_day", p, s.per_day));
  ARBITER_RETURN_IF_ERROR(Read(n, "count", p, s.count));
  ARBITER_RETURN_IF_ERROR(Read(n, "from_hour", p, s.from_hour));
  ARBITER_RETURN_IF_ERROR(Read(n, "to_hour", p, s.to_hour));
  ARBITER_RETURN_IF_ERROR(Read(n, "weekdays_only", p, s.weekdays_only));
  ARBITER_RETURN_IF_ERROR(Read(n, "members", p, s.members));
  ARBITER_RETURN_IF_ERROR(Read(n, "gpus_per_member", p, s.gpus_per_member));
  ARBITER_RETURN_IF_ERROR(Read(n, "fraction_milli", p, s.fraction_milli));
  ARBITER_RETURN_IF_ERROR(Read(n, "fraction_memory_mib", p, s.fraction_memory_mib));
  ARBITER_RETURN_IF_ERROR(Read(n, "min_work_seconds", p, s.min_work_seconds));
  ARBITER_RETURN_IF_ERROR(Read(n, "max_work_seconds", p, s.max_work_seconds));
  ARBITER_RETURN_IF_ERROR(Read(n, "preemptible", p, s.preemptible));
  ARBITER_RETURN_IF_ERROR(Read(n, "spot", p, s.spot));
  ARBITER_RETURN_IF_ERROR(Read(n, "checkpoint_seconds", p, s.checkpoint_seconds));
  ARBITER_RETURN_IF_ERROR(Read(n, "checkpoint_interval_seconds", p, s.checkpoint_interval_seconds));
  ARBITER_RETURN_IF_ERROR(Read(n, "checkpoint_on_notice", p, s.checkpoint_on_notice));
  ARBITER_RETURN_IF_ERROR(Read(n, "busy_permille", p, s.busy_permille));
  ARBITER_RETURN_IF_ERROR(Read(n, "min_idle_tail_seconds", p, s.min_idle_tail_seconds));
  ARBITER_RETURN_IF_ERROR(Read(n, "max_idle_tail_seconds", p, s.max_idle_tail_seconds));
  ARBITER_RETURN_IF_ERROR(Read(n, "max_pending", p, s.max_pending));
  return Read(n, "standing_reservation", p, s.standing_reservation);
}

absl::Status ReadTop(const YAML::Node& root, Scenario& s) {
  ARBITER_RETURN_IF_ERROR(Read(root, "name", "", s.name));
  ARBITER_RETURN_IF_ERROR(Read(root, "seed", "", s.seed));
  ARBITER_RETURN_IF_ERROR(Read(root, "days", "", s.days));
  ARBITER_RETURN_IF_ERROR(Read(root, "warmup_days", "", s.warmup_days));
  std::string start = "2026-11-02T00:00:00Z";
  ARBITER_RETURN_IF_ERROR(Read(root, "start", "", start));
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, start, &s.start, &err)) {
    return Invalid("start", absl::StrCat("not an RFC 3339 time: ", err));
  }
  ARBITER_RETURN_IF_ERROR(Read(root, "price_micros_per_gpu_hour", "", s.price_micros_per_gpu_hour));
  ARBITER_RETURN_IF_ERROR(Read(root, "autoscale_seconds", "", s.autoscale_seconds));
  ARBITER_RETURN_IF_ERROR(
      Read(root, "latency_samples_per_minute", "", s.latency_samples_per_minute));
  ARBITER_RETURN_IF_ERROR(
      Read(root, "co_tenancy_slowdown_permille", "", s.co_tenancy_slowdown_permille));
  ARBITER_RETURN_IF_ERROR(Read(root, "inference_neighbour_slowdown_permille", "",
                               s.inference_neighbour_slowdown_permille));
  ARBITER_RETURN_IF_ERROR(Read(root, "serving_reserve_permille", "", s.serving_reserve_permille));
  ARBITER_RETURN_IF_ERROR(Read(root, "arbiter_grace_seconds", "", s.arbiter_grace_seconds));
  ARBITER_RETURN_IF_ERROR(
      Read(root, "arbiter_spot_grace_seconds", "", s.arbiter_spot_grace_seconds));
  ARBITER_RETURN_IF_ERROR(Read(root, "serving_headroom_milli", "", s.serving_headroom_milli));
  ARBITER_RETURN_IF_ERROR(Read(root, "forecast_weight_permille", "", s.forecast_weight_permille));
  ARBITER_RETURN_IF_ERROR(Read(root, "site_power_budget_watts", "", s.site_power_budget_watts));
  if (const YAML::Node lends = root["serving_lends_to"]) {
    s.serving_lends_to.clear();
    for (size_t i = 0; i < lends.size(); ++i) {
      const std::string name = lends[i].as<std::string>("");
      const core::WorkloadClass c = core::WorkloadClassFromName(name);
      if (c == core::WorkloadClass::kUnspecified || c == core::WorkloadClass::kInference) {
        return Invalid(absl::StrCat("serving_lends_to[", i, "]"),
                       absl::StrCat("'", name, "' is not a class other than inference"));
      }
      s.serving_lends_to.push_back(c);
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateService(const Scenario& s, const ServiceSpec& v, const std::string& p,
                             const std::set<std::string>& teams) {
  if (v.name.empty()) return Invalid(p + "name", "required");
  if (!teams.contains(v.team)) return Invalid(p + "team", "not a team of the scenario");
  if (v.peak_rps <= 0) return Invalid(p + "peak_rps", "must be > 0");
  if (v.replica_rps <= 0) return Invalid(p + "replica_rps", "must be > 0");
  if (v.replica_milli <= 0 || v.replica_milli > 1000 ||
      (v.replica_milli == 1000) != (v.replica_memory_mib == 0)) {
    return Invalid(p + "replica_milli",
                   "1000 for a whole GPU, or 1..999 with replica_memory_mib set");
  }
  if (v.target_utilization_permille < 100 || v.target_utilization_permille > 950) {
    return Invalid(p + "target_utilization_permille", "must be in 100..950");
  }
  if (v.min_replicas < 1) return Invalid(p + "min_replicas", "must be >= 1");
  if (v.base_p99_ms <= 0 || v.slo_p99_ms < v.base_p99_ms) {
    return Invalid(p + "slo_p99_ms", "must be >= base_p99_ms > 0");
  }
  if (v.slo_window_seconds < 60 || v.slo_window_seconds % s.autoscale_seconds != 0 ||
      v.slo_window_seconds % 60 != 0) {
    return Invalid(p + "slo_window_seconds", "whole minutes, >= 60");
  }
  if (v.spike_factor < 1) return Invalid(p + "spike_factor", "must be >= 1");
  if (v.replica_concurrency < 1 || v.replica_concurrency > 256) {
    return Invalid(p + "replica_concurrency", "must be in 1..256");
  }
  if (v.service_cv_permille < 0 || v.service_cv_permille > 4000) {
    return Invalid(p + "service_cv_permille", "must be in 0..4000");
  }
  if (v.routing != "round_robin" && v.routing != "random") {
    return Invalid(p + "routing", "round_robin or random");
  }
  if (v.timeout_ms < 0) return Invalid(p + "timeout_ms", "must be >= 0");
  return absl::OkStatus();
}

absl::Status ValidateStream(const StreamSpec& v, const std::string& p,
                            const std::set<std::string>& teams) {
  if (v.name.empty()) return Invalid(p + "name", "required");
  if (!teams.contains(v.team)) return Invalid(p + "team", "not a team of the scenario");
  if (v.kind != "poisson" && v.kind != "daily") return Invalid(p + "kind", "poisson or daily");
  if (v.from_hour < 0 || v.to_hour > 24 || v.from_hour >= v.to_hour) {
    return Invalid(p + "from_hour", "need 0 <= from_hour < to_hour <= 24");
  }
  if (v.members < 1) return Invalid(p + "members", "must be >= 1");
  if ((v.gpus_per_member > 0) == (v.fraction_milli > 0)) {
    return Invalid(p + "gpus_per_member", "set exactly one of gpus_per_member, fraction_milli");
  }
  if (v.fraction_milli >= 1000 || (v.fraction_milli > 0 && v.fraction_memory_mib <= 0)) {
    return Invalid(p + "fraction_milli", "1..999 with fraction_memory_mib set");
  }
  if (v.min_work_seconds < 60 || v.max_work_seconds < v.min_work_seconds) {
    return Invalid(p + "min_work_seconds", "need 60 <= min_work_seconds <= max_work_seconds");
  }
  if (v.max_idle_tail_seconds < v.min_idle_tail_seconds || v.min_idle_tail_seconds < 0) {
    return Invalid(p + "max_idle_tail_seconds", "need 0 <= min <= max");
  }
  if ((v.checkpoint_seconds > 0) != (v.checkpoint_interval_seconds > 0)) {
    return Invalid(p + "checkpoint_interval_seconds", "set with checkpoint_seconds, or neither");
  }
  if (v.checkpoint_interval_seconds > 0 && v.checkpoint_interval_seconds <= v.checkpoint_seconds) {
    return Invalid(p + "checkpoint_interval_seconds", "must exceed checkpoint_seconds");
  }
  if (v.busy_permille < 0 || v.busy_permille > 1000) {
    return Invalid(p + "busy_permille", "must be in 0..1000");
  }
  if (v.max_pending < 1) return Invalid(p + "max_pending", "must be >= 1");
  if (v.spot && (!v.preemptible || v.standing_reservation)) {
    return Invalid(p + "spot", "spot work is preemptible and never a standing reservation");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateScenario(const Scenario& s) {
  if (s.days < 1 || s.days > 31) return Invalid("days", "must be in 1..31");
  if (s.warmup_days < 0 || s.warmup_days > 7) return Invalid("warmup_days", "must be in 0..7");
  if (s.cluster.nodes < 1 || s.cluster.gpus_per_node < 1) {
    return Invalid("cluster.nodes", "need nodes >= 1 and gpus_per_node >= 1");
  }
  if (s.autoscale_seconds < 1 || 60 % s.autoscale_seconds != 0) {
    return Invalid("autoscale_seconds", "must divide 60");
  }
  if (s.latency_samples_per_minute < 60 || s.latency_samples_per_minute > 1'000'000) {
    return Invalid("latency_samples_per_minute", "must be in 60..1000000");
  }
  if (s.cluster.gpu_tdp_watts < 1 || s.cluster.gpu_idle_watts < 0 ||
      s.cluster.gpu_idle_watts > s.cluster.gpu_tdp_watts) {
    return Invalid("cluster.gpu_idle_watts", "need 0 <= gpu_idle_watts <= gpu_tdp_watts");
  }
  std::set<std::string> teams;
  int64_t partitioned = 0;
  for (size_t i = 0; i < s.teams.size(); ++i) {
    const TeamSpec& t = s.teams[i];
    const std::string p = absl::StrCat("teams[", i, "].");
    if (t.name.empty() || !teams.insert(t.name).second) {
      return Invalid(p + "name", "required and unique");
    }
    if (t.gpus <= 0 || t.gpus % s.cluster.gpus_per_node != 0) {
      return Invalid(p + "gpus", "a positive multiple of cluster.gpus_per_node");
    }
    if (t.pool_class != "serving" && t.pool_class != "batch" && t.pool_class != "dev") {
      return Invalid(p + "pool_class", "serving, batch or dev");
    }
    partitioned += t.gpus;
  }
  if (partitioned != int64_t{s.cluster.nodes} * s.cluster.gpus_per_node) {
    return Invalid("teams",
                   absl::StrCat("partitions add up to ", partitioned, " GPUs, the cluster has ",
                                int64_t{s.cluster.nodes} * s.cluster.gpus_per_node));
  }
  for (size_t i = 0; i < s.services.size(); ++i) {
    ARBITER_RETURN_IF_ERROR(
        ValidateService(s, s.services[i], absl::StrCat("services[", i, "]."), teams));
  }
  for (size_t i = 0; i < s.streams.size(); ++i) {
    ARBITER_RETURN_IF_ERROR(ValidateStream(s.streams[i], absl::StrCat("streams[", i, "]."), teams));
  }
  if (s.serving_reserve_permille < 0 || s.serving_reserve_permille > 1000) {
    return Invalid("serving_reserve_permille", "must be in 0..1000");
  }
  if (s.arbiter_spot_grace_seconds < -1 || s.arbiter_spot_grace_seconds > 86'400) {
    return Invalid("arbiter_spot_grace_seconds", "-1 (unset) or 0..86400");
  }
  if (s.serving_headroom_milli < 0) return Invalid("serving_headroom_milli", "must be >= 0");
  if (s.forecast_weight_permille < 1 || s.forecast_weight_permille > 1000) {
    return Invalid("forecast_weight_permille", "must be in 1..1000");
  }
  if (s.site_power_budget_watts < 0) return Invalid("site_power_budget_watts", "must be >= 0");
  return absl::OkStatus();
}

absl::StatusOr<Scenario> ParseScenario(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("scenario: not YAML: ", e.what()));
  }
  Scenario s;
  ARBITER_RETURN_IF_ERROR(ReadTop(root, s));
  if (root["cluster"]) ARBITER_RETURN_IF_ERROR(ReadCluster(root["cluster"], s.cluster));
  for (size_t i = 0; i < root["teams"].size(); ++i) {
    const std::string p = absl::StrCat("teams[", i, "].");
    TeamSpec& t = s.teams.emplace_back();
    ARBITER_RETURN_IF_ERROR(Read(root["teams"][i], "name", p, t.name));
    ARBITER_RETURN_IF_ERROR(Read(root["teams"][i], "gpus", p, t.gpus));
    ARBITER_RETURN_IF_ERROR(Read(root["teams"][i], "pool_class", p, t.pool_class));
  }
  for (size_t i = 0; i < root["services"].size(); ++i) {
    ARBITER_RETURN_IF_ERROR(ReadService(root["services"][i], absl::StrCat("services[", i, "]."),
                                        s.services.emplace_back()));
  }
  for (size_t i = 0; i < root["streams"].size(); ++i) {
    ARBITER_RETURN_IF_ERROR(ReadStream(root["streams"][i], absl::StrCat("streams[", i, "]."),
                                       s.streams.emplace_back()));
  }
  ARBITER_RETURN_IF_ERROR(ValidateScenario(s));
  return s;
}

absl::StatusOr<Scenario> LoadScenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("scenario: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return ParseScenario(text.str());
}

}  // namespace arbiter::daysim
