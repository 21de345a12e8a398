// arbiter-agent: runs beside a GPU node, scrapes its dcgm-exporter (or reads
// a capture file), and streams the readings to arbiterd's
// TelemetryService.StreamSamples with the agent role.
//
// Every --interval it scrapes once; every --flush-every scrapes it sends what
// it holds as one batch. Every --heartbeat-every it sends the node's
// heartbeat (InventoryService.NodeHeartbeat): a node whose heartbeats stop
// turns unreachable and takes no new placements (docs/nodes.md). A batch that cannot be sent is
// kept and sent with the next (up to --max-pending samples; the oldest are dropped beyond). Arbiter
// ignores samples it already has, so a resend is safe.
#include <csignal>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include <CLI/CLI.hpp>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "arbiter/v1/inventory.grpc.pb.h"
#include "arbiter/v1/telemetry.grpc.pb.h"
#include "clients/agent/dcgm_text.h"
#include "clients/agent/http_get.h"
#include "clients/agent/sample.h"

namespace {

namespace v1 = ::arbiter::v1;
using arbiter::agent::DeviceReading;
using arbiter::agent::ToSample;

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

struct Options {
  std::string endpoint = "127.0.0.1:50051";
  std::string ca_file, cert_file, key_file;
  std::string cluster, node;
  std::string dcgm_url;
  std::string file;
  std::string interval = "10s";
  std::string heartbeat_every = "10s";
  int flush_every = 6;
  size_t max_pending = 200'000;
  bool once = false;
};

std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream in(path);
  *ok = in.good();
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

google::protobuf::Timestamp Now() {
  google::protobuf::Timestamp t;
  const int64_t micros = absl::ToUnixMicros(absl::Now());
  t.set_seconds(micros / 1'000'000);
  t.set_nanos(static_cast<int32_t>(micros % 1'000'000) * 1000);
  return t;
}

// One scrape: the exporter's text, or the capture file's.
bool Scrape(const Options& o, absl::Duration timeout, std::string* text) {
  if (!o.file.empty()) {
    bool ok = false;
    *text = ReadFile(o.file, &ok);
    if (!ok) std::cerr << "arbiter-agent: cannot read " << o.file << "\n";
    return ok;
  }
  absl::StatusOr<std::string> body = arbiter::agent::HttpGet(o.dcgm_url, timeout);
  if (!body.ok()) {
    std::cerr << "arbiter-agent: scrape " << o.dcgm_url << ": " << body.status().message() << "\n";
    return false;
  }
  *text = std::move(*body);
  return true;
}

// Sends `pending` as one batch. Returns true when Arbiter took it.
bool Send(v1::TelemetryService::Stub& stub, const Options& o, int interval_seconds,
          std::vector<v1::DeviceSample>& pending) {
  constexpr int kMaxPerBatch = 10'000;
  if (pending.empty()) return true;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::StreamSamplesResponse resp;
  auto writer = stub.StreamSamples(&ctx, &resp);
  for (size_t start = 0; start < pending.size(); start += kMaxPerBatch) {
    v1::SampleBatch batch;
    batch.set_cluster(o.cluster);
    batch.set_node(o.node);
    batch.set_interval_seconds(interval_seconds);
    const size_t end = std::min(pending.size(), start + kMaxPerBatch);
    for (size_t i = start; i < end; ++i) *batch.add_samples() = pending[i];
    *batch.mutable_sent_at() = Now();
    if (!writer->Write(batch)) break;
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) {
    std::cerr << "arbiter-agent: send: " << status.error_message() << "\n";
    // A refused batch would be refused again: drop it. Keep it otherwise.
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      pending.clear();
    }
    return false;
  }
  std::cout << "sent " << pending.size() << " samples: stored " << resp.stored() << ", duplicates "
            << resp.duplicates() << ", unknown GPUs " << resp.unknown_gpu() << ", too old "
            << resp.too_old() << ", in the future " << resp.in_future() << ", clock skew "
            << resp.max_skew_ms() << " ms\n";
  for (const std::string& gpu : resp.unknown_gpus()) {
    std::cout << "  unknown GPU " << gpu << " (register it with its UUID)\n";
  }
  pending.clear();
  return true;
}

