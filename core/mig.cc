#include "core/mig.h"

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include "core/validate.h"

namespace arbiter::core {
namespace {

const std::vector<int32_t> kStarts1 = {0, 1, 2, 3, 4, 5, 6};
const std::vector<int32_t> kStarts2Double = {0, 2, 4, 6};
const std::vector<int32_t> kStarts2 = {0, 2, 4};
const std::vector<int32_t> kStarts3 = {0, 4};
const std::vector<int32_t> kStarts0 = {0};

struct Row {
  const char* name;
  int32_t id, memory_slices, compute_slices, sms;
  int64_t memory_mib;
  int32_t max_instances;
  bool media;
  const std::vector<int32_t>* starts;
};

std::vector<MigProfile> Table(std::initializer_list<Row> rows) {
  std::vector<MigProfile> out;
  for (const Row& r : rows) {
    out.push_back(MigProfile{r.name, r.id, r.memory_slices, r.compute_slices, r.sms, r.memory_mib,
                             r.max_instances, r.media, *r.starts});
  }
  return out;
}

// Memory: the usable MiB `nvidia-smi mig -lgip` reports where a transcript
// exists; otherwise the profile's nominal size less 256 MiB, as observed for
// the A100-40GB 3g.20gb (20224 MiB). The H200's names, SMs, memory, counts
// and placements are a real H200's `-lgip` and `-lgipp` (driver 580.159.04,
// tests/agent/fixtures/nvidia-smi; nvidia_smi_test checks the table).
//
// B200 (180 GB; the catalog's "B200", catalog/gpu-models.json):
//   - names, memory and compute slices, and instance counts: NVIDIA's MIG
//     User Guide, "Supported MIG Profiles", table "GPU Instance Profiles on
//     B200" (docs.nvidia.com/datacenter/tesla/mig-user-guide/
//     supported-mig-profiles.html);
//   - ids 19, 20, 15, 14 and SMs 18, 18, 30, 36 of 1g.23gb, 1g.23gb+me,
//     1g.45gb and 2g.45gb, and their memory: real B200 `nvidia-smi mig -lgip`
//     outputs in NVIDIA/mig-parted#166 and #187 (gpu-operator#1242, #1351).
//     One driver reports 22.00 GiB for the 1g profiles, a later one 20.50
//     GiB: the table takes the smaller (20992 MiB); 44.25 GiB (45312 MiB)
//     for the 2-slice ones;
//   - not found in any transcript, so inferred as the shipped catalog has
//     them: the ids of 3g.90gb, 4g.90gb and 7g.180gb (9, 5, 0, as on every
//     A100/H100/H200); their SMs (54 and 72: 18 per compute slice, as the 1g
//     and 2g rows; 148 for 7g, the whole GPU's, which keeps MigMilli of any
//     instance at or under its share of the physical GPU); their memory (2
//     and 4 times the 2-slice figure: 90624 and 181248 MiB); and every start
//     slot (the A100/H100 geometry: NVIDIA's table gives the B200 the same
//     memory fractions and counts). Nodes that report their placements
//     override the slots (Gpu::reported_mig). NVIDIA's go-nvml mock
//     (pkg/nvml/mock/shared/gpus/b200.go) is not used: its placement sizes
//     for Hopper parts are contradicted by real hardware.
const std::map<std::string, std::vector<MigProfile>, std::less<>>& Catalog() {
  static const auto* const kCatalog =
      new std::map<std::string, std::vector<MigProfile>, std::less<>>{
          {"A100-40GB", Table({{"1g.5gb", 19, 1, 1, 14, 4864, 7, false, &kStarts1},
                               {"1g.5gb+me", 20, 1, 1, 14, 4864, 1, true, &kStarts1},
                               {"1g.10gb", 15, 2, 1, 14, 9984, 4, false, &kStarts2Double},
                               {"2g.10gb", 14, 2, 2, 28, 9984, 3, false, &kStarts2},
                               {"3g.20gb", 9, 4, 3, 42, 20224, 2, false, &kStarts3},
                               {"4g.20gb", 5, 4, 4, 56, 20224, 1, false, &kStarts0},
                               {"7g.40gb", 0, 8, 7, 98, 40704, 1, false, &kStarts0}})},
          {"A100-80GB", Table({{"1g.10gb", 19, 1, 1, 14, 9728, 7, false, &kStarts1},
                               {"1g.10gb+me", 20, 1, 1, 14, 9728, 1, true, &kStarts1},
                               {"1g.20gb", 15, 2, 1, 14, 20224, 4, false, &kStarts2Double},
                               {"2g.20gb", 14, 2, 2, 28, 19968, 3, false, &kStarts2},
                               {"3g.40gb", 9, 4, 3, 42, 40448, 2, false, &kStarts3},
                               {"4g.40gb", 5, 4, 4, 56, 40448, 1, false, &kStarts0},
                               {"7g.80gb", 0, 8, 7, 98, 81152, 1, false, &kStarts0}})},
          {"H100-80GB", Table({{"1g.10gb", 19, 1, 1, 16, 9984, 7, false, &kStarts1},
                               {"1g.10gb+me", 20, 1, 1, 16, 9984, 1, true, &kStarts1},
                               {"1g.20gb", 15, 2, 1, 26, 20091, 4, false, &kStarts2Double},
                               {"2g.20gb", 14, 2, 2, 32, 20091, 3, false, &kStarts2},
                               {"3g.40gb", 9, 4, 3, 60, 40448, 2, false, &kStarts3},
                               {"4g.40gb", 5, 4, 4, 64, 40448, 1, false, &kStarts0},
                               {"7g.80gb", 0, 8, 7, 132, 81152, 1, false, &kStarts0}})},
          {"H200-141GB", Table({{"1g.18gb", 19, 1, 1, 16, 16384, 7, false, &kStarts1},
                                {"1g.18gb+me", 20, 1, 1, 16, 16384, 1, true, &kStarts1},
                                {"1g.35gb", 15, 2, 1, 26, 33280, 4, false, &kStarts2Double},
                                {"2g.35gb", 14, 2, 2, 32, 33280, 3, false, &kStarts2},
                                {"3g.71gb", 9, 4, 3, 60, 71424, 2, false, &kStarts3},
                                {"4g.71gb", 5, 4, 4, 64, 71424, 1, false, &kStarts0},
                                {"7g.141gb", 0, 8, 7, 132, 143360, 1, false, &kStarts0}})},
          {"B200", Table({{"1g.23gb", 19, 1, 1, 18, 20992, 7, false, &kStarts1},
                          {"1g.23gb+me", 20, 1, 1, 18, 20992, 1, true, &kStarts1},
                          {"1g.45gb", 15, 2, 1, 30, 45312, 4, false, &kStarts2Double},
                          {"2g.45gb", 14, 2, 2, 36, 45312, 3, false, &kStarts2},
                          {"3g.90gb", 9, 4, 3, 54, 90624, 2, false, &kStarts3},
                          {"4g.90gb", 5, 4, 4, 72, 90624, 1, false, &kStarts0},
                          {"7g.180gb", 0, 8, 7, 148, 181248, 1, false, &kStarts0}})},
      };
  return *kCatalog;
}

// Tries to add `profile` at its lowest valid start; true if it was added.
bool TryAdd(const std::vector<MigProfile>& profiles, const MigProfile& profile,
            std::vector<MigInstance>& layout) {
  for (int32_t start : profile.start_slots) {
    layout.push_back(MigInstance{profile.name, start, false});
    if (ValidateMigLayout(profiles, layout).ok()) return true;
    layout.pop_back();
  }
  return false;
}

}  // namespace

const std::vector<MigProfile>* BuiltinMigProfiles(absl::string_view model) {
  auto it = Catalog().find(model);
  return it == Catalog().end() ? nullptr : &it->second;
}

const MigProfile* FindMigProfile(const std::vector<MigProfile>& profiles, absl::string_view name) {
  for (const MigProfile& p : profiles) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

int64_t MigMilli(const std::vector<MigProfile>& profiles, const MigProfile& profile) {
  int32_t full = 0;
  for (const MigProfile& p : profiles) full = std::max(full, p.sm_count);
  if (full == 0) return 0;
  return int64_t{profile.sm_count} * 1000 / full;  // Rounded down.
}

absl::Status ValidateMigLayout(const std::vector<MigProfile>& profiles,
                               const std::vector<MigInstance>& layout) {
  if (layout.size() > static_cast<size_t>(kMigMaxInstances)) {
    return absl::FailedPreconditionError("more than 7 MIG instances");
  }
  bool used[kMigMemorySlots] = {};
  int32_t compute = 0;
  int32_t media = 0;
  std::map<std::string, int32_t> count;
  for (const MigInstance& inst : layout) {
    const MigProfile* p = FindMigProfile(profiles, inst.profile);
    if (p == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("unknown MIG profile ", inst.profile));
    }
    if (std::find(p->start_slots.begin(), p->start_slots.end(), inst.start) ==
        p->start_slots.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(inst.profile, " cannot start at memory slot ", inst.start));
    }
    for (int32_t s = inst.start; s < inst.start + p->memory_slices; ++s) {
      if (s >= kMigMemorySlots || used[s]) {
        return absl::FailedPreconditionError(
            absl::StrCat(inst.profile, "@", inst.start, " overlaps another instance"));
      }
      used[s] = true;
    }
    compute += p->compute_slices;
    media += p->media_extensions ? 1 : 0;
    if (++count[p->name] > p->max_instances) {
      return absl::FailedPreconditionError(absl::StrCat("too many ", p->name, " instances"));
    }
  }
  if (compute > kMigComputeSlices) {
    return absl::FailedPreconditionError("more than 7 compute slices");
  }
  if (media > 1) return absl::FailedPreconditionError("more than one +me instance");
  return absl::OkStatus();
}

