#include "clients/agent/dcgm_text.h"

#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace arbiter::agent {
namespace {

bool IsNameStart(char c) { return absl::ascii_isalpha(c) || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || absl::ascii_isdigit(c); }

void SkipSpaces(absl::string_view& s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
}

// Consumes a metric or label name; label names may not contain ':'.
bool ConsumeName(absl::string_view& s, bool label, std::string* out) {
  size_t n = 0;
  while (n < s.size() && IsNameChar(s[n]) && !(label && s[n] == ':')) ++n;
  if (n == 0 || absl::ascii_isdigit(s[0])) return false;
  out->assign(s.data(), n);
  s.remove_prefix(n);
  return true;
}

// Consumes a double-quoted label value with \\, \" and \n escapes.
bool ConsumeQuoted(absl::string_view& s, std::string* out) {
  if (s.empty() || s.front() != '"') return false;
  s.remove_prefix(1);
  out->clear();
  while (!s.empty()) {
    char c = s.front();
    s.remove_prefix(1);
    if (c == '"') return true;
    if (c == '\\') {
      if (s.empty()) return false;
      char e = s.front();
      s.remove_prefix(1);
      out->push_back(e == 'n' ? '\n' : e);
      continue;
    }
    out->push_back(c);
  }
  return false;
}

}  // namespace

