#include "coordinator/step/reducer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "comm/framing.h"

namespace dctrain {

Reducer::Reducer(size_t parameter_count, size_t buffer_count)
    : gradient_(parameter_count, 0.0f), statistics_(buffer_count, 0.0f) {}

void Reducer::begin(std::vector<uint32_t> ranks, bool clear) {
  std::sort(ranks.begin(), ranks.end());
  ranks_ = std::move(ranks);
  next_ = 0;
  waiting_.clear();
  settled_.clear();
  added_.clear();
  released_ = false;
  if (!clear) return;
  std::fill(gradient_.begin(), gradient_.end(), 0.0f);
  std::fill(statistics_.begin(), statistics_.end(), 0.0f);
}

bool Reducer::expects(uint32_t rank) const {
  return std::binary_search(ranks_.begin(), ranks_.end(), rank) && !settled_.contains(rank);
}

bool Reducer::has(uint32_t rank) const {
  auto it = settled_.find(rank);
  return it != settled_.end() && it->second;
}

void Reducer::add(uint32_t rank, Message contribution) {
  if (!expects(rank)) return;
  settled_[rank] = true;
  if (holding_) {
    added_[rank].norm = tensor_norm(contribution, 0);
    if (!statistics_.empty()) added_[rank].statistics_norm = tensor_norm(contribution, 1);
  }
  waiting_.emplace(rank, std::move(contribution));
  advance();
}

void Reducer::settle(uint32_t rank) {
  if (!expects(rank)) return;
  settled_[rank] = true;
  advance();
}

void Reducer::set_sum(const Message& sum) {
  copy_tensor(sum, 0, gradient_);
  if (!statistics_.empty()) copy_tensor(sum, 1, statistics_);
}

void Reducer::forget(uint32_t rank) {
  if (!expects(rank)) return;
  settled_[rank] = false;
  advance();
}

bool Reducer::complete() const {
  return settled_.size() == ranks_.size();
}

void Reducer::advance() {
  if (holding_ && !released_) return;
  while (next_ < ranks_.size()) {
    const uint32_t rank = ranks_[next_];
    auto s = settled_.find(rank);
    if (s == settled_.end()) return;
    if (s->second) {
      // Settled without a message (settle()): nothing to add here.
      if (auto w = waiting_.find(rank); w != waiting_.end()) {
        AddedContribution& a = added_[rank];
        const AddedContribution g = add_and_measure(w->second, 0, gradient_);
        a.overflows = g.overflows;
        a.sum_overflowed = g.sum_overflowed;
        if (!statistics_.empty()) {
          const AddedContribution b = add_and_measure(w->second, 1, statistics_);
          a.overflows = a.overflows || b.overflows;
          a.sum_overflowed = a.sum_overflowed || b.sum_overflowed;
        }
        waiting_.erase(w);
      }
    }
    ++next_;
  }
}

std::map<uint32_t, double> Reducer::cosines_with_the_others() {
  std::map<uint32_t, double> out;
  if (!holding_ || released_) return out;
  // gradient_ holds nothing until release(): the held contributions' sum
  // meanwhile.
  for (const auto& [rank, message] : waiting_) add_and_measure(message, 0, gradient_);
  double whole = 0.0;
  for (float g : gradient_) whole += static_cast<double>(g) * g;
  for (const auto& [rank, message] : waiting_) {
    const double dot = tensor_dot(message, 0, gradient_);
    const double own = added_.at(rank).norm * added_.at(rank).norm;
    const double others = whole - 2.0 * dot + own;  // |sum - own|^2
    out[rank] = own > 0.0 && others > 1e-12 * whole ? (dot - own) / std::sqrt(own * others)
                                                    : std::numeric_limits<double>::quiet_NaN();
  }
  std::fill(gradient_.begin(), gradient_.end(), 0.0f);
  return out;
}

void Reducer::release(const std::set<uint32_t>& refused) {
  for (uint32_t rank : refused) {
    auto s = settled_.find(rank);
    if (s == settled_.end() || !s->second) continue;
    s->second = false;
    waiting_.erase(rank);
  }
  released_ = true;
  advance();
}

void Reducer::clear() {
  std::fill(gradient_.begin(), gradient_.end(), 0.0f);
  std::fill(statistics_.begin(), statistics_.end(), 0.0f);
}

void Reducer::finish(double gradient_divisor, double statistics_divisor) {
  if (gradient_divisor > 0.0) {
    const auto d = static_cast<float>(gradient_divisor);
    for (float& g : gradient_) g /= d;
  }
  if (statistics_divisor > 0.0) {
    const auto d = static_cast<float>(statistics_divisor);
    for (float& s : statistics_) s /= d;
  }
}

}  // namespace dctrain