std::vector<MigInstance> PlanMigLayout(const std::vector<MigProfile>& profiles,
                                       const MigProfile& wanted,
                                       const std::vector<std::string>& fill_order) {
  std::vector<MigInstance> layout;
  if (!TryAdd(profiles, wanted, layout)) return {};
  while (TryAdd(profiles, wanted, layout)) {
  }
  for (const std::string& name : fill_order) {
    const MigProfile* p = FindMigProfile(profiles, name);
    if (p == nullptr || p->media_extensions) continue;
    while (TryAdd(profiles, *p, layout)) {
    }
  }
  std::sort(layout.begin(), layout.end(),
            [](const MigInstance& a, const MigInstance& b) { return a.start < b.start; });
  return layout;
}

std::string FormatMigLayout(const std::vector<MigInstance>& layout) {
  return absl::StrJoin(layout, ",", [](std::string* out, const MigInstance& i) {
    absl::StrAppend(out, i.profile, "@", i.start);
  });
}

absl::Status ParseMigLayout(absl::string_view text, std::vector<MigInstance>* layout) {
  layout->clear();
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> pieces = absl::StrSplit(part, '@');
    int32_t start = 0;
    if (pieces.size() != 2 || pieces[0].empty() || !absl::SimpleAtoi(pieces[1], &start)) {
      return absl::InvalidArgumentError(absl::StrCat("malformed MIG layout '", text, "'"));
    }
    layout->push_back(MigInstance{std::string(pieces[0]), start, false});
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<MigProfile>> ApplyReportedPlacements(
    const std::vector<MigProfile>& table, const std::vector<MigPlacementReport>& reported,
    absl::string_view field) {
  std::vector<MigProfile> out;
  for (size_t i = 0; i < reported.size(); ++i) {
    const MigPlacementReport& r = reported[i];
    const std::string where = absl::StrCat(field, "[", i, "]");
    const MigProfile* known = FindMigProfile(table, r.profile);
    if (known == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".profile: '", r.profile, "' is not a MIG profile of this model"));
    }
    if (FindMigProfile(out, r.profile) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".profile: '", r.profile, "' is reported twice"));
    }
    if (r.start_slots.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".start_slots: must not be empty"));
    }
    MigProfile p = *known;
    p.start_slots.clear();
    for (int32_t s : r.start_slots) {
      if (s < 0 || s > kMigMemorySlots - known->memory_slices ||
          std::find(p.start_slots.begin(), p.start_slots.end(), s) != p.start_slots.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".start_slots: slot ", s, " is out of range or repeated for ", r.profile));
      }
      p.start_slots.push_back(s);
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string FormatMigReports(const std::vector<MigPlacementReport>& reported) {
  return absl::StrJoin(reported, ";", [](std::string* out, const MigPlacementReport& r) {
    absl::StrAppend(out, r.profile, ":", absl::StrJoin(r.start_slots, ","));
  });
}