bool ParseSampleValue(absl::string_view token, double* value) {
  if (token == "NaN") {
    *value = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (token == "+Inf" || token == "Inf") {
    *value = std::numeric_limits<double>::infinity();
    return true;
  }
  if (token == "-Inf") {
    *value = -std::numeric_limits<double>::infinity();
    return true;
  }
  return absl::SimpleAtod(token, value);
}

namespace {

// DCGM reports fields it has no value for as large sentinels (near 2^63 for
// 64-bit fields, near 2^31 for 32-bit ones).
bool IsDcgmBlank(double v) { return v >= 2147483632.0; }

enum class Field { kUtil, kEngineActive, kFbUsed, kFbFree, kPower };

struct FieldSpec {
  const char* metric;
  Field field;
  double max;    // Largest valid reading.
  double scale;  // To the integer unit.
};

constexpr FieldSpec kFields[] = {
    {"DCGM_FI_DEV_GPU_UTIL", Field::kUtil, 100, 10},
    {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", Field::kEngineActive, 1, 1000},
    {"DCGM_FI_DEV_FB_USED", Field::kFbUsed, 16 * 1024 * 1024, 1},
    {"DCGM_FI_DEV_FB_FREE", Field::kFbFree, 16 * 1024 * 1024, 1},
    {"DCGM_FI_DEV_POWER_USAGE", Field::kPower, 100'000, 1000},
};

const FieldSpec* FieldOf(absl::string_view metric) {
  for (const FieldSpec& f : kFields) {
    if (metric == f.metric) return &f;
  }
  return nullptr;
}

void Set(DeviceReading& d, Field field, int64_t v) {
  switch (field) {
    case Field::kUtil:
      d.util_milli = static_cast<int32_t>(v);
      break;
    case Field::kEngineActive:
      d.engine_active_milli = static_cast<int32_t>(v);
      break;
    case Field::kFbUsed:
      d.fb_used_mib = v;
      break;
    case Field::kFbFree:
      d.fb_free_mib = v;
      break;
    case Field::kPower:
      d.power_mw = v;
      break;
  }
}

}  // namespace

std::vector<std::string> DcgmFieldNames() {
  std::vector<std::string> names;
  for (const FieldSpec& f : kFields) names.emplace_back(f.metric);
  return names;
}

absl::Status SetDcgmField(absl::string_view metric, double value, DeviceReading& device) {
  const FieldSpec* field = FieldOf(metric);
  if (field == nullptr) return absl::NotFoundError(absl::StrCat(metric, ": not a field read"));
  if (std::isnan(value)) return absl::OutOfRangeError(absl::StrCat(metric, ": no value (NaN)"));
  if (IsDcgmBlank(value)) {
    return absl::OutOfRangeError(absl::StrCat(metric, ": no value (DCGM blank)"));
  }
  if (value < 0 || value > field->max) {
    return absl::OutOfRangeError(
        absl::StrCat(metric, ": ", value, " is out of [0, ", field->max, "]"));
  }
  Set(device, field->field, std::llround(value * field->scale));
  return absl::OkStatus();
}

absl::string_view MetricLine::label(absl::string_view key) const {
  for (const auto& [k, v] : labels) {
    if (k == key) return v;
  }
  return "";
}

bool ParseMetricLine(absl::string_view line, MetricLine* out, std::string* error) {
  absl::string_view s = absl::StripAsciiWhitespace(line);
  *out = MetricLine();
  if (!ConsumeName(s, false, &out->name)) {
    *error = "expected a metric name";
    return false;
  }
  SkipSpaces(s);
  if (absl::ConsumePrefix(&s, "{")) {
    while (true) {
      SkipSpaces(s);
      if (absl::ConsumePrefix(&s, "}")) break;
      std::string key, value;
      if (!ConsumeName(s, true, &key)) {
        *error = "expected a label name";
        return false;
      }
      SkipSpaces(s);
      if (!absl::ConsumePrefix(&s, "=")) {
        *error = absl::StrCat("expected '=' after label ", key);
        return false;
      }
      SkipSpaces(s);
      if (!ConsumeQuoted(s, &value)) {
        *error = absl::StrCat("expected a quoted value for label ", key);
        return false;
      }
      out->labels.emplace_back(std::move(key), std::move(value));
      SkipSpaces(s);
      if (absl::ConsumePrefix(&s, ",")) continue;
      if (absl::ConsumePrefix(&s, "}")) break;
      *error = "expected ',' or '}' after a label";
      return false;
    }
  }
  SkipSpaces(s);
  std::vector<absl::string_view> rest =
      absl::StrSplit(s, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (rest.empty() || rest.size() > 2) {
    *error = "expected a value and an optional timestamp";
    return false;
  }
  if (!ParseSampleValue(rest[0], &out->value)) {
    *error = absl::StrCat("bad value '", rest[0], "'");
    return false;
  }
  if (rest.size() == 2 && !absl::SimpleAtoi(rest[1], &out->timestamp_ms)) {
    *error = absl::StrCat("bad timestamp '", rest[1], "'");
    return false;
  }
  return true;
}

Scrape ParseDcgmScrape(absl::string_view text) {
  Scrape scrape;
  using Key = std::tuple<std::string, int32_t, int32_t>;
  std::map<Key, size_t> index;
  int32_t number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    MetricLine m;
    std::string error;
    if (!ParseMetricLine(line, &m, &error)) {
      scrape.problems.push_back({number, error});
      continue;
    }
    ++scrape.sample_lines;
    const FieldSpec* field = FieldOf(m.name);
    absl::string_view gpu_label = m.label("gpu");
    if (gpu_label.empty()) continue;
    int32_t gpu = -1;
    if (!absl::SimpleAtoi(gpu_label, &gpu) || gpu < 0) {
      scrape.problems.push_back({number, absl::StrCat("bad gpu label '", gpu_label, "'")});
      continue;
    }
    int32_t instance = -1;
    if (absl::string_view gi = m.label("GPU_I_ID"); !gi.empty()) {
      if (!absl::SimpleAtoi(gi, &instance) || instance < 0) {
        scrape.problems.push_back({number, absl::StrCat("bad GPU_I_ID label '", gi, "'")});
        continue;
      }
    }
    Key key{std::string(m.label("UUID")), gpu, instance};
    auto [it, added] = index.try_emplace(key, scrape.devices.size());
    if (added) {
      DeviceReading d;
      d.uuid = std::get<0>(key);
      d.gpu_index = gpu;
      d.mig_instance = instance;
      d.mig_profile = std::string(m.label("GPU_I_PROFILE"));
      absl::string_view host = m.label("Hostname");
      d.hostname = std::string(host.empty() ? m.label("hostname") : host);
      d.model_name = std::string(m.label("modelName"));
      scrape.devices.push_back(std::move(d));
    }
    DeviceReading& d = scrape.devices[it->second];
    // Pod labels appear on some metrics of a device only (older exporters).
    if (d.pod.empty()) d.pod = std::string(m.label("pod"));
    if (d.pod_namespace.empty()) d.pod_namespace = std::string(m.label("namespace"));
    if (field == nullptr) continue;
    if (absl::Status set = SetDcgmField(m.name, m.value, d); !set.ok()) {
      scrape.problems.push_back({number, std::string(set.message())});
    }
  }
  return scrape;
}

}  // namespace arbiter::agent
