// What arbiter-agent learns about its node from `nvidia-smi -q -x`: each
// GPU's product, UUID, memory, MIG mode and instances, ECC and the health
// signs a scheduler must act on; and which catalog model each GPU is
// (docs/catalog.md). Pure parsing, no process or network I/O: the agent
// runs nvidia-smi, tests feed recorded output
// (tests/agent/fixtures/nvidia-smi).
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace arbiter::agent {

// One XML element: its attributes, text (entities decoded, trimmed) and
// children in document order.
struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::string text;
  std::vector<XmlElement> children;

  // The first child named `name`; nullptr when none.
  const XmlElement* Child(absl::string_view name) const;
  // The text of the element at `path` ("a/b/c", from this one); "" when
  // any step is missing.
  std::string TextAt(absl::string_view path) const;
};

// Parses a document: its root element. Declarations, processing
// instructions, DOCTYPE and comments are skipped; CDATA is text. INVALID_ARGUMENT
// with the byte offset for malformed input (unclosed or mismatched tags).
absl::StatusOr<XmlElement> ParseXml(absl::string_view text);

// A MIG GPU instance as nvidia-smi lists it. The XML names no profile and
// no placement: `profile` is inferred from the SMs and memory (ProfileOf).
struct MigDeviceFacts {
  int32_t gpu_instance_id = 0;
  int32_t compute_instance_id = 0;
  int32_t sm_count = 0;
  int64_t memory_mib = 0;
  std::string profile;  // Empty when not inferred.
};

struct GpuFacts {
  int32_t index = 0;       // Order in the document (nvidia-smi's index).
  std::string pci_bus;     // The <gpu id="..."> attribute.
  std::string product;     // "NVIDIA A100-SXM4-80GB".
  std::string uuid;        // "GPU-...".
  int64_t memory_mib = 0;  // fb_memory_usage/total.
  bool mig_enabled = false;
  std::vector<MigDeviceFacts> mig_devices;
  bool ecc_enabled = false;
  int64_t retired_pages = 0;  // Single- and double-bit, as counted.
  // Signs that the GPU should take no new work: a reset required, pages
  // waiting to be retired, rows waiting to be remapped or a remap failure.
  std::vector<std::string> unhealthy;
};

// The GPUs of an `nvidia-smi -q -x` document. INVALID_ARGUMENT when it is
// not one (no <nvidia_smi_log>, a GPU without product name or UUID, a
// memory total that is not "<n> MiB").
absl::StatusOr<std::vector<GpuFacts>> ParseNvidiaSmi(absl::string_view xml);

// One line of `nvidia-smi mig -lgipp`: where GPU `gpu` can create GPU
// instances of profile `profile_id`, at these start memory slices, each
// `size` slices long.
struct MigPlacementFacts {
  int32_t gpu = 0;
  int32_t profile_id = 0;
  std::vector<int32_t> starts;
  int32_t size = 0;

  bool operator==(const MigPlacementFacts&) const = default;
};

// The placements of a `nvidia-smi mig -lgipp` output ("GPU  0 Profile ID  9
// Placements: {0,4}:4", or "Placement :" for one start). Blank lines are
// skipped. INVALID_ARGUMENT naming the line for one of another shape.
absl::StatusOr<std::vector<MigPlacementFacts>> ParseMigPlacements(absl::string_view text);

// The catalog model of a GPU product (shipped catalog names), telling the
// 40 and 80 GB A100s and the 16 and 32 GB V100s apart by `memory_mib`.
// NOT_FOUND naming the product when no catalog model matches: add one with
// `arbctl models apply` and a mapping here.
absl::StatusOr<std::string> CatalogModelOf(absl::string_view product, int64_t memory_mib);

// The MIG profile of `model` (its catalog table, profile name -> (SMs,
// MiB)) with `sm_count` SMs whose memory is nearest `memory_mib`, within
// 5%; "" when none.
std::string ProfileOf(const std::map<std::string, std::pair<int32_t, int64_t>>& table,
                      int32_t sm_count, int64_t memory_mib);

}  // namespace arbiter::agent