absl::Status ParseMigReports(absl::string_view text, std::vector<MigPlacementReport>* reported) {
  reported->clear();
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view part : absl::StrSplit(text, ';')) {
    std::vector<absl::string_view> pieces = absl::StrSplit(part, ':');
    if (pieces.size() != 2 || pieces[0].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("malformed MIG placements '", text, "'"));
    }
    MigPlacementReport r;
    r.profile = std::string(pieces[0]);
    for (absl::string_view slot : absl::StrSplit(pieces[1], ',')) {
      int32_t s = 0;
      if (!absl::SimpleAtoi(slot, &s)) {
        return absl::InvalidArgumentError(absl::StrCat("malformed MIG placements '", text, "'"));
      }
      r.start_slots.push_back(s);
    }
    reported->push_back(std::move(r));
  }
  return absl::OkStatus();
}

std::string FormatMigProfiles(const std::vector<MigProfile>& profiles) {
  std::vector<std::string> parts;
  parts.reserve(profiles.size());
  for (const MigProfile& p : profiles) {
    parts.push_back(absl::StrCat(p.name, "/", p.profile_id, "/", p.memory_slices, "/",
                                 p.compute_slices, "/", p.sm_count, "/", p.memory_mib, "/",
                                 p.max_instances, "/", p.media_extensions ? 1 : 0, "/",
                                 absl::StrJoin(p.start_slots, "+")));
  }
  return absl::StrJoin(parts, ";");
}

