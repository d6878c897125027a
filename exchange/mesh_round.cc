// One round of the exchange's algorithm on one member (exchange/mesh_round.h).
#include "exchange/mesh_round.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "comm/rank_order_sum.h"
#include "common/usable_values.h"

namespace dctrain {

MeshRound::MeshRound(const RoundInputs& in, PieceSink& sink, ExchangeStats& stats,
                     Clock::time_point start)
    : id_(in.id),
      members_(in.members),
      rank_(in.rank),
      digest_(members_digest(in.members)),
      plan_(in.contribution.size(), in.members.size(), in.piece_floats),
      contribution_(in.contribution),
      own_samples_(in.samples),
      result_(in.result),
      sink_(sink),
      stats_(stats),
      start_(start) {
  const size_t n = members_.size();
  me_ = position_of(rank_);
  inputs_.resize(plan_.pieces(me_));
  for (auto& piece : inputs_) piece.resize(n);
  input_in_.assign(plan_.pieces(me_), std::vector<bool>(n, false));
  inputs_in_.assign(plan_.pieces(me_), 0);
  result_in_.resize(n);
  results_missing_.assign(n, 0);
  for (size_t p = 0; p < n; ++p) {
    if (p == me_) continue;
    result_in_[p].assign(plan_.pieces(p), false);
    results_missing_[p] = plan_.pieces(p);
    results_missing_total_ += plan_.pieces(p);
  }
  member_samples_.assign(n, std::nullopt);
  unheard_ = n - 1;
  result_samples_.assign(n, std::nullopt);
  conflict_.assign(n, false);
  if (in.digest) digester_.emplace(plan_, result_, *in.digest);
}

size_t MeshRound::position_of(uint32_t rank) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), rank);
  return (it != members_.end() && *it == rank) ? static_cast<size_t>(it - members_.begin())
                                               : members_.size();
}

bool MeshRound::is_other_member(uint32_t rank) const {
  const size_t at = position_of(rank);
  return at != members_.size() && at != me_;
}

ChunkHeader MeshRound::header(PieceKind kind, const PieceRange& p, uint64_t samples) const {
  return ChunkHeader{kind,    rank_,          static_cast<uint32_t>(members_.size()),      digest_,
                     id_,     plan_.length(), static_cast<uint32_t>(plan_.piece_floats()), p.offset,
                     p.count, samples};
}

void MeshRound::send_contribution() {
  const size_t n = members_.size();
  if (n == 1) {
    all_heard_ = start_;
    const std::byte* own[] = {reinterpret_cast<const std::byte*>(contribution_.data())};
    sum_in_rank_order(own, contribution_.size(), result_.data());
    unusable_ = !dctrain::usable(result_);
    pieces_reduced_ = inputs_.size();
    if (digester_) {
      for (size_t k = 0; k < plan_.pieces(0); ++k) digester_->landed(0, k);
    }
    return;
  }
  // Piece k to every other member before piece k + 1 to any, starting with
  // the next member, so every owner can begin summing early.
  size_t most = 0;
  for (size_t p = 0; p < n; ++p) most = std::max(most, plan_.pieces(p));
  for (size_t k = 0; k < most; ++k) {
    for (size_t step = 1; step < n; ++step) {
      const size_t to = (me_ + step) % n;
      if (k >= plan_.pieces(to)) continue;
      const PieceRange p = plan_.piece(to, k);
      sink_.send(members_[to], header(PieceKind::kContribution, p, own_samples_),
                 contribution_.data() + p.offset);
    }
  }
}

void MeshRound::reduce_piece(size_t k) {
  const PieceRange p = plan_.piece(me_, k);
  std::vector<const std::byte*> sources(members_.size());
  for (size_t m = 0; m < sources.size(); ++m) {
    sources[m] = m == me_ ? reinterpret_cast<const std::byte*>(contribution_.data() + p.offset)
                          : static_cast<const std::byte*>(inputs_[k][m].data());
  }
  if (p.count > 0) {
    const std::span<float> sum = result_.subspan(p.offset, p.count);
    const auto begin = Clock::now();
    sum_in_rank_order(sources, p.count, sum.data());
    stats_.summing += Clock::now() - begin;
    // Checked while the piece is in cache (outside the summing figure).
    unusable_ = unusable_ || !dctrain::usable(sum);
  }
  for (auto& m : inputs_[k]) m = zmq::message_t();  // the receive buffers go back now
  uint64_t total = 0;
  for (size_t m = 0; m < members_.size(); ++m) {
    total += m == me_ ? own_samples_ : member_samples_[m].value_or(0);
  }
  const ChunkHeader h = header(PieceKind::kResult, p, total);
  for (size_t m = 0; m < members_.size(); ++m) {
    if (m != me_) sink_.send(members_[m], h, result_.data() + p.offset);
  }
  if (digester_) digester_->landed(me_, k);  // after the sends: they go first
  if (++pieces_reduced_ == inputs_.size()) stats_.reduced_after = Clock::now() - start_;
}

void MeshRound::record_conflict(size_t from, uint32_t rank, const std::string& why) {
  if (!conflict_[from] && first_conflict_.empty()) {
    first_conflict_ = fmt::format("rank {}: {}", rank, why);
  }
  conflict_[from] = true;
}

