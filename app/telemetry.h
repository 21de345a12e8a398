// Telemetry: device samples from node agents, and the usage reports built
// from their hourly rollups (utilization, idle allocations, right-sizing),
// and idle policies. See proto/arbiter/v1/telemetry.proto for the contracts.
//
// Samples are measurements, not decisions: they are stored by any replica
// straight to the store, never to the ledger. An agent's batch is matched to
// registered GPUs here (by UUID, else by the named node's GPU index), and
// its times are corrected for the agent's clock skew.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "app/authz.h"
#include "app/context.h"
#include "app/sample_writer.h"
#include "core/telemetry.h"
#include "store/store.h"

namespace arbiter::app {

// One reading as an agent sent it: node_id unset, gpu_index as reported.
struct ReportedSample {
  std::string uuid;  // The GPU's UUID; empty when the agent knows none.
  core::GpuSample sample;
};

// One batch of an agent's stream, already checked field by field.
struct SampleBatch {
  std::string cluster;  // With `node`, names the node the GPU indices are on.
  std::string node;
  absl::Time sent_at;  // By the agent's clock.
  std::vector<ReportedSample> samples;
};

// What became of one batch.
struct IngestOutcome {
  int64_t stored = 0;      // New samples.
  int64_t duplicates = 0;  // Already stored (same node, GPU, instance, time).
  int64_t in_future = 0;   // Dropped: later than now, after skew correction.
  int64_t too_old = 0;     // Dropped: older than the retention.
  // One name per sample of a GPU not registered ("cluster/node/gpuN" or the UUID).
  std::vector<std::string> unknown;
  int64_t skew_ms = 0;          // The agent's clock minus ours.
  bool skew_corrected = false;  // Whether the times were corrected for it.
};

// Rolled-up usage by team, pool, class and model, with the total.
struct UtilizationReport {
  std::vector<store::UtilizationRow> rows;
  core::MemberUsage total;  // Peaks: the highest.
};

struct RightSizing {
  core::RightSizeAdvice advice;
  std::string team;
  std::string gpu_model;
};

class Telemetry {
 public:
  // REQUIRES: ctx.reads is stopped (running what was queued) before this
  // object is destroyed.
  explicit Telemetry(const Context& ctx)
      : ctx_(ctx),
        writer_(std::make_unique<SampleWriter>(
            ctx.store, ctx.reads, SampleWriter::kMaxSamplesPerCommit,
            SampleWriter::kMaxWaitingSamples, ctx.telemetry->options().sample_gather)) {}

  // Whether the caller may stream samples; checked once per stream.
  [[nodiscard]] absl::Status CheckStream(const Caller& caller) const;
  // Matches, stores and counts one batch; its transaction is shared with
  // the batches of other agents that arrive meanwhile (SampleWriter).
  // REQUIRES: CheckStream was OK for the stream it came on.
  void Ingest(SampleBatch batch, Reply<IngestOutcome> reply) const;

  // The span is widened to whole hours.
  void GetUtilization(const Caller& caller, absl::StatusOr<Span> span, std::string team,
                      Reply<UtilizationReport> reply) const;
  void ListIdleAllocations(const Caller& caller, Reply<std::vector<core::IdleFinding>> reply) const;
  // Advice for members still held that used less than they hold, most
  // saving first; `headroom_milli` 0 means the default, 200. INVALID_ARGUMENT
  // for a window under one hour or a headroom outside 0..10000.
  void GetRightSizing(const Caller& caller, absl::StatusOr<Span> span, int32_t headroom_milli,
                      std::string team, Reply<std::vector<RightSizing>> reply) const;
  void SetIdlePolicy(const Caller& caller, absl::StatusOr<core::IdlePolicy> policy,
                     Reply<Done> reply) const;
  // The policies in force: the stored ones over the built-in defaults.
  void ListIdlePolicies(const Caller& caller, Reply<std::vector<core::IdlePolicy>> reply) const;

 private:
  // The batch's samples matched to registered GPUs, with times corrected for
  // the agent's clock skew; the rest counted in `outcome`.
  std::vector<core::GpuSample> Resolve(SampleBatch& batch, absl::Time now,
                                       IngestOutcome& outcome) const;

  const Context ctx_;
  const std::unique_ptr<SampleWriter> writer_;
};

}  // namespace arbiter::app
