#include "bench/sim/workload.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/time/time.h"

namespace arbiter::daysim {

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int64_t Rng::Uniform(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(Next() % span);
}

int64_t Rng::Exponential(double mean) {
  const double u = static_cast<double>(Next() >> 11) * 0x1.0p-53;  // [0, 1)
  return std::llround(-std::log1p(-u) * mean);
}

double Rng::Unit() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }

double Rng::Normal() {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  double u, v, r2;  // Marsaglia's polar method: a point in the unit disc.
  do {
    u = 2.0 * Unit() - 1.0;
    v = 2.0 * Unit() - 1.0;
    r2 = u * u + v * v;
  } while (r2 >= 1.0 || r2 == 0.0);
  const double f = std::sqrt(-2.0 * std::log(r2) / r2);
  spare_normal_ = v * f;
  has_spare_normal_ = true;
  return u * f;
}

double Rng::Gamma(double shape) {
  if (shape < 1.0) return Gamma(shape + 1.0) * std::pow(Unit(), 1.0 / shape);
  if (shape == 1.0) return -std::log(Unit());
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = Normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = Unit();
    const double x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2) return d * v;  // The squeeze: no logarithms.
    if (std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return d * v;
  }
}

bool IsWeekend(const Scenario& scenario, int64_t day) {
  const absl::CivilDay civil =
      absl::ToCivilDay(scenario.start + absl::Hours(24 * day), absl::UTCTimeZone());
  const absl::Weekday w = absl::GetWeekday(civil);
  return w == absl::Weekday::saturday || w == absl::Weekday::sunday;
}

namespace {

constexpr int64_t kDay = 86'400;

void DrawPoisson(const Scenario& s, int32_t index, Rng& rng, std::vector<JobDraw>& out) {
  const StreamSpec& st = s.streams[index];
  const int64_t hours = st.to_hour - st.from_hour;
  const double mean_gap = 3600.0 * static_cast<double>(hours) / std::max(1, st.per_day);
  for (int64_t day = 0; day < s.days; ++day) {
    if (st.weekdays_only && IsWeekend(s, day)) continue;
    const int64_t from = day * kDay + st.from_hour * 3600;
    const int64_t to = day * kDay + st.to_hour * 3600;
    for (int64_t t = from + rng.Exponential(mean_gap); t < to; t += 1 + rng.Exponential(mean_gap)) {
      JobDraw& j = out.emplace_back();
      j.stream = index;
      j.arrival = t;
      j.work_seconds = rng.Uniform(st.min_work_seconds, st.max_work_seconds);
      j.idle_tail_seconds = rng.Uniform(st.min_idle_tail_seconds, st.max_idle_tail_seconds);
    }
  }
}

void DrawDaily(const Scenario& s, int32_t index, Rng& rng, std::vector<JobDraw>& out) {
  const StreamSpec& st = s.streams[index];
  for (int64_t day = 0; day < s.days; ++day) {
    if (st.weekdays_only && IsWeekend(s, day)) continue;
    for (int32_t g = 0; g < st.count; ++g) {
      JobDraw& j = out.emplace_back();
      j.stream = index;
      j.arrival = day * kDay + st.from_hour * 3600;
      j.work_seconds = rng.Uniform(st.min_work_seconds, st.max_work_seconds);
      j.idle_tail_seconds = rng.Uniform(st.min_idle_tail_seconds, st.max_idle_tail_seconds);
      j.gang = g;
    }
  }
}

}  // namespace

Workload DrawWorkload(const Scenario& s) {
  Workload w;
  for (int32_t i = 0; i < static_cast<int32_t>(s.streams.size()); ++i) {
    Rng rng(s.seed * 1'000'003 + 17 * static_cast<uint64_t>(i) + 1);
    if (s.streams[i].kind == "daily") {
      DrawDaily(s, i, rng, w.jobs);
    } else {
      DrawPoisson(s, i, rng, w.jobs);
    }
  }
  std::stable_sort(w.jobs.begin(), w.jobs.end(), [](const JobDraw& a, const JobDraw& b) {
    return std::tie(a.arrival, a.stream, a.gang) < std::tie(b.arrival, b.stream, b.gang);
  });
  const int64_t horizon = s.days * kDay;
  for (size_t i = 0; i < s.services.size(); ++i) {
    Rng rng(s.seed * 1'000'003 + 7'919 * (i + 1));
    const ServiceSpec& v = s.services[i];
    const int64_t spikes = int64_t{v.spikes_per_week} * s.days / 7;
    std::vector<int64_t>& starts = w.spikes.emplace_back();
    for (int64_t k = 0; k < spikes; ++k) starts.push_back(rng.Uniform(0, horizon - 3600));
    std::sort(starts.begin(), starts.end());
  }
  return w;
}

}  // namespace arbiter::daysim
