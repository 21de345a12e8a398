#include "core/mig_fragmentation.h"

#include <algorithm>
#include <cstddef>
#include <tuple>

namespace arbiter::core {
namespace {

constexpr int64_t kMilliPerSlice = 1000;
constexpr int64_t kMilliPerWholeGpu = 1000;

int32_t IndexOf(const std::vector<MigProfile>& profiles, absl::string_view name) {
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (profiles[i].name == name) return static_cast<int32_t>(i);
  }
  return -1;
}

// MigMilli of each profile, by index.
std::vector<int64_t> MilliOf(const std::vector<MigProfile>& profiles) {
  std::vector<int64_t> milli;
  milli.reserve(profiles.size());
  for (const MigProfile& p : profiles) milli.push_back(MigMilli(profiles, p));
  return milli;
}

// The most instances of `p` an empty GPU holds: its start slots taken
// lowest first (optimal for ranges of one length), up to its own count, the
// compute and instance limits, and one for a media-extension profile.
int32_t EmptyGpuInstances(const MigProfile& p) {
  int32_t limit = std::min({p.max_instances, kMigComputeSlices / p.compute_slices, kMigMaxInstances,
                            p.media_extensions ? 1 : kMigMaxInstances});
  std::vector<int32_t> starts = p.start_slots;
  std::sort(starts.begin(), starts.end());
  int32_t count = 0;
  int32_t next_free = 0;
  for (int32_t s : starts) {
    if (count == limit) break;
    if (s < next_free || s + p.memory_slices > kMigMemorySlots) continue;
    ++count;
    next_free = s + p.memory_slices;
  }
  return count;
}

bool AnyAllocated(const std::vector<MigInstance>& layout) {
  return std::any_of(layout.begin(), layout.end(),
                     [](const MigInstance& i) { return i.allocated; });
}

// A GPU's free capacity and, by profile index, the instances it can still
// give (see the header).
struct Room {
  int64_t free_slices = kMigComputeSlices;
  int64_t free_milli = kMilliPerWholeGpu;
  std::vector<int32_t> usable;
};

Room RoomOf(const std::vector<MigProfile>& profiles, const std::vector<int64_t>& milli,
            const std::vector<MigInstance>& layout) {
  Room room;
  room.usable.assign(profiles.size(), 0);
  const bool idle = !AnyAllocated(layout);
  for (const MigInstance& inst : layout) {
    const int32_t i = IndexOf(profiles, inst.profile);
    if (i < 0) continue;  // REQUIRES rules it out.
    if (inst.allocated) {
      room.free_slices -= profiles[i].compute_slices;
      room.free_milli -= milli[i];
    } else if (!idle) {
      ++room.usable[i];
    }
  }
  if (idle) {
    for (size_t i = 0; i < profiles.size(); ++i) room.usable[i] = EmptyGpuInstances(profiles[i]);
  }
  return room;
}

// Stranded capacity of `room` for the profile of index `i` (-1: not offered).
MigStranded StrandedIn(const std::vector<MigProfile>& profiles, const std::vector<int64_t>& milli,
                       const Room& room, int32_t i) {
  if (i < 0) return {room.free_slices * kMilliPerSlice, room.free_milli};
  const int64_t n = room.usable[i];
  return {(room.free_slices - n * profiles[i].compute_slices) * kMilliPerSlice,
          std::max<int64_t>(0, room.free_milli - n * milli[i])};
}

// A share of the mix with its profile's index (-1: not offered).
struct IndexedShare {
  int32_t index = -1;
  int64_t weight = 0;
};

std::vector<IndexedShare> IndexShares(const std::vector<MigProfile>& profiles, const MigMix& mix) {
  std::vector<IndexedShare> out;
  for (const MigShare& share : mix) {
    if (share.weight > 0) out.push_back({IndexOf(profiles, share.profile), share.weight});
  }
  return out;
}

MigStranded Weighted(const std::vector<MigProfile>& profiles, const std::vector<int64_t>& milli,
                     const Room& room, const std::vector<IndexedShare>& shares) {
  MigStranded sum;
  for (const IndexedShare& share : shares) {
    const MigStranded s = StrandedIn(profiles, milli, room, share.index);
    sum.milli_slices += share.weight * s.milli_slices;
    sum.milli_gpu += share.weight * s.milli_gpu;
  }
  return sum;
}

bool Less(const MigStranded& a, const MigStranded& b) {
  return std::tie(a.milli_slices, a.milli_gpu) < std::tie(b.milli_slices, b.milli_gpu);
}

// One place an instance may take on an empty GPU.
struct Slot {
  int32_t profile = 0;  // Index in the table.
  int32_t start = 0;
  uint32_t memory = 0;  // Bit s: memory slot s.
};

// A depth-first search over the layouts an empty GPU may take, scoring
// those that hold `wanted` and are full (no slot can be added). One use, on
// one thread.
class LayoutSearch {
 public:
  LayoutSearch(const std::vector<MigProfile>& profiles, int32_t wanted, const MigMix& mix)
      : profiles_(profiles),
        milli_(MilliOf(profiles)),
        wanted_(wanted),
        mix_(mix),
        shares_(IndexShares(profiles, mix)) {
    counts_.assign(profiles.size(), 0);
    // The wanted profile's slots first, so that layouts without it are cut
    // off as soon as its slots are passed.
    AddSlots(wanted);
    wanted_slots_ = slots_.size();
    for (size_t i = 0; i < profiles.size(); ++i) {
      const MigProfile& p = profiles[i];
      if (static_cast<int32_t>(i) == wanted || (p.media_extensions && !Asked(p.name))) continue;
      AddSlots(static_cast<int32_t>(i));
    }
  }

