#include "core/linear_program.h"

#include <cstddef>

namespace arbiter::core {
namespace {

constexpr double kEpsilon = 1e-9;

// The simplex tableau: one row per constraint over the variables, then the
// slacks, then the right-hand side; `reduced` holds the objective row.
class Tableau {
 public:
  explicit Tableau(const LinearProgram& lp)
      : rows_(lp.constraints.size()),
        vars_(lp.objective.size()),
        width_(vars_ + rows_ + 1),
        cells_(rows_ * width_, 0.0),
        reduced_(width_, 0.0),
        basic_(rows_) {
    for (size_t i = 0; i < rows_; ++i) {
      for (size_t j = 0; j < vars_; ++j) at(i, j) = lp.constraints[i][j];
      at(i, vars_ + i) = 1.0;
      at(i, width_ - 1) = lp.bounds[i];
      basic_[i] = vars_ + i;
    }
    for (size_t j = 0; j < vars_; ++j) reduced_[j] = lp.objective[j];
  }

  // Bland's rule: the lowest column whose reduced cost is positive, or -1.
  ptrdiff_t Entering() const {
    for (size_t j = 0; j + 1 < width_; ++j) {
      if (reduced_[j] > kEpsilon) return static_cast<ptrdiff_t>(j);
    }
    return -1;
  }

  // The ratio test for column `j`, ties to the lowest basic column; -1 when
  // the column is unbounded.
  ptrdiff_t Leaving(size_t j) const {
    ptrdiff_t best = -1;
    double best_ratio = 0;
    for (size_t i = 0; i < rows_; ++i) {
      const double a = at(i, j);
      if (a <= kEpsilon) continue;
      const double ratio = at(i, width_ - 1) / a;
      if (best < 0 || ratio < best_ratio - kEpsilon ||
          (ratio <= best_ratio + kEpsilon && basic_[i] < basic_[static_cast<size_t>(best)])) {
        best = static_cast<ptrdiff_t>(i);
        best_ratio = ratio;
      }
    }
    return best;
  }

  void Pivot(size_t row, size_t col) {
    const double p = at(row, col);
    for (size_t j = 0; j < width_; ++j) at(row, j) /= p;
    for (size_t i = 0; i < rows_; ++i) {
      if (i == row) continue;
      const double f = at(i, col);
      if (f == 0.0) continue;
      for (size_t j = 0; j < width_; ++j) at(i, j) -= f * at(row, j);
    }
    const double f = reduced_[col];
    for (size_t j = 0; j < width_; ++j) reduced_[j] -= f * at(row, j);
    basic_[row] = col;
  }

  std::vector<double> Solution() const {
    std::vector<double> x(vars_, 0.0);
    for (size_t i = 0; i < rows_; ++i) {
      if (basic_[i] < vars_) x[basic_[i]] = at(i, width_ - 1);
    }
    return x;
  }

 private:
  double& at(size_t i, size_t j) { return cells_[i * width_ + j]; }
  double at(size_t i, size_t j) const { return cells_[i * width_ + j]; }

  size_t rows_, vars_, width_;
  std::vector<double> cells_;
  std::vector<double> reduced_;
  std::vector<size_t> basic_;
};

}  // namespace

LpSolution Maximize(const LinearProgram& lp, int max_pivots) {
  Tableau tableau(lp);
  LpSolution out;
  out.outcome = LpSolution::Outcome::kIterationLimit;
  for (int pivots = 0; pivots <= max_pivots; ++pivots) {
    const ptrdiff_t col = tableau.Entering();
    if (col < 0) {
      out.outcome = LpSolution::Outcome::kOptimal;
      break;
    }
    const ptrdiff_t row = tableau.Leaving(static_cast<size_t>(col));
    if (row < 0) {
      out.outcome = LpSolution::Outcome::kUnbounded;
      break;
    }
    if (pivots == max_pivots) break;
    tableau.Pivot(static_cast<size_t>(row), static_cast<size_t>(col));
  }
  out.x = tableau.Solution();
  for (size_t j = 0; j < out.x.size(); ++j) out.value += lp.objective[j] * out.x[j];
  return out;
}

}  // namespace arbiter::core
