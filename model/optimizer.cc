#include "model/optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "model/thread_pool.h"

namespace dctrain {

template <typename Update>
void Optimizer::for_each_chunk(std::span<const float> parameters, std::span<uint64_t> checksums,
                               Update&& update) {
  // Callers pass lambdas that capture by value: a pointer captured by
  // reference is reloaded after every store (it might alias), which stops
  // the loop from vectorizing.
  // 16,384 floats (a checksum block): four arrays' chunks (256 KiB) stay in
  // a core's L2, so the hash reads the parameters from there.
  constexpr size_t kChunk = kChecksumBlockFloats;
  const size_t count = parameters.size();
  const bool threads = pool_ != nullptr && pool_->size() > 1 && count > kChunk;
  if (!threads && checksums.empty()) {
    update(size_t{0}, count);
    return;
  }
  const auto chunk = [&](size_t index) {
    const size_t begin = index * kChunk;
    const size_t end = std::min(count, begin + kChunk);
    update(begin, end);
    if (!checksums.empty()) checksums[index] = checksum(parameters.subspan(begin, end - begin));
  };
  const size_t chunks = checksum_blocks(count);
  if (!threads) {
    for (size_t i = 0; i < chunks; ++i) chunk(i);
    return;
  }
  pool_->parallel_for(static_cast<int64_t>(chunks),
                      [&](int64_t index, int) { chunk(static_cast<size_t>(index)); });
}

Optimizer::Optimizer(const ParamTable& table, std::vector<std::string> state_names)
    : table_(&table), state_names_(std::move(state_names)) {
  state_.reserve(state_names_.size());
  for (size_t i = 0; i < state_names_.size(); ++i) state_.emplace_back(table);
}

void Optimizer::check_step(std::span<float> parameters, std::span<const float> gradients,
                           float gradient_divisor, std::span<const uint64_t> checksums) const {
  if (!checksums.empty() && checksums.size() != checksum_blocks(parameters.size())) {
    throw std::invalid_argument(name() + " step: " + std::to_string(checksums.size()) +
                                " checksums for " + std::to_string(parameters.size()) +
                                " parameters; pass checksum_blocks() of them, or none");
  }
  if (!(gradient_divisor > 0.0f) || !std::isfinite(gradient_divisor)) {
    throw std::invalid_argument(name() + " step: gradient divisor " +
                                std::to_string(gradient_divisor) + "; it must be finite and > 0");
  }
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

namespace {

// Calls fn(std::true_type) or fn(std::false_type): a run-time flag made a
// compile-time one, so a loop specialised on it has no branch inside.
template <typename Fn>
void with_flag(bool flag, Fn&& fn) {
  if (flag) {
    fn(std::true_type{});
  } else {
    fn(std::false_type{});
  }
}

struct SgdScalars {
  float divisor, decay, momentum, neg_rate;
};

// SGD's elementwise update over [begin, end), torch's order of operations,
// one loop per combination of the flags. The arrays never overlap, and
// saying so (__restrict) is what lets every combination vectorize: without
// it the compiler guards the vector loop with overlap checks, and some
// instantiations ran the scalar fallback over the whole array (3x slower).
template <bool summed, bool decayed, bool has_momentum, bool first, bool nesterov>
void sgd_update(const SgdScalars& s, size_t begin, size_t end, float* __restrict p,
                const float* __restrict g, float* __restrict b) {
  for (size_t i = begin; i < end; ++i) {
    float d = g[i];
    if constexpr (summed) d = d / s.divisor;
    if constexpr (decayed) d = d + s.decay * p[i];
    if constexpr (has_momentum) {
      if constexpr (first) {
        b[i] = d;
      } else {
        b[i] = b[i] * s.momentum + d;
      }
      if constexpr (nesterov) {
        d = d + s.momentum * b[i];
      } else {
        d = b[i];
      }
    }
    p[i] = p[i] + s.neg_rate * d;
  }
}

}  // namespace

void Sgd::step(std::span<float> parameters, std::span<const float> gradients, double lr,
               float gradient_divisor, std::span<uint64_t> checksums) {
  check_step(parameters, gradients, gradient_divisor, checksums);
  const SgdScalars s{gradient_divisor, weight_decay_, momentum_, -static_cast<float>(lr)};
  float* p = parameters.data();
  const float* g = gradients.data();
  float* b = momentum_ == 0.0f ? nullptr : state_[0].flat().data();
  // The flags chosen outside the loop, so that each loop is branch-free.
  with_flag(s.divisor != 1.0f, [&](auto summed) {
    with_flag(s.decay != 0.0f, [&](auto decayed) {
      with_flag(b != nullptr, [&](auto has_momentum) {
        with_flag(steps_ == 0, [&](auto first) {
          with_flag(nesterov_, [&](auto nesterov) {
            for_each_chunk(parameters, checksums, [=](size_t begin, size_t end) {
              sgd_update<summed, decayed, has_momentum, first, nesterov>(s, begin, end, p, g, b);
            });
          });
        });
      });
    });
  });
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

namespace {

struct AdamWScalars {
  float divisor, decay, b1, one_minus_b1, b2, one_minus_b2, correction2_sqrt, eps, neg_step_size;
};

// AdamW's elementwise update over [begin, end), torch's order of operations,
// the gradient averaged on the way in (g[i] / divisor: the division that
// averaging the array first would do; x / 1 is x). Its divisions and square
// root per element make it bound by the divider at SSE width, so it is
// compiled for wider vectors too and the widest the CPU has is picked at
// load time. The result is the same bits on every path: IEEE division and
// square root are correctly rounded at any width, and -ffp-contract=off
// keeps multiplies and adds apart.
__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_update(
    const AdamWScalars& s, size_t begin, size_t end, float* __restrict p, const float* __restrict g,
    float* __restrict m, float* __restrict v) {
  for (size_t i = begin; i < end; ++i) {
    const float gi = g[i] / s.divisor;
    p[i] = p[i] * s.decay;
    m[i] = m[i] * s.b1 + s.one_minus_b1 * gi;
    v[i] = v[i] * s.b2 + s.one_minus_b2 * gi * gi;
    const float denom = std::sqrt(v[i]) / s.correction2_sqrt + s.eps;
    p[i] = p[i] + s.neg_step_size * (m[i] / denom);
  }
}

}  // namespace

void AdamW::step(std::span<float> parameters, std::span<const float> gradients, double lr,
                 float gradient_divisor, std::span<uint64_t> checksums) {
  check_step(parameters, gradients, gradient_divisor, checksums);
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
  const AdamWScalars scalars{gradient_divisor, decay, b1,           one_minus_b1, b2, one_minus_b2,
                             correction2_sqrt, eps,   neg_step_size};
  float* p = parameters.data();
  const float* g = gradients.data();
  float* m = state_[0].flat().data();
  float* v = state_[1].flat().data();
  for_each_chunk(parameters, checksums,
                 [=](size_t begin, size_t end) { adamw_update(scalars, begin, end, p, g, m, v); });
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, const ParamTable& table) {
  if (spec.name == "sgd") return std::make_unique<Sgd>(table, spec);
  if (spec.name == "adamw") return std::make_unique<AdamW>(table, spec);
  throw std::invalid_argument("optimizer: unknown name '" + spec.name +
                              "'; known optimizers: sgd, adamw");
}

}  // namespace dctrain
