// The sample ledger: which sample ids of the training set are pending, in
// flight (planned to a worker in a step) or done, epoch by epoch.
//
// Each epoch visits a seeded permutation of [0, dataset_size). The planner
// takes micro-batches from the head of the queue; a micro-batch that is
// dropped, or orphaned by a worker that died or missed the deadline, goes
// back to the HEAD of the queue as the same list of samples (with requeue on),
// or is counted as lost (requeue off, as in the original DropCompute).
// A micro-batch never mixes two epochs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dctrain {

struct PlannedMicroBatch {
  uint64_t id = 0;                 // unique within the run
  uint64_t epoch = 0;
  std::vector<uint64_t> samples;   // global sample ids, in order
};

struct EpochAudit {
  uint64_t epoch = 0;
  bool complete = false;                // every sample done or lost
  uint64_t done = 0;                    // samples completed exactly once
  std::vector<uint64_t> lost;           // requeue off: dropped samples, sorted
  std::vector<uint64_t> duplicated;     // completed more than once (a bug if non-empty)
  std::vector<uint64_t> missing;        // never completed nor lost (a bug once complete)
  bool ok() const { return complete && duplicated.empty() && missing.empty(); }
};

class Ledger {
 public:
  Ledger(uint64_t dataset_size, uint64_t seed, bool requeue);

  uint64_t epoch() const;
  // Samples not yet handed out in the current epoch (requeued ones included).
  uint64_t pending() const;
  // Takes up to max_samples from the head of the queue (requeued micro-batches
  // first, whole) for `worker` in `step`. Returns an empty micro-batch when the
  // current epoch has nothing pending.
  PlannedMicroBatch take(uint64_t max_samples, uint64_t step, uint32_t worker);
  void complete(uint64_t microbatch_id);
  void drop(uint64_t microbatch_id);       // requeue to the head, or lose
  void orphan_worker(uint32_t worker);     // drop everything in flight on it
  // True when every sample of the current epoch is done (or lost).
  bool epoch_complete() const;
  // Moves to the next epoch's permutation; only when epoch_complete().
  void start_next_epoch();
  EpochAudit audit() const;                // of the current epoch

  std::string serialize() const;
  static Ledger restore(const std::string& bytes);  // throws on malformed input

 private:
  // Implementation in data/ledger.cc.
};

}  // namespace dctrain
