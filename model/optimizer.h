// Optimizers over the flat arenas, with PyTorch's exact update rules
// (torch.optim.SGD and torch.optim.AdamW, single-tensor path): every element
// is updated on its own, in float, in a fixed order of operations, so every
// replica that applies the same gradient gets the same bits.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/param_table.h"

namespace dctrain {

class ThreadPool;

struct OptimizerSpec {
  std::string name = "sgd";   // "sgd" or "adamw"
  double weight_decay = 0.0;  // sgd: added to the gradient; adamw: decoupled
  // sgd
  double momentum = 0.0;  // dampening is always 0
  bool nesterov = false;  // needs momentum > 0
  // adamw
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual std::string name() const = 0;

  // One update of `parameters` with the step's averaged gradient at
  // learning rate lr. Both spans are laid out by the table given at
  // construction.
  void step(std::span<float> parameters, std::span<const float> gradients, double lr) {
    step(parameters, gradients, lr, 1.0f);
  }
  // The same from the step's summed gradient: each element is divided by
  // `gradient_divisor` inside the update's own pass (gradients[i] / divisor,
  // the single float division that averaging the array first would do, so
  // the same bits) instead of in a pass of its own. A divisor of 1 divides
  // nothing.
  void step(std::span<float> parameters, std::span<const float> gradients, double lr,
            float gradient_divisor) {
    step(parameters, gradients, lr, gradient_divisor, {});
  }
  // The same, hashing each block of the updated parameters as it is written
  // (while in cache): `checksums[b]` gets checksum() of block b
  // (model/param_table.h, checksum_blocks(parameters.size()) of them), so
  // that combine_block_checksums() gives block_checksum(parameters) without
  // reading them again. Empty: no hashing.
  virtual void step(std::span<float> parameters, std::span<const float> gradients, double lr,
                    float gradient_divisor, std::span<uint64_t> checksums) = 0;

  // Threads for the step (not owned; nullptr: the calling thread alone). The
  // update is elementwise, so how it is split never changes a bit.
  void set_thread_pool(ThreadPool* pool) { pool_ = pool; }

  // Updates applied so far (AdamW's bias correction and SGD's first momentum
  // step depend on it); settable for checkpoint restore.
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }

  // The state tensors, one arena each, laid out by the parameter table
  // (sgd: "momentum_buffer" when momentum > 0; adamw: "exp_avg", "exp_avg_sq").
  const std::vector<std::string>& state_names() const { return state_names_; }
  std::span<Arena> state() { return state_; }

 protected:
  Optimizer(const ParamTable& table, std::vector<std::string> state_names);
  void check_step(std::span<float> parameters, std::span<const float> gradients,
                  float gradient_divisor, std::span<const uint64_t> checksums) const;
  // Runs update(begin, end) over the parameters in chunks of a checksum
  // block, on the pool's threads when there is a pool (the step is
  // memory-bound: one core does not reach the bandwidth that several do),
  // and, when `checksums` is not empty, hashes each chunk of `parameters`
  // right after its update.
  template <typename Update>
  void for_each_chunk(std::span<const float> parameters, std::span<uint64_t> checksums,
                      Update&& update);

  ThreadPool* pool_ = nullptr;

  const ParamTable* table_;
  int64_t steps_ = 0;
  std::vector<std::string> state_names_;
  std::vector<Arena> state_;
};

// torch.optim.SGD(momentum, dampening=0, nesterov, weight_decay):
//   d = g + wd * p;  b = d on the first step, else momentum * b + d;
//   d = nesterov ? d + momentum * b : b   (momentum > 0);  p = p - lr * d.
class Sgd final : public Optimizer {
 public:
  Sgd(const ParamTable& table, const OptimizerSpec& spec);
  std::string name() const override { return "sgd"; }
  using Optimizer::step;
  void step(std::span<float> parameters, std::span<const float> gradients, double lr,
            float gradient_divisor, std::span<uint64_t> checksums) override;

 private:
  float momentum_, weight_decay_;
  bool nesterov_;
};

// torch.optim.AdamW(betas, eps, weight_decay), amsgrad off:
//   p = p * (1 - lr * wd);  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
class AdamW final : public Optimizer {
 public:
  AdamW(const ParamTable& table, const OptimizerSpec& spec);
  std::string name() const override { return "adamw"; }
  using Optimizer::step;
  void step(std::span<float> parameters, std::span<const float> gradients, double lr,
            float gradient_divisor, std::span<uint64_t> checksums) override;

 private:
  double beta1_, beta2_, eps_, weight_decay_;
};

// Builds spec.name; throws std::invalid_argument for an unknown name or a bad
// hyper-parameter, saying which and what is allowed.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, const ParamTable& table);

}  // namespace dctrain
