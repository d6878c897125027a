#include "data/dataset.h"

namespace dctrain {

Batch Dataset::make_batch(std::span<const uint64_t> ids, const SampleContext& context) const {
  Batch batch;
  fill(ids, context, batch);
  return batch;
}

}  // namespace dctrain
