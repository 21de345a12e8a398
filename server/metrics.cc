#include "server/metrics.h"

#include <map>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include <gperftools/malloc_extension.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

#include "app/arbiter.h"
#include "app/ended_keys.h"
#include "app/real_clock.h"
#include "app/telemetry_maintenance.h"
#include "app/watch_hub.h"
#include "core/budget.h"
#include "server/grpc_status.h"

namespace arbiter::server {
namespace {

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *buckets;
}

// "/arbiter.v1.AllocationService/RequestCapacity" -> service, method.
std::pair<std::string, std::string> SplitMethod(const char* full_method) {
  std::string full = full_method == nullptr ? "" : full_method;
  if (!full.empty() && full[0] == '/') full.erase(0, 1);
  const size_t slash = full.find('/');
  if (slash == std::string::npos) return {"unknown", full};
  return {full.substr(0, slash), full.substr(slash + 1)};
}

// gRPC's canonical code names, as grpc-prometheus labels them.
const char* CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {
      "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
      "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
      "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
      "DataLoss", "Unauthenticated"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "Unknown";
}

// A random id per RPC, sent to the caller as the x-request-id header and
// logged with the RPC when it fails.
std::string NewRequestId() {
  thread_local absl::BitGen gen;
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(gen));
}

class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(Metrics* metrics, const char* method)
      : metrics_(metrics), method_(method), request_id_(NewRequestId()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("x-request-id", request_id_);
    }
    // A request body that does not parse reaches no handler: gRPC 1.51's
    // callback server then answers UNIMPLEMENTED with no message. gRPC's
    // conventions (doc/statuscodes.md, "Error parsing request proto") give
    // INTERNAL, as its synchronous server answers; this makes it so for
    // every method, and says what failed.
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      unparsed_ = true;
    }
    if (unparsed_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        methods->GetSendStatus().error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      methods->ModifySendStatus(UnparsedBodyStatus(method_));
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      const absl::Duration took = timer_.Elapsed();
      metrics_->ObserveRpc(method_, status.error_code(), took);
      if (!status.ok()) {
        spdlog::info("rpc {} failed: {} {} request_id={} after {} ms", method_,
                     CodeName(status.error_code()), status.error_message(), request_id_,
                     absl::ToInt64Milliseconds(took));
      } else {
        spdlog::debug("rpc {} ok request_id={} after {} us", method_, request_id_,
                      absl::ToInt64Microseconds(took));
      }
    }
    methods->Proceed();
  }

 private:
  Metrics* const metrics_;
  const char* const method_;
  const std::string request_id_;
  const app::Stopwatch timer_;
  bool unparsed_ = false;  // The request message did not parse.
};

class RpcInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(Metrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(metrics_, info->method());
  }

 private:
  Metrics* const metrics_;
};

prometheus::ClientMetric Gauge(std::vector<prometheus::ClientMetric::Label> labels, int64_t value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = static_cast<double>(value);
  return m;
}

prometheus::MetricFamily GaugeFamily(std::string name, std::string help) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = prometheus::MetricType::Gauge;
  return f;
}

prometheus::ClientMetric Counter(std::vector<prometheus::ClientMetric::Label> labels,
                                 int64_t value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = static_cast<double>(value);
  return m;
}

prometheus::MetricFamily CounterFamily(std::string name, std::string help) {
  prometheus::MetricFamily f = GaugeFamily(std::move(name), std::move(help));
  f.type = prometheus::MetricType::Counter;
  return f;
}

// Appends a family of one unlabelled gauge, or counter, holding `value`.
void AddGauge(std::vector<prometheus::MetricFamily>& out, std::string name, std::string help,
              int64_t value) {
  auto f = GaugeFamily(std::move(name), std::move(help));
  f.metric.push_back(Gauge({}, value));
  out.push_back(std::move(f));
}
void AddCounter(std::vector<prometheus::MetricFamily>& out, std::string name, std::string help,
                int64_t value) {
  auto f = CounterFamily(std::move(name), std::move(help));
  f.metric.push_back(Counter({}, value));
  out.push_back(std::move(f));
}

std::vector<prometheus::ClientMetric::Label> GpuLabels(const store::GpuGauge& g) {
  return {{"pool", g.pool}, {"class", g.workload_class}, {"team", g.team}, {"model", g.gpu_model}};
}

}  // namespace

