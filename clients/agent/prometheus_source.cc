#include "clients/agent/prometheus_source.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include <nlohmann/json.hpp>

#include "clients/agent/http_get.h"

namespace arbiter::agent {
namespace {

using Json = nlohmann::json;

bool IsLabelName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(name.front())) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

// The string at `key` of the object `j`; "" when absent or not a string.
std::string StringAt(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The label `name` of a series' label set; "" when absent.
std::string LabelOf(const Json& metric, const std::string& name) {
  auto it = metric.find(name);
  return it != metric.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// name{label="value",...}, labels in name order: how problems name a series.
std::string Describe(const Json& metric) {
  std::vector<std::string> labels;
  for (const auto& [key, value] : metric.items()) {
    if (key == "__name__" || !value.is_string()) continue;
    labels.push_back(absl::StrCat(key, "=\"", value.get<std::string>(), "\""));
  }
  return absl::StrCat(LabelOf(metric, "__name__"), "{", absl::StrJoin(labels, ","), "}");
}

// Percent-encodes all but RFC 3986's unreserved characters.
std::string UrlEncode(absl::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

bool Readable(const std::string& path) { return std::ifstream(path).good(); }

// The contents of `path`, without trailing line ends. FAILED_PRECONDITION
// when it cannot be read or holds nothing.
absl::StatusOr<std::string> ReadSecret(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in.good()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read the ", what, " file ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string secret = text.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("the ", what, " file ", path, " is empty"));
  }
  return secret;
}

// Prometheus' own account of a refused query ("bad_data: parse error ..."),
// or the start of a body that is not the API's JSON; "" for none.
std::string ErrorDetail(absl::string_view body) {
  Json doc = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_discarded() && doc.is_object()) {
    const std::string type = StringAt(doc, "errorType");
    const std::string error = StringAt(doc, "error");
    if (!error.empty()) return type.empty() ? error : absl::StrCat(type, ": ", error);
  }
  absl::string_view first = body.substr(0, body.find('\n'));
  first = absl::StripAsciiWhitespace(first.substr(0, 200));
  return std::string(first);
}

// The status line, with the reason phrase HTTP/2 leaves out ("HTTP/2 400"
// reads "HTTP/2 400 Bad Request").
std::string StatusLine(const HttpReply& reply) {
  static constexpr std::pair<int32_t, const char*> kReasons[] = {{400, "Bad Request"},
                                                                 {401, "Unauthorized"},
                                                                 {403, "Forbidden"},
                                                                 {404, "Not Found"},
                                                                 {422, "Unprocessable Entity"},
                                                                 {429, "Too Many Requests"},
                                                                 {500, "Internal Server Error"},
                                                                 {502, "Bad Gateway"},
                                                                 {503, "Service Unavailable"},
                                                                 {504, "Gateway Timeout"}};
  const absl::string_view line = reply.status_line;
  if (!absl::EndsWith(line, absl::StrCat(" ", reply.code))) return reply.status_line;
  for (const auto& [code, reason] : kReasons) {
    if (code == reply.code) return absl::StrCat(line, " ", reason);
  }
  return reply.status_line;
}

}  // namespace

absl::Status SetLabelOverride(absl::string_view spec, PrometheusLabels& labels) {
  const size_t eq = spec.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("label override '", spec, "': expected FIELD=LABEL, e.g. uuid=gpu_uuid"));
  }
  const std::string field = absl::AsciiStrToLower(spec.substr(0, eq));
  const absl::string_view label = spec.substr(eq + 1);
  if (!IsLabelName(label)) {
    return absl::InvalidArgumentError(
        absl::StrCat("label override '", spec, "': '", label, "' is not a label name"));
  }
  std::string* target = nullptr;
  if (field == "uuid") {
    target = &labels.uuid;
  } else if (field == "gpu") {
    target = &labels.gpu;
  } else if (field == "gpu_i_id") {
    target = &labels.gpu_i_id;
  } else if (field == "gpu_i_profile") {
    target = &labels.gpu_i_profile;
  } else if (field == "hostname") {
    target = &labels.hostname;
  } else if (field == "pod") {
    target = &labels.pod;
  } else if (field == "namespace") {
    target = &labels.pod_namespace;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("label override '", spec, "': unknown field '", spec.substr(0, eq),
                     "' (uuid, gpu, GPU_I_ID, GPU_I_PROFILE, Hostname, pod, namespace)"));
  }
  *target = std::string(label);
  return absl::OkStatus();
}