absl::Status ParseMigProfiles(absl::string_view text, std::vector<MigProfile>* profiles) {
  profiles->clear();
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view one : absl::StrSplit(text, ';')) {
    const std::vector<absl::string_view> f = absl::StrSplit(one, '/');
    MigProfile p;
    int32_t me = 0;
    bool ok = f.size() == 9 && !f[0].empty() && absl::SimpleAtoi(f[1], &p.profile_id) &&
              absl::SimpleAtoi(f[2], &p.memory_slices) &&
              absl::SimpleAtoi(f[3], &p.compute_slices) && absl::SimpleAtoi(f[4], &p.sm_count) &&
              absl::SimpleAtoi(f[5], &p.memory_mib) && absl::SimpleAtoi(f[6], &p.max_instances) &&
              absl::SimpleAtoi(f[7], &me);
    if (ok) {
      p.name = std::string(f[0]);
      p.media_extensions = me != 0;
      for (absl::string_view start : absl::StrSplit(f[8], '+', absl::SkipEmpty())) {
        int32_t slot = 0;
        ok = ok && absl::SimpleAtoi(start, &slot);
        p.start_slots.push_back(slot);
      }
    }
    if (!ok) return absl::DataLossError(absl::StrCat("malformed MIG profile '", one, "'"));
    profiles->push_back(std::move(p));
  }
  return absl::OkStatus();
}

absl::Status ValidateMigProfiles(const std::vector<MigProfile>& profiles, absl::string_view field) {
  auto invalid = [&](size_t i, absl::string_view what, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "].", what, ": ", why));
  };
  for (size_t i = 0; i < profiles.size(); ++i) {
    const MigProfile& p = profiles[i];
    if (absl::Status name = ValidateMigProfileName(absl::StrCat(field, "[", i, "].name"), p.name);
        !name.ok()) {
      return name;
    }
    for (size_t j = 0; j < i; ++j) {
      if (profiles[j].name == p.name) return invalid(i, "name", "given twice");
    }
    if (p.memory_slices < 1 || p.memory_slices > kMigMemorySlots) {
      return invalid(i, "memory_slices", "must be in [1, 8]");
    }
    if (p.compute_slices < 1 || p.compute_slices > kMigComputeSlices) {
      return invalid(i, "compute_slices", "must be in [1, 7]");
    }
    if (p.sm_count < 1) return invalid(i, "sm_count", "must be > 0");
    if (p.memory_mib < 1) return invalid(i, "memory_mib", "must be > 0");
    // NVML's GPU-instance profile ids are small (0..~20 today).
    if (p.profile_id < 0 || p.profile_id > kMaxMigProfileId) {
      return invalid(i, "profile_id", absl::StrCat("must be in [0, ", kMaxMigProfileId, "]"));
    }
    if (p.max_instances < 1 || p.max_instances > kMigMaxInstances) {
      return invalid(i, "max_instances", "must be in [1, 7]");
    }
    if (p.start_slots.empty()) return invalid(i, "start_slots", "must list at least one slot");
    for (size_t k = 0; k < p.start_slots.size(); ++k) {
      const int32_t start = p.start_slots[k];
      // Compared so that no slot overflows.
      if (start < 0 || start > kMigMemorySlots - p.memory_slices) {
        return invalid(i, "start_slots",
                       absl::StrCat("an instance of ", p.memory_slices,
                                    " memory slices cannot start at slot ", start));
      }
      if (std::find(p.start_slots.begin(), p.start_slots.begin() + k, start) !=
          p.start_slots.begin() + k) {
        return invalid(i, "start_slots", absl::StrCat("slot ", start, " is given twice"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace arbiter::core
