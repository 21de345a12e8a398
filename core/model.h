// The domain model of Arbiter: catalog, inventory, governance and capacity
// requests, as plain value types. Quantities are integers in milli-units
// (1000 milli-GPU = one GPU, 1000 milli-CPU = one core) or MiB.
//
// Thread-compatible value types; no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "core/mig.h"

namespace arbiter::core {

inline constexpr int64_t kMilliPerGpu = 1000;

enum class LatencyClass { kUnspecified = 0, kServing = 1, kBatch = 2, kSpot = 3, kDev = 4 };
enum class WorkloadClass {
  kUnspecified = 0,
  kTraining = 1,
  kInference = 2,
  kBatchAnalytics = 3,
  kExperimentation = 4,
};
// Where a gang's members must sit relative to each other.
enum class Topology { kAny = 0, kSameNode = 1, kSameDomain = 2 };

enum class RequestState {
  kUnspecified = 0,
  kAdmitted = 1,
  kQueued = 2,
  kDenied = 3,
  kReleased = 4,
  kCancelled = 5,
};

// Stable lower-case names, used in the database and in logs.
absl::string_view LatencyClassName(LatencyClass c);
absl::string_view WorkloadClassName(WorkloadClass c);
absl::string_view RequestStateName(RequestState s);
absl::string_view TopologyName(Topology t);  // "any", "same_node", "same_domain".
// Inverse of the above; kUnspecified for an unknown name.
LatencyClass LatencyClassFromName(absl::string_view name);
WorkloadClass WorkloadClassFromName(absl::string_view name);
RequestState RequestStateFromName(absl::string_view name);
// kAny for an unknown name.
Topology TopologyFromName(absl::string_view name);

// True for states that hold no capacity and never change again.
bool IsFinal(RequestState s);

struct GpuModel {
  std::string name;
  int64_t memory_mib = 0;
  int32_t sm_count = 0;
  int32_t tdp_watts = 0;
  bool mig_capable = false;
  // MIG profiles; filled from the built-in table (core/mig.h) when loaded.
  std::vector<MigProfile> mig_profiles;
};

// Fills `model.mig_profiles` from the built-in table when the model is
// MIG-capable and has none.
void AttachBuiltinMigProfiles(GpuModel& model);

struct Cluster {
  std::string name;
  std::string description;
};

struct Pool {
  std::string name;
  LatencyClass latency_class = LatencyClass::kUnspecified;
  std::string description;
};

// A GPU as registered (its model), plus what is allocated on it.
struct Gpu {
  int32_t index = 0;
  std::string model;
  int64_t memory_mib = 0;            // From the catalog at registration.
  int64_t allocated_milli = 0;       // 0..1000.
  int64_t allocated_memory_mib = 0;  // 0..memory_mib.
  int32_t tenants = 0;               // Allocations on this GPU.
  bool exclusive = false;            // Held whole by one allocation.
  // MIG layout; empty when the GPU is not partitioned. Changes only while
  // `tenants` is 0.
  std::vector<MigInstance> mig_layout;
  // Allocations on this GPU by workload class (index: WorkloadClass).
  std::array<int32_t, 5> class_tenants{};

  int64_t free_milli() const { return kMilliPerGpu - allocated_milli; }
  int64_t free_memory_mib() const { return memory_mib - allocated_memory_mib; }
  bool empty() const { return tenants == 0; }
};

struct Node {
  int64_t id = 0;  // Assigned by the arbiter; stable across restarts.
  std::string cluster;
  std::string name;
  std::string pool;
  std::string topology_domain;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t allocated_cpu_milli = 0;
  int64_t allocated_memory_mib = 0;
  std::vector<Gpu> gpus;
  // Gang members on this node by workload class (index: WorkloadClass).
  std::array<int32_t, 5> class_members{};

