#include "coordinator/step/update_guard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "comm/framing.h"
#include "comm/rank_order_sum.h"
#include "runtime/run_config.h"

namespace dctrain {

namespace {

// The bits of kOverflowMagnitude with the sign cleared; NaN and infinity have
// larger ones, so one unsigned maximum over |x|'s bits checks all three.
constexpr uint32_t kOverflowBits = 0x5f800000u;

// Frames are not guaranteed float-aligned: they are read through memcpy in
// blocks, as comm/framing.cc does.
constexpr size_t kBlock = 1024;

}  // namespace

AddedContribution add_and_measure(const Message& message, size_t index, std::span<float> sum) {
  AddedMagnitudes seen;
  size_t frame = first_frame_of(message.envelope, index);
  for (size_t begin = 0; begin < sum.size(); begin += kMaxFrameFloats, ++frame) {
    const zmq::message_t& f = message.frames[frame];
    const AddedMagnitudes m = add_contribution_measured(
        sum.subspan(begin, f.size() / sizeof(float)), static_cast<const std::byte*>(f.data()));
    seen.contribution = std::max(seen.contribution, m.contribution);
    seen.sum = std::max(seen.sum, m.sum);
  }
  AddedContribution out;
  out.overflows = seen.contribution >= kOverflowBits;
  out.sum_overflowed = seen.sum >= kOverflowBits;
  return out;
}

namespace {

// Calls visit(block, count, offset) over tensor `index` of `message` in
// blocks of at most kBlock floats copied out of its frames.
template <typename Visit>
void for_each_block(const Message& message, size_t index, Visit visit) {
  const uint64_t count = message.envelope.tensors(static_cast<int>(index)).count();
  size_t frame = first_frame_of(message.envelope, index);
  for (uint64_t begin = 0; begin < count; begin += kMaxFrameFloats, ++frame) {
    const zmq::message_t& f = message.frames[frame];
    const size_t n = f.size() / sizeof(float);
    const auto* bytes = static_cast<const unsigned char*>(f.data());
    float block[kBlock];
    for (size_t i = 0; i < n; i += kBlock) {
      const size_t m = std::min(kBlock, n - i);
      std::memcpy(block, bytes + i * sizeof(float), m * sizeof(float));
      visit(static_cast<const float*>(block), m, begin + i);
    }
  }
}

// Four partial sums: the additions of one are independent of the others',
// which keeps the loop from waiting on one chain.
template <typename Term>
double sum_of(size_t m, Term term) {
  double part[4] = {0.0, 0.0, 0.0, 0.0};
  for (size_t j = 0; j < m; ++j) part[j % 4] += term(j);
  return (part[0] + part[1]) + (part[2] + part[3]);
}

}  // namespace

double tensor_norm(const Message& message, size_t index) {
  double total = 0.0;
  for_each_block(message, index, [&](const float* block, size_t m, uint64_t) {
    total += sum_of(m, [&](size_t j) {
      const auto v = static_cast<double>(block[j]);
      return v * v;
    });
  });
  return std::sqrt(total);
}

double tensor_dot(const Message& message, size_t index, std::span<const float> with) {
  double total = 0.0;
  for_each_block(message, index, [&](const float* block, size_t m, uint64_t at) {
    total += sum_of(m, [&](size_t j) {
      return static_cast<double>(block[j]) * static_cast<double>(with[at + j]);
    });
  });
  return total;
}

bool tensors_finite(const Message& message) {
  for (const zmq::message_t& f : message.frames) {
    const size_t n = f.size() / sizeof(float);
    const auto* bytes = static_cast<const unsigned char*>(f.data());
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, bytes + i * sizeof(float), sizeof bits);
      if ((bits & 0x7f800000u) == 0x7f800000u) return false;
    }
  }
  return true;
}

UpdateGuard::UpdateGuard(const v1::GuardConfig& config)
    : config_(config),
      norm_multiple_(config.has_norm_multiple() ? config.norm_multiple() : kDefaultNormMultiple),
      record_(norm_multiple_) {}

std::vector<Refused> UpdateGuard::refuse_by_norm(uint64_t step,
                                                 const std::map<uint32_t, Measured>& measured,
                                                 bool remember) {
  if (!norm_guard()) return {};
  return record_.judge(step, measured, remember);
}

std::optional<Discard> UpdateGuard::judge(
    std::span<const float> gradient, std::span<const float> statistics,
    const std::map<uint32_t, AddedContribution>& added) const {
  const bool gradient_ok = usable(gradient);
  const bool statistics_ok = usable(statistics);
  if (gradient_ok && statistics_ok) return std::nullopt;
  Discard d;
  d.why = fmt::format("the reduced {} holds NaN, infinite or overflowing values (|x| >= 2^64)",
                      gradient_ok ? "batch statistics" : "gradient");
  for (const auto& [rank, a] : added) {
    if (a.overflows) d.culprits.push_back(rank);
  }
  if (d.culprits.empty()) {
    // Each was below the bound alone: name the one whose addition made the
    // sum overflow (the reducer marks the first of the tree's right half).
    for (const auto& [rank, a] : added) {
      if (a.sum_overflowed) {
        d.culprits.push_back(rank);
        break;
      }
    }
  }
  return d;
}

std::optional<std::string> UpdateGuard::step_closed(bool discarded, bool applied) {
  const bool bad = discarded || (!applied && nonfinite_this_step_ > 0);
  nonfinite_this_step_ = 0;
  if (!bad) {
    if (applied) bad_in_a_row_ = 0;
    return std::nullopt;
  }
  ++bad_in_a_row_;
  const uint32_t limit = config_.max_bad_steps_in_a_row();
  if (limit == 0 || bad_in_a_row_ < limit) return std::nullopt;
  return fmt::format(
      "{} steps in a row had no usable update (a reduced update with NaN, infinite or "
      "overflowing values, or contributions holding NaN or infinity): the model has diverged or "
      "a peer sends poisoned gradients; see the log for the contributions named, lower the "
      "learning rate, turn on guard.norm_multiple, or raise guard.max_bad_steps_in_a_row",
      bad_in_a_row_);
}

}  // namespace dctrain
