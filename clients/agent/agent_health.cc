#include "clients/agent/agent_health.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include <httplib.h>

namespace arbiter::agent {
namespace {

constexpr AgentSource kAllSources[kAgentSourceCount] = {
    AgentSource::kPrometheus, AgentSource::kDcgm, AgentSource::kNvml, AgentSource::kNvidiaSmi,
    AgentSource::kFile};

// A duration for people, to the second: "35s", "2m5s", "0s".
std::string Ago(absl::Duration d) {
  const absl::Duration whole = absl::Trunc(std::max(d, absl::ZeroDuration()), absl::Seconds(1));
  return whole == absl::ZeroDuration() ? "0s" : absl::FormatDuration(whole);
}

// `text` on one line: a status message may carry a reply's line breaks.
std::string OneLine(absl::string_view text) {
  std::string out(text);
  std::replace_if(
      out.begin(), out.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return out;
}

void Family(std::string& out, absl::string_view name, absl::string_view type,
            absl::string_view help) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

std::string Label(AgentSource source) {
  return absl::StrCat("{source=\"", AgentSourceName(source), "\"}");
}

constexpr int64_t kIoTimeoutSeconds = 5;
constexpr size_t kThreads = 2;

}  // namespace

absl::string_view AgentSourceName(AgentSource source) {
  switch (source) {
    case AgentSource::kPrometheus:
      return "prometheus";
    case AgentSource::kDcgm:
      return "dcgm";
    case AgentSource::kNvml:
      return "nvml";
    case AgentSource::kNvidiaSmi:
      return "nvidia-smi";
    case AgentSource::kFile:
      return "file";
  }
  return "unknown";
}

void AgentHealth::Watch(AgentSource source, absl::Duration interval, absl::Time now) {
  absl::MutexLock lock(&mu_);
  SourceState& s = sources_[static_cast<size_t>(source)];
  if (!s.watched) {
    s.watched = true;
    s.watched_since = now;
  }
  s.interval = interval;
}

void AgentHealth::RecordRead(AgentSource source, const absl::Status& status, absl::Duration took,
                             absl::Time now) {
  absl::MutexLock lock(&mu_);
  SourceState& s = sources_[static_cast<size_t>(source)];
  if (!s.watched) {
    s.watched = true;
    s.watched_since = now;
  }
  ++s.reads;
  s.last_took = took;
  s.max_took = std::max(s.max_took, took);
  s.last_ok = status.ok();
  if (status.ok()) {
    s.last_success = now;
  } else {
    ++s.failures[status.code()];
    s.last_failure = status;
  }
}

void AgentHealth::RecordSent(int64_t samples) {
  absl::MutexLock lock(&mu_);
  samples_sent_ += samples;
}

void AgentHealth::RecordSendFailure() {
  absl::MutexLock lock(&mu_);
  ++send_failures_;
}

std::string AgentHealth::RenderMetrics() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<AgentSource, const SourceState*>> watched;
  for (AgentSource source : kAllSources) {
    const SourceState& s = sources_[static_cast<size_t>(source)];
    if (s.watched) {
      watched.emplace_back(source, &s);
    }
  }
  std::string out;
  Family(out, "arbiter_agent_source_up", "gauge",
         "Whether the last read of the source succeeded (1) or not (0; also before the first).");
  for (const auto& [source, s] : watched) {
    absl::StrAppend(&out, "arbiter_agent_source_up", Label(source), " ", s->last_ok ? 1 : 0, "\n");
  }
  Family(out, "arbiter_agent_source_reads_total", "counter",
         "Reads of the source (scrapes, queries), successful or not.");
  for (const auto& [source, s] : watched) {
    absl::StrAppend(&out, "arbiter_agent_source_reads_total", Label(source), " ", s->reads, "\n");
  }
  Family(out, "arbiter_agent_source_read_failures_total", "counter",
         "Reads of the source that failed, by status code (UNAVAILABLE: down or refused; "
         "DEADLINE_EXCEEDED: too slow).");
  for (const auto& [source, s] : watched) {
    for (const auto& [code, n] : s->failures) {
      absl::StrAppend(&out, "arbiter_agent_source_read_failures_total{source=\"",
                      AgentSourceName(source), "\",code=\"", absl::StatusCodeToString(code), "\"} ",
                      n, "\n");
    }
  }
  Family(out, "arbiter_agent_source_last_success_timestamp_seconds", "gauge",
         "When a read of the source last succeeded, in seconds since the epoch (0: never).");
  for (const auto& [source, s] : watched) {
    absl::StrAppend(
        &out, "arbiter_agent_source_last_success_timestamp_seconds", Label(source), " ",
        s->last_success == absl::InfinitePast()
            ? std::string("0")
            : absl::StrFormat("%.3f", absl::ToDoubleSeconds(s->last_success - absl::UnixEpoch())),
        "\n");
  }
  Family(out, "arbiter_agent_source_read_seconds", "gauge",
         "How long the last read of the source took, failed or not.");
  for (const auto& [source, s] : watched) {
    absl::StrAppend(&out, "arbiter_agent_source_read_seconds", Label(source), " ",
                    absl::StrFormat("%.6f", absl::ToDoubleSeconds(s->last_took)), "\n");
  }
  Family(out, "arbiter_agent_source_read_seconds_max", "gauge",
         "How long the longest read of the source took since the agent started.");
  for (const auto& [source, s] : watched) {
    absl::StrAppend(&out, "arbiter_agent_source_read_seconds_max", Label(source), " ",
                    absl::StrFormat("%.6f", absl::ToDoubleSeconds(s->max_took)), "\n");
  }
  Family(out, "arbiter_agent_samples_sent_total", "counter",
         "Samples arbiterd took from this agent.");
  absl::StrAppend(&out, "arbiter_agent_samples_sent_total ", samples_sent_, "\n");
  Family(out, "arbiter_agent_send_failures_total", "counter",
         "Sends to arbiterd that failed (their samples are kept and sent with the next).");
  absl::StrAppend(&out, "arbiter_agent_send_failures_total ", send_failures_, "\n");
  return out;
}

std::string AgentHealth::Problem(const SourceState& s, absl::Time now) {
  const absl::Duration late = s.interval * kStaleIntervals;
  if (s.reads == 0) {
    if (now - s.watched_since <= late) {
      return "starting";
    }
    return absl::StrCat("no read since start, ", Ago(now - s.watched_since), " ago");
  }
  if (!s.last_ok) {
    const std::string since =
        s.last_success == absl::InfinitePast()
            ? absl::StrCat("no reading since start, ", Ago(now - s.watched_since), " ago")
            : absl::StrCat("no reading for ", Ago(now - s.last_success));
    return absl::StrCat(absl::StatusCodeToString(s.last_failure.code()), ": ",
                        OneLine(s.last_failure.message()), " (", since, ")");
  }
  if (now - s.last_success > late) {
    return absl::StrCat("no reading for ", Ago(now - s.last_success), " (more than ",
                        kStaleIntervals, " intervals of ", absl::FormatDuration(s.interval), ")");
  }
  return "";
}

HealthzReply AgentHealth::Healthz(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> problems;
  bool starting = true;  // While no source is watched, or one has not been read yet.
  bool any_watched = false;
  for (AgentSource source : kAllSources) {
    const SourceState& s = sources_[static_cast<size_t>(source)];
    if (!s.watched) {
      continue;
    }
    if (!any_watched) {
      any_watched = true;
      starting = false;
    }
    const std::string problem = Problem(s, now);
    if (problem == "starting") {
      starting = true;
    } else if (!problem.empty()) {
      problems.push_back(absl::StrCat(AgentSourceName(source), ": ", problem));
    }
  }
  if (!problems.empty()) {
    return {503, absl::StrCat(absl::StrJoin(problems, "; "), "\n")};
  }
  if (starting) {
    return {503, "starting\n"};
  }
  return {200, "ok\n"};
}

AgentHealthServer::AgentHealthServer() = default;

absl::StatusOr<std::unique_ptr<AgentHealthServer>> AgentHealthServer::Start(
    const std::string& listen_address, const AgentHealth& health, std::function<absl::Time()> now) {
  absl::StatusOr<net::ListenAddress> address =
      net::ParseListenAddress(listen_address, "metrics-listen");
  if (!address.ok()) return address.status();
  auto server = std::unique_ptr<AgentHealthServer>(new AgentHealthServer());
  server->server_ = std::make_unique<httplib::Server>();
  httplib::Server& http = *server->server_;
  http.set_read_timeout(kIoTimeoutSeconds);
  http.set_write_timeout(kIoTimeoutSeconds);
  http.set_keep_alive_timeout(kIoTimeoutSeconds);
  http.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  http.Get("/metrics", [&health](const httplib::Request&, httplib::Response& res) {
    res.set_content(health.RenderMetrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/healthz",
           [&health, now = std::move(now)](const httplib::Request&, httplib::Response& res) {
             const HealthzReply reply = health.Healthz(now());
             res.status = reply.status;
             res.set_content(reply.body, "text/plain; charset=utf-8");
           });
  // Every other path and method: 404, before the library reads any body.
  http.set_pre_routing_handler(
      [](const httplib::Request& req, httplib::Response& res) -> httplib::Server::HandlerResponse {
        if ((req.method == "GET" || req.method == "HEAD") &&
            (req.path == "/metrics" || req.path == "/healthz")) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        res.status = 404;
        res.set_content("not found: GET /metrics or /healthz\n", "text/plain; charset=utf-8");
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      });
  absl::StatusOr<std::unique_ptr<net::HttpListener>> listener =
      net::HttpListener::Start(http, *address, "metrics-listen");
  if (!listener.ok()) return listener.status();
  server->listener_ = *std::move(listener);
  return server;
}

AgentHealthServer::~AgentHealthServer() = default;

}  // namespace arbiter::agent
