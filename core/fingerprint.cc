#include "core/fingerprint.h"

#include <string>

#include "absl/strings/str_cat.h"

#include "core/recurrence.h"

namespace arbiter::core {
namespace {

uint64_t Fnv1a64(absl::string_view data) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

void AppendField(std::string& out, absl::string_view value) {
  absl::StrAppend(&out, value.size(), ":", value, ";");
}
void AppendField(std::string& out, int64_t value) { absl::StrAppend(&out, value, ";"); }

uint64_t FingerprintRequestSpec(const CapacityRequestSpec& spec) {
  std::string enc = "v1;";
  AppendField(enc, spec.team);
  AppendField(enc, spec.pool);
  AppendField(enc, static_cast<int64_t>(spec.workload_class));
  AppendField(enc, spec.members);
  if (spec.model_profile.has_value()) {
    const ModelProfile& m = *spec.model_profile;
    AppendField(enc, "model");
    for (int64_t v :
         {m.parameters, m.bytes_per_parameter_milli, int64_t{m.layers}, int64_t{m.kv_heads},
          int64_t{m.head_dim}, m.kv_bytes_per_element_milli, m.token_budget, m.overhead_mib}) {
      AppendField(enc, v);
    }
  } else if (spec.shape.is_whole()) {
    AppendField(enc, "whole");
    AppendField(enc, spec.shape.whole_gpus());
  } else if (spec.shape.is_mig()) {
    AppendField(enc, "mig");
    AppendField(enc, spec.shape.mig().profile);
  } else {
    AppendField(enc, "fraction");
    AppendField(enc, spec.shape.fraction().gpu_milli);
    AppendField(enc, spec.shape.fraction().memory_mib);
  }
  AppendField(enc, spec.shape.cpu_milli);
  AppendField(enc, spec.shape.memory_mib);
  AppendField(enc, static_cast<int64_t>(spec.gpu_models.size()));
  for (const std::string& m : spec.gpu_models) AppendField(enc, m);
  // Appended last and only when set, so that earlier fingerprints stay valid.
  if (spec.topology != Topology::kAny) AppendField(enc, TopologyName(spec.topology));
  AppendField(enc, spec.description);
  // Scheduling terms, each only when set, so that earlier fingerprints stay
  // valid.
  if (spec.priority != 0) AppendField(enc, absl::StrCat("priority=", spec.priority));
  if (spec.preemptible) AppendField(enc, "preemptible");
  if (spec.checkpoint_seconds != 0)
    AppendField(enc, absl::StrCat("ckpt=", spec.checkpoint_seconds));
  if (spec.checkpoint_interval_seconds != 0) {
    AppendField(enc, absl::StrCat("ckpt_every=", spec.checkpoint_interval_seconds));
  }
  if (spec.guaranteed) AppendField(enc, "guaranteed");
  if (spec.start_at != absl::InfinitePast()) {
    AppendField(enc, absl::StrCat("start=", absl::ToUnixMicros(spec.start_at)));
  }
  if (spec.duration != absl::ZeroDuration()) {
    AppendField(enc, absl::StrCat("duration=", absl::ToInt64Microseconds(spec.duration)));
  }
  if (spec.spot) AppendField(enc, "spot");
  if (spec.burst_seconds != 0) AppendField(enc, absl::StrCat("burst=", spec.burst_seconds));
  if (spec.recurrence.has_value()) {
    AppendField(enc, absl::StrCat("every=", FormatRecurringWindow(*spec.recurrence)));
  }
  return Fnv1a64(enc);
}

}  // namespace arbiter::core