// Reads the stored state and the arbiter's queue at each scrape. A scrape
// that cannot read the database reports arbiter_state_scrape_ok 0 and the
// series that need no database.
class Metrics::StateCollector final : public prometheus::Collectable {
 public:
  StateCollector(store::Store* store, app::Arbiter* arbiter, app::WatchHub* hub,
                 app::TelemetryMaintenance* telemetry, const app::EndedKeyLookup* ended_keys,
                 Clock* clock)
      : store_(store),
        arbiter_(arbiter),
        hub_(hub),
        telemetry_(telemetry),
        ended_keys_(ended_keys),
        clock_(clock) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    const app::ArbiterStats stats = arbiter_->stats();
    AddGauge(out, "arbiter_queue_depth", "Commands waiting for the arbiter thread.", stats.queued);
    AddGauge(out, "arbiter_batches_in_flight", "Batches decided and not yet committed.",
             stats.in_flight);
    AddGauge(out, "arbiter_idempotency_keys_in_memory",
             "Idempotency keys the engine holds: the live requests' and those of ended requests "
             "that a key lookup might still miss.",
             stats.keys_in_memory);
    AddKeyLookups(out);
    AddGauge(out, "arbiter_leader", "1 while this replica leads (decides), 0 while it follows.",
             stats.leading ? 1 : 0);
    AddGauge(out, "arbiter_leader_epoch",
             "The leader epoch this replica last took over with; 0 if never.", stats.epoch);
    AddWatch(out);
    AddTelemetry(out);
    AddHeap(out);

