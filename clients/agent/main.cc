// arbiter-agent: runs beside a GPU node, scrapes its dcgm-exporter (or reads
// a capture file), and streams the readings to arbiterd's
// TelemetryService.StreamSamples with the agent role.
//
// With --register it registers its node from `nvidia-smi -q -x` (models,
// UUIDs; MIG instances and unhealthy GPUs reported, an unhealthy node
// cordoned) and keeps the registration current every --refresh-every
// (docs/nodes.md, "Agents").
//
// With --nvml it reads the GPUs through NVML (loaded at run time) instead of
// a dcgm-exporter. With --prometheus it reads the dcgm-exporter series from
// a Prometheus server's API (one PromQL instant query per interval), for the
// GPUs of a whole fleet when no --node is given: each sample carries its
// GPU's UUID (docs/telemetry-sources.md). A query that fails is reported,
// counted and tried again at the next interval.
//
// Every --interval it scrapes once; every --flush-every scrapes it sends
// what it holds as one batch. Every --heartbeat-every it sends the node's
// heartbeat (InventoryService.NodeHeartbeat; only with --node): a node whose
// heartbeats stop turns unreachable and takes no new placements
// (docs/nodes.md). A batch that cannot be sent is kept and sent with the
// next (up to --max-pending samples; the oldest are dropped beyond). Arbiter
// ignores samples it already has, so a resend is safe.
//
// With --metrics-listen it serves its own health over plain HTTP
// (clients/agent/agent_health.h): /metrics, each source's reads, failures by
// status code, last success and read time, and the samples sent; /healthz,
// 503 naming the source and its error while the last read failed or the last
// success is more than 3 intervals old.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include <CLI/CLI.hpp>
#include <unistd.h>

#include "arbiter/v1/inventory.grpc.pb.h"
#include "arbiter/v1/telemetry.grpc.pb.h"
#include "clients/agent/agent_health.h"
#include "clients/agent/dcgm_text.h"
#include "clients/agent/http_get.h"
#include "clients/agent/nvidia_smi.h"
#include "clients/agent/nvml.h"
#include "clients/agent/prometheus_source.h"
#include "clients/agent/registration.h"
#include "clients/agent/sample.h"
#include "clients/common/channel.h"
#include "core/mig.h"

namespace {

namespace v1 = ::arbiter::v1;
using arbiter::agent::AgentHealth;
using arbiter::agent::AgentSource;
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
  std::string nvml;  // The NVML library to read instead of scraping; "" for none.
  // A Prometheus server to query instead of scraping (--prometheus ...).
  std::string prometheus;
  std::string prometheus_selector;
  std::string prometheus_timeout = "10s";
  std::string prometheus_ca, prometheus_cert, prometheus_key;
  std::string prometheus_token_file;
  std::string prometheus_user, prometheus_password_file;
  std::vector<std::string> prometheus_labels;  // FIELD=LABEL overrides.
  std::string interval = "10s";
  std::string heartbeat_every = "10s";
  int flush_every = 6;
  size_t max_pending = 200'000;
  bool once = false;
  // Read once and print what would be sent; contact no arbiterd.
  bool dry_run = false;
  // Registration (--register).
  bool do_register = false;
  std::string nvidia_smi = "nvidia-smi";
  std::string nvidia_smi_xml;    // A recorded `nvidia-smi -q -x` instead.
  std::string nvidia_smi_lgipp;  // A recorded `nvidia-smi mig -lgipp` instead.
  std::string pool;
  std::string topology_domain;
  int64_t cpu_milli = 0;   // 0: the host's online CPUs.
  int64_t memory_mib = 0;  // 0: the host's MemTotal.
  std::string refresh_every = "5m";
  // host:port to serve /metrics and /healthz on; "" for none.
  std::string metrics_listen;
};

std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream in(path);
  *ok = in.good();
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

google::protobuf::Timestamp TimestampOf(absl::Time at) {
  google::protobuf::Timestamp t;
  const int64_t micros = absl::ToUnixMicros(at);
  t.set_seconds(micros / 1'000'000);
  t.set_nanos(static_cast<int32_t>(micros % 1'000'000) * 1000);
  return t;
}

google::protobuf::Timestamp Now() { return TimestampOf(absl::Now()); }

