// The open step's book: what each worker of the step was planned, what it
// sent, and whether and why it is out of the step. A worker leaves a step
// two ways, both the book's: take_out() (it is out, and why: the
// coordinator's remove(rank, removal, why) on top) and drop() (the step is
// dropped for it through no fault of its own). The removal is recorded in
// its WorkerStep (metrics.proto), and readers of the records ask
// lost_from_step() whether it counts against the worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "proto/metrics.pb.h"
#include "proto/wire.pb.h"

namespace dctrain {

// Why a worker is out of the open step.
enum class Removal {
  // It missed the deadline, died, left, restarted, went silent, failed its
  // exchange round, or sent a contribution that was rejected.
  kLost,
  kCut,            // policy "backup": the step closed without it
  kRefusedNorm,    // the norm guard refused its contribution
  kRefusedUpdate,  // the step's update was unusable and it was named as a cause
  kDiscarded,      // the step's update was unusable; its contribution went with it
};

// The WorkerStep.refused word of a removal: "norm", "update", "discarded";
// empty for a worker lost or cut.
std::string_view refused_word(Removal removal);

// One worker's entry in the open step.
struct Planned {
  uint32_t rank = 0;
  std::set<uint64_t> micro_batches;
  std::map<uint64_t, uint64_t> sizes;  // micro-batch id -> samples
  uint64_t samples = 0;
  std::optional<v1::Contribution> contribution;
  std::optional<Removal> removed;  // out of the step, and why
  bool resync = false;             // its replica differed from the coordinator's: resend the state
  bool struck = false;             // exchange: failed a round of this step by its own fault

  bool out() const { return removed.has_value(); }
};

class StepBook {
 public:
  using Entries = std::map<uint32_t, Planned>;

  // The entry of `rank` in the step being planned.
  Planned& plan(uint32_t rank);
  // A new step: no entry.
  void clear() { entries_.clear(); }

  bool contains(uint32_t rank) const { return entries_.contains(rank); }
  Planned& at(uint32_t rank) { return entries_.at(rank); }
  const Planned& at(uint32_t rank) const { return entries_.at(rank); }
  Entries::iterator find(uint32_t rank) { return entries_.find(rank); }
  Entries::const_iterator find(uint32_t rank) const { return entries_.find(rank); }
  Entries::iterator begin() { return entries_.begin(); }
  Entries::iterator end() { return entries_.end(); }
  Entries::const_iterator begin() const { return entries_.begin(); }
  Entries::const_iterator end() const { return entries_.end(); }
  size_t size() const { return entries_.size(); }
  // Samples planned in the step, over every entry.
  uint64_t planned_samples() const;

  // Takes `rank` out of the step as `removal`, once: what it sent is
  // dropped. False when it has no entry or was out already.
  bool take_out(uint32_t rank, Removal removal);
  // The step is dropped for `rank`: what it sent is dropped, it is not out
  // (no missed step).
  void drop(uint32_t rank);

 private:
  Entries entries_;
};

// A step as the coordinator closes it: its metrics.jsonl record, and what it
// sums on the way that the record does not carry.
struct ClosedStep {
  v1::StepRecord record;
  double loss_sum = 0.0;  // over the contributions
  uint64_t loss_terms = 0, correct = 0;
  // Micro-batches planned, by worker rank (a worker that did not contribute
  // has no count of its own in the record).
  std::map<uint32_t, uint64_t> planned;
};

// Whether a worker's step record counts against it (its run of misses, the
// speed planner's estimate): it was lost from the step on its own
// parameters. Not when it was cut as a backup, refused or discarded by a
// guard (it computed), or computed on another replica (resent the state).
bool lost_from_step(const v1::WorkerStep& w);

}  // namespace dctrain
