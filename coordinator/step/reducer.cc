#include "coordinator/step/reducer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "comm/framing.h"
#include "comm/rank_order_sum.h"
#include "common/usable_values.h"

namespace dctrain {

Reducer::Reducer(size_t parameter_count, size_t buffer_count)
    : gradient_(parameter_count, 0.0f), statistics_(buffer_count, 0.0f) {}

void Reducer::begin(std::vector<uint32_t> ranks, bool clear) {
  std::sort(ranks.begin(), ranks.end());
  ranks_ = std::move(ranks);
  summed_ = false;
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
  if ((holding_ && !released_) || summed_ || !complete()) return;
  summed_ = true;
  if (waiting_.empty()) return;  // settled without messages (exchange) or none contributed
  sum_tensor(0, gradient_);
  if (!statistics_.empty()) sum_tensor(1, statistics_);
  waiting_.clear();
}

void Reducer::sum_tensor(size_t index, std::span<float> sum) {
  // waiting_ is ordered by rank: the sources in rank order, frame by frame
  // (every contribution was validated to the same layout).
  std::vector<const Message*> in;
  for (const auto& [rank, message] : waiting_) in.push_back(&message);
  const size_t first = first_frame_of(in.front()->envelope, index);
  std::vector<const std::byte*> sources(in.size());
  size_t frame = first;
  for (size_t begin = 0; begin < sum.size(); begin += kMaxFrameFloats, ++frame) {
    const size_t count = std::min(kMaxFrameFloats, sum.size() - begin);
    for (size_t s = 0; s < in.size(); ++s) {
      sources[s] = static_cast<const std::byte*>(in[s]->frames[frame].data());
    }
    sum_in_rank_order(sources, count, sum.data() + begin);
  }
  if (usable(sum)) return;
  // The rare unusable sum: which contributions hold such values alone, and
  // else which one's addition made a node of the tree reach them.
  std::vector<uint32_t> ranks;
  for (const auto& [rank, message] : waiting_) {
    ranks.push_back(rank);
    added_[rank];  // every contributor is named or cleared
  }
  std::optional<size_t> node;
  frame = first;
  for (size_t begin = 0; begin < sum.size(); begin += kMaxFrameFloats, ++frame) {
    const size_t count = std::min(kMaxFrameFloats, sum.size() - begin);
    for (size_t s = 0; s < in.size(); ++s) {
      const auto* bytes = static_cast<const std::byte*>(in[s]->frames[frame].data());
      sources[s] = bytes;
      std::vector<float> values(count);
      std::memcpy(values.data(), bytes, count * sizeof(float));
      if (!usable(values)) added_[ranks[s]].overflows = true;
    }
    const auto at = first_overflowing_node(sources, count, kOverflowMagnitude);
    if (at && (!node || *at < *node)) node = at;
  }
  if (node) added_[ranks[*node]].sum_overflowed = true;
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