absl::StatusOr<std::string> BuildDcgmQuery(absl::string_view selector) {
  absl::string_view s = absl::StripAsciiWhitespace(selector);
  if (absl::ConsumePrefix(&s, "{")) {
    if (!absl::ConsumeSuffix(&s, "}")) {
      return absl::InvalidArgumentError(absl::StrCat("selector '", selector, "': '{' not closed"));
    }
    s = absl::StripAsciiWhitespace(s);
  }
  // Outside quoted values a selector holds label names, operators and
  // commas only: no braces, and not the metric's name.
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote != 0) {
      if (c == '\\' && quote != '`') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '"' || c == '\'' || c == '`') {
      quote = c;
    } else if (c == '{' || c == '}') {
      return absl::InvalidArgumentError(
          absl::StrCat("selector '", selector, "': label matchers only, e.g. cluster=\"east\""));
    } else if (s.substr(i, 8) == "__name__") {
      return absl::InvalidArgumentError(
          absl::StrCat("selector '", selector, "': the series are chosen by the agent"));
    }
  }
  if (quote != 0) {
    return absl::InvalidArgumentError(absl::StrCat("selector '", selector, "': quote not closed"));
  }
  std::string query = absl::StrCat("{__name__=~\"", absl::StrJoin(DcgmFieldNames(), "|"), "\"");
  if (!s.empty()) absl::StrAppend(&query, ",", s);
  query.push_back('}');
  return query;
}

std::string InstantQueryUrl(absl::string_view base_url, absl::string_view query, absl::Time at) {
  absl::string_view base = base_url;
  while (absl::ConsumeSuffix(&base, "/")) {
  }
  const int64_t ms = absl::ToUnixMillis(at);
  return absl::StrCat(base, "/api/v1/query?query=", UrlEncode(query), "&time=", ms / 1000, ".",
                      absl::Dec(ms % 1000, absl::kZeroPad3));
}

