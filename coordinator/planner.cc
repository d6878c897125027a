#include "coordinator/planner.h"

namespace dctrain {

uint64_t WorkerPlan::samples() const {
  uint64_t n = 0;
  for (const PlannedMicroBatch& mb : micro_batches) n += mb.samples.size();
  return n;
}

std::vector<WorkerPlan> plan_step(Ledger& ledger, std::span<const uint32_t> ranks, uint64_t step,
                                  uint32_t global_batch, uint32_t micro_batch) {
  std::vector<WorkerPlan> plans;
  if (ranks.empty()) return plans;
  const size_t workers = ranks.size();
  const size_t count = global_batch / micro_batch;
  for (size_t i = 0; i < workers; ++i) plans.push_back(WorkerPlan{ranks[i], {}});
  // Deal round-robin so that a short step at the end of an epoch still
  // spreads its micro-batches over the workers, starting one rank further
  // each step: requeued micro-batches lead the queue, and a fixed start would
  // hand them to the same worker every step, so a worker that always misses
  // the deadline could hold the end of an epoch forever.
  const size_t first = static_cast<size_t>(step % workers);
  for (size_t k = 0; k < count; ++k) {
    WorkerPlan& plan = plans[(first + k) % workers];
    PlannedMicroBatch mb = ledger.take(micro_batch, step, plan.rank);
    if (mb.samples.empty()) break;
    plan.micro_batches.push_back(std::move(mb));
  }
  return plans;
}

}  // namespace dctrain
