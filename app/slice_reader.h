// SliceReader: the samples core::RollUp needs for consecutive slices of
// time, read once. A slice [from, to) needs the readings taken in it and,
// of each series, the last reading taken in the `before` span ahead of it
// (its span may reach into the slice). Read slice after slice, the second
// part is what the previous slice read last: when a slice starts where the
// previous one ended, only [from, to) is read from the store and the rest is
// carried over. Otherwise (the first slice, a gap, a rewind, an error) the
// whole of [from - before, to) is read. Either way RollUp gives the same
// usage: a reading earlier than the last of its series before `from` stands
// only until that one, so none of its span lies in the slice.
//
// Memory: one reading per series seen in the last `before`.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "core/telemetry.h"

namespace arbiter::app {

class SliceReader {
 public:
  // Reads the samples taken in [from, to), any order.
  using ReadFn =
      std::function<absl::StatusOr<std::vector<core::GpuSample>>(absl::Time from, absl::Time to)>;

  explicit SliceReader(absl::Duration before) : before_(before) {}

  // The samples of [from, to) and the last of each series in the `before`
  // ahead of it, any order; `read`'s error, after which the next slice
  // reads whole. REQUIRES: from < to.
  absl::StatusOr<std::vector<core::GpuSample>> Read(absl::Time from, absl::Time to,
                                                    const ReadFn& read);

 private:
  using Series = std::tuple<int64_t, int32_t, int32_t>;  // Node, GPU, MIG instance.

  const absl::Duration before_;
  absl::Time carried_to_ = absl::InfinitePast();
  // The last reading of each series before carried_to_, within `before_`.
  absl::flat_hash_map<Series, core::GpuSample> last_;
};

}  // namespace arbiter::app
