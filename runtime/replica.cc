#include "runtime/replica.h"

#include <stdexcept>

#include "comm/framing.h"
#include "model/grad_clip.h"
#include "runtime/setup.h"

namespace dctrain {

Replica::Replica(std::unique_ptr<Model> model, const v1::OptimizerConfig& optimizer)
    : model_(std::move(model)),
      optimizer_(make_optimizer(optimizer_spec(optimizer), model_->table())),
      schedule_(schedule_spec(optimizer)),
      clip_norm_(optimizer.clip_norm()) {
  validate(schedule_);
  optimizer_->set_thread_pool(model_->thread_pool());
  state_tensor_names_ = {"parameters", "buffers"};
  for (const std::string& name : optimizer_->state_names()) {
    state_tensor_names_.push_back("optimizer." + name);
  }
}

double Replica::next_learning_rate() const {
  return learning_rate(schedule_, optimizer_->steps());
}

uint64_t Replica::apply_update(std::span<float> gradient, std::span<const float> statistics) {
  return apply_update(gradient, statistics, next_learning_rate());
}

uint64_t Replica::apply_update(std::span<float> gradient, std::span<const float> statistics,
                               double lr) {
  return apply_summed_update(gradient, 1.0f, statistics, lr);
}

uint64_t Replica::apply_summed_update(std::span<float> gradient, float gradient_divisor,
                                      std::span<const float> statistics, double lr) {
  if (clip_norm_ > 0.0) {
    if (gradient_divisor != 1.0f) {
      for (float& g : gradient) g /= gradient_divisor;
      gradient_divisor = 1.0f;
    }
    clip_grad_norm(gradient, clip_norm_);
  }
  const std::span<float> parameters = model_->parameters().flat();
  block_checksums_.resize(checksum_blocks(parameters.size()));
  optimizer_->step(parameters, gradient, lr, gradient_divisor, block_checksums_);
  if (buffer_count() > 0) model_->apply_statistics(statistics);
  return combine_block_checksums(block_checksums_, parameters.size());
}

uint64_t Replica::parameter_checksum() {
  return block_checksum(model_->parameters().flat());
}

std::span<float> Replica::buffers() {
  return buffer_count() > 0 ? model_->buffers().flat() : std::span<float>();
}

std::span<float> Replica::statistics() {
  return buffer_count() > 0 ? model_->statistics().flat() : std::span<float>();
}

std::vector<std::span<float>> Replica::state_views() {
  std::vector<std::span<float>> views;
  views.push_back(model_->parameters().flat());
  views.push_back(buffers());
  for (Arena& state : optimizer_->state()) views.push_back(state.flat());
  return views;
}

std::vector<TensorSpec> Replica::state_specs() {
  std::vector<TensorSpec> specs;
  const std::vector<std::span<float>> views = state_views();
  for (size_t i = 0; i < views.size(); ++i)
    specs.push_back({state_tensor_names_[i], views[i].size()});
  return specs;
}

void Replica::add_state(Message& message) {
  const std::vector<std::span<float>> views = state_views();
  for (size_t i = 0; i < views.size(); ++i) add_tensor(message, state_tensor_names_[i], views[i]);
}

void Replica::load_state(const Message& message, size_t first_tensor, int64_t optimizer_steps) {
  const std::vector<std::span<float>> views = state_views();
  for (size_t i = 0; i < views.size(); ++i) copy_tensor(message, first_tensor + i, views[i]);
  optimizer_->set_steps(optimizer_steps);
}

}  // namespace dctrain