// What the Prometheus source has done since the agent started.
struct PrometheusCounts {
  int64_t queries = 0;
  int64_t failed = 0;          // Down, timed out, or answered an error.
  int64_t skipped_values = 0;  // NaN, DCGM blanks, out of range.
  int64_t skipped_series = 0;  // Series that name no device.
};

// One query at `at`: the readings, or the status of the query that failed
// (reported).
absl::Status QueryPrometheus(const arbiter::agent::PrometheusSource& source, absl::Time at,
                             PrometheusCounts& counts, std::vector<DeviceReading>* devices) {
  constexpr size_t kMaxProblemsShown = 20;
  ++counts.queries;
  absl::StatusOr<arbiter::agent::PrometheusReading> reading = source.Read(at);
  if (!reading.ok()) {
    ++counts.failed;
    std::cerr << "arbiter-agent: prometheus: " << absl::StatusCodeToString(reading.status().code())
              << ": " << reading.status().message() << " (" << counts.failed << " of "
              << counts.queries << " queries failed; retried next interval)\n";
    return reading.status();
  }
  for (const std::string& w : reading->warnings) {
    std::cerr << "arbiter-agent: prometheus: warning: " << w << "\n";
  }
  for (size_t i = 0; i < reading->problems.size() && i < kMaxProblemsShown; ++i) {
    std::cerr << "arbiter-agent: prometheus: " << reading->problems[i] << "\n";
  }
  if (reading->problems.size() > kMaxProblemsShown) {
    std::cerr << "arbiter-agent: prometheus: ... and "
              << reading->problems.size() - kMaxProblemsShown << " more\n";
  }
  counts.skipped_values += reading->skipped_values;
  counts.skipped_series += reading->skipped_series;
  int64_t instances = 0;
  for (const DeviceReading& d : reading->devices) instances += d.mig_instance >= 0 ? 1 : 0;
  std::cout << "prometheus: " << reading->series << " series, " << reading->devices.size()
            << " devices (" << reading->devices.size() - instances << " GPUs, " << instances
            << " MIG instances); skipped " << reading->skipped_values << " values, "
            << reading->skipped_series << " series, " << reading->duplicate_series
            << " duplicates (since start: " << counts.skipped_values << " values, "
            << counts.skipped_series << " series skipped, " << counts.failed << " of "
            << counts.queries << " queries failed)\n";
  if (reading->series == 0) {
    std::cerr << "arbiter-agent: prometheus: no series matched " << source.query() << " at "
              << source.endpoint() << "\n";
  }
  *devices = std::move(reading->devices);
  return absl::OkStatus();
}

