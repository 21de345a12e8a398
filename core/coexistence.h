// Coexistence by workload class: which classes may share a GPU, and how
// strongly they must be isolated to do so, and which may share a node.
//
// Defaults (DESIGN.md): inference sits next to training, batch analytics or
// experimentation only behind MIG walls; training shares a GPU with anything,
// itself included, only through MIG; inference, batch analytics and
// experimentation may soft-share (MPS or time-slice, with per-tenant memory
// caps) with their own class, and batch analytics with experimentation. Every
// pair may share a node.
//
// Thread-compatible value type.
#pragma once

#include <array>

#include "absl/strings/string_view.h"

#include "core/model.h"

namespace arbiter::core {

// The weakest isolation under which two classes may share one GPU.
enum class Isolation {
  kForbidden = 0,    // Never on the same GPU.
  kMigOnly = 1,      // Only in separate MIG instances.
  kSoftSharing = 2,  // Fractions (MPS / time-slice) too.
};

struct CoexistenceRule {
  Isolation gpu = Isolation::kMigOnly;
  bool same_node = true;
};

// Stable lower-case names ("forbidden", "mig_only", "soft_sharing"), and back
// (kForbidden for an unknown name, the safe reading).
absl::string_view IsolationName(Isolation i);
Isolation IsolationFromName(absl::string_view name);

// A rule set for one pair of classes (either order).
struct ClassRule {
  WorkloadClass a = WorkloadClass::kUnspecified;
  WorkloadClass b = WorkloadClass::kUnspecified;
  CoexistenceRule rule;
};

class CoexistenceMatrix {
 public:
  // The defaults described above.
  static CoexistenceMatrix Defaults();

  // The rule for `a` next to `b`; symmetric.
  const CoexistenceRule& Rule(WorkloadClass a, WorkloadClass b) const {
    return rules_[Index(a)][Index(b)];
  }
  // Sets the rule for both orders of the pair.
  void Set(WorkloadClass a, WorkloadClass b, CoexistenceRule rule);
  // Whether work of `cls` may join a GPU holding the classes in `mask` (bit
  // c for WorkloadClass c, see Gpu::class_mask) at `needed` isolation.
  bool GpuAdmits(uint32_t mask, WorkloadClass cls, Isolation needed) const;

 private:
  static size_t Index(WorkloadClass c) { return static_cast<size_t>(c); }
  std::array<std::array<CoexistenceRule, 5>, 5> rules_{};
};

}  // namespace arbiter::core
