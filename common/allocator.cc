#include "common/allocator.h"

#include <malloc.h>

namespace dctrain {

void tune_allocator() {
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
}

}  // namespace dctrain
