// The agent's own health: what each telemetry source's reads did (successes,
// failures by status code, how long they took, when one last succeeded) and
// what the sends to arbiterd did, rendered as Prometheus metrics
// (`GET /metrics`, text exposition format 0.0.4) and as a health check
// (`GET /healthz`), so that a Prometheus, dcgm-exporter or NVML that is down
// or slow shows outside the agent's stderr (docs/telemetry-sources.md, "When
// Prometheus is down, slow or refuses").
//
// `AgentHealth` holds the counters and renders them, without I/O and without
// reading a clock (callers pass `now`); `AgentHealthServer` serves them over
// plain HTTP (cpp-httplib). No gRPC: arbiter-agent records its sends here.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "net/http_listener.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace arbiter::agent {

// Where the agent reads from. The names (`AgentSourceName`) are the values of
// the `source` label.
enum class AgentSource {
  kPrometheus,  // "prometheus": a Prometheus server's API (--prometheus).
  kDcgm,        // "dcgm": a scrape of dcgm-exporter (--dcgm-url).
  kNvml,        // "nvml": NVML (--nvml).
  kNvidiaSmi,   // "nvidia-smi": `nvidia-smi -q -x` for the registration (--register).
  kFile,        // "file": a capture file (--file).
};
inline constexpr int kAgentSourceCount = 5;

// "prometheus", "dcgm", "nvml", "nvidia-smi" or "file".
absl::string_view AgentSourceName(AgentSource source);

// What `GET /healthz` answers.
struct HealthzReply {
  int status = 503;  // 200 or 503.
  std::string body;  // "ok\n", "starting\n", or one line saying what is wrong.
};

// The counters of one agent.
//
// Thread-safe: the main loop records while the HTTP server's threads render.
class AgentHealth {
 public:
  // A source is stale, and /healthz fails, when its last successful read is
  // more than this many of its intervals old.
  static constexpr int kStaleIntervals = 3;

  AgentHealth() = default;
  AgentHealth(const AgentHealth&) = delete;
  AgentHealth& operator=(const AgentHealth&) = delete;

  // Starts tracking `source`, which the agent reads about every `interval`
  // from `now` on: its series appear in `RenderMetrics` (down until its
  // first successful read), and it counts in `Healthz`. Watching a source
  // again changes its interval and keeps its counters.
  // REQUIRES: `interval` > 0.
  void Watch(AgentSource source, absl::Duration interval, absl::Time now);

  // Records one read of `source` (a scrape, a query, an NVML pass) that
  // ended at `now` after `took`: a success when `status` is OK, otherwise a
  // failure counted under `status`'s code, whose code and message
  // `Healthz` reports until the next success. A source not watched is
  // watched from `now`, and then never goes stale.
  void RecordRead(AgentSource source, const absl::Status& status, absl::Duration took,
                  absl::Time now);

  // Records one send to arbiterd that delivered `samples` samples, or one
  // that failed (arbiterd unreachable, refused, past its deadline).
  void RecordSent(int64_t samples);
  void RecordSendFailure();

  // Every series, with HELP and TYPE lines, in the text exposition format
  // 0.0.4 (docs/telemetry-sources.md lists them):
  //   arbiter_agent_source_up{source}  1 when the last read succeeded
  //   arbiter_agent_source_reads_total{source}
  //   arbiter_agent_source_read_failures_total{source,code}
  //   arbiter_agent_source_last_success_timestamp_seconds{source}  0 before one
  //   arbiter_agent_source_read_seconds{source}      the last read's duration
  //   arbiter_agent_source_read_seconds_max{source}  the longest since start
  //   arbiter_agent_samples_sent_total, arbiter_agent_send_failures_total
  // Only watched sources have `source` series.
  std::string RenderMetrics() const;

  // The health at `now`: 200 "ok\n" when every watched source's last read
  // succeeded and its last success is at most `kStaleIntervals` of its
  // intervals old. Otherwise 503 with one line naming each source at fault,
  // "; "-separated, e.g. "prometheus: UNAVAILABLE: query ...: Failed to
  // connect ... (no reading for 35s)"; or, when none is at fault, 503
  // "starting\n" while no source is watched or one has not been read yet
  // (one still unread after `kStaleIntervals` intervals is at fault). Sends to
  // arbiterd do not count: they are in the metrics.
  HealthzReply Healthz(absl::Time now) const;

 private:
  struct SourceState {
    bool watched = false;
    absl::Duration interval = absl::InfiniteDuration();
    absl::Time watched_since = absl::InfinitePast();
    int64_t reads = 0;
    std::map<absl::StatusCode, int64_t> failures;  // By code, in code order.
    bool last_ok = false;
    absl::Status last_failure;  // OK until the first failure.
    absl::Time last_success = absl::InfinitePast();
    absl::Duration last_took = absl::ZeroDuration();
    absl::Duration max_took = absl::ZeroDuration();
  };

  // What is wrong with `s` at `now`: "" when nothing, "starting" while it has
  // not been read and is not late, otherwise the reason, without the name.
  static std::string Problem(const SourceState& s, absl::Time now);

  mutable absl::Mutex mu_;
  std::array<SourceState, kAgentSourceCount> sources_ ABSL_GUARDED_BY(mu_);
  int64_t samples_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t send_failures_ ABSL_GUARDED_BY(mu_) = 0;
};

// Serves an `AgentHealth` over plain HTTP/1.1: `GET /metrics` (content type
// "text/plain; version=0.0.4"), `GET /healthz` (`AgentHealth::Healthz`, as
// text/plain), 404 for anything else. Two worker threads; a peer silent for
// 5 s mid-read or mid-write is dropped.
//
// Thread-safe.
class AgentHealthServer {
 public:
  // Listens on `listen_address` (host:port; an empty host is every
  // interface; port 0 picks a free one) and serves `health`, reading the
  // time for /healthz from `now`. INVALID_ARGUMENT when the address is not
  // host:port or does not resolve; UNAVAILABLE when it cannot be bound.
  // REQUIRES: `health` outlives the server; `now` is thread-safe.
  static absl::StatusOr<std::unique_ptr<AgentHealthServer>> Start(const std::string& listen_address,
                                                                  const AgentHealth& health,
                                                                  std::function<absl::Time()> now);

  // Stops accepting, closes the listening socket and joins the threads.
  ~AgentHealthServer();

  // The port listened on (the one picked, for port 0).
  int port() const { return listener_->port(); }

 private:
  AgentHealthServer();

  std::unique_ptr<httplib::Server> server_;
  // Declared after `server_`, so destroyed first: it stops the server.
  std::unique_ptr<net::HttpListener> listener_;
};

}  // namespace arbiter::agent