    auto scrape_ok = GaugeFamily("arbiter_state_scrape_ok",
                                 "1 when this scrape read the stored state, 0 when it could not.");
    absl::StatusOr<store::MetricsSnapshot> snapshot = store_->LoadMetricsSnapshot();
    if (!snapshot.ok()) {
      spdlog::warn("metrics: cannot read the state: {}", snapshot.status().ToString());
      scrape_ok.metric.push_back(Gauge({}, 0));
      out.push_back(std::move(scrape_ok));
      return out;
    }
    scrape_ok.metric.push_back(Gauge({}, 1));
    out.push_back(std::move(scrape_ok));
    AddState(*snapshot, out);
    AddBudgets(out);
    return out;
  }

 private:
  static void AddState(const store::MetricsSnapshot& s,
                       std::vector<prometheus::MetricFamily>& out) {
    auto allocated = GaugeFamily("arbiter_gpu_allocated_milli",
                                 "Milli-GPUs held now by admitted and preempting requests.");
    for (const store::GpuGauge& g : s.allocated) {
      allocated.metric.push_back(Gauge(GpuLabels(g), g.allocated_milli));
    }
    out.push_back(std::move(allocated));
    auto hour_allocated = GaugeFamily("arbiter_gpu_allocated_milli_last_hour",
                                      "Mean milli-GPUs allocated over the latest rolled-up hour.");
    auto hour_used = GaugeFamily("arbiter_gpu_used_milli_last_hour",
                                 "Mean milli-GPUs measured busy over the latest rolled-up hour.");
    for (const store::GpuGauge& g : s.last_hour) {
      hour_allocated.metric.push_back(Gauge(GpuLabels(g), g.allocated_milli));
      hour_used.metric.push_back(Gauge(GpuLabels(g), g.used_milli));
    }
    out.push_back(std::move(hour_allocated));
    out.push_back(std::move(hour_used));
    auto pending = GaugeFamily("arbiter_pending_approvals", "Requests waiting for an approval.");
    pending.metric.push_back(Gauge({}, s.pending_approvals));
    out.push_back(std::move(pending));
    auto queued = GaugeFamily("arbiter_requests_queued", "Requests queued for capacity.");
    queued.metric.push_back(Gauge({}, s.queued));
    out.push_back(std::move(queued));
    auto ledger = GaugeFamily("arbiter_ledger_entries", "Sequence number of the ledger's head.");
    ledger.metric.push_back(Gauge({}, s.ledger_entries));
    out.push_back(std::move(ledger));
    auto incidents =
        GaugeFamily("arbiter_incidents_recorded", "SLO incidents recorded, by victim team.");
    for (const auto& [team, n] : s.incidents_by_team) {
      incidents.metric.push_back(Gauge({{"team", team}}, n));
    }
    out.push_back(std::move(incidents));
  }

  // Spend this calendar month (UTC) against each team's budget.
  void AddBudgets(std::vector<prometheus::MetricFamily>& out) const {
    const absl::Time now = clock_->TimeNow();
    absl::StatusOr<std::vector<core::Budget>> budgets = store_->ListBudgets();
    absl::StatusOr<std::map<std::string, int64_t>> spend =
        store_->MonthSpend(core::MonthStart(now));
    if (!budgets.ok() || !spend.ok()) return;
    auto spent = GaugeFamily("arbiter_budget_spent_micros",
                             "Committed spend this calendar month (UTC), micro-currency units.");
    auto hard = GaugeFamily("arbiter_budget_hard_limit_micros", "Monthly hard budget per team.");
    auto soft = GaugeFamily("arbiter_budget_soft_limit_micros", "Monthly soft budget per team.");
    for (const auto& [team, micros] : *spend)
      spent.metric.push_back(Gauge({{"team", team}}, micros));
    for (const core::Budget& b : *budgets) {
      hard.metric.push_back(Gauge({{"team", b.team}}, b.hard_limit_micros));
      soft.metric.push_back(Gauge({{"team", b.team}}, b.soft_limit_micros));
    }
    out.push_back(std::move(spent));
    out.push_back(std::move(hard));
    out.push_back(std::move(soft));
  }

  // The watch hub's streams, what is queued to them, and its counters.
  // tcmalloc's view of the heap: what is allocated, and what it holds free
  // (RSS is about their sum less what it returned to the system).
  static void AddHeap(std::vector<prometheus::MetricFamily>& out) {
    auto gauge = [&out](std::string name, std::string help, const char* property) {
      size_t value = 0;
      if (!MallocExtension::instance()->GetNumericProperty(property, &value)) return;
      AddGauge(out, std::move(name), std::move(help), static_cast<int64_t>(value));
    };
    gauge("arbiter_heap_allocated_bytes", "Bytes allocated by the application and not freed.",
          "generic.current_allocated_bytes");
    gauge("arbiter_heap_free_bytes",
          "Bytes the allocator holds free in its page heap (still resident).",
          "tcmalloc.pageheap_free_bytes");
    gauge("arbiter_heap_returned_bytes", "Bytes the allocator returned to the system.",
          "tcmalloc.pageheap_unmapped_bytes");
  }

  // The store's lookups of new requests' keys among the window's ended
  // requests: keys asked, and the statements that asked them (batched).
  void AddKeyLookups(std::vector<prometheus::MetricFamily>& out) const {
    AddCounter(out, "arbiter_key_lookups_total",
               "New requests' idempotency keys looked up among the window's ended requests.",
               ended_keys_->lookups());
    AddCounter(out, "arbiter_key_lookup_queries_total",
               "Statements that looked keys up (the keys that arrive during one go in the next).",
               ended_keys_->queries());
  }

  void AddWatch(std::vector<prometheus::MetricFamily>& out) const {
    const app::WatchStats w = hub_->stats();
    auto gauge = [&out](std::string name, std::string help, int64_t value) {
      AddGauge(out, std::move(name), std::move(help), value);
    };
    auto counter = [&out](std::string name, std::string help, int64_t value) {
      AddCounter(out, std::move(name), std::move(help), value);
    };
    gauge("arbiter_watch_streams", "WatchAllocations streams open now.", w.streams);
    gauge("arbiter_watch_streams_catching_up",
          "Streams replaying from a start revision before they follow live.", w.catching_up);
    gauge("arbiter_watch_queued_bytes",
          "Encoded event bytes delivered to streams, not yet written.", w.queued_bytes);
    gauge("arbiter_watch_revision", "The revision the watch hub published last.", w.head);
    counter("arbiter_watch_events_total", "Committed events published to the watch hub.", w.events);
    counter("arbiter_watch_deliveries_total", "Events handed to streams (one per stream).",
            w.deliveries);
    counter("arbiter_watch_bookmarks_total", "Bookmarks sent to idle streams.", w.bookmarks);
    counter("arbiter_watch_cutoffs_total",
            "Streams ended RESOURCE_EXHAUSTED for falling too far behind.", w.cutoffs);
    counter("arbiter_watch_refused_total",
            "Streams refused RESOURCE_EXHAUSTED for the per-caller or total limit.", w.refused);
  }

  // The telemetry passes' coverage (app::TelemetryCoverage): a telemetry
  // source that stopped shows as held members without samples.
  void AddTelemetry(std::vector<prometheus::MetricFamily>& out) const {
    const app::TelemetryCoverage c = telemetry_->coverage();
    auto passes = CounterFamily("arbiter_telemetry_passes_total",
                                "Rollup and idle-tracking passes, by whether they ended with an "
                                "error.");
    passes.metric.push_back(Counter({{"result", "ok"}}, c.passes - c.failed_passes));
    passes.metric.push_back(Counter({{"result", "failed"}}, c.failed_passes));
    out.push_back(std::move(passes));
    auto covered = GaugeFamily("arbiter_telemetry_covered_to_timestamp_seconds",
                               "End of the span the last pass rolled up (rollup settle behind "
                               "the pass); 0 before the first.");
    covered.metric.push_back(
        Gauge({}, c.to == absl::InfinitePast() ? 0 : absl::ToUnixSeconds(c.to)));
    out.push_back(std::move(covered));
    auto members = GaugeFamily("arbiter_telemetry_held_members",
                               "Allocation members held in the last pass's span, by whether any "
                               "sample of their GPUs fell in it.");
    members.metric.push_back(Gauge({{"sampled", "true"}}, c.members - c.unsampled_members));
    members.metric.push_back(Gauge({{"sampled", "false"}}, c.unsampled_members));
    out.push_back(std::move(members));
    auto held = GaugeFamily("arbiter_telemetry_held_milli_gpu_seconds",
                            "Milli-GPU seconds held in the last pass's span, by whether samples "
                            "covered them; sampled / all is the telemetry's coverage.");
    held.metric.push_back(Gauge({{"sampled", "true"}}, c.sampled_milli_seconds));
    held.metric.push_back(
        Gauge({{"sampled", "false"}}, c.allocated_milli_seconds - c.sampled_milli_seconds));
    out.push_back(std::move(held));
  }

  store::Store* const store_;
  app::Arbiter* const arbiter_;
  app::WatchHub* const hub_;
  app::TelemetryMaintenance* const telemetry_;
  const app::EndedKeyLookup* const ended_keys_;
  Clock* const clock_;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      rpc_handled_(prometheus::BuildCounter()
                       .Name("grpc_server_handled_total")
                       .Help("RPCs completed, by service, method and status code.")
                       .Register(*registry_)),
      rpc_seconds_(prometheus::BuildHistogram()
                       .Name("grpc_server_handling_seconds")
                       .Help("Time from the call's start to its status, by service and method.")
                       .Register(*registry_)),
      commit_seconds_(prometheus::BuildHistogram()
                          .Name("arbiter_commit_seconds")
                          .Help("Time to write one batch of decisions and COMMIT it.")
                          .Register(*registry_)
                          .Add({}, LatencyBuckets())),
      commit_batch_commands_(
          prometheus::BuildHistogram()
              .Name("arbiter_commit_batch_commands")
              .Help("Commands decided and committed together in one batch.")
              .Register(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256})),
      commit_failures_(prometheus::BuildCounter()
                           .Name("arbiter_commit_failures_total")
                           .Help("Batches whose COMMIT failed (answered UNAVAILABLE).")
                           .Register(*registry_)
                           .Add({})) {}

