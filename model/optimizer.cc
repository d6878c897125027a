#include "model/optimizer.h"

#include <cmath>
#include <stdexcept>
#include <utility>

namespace dctrain {

Optimizer::Optimizer(const ParamTable& table, std::vector<std::string> state_names)
    : table_(&table), state_names_(std::move(state_names)) {
  state_.reserve(state_names_.size());
  for (size_t i = 0; i < state_names_.size(); ++i) state_.emplace_back(table);
}

void Optimizer::check_sizes(std::span<float> parameters, std::span<const float> gradients) const {
  if (parameters.size() != table_->total() || gradients.size() != table_->total()) {
    throw std::invalid_argument(
        name() + " step: parameters have " + std::to_string(parameters.size()) + " and gradients " +
        std::to_string(gradients.size()) + " floats, the table " + std::to_string(table_->total()) +
        "; pass arenas laid out by the optimizer's table");
  }
}

namespace {

void check_finite_non_negative(const char* what, double value) {
  if (!std::isfinite(value) || value < 0.0) {
    throw std::invalid_argument(std::string("optimizer: ") + what + " = " + std::to_string(value) +
                                "; it must be finite and >= 0");
  }
}

std::vector<std::string> sgd_state(const OptimizerSpec& spec) {
  if (spec.momentum > 0.0) return {"momentum_buffer"};
  return {};
}

}  // namespace

Sgd::Sgd(const ParamTable& table, const OptimizerSpec& spec)
    : Optimizer(table, sgd_state(spec)),
      momentum_(static_cast<float>(spec.momentum)),
      weight_decay_(static_cast<float>(spec.weight_decay)),
      nesterov_(spec.nesterov) {
  check_finite_non_negative("momentum", spec.momentum);
  check_finite_non_negative("weight_decay", spec.weight_decay);
  if (spec.nesterov && spec.momentum <= 0.0) {
    throw std::invalid_argument("sgd: nesterov needs momentum > 0 (as torch.optim.SGD)");
  }
}

void Sgd::step(std::span<float> parameters, std::span<const float> gradients, double lr) {
  check_sizes(parameters, gradients);
  const float rate = static_cast<float>(lr);
  const size_t count = parameters.size();
  float* p = parameters.data();
  const float* g = gradients.data();
  if (momentum_ == 0.0f) {
    for (size_t i = 0; i < count; ++i) {
      const float d = weight_decay_ != 0.0f ? g[i] + weight_decay_ * p[i] : g[i];
      p[i] = p[i] + -rate * d;
    }
  } else {
    float* b = state_[0].flat().data();
    const bool first = steps_ == 0;
    for (size_t i = 0; i < count; ++i) {
      float d = weight_decay_ != 0.0f ? g[i] + weight_decay_ * p[i] : g[i];
      b[i] = first ? d : b[i] * momentum_ + d;
      d = nesterov_ ? d + momentum_ * b[i] : b[i];
      p[i] = p[i] + -rate * d;
    }
  }
  ++steps_;
}

AdamW::AdamW(const ParamTable& table, const OptimizerSpec& spec)
    : Optimizer(table, {"exp_avg", "exp_avg_sq"}),
      beta1_(spec.beta1),
      beta2_(spec.beta2),
      eps_(spec.eps),
      weight_decay_(spec.weight_decay) {
  check_finite_non_negative("weight_decay", spec.weight_decay);
  check_finite_non_negative("eps", spec.eps);
  if (!(spec.beta1 >= 0.0 && spec.beta1 < 1.0 && spec.beta2 >= 0.0 && spec.beta2 < 1.0)) {
    throw std::invalid_argument("adamw: betas (" + std::to_string(spec.beta1) + ", " +
                                std::to_string(spec.beta2) + ") must each lie in [0, 1)");
  }
}

void AdamW::step(std::span<float> parameters, std::span<const float> gradients, double lr) {
  check_sizes(parameters, gradients);
  ++steps_;
  // Scalars in double, as torch computes them in Python, then cast to the
  // tensor type for the elementwise kernels.
  const double t = static_cast<double>(steps_);
  const double bias_correction1 = 1.0 - std::pow(beta1_, t);
  const double bias_correction2 = 1.0 - std::pow(beta2_, t);
  const float decay = static_cast<float>(1.0 - lr * weight_decay_);
  const float b1 = static_cast<float>(beta1_), one_minus_b1 = static_cast<float>(1.0 - beta1_);
  const float b2 = static_cast<float>(beta2_), one_minus_b2 = static_cast<float>(1.0 - beta2_);
  const float correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float eps = static_cast<float>(eps_);
  const float neg_step_size = static_cast<float>(-(lr / bias_correction1));
  float* p = parameters.data();
  const float* g = gradients.data();
  float* m = state_[0].flat().data();
  float* v = state_[1].flat().data();
  const size_t count = parameters.size();
  for (size_t i = 0; i < count; ++i) {
    p[i] = p[i] * decay;
    m[i] = m[i] * b1 + one_minus_b1 * g[i];
    v[i] = v[i] * b2 + one_minus_b2 * g[i] * g[i];
    const float denom = std::sqrt(v[i]) / correction2_sqrt + eps;
    p[i] = p[i] + neg_step_size * (m[i] / denom);
  }
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, const ParamTable& table) {
  if (spec.name == "sgd") return std::make_unique<Sgd>(table, spec);
  if (spec.name == "adamw") return std::make_unique<AdamW>(table, spec);
  throw std::invalid_argument("optimizer: unknown name '" + spec.name +
                              "'; known optimizers: sgd, adamw");
}

}  // namespace dctrain