  // Scores `layout` as the incumbent, which only a strictly better one beats.
  void Seed(const std::vector<MigInstance>& layout) {
    std::vector<int32_t> counts(profiles_.size(), 0);
    for (const MigInstance& inst : layout) {
      const int32_t i = IndexOf(profiles_, inst.profile);
      if (i < 0) return;
      ++counts[i];
    }
    if (counts[wanted_] == 0) return;
    best_score_ = Score(counts);
    best_ = layout;
    have_best_ = true;
  }

  std::vector<MigInstance> Run() {
    Visit(0);
    std::sort(best_.begin(), best_.end(),
              [](const MigInstance& a, const MigInstance& b) { return a.start < b.start; });
    return best_;
  }

 private:
  void AddSlots(int32_t i) {
    const MigProfile& p = profiles_[i];
    for (int32_t s : p.start_slots) {
      if (s < 0 || s + p.memory_slices > kMigMemorySlots) continue;
      slots_.push_back({i, s, ((uint32_t{1} << p.memory_slices) - 1) << s});
    }
  }

  bool Asked(absl::string_view name) const {
    return std::any_of(mix_.begin(), mix_.end(),
                       [&](const MigShare& s) { return s.profile == name && s.weight > 0; });
  }

  bool Fits(const Slot& slot) const {
    const MigProfile& p = profiles_[slot.profile];
    return (memory_ & slot.memory) == 0 && compute_ + p.compute_slices <= kMigComputeSlices &&
           counts_[slot.profile] < p.max_instances &&
           static_cast<int32_t>(chosen_.size()) < kMigMaxInstances &&
           !(p.media_extensions && media_ > 0);
  }

  // The weighted stranded capacity once one instance of `wanted_` is taken.
  MigStranded Score(const std::vector<int32_t>& counts) const {
    Room room;
    room.free_slices -= profiles_[wanted_].compute_slices;
    room.free_milli -= milli_[wanted_];
    room.usable = counts;
    --room.usable[wanted_];
    return Weighted(profiles_, milli_, room, shares_);
  }

  void Visit(size_t next) {
    if (next == wanted_slots_ && counts_[wanted_] == 0) return;
    if (next == slots_.size()) {
      Leaf();
      return;
    }
    Visit(next + 1);
    const Slot& slot = slots_[next];
    if (!Fits(slot)) return;
    const MigProfile& p = profiles_[slot.profile];
    memory_ |= slot.memory;
    compute_ += p.compute_slices;
    media_ += p.media_extensions ? 1 : 0;
    ++counts_[slot.profile];
    chosen_.push_back(next);
    Visit(next + 1);
    chosen_.pop_back();
    --counts_[slot.profile];
    media_ -= p.media_extensions ? 1 : 0;
    compute_ -= p.compute_slices;
    memory_ &= ~slot.memory;
  }