Metrics::~Metrics() { StopServing(); }

absl::Status Metrics::Serve(const std::string& listen_address, store::Store* store,
                            app::Arbiter* arbiter, app::WatchHub* hub,
                            app::TelemetryMaintenance* telemetry,
                            const app::EndedKeyLookup* ended_keys, Clock* clock) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(listen_address, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics-listen: cannot serve on ", listen_address, ": ", e.what()));
  }
  state_ = std::make_shared<StateCollector>(store, arbiter, hub, telemetry, ended_keys, clock);
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterCollectable(state_);
  const std::vector<int> ports = exposer_->GetListeningPorts();
  port_ = ports.empty() ? 0 : ports.front();
  return absl::OkStatus();
}

void Metrics::StopServing() {
  exposer_.reset();
  state_.reset();
  port_ = 0;
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
Metrics::InterceptorFactory() {
  return std::make_unique<RpcInterceptorFactory>(this);
}

void Metrics::ObserveCommit(size_t commands, absl::Duration took, bool ok) {
  commit_batch_commands_.Observe(static_cast<double>(commands));
  commit_seconds_.Observe(absl::ToDoubleSeconds(took));
  if (!ok) commit_failures_.Increment();
}

void Metrics::ObserveRpc(const char* full_method, grpc::StatusCode code, absl::Duration took) {
  auto [service, method] = SplitMethod(full_method);
  rpc_handled_
      .Add({{"grpc_service", service}, {"grpc_method", method}, {"grpc_code", CodeName(code)}})
      .Increment();
  rpc_seconds_.Add({{"grpc_service", service}, {"grpc_method", method}}, LatencyBuckets())
      .Observe(absl::ToDoubleSeconds(took));
}

std::string Metrics::SerializeForTest() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace arbiter::server
