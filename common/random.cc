#include "common/random.h"

#include <cmath>
#include <numbers>

namespace dctrain {

double Rng::normal() {
  // 1 - u keeps the logarithm's argument in (0, 1].
  const double u1 = 1.0 - uniform_double();
  const double u2 = uniform_double();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace dctrain