absl::StatusOr<PrometheusReading> ParseQueryReply(absl::string_view body,
                                                  const PrometheusLabels& labels,
                                                  bool require_uuid) {
  const Json doc = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::FailedPreconditionError("the reply is not JSON (not the Prometheus API?)");
  }
  const std::string status = StringAt(doc, "status");
  if (status == "error") {
    return absl::FailedPreconditionError(
        absl::StrCat("Prometheus answered an error: ", StringAt(doc, "errorType"), ": ",
                     StringAt(doc, "error")));
  }
  if (status != "success") {
    return absl::FailedPreconditionError(absl::StrCat("the reply's status is '", status,
                                                      "', not success (not the Prometheus API?)"));
  }
  PrometheusReading out;
  if (auto w = doc.find("warnings"); w != doc.end() && w->is_array()) {
    for (const Json& warning : *w) {
      if (warning.is_string()) out.warnings.push_back(warning.get<std::string>());
    }
  }
  auto data = doc.find("data");
  if (data == doc.end() || !data->is_object()) {
    return absl::FailedPreconditionError("the reply has no data");
  }
  const std::string type = StringAt(*data, "resultType");
  auto result = data->find("result");
  if (type != "vector" || result == data->end() || !result->is_array()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the reply is not an instant vector (resultType '", type, "')"));
  }

  // In the order of their label sets (a JSON object's keys are sorted).
  std::vector<std::pair<std::string, const Json*>> series;
  for (const Json& item : *result) {
    auto metric = item.find("metric");
    auto value = item.find("value");
    if (!item.is_object() || metric == item.end() || !metric->is_object() || value == item.end() ||
        !value->is_array() || value->size() != 2 || !(*value)[1].is_string()) {
      return absl::FailedPreconditionError(
          absl::StrCat("a result is not a sample of an instant vector: ", item.dump()));
    }
    series.emplace_back(metric->dump(), &item);
  }
  std::sort(series.begin(), series.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });

  const std::vector<std::string> fields = DcgmFieldNames();
  using Key = std::tuple<std::string, int32_t, int32_t>;
  std::map<Key, DeviceReading> devices;
  std::set<std::pair<Key, std::string>> seen;
  auto skip_series = [&](const Json& metric, absl::string_view why) {
    ++out.skipped_series;
    out.problems.push_back(absl::StrCat(Describe(metric), ": ", why));
  };
  for (const auto& entry : series) {
    const Json& item = *entry.second;
    ++out.series;
    const Json& metric = item.at("metric");
    const std::string name = LabelOf(metric, "__name__");
    if (std::find(fields.begin(), fields.end(), name) == fields.end()) {
      skip_series(metric, "not a series the agent reads");
      continue;
    }
    const std::string gpu_label = LabelOf(metric, labels.gpu);
    int32_t gpu = -1;
    if (gpu_label.empty()) {
      skip_series(metric, absl::StrCat("no GPU index label '", labels.gpu, "'"));
      continue;
    }
    if (!absl::SimpleAtoi(gpu_label, &gpu) || gpu < 0) {
      skip_series(metric, absl::StrCat("bad ", labels.gpu, " label '", gpu_label, "'"));
      continue;
    }
    int32_t instance = -1;
    if (const std::string gi = LabelOf(metric, labels.gpu_i_id); !gi.empty()) {
      if (!absl::SimpleAtoi(gi, &instance) || instance < 0) {
        skip_series(metric, absl::StrCat("bad ", labels.gpu_i_id, " label '", gi, "'"));
        continue;
      }
    }
    const std::string uuid = LabelOf(metric, labels.uuid);
    if (uuid.empty() && require_uuid) {
      skip_series(metric, absl::StrCat("no UUID label '", labels.uuid,
                                       "': a fleet-wide agent matches GPUs by UUID"));
      continue;
    }
    Key key{uuid, gpu, instance};
    auto [it, added] = devices.try_emplace(key);
    DeviceReading& d = it->second;
    if (added) {
      d.uuid = uuid;
      d.gpu_index = gpu;
      d.mig_instance = instance;
    }
    // Labels a device's series share; pod labels sit on some of them only
    // with older exporters.
    auto fill = [&](std::string& field, const std::string& label) {
      if (field.empty()) field = LabelOf(metric, label);
    };
    fill(d.mig_profile, labels.gpu_i_profile);
    fill(d.hostname, labels.hostname);
    if (labels.hostname == PrometheusLabels().hostname) fill(d.hostname, "hostname");
    fill(d.model_name, labels.model_name);
    fill(d.pod, labels.pod);
    fill(d.pod_namespace, labels.pod_namespace);
    if (!seen.emplace(key, name).second) {
      ++out.duplicate_series;
      out.problems.push_back(
          absl::StrCat(Describe(metric), ": the device's ", name, " again (first kept)"));
      continue;
    }
    const std::string text = item.at("value").at(1).get<std::string>();
    double value = 0;
    if (!ParseSampleValue(text, &value)) {
      ++out.skipped_values;
      out.problems.push_back(absl::StrCat(Describe(metric), ": bad value '", text, "'"));
      continue;
    }
    if (absl::Status set = SetDcgmField(name, value, d); !set.ok()) {
      ++out.skipped_values;
      out.problems.push_back(absl::StrCat(Describe(metric), ": ", set.message()));
    }
  }
  out.devices.reserve(devices.size());
  for (auto& [key, d] : devices) out.devices.push_back(std::move(d));
  return out;
}

