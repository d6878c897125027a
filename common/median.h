// The median of a set of numbers (the mean of the two middle ones for an
// even count; 0 for none), and the lower median.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace dctrain {

inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const size_t mid = values.size() / 2;
  const auto at = values.begin() + static_cast<std::ptrdiff_t>(mid);
  std::nth_element(values.begin(), at, values.end());
  if (values.size() % 2 == 1) return *at;
  const double lower = *std::max_element(values.begin(), at);
  return 0.5 * (lower + *at);
}

// The lower of the two middle ones for an even count (the middle one for an
// odd count; 0 for none): one large value among few cannot lift it.
inline double lower_median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const auto at = values.begin() + static_cast<std::ptrdiff_t>((values.size() - 1) / 2);
  std::nth_element(values.begin(), at, values.end());
  return *at;
}

}  // namespace dctrain
