#include "worker/delay_model.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace dctrain {

namespace {
constexpr uint64_t kDelayStream = 0x64656c6179ULL;  // "delay"
}

DelayModel::DelayModel(const v1::DelayConfig& config, uint32_t rank)
    : config_(config), rng_({config.seed(), rank, kDelayStream}) {
  slow_ = std::find(config.slow_workers().begin(), config.slow_workers().end(), rank) !=
          config.slow_workers().end();
  if (config.kind() == v1::DELAY_DROPCOMPUTE) {
    // Log-normal density (mu 4, sigma 1) at k = 1..999, normalised.
    constexpr double mu = 4.0, sigma = 1.0;
    std::vector<double> p(999);
    double total = 0.0, weighted = 0.0;
    for (int k = 1; k <= 999; ++k) {
      const double z = (std::log(k) - mu) / sigma;
      p[k - 1] = std::exp(-0.5 * z * z) / (k * sigma * std::sqrt(2.0 * std::numbers::pi));
      total += p[k - 1];
      weighted += k * p[k - 1];
    }
    mean_k_ = weighted / total;
    cdf_.resize(999);
    double run = 0.0;
    for (int k = 0; k < 999; ++k) cdf_[k] = (run += p[k] / total);
    cdf_.back() = 1.0;
  }
}

double DelayModel::draw_dropcompute_factor() {
  const double u = rng_.uniform_double();
  const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
  const auto k = static_cast<double>(std::min<ptrdiff_t>(it - cdf_.begin(), 998) + 1);
  return k / mean_k_;
}

double DelayModel::delay_after(double compute_seconds) {
  double delay = 0.0;
  switch (config_.kind()) {
    case v1::DELAY_CONSTANT:
      delay = config_.seconds();
      break;
    case v1::DELAY_EXPONENTIAL:
      delay = -config_.seconds() * std::log(1.0 - rng_.uniform_double());
      break;
    case v1::DELAY_DROPCOMPUTE: {
      // `seconds` of compute stand-in first, then the paper's delay on the
      // micro-batch's whole compute, real and stood-in.
      const double compute = compute_seconds + config_.seconds();
      delay = config_.seconds() + draw_dropcompute_factor() * compute * 0.5 * config_.factor();
      break;
    }
    case v1::DELAY_BIMODAL:
      if (rng_.uniform_double() < config_.probability()) delay = config_.stall_seconds();
      break;
    case v1::DELAY_NONE:
    case v1::DELAY_UNSET:  // the default, none
    case v1::DelayKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::DelayKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  // A slow worker is slow at everything it does in a micro-batch: its
  // compute and the injected delay that stands for more compute.
  if (slow_) delay += (config_.slowdown() - 1.0) * (compute_seconds + delay);
  return delay;
}

}  // namespace dctrain