absl::StatusOr<PrometheusSource> PrometheusSource::Create(PrometheusOptions options) {
  absl::string_view url = options.url;
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://") && !absl::ConsumePrefix(&rest, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("Prometheus URL '", url, "': not an http:// or https:// URL"));
  }
  const absl::string_view authority = rest.substr(0, rest.find('/'));
  if (authority.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Prometheus URL '", url, "': no host"));
  }
  if (absl::StrContains(authority, "@")) {
    return absl::InvalidArgumentError(
        "Prometheus URL: credentials go in --prometheus-basic-user and "
        "--prometheus-password-file, not in the URL");
  }
  if (absl::StrContains(rest, "?") || absl::StrContains(rest, "#")) {
    return absl::InvalidArgumentError(
        absl::StrCat("Prometheus URL '", url, "': the server's base URL, without a query"));
  }
  while (absl::ConsumeSuffix(&url, "/")) {
  }
  options.url = std::string(url);
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("Prometheus query timeout: must be positive");
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "Prometheus client certificate: pass the certificate and its key together");
  }
  if (!options.bearer_token_file.empty() && !options.basic_user.empty()) {
    return absl::InvalidArgumentError("Prometheus auth: a bearer token or basic auth, not both");
  }
  if (options.basic_user.empty() != options.basic_password_file.empty()) {
    return absl::InvalidArgumentError(
        "Prometheus basic auth: pass the user and the password file together");
  }
  for (const std::string* file : {&options.ca_file, &options.cert_file, &options.key_file,
                                  &options.bearer_token_file, &options.basic_password_file}) {
    if (!file->empty() && !Readable(*file)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read ", *file));
    }
  }
  absl::StatusOr<std::string> query = BuildDcgmQuery(options.selector);
  if (!query.ok()) return query.status();
  return PrometheusSource(std::move(options), *std::move(query));
}

std::string PrometheusSource::endpoint() const {
  return absl::StrCat(options_.url, "/api/v1/query");
}

absl::StatusOr<PrometheusReading> PrometheusSource::Read(absl::Time at) const {
  const std::string where = absl::StrCat("query ", endpoint(), ": ");
  HttpOptions http;
  http.accept = "application/json";
  http.allow_https = true;
  http.ca_file = options_.ca_file;
  http.cert_file = options_.cert_file;
  http.key_file = options_.key_file;
  if (!options_.bearer_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadSecret(options_.bearer_token_file, "bearer token");
    if (!token.ok())
      return absl::FailedPreconditionError(where + std::string(token.status().message()));
    http.bearer_token = *std::move(token);
  }
  if (!options_.basic_user.empty()) {
    absl::StatusOr<std::string> password = ReadSecret(options_.basic_password_file, "password");
    if (!password.ok()) {
      return absl::FailedPreconditionError(where + std::string(password.status().message()));
    }
    http.basic_user = options_.basic_user;
    http.basic_password = *std::move(password);
  }
  const std::string url = InstantQueryUrl(options_.url, query_, at);
  absl::StatusOr<HttpReply> reply = HttpFetch(url, options_.timeout, http);
  if (!reply.ok()) {
    // HttpFetch names the whole URL; the endpoint reads better.
    absl::string_view why = reply.status().message();
    absl::ConsumePrefix(&why, absl::StrCat("GET ", url, ": "));
    if (absl::IsDeadlineExceeded(reply.status())) {
      return absl::DeadlineExceededError(absl::StrCat(
          where, "no reply within ", absl::FormatDuration(options_.timeout), " (", why, ")"));
    }
    return absl::Status(reply.status().code(), absl::StrCat(where, why));
  }
  if (reply->code != 200) {
    std::string message = absl::StrCat(where, StatusLine(*reply));
    if (const std::string detail = ErrorDetail(reply->body); !detail.empty()) {
      absl::StrAppend(&message, ": ", detail);
    }
    switch (reply->code) {
      case 400:
      case 422:
        return absl::InvalidArgumentError(absl::StrCat(message, " (PromQL: ", query_, ")"));
      case 401:
        return absl::UnauthenticatedError(message);
      case 403:
        return absl::PermissionDeniedError(message);
      case 502:
      case 503:
      case 504:
        return absl::UnavailableError(message);
      default:
        return absl::FailedPreconditionError(message);
    }
  }
  absl::StatusOr<PrometheusReading> reading =
      ParseQueryReply(reply->body, options_.labels, options_.require_uuid);
  if (!reading.ok()) {
    return absl::Status(reading.status().code(), absl::StrCat(where, reading.status().message()));
  }
  return reading;
}

}  // namespace arbiter::agent