// Sends the node's heartbeat. Returns true when Arbiter took it.
bool Heartbeat(v1::InventoryService::Stub& stub, const Options& o) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::NodeHeartbeatRequest req;
  req.set_cluster(o.cluster);
  req.set_name(o.node);
  v1::NodeHeartbeatResponse resp;
  grpc::Status status = stub.NodeHeartbeat(&ctx, req, &resp);
  if (!status.ok()) {
    std::cerr << "arbiter-agent: heartbeat: " << status.error_message() << "\n";
    return false;
  }
  std::cout << "heartbeat: node " << o.cluster << "/" << o.node << " is "
            << absl::AsciiStrToLower(v1::NodeState_Name(resp.node().state()).substr(11)) << "\n";
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "arbiter-agent: stream GPU telemetry from dcgm-exporter to arbiterd\n\n"
      "Examples:\n"
      "  arbiter-agent --endpoint arbiter:50051 --tls-ca ca.pem --tls-cert agent.pem \\\n"
      "      --tls-key agent.key --cluster east --node gpu-17 \\\n"
      "      --dcgm-url http://127.0.0.1:9400/metrics\n"
      "  arbiter-agent --endpoint 127.0.0.1:50051 --cluster east --node gpu-17 \\\n"
      "      --file capture.prom --once"};
  app.add_option("--endpoint", o.endpoint, "arbiterd host:port")->capture_default_str();
  app.add_option("--tls-ca", o.ca_file, "CA that signed arbiterd's certificate (PEM)");
  app.add_option("--tls-cert", o.cert_file, "this agent's certificate (PEM), with the agent role");
  app.add_option("--tls-key", o.key_file, "this agent's private key (PEM)");
  app.add_option("--cluster", o.cluster, "the node's cluster, as registered");
  app.add_option("--node", o.node, "the node's name, as registered");
  auto* url = app.add_option("--dcgm-url", o.dcgm_url, "dcgm-exporter metrics URL");
  auto* file = app.add_option("--file", o.file, "read this capture instead of scraping");
  url->excludes(file);
  app.add_option("--interval", o.interval, "scrape interval, e.g. 10s")->capture_default_str();
  app.add_option("--flush-every", o.flush_every, "scrapes per batch sent")->capture_default_str();
  app.add_option("--heartbeat-every", o.heartbeat_every,
                 "node heartbeat interval, e.g. 10s (below arbiterd's --node-heartbeat-timeout); "
                 "0s: none")
      ->capture_default_str();
  app.add_flag("--once", o.once, "scrape once, send, and exit");
  CLI11_PARSE(app, argc, argv);
  if (o.dcgm_url.empty() && o.file.empty()) {
    std::cerr << "arbiter-agent: pass --dcgm-url or --file\n";
    return 2;
  }
  absl::Duration interval;
  if (!absl::ParseDuration(o.interval, &interval) || interval < absl::Seconds(1) ||
      interval > absl::Hours(1)) {
    std::cerr << "arbiter-agent: --interval must be a duration in 1s..1h, got " << o.interval
              << "\n";
    return 2;
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!o.ca_file.empty() || !o.cert_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    bool ok_ca = false, ok_cert = false, ok_key = false;
    ssl.pem_root_certs = ReadFile(o.ca_file, &ok_ca);
    ssl.pem_cert_chain = ReadFile(o.cert_file, &ok_cert);
    ssl.pem_private_key = ReadFile(o.key_file, &ok_key);
    if (!ok_ca || !ok_cert || !ok_key) {
      std::cerr << "arbiter-agent: --tls-ca, --tls-cert and --tls-key must all be readable\n";
      return 2;
    }
    creds = grpc::SslCredentials(ssl);
  }
  absl::Duration heartbeat_every;
  if (!absl::ParseDuration(o.heartbeat_every, &heartbeat_every) ||
      heartbeat_every < absl::ZeroDuration() || heartbeat_every > absl::Hours(1)) {
    std::cerr << "arbiter-agent: --heartbeat-every must be a duration in 0s..1h, got "
              << o.heartbeat_every << "\n";
    return 2;
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(o.endpoint, creds);
  auto stub = v1::TelemetryService::NewStub(channel);
  auto inventory = v1::InventoryService::NewStub(channel);
  absl::Time last_heartbeat = absl::InfinitePast();
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  const int interval_seconds = static_cast<int>(absl::ToInt64Seconds(interval));
  std::vector<v1::DeviceSample> pending;
  int scrapes = 0;
  bool last_ok = true;
  while (!g_stop) {
    const absl::Time started = absl::Now();
    if (heartbeat_every > absl::ZeroDuration() && started - last_heartbeat >= heartbeat_every &&
        Heartbeat(*inventory, o)) {
      last_heartbeat = started;
    }
    std::string text;
    const bool scraped = Scrape(o, interval, &text);
    if (o.once && !scraped) return 1;
    if (scraped) {
      arbiter::agent::Scrape parsed = arbiter::agent::ParseDcgmScrape(text);
      for (const auto& p : parsed.problems) {
        std::cerr << "arbiter-agent: line " << p.line << ": " << p.message << "\n";
      }
      const google::protobuf::Timestamp at = Now();
      for (const DeviceReading& d : parsed.devices) pending.push_back(ToSample(d, at));
      if (pending.size() > o.max_pending) {
        pending.erase(pending.begin(), pending.begin() + (pending.size() - o.max_pending));
      }
    }
    if (o.once || ++scrapes % o.flush_every == 0)
      last_ok = Send(*stub, o, interval_seconds, pending);
    if (o.once) return last_ok ? 0 : 1;
    while (!g_stop && absl::Now() < started + interval) absl::SleepFor(absl::Milliseconds(100));
  }
  if (!pending.empty()) last_ok = Send(*stub, o, interval_seconds, pending);
  return last_ok ? 0 : 1;
}