// One scrape: the exporter's text, or the capture file's. NOT_FOUND for a
// file that cannot be read; `HttpGet`'s codes for a scrape (reported).
absl::Status Scrape(const Options& o, absl::Duration timeout, std::string* text) {
  if (!o.file.empty()) {
    bool ok = false;
    *text = ReadFile(o.file, &ok);
    if (!ok) {
      std::cerr << "arbiter-agent: cannot read " << o.file << "\n";
      return absl::NotFoundError(absl::StrCat("cannot read ", o.file));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> body = arbiter::agent::HttpGet(o.dcgm_url, timeout);
  if (!body.ok()) {
    std::cerr << "arbiter-agent: scrape " << o.dcgm_url << ": " << body.status().message() << "\n";
    return body.status();
  }
  *text = std::move(*body);
  return absl::OkStatus();
}

// Where the telemetry comes from, and the readers of the sources that need one.
struct TelemetrySource {
  AgentSource kind = AgentSource::kDcgm;
  const arbiter::agent::PrometheusSource* prometheus = nullptr;
  const arbiter::agent::Nvml* nvml = nullptr;
};

// One read of the telemetry source at `at` into `devices`: OK, or the
// status of the read that failed (reported). An NVML pass that reads no GPU
// and has problems is UNAVAILABLE with the first; one that reads some is OK
// (the rest reported).
absl::Status ReadDevices(const Options& o, const TelemetrySource& source, absl::Duration timeout,
                         absl::Time at, PrometheusCounts& counts,
                         std::vector<DeviceReading>* devices) {
  if (source.prometheus != nullptr) {
    return QueryPrometheus(*source.prometheus, at, counts, devices);
  }
  if (source.nvml != nullptr) {
    std::vector<std::string> problems;
    *devices = source.nvml->Read(&problems);
    for (const std::string& p : problems) std::cerr << "arbiter-agent: NVML: " << p << "\n";
    if (devices->empty() && !problems.empty()) {
      return absl::UnavailableError(absl::StrCat("NVML: ", problems.front()));
    }
    return absl::OkStatus();
  }
  std::string text;
  if (absl::Status scraped = Scrape(o, timeout, &text); !scraped.ok()) {
    return scraped;
  }
  arbiter::agent::Scrape parsed = arbiter::agent::ParseDcgmScrape(text);
  for (const auto& p : parsed.problems) {
    std::cerr << "arbiter-agent: line " << p.line << ": " << p.message << "\n";
  }
  *devices = std::move(parsed.devices);
  return absl::OkStatus();
}

// The time a read's samples carry: a Prometheus query's evaluation time, or
// now (just after the read) for the other sources.
google::protobuf::Timestamp ReadingTime(const TelemetrySource& source, absl::Time query_at) {
  return source.prometheus != nullptr ? TimestampOf(query_at) : Now();
}

// One SampleBatch of this node's `samples`, sent now.
v1::SampleBatch BatchOf(const Options& o, int interval_seconds,
                        absl::Span<const v1::DeviceSample> samples) {
  v1::SampleBatch batch;
  batch.set_cluster(o.cluster);
  batch.set_node(o.node);
  batch.set_interval_seconds(interval_seconds);
  for (const v1::DeviceSample& sample : samples) *batch.add_samples() = sample;
  *batch.mutable_sent_at() = Now();
  return batch;
}

// Sends `pending` as one batch, and records the send in `health`. Returns
// true when Arbiter took it.
bool Send(v1::TelemetryService::Stub& stub, const Options& o, int interval_seconds,
          std::vector<v1::DeviceSample>& pending, AgentHealth& health) {
  constexpr int kMaxPerBatch = 10'000;
  if (pending.empty()) return true;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::StreamSamplesResponse resp;
  auto writer = stub.StreamSamples(&ctx, &resp);
  for (size_t start = 0; start < pending.size(); start += kMaxPerBatch) {
    const size_t count = std::min(pending.size() - start, size_t{kMaxPerBatch});
    if (!writer->Write(
            BatchOf(o, interval_seconds, absl::MakeConstSpan(pending).subspan(start, count)))) {
      break;
    }
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) {
    health.RecordSendFailure();
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
  health.RecordSent(static_cast<int64_t>(pending.size()));
  pending.clear();
  return true;
}

// The output of `command`; false when it cannot run or exits non-zero.
bool RunCommand(const std::string& command, std::string* out) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return false;
  char buf[65536];
  size_t n = 0;
  out->clear();
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out->append(buf, n);
  return pclose(pipe) == 0;
}

// The host's CPUs in milli-cores and memory in MiB.
std::pair<int64_t, int64_t> HostCapacity() {
  const int64_t cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t mem_kib = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  while (meminfo >> key) {
    if (key == "MemTotal:") {
      meminfo >> mem_kib;
      break;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  return {cpus * 1000, mem_kib / 1024};
}

// Each catalog model's MIG table: profile -> (SMs, MiB).
arbiter::agent::CatalogMig Catalog(v1::InventoryService::Stub& stub) {
  arbiter::agent::CatalogMig out;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ListGpuModelsResponse resp;
  if (!stub.ListGpuModels(&ctx, v1::ListGpuModelsRequest(), &resp).ok()) return out;
  for (const v1::GpuModel& m : resp.gpu_models()) {
    for (const v1::MigProfile& p : m.mig_profiles()) {
      out.sizes[m.name()][p.name()] = {p.sm_count(), p.memory_mib()};
      out.ids[m.name()][p.profile_id()] = p.name();
    }
  }
  return out;
}

// The GPUs `nvidia-smi -q -x` (or its recording) describes. NOT_FOUND for a
// recording that cannot be read, UNAVAILABLE when nvidia-smi fails, and
// `ParseNvidiaSmi`'s codes.
absl::StatusOr<std::vector<arbiter::agent::GpuFacts>> ReadNvidiaSmi(const Options& o) {
  std::string xml;
  if (!o.nvidia_smi_xml.empty()) {
    bool ok = false;
    xml = ReadFile(o.nvidia_smi_xml, &ok);
    if (!ok) {
      return absl::NotFoundError(absl::StrCat("cannot read ", o.nvidia_smi_xml));
    }
  } else if (!RunCommand(o.nvidia_smi + " -q -x", &xml)) {
    return absl::UnavailableError(absl::StrCat("`", o.nvidia_smi, " -q -x` failed"));
  }
  return arbiter::agent::ParseNvidiaSmi(xml);
}

// The catalog's MIG tables as built into Arbiter (core/mig.h), for a dry
// run, which asks no arbiterd: a site's own catalog entries are not known.
arbiter::agent::CatalogMig BuiltinCatalog() {
  arbiter::agent::CatalogMig out;
  for (const char* model : {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"}) {
    const std::vector<arbiter::core::MigProfile>* profiles =
        arbiter::core::BuiltinMigProfiles(model);
    if (profiles == nullptr) continue;
    for (const arbiter::core::MigProfile& p : *profiles) {
      out.sizes[model][p.name] = {p.sm_count, p.memory_mib};
      out.ids[model][p.profile_id] = p.name;
    }
  }
  return out;
}

// The registration of this node from nvidia-smi (or its recordings), its
// MIG instances named from `catalog` (asked only once nvidia-smi is read); the read of nvidia-smi
// is recorded in `health`. nullopt, reported on stderr, when nvidia-smi cannot be read or a GPU
// maps to no catalog model.
std::optional<arbiter::agent::Registration> ReadRegistration(
    const Options& o, const std::function<arbiter::agent::CatalogMig()>& catalog,
    AgentHealth& health) {
  const absl::Time started = absl::Now();
  absl::StatusOr<std::vector<arbiter::agent::GpuFacts>> gpus = ReadNvidiaSmi(o);
  const absl::Time read = absl::Now();
  health.RecordRead(AgentSource::kNvidiaSmi, gpus.status(), read - started, read);
  if (!gpus.ok()) {
    std::cerr << "arbiter-agent: " << gpus.status().message() << "\n";
    return std::nullopt;
  }
  const auto [host_cpu, host_mem] = HostCapacity();
  arbiter::agent::NodeIdentity who{o.cluster,
                                   o.node,
                                   o.pool,
                                   o.topology_domain,
                                   o.cpu_milli > 0 ? o.cpu_milli : host_cpu,
                                   o.memory_mib > 0 ? o.memory_mib : host_mem};
  // Where MIG-enabled GPUs can place instances: `nvidia-smi mig -lgipp`.
  std::vector<arbiter::agent::MigPlacementFacts> placements;
  const bool any_mig = std::any_of(gpus->begin(), gpus->end(),
                                   [](const arbiter::agent::GpuFacts& g) { return g.mig_enabled; });
  if (any_mig) {
    std::string lgipp;
    bool read = false;
    if (!o.nvidia_smi_lgipp.empty()) {
      lgipp = ReadFile(o.nvidia_smi_lgipp, &read);
    } else {
      read = RunCommand(o.nvidia_smi + " mig -lgipp", &lgipp);
    }
    absl::StatusOr<std::vector<arbiter::agent::MigPlacementFacts>> parsed =
        read ? arbiter::agent::ParseMigPlacements(lgipp)
             : absl::UnavailableError("`nvidia-smi mig -lgipp` could not be read");
    if (parsed.ok()) {
      placements = *std::move(parsed);
    } else {
      // The model's built-in placements stand in.
      std::cerr << "arbiter-agent: MIG placements: " << parsed.status().message() << "\n";
    }
  }
  absl::StatusOr<arbiter::agent::Registration> reg =
      arbiter::agent::RegistrationOf(who, *gpus, catalog(), placements);
  if (!reg.ok()) {
    std::cerr << "arbiter-agent: " << reg.status().message() << "\n";
    return std::nullopt;
  }
  return *std::move(reg);
}

// Registers the node from nvidia-smi (or updates it when it is known), and
// cordons it when a GPU is unhealthy; the read of nvidia-smi is recorded in
// `health`. Returns true when Arbiter has it.
bool Register(v1::InventoryService::Stub& stub, const Options& o, AgentHealth& health) {
  std::optional<arbiter::agent::Registration> reg = ReadRegistration(
      o, [&stub] { return Catalog(stub); }, health);
  if (!reg.has_value()) return false;
  // A known node is updated (the usual case after the first run); an
  // unknown one registered.
  grpc::Status status;
  const char* verb = "updated";
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::UpdateNodeRequest req;
    *req.mutable_node() = reg->node;
    v1::UpdateNodeResponse resp;
    status = stub.UpdateNode(&ctx, req, &resp);
  }
  if (status.error_code() == grpc::StatusCode::NOT_FOUND &&
      absl::StartsWith(status.error_message(), "name:")) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::RegisterNodeRequest req;
    *req.mutable_node() = reg->node;
    v1::RegisterNodeResponse resp;
    status = stub.RegisterNode(&ctx, req, &resp);
    verb = "registered";
  }
  if (!status.ok()) {
    std::cerr << "arbiter-agent: register: " << status.error_message() << "\n";
    return false;
  }
  std::cout << verb << " node " << o.cluster << "/" << o.node << " in pool " << o.pool << ":";
  for (const v1::Gpu& g : reg->node.gpus()) std::cout << " " << g.model();
  std::cout << "\n";
  for (const std::string& note : reg->notes) std::cout << "  " << note << "\n";
  if (reg->unhealthy) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::CordonNodeRequest req;
    req.set_cluster(o.cluster);
    req.set_name(o.node);
    v1::CordonNodeResponse resp;
    grpc::Status cordoned = stub.CordonNode(&ctx, req, &resp);
    if (!cordoned.ok()) {
      std::cerr << "arbiter-agent: cordon: " << cordoned.error_message() << "\n";
      return false;
    }
    std::cout << "cordoned node " << o.cluster << "/" << o.node
              << ": a GPU is unhealthy (uncordon it once repaired)\n";
  }
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
  const std::string state = v1::NodeState_Name(resp.node().state());
  std::cout << "heartbeat: node " << o.cluster << "/" << o.node << " is "
            << absl::AsciiStrToLower(absl::StripPrefix(state, "NODE_STATE_")) << "\n";
  return true;
}

// --dry-run: one pass, printed instead of sent. With --register, the node
// registration (protobuf text) and its notes; with a telemetry source, the
// sample batch one read makes. Contacts no arbiterd. Returns the exit code:
// 0, or 1 when a read failed.
int DryRun(const Options& o, const TelemetrySource& source, bool telemetry, absl::Duration interval,
           AgentHealth& health) {
  int code = 0;
  if (o.do_register) {
    std::optional<arbiter::agent::Registration> reg = ReadRegistration(o, BuiltinCatalog, health);
    if (reg.has_value()) {
      std::cout << "# the node registration (MIG instances named from Arbiter's built-in "
                   "profile tables)\n"
                << reg->node.DebugString();
      for (const std::string& note : reg->notes) std::cout << "# note: " << note << "\n";
      if (reg->unhealthy) std::cout << "# a GPU is unhealthy: the node would be cordoned\n";
    } else {
      code = 1;
    }
  }
  if (telemetry) {
    PrometheusCounts counts;
    std::vector<DeviceReading> devices;
    const absl::Time query_at = absl::Now();
    const absl::Status read = ReadDevices(o, source, interval, query_at, counts, &devices);
    const absl::Time read_at = absl::Now();
    health.RecordRead(source.kind, read, read_at - query_at, read_at);
    if (read.ok()) {
      const google::protobuf::Timestamp at = ReadingTime(source, query_at);
      std::vector<v1::DeviceSample> samples;
      for (const DeviceReading& d : devices) samples.push_back(ToSample(d, at));
      const v1::SampleBatch batch =
          BatchOf(o, static_cast<int>(absl::ToInt64Seconds(interval)), samples);
      std::cout << "# the sample batch (" << devices.size() << " devices)\n" << batch.DebugString();
    } else {
      code = 1;
    }
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "arbiter-agent: stream GPU telemetry from dcgm-exporter (or Prometheus) to arbiterd\n\n"
      "Examples:\n"
      "  arbiter-agent --endpoint arbiter:50051 --tls-ca ca.pem --tls-cert agent.pem \\\n"
      "      --tls-key agent.key --cluster east --node gpu-17 \\\n"
      "      --dcgm-url http://127.0.0.1:9400/metrics\n"
      "  arbiter-agent --endpoint 127.0.0.1:50051 --cluster east --node gpu-17 \\\n"
      "      --file capture.prom --once\n"
      "  arbiter-agent --endpoint arbiter:50051 --tls-ca ca.pem --tls-cert agent.pem \\\n"
      "      --tls-key agent.key --prometheus https://prometheus:9090 \\\n"
      "      --prometheus-ca prom-ca.pem --prometheus-token-file token \\\n"
      "      --prometheus-selector 'cluster=\"east\"' --metrics-listen :9402"};
  app.add_option("--endpoint", o.endpoint, "arbiterd host:port")->capture_default_str();
  app.add_option("--tls-ca", o.ca_file, "CA that signed arbiterd's certificate (PEM)");
  app.add_option("--tls-cert", o.cert_file, "this agent's certificate (PEM), with the agent role");
  app.add_option("--tls-key", o.key_file, "this agent's private key (PEM)");
  app.add_option("--cluster", o.cluster, "the node's cluster, as registered");
  app.add_option("--node", o.node, "the node's name, as registered");
  auto* url = app.add_option("--dcgm-url", o.dcgm_url, "dcgm-exporter metrics URL");
  auto* file = app.add_option("--file", o.file, "read this capture instead of scraping");
  auto* nvml = app.add_option("--nvml", o.nvml,
                              "read the GPUs through NVML instead of dcgm-exporter, from this "
                              "library (e.g. libnvidia-ml.so.1, loaded at run time)");
  auto* prometheus = app.add_option(
      "--prometheus", o.prometheus,
      "read the dcgm-exporter series from this Prometheus server instead (http:// or https://, "
      "e.g. https://prometheus:9090); without --node, for every GPU it has (by UUID)");
  url->excludes(file);
  nvml->excludes(url)->excludes(file);
  prometheus->excludes(url)->excludes(file)->excludes(nvml);
  app.add_option("--prometheus-selector", o.prometheus_selector,
                 "PromQL label matchers that restrict the series, e.g. 'cluster=\"east\"'");
  app.add_option("--prometheus-timeout", o.prometheus_timeout, "longest a query may take, e.g. 10s")
      ->capture_default_str();
  app.add_option("--prometheus-ca", o.prometheus_ca,
                 "CA that signed Prometheus' certificate (PEM); default: the system's");
  app.add_option("--prometheus-cert", o.prometheus_cert, "client certificate for Prometheus (PEM)");
  app.add_option("--prometheus-key", o.prometheus_key, "its private key (PEM)");
  app.add_option("--prometheus-token-file", o.prometheus_token_file,
                 "file holding a bearer token for Prometheus (read at each query)");
  app.add_option("--prometheus-user", o.prometheus_user, "basic auth user for Prometheus");
  app.add_option("--prometheus-password-file", o.prometheus_password_file,
                 "file holding the basic auth password (read at each query)");
  app.add_option("--prometheus-label", o.prometheus_labels,
                 "FIELD=LABEL where the fleet relabelled a series label; FIELD: uuid, gpu, "
                 "GPU_I_ID, GPU_I_PROFILE, Hostname, pod, namespace (repeatable)");
  app.add_option("--interval", o.interval, "scrape interval, e.g. 10s")->capture_default_str();
  app.add_option("--flush-every", o.flush_every, "scrapes per batch sent")->capture_default_str();
  app.add_option("--heartbeat-every", o.heartbeat_every,
                 "node heartbeat interval, e.g. 10s (below arbiterd's --node-heartbeat-timeout); "
                 "0s: none")
      ->capture_default_str();
  app.add_flag("--once", o.once, "scrape once, send, and exit");
  app.add_flag("--dry-run", o.dry_run,
               "read once (nvidia-smi with --register, and the telemetry source) and print "
               "the registration and sample batch that would be sent, as protobuf text; "
               "contact no arbiterd");
  app.add_flag("--register", o.do_register,
               "register the node from `nvidia-smi -q -x` (or update it) and keep it current");
  app.add_option("--nvidia-smi", o.nvidia_smi, "the nvidia-smi to run")->capture_default_str();
  app.add_option("--nvidia-smi-xml", o.nvidia_smi_xml,
                 "read this recorded `nvidia-smi -q -x` instead of running it");
  app.add_option("--nvidia-smi-lgipp", o.nvidia_smi_lgipp,
                 "read this recorded `nvidia-smi mig -lgipp` instead of running it");
  app.add_option("--pool", o.pool, "the pool the node's capacity belongs to (--register)");
  app.add_option("--topology-domain", o.topology_domain, "NVLink domain or rack (--register)");
  app.add_option("--cpu-milli", o.cpu_milli, "allocatable CPU; default: the host's CPUs")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--memory-mib", o.memory_mib, "allocatable memory; default: the host's")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--refresh-every", o.refresh_every, "re-read nvidia-smi this often (--register)")
      ->capture_default_str();
  app.add_option("--metrics-listen", o.metrics_listen,
                 "serve /metrics (each source's reads, failures by status code, last success, "
                 "read time; samples sent) and /healthz (503 naming the source while its last "
                 "read failed or its last success is over 3 intervals old) over plain HTTP on "
                 "this host:port, e.g. 127.0.0.1:9402 (port 0: a free one, printed on stderr); "
                 "default: off");
  CLI11_PARSE(app, argc, argv);
  if (o.dcgm_url.empty() && o.file.empty() && o.nvml.empty() && o.prometheus.empty() &&
      !o.do_register) {
    std::cerr << "arbiter-agent: pass --dcgm-url, --file, --nvml, --prometheus or --register\n";
    return 2;
  }
  if (o.cluster.empty() != o.node.empty()) {
    std::cerr << "arbiter-agent: pass --cluster and --node together (or neither, with "
                 "--prometheus)\n";
    return 2;
  }
  std::optional<arbiter::agent::PrometheusSource> prometheus_source;
  if (!o.prometheus.empty()) {
    arbiter::agent::PrometheusOptions p;
    p.url = o.prometheus;
    p.selector = o.prometheus_selector;
    if (!absl::ParseDuration(o.prometheus_timeout, &p.timeout) ||
        p.timeout < absl::Milliseconds(100) || p.timeout > absl::Minutes(5)) {
      std::cerr << "arbiter-agent: --prometheus-timeout must be a duration in 100ms..5m, got "
                << o.prometheus_timeout << "\n";
      return 2;
    }
    p.ca_file = o.prometheus_ca;
    p.cert_file = o.prometheus_cert;
    p.key_file = o.prometheus_key;
    p.bearer_token_file = o.prometheus_token_file;
    p.basic_user = o.prometheus_user;
    p.basic_password_file = o.prometheus_password_file;
    for (const std::string& spec : o.prometheus_labels) {
      if (absl::Status s = arbiter::agent::SetLabelOverride(spec, p.labels); !s.ok()) {
        std::cerr << "arbiter-agent: --prometheus-label: " << s.message() << "\n";
        return 2;
      }
    }
    // Without a node, only a registered UUID can place a sample.
    p.require_uuid = o.node.empty();
    absl::StatusOr<arbiter::agent::PrometheusSource> created =
        arbiter::agent::PrometheusSource::Create(std::move(p));
    if (!created.ok()) {
      std::cerr << "arbiter-agent: " << created.status().message() << "\n";
      return 2;
    }
    prometheus_source = *std::move(created);
    std::cout << "prometheus: querying " << prometheus_source->endpoint() << " for "
              << prometheus_source->query() << "\n";
  }
  std::unique_ptr<arbiter::agent::Nvml> nvml_reader;
  if (!o.nvml.empty()) {
    absl::StatusOr<std::unique_ptr<arbiter::agent::Nvml>> opened =
        arbiter::agent::Nvml::Open(o.nvml);
    if (!opened.ok()) {
      std::cerr << "arbiter-agent: " << opened.status().message() << "\n";
      return 1;
    }
    nvml_reader = *std::move(opened);
  }
  if (o.do_register && o.pool.empty()) {
    std::cerr << "arbiter-agent: --register needs --pool\n";
    return 2;
  }
  absl::Duration refresh_every;
  if (!absl::ParseDuration(o.refresh_every, &refresh_every) || refresh_every < absl::Seconds(10)) {
    std::cerr << "arbiter-agent: --refresh-every must be a duration of at least 10s, got "
              << o.refresh_every << "\n";
    return 2;
  }
  const bool telemetry = !o.dcgm_url.empty() || !o.file.empty() || nvml_reader != nullptr ||
                         prometheus_source.has_value();
  absl::Duration interval;
  if (!absl::ParseDuration(o.interval, &interval) || interval < absl::Seconds(1) ||
      interval > absl::Hours(1)) {
    std::cerr << "arbiter-agent: --interval must be a duration in 1s..1h, got " << o.interval
              << "\n";
    return 2;
  }
  absl::Duration heartbeat_every;
  if (!absl::ParseDuration(o.heartbeat_every, &heartbeat_every) ||
      heartbeat_every < absl::ZeroDuration() || heartbeat_every > absl::Hours(1)) {
    std::cerr << "arbiter-agent: --heartbeat-every must be a duration in 0s..1h, got "
              << o.heartbeat_every << "\n";
    return 2;
  }
  // The agent's own health: each source it reads, on its interval.
  AgentHealth health;
  TelemetrySource telemetry_source;
  telemetry_source.prometheus = prometheus_source ? &*prometheus_source : nullptr;
  telemetry_source.nvml = nvml_reader.get();
  telemetry_source.kind = prometheus_source        ? AgentSource::kPrometheus
                          : nvml_reader != nullptr ? AgentSource::kNvml
                          : !o.file.empty()        ? AgentSource::kFile
                                                   : AgentSource::kDcgm;
  if (telemetry) {
    health.Watch(telemetry_source.kind, interval, absl::Now());
  }
  if (o.do_register) {
    health.Watch(AgentSource::kNvidiaSmi, refresh_every, absl::Now());
  }
  std::unique_ptr<arbiter::agent::AgentHealthServer> health_server;
  if (!o.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<arbiter::agent::AgentHealthServer>> started =
        arbiter::agent::AgentHealthServer::Start(o.metrics_listen, health,
                                                 [] { return absl::Now(); });
    if (!started.ok()) {
      std::cerr << "arbiter-agent: " << started.status().message() << "\n";
      return 2;
    }
    health_server = *std::move(started);
    // The port picked for port 0, for whoever started the agent.
    std::cerr << "arbiter-agent: metrics on "
              << o.metrics_listen.substr(0, o.metrics_listen.rfind(':')) << ":"
              << health_server->port() << "\n";
  }
  if (o.dry_run) return DryRun(o, telemetry_source, telemetry, interval, health);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> opened =
      arbiter::clients::OpenChannel(o.endpoint, {o.ca_file, o.cert_file, o.key_file});
  if (!opened.ok()) {
    std::cerr << "arbiter-agent: " << opened.status().message() << "\n";
    return 2;
  }
  std::shared_ptr<grpc::Channel> channel = *opened;
  auto stub = v1::TelemetryService::NewStub(channel);
  auto inventory = v1::InventoryService::NewStub(channel);
  absl::Time last_heartbeat = absl::InfinitePast();
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  const int interval_seconds = static_cast<int>(absl::ToInt64Seconds(interval));
  std::vector<v1::DeviceSample> pending;
  int scrapes = 0;
  bool last_ok = true;
  absl::Time last_register = absl::InfinitePast();
  PrometheusCounts prometheus_counts;
  while (!g_stop) {
    const absl::Time started = absl::Now();
    if (o.do_register && started - last_register >= refresh_every) {
      const bool registered = Register(*inventory, o, health);
      if (o.once && !registered) return 1;
      if (registered) last_register = started;
    }
    // A fleet-wide agent (no --node) stands for no node: no heartbeats.
    if (!o.node.empty() && heartbeat_every > absl::ZeroDuration() &&
        started - last_heartbeat >= heartbeat_every && Heartbeat(*inventory, o)) {
      last_heartbeat = started;
    }
    if (!telemetry) {
      if (o.once) return 0;
      while (!g_stop && absl::Now() < started + interval) absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    std::vector<DeviceReading> devices;
    // The query's evaluation time is the readings' time.
    const absl::Time query_at = absl::Now();
    const absl::Status read =
        ReadDevices(o, telemetry_source, interval, query_at, prometheus_counts, &devices);
    const absl::Time read_at = absl::Now();
    health.RecordRead(telemetry_source.kind, read, read_at - query_at, read_at);
    // An NVML pass goes on with what it read, even nothing (reported).
    const bool scraped = read.ok() || nvml_reader != nullptr;
    if (o.once && !scraped) return 1;
    if (scraped) {
      const google::protobuf::Timestamp at = ReadingTime(telemetry_source, query_at);
      for (const DeviceReading& d : devices) pending.push_back(ToSample(d, at));
      if (pending.size() > o.max_pending) {
        pending.erase(pending.begin(), pending.begin() + (pending.size() - o.max_pending));
      }
    }
    if (o.once || ++scrapes % o.flush_every == 0)
      last_ok = Send(*stub, o, interval_seconds, pending, health);
    if (o.once) return last_ok ? 0 : 1;
    while (!g_stop && absl::Now() < started + interval) absl::SleepFor(absl::Milliseconds(100));
  }
  if (!pending.empty()) last_ok = Send(*stub, o, interval_seconds, pending, health);
  return last_ok ? 0 : 1;
}
