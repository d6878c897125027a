#include "common/usable_values.h"

#include <cstdint>
#include <cstring>

namespace dctrain {

// Every value's |x| bits, as a signed integer (never negative once the sign
// bit is cleared), against the limit's: NaN and infinity have larger ones
// than any finite float, so one comparison checks all three conditions. An
// OR of comparisons of signed integers vectorizes at SSE2 width already
// (an unsigned maximum needs SSE4.1), and the widest the CPU has is picked
// at load time: the exchange checks every piece of the sum with it.
__attribute__((target_clones("avx512f", "avx2", "default"))) bool usable(
    std::span<const float> values) {
  int32_t limit;
  std::memcpy(&limit, &kOverflowMagnitude, sizeof limit);
  const float* v = values.data();
  const size_t n = values.size();
  int32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    int32_t bits;
    std::memcpy(&bits, v + i, sizeof bits);
    bad |= static_cast<int32_t>((bits & 0x7fffffff) >= limit);
  }
  return bad == 0;
}

}  // namespace dctrain
