#include "core/coexistence.h"

namespace arbiter::core {

CoexistenceMatrix CoexistenceMatrix::Defaults() {
  CoexistenceMatrix m;  // Every pair: MIG only, same node allowed.
  m.Set(WorkloadClass::kInference, WorkloadClass::kInference, {Isolation::kSoftSharing, true});
  m.Set(WorkloadClass::kBatchAnalytics, WorkloadClass::kBatchAnalytics,
        {Isolation::kSoftSharing, true});
  m.Set(WorkloadClass::kExperimentation, WorkloadClass::kExperimentation,
        {Isolation::kSoftSharing, true});
  m.Set(WorkloadClass::kBatchAnalytics, WorkloadClass::kExperimentation,
        {Isolation::kSoftSharing, true});
  return m;
}

absl::string_view IsolationName(Isolation i) {
  switch (i) {
    case Isolation::kForbidden:
      return "forbidden";
    case Isolation::kMigOnly:
      return "mig_only";
    case Isolation::kSoftSharing:
      return "soft_sharing";
  }
  return "forbidden";
}

Isolation IsolationFromName(absl::string_view name) {
  if (name == "soft_sharing") return Isolation::kSoftSharing;
  if (name == "mig_only") return Isolation::kMigOnly;
  return Isolation::kForbidden;
}

bool CoexistenceMatrix::GpuAdmits(uint32_t mask, WorkloadClass cls, Isolation needed) const {
  for (size_t c = 0; c < rules_.size(); ++c) {
    if ((mask & (uint32_t{1} << c)) != 0 && rules_[c][Index(cls)].gpu < needed) return false;
  }
  return true;
}

void CoexistenceMatrix::Set(WorkloadClass a, WorkloadClass b, CoexistenceRule rule) {
  rules_[Index(a)][Index(b)] = rule;
  rules_[Index(b)][Index(a)] = rule;
}

}  // namespace arbiter::core
