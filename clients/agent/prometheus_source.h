// Prometheus as a telemetry source: the DCGM series that dcgm-exporter
// exports and a Prometheus server scrapes, read back with one PromQL instant
// query (`/api/v1/query`) per interval, and mapped to the same readings a
// scrape of the exporter gives (clients/agent/dcgm_text.h: one per GPU and
// per MIG instance, keyed by UUID, `gpu` and GPU_I_ID, with the same unit
// conversions), so that arbiterd stores identical samples from either path.
//
// The query building and the mapping of the API's JSON are pure functions;
// `PrometheusSource` adds the HTTP exchange (libcurl, TLS and auth) and the
// reading of credential files. No gRPC: arbiter-agent sends the readings.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "clients/agent/dcgm_text.h"

namespace arbiter::agent {

// The label names the DCGM series carry in Prometheus. The defaults are
// dcgm-exporter's; a fleet that relabelled its series names its own.
struct PrometheusLabels {
  std::string uuid = "UUID";                    // The GPU's UUID (a MIG instance's parent's).
  std::string gpu = "gpu";                      // The GPU's index on its node.
  std::string gpu_i_id = "GPU_I_ID";            // The MIG instance's id.
  std::string gpu_i_profile = "GPU_I_PROFILE";  // The MIG instance's profile.
  // The node's host name. While it is the default, "hostname" (newer
  // exporters) is read where "Hostname" is absent.
  std::string hostname = "Hostname";
  std::string pod = "pod";  // Where a ServiceMonitor kept the target's own: "exported_pod".
  std::string pod_namespace = "namespace";
  std::string model_name = "modelName";
};

// Applies one override, "FIELD=LABEL": FIELD is one of uuid, gpu, GPU_I_ID,
// GPU_I_PROFILE, Hostname, pod, namespace (any case); LABEL a Prometheus
// label name ([a-zA-Z_][a-zA-Z0-9_]*). INVALID_ARGUMENT naming what is wrong.
absl::Status SetLabelOverride(absl::string_view spec, PrometheusLabels& labels);

// The PromQL instant query of the five series of `DcgmFieldNames()`,
// restricted by `selector`: label matchers, with or without their braces
// (e.g. `cluster="east",job="dcgm"`); "" for none. INVALID_ARGUMENT for a
// selector whose quotes or braces do not close, or that names the metric
// (`__name__`). Prometheus checks the rest and answers bad_data.
absl::StatusOr<std::string> BuildDcgmQuery(absl::string_view selector);

// The URL of `query` evaluated at `at` on the Prometheus API at `base_url`
// ("https://prometheus.example:9090", or with a path prefix; a trailing "/"
// is dropped): `base_url`/api/v1/query?query=...&time=<seconds.millis>.
std::string InstantQueryUrl(absl::string_view base_url, absl::string_view query, absl::Time at);

// What one instant query gave.
struct PrometheusReading {
  // One per GPU and MIG instance, ordered by (UUID, gpu, GPU_I_ID).
  std::vector<DeviceReading> devices;
  int64_t series = 0;            // Series in the reply.
  int64_t skipped_values = 0;    // NaN, DCGM blanks and out-of-range values, left out.
  int64_t skipped_series = 0;    // Series whose labels name no device (no gpu, no UUID, ...).
  int64_t duplicate_series = 0;  // A device's metric seen again (two jobs scrape it); first kept.
  // One line per value or series left out, in the order above.
  std::vector<std::string> problems;
  // The warnings Prometheus attached to its answer.
  std::vector<std::string> warnings;
};

// Maps the body of a successful `/api/v1/query` reply (resultType "vector")
// to readings. Series are read in the order of their label sets, so the
// result does not depend on the order Prometheus lists them in. When
// `require_uuid`, a series without a UUID is left out (a fleet-wide agent
// matches GPUs by UUID only). FAILED_PRECONDITION when the body is not the
// API's JSON, or its status is "error" (with Prometheus' errorType and
// error), or its result is not an instant vector.
absl::StatusOr<PrometheusReading> ParseQueryReply(absl::string_view body,
                                                  const PrometheusLabels& labels,
                                                  bool require_uuid);

struct PrometheusOptions {
  // The server's base URL, http:// or https://, without credentials.
  std::string url;
  // Label matchers that restrict the series (`BuildDcgmQuery`). Default: "".
  std::string selector;
  PrometheusLabels labels;
  // Longest a query may take, connecting included. Default: 10 s.
  absl::Duration timeout = absl::Seconds(10);
  // HTTPS: the CA (PEM) that verifies the server ("" for the system's), and
  // a client certificate and key (PEM), both or none.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // A file holding a bearer token, read at each query (tokens rotate).
  std::string bearer_token_file;
  // Basic authentication: the user, and a file holding the password (read
  // at each query). Not with a bearer token.
  std::string basic_user;
  std::string basic_password_file;
  // Leave out series without a UUID (`ParseQueryReply`). Default: true.
  bool require_uuid = true;
};

// A Prometheus server to read the DCGM series from.
//
// Thread-compatible.
class PrometheusSource {
 public:
  // INVALID_ARGUMENT for a URL that is not http(s)://host..., carries
  // credentials or a query, a bad selector, a certificate without its key,
  // both a bearer token and basic auth, a password file without a user, or
  // a file named that cannot be read.
  static absl::StatusOr<PrometheusSource> Create(PrometheusOptions options);

  // The readings at `at` (the query's evaluation time). Errors name the
  // endpoint (`endpoint()`) and what went wrong:
  //   UNAVAILABLE: Prometheus cannot be reached, the TLS handshake failed,
  //     or it answered 502/503/504 (with its status line and error);
  //   DEADLINE_EXCEEDED: no whole reply within the timeout;
  //   INVALID_ARGUMENT: it refused the query (400 bad_data, 422: its
  //     error, and the query);
  //   UNAUTHENTICATED / PERMISSION_DENIED: a 401 / 403;
  //   FAILED_PRECONDITION: another status, or a body that is not the API's
  //     (`ParseQueryReply`); a credential file that cannot be read.
  absl::StatusOr<PrometheusReading> Read(absl::Time at) const;

  // The endpoint queried: <url>/api/v1/query.
  std::string endpoint() const;
  const std::string& query() const { return query_; }

 private:
  PrometheusSource(PrometheusOptions options, std::string query)
      : options_(std::move(options)), query_(std::move(query)) {}

  PrometheusOptions options_;
  std::string query_;
};

}  // namespace arbiter::agent