std::optional<std::string> MeshRound::take(const ChunkHeader& h, zmq::message_t&& payload) {
  const size_t from = position_of(h.from);
  if (from == members_.size() || from == me_) {
    return fmt::format("a piece from rank {}, not a member", h.from);
  }
  auto conflict = [&](const std::string& why) {
    record_conflict(from, h.from, why);
    return std::nullopt;
  };
  if (auto why = round_mismatch(h, payload.size(), members_, digest_, plan_.length(),
                                plan_.piece_floats(), false)) {
    return conflict(*why);
  }
  if (h.kind == PieceKind::kContribution) {
    const auto k = plan_.piece_at(me_, h.offset, h.count);
    if (!k) {
      return conflict(fmt::format("[{}, +{}) is no piece of this peer's shard", h.offset, h.count));
    }
    if (input_in_[*k][from]) {
      return fmt::format("a second copy of rank {}'s piece at {}", h.from, h.offset);
    }
    if (member_samples_[from] && *member_samples_[from] != h.samples) {
      return conflict(
          fmt::format("reports {} samples, earlier {}", h.samples, *member_samples_[from]));
    }
    if (!member_samples_[from] && --unheard_ == 0) all_heard_ = Clock::now();
    member_samples_[from] = h.samples;
    input_in_[*k][from] = true;
    inputs_[*k][from] = std::move(payload);
    ++stats_.pieces_received;
    stats_.bytes_received += h.count * sizeof(float);
    if (++inputs_in_[*k] == members_.size() - 1) reduce_piece(*k);
    return std::nullopt;
  }
  const auto k = plan_.piece_at(from, h.offset, h.count);
  if (!k) return conflict(fmt::format("[{}, +{}) is no piece of its shard", h.offset, h.count));
  if (result_in_[from][*k]) {
    return fmt::format("a second copy of rank {}'s sum at {}", h.from, h.offset);
  }
  if (result_samples_[from] && *result_samples_[from] != h.samples) {
    return conflict(fmt::format("reports a total of {} samples, earlier {}", h.samples,
                                *result_samples_[from]));
  }
  result_samples_[from] = h.samples;
  if (h.count > 0) {
    const std::span<float> sum = result_.subspan(h.offset, h.count);
    std::memcpy(sum.data(), payload.data(), payload.size());
    unusable_ = unusable_ || !dctrain::usable(sum);
  }
  result_in_[from][*k] = true;
  if (digester_) digester_->landed(from, *k);
  --results_missing_[from];
  if (--results_missing_total_ == 0) stats_.gathered_after = Clock::now() - start_;
  ++stats_.pieces_received;
  stats_.bytes_received += h.count * sizeof(float);
  return std::nullopt;
}

std::vector<std::string> MeshRound::digests() {
  return digester_ ? digester_->digests() : std::vector<std::string>{};
}

size_t MeshRound::pieces_received_at_most() const {
  size_t pieces = (members_.size() - 1) * plan_.pieces(me_);
  for (size_t p = 0; p < members_.size(); ++p) pieces += plan_.pieces(p);
  return pieces;
}

std::pair<size_t, size_t> MeshRound::contribution_pieces_missing(uint32_t rank) const {
  const size_t at = position_of(rank);
  size_t missing = 0;
  for (const auto& in : input_in_) missing += in[at] ? 0 : 1;
  return {missing, input_in_.size()};
}

std::pair<size_t, size_t> MeshRound::result_pieces_missing(uint32_t rank) const {
  const size_t at = position_of(rank);
  return {results_missing_[at], plan_.pieces(at)};
}

void MeshRound::release_inputs() {
  for (auto& piece : inputs_) piece.clear();
}

void MeshRound::settle(ExchangeOutcome& out) {
  const size_t n = members_.size();
  // The sample counts, and each owner's total against this member's.
  out.member_samples.assign(n, 0);
  for (size_t m = 0; m < n; ++m) {
    out.member_samples[m] = m == me_ ? own_samples_ : member_samples_[m].value_or(0);
    out.samples += out.member_samples[m];
  }
  // An owner's total can be held against this member's count only once
  // every member's count is in: while a contribution is still on its way (a
  // slow link), the owner that already had it is not at fault, and the
  // missing contribution names the member to blame.
  bool every_count = true;
  for (size_t m = 0; m < n; ++m) every_count = every_count && (m == me_ || member_samples_[m]);
  for (size_t m = 0; m < n; ++m) {
    if (!every_count || m == me_ || !result_samples_[m] || *result_samples_[m] == out.samples) {
      continue;
    }
    record_conflict(
        m, members_[m],
        fmt::format("summed {} samples, this peer counts {}", *result_samples_[m], out.samples));
    out.complete = false;
  }
  for (size_t m = 0; m < n; ++m) {
    if (m == me_) continue;
    if (conflict_[m]) out.conflicting.push_back(members_[m]);
    bool all_in = true;
    for (size_t k = 0; k < input_in_.size(); ++k) all_in = all_in && input_in_[k][m];
    if (!all_in) out.missing_contributions.push_back(members_[m]);
    if (results_missing_[m] > 0) out.missing_results.push_back(members_[m]);
  }
}

}  // namespace dctrain
