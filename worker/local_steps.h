// Policy "local-sgd" (local SGD, DiLoCo) on a worker: the steps it takes on
// its own between two syncs, with an optimizer of its own (the run's
// `optimizer`, whose state stays on this worker), and what it contributes
// at the sync: its parameter delta, start minus end, weighted by the loss
// terms it covered. The sync's update (the outer optimizer's step on the
// averaged delta) is applied to the parameters the period started from, so
// every replica agrees again bit for bit after it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/optimizer.h"
#include "model/param_table.h"
#include "proto/config.pb.h"

namespace dctrain {

class ThreadPool;

// Which of a plan's `micro_batches` end a local step when they are cut
// into `steps` local steps, in order, as evenly as whole micro-batches
// allow (the first ones one longer): the index of each step's last one.
// Fewer micro-batches than steps: one step each.
std::vector<size_t> local_step_ends(size_t micro_batches, uint32_t steps);

class LocalSteps {
 public:
  // `inner`: the run's optimizer config; `table`: the model's parameters.
  LocalSteps(const v1::OptimizerConfig& inner, const ParamTable& table, ThreadPool* pool);

  // A sync period begins on `parameters`: kept for the delta and to go back.
  void begin(std::span<const float> parameters);
  // One local step from the summed `gradient` of `loss_terms` terms at
  // learning rate `lr` (clipped first when the run clips); the gradient is
  // left zeroed for the next.
  void step(std::span<float> parameters, std::span<float> gradient, uint64_t loss_terms, double lr);
  // The period's contribution, written into `gradient`: (start - parameters)
  // * loss_terms, so that the sum over the workers divided by their loss
  // terms is the loss-weighted mean delta.
  void delta(std::span<const float> parameters, std::span<float> gradient,
             uint64_t loss_terms) const;
  // Puts the period's start back into `parameters` (before the sync's
  // update, or when no update comes); nothing when the period did not move
  // them or they were put back already.
  void restore(std::span<float> parameters);

  int64_t inner_steps() const { return inner_->steps(); }

 private:
  std::unique_ptr<Optimizer> inner_;
  double clip_norm_ = 0.0;
  std::vector<float> start_;
  bool moved_ = false;  // the parameters differ from start_
};

}  // namespace dctrain
