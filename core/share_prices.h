// SharePrices: what free room on a shared GPU is worth to the fractions the
// cluster is asked for, learnt from the demand mix.
//
// Best fit and FGD judge a placement by the capacity it leaves free now. On
// lumpy demand that misleads: a 320-milli fraction put beside a 470 leaves a
// 210 hole that only the rare fractions of 210 or less can fill, while beside
// a 650 (or on an empty GPU, where a 650 will join it) it leaves almost
// nothing for good. What matters is how a hole will end up filled.
//
// The prices are the dual of the fractional bin-packing LP (Gilmore and
// Gomory) over the fraction sizes of the mix:
//
//   maximize  sum_s n_s y_s
//   subject to sum_s a_s y_s <= 1  for every multiset a of sizes that fits
//             on one GPU, y >= 0,
//
// where n_s counts the fractions of size s asked for. y_s is what one
// fraction of size s is worth in GPUs when the mix is packed as well as it
// can be: 1 for one that needs a GPU of its own, 1/2 for one that pairs with
// its like, 0 for small fractions of which there are fewer than holes they
// could fill. The LP starts with one row per size; an unbounded knapsack over
// the sizes finds the patterns that the prices overvalue, and they are added
// as rows until none is left.
//
// A hole of h milli is worth V(h), the most the prices of fractions that fit
// in h add up to. Placing a fraction of size s in a hole of h loses
// V(h) - V(h - s) - y_s >= 0: what the hole could have held beyond what s
// brings. The packer places a fraction where the loss is least
// (core/placement.cc).
//
// Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

#include "core/demand_profile.h"

namespace arbiter::core {

class SharePrices {
 public:
  // The most distinct fraction sizes priced (the most frequent ones); a
  // fraction of another size is worth what fits in it.
  static constexpr size_t kMaxSizes = 48;

  // Prices the fraction sizes of `profile`. Without fractions every loss is 0.
  void Reset(const DemandProfile& profile);
  bool empty() const { return hole_value_.empty(); }

  // V(free_milli), in GPUs, in [0, 1]. 0 when empty().
  // REQUIRES: 0 <= free_milli <= 1000.
  double HoleValue(int64_t free_milli) const;
  // y_s for a priced size, else V(size). In GPUs.
  double Price(int64_t size_milli) const;
  // The value lost by placing `take` milli on a GPU with `had` free, in GPUs
  // (>= 0 up to rounding). REQUIRES: 0 < take <= had <= 1000.
  double Loss(int64_t had, int64_t take) const;

  // What a node's holes are worth as its free host can feed them together,
  // in GPUs. `free_milli` is the free milli-GPU of each of the node's GPUs,
  // sorted ascending (0: full; 1000: empty; between: a hole). First each
  // empty GPU sets aside the host share of the mix's whole-GPU work per GPU,
  // which it will need when such work fills it. Then the holes, the largest
  // first: each is worth the best of a priced size s that fits it and whose
  // mean host ask in the mix fits the host left, price(s) + V(hole - s), and
  // that size's ask is taken from the host left for the next hole. A hole no
  // fed size fits is worth 0. Equal to the sum of V(hole) when FeedsAll.
  // REQUIRES: every entry in [0, 1000].
  double FedHolesValue(absl::Span<const int64_t> free_milli, int64_t free_cpu_milli,
                       int64_t free_memory_mib) const;
  // Whether a host with this much free feeds `holes` holes, each with any
  // priced size, beside `empty_gpus` empty GPUs' whole-GPU share: when it
  // does, FedHolesValue is the sum of V(hole).
  bool FeedsAll(int64_t holes, int64_t empty_gpus, int64_t free_cpu_milli,
                int64_t free_memory_mib) const {
    return free_cpu_milli >= holes * largest_ask_cpu_milli_ + empty_gpus * gpu_share_cpu_milli_ &&
           free_memory_mib >= holes * largest_ask_memory_mib_ + empty_gpus * gpu_share_memory_mib_;
  }

  // The priced sizes and their prices, for tests and reports.
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<double>& prices() const { return prices_; }

 private:
  void SetHostAsks(const DemandProfile& profile);

  std::vector<int64_t> sizes_;
  std::vector<double> prices_;
  // Per priced size, the mean CPU and memory its fractions ask in the mix.
  std::vector<int64_t> ask_cpu_milli_;
  std::vector<int64_t> ask_memory_mib_;
  // The largest of those.
  int64_t largest_ask_cpu_milli_ = 0;
  int64_t largest_ask_memory_mib_ = 0;
  // The mix's whole-GPU work's CPU and memory per GPU: what an empty GPU
  // will take of its host.
  int64_t gpu_share_cpu_milli_ = 0;
  int64_t gpu_share_memory_mib_ = 0;
  std::vector<double> hole_value_;  // Indexed by free milli, 0..1000.
  std::vector<double> price_of_;    // Price(size), indexed by size, 0..1000.
};

}  // namespace arbiter::core
