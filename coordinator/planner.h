// The plan of a step: the global batch cut into micro-batches taken from the
// head of the ledger (requeued ones first), dealt to the live workers
// round-robin from a rank that moves by one each step, as evenly as whole
// micro-batches allow. At the end of an epoch a step may be short: a
// micro-batch never mixes two epochs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "coordinator/ledger.h"

namespace dctrain {

struct WorkerPlan {
  uint32_t rank = 0;
  std::vector<PlannedMicroBatch> micro_batches;
  uint64_t samples() const;
};

std::vector<WorkerPlan> plan_step(Ledger& ledger, std::span<const uint32_t> ranks, uint64_t step,
                                  uint32_t global_batch, uint32_t micro_batch);

}  // namespace dctrain