  void Leaf() {
    if (counts_[wanted_] == 0) return;
    for (const Slot& slot : slots_) {
      if (Fits(slot)) return;  // Not full: a fuller layout strands no more.
    }
    const MigStranded score = Score(counts_);
    if (have_best_ && !Less(score, best_score_)) return;
    best_score_ = score;
    have_best_ = true;
    best_.clear();
    for (size_t i : chosen_) {
      best_.push_back(MigInstance{profiles_[slots_[i].profile].name, slots_[i].start, false});
    }
  }

  const std::vector<MigProfile>& profiles_;
  const std::vector<int64_t> milli_;
  const int32_t wanted_;
  const MigMix& mix_;
  const std::vector<IndexedShare> shares_;
  std::vector<Slot> slots_;
  size_t wanted_slots_ = 0;  // slots_[0, wanted_slots_) are the wanted profile's.
  // The layout being built.
  uint32_t memory_ = 0;
  int32_t compute_ = 0;
  int32_t media_ = 0;
  std::vector<int32_t> counts_;
  std::vector<size_t> chosen_;
  // The best so far.
  bool have_best_ = false;
  MigStranded best_score_;
  std::vector<MigInstance> best_;
};

}  // namespace

int32_t MigUsableInstances(const std::vector<MigProfile>& profiles,
                           const std::vector<MigInstance>& layout, const MigProfile& profile) {
  if (!AnyAllocated(layout)) return EmptyGpuInstances(profile);
  int32_t n = 0;
  for (const MigInstance& inst : layout) {
    if (!inst.allocated && inst.profile == profile.name) ++n;
  }
  return n;
}

MigStranded MigStrandedFor(const std::vector<MigProfile>& profiles,
                           const std::vector<MigInstance>& layout, absl::string_view profile) {
  const std::vector<int64_t> milli = MilliOf(profiles);
  return StrandedIn(profiles, milli, RoomOf(profiles, milli, layout), IndexOf(profiles, profile));
}

MigStranded MigStrandedWeighted(const std::vector<MigProfile>& profiles,
                                const std::vector<MigInstance>& layout, const MigMix& mix) {
  const std::vector<int64_t> milli = MilliOf(profiles);
  return Weighted(profiles, milli, RoomOf(profiles, milli, layout), IndexShares(profiles, mix));
}

MigStranded ExpectedMigStranded(const std::vector<MigProfile>& profiles,
                                const std::vector<MigInstance>& layout, const MigMix& mix) {
  int64_t total = 0;
  for (const MigShare& share : mix) total += std::max<int64_t>(0, share.weight);
  if (total == 0) return {};
  const MigStranded sum = MigStrandedWeighted(profiles, layout, mix);
  return {sum.milli_slices / total, sum.milli_gpu / total};
}

MigStranded MigStrandedGrowth(const std::vector<MigProfile>& profiles,
                              const std::vector<MigInstance>& layout, size_t index,
                              const MigMix& mix) {
  const MigStranded before = MigStrandedWeighted(profiles, layout, mix);
  std::vector<MigInstance> after = layout;
  after[index].allocated = true;
  const MigStranded now = MigStrandedWeighted(profiles, after, mix);
  return {now.milli_slices - before.milli_slices, now.milli_gpu - before.milli_gpu};
}

std::vector<MigInstance> LeastStrandingMigLayout(const std::vector<MigProfile>& profiles,
                                                 const MigProfile& wanted, const MigMix& mix,
                                                 const std::vector<MigInstance>& fallback) {
  const bool weighted =
      std::any_of(mix.begin(), mix.end(), [](const MigShare& s) { return s.weight > 0; });
  const int32_t w = IndexOf(profiles, wanted.name);
  if (!weighted || w < 0) return fallback;
  LayoutSearch search(profiles, w, mix);
  search.Seed(fallback);
  return search.Run();
}

}  // namespace arbiter::core
