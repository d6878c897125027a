// A replica of the model being trained: the model, its optimizer and the
// learning-rate schedule. Every worker and the coordinator hold one; applying
// the same update to each keeps them bit-identical.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "comm/message.h"
#include "comm/validation.h"
#include "model/lr_schedule.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "proto/config.pb.h"

namespace dctrain {

class Replica {
 public:
  // Takes `model` freshly built from the run's seed; builds the optimizer.
  Replica(std::unique_ptr<Model> model, const v1::OptimizerConfig& optimizer);

  Model& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  size_t parameter_count() const { return model_->table().total(); }
  size_t buffer_count() const { return model_->buffer_table().total(); }
  // Arenas of models without BatchNorm may be absent; these are then empty.
  std::span<float> buffers();
  std::span<float> statistics();

  // One optimizer update with the step's averaged gradient (clipped in place
  // when the run clips) and the averaged batch statistics (empty span for a
  // model without BatchNorm). Returns parameter_checksum() of the updated
  // parameters, hashed by the optimizer's pass as it wrote them (no second
  // read of the parameters).
  uint64_t apply_update(std::span<float> gradient, std::span<const float> statistics);
  // The same at a rate decided elsewhere (the coordinator's schedule, which
  // may count samples rather than updates).
  uint64_t apply_update(std::span<float> gradient, std::span<const float> statistics, double lr);
  // The same from the step's summed gradient: it is averaged (each element
  // divided by gradient_divisor, the same bits as Reducer::finish) inside
  // the optimizer's pass, or in place first when the run clips (the norm is
  // the averaged gradient's). `statistics` are averaged already.
  uint64_t apply_summed_update(std::span<float> gradient, float gradient_divisor,
                               std::span<const float> statistics, double lr);
  // The run clips the gradient's norm: the updates write the gradient given.
  bool clips() const { return clip_norm_ > 0.0; }

  // The rate of the next update, counting updates.
  double next_learning_rate() const;
  int64_t optimizer_steps() const { return optimizer_->steps(); }

  // block_checksum() of the parameters (model/param_table.h).
  uint64_t parameter_checksum();

  // The whole state as tensors (parameters, buffers, each optimizer state):
  // what a welcome and a checkpoint carry.
  std::vector<TensorSpec> state_specs();
  void add_state(Message& message);
  // Reads the state from tensors first_tensor.. of a message already checked
  // against state_specs().
  void load_state(const Message& message, size_t first_tensor, int64_t optimizer_steps);

  // Flat views of the same state, for checkpoints.
  std::vector<std::span<float>> state_views();

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  LrScheduleSpec schedule_;
  double clip_norm_ = 0.0;
  std::vector<std::string> state_tensor_names_;
  std::vector<uint64_t> block_checksums_;  // the last update's, per checksum block
};

}  // namespace dctrain
