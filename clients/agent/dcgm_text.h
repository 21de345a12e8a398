// Parsing of a dcgm-exporter scrape: the Prometheus text exposition format
// (version 0.0.4) into one reading per GPU and per MIG instance.
//
// Tolerant by design: a malformed line, an unknown metric or an out-of-range
// value is skipped and reported as a problem; the rest of the scrape stands.
// Labels vary across exporter versions (Hostname / hostname; pci_bus_id,
// pod labels and GPU_I_* present or not) and none of the optional ones is
// required.
//
// Thread-compatible: no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace arbiter::agent {

// One sample line: name{labels} value [timestamp].
struct MetricLine {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  int64_t timestamp_ms = -1;  // -1: none given.
  // The label's value; "" when absent.
  absl::string_view label(absl::string_view key) const;
};

// Parses one line that is not blank and not a comment. Returns false and
// sets `error` when the line is malformed.
bool ParseMetricLine(absl::string_view line, MetricLine* out, std::string* error);

// What the agent reports for one GPU, or one MIG instance on it. Values the
// scrape did not carry are -1.
struct DeviceReading {
  std::string uuid;           // The GPU's UUID (a MIG instance carries its parent's).
  int32_t gpu_index = -1;     // The "gpu" label.
  int32_t mig_instance = -1;  // GPU_I_ID; -1: the whole GPU.
  std::string mig_profile;    // GPU_I_PROFILE.
  std::string hostname;       // "Hostname" or "hostname".
  std::string model_name;     // "modelName".
  std::string pod;
  std::string pod_namespace;
  int32_t util_milli = -1;           // DCGM_FI_DEV_GPU_UTIL (%) x 10.
  int32_t engine_active_milli = -1;  // DCGM_FI_PROF_GR_ENGINE_ACTIVE (ratio) x 1000.
  int64_t fb_used_mib = -1;          // DCGM_FI_DEV_FB_USED.
  int64_t fb_free_mib = -1;          // DCGM_FI_DEV_FB_FREE.
  int64_t power_mw = -1;             // DCGM_FI_DEV_POWER_USAGE (W) x 1000.
};

// The DCGM fields the agent reads, by their exporter names:
// DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_GR_ENGINE_ACTIVE, DCGM_FI_DEV_FB_USED,
// DCGM_FI_DEV_FB_FREE and DCGM_FI_DEV_POWER_USAGE. Every source of these
// series (a scrape, a Prometheus query) converts them with `SetDcgmField`,
// so that each gives identical readings.
std::vector<std::string> DcgmFieldNames();

// Parses a sample value as the Prometheus text format and API write it: a
// float, "NaN", "+Inf", "Inf" or "-Inf". Returns false when it is none.
bool ParseSampleValue(absl::string_view token, double* value);

// Sets `metric`'s reading `value` (in DCGM's unit: %, ratio, MiB, W) on
// `device`, converted to the reading's integer unit. NOT_FOUND when `metric`
// is not one of `DcgmFieldNames()`; OUT_OF_RANGE when `value` is NaN
// ("<metric>: no value (NaN)"), DCGM's blank sentinel or above it, +Inf
// included ("<metric>: no value (DCGM blank)"), or outside the field's range
// ("<metric>: <value> is out of [0, <max>]"). On an error `device` is
// unchanged.
absl::Status SetDcgmField(absl::string_view metric, double value, DeviceReading& device);

struct ScrapeProblem {
  int32_t line = 0;  // 1-based.
  std::string message;
};

struct Scrape {
  // In order of first appearance.
  std::vector<DeviceReading> devices;
  std::vector<ScrapeProblem> problems;
  int64_t sample_lines = 0;  // Lines that parsed.
};

// Parses a whole scrape. Devices are keyed by (UUID, gpu, GPU_I_ID); lines
// without a "gpu" label (the exporter's own metrics) are ignored. DCGM's
// blank sentinels (values near 2^63) and values out of their metric's range
// are left out, with a problem each.
Scrape ParseDcgmScrape(absl::string_view text);

}  // namespace arbiter::agent
