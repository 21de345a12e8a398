// What an accepted capacity request spec must hold, for the fuzz targets that
// produce specs (validate_fuzz.cc from raw fields, convert_fuzz.cc from wire
// bytes). A broken bound aborts: libFuzzer reports it as a finding.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"

#include "core/model.h"
#include "core/validate.h"

namespace arbiter::fuzz {

inline void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz contract broken: %s\n", what);
  std::abort();
}

// An error from a conversion or a validation: INVALID_ARGUMENT, with the
// message starting "<field>: ".
inline void CheckFieldError(const absl::Status& status) {
  Check(status.code() == absl::StatusCode::kInvalidArgument, "an error other than invalid");
  Check(absl::StrContains(status.message(), ": "), "an error that names no field");
}

inline bool PlainName(const std::string& s) {
  if (s.empty() || s.size() > core::kMaxNameLength) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// REQUIRES: core::ValidateRequestSpec(spec) is OK.
inline void CheckAcceptedSpec(const core::CapacityRequestSpec& spec) {
  Check(PlainName(spec.team) && PlainName(spec.pool), "team and pool are plain names");
  Check(!spec.idempotency_key.empty() &&
            spec.idempotency_key.size() <= core::kMaxIdempotencyKeyLength,
        "the key's length");
  for (char c : spec.idempotency_key) Check(c > 0x20 && c < 0x7f, "the key is printable ASCII");
  Check(spec.description.size() <= core::kMaxDescriptionLength, "description length");
  Check(spec.members >= 1 && spec.members <= core::kMaxGangMembers, "members in range");
  Check(spec.workload_class > core::WorkloadClass::kUnspecified &&
            spec.workload_class <= core::WorkloadClass::kExperimentation,
        "the class is known");
  Check(spec.shape.cpu_milli >= 0 && spec.shape.memory_mib >= 0, "host quantities >= 0");
  if (spec.shape.is_whole() && !spec.model_profile.has_value()) {
    Check(spec.shape.whole_gpus() >= 1 && spec.shape.whole_gpus() <= core::kMaxWholeGpusPerMember,
          "whole GPUs in range");
  }
  if (spec.shape.is_fraction()) {
    Check(spec.shape.fraction().gpu_milli >= 1 && spec.shape.fraction().gpu_milli <= 1000 &&
              spec.shape.fraction().memory_mib >= 1,
          "a fraction in range");
  }
}

}  // namespace arbiter::fuzz
