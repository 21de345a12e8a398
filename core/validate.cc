#include "core/validate.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "core/status_macros.h"

namespace arbiter::core {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

bool IsAlnum(char c) { return IsNameChar(c) && c != '-' && c != '_' && c != '.'; }

// Returns true if `s` is well-formed UTF-8 (no overlongs, surrogates or
// code points above U+10FFFF) with no C0/C1 control characters.
bool IsCleanUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    if (cp >= 0x80 && cp < 0xa0) return false;  // C1 controls.
    i += len;
  }
  return true;
}

}  // namespace

absl::Status ValidateRange(absl::string_view field, int64_t value, int64_t min, int64_t max) {
  if (value < min || value > max) {
    return Invalid(field, absl::StrCat("must be in [", min, ", ", max, "], got ", value));
  }
  return absl::OkStatus();
}

namespace {

absl::Status ValidateShape(const MemberShape& shape) {
  if (shape.is_whole()) {
    ARBITER_RETURN_IF_ERROR(
        ValidateRange("shape.whole_gpus", shape.whole_gpus(), 1, kMaxWholeGpusPerMember));
  } else if (shape.is_mig()) {
    ARBITER_RETURN_IF_ERROR(ValidateMigProfileName("shape.mig_profile", shape.mig().profile));
  } else {
    const GpuFraction& f = shape.fraction();
    if (f.gpu_milli <= 0 || f.gpu_milli > kMilliPerGpu) {
      return Invalid("shape.fraction.gpu_milli",
                     absl::StrCat("must be in (0, 1000] milli-GPU, got ", f.gpu_milli));
    }
    ARBITER_RETURN_IF_ERROR(
        ValidateRange("shape.fraction.memory_mib", f.memory_mib, 1, kMaxHostQuantity));
  }
  ARBITER_RETURN_IF_ERROR(ValidateRange("shape.cpu_milli", shape.cpu_milli, 0, kMaxHostQuantity));
  ARBITER_RETURN_IF_ERROR(ValidateRange("shape.memory_mib", shape.memory_mib, 0, kMaxHostQuantity));
  return absl::OkStatus();
}

absl::Status ValidateModelProfile(const ModelProfile& m) {
  const std::string f = "shape.model_profile.";
  ARBITER_RETURN_IF_ERROR(ValidateRange(f + "parameters", m.parameters, 1, 100'000'000'000'000));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange(f + "bytes_per_parameter_milli", m.bytes_per_parameter_milli, 1, 8000));
  ARBITER_RETURN_IF_ERROR(ValidateRange(f + "layers", m.layers, 0, 10'000));
  ARBITER_RETURN_IF_ERROR(ValidateRange(f + "kv_heads", m.kv_heads, 0, 10'000));
  ARBITER_RETURN_IF_ERROR(ValidateRange(f + "head_dim", m.head_dim, 0, 100'000));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange(f + "kv_bytes_per_element_milli", m.kv_bytes_per_element_milli, 0, 8000));
  ARBITER_RETURN_IF_ERROR(ValidateRange(f + "token_budget", m.token_budget, 0, 1'000'000'000));
  return ValidateRange(f + "overhead_mib", m.overhead_mib, 0, kMaxHostQuantity);
}

}  // namespace

absl::Status ValidateMigProfileName(absl::string_view field, absl::string_view value) {
  if (value.empty() || value.size() > 32) {
    return Invalid(field, "must be a MIG profile name such as 3g.40gb (1..32 characters)");
  }
  for (char c : value) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '+';
    if (!ok) return Invalid(field, "must be a MIG profile name such as 3g.40gb");
  }
  return absl::OkStatus();
}

absl::Status ValidateName(absl::string_view field, absl::string_view value, size_t max_length) {
  if (value.empty()) return Invalid(field, "must not be empty");
  if (value.size() > max_length) {
    return Invalid(field,
                   absl::StrCat("must be at most ", max_length, " characters, got ", value.size()));
  }
  if (!IsAlnum(value[0])) return Invalid(field, "must start with a letter or digit");
  for (char c : value) {
    if (!IsNameChar(c)) {
      return Invalid(field, "may contain only letters, digits, '-', '_' and '.'");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateDescription(absl::string_view field, absl::string_view value) {
  if (value.size() > kMaxDescriptionLength) {
    return Invalid(field, absl::StrCat("must be at most ", kMaxDescriptionLength, " bytes, got ",
                                       value.size()));
  }
  if (!IsCleanUtf8(value)) {
    return Invalid(field, "must be valid UTF-8 without control characters");
  }
  return absl::OkStatus();
}

absl::Status ValidateCluster(const Cluster& cluster) {
  ARBITER_RETURN_IF_ERROR(ValidateName("cluster.name", cluster.name));
  return ValidateDescription("cluster.description", cluster.description);
}

namespace {

// A pool's class-to-pool matrix: known classes and admissions, one rule a
// class, none contradicting `lends_to`.
absl::Status ValidateClassRules(const Pool& pool) {
  for (size_t i = 0; i < pool.class_rules.size(); ++i) {
    const PoolClassRule& rule = pool.class_rules[i];
    const std::string field = absl::StrCat("pool.class_rules[", i, "]");
    if (rule.workload_class == WorkloadClass::kUnspecified) {
      return Invalid(field + ".workload_class",
                     "must be TRAINING, INFERENCE, BATCH_ANALYTICS or EXPERIMENTATION");
    }
    if (rule.admission == ClassAdmission::kUnspecified) {
      return Invalid(field + ".admission", "must be ADMIT, BORROW or DENY");
    }
    if (rule.window.has_value()) {
      if (rule.admission != ClassAdmission::kBorrow) {
        return Invalid(field + ".window", "only a BORROW rule may have a window");
      }
      ARBITER_RETURN_IF_ERROR(ValidateRecurringWindow(*rule.window, field + ".window"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (pool.class_rules[j].workload_class == rule.workload_class) {
        return Invalid(field,
                       absl::StrCat("a second rule for ", WorkloadClassName(rule.workload_class),
                                    " work (the first is class_rules[", j, "])"));
      }
    }
    const bool lent = std::count(pool.lends_to.begin(), pool.lends_to.end(), rule.workload_class);
    if (lent && rule.admission != ClassAdmission::kBorrow) {
      return Invalid(field, absl::StrCat(WorkloadClassName(rule.workload_class),
                                         " is also in pool.lends_to, which means BORROW"));
    }
  }
  return absl::OkStatus();
}

// A SERVING pool's headroom: one entry per model, a positive amount; a
// burst limit only with headroom to burst into.
absl::Status ValidateHeadroom(const Pool& pool) {
  for (size_t i = 0; i < pool.headroom.size(); ++i) {
    const Headroom& h = pool.headroom[i];
    const std::string field = absl::StrCat("pool.headroom[", i, "]");
    if (pool.latency_class != LatencyClass::kServing) {
      return Invalid(field, "only SERVING pools keep headroom for their serving classes");
    }
    ARBITER_RETURN_IF_ERROR(ValidateName(field + ".gpu_model", h.gpu_model));
    ARBITER_RETURN_IF_ERROR(ValidateRange(field + ".milli_gpus", h.milli, 1, kMaxQuotaMilli));
    for (size_t j = 0; j < i; ++j) {
      if (pool.headroom[j].gpu_model == h.gpu_model) {
        return Invalid(field, absl::StrCat("a second headroom for ", h.gpu_model,
                                           " (the first is headroom[", j, "])"));
      }
    }
  }
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("pool.max_burst_seconds", pool.max_burst_seconds, 0, kMaxBurstSeconds));
  if (pool.max_burst_seconds > 0 && pool.headroom.empty()) {
    return Invalid("pool.max_burst_seconds", "bursts go into the headroom; set pool.headroom");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePool(const Pool& pool) {
  ARBITER_RETURN_IF_ERROR(ValidateName("pool.name", pool.name));
  if (pool.latency_class == LatencyClass::kUnspecified) {
    return Invalid("pool.latency_class", "must be set (SERVING, BATCH, SPOT or DEV)");
  }
  for (size_t i = 0; i < pool.lends_to.size(); ++i) {
    const std::string field = absl::StrCat("pool.lends_to[", i, "]");
    const WorkloadClass c = pool.lends_to[i];
    if (pool.latency_class != LatencyClass::kServing) {
      return Invalid(field, "only SERVING pools declare lending; other pools take every class");
    }
    if (c == WorkloadClass::kUnspecified || c == WorkloadClass::kInference) {
      return Invalid(field,
                     "must be TRAINING, BATCH_ANALYTICS or EXPERIMENTATION "
                     "(inference always runs on a serving pool)");
    }
    if (std::count(pool.lends_to.begin(), pool.lends_to.end(), c) > 1) {
      return Invalid(field, absl::StrCat("lists ", WorkloadClassName(c), " twice"));
    }
  }
  ARBITER_RETURN_IF_ERROR(ValidateClassRules(pool));
  ARBITER_RETURN_IF_ERROR(ValidateHeadroom(pool));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("pool.reclaim_grace_seconds", pool.reclaim_grace_seconds, 0, kMaxGraceSeconds));
  if (pool.spot_grace_seconds.has_value()) {
    ARBITER_RETURN_IF_ERROR(
        ValidateRange("pool.spot_grace_seconds", *pool.spot_grace_seconds, 0, kMaxGraceSeconds));
  }
  if (pool.queueing == QueueingPolicy::kUnspecified) {
    return Invalid("pool.queueing", "must be BACKFILL, BEST_EFFORT or STRICT");
  }
  ARBITER_RETURN_IF_ERROR(ValidateRange("pool.starvation_limit_seconds",
                                        pool.starvation_limit_seconds, 0, kMaxStarvationSeconds));
  ARBITER_RETURN_IF_ERROR(ValidateRange("pool.claim_deadline_seconds", pool.claim_deadline_seconds,
                                        0, kMaxGraceSeconds));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("pool.lease_seconds", pool.lease_seconds, 0, kMaxGraceSeconds));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("pool.cold_start_seconds", pool.cold_start_seconds, 0, kMaxGraceSeconds));
  if (pool.proactive_reclaim && pool.latency_class != LatencyClass::kServing) {
    return Invalid("pool.proactive_reclaim",
                   "only a SERVING pool forecasts serving demand and reclaims ahead of it");
  }
  return ValidateDescription("pool.description", pool.description);
}

absl::Status ValidateNode(const Node& node) {
  ARBITER_RETURN_IF_ERROR(ValidateName("node.cluster", node.cluster));
  ARBITER_RETURN_IF_ERROR(ValidateName("node.name", node.name, kMaxNodeNameLength));
  ARBITER_RETURN_IF_ERROR(ValidateName("node.pool", node.pool));
  if (!node.topology_domain.empty()) {
    ARBITER_RETURN_IF_ERROR(ValidateName("node.topology_domain", node.topology_domain));
  }
  ARBITER_RETURN_IF_ERROR(ValidateRange("node.cpu_milli", node.cpu_milli, 1, kMaxHostQuantity));
  ARBITER_RETURN_IF_ERROR(ValidateRange("node.memory_mib", node.memory_mib, 1, kMaxHostQuantity));
  if (node.gpus.empty() || node.gpus.size() > static_cast<size_t>(kMaxGpusPerNode)) {
    return Invalid("node.gpus",
                   absl::StrCat("must list 1..", kMaxGpusPerNode, " GPUs, got ", node.gpus.size()));
  }
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const std::string prefix = absl::StrCat("node.gpus[", i, "]");
    if (node.gpus[i].index != static_cast<int32_t>(i)) {
      return Invalid(absl::StrCat(prefix, ".index"),
                     absl::StrCat("must be ", i, " (GPUs are listed in index order), got ",
                                  node.gpus[i].index));
    }
    ARBITER_RETURN_IF_ERROR(ValidateName(absl::StrCat(prefix, ".model"), node.gpus[i].model));
    const std::string& uuid = node.gpus[i].uuid;
    if (!uuid.empty()) {
      ARBITER_RETURN_IF_ERROR(ValidateName(absl::StrCat(prefix, ".uuid"), uuid));
      for (size_t j = 0; j < i; ++j) {
        if (node.gpus[j].uuid == uuid) {
          return Invalid(absl::StrCat(prefix, ".uuid"),
                         absl::StrCat("'", uuid, "' is also node.gpus[", j, "].uuid"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTeam(const Team& team) {
  ARBITER_RETURN_IF_ERROR(ValidateName("team.name", team.name));
  if (!team.parent.empty()) {
    ARBITER_RETURN_IF_ERROR(ValidateName("team.parent", team.parent));
    if (team.parent == team.name) return Invalid("team.parent", "must differ from team.name");
  }
  return ValidateRange("team.weight_milli", team.weight_milli, 1, 1'000'000'000);
}

absl::Status ValidateQuota(const Quota& quota) {
  ARBITER_RETURN_IF_ERROR(ValidateName("quota.team", quota.team));
  ARBITER_RETURN_IF_ERROR(ValidateName("quota.pool", quota.pool));
  if (!quota.gpu_model.empty()) {
    ARBITER_RETURN_IF_ERROR(ValidateName("quota.gpu_model", quota.gpu_model));
  }
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("quota.nominal_milli", quota.nominal_milli, 0, kMaxQuotaMilli));
  ARBITER_RETURN_IF_ERROR(ValidateRange("quota.borrowing_limit_milli", quota.borrowing_limit_milli,
                                        kUnlimited, kMaxQuotaMilli));
  ARBITER_RETURN_IF_ERROR(ValidateRange("quota.lending_limit_milli", quota.lending_limit_milli,
                                        kUnlimited, kMaxQuotaMilli));
  if (quota.lending_limit_milli > quota.nominal_milli) {
    return Invalid("quota.lending_limit_milli",
                   absl::StrCat("must not exceed quota.nominal_milli (", quota.nominal_milli,
                                "), got ", quota.lending_limit_milli));
  }
  ARBITER_RETURN_IF_ERROR(ValidateRange("quota.cohort_borrowing_limit_milli",
                                        quota.cohort_borrowing_limit_milli, kUnlimited,
                                        kMaxQuotaMilli));
  ARBITER_RETURN_IF_ERROR(ValidateRange("quota.cohort_lending_limit_milli",
                                        quota.cohort_lending_limit_milli, kUnlimited,
                                        kMaxQuotaMilli));
  return absl::OkStatus();
}

namespace {

// A burst's terms: bounded, never spot, never a reservation, and no longer
// than the burst.
absl::Status ValidateBurst(const CapacityRequestSpec& spec) {
  ARBITER_RETURN_IF_ERROR(ValidateRange("burst_seconds", spec.burst_seconds, 0, kMaxBurstSeconds));
  if (spec.burst_seconds == 0) return absl::OkStatus();
  if (spec.spot) return Invalid("burst_seconds", "spot work never takes a pool's headroom");
  if (spec.start_at != absl::InfinitePast()) {
    return Invalid("burst_seconds", "a reservation cannot burst; ask when the work starts");
  }
  if (spec.duration > absl::Seconds(spec.burst_seconds)) {
    return Invalid("duration_seconds",
                   absl::StrCat("a burst ends after burst_seconds (", spec.burst_seconds,
                                "); ask for no longer, got ", absl::ToInt64Seconds(spec.duration)));
  }
  return absl::OkStatus();
}

// A recurring reservation's terms: its occurrences set its start and
// duration, it never bursts, and its key leaves room for the occurrences'
// keys ("<key>@<start, Unix seconds>").
absl::Status ValidateRecurrence(const CapacityRequestSpec& spec) {
  if (!spec.recurrence.has_value()) return absl::OkStatus();
  ARBITER_RETURN_IF_ERROR(ValidateRecurringWindow(*spec.recurrence, "recurrence"));
  if (spec.start_at != absl::InfinitePast()) {
    return Invalid("start_time",
                   "a recurring reservation starts at each occurrence of its "
                   "recurrence; leave start_time unset");
  }
  if (spec.duration != absl::ZeroDuration()) {
    return Invalid("duration_seconds",
                   "each occurrence of a recurring reservation lasts as long "
                   "as its window; leave duration_seconds unset");
  }
  if (spec.burst_seconds != 0) {
    return Invalid("burst_seconds", "a reservation cannot burst; ask when the work starts");
  }
  if (spec.idempotency_key.size() > kMaxIdempotencyKeyLength - kOccurrenceKeySuffix) {
    return Invalid("idempotency_key",
                   absl::StrCat("a recurring reservation's key must be at most ",
                                kMaxIdempotencyKeyLength - kOccurrenceKeySuffix,
                                " characters: each occurrence's key adds '@' and its start"));
  }
  return absl::OkStatus();
}

}  // namespace

// Priority, preemption and time terms of a request.
absl::Status ValidateScheduling(const CapacityRequestSpec& spec) {
  ARBITER_RETURN_IF_ERROR(ValidateRange("priority", spec.priority, -kMaxPriority, kMaxPriority));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("checkpoint_seconds", spec.checkpoint_seconds, 0, kMaxGraceSeconds));
  ARBITER_RETURN_IF_ERROR(ValidateRange("checkpoint_interval_seconds",
                                        spec.checkpoint_interval_seconds, 0, kMaxDurationSeconds));
  if (spec.guaranteed && spec.preemptible) {
    return Invalid("preemptible", "guaranteed work is never preempted; do not set both");
  }
  if (spec.guaranteed && spec.spot) {
    return Invalid("spot", "spot work is preempted first; it cannot be guaranteed");
  }
  ARBITER_RETURN_IF_ERROR(ValidateBurst(spec));
  ARBITER_RETURN_IF_ERROR(ValidateRecurrence(spec));
  const int64_t duration_s = absl::ToInt64Seconds(spec.duration);
  if (spec.duration < absl::ZeroDuration() || duration_s > kMaxDurationSeconds ||
      spec.duration != absl::Seconds(duration_s)) {
    return Invalid("duration_seconds",
                   absl::StrCat("must be whole seconds in 0..", kMaxDurationSeconds, ", got ",
                                absl::FormatDuration(spec.duration)));
  }
  if (spec.start_at != absl::InfinitePast()) {
    const int64_t start_s = absl::ToUnixSeconds(spec.start_at);
    if (start_s <= 0 || start_s > kMaxUnixSeconds) {
      return Invalid("start_time", "must be a time after 1970 and before 2100");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateHolder(absl::string_view field, absl::string_view holder) {
  if (holder.empty() || holder.size() > kMaxHolderLength) {
    return Invalid(
        field, absl::StrCat("must be 1..", kMaxHolderLength, " characters, got ", holder.size()));
  }
  for (char c : holder) {
    const bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                    absl::string_view("._:/@-").find(c) != absl::string_view::npos;
    if (!ok) {
      return Invalid(field,
                     "may hold only letters, digits and . _ : / @ - (e.g. pod:<namespace>/<name>)");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateWindow(const CapacityRequestSpec& spec, absl::Time now) {
  if (spec.start_at == absl::InfinitePast()) return absl::OkStatus();
  auto at = [](absl::Time t) {
    return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
  };
  if (spec.duration > absl::ZeroDuration() && spec.start_at + spec.duration <= now) {
    return Invalid("start_time", absl::StrCat("the window from ", at(spec.start_at), " to ",
                                              at(spec.start_at + spec.duration),
                                              " has already ended (now ", at(now), ")"));
  }
  if (spec.start_at < now - absl::Seconds(kMaxStartSkewSeconds)) {
    return Invalid("start_time", absl::StrCat(at(spec.start_at), " is in the past (now ", at(now),
                                              "); give a time from now on, or none to start now"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequestSpec(const CapacityRequestSpec& spec) {
  const absl::string_view key = spec.idempotency_key;
  if (key.empty()) return Invalid("idempotency_key", "must not be empty");
  if (key.size() > kMaxIdempotencyKeyLength) {
    return Invalid("idempotency_key", absl::StrCat("must be at most ", kMaxIdempotencyKeyLength,
                                                   " characters, got ", key.size()));
  }
  for (char c : key) {
    if (c < 0x21 || c > 0x7e) return Invalid("idempotency_key", "must be printable ASCII");
  }
  ARBITER_RETURN_IF_ERROR(ValidateName("team", spec.team));
  ARBITER_RETURN_IF_ERROR(ValidateName("pool", spec.pool));
  // Out of range too: the class indexes per-class counters (a finding of
  // tests/fuzz/arbitration_fuzz.cc; the API already refuses unknown numbers).
  if (spec.workload_class <= WorkloadClass::kUnspecified ||
      spec.workload_class > WorkloadClass::kExperimentation) {
    return Invalid("workload_class",
                   "must be set (TRAINING, INFERENCE, BATCH_ANALYTICS or EXPERIMENTATION)");
  }
  ARBITER_RETURN_IF_ERROR(ValidateRange("members", spec.members, 1, kMaxGangMembers));
  if (spec.topology != Topology::kAny && spec.topology != Topology::kSameNode &&
      spec.topology != Topology::kSameDomain) {
    return Invalid("topology", "must be unset, SAME_NODE or SAME_DOMAIN");
  }
  if (spec.model_profile.has_value()) {
    ARBITER_RETURN_IF_ERROR(ValidateModelProfile(*spec.model_profile));
    ARBITER_RETURN_IF_ERROR(
        ValidateRange("shape.cpu_milli", spec.shape.cpu_milli, 0, kMaxHostQuantity));
    ARBITER_RETURN_IF_ERROR(
        ValidateRange("shape.memory_mib", spec.shape.memory_mib, 0, kMaxHostQuantity));
  } else {
    ARBITER_RETURN_IF_ERROR(ValidateShape(spec.shape));
  }
  if (spec.gpu_models.size() > kMaxAllowedModels) {
    return Invalid("gpu_models", absl::StrCat("must list at most ", kMaxAllowedModels,
                                              " models, got ", spec.gpu_models.size()));
  }
  for (size_t i = 0; i < spec.gpu_models.size(); ++i) {
    ARBITER_RETURN_IF_ERROR(ValidateName(absl::StrCat("gpu_models[", i, "]"), spec.gpu_models[i]));
  }
  ARBITER_RETURN_IF_ERROR(ValidateDescription("description", spec.description));
  return ValidateScheduling(spec);
}

absl::Status ValidateSubject(absl::string_view field, absl::string_view subject) {
  if (subject.empty() || subject.size() > kMaxSubjectLength) {
    return Invalid(field, absl::StrCat("must be 1..", kMaxSubjectLength, " characters"));
  }
  for (char c : subject) {
    if (c < 0x21 || c > 0x7e) return Invalid(field, "must be printable ASCII without spaces");
  }
  if (absl::StartsWith(subject, "group:")) {
    ARBITER_RETURN_IF_ERROR(ValidateName(field, subject.substr(6)));
  }
  return absl::OkStatus();
}

absl::Status ValidateAuthorityRule(const AuthorityRule& rule) {
  if (!rule.pool.empty()) ARBITER_RETURN_IF_ERROR(ValidateName("rule.pool", rule.pool));
  if (rule.action == ApprovalAction::kUnspecified) {
    return Invalid("rule.action", "must be BORROW, GUARANTEED, LARGE, OVER_BUDGET or LONG");
  }
  if (rule.action == ApprovalAction::kGuaranteed && !rule.pool.empty()) {
    return Invalid("rule.pool",
                   "guaranteed work is approved by org-wide authority only; leave "
                   "the pool empty");
  }
  ARBITER_RETURN_IF_ERROR(ValidateSubject("rule.approver", rule.approver));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("rule.limit_milli", rule.limit_milli, kUnlimited, kMaxQuotaMilli));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("rule.threshold_milli", rule.threshold_milli, 0, kMaxQuotaMilli));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("rule.threshold_seconds", rule.threshold_seconds, 0, kMaxDurationSeconds));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("rule.limit_seconds", rule.limit_seconds, kUnlimited, kMaxDurationSeconds));
  return ValidateRange("rule.limit_micros", rule.limit_micros, kUnlimited, kMaxMicros);
}

absl::Status ValidateRoleBinding(const RoleBinding& binding) {
  ARBITER_RETURN_IF_ERROR(ValidateSubject("binding.subject", binding.subject));
  if (binding.role == Role::kUnspecified) {
    return Invalid("binding.role", "must be set");
  }
  switch (binding.scope_kind) {
    case ScopeKind::kOrg:
      if (!binding.scope.empty()) return Invalid("binding.scope", "must be empty for ORG");
      return absl::OkStatus();
    case ScopeKind::kTeam:
    case ScopeKind::kPool:
      return ValidateName("binding.scope", binding.scope);
    case ScopeKind::kUnspecified:
      break;
  }
  return Invalid("binding.scope_kind", "must be ORG, TEAM or POOL");
}

absl::Status ValidatePrice(const Price& price) {
  ARBITER_RETURN_IF_ERROR(ValidateName("price.gpu_model", price.gpu_model));
  if (price.latency_class == LatencyClass::kUnspecified) {
    return Invalid("price.latency_class", "must be SERVING, BATCH, SPOT or DEV");
  }
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("price.micros_per_gpu_hour", price.micros_per_gpu_hour, 0, kMaxMicros));
  if (price.burst_micros_per_gpu_hour != 0) {
    if (price.latency_class == LatencyClass::kSpot) {
      return Invalid("price.burst_micros_per_gpu_hour", "spot work never bursts");
    }
    ARBITER_RETURN_IF_ERROR(ValidateRange("price.burst_micros_per_gpu_hour",
                                          price.burst_micros_per_gpu_hour,
                                          price.micros_per_gpu_hour, kMaxMicros));
  }
  const int64_t from = absl::ToUnixSeconds(price.effective_from);
  if (price.effective_from == absl::InfinitePast() || from < 0 || from > kMaxUnixSeconds) {
    return Invalid("price.effective_from", "must be a time between 1970 and 2100");
  }
  return absl::OkStatus();
}

absl::Status ValidatePowerBudget(const PowerBudget& budget) {
  if (budget.scope == PowerScope::kUnspecified) {
    return Invalid("power_budget.scope", "must be POOL, RACK or SITE");
  }
  ARBITER_RETURN_IF_ERROR(ValidateName("power_budget.name", budget.name));
  return ValidateRange("power_budget.watts", budget.watts, 0, kMaxBudgetWatts);
}

absl::Status ValidateBudget(const Budget& budget) {
  ARBITER_RETURN_IF_ERROR(ValidateName("budget.team", budget.team));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("budget.hard_limit_micros", budget.hard_limit_micros, 0, kMaxMicros));
  if (budget.soft_limit_micros < 0 || budget.soft_limit_micros > budget.hard_limit_micros) {
    return Invalid("budget.soft_limit_micros",
                   absl::StrCat("must be in [0, budget.hard_limit_micros = ",
                                budget.hard_limit_micros, "], got ", budget.soft_limit_micros));
  }
  if (budget.over == OverBudget::kUnspecified) {
    return Invalid("budget.over", "must be DENY or APPROVAL");
  }
  return absl::OkStatus();
}

}  // namespace arbiter::core
