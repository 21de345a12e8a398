// A small dense linear-program solver for the packer's pricing problems:
//
//   maximize c.x  subject to  A x <= b,  x >= 0,  with b >= 0.
//
// b >= 0 makes x = 0 feasible, so the primal simplex starts from the slack
// basis with no first phase. Bland's rule (lowest index enters, lowest basic
// index leaves on ties) keeps it from cycling on the degenerate programs that
// bin packing produces. Meant for tens of variables and at most a few hundred
// constraints: every pivot touches the whole tableau.
//
// Thread-safe (no shared state).
#pragma once

#include <vector>

namespace arbiter::core {

struct LinearProgram {
  std::vector<double> objective;                 // c, one entry per variable.
  std::vector<std::vector<double>> constraints;  // Rows of A, each as long as c.
  std::vector<double> bounds;                    // b, one per row, each >= 0.
};

struct LpSolution {
  enum class Outcome { kOptimal, kUnbounded, kIterationLimit };
  Outcome outcome = Outcome::kOptimal;
  std::vector<double> x;  // A vertex of the feasible region (optimal when kOptimal).
  double value = 0;       // c.x
};

// REQUIRES: every row has objective.size() entries; every bound is >= 0.
// `max_pivots` bounds the work; the vertex reached so far is returned with
// kIterationLimit when it runs out (still feasible).
LpSolution Maximize(const LinearProgram& lp, int max_pivots = 10000);

}  // namespace arbiter::core
