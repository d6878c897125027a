#include "coordinator/planes/round_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "exchange/sum_digest.h"

namespace dctrain {

RoundCheck::RoundCheck(uint32_t attempt, std::vector<uint32_t> members, uint64_t parameters,
                       uint64_t buffers, Asked asked, double asked_at)
    : attempt_(attempt),
      members_(std::move(members)),
      shape_{parameters, parameters + buffers, members_.size(), asked.buckets, asked.seed},
      asked_at_(asked_at),
      sum_key_(std::move(asked.sum_key)) {}

v1::RoundCheckRequest RoundCheck::request() const {
  v1::RoundCheckRequest r;
  r.set_attempt(attempt_);
  r.set_seed(shape_.seed);
  r.set_shards(static_cast<uint32_t>(shape_.shards));
  r.set_buckets(shape_.buckets);
  r.set_sum_key(sum_key_);
  return r;
}

std::optional<std::string> RoundCheck::take(uint32_t rank, const v1::RoundCheckAnswer& answer) {
  if (!std::binary_search(members_.begin(), members_.end(), rank)) {
    return "it is not a member of the round";
  }
  if (answered_.contains(rank) || failed_.contains(rank)) return "it answered already";
  if (answer.attempt() != attempt_ || answer.seed() != shape_.seed) {
    return fmt::format("it answers attempt {} with seed {:016x}, asked were attempt {} and {:016x}",
                       answer.attempt(), answer.seed(), attempt_, shape_.seed);
  }
  std::string problem = answer.error();
  if (problem.empty() && static_cast<size_t>(answer.values_size()) != shape_.size()) {
    problem = fmt::format("its sketch has {} values, a round of {} shards has {}",
                          answer.values_size(), shape_.shards, shape_.size());
  }
  if (problem.empty() && !std::all_of(answer.values().begin(), answer.values().end(),
                                      [](double v) { return std::isfinite(v); })) {
    problem = "its sketch holds NaN or infinite values";
  }
  // No float gradient's sketch comes near: a bucket sums at most the
  // shard's floats (< 2^128 each), and its square must not overflow.
  if (problem.empty() && !std::all_of(answer.values().begin(), answer.values().end(),
                                      [](double v) { return std::fabs(v) <= kMostSketchValue; })) {
    problem = fmt::format("its sketch holds values beyond {:g}, which no contribution can make",
                          kMostSketchValue);
  }
  const size_t tags = tagged() ? members_.size() : 0;
  if (problem.empty() && static_cast<size_t>(answer.sum_tags_size()) != tags) {
    problem = fmt::format("it gives {} tags of the sum, a round of {} shards has {}",
                          answer.sum_tags_size(), shape_.shards, tags);
  }
  if (problem.empty() &&
      !std::all_of(answer.sum_tags().begin(), answer.sum_tags().end(),
                   [](const std::string& t) { return t.size() == kSumTagBytes; })) {
    problem = fmt::format("its tags of the sum are not all {} bytes", kSumTagBytes);
  }
  if (!problem.empty()) {
    failed_[rank] = problem;
    return problem;
  }
  answered_.insert(rank);
  if (sketched()) sketches_[rank].assign(answer.values().begin(), answer.values().end());
  if (tagged()) tags_[rank].assign(answer.sum_tags().begin(), answer.sum_tags().end());
  return std::nullopt;
}

std::vector<uint32_t> RoundCheck::unanswered() const {
  std::vector<uint32_t> out;
  for (uint32_t rank : members_) {
    if (!answered_.contains(rank) && !failed_.contains(rank)) out.push_back(rank);
  }
  return out;
}

std::map<uint32_t, RoundCheck::Estimate> RoundCheck::estimate(std::span<const float> sum) const {
  const std::vector<double> whole = sketch_shards(sum, shape_);
  const size_t buckets = shape_.buckets;
  std::map<uint32_t, Estimate> out;
  std::vector<double> implied(2 * buckets);
  for (size_t owner = 0; owner < members_.size(); ++owner) {
    const uint32_t rank = members_[owner];
    const std::vector<double>& own = sketches_.at(rank);
    // Its own shard: the sum's sketch minus every other member's part.
    const size_t at = shape_.gradient_at(owner);
    std::copy_n(whole.begin() + static_cast<std::ptrdiff_t>(at), 2 * buckets, implied.begin());
    for (const auto& [other, sketch] : sketches_) {
      if (other == rank) continue;
      for (size_t b = 0; b < 2 * buckets; ++b) implied[b] -= sketch[at + b];
    }
    // Its gradient's sketch, shard by shard (its own implied), against the
    // sum's: its norm, its dot with the others' sum, and that sum's norm.
    double gradient = 0.0, statistics = 0.0, with_others = 0.0, others = 0.0;
    for (size_t shard = 0; shard < members_.size(); ++shard) {
      const size_t g = shape_.gradient_at(shard);
      const double* part = shard == owner ? implied.data() : own.data() + g;
      for (size_t b = 0; b < buckets; ++b) {
        const double rest = whole[g + b] - part[b];
        gradient += part[b] * part[b];
        with_others += part[b] * rest;
        others += rest * rest;
      }
      if (shard != owner) statistics += squared_norm(own, shape_.statistics_at(shard), buckets);
    }
    const double implied_statistics = squared_norm(implied, buckets, buckets);
    Estimate e;
    e.cosine = gradient > 0.0 && others > 0.0 ? with_others / std::sqrt(gradient * others)
                                              : std::numeric_limits<double>::quiet_NaN();
    const double implied_gradient = squared_norm(implied, 0, buckets);
    e.gradient = std::sqrt(gradient);
    e.statistics = std::sqrt(statistics + implied_statistics);
    e.implied_own = std::sqrt(implied_gradient + implied_statistics);
    e.reported_own = std::sqrt(squared_norm(own, at, 2 * buckets));
    out[rank] = e;
  }
  return out;
}

std::map<uint32_t, RoundCheck::Estimate> RoundCheck::as_reported() const {
  std::map<uint32_t, Estimate> out;
  for (const auto& [rank, sketch] : sketches_) {
    double gradient = 0.0, statistics = 0.0;
    for (size_t shard = 0; shard < members_.size(); ++shard) {
      gradient += squared_norm(sketch, shape_.gradient_at(shard), shape_.buckets);
      statistics += squared_norm(sketch, shape_.statistics_at(shard), shape_.buckets);
    }
    Estimate e;
    e.gradient = std::sqrt(gradient);
    e.statistics = std::sqrt(statistics);
    out[rank] = e;
  }
  return out;
}

std::vector<Refused> RoundCheck::judge(std::span<const float> sum, UpdateGuard& guard,
                                       uint64_t step,
                                       const std::map<uint32_t, uint64_t>& samples) const {
  // The answers as given first: a member's sketch far beyond the others'
  // (or, having computed nothing, beyond rounding) is refused before
  // anything is implied from it, since an owner's implied part is the sum
  // less the others' answers, and one inflated answer would make every
  // owner's look as large (and the median with them). Only the estimates
  // join the guard's record.
  std::vector<Refused> reported =
      judge_norms(as_reported(), guard, step, samples, "as it sketched it");
  if (!reported.empty()) return reported;
  return judge_norms(estimate(sum), guard, step, samples, "");
}

std::vector<Refused> RoundCheck::judge_norms(const std::map<uint32_t, Estimate>& estimates,
                                             UpdateGuard& guard, uint64_t step,
                                             const std::map<uint32_t, uint64_t>& samples,
                                             const std::string& reported) const {
  std::set<uint32_t> computed;
  std::map<uint32_t, Measured> measured;
  for (const auto& [rank, e] : estimates) {
    const auto n = samples.find(rank);
    if (n == samples.end() || n->second == 0) continue;  // the rounding rule below
    computed.insert(rank);
    Measured& m = measured[rank];
    m.gradient = e.gradient;
    m.statistics = e.statistics;
    m.samples = n->second;
    m.has_cosine = !std::isnan(e.cosine);
    if (m.has_cosine) m.cosine = e.cosine;
  }
  std::map<uint32_t, std::string> why;
  for (Refused& r : guard.refuse_by_norm(step, measured, reported.empty())) {
    why[r.rank] = std::move(r.why);
  }
  // A member that computed nothing contributes nothing: its part (its own
  // shard's as the sum implies it) may hold only the sum's float rounding,
  // at most about members x 2^-24 of the parts' norms (4 times that here),
  // whether or not any other member computed enough for a median.
  double total_gradient = 0.0, total_statistics = 0.0;
  for (const auto& [rank, e] : estimates) {
    if (!computed.contains(rank)) continue;
    total_gradient += e.gradient;
    total_statistics += e.statistics;
  }
  const double rounding = static_cast<double>(members_.size()) * 0x1p-22;
  for (const auto& [rank, e] : estimates) {
    if (computed.contains(rank) || why.contains(rank)) continue;
    if (e.gradient > rounding * total_gradient || e.statistics > rounding * total_statistics) {
      why[rank] = fmt::format(
          "it computed no samples, yet its part's estimated norm is {:.4g} (gradient) and {:.4g} "
          "(batch statistics), beyond the sum's rounding (guard.norm_multiple)",
          e.gradient, e.statistics);
    }
  }
  std::vector<Refused> out;
  for (auto& [rank, text] : why) {
    if (!reported.empty()) {
      text += fmt::format(" ({}: its own answer, before anything is implied from it)", reported);
      out.push_back({rank, std::move(text)});
      continue;
    }
    const Estimate& e = estimates.at(rank);
    const size_t shard = static_cast<size_t>(
        std::lower_bound(members_.begin(), members_.end(), rank) - members_.begin());
    // The sum it made of its shard implies another part than it reported:
    // the forgery is its shard's, whatever it contributed elsewhere.
    if (e.implied_own > 2.0 * e.reported_own + 1e-30) {
      text += fmt::format(
          " (estimated from sketches; as the owner of shard {}, the sum it made of it implies a "
          "part of norm {:.4g} where it reports {:.4g})",
          shard, e.implied_own, e.reported_own);
    } else {
      text += " (estimated from sketches)";
    }
    out.push_back({rank, std::move(text)});
  }
  return out;
}

}  // namespace dctrain
