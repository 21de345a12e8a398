// Stranded MIG capacity: FGD's fragmentation measure (core/fragmentation.h)
// applied to MIG geometry. The fragment of a GPU for a profile p is the part
// of its free compute that p cannot use because of the placement rules
// (memory start slots, overlapping ranges, `max_instances`, the 7-slice
// limit, one +me instance per GPU):
//   free(g)         = 7 - the compute slices of g's allocated instances;
//   usable(g, p)    = p's compute slices x the instances of p g can still
//                     give (MigUsableInstances);
//   stranded(g, p)  = free(g) - usable(g, p).
// The expected fragment weighs each profile of the demand mix by its share.
// The same is reported in milli-GPU, each instance counted at MigMilli.
//
// What a GPU can still give follows the packer's rules (docs/packing.md,
// "MIG"): a layout changes only while none of its instances is allocated.
//   - A GPU with an allocated instance keeps its layout: only its free
//     instances of p count for p. Its free instances of other profiles, and
//     free slices no instance covers, are stranded for p.
//   - An idle GPU (no instance allocated, partitioned or not) may be laid out
//     anew for the next request, so it gives p as many instances as fit an
//     empty GPU, whatever its current layout.
// A profile the GPU does not offer (another model's, or one its node does
// not report) strands all of its free capacity, as in FGD's measure.
//
// Quantities are integers: slices in thousandths (milli-slices), GPU in
// milli-GPU, weights as counts (e.g. members asked for).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "core/mig.h"

namespace arbiter::core {

// One profile of a MIG demand mix and its share (any non-negative count).
struct MigShare {
  std::string profile;
  int64_t weight = 0;
  bool operator==(const MigShare&) const = default;
};
using MigMix = std::vector<MigShare>;

// Stranded capacity of one GPU: compute slices x 1000, and milli-GPU.
struct MigStranded {
  int64_t milli_slices = 0;
  int64_t milli_gpu = 0;
  bool operator==(const MigStranded&) const = default;
};

// Instances of `profile` that a GPU with `layout` can still give: its free
// instances of `profile` when an instance of `layout` is allocated;
// otherwise the most that fit an empty GPU with `profiles`.
// REQUIRES: `profile` is one of `profiles`; `layout` is valid for them.
int32_t MigUsableInstances(const std::vector<MigProfile>& profiles,
                           const std::vector<MigInstance>& layout, const MigProfile& profile);

// The stranded capacity of a GPU with `layout` for demand of `profile` alone
// (all its free capacity when `profiles` has no such profile).
// REQUIRES: `layout` is valid for `profiles`, and the GPU holds no whole or
// fractional work.
MigStranded MigStrandedFor(const std::vector<MigProfile>& profiles,
                           const std::vector<MigInstance>& layout, absl::string_view profile);

// The sum over `mix` of weight x MigStrandedFor, not divided: exact, and
// comparable between GPUs for one mix. REQUIRES: as MigStrandedFor.
MigStranded MigStrandedWeighted(const std::vector<MigProfile>& profiles,
                                const std::vector<MigInstance>& layout, const MigMix& mix);

// The expected stranded capacity: MigStrandedWeighted divided by the mix's
// total weight, rounded down; zero for a mix of no weight.
MigStranded ExpectedMigStranded(const std::vector<MigProfile>& profiles,
                                const std::vector<MigInstance>& layout, const MigMix& mix);

// How MigStrandedWeighted changes when the free instance `layout[index]` is
// allocated (negative: it falls). On a GPU with an allocated instance this is
// the same on every GPU that has such a free instance; on an idle GPU it is
// never less, and it measures the layout that the allocation fixes.
// REQUIRES: as MigStrandedFor; `layout[index]` exists and is free.
MigStranded MigStrandedGrowth(const std::vector<MigProfile>& profiles,
                              const std::vector<MigInstance>& layout, size_t index,
                              const MigMix& mix);

// The layout to give an empty GPU for one instance of `wanted`: of the
// layouts that hold `wanted` and to which no further instance fits, the one
// whose MigStrandedWeighted for `mix`, once one instance of `wanted` is
// allocated, is least (milli-slices, then milli-GPU). Media-extension
// profiles appear only when wanted or asked for in `mix`. Ties go to
// `fallback` (a layout holding `wanted`, e.g. PlanMigLayout's), then to the
// first layout found in a fixed order; `fallback` is returned as it is when
// `mix` has no weight. Instances come sorted by start. Deterministic.
// REQUIRES: `wanted` is one of `profiles`.
std::vector<MigInstance> LeastStrandingMigLayout(const std::vector<MigProfile>& profiles,
                                                 const MigProfile& wanted, const MigMix& mix,
                                                 const std::vector<MigInstance>& fallback);

}  // namespace arbiter::core
