#include "common/usable_values.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace dctrain {

bool usable(std::span<const float> values) {
  // |x|'s bits as an unsigned integer: NaN and infinity have larger ones
  // than any finite float, so one maximum checks all three conditions.
  uint32_t limit;
  std::memcpy(&limit, &kOverflowMagnitude, sizeof limit);
  uint32_t most = 0;
  for (float v : values) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    most = std::max(most, bits & 0x7fffffffu);
  }
  return most < limit;
}

}  // namespace dctrain
