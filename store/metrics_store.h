// MetricsReads: the stored state /metrics reports, read at scrape time.
//
// Status codes, for every method: UNAVAILABLE when the store cannot be
// reached (retry the call); ABORTED on a serialization failure or deadlock
// (retry the whole operation); INTERNAL for anything else. Further codes are
// stated per method.
//
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace arbiter::store {

// Allocated and used milli-GPUs of one (pool, class, team, GPU model).
struct GpuGauge {
  std::string pool;
  std::string workload_class;
  std::string team;
  std::string gpu_model;
  int64_t allocated_milli = 0;
  int64_t used_milli = 0;  // Measured use; 0 where not known.
};

// The stored state /metrics reports (server/metrics.h), read at scrape time.
struct MetricsSnapshot {
  // Held now by admitted and preempting requests (used_milli is 0), by
  // pool, class, team and model.
  std::vector<GpuGauge> allocated;
  // The latest rolled-up hour: mean allocated and used milli-GPUs over it,
  // by pool, class, team and model.
  std::vector<GpuGauge> last_hour;
  int64_t pending_approvals = 0;
  int64_t queued = 0;
  int64_t ledger_entries = 0;                        // The chain head's sequence number.
  std::map<std::string, int64_t> incidents_by_team;  // All recorded.
};

class MetricsReads {
 public:
  virtual ~MetricsReads() = default;

  // One consistent read of what /metrics reports.
  [[nodiscard]] virtual absl::StatusOr<MetricsSnapshot> LoadMetricsSnapshot() = 0;
};

}  // namespace arbiter::store