  int64_t free_cpu_milli() const { return cpu_milli - allocated_cpu_milli; }
  int64_t free_memory_mib() const { return memory_mib - allocated_memory_mib; }
};

struct Team {
  std::string name;
  std::string parent;  // Empty for a root.
  int64_t weight_milli = 1000;
};

struct Quota {
  std::string team;
  std::string pool;
  int64_t nominal_milli = 0;
};

// A fraction of one shared GPU.
struct GpuFraction {
  int64_t gpu_milli = 0;
  int64_t memory_mib = 0;
  bool operator==(const GpuFraction&) const = default;
};

// One MIG instance of a profile (e.g. "3g.40gb") on a MIG-capable GPU.
struct MigShape {
  std::string profile;
  // Milli-GPU charged per instance: the profile's SM share on the allowed
  // model where it is largest. Resolved from the catalog; not part of the
  // request's body.
  int64_t milli = 0;
};

// A model to serve, from which the arbiter computes the GPU memory a member
// needs and chooses its form (core/model_sizing.h). Byte sizes are in
// milli-bytes (2000 = FP16, 500 = 4-bit).
struct ModelProfile {
  int64_t parameters = 0;
  int64_t bytes_per_parameter_milli = 0;
  int32_t layers = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
  int64_t kv_bytes_per_element_milli = 0;
  int64_t token_budget = 0;  // Tokens held in the KV cache at once.
  int64_t overhead_mib = 0;  // Activations, CUDA context, fragmentation.
  bool operator==(const ModelProfile&) const = default;
};

// What one gang member needs: `whole_gpus` exclusive GPUs on one node, one
// `fraction` of a shared GPU, or one MIG instance; plus host CPU and memory
// on the same node.
struct MemberShape {
  std::variant<int32_t, GpuFraction, MigShape> gpu = int32_t{1};
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;

  bool is_whole() const { return std::holds_alternative<int32_t>(gpu); }
  int32_t whole_gpus() const { return std::get<int32_t>(gpu); }
  const GpuFraction& fraction() const { return std::get<GpuFraction>(gpu); }
  bool is_mig() const { return std::holds_alternative<MigShape>(gpu); }
  const MigShape& mig() const { return std::get<MigShape>(gpu); }
  bool is_fraction() const { return std::holds_alternative<GpuFraction>(gpu); }
  // Milli-GPU one member holds in total.
  int64_t gpu_milli() const;
};

// What a caller asks for. Everything needed to decide; nothing decided yet.
struct CapacityRequestSpec {
  std::string idempotency_key;
  std::string team;
  std::string pool;
  WorkloadClass workload_class = WorkloadClass::kUnspecified;
  int32_t members = 1;
  MemberShape shape;
  std::vector<std::string> gpu_models;  // Empty: any model in the pool.
  // kSameNode: every member on one node; kSameDomain: every member in one
  // topology domain (NVLink domain or rack; a node without one is its own).
  Topology topology = Topology::kAny;
  // When set, the request was made with a model profile: `shape.gpu` is the
  // form the arbiter chose for it, and the profile is what identifies the
  // request's body.
  std::optional<ModelProfile> model_profile;
  std::string description;

  // Milli-GPU of the whole gang.
  int64_t total_gpu_milli() const;
};

// Where one gang member sits. For whole GPUs `gpu_milli` is 1000 per GPU and
// `gpu_memory_mib` each GPU's full memory; for fractions and MIG instances
// one GPU index.
struct Placement {
  int32_t member = 0;
  int64_t node_id = 0;
  std::vector<int32_t> gpu_indices;
  int64_t gpu_milli = 0;       // Per GPU.
  int64_t gpu_memory_mib = 0;  // Per GPU.
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  bool exclusive = false;  // Whole GPUs held alone.
  // MIG: the instance's profile and start slot, and, when this decision
  // (re)partitions the GPU, the new layout. Empty/-1 otherwise.
  std::string mig_profile;
  int32_t mig_start = -1;
  std::vector<MigInstance> mig_new_layout;
  // True when this decision removes the GPUs' MIG layouts (they were empty).
  bool mig_layout_cleared = false;
  // The class of the work placed (from its request; not stored separately).
  WorkloadClass workload_class = WorkloadClass::kUnspecified;
  bool operator==(const Placement&) const = default;
};

// Machine-readable reasons for QUEUED and DENIED.
inline constexpr char kReasonQuotaExceeded[] = "QUOTA_EXCEEDED";
inline constexpr char kReasonNoQuota[] = "NO_QUOTA";
inline constexpr char kReasonInsufficientCapacity[] = "INSUFFICIENT_CAPACITY";
inline constexpr char kReasonNoFeasibleNode[] = "NO_FEASIBLE_NODE";

// A request with its decision and current state.
struct CapacityRequest {
  int64_t id = 0;
  CapacityRequestSpec spec;
  uint64_t body_hash = 0;  // Fingerprint of `spec` for idempotent replays.
  RequestState state = RequestState::kUnspecified;
  std::string reason_code;
  std::string reason;
  std::vector<Placement> placements;
  absl::Time created_at;
  absl::Time updated_at;
};

}  // namespace arbiter::core
