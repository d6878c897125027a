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
#include <map>
#include <string>
#include <vector>

#include "proto/checkpoint.pb.h"

namespace dctrain {

struct PlannedMicroBatch {
  uint64_t id = 0;  // unique within the run, from 1; 0: nothing was taken
  uint64_t epoch = 0;
  std::vector<uint64_t> samples;  // global sample ids, in order
};

struct EpochAudit {
  uint64_t epoch = 0;
  bool complete = false;             // every sample done or lost
  uint64_t done = 0;                 // samples completed exactly once
  std::vector<uint64_t> lost;        // requeue off: dropped samples, sorted
  std::vector<uint64_t> duplicated;  // completed more than once (a bug if non-empty)
  std::vector<uint64_t> missing;     // never completed nor lost (a bug once complete)
  bool ok() const { return complete && duplicated.empty() && missing.empty(); }
};

class Ledger {
 public:
  Ledger(uint64_t dataset_size, uint64_t seed, bool requeue);

  uint64_t epoch() const;
  uint64_t dataset_size() const { return dataset_size_; }
  bool requeue() const { return requeue_; }
  // Samples not yet handed out in the current epoch (requeued ones included).
  uint64_t pending() const;
  // Takes up to max_samples from the head of the queue (requeued micro-batches
  // first, whole) for `worker` in `step`. Returns an empty micro-batch when the
  // current epoch has nothing pending. A requeued micro-batch larger than
  // max_samples is split: its head is taken, the rest stays at the head.
  // The queue order does not depend on the order of drop() calls: requeued
  // micro-batches go back to where they were in the epoch's permutation.
  PlannedMicroBatch take(uint64_t max_samples, uint64_t step, uint32_t worker);
  // complete() and drop() throw std::out_of_range for a micro-batch that is
  // not in flight (never planned, already completed or dropped).
  void complete(uint64_t microbatch_id);
  void drop(uint64_t microbatch_id);    // requeue to the head, or lose
  void orphan_worker(uint32_t worker);  // drop everything in flight on it
  void drop_all_in_flight();            // e.g. after restoring a checkpoint
  bool is_in_flight(uint64_t microbatch_id) const;
  // True when every sample of the current epoch is done (or lost).
  bool epoch_complete() const;
  // Moves to the next epoch's permutation; only when epoch_complete().
  void start_next_epoch();
  EpochAudit audit() const;  // of the current epoch

  // The whole state, in-flight micro-batches included, as checkpoints store
  // it. restore(state()) is the same ledger: the same state() and the same
  // answers to every later call. restore() throws std::invalid_argument
  // naming the first inconsistency (a micro-batch that is not the run of the
  // epoch's permutation it claims, a sample id out of range, ...).
  v1::LedgerState state() const;
  static Ledger restore(const v1::LedgerState& state);

 private:
  Ledger() = default;  // for restore()
  struct InFlight {
    uint64_t step = 0;
    uint32_t worker = 0;
    uint64_t position = 0;  // of its first sample in the epoch's permutation
    std::vector<uint64_t> samples;
  };
  void build_permutation();
  void drop_entry(std::map<uint64_t, InFlight>::iterator entry);

  uint64_t dataset_size_ = 0;
  uint64_t seed_ = 0;
  bool requeue_ = true;
  uint64_t epoch_ = 0;
  std::vector<uint64_t> permutation_;  // this epoch's order, a function of (seed, epoch)
  uint64_t cursor_ = 0;                // next position of permutation_ never handed out
  uint64_t next_microbatch_id_ = 1;
  // Requeued micro-batches by permutation position: the head of the queue
  // is the first. Every sample of one is a contiguous run of permutation_.
  std::map<uint64_t, std::vector<uint64_t>> requeued_;
  uint64_t requeued_samples_ = 0;
  std::map<uint64_t, InFlight> in_flight_;  // by micro-batch id
  std::vector<uint8_t> completions_;        // per sample id, this epoch (saturates at 255)
  std::vector<uint64_t> lost_;              // this epoch, in the order lost
};

}  // namespace dctrain
