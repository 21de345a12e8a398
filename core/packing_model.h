// PackingModel: what the packer has learned about demand (the mix of shapes
// asked for, and of MIG profiles), the fragmentation model and share prices
// refreshed from it, and the packer's settings. A part of core::State.
//
// Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"

#include "core/coexistence.h"
#include "core/demand_profile.h"
#include "core/fragmentation.h"
#include "core/mig_fragmentation.h"
#include "core/model.h"
#include "core/share_prices.h"

namespace arbiter::core {

class PackingModel {
 public:
  // How the packer scores the places a member fits (core/placement.cc).
  //   kArbiter: share prices (fractions), then fragmentation growth with the
  //             host term, then best fit. The default.
  //   kFgd:     FGD (Weng et al., USENIX ATC 2023) as its paper's simulator
  //             runs it, to reproduce the published results: FGD's measure
  //             (FragmentationModel::Measure::kFgd) and its whole-number
  //             node score.
  //   kBestFit: the paper's best fit, with its whole-number node score.
  // The two published policies score every node of the pool (candidates()
  // does not apply) and are kept as baselines for benchmarks
  // (bench/openb/run-published).
  enum class Policy { kArbiter, kFgd, kBestFit };
  Policy policy() const { return policy_; }
  // REQUIRES: set before any demand is observed.
  void set_policy(Policy p) { policy_ = p; }

  // How the packer places a MIG instance (core/placement.cc), whatever the
  // policy above:
  //   kArbiter:  a free instance where taking it strands the least MIG
  //              capacity for the demand's mix of profiles, else an empty
  //              GPU given the layout that strands least
  //              (core/mig_fragmentation.h). The default.
  //   kFirstFit: a baseline for benchmarks (bench/openb/run-mig): the first
  //              GPU of the pool, in node order, with a free instance of the
  //              profile, else the first empty GPU that has it, laid out by
  //              PlanMigLayout with larger profiles before smaller; no
  //              demand and no fragmentation measure.
  enum class MigPolicy { kArbiter, kFirstFit };
  MigPolicy mig_policy() const { return mig_policy_; }
  void set_mig_policy(MigPolicy p) { mig_policy_ = p; }

  // How many candidate nodes the packer scores per member before it looks
  // further (0: every node of the pool). The batch comes in best-fit order,
  // so its size is also how far the score may reach past the fullest nodes
  // toward empty ones: 64 packs openb's families at least as well as 128
  // did, multi-GPU demand better, at half the scoring (docs/packing.md,
  // "How many candidates").
  static constexpr size_t kDefaultCandidates = 64;
  // How many times `candidates()` the packer scores while some demand is
  // limited to GPU models (FragmentationModel::has_model_pressure): best fit
  // alone shows it only the cluster's smallest nodes. 6 x 64 = 384.
  static constexpr size_t kLimitedDemandBatchFactor = 6;
  size_t candidates() const { return candidates_; }
  void set_candidates(size_t n) { candidates_ = n; }

  // Which classes may share a GPU or a node. Default: CoexistenceMatrix::Defaults().
  const CoexistenceMatrix& coexistence() const { return coexistence_; }
  void set_coexistence(const CoexistenceMatrix& matrix) { coexistence_ = matrix; }

  // Counts `spec`'s members in the demand mix. The fragmentation model and
  // share prices are refreshed from the mix in growing epochs (every
  // max(32, min(1024, total / 8)) members), so that the packer's cached
  // scores stay valid in between and the cost of learning stays small.
  // `cluster` gives the cluster's GPUs by model and its node types when the
  // models are refreshed (FragmentationModel::ModelPressure, TypePressure).
  void Observe(const CapacityRequestSpec& spec, absl::FunctionRef<ClusterCapacity()> cluster);
  const DemandProfile& demand() const { return demand_; }
  const FragmentationModel& fragmentation() const { return fragmentation_; }
  const SharePrices& share_prices() const { return share_prices_; }
  // Profiles to fill an empty GPU of `model` with, after the one asked for:
  // the MIG profiles seen most in requests first, then larger before smaller.
  std::vector<std::string> MigFillOrder(const GpuModel& model) const;
  // The demand's mix of `model`'s MIG profiles: members asked per profile,
  // in table order, profiles not asked for left out.
  MigMix MigMixOf(const GpuModel& model) const;

 private:
  Policy policy_ = Policy::kArbiter;
  MigPolicy mig_policy_ = MigPolicy::kArbiter;
  size_t candidates_ = kDefaultCandidates;
  CoexistenceMatrix coexistence_ = CoexistenceMatrix::Defaults();
  DemandProfile demand_;
  std::map<std::string, int64_t> mig_demand_;  // Profile name -> members asked.
  FragmentationModel fragmentation_;
  SharePrices share_prices_;
  int64_t observed_since_refresh_ = 0;
};

}  // namespace arbiter::core
