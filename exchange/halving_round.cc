// Recursive halving and doubling on one member (exchange/halving_round.h).
#include "exchange/halving_round.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>

#include "comm/rank_order_sum.h"
#include "common/usable_values.h"
#include "exchange/sum_digest.h"

namespace dctrain {

HalvingRound::HalvingRound(const RoundInputs& in, PieceSink& sink, ExchangeStats& stats,
                           Clock::time_point start)
    : id_(in.id),
      members_(in.members),
      rank_(in.rank),
      digest_(members_digest(in.members)),
      layout_(in.members.size()),
      blocks_(in.contribution.size(), layout_.halvers, in.piece_floats),
      contribution_(in.contribution),
      own_samples_(in.samples),
      result_(in.result),
      sum_digest_(in.digest),
      sink_(sink),
      stats_(stats),
      start_(start) {
  me_ = position_of(rank_);
  halver_ = layout_.halver(me_);
  piece_first_.assign(layout_.halvers + 1, 0);
  for (size_t b = 0; b < layout_.halvers; ++b) {
    piece_first_[b + 1] = piece_first_[b] + blocks_.pieces(b);
  }
  const auto pieces_of = [&](size_t first_block, size_t count) {
    std::vector<size_t> out;
    for (size_t g = piece_first_[first_block]; g < piece_first_[first_block + count]; ++g) {
      out.push_back(g);
    }
    return out;
  };
  const auto partners = layout_.partners(me_);
  links_.resize(partners.size());
  has_link_.assign(partners.size(), false);
  for (size_t stage = 0; stage < partners.size(); ++stage) {
    if (!partners[stage]) continue;
    Link& l = links_[stage];
    has_link_[stage] = true;
    l.position = *partners[stage];
    if (stage == 0) {
      if (halver_) {
        folded_ = l.position;
        l.reduce_pieces = pieces_of(0, layout_.halvers);  // its whole contribution
      } else {
        l.gather_pieces = pieces_of(0, layout_.halvers);  // the whole sum
      }
      continue;
    }
    const size_t j = stage - 1;
    const size_t other = *halver_ ^ (size_t{1} << j);
    // It sends its partials of the half this member keeps, and then the
    // final pieces of the half it keeps.
    l.reduce_pieces = pieces_of(layout_.range_first(*halver_, j + 1), layout_.range_count(j + 1));
    l.gather_pieces = pieces_of(layout_.range_first(other, j + 1), layout_.range_count(j + 1));
  }
  if (halver_) {
    for (size_t j = 0; j < layout_.levels; ++j) {
      const size_t first = layout_.range_first(*halver_, j + 1);
      gather_missing_.push_back(piece_first_[first + layout_.range_count(j + 1)] -
                                piece_first_[first]);
    }
  }
  ready_level_.assign(piece_count(), -1);
  kept_.resize(piece_count());
  finals_missing_ = piece_count();
  conflict_.assign(members_.size(), false);
  received_.resize(links_.size());
  for (size_t s = 0; s < links_.size(); ++s) {
    received_[s].reduce.assign(links_[s].reduce_pieces.size(), false);
    received_[s].gather.assign(links_[s].gather_pieces.size(), false);
  }
}

size_t HalvingRound::position_of(uint32_t rank) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), rank);
  return (it != members_.end() && *it == rank) ? static_cast<size_t>(it - members_.begin())
                                               : members_.size();
}

bool HalvingRound::is_other_member(uint32_t rank) const {
  const size_t at = position_of(rank);
  if (at == members_.size() || at == me_) return false;
  for (size_t s = 0; s < links_.size(); ++s) {
    if (has_link_[s] && links_[s].position == at) return true;
  }
  return false;
}

size_t HalvingRound::block_of(size_t g) const {
  return static_cast<size_t>(std::upper_bound(piece_first_.begin(), piece_first_.end(), g) -
                             piece_first_.begin()) -
         1;
}

PieceRange HalvingRound::piece_range(size_t g) const {
  const size_t b = block_of(g);
  return blocks_.piece(b, g - piece_first_[b]);
}

ChunkHeader HalvingRound::header(PieceKind kind, size_t stage, size_t g, uint64_t samples) const {
  const PieceRange p = piece_range(g);
  ChunkHeader h{kind,
                rank_,
                static_cast<uint32_t>(members_.size()),
                digest_,
                id_,
                blocks_.length(),
                static_cast<uint32_t>(blocks_.piece_floats()),
                p.offset,
                p.count,
                samples};
  h.stage = static_cast<uint8_t>(stage);
  return h;
}

void HalvingRound::send_piece(size_t to_position, PieceKind kind, size_t stage, size_t g,
                              const float* base, uint64_t samples) {
  // Held until the call that made it ready returns (flush_sends), so that
  // pieces ready together for the same partner leave as one message.
  outgoing_.push_back(Outgoing{to_position, kind, stage, g, base, samples});
}

void HalvingRound::flush_sends() {
  // Consecutive pieces of one stream (partner, kind, stage), contiguous in
  // the buffer and in the same memory, go as one message of at most
  // piece_floats floats. Pieces of no floats go alone (they share an offset).
  std::vector<bool> sent(outgoing_.size(), false);
  for (size_t i = 0; i < outgoing_.size(); ++i) {
    if (sent[i]) continue;
    const Outgoing& first = outgoing_[i];
    ChunkHeader h = header(first.kind, first.stage, first.piece, first.samples);
    sent[i] = true;
    for (size_t k = i + 1; k < outgoing_.size() && h.count > 0; ++k) {
      const Outgoing& next = outgoing_[k];
      if (sent[k] || next.to != first.to || next.kind != first.kind || next.stage != first.stage) {
        continue;
      }
      const PieceRange r = piece_range(next.piece);
      if (next.base != first.base || next.samples != first.samples ||
          r.offset != h.offset + h.count || r.count == 0 ||
          h.count + r.count > blocks_.piece_floats()) {
        break;  // the stream's next piece does not extend this message
      }
      h.count += r.count;
      sent[k] = true;
    }
    sink_.send(members_[first.to], h, first.base + h.offset);
  }
  outgoing_.clear();
}

uint64_t HalvingRound::subtree_samples(size_t level) const {
  uint64_t total = own_samples_;
  if (folded_) total += links_[0].reduce_samples.value_or(0);
  for (size_t j = 0; j < level; ++j) total += links_[1 + j].reduce_samples.value_or(0);
  return total;
}

void HalvingRound::send_contribution() {
  if (members_.size() == 1) all_heard_ = start_;
  if (!halver_) {
    // A folded member: its whole contribution to its halver.
    for (size_t g = 0; g < piece_count(); ++g) {
      send_piece(links_[0].position, PieceKind::kHalvingReduce, 0, g, contribution_.data(),
                 own_samples_);
    }
  } else if (!folded_) {  // else the leaves wait for the folded member's pieces
    for (size_t g = 0; g < piece_count(); ++g) partial_ready(g, 0);
  }
  flush_sends();
}

const float* HalvingRound::partial(size_t level) const {
  // A halver's own leaf is its contribution unless a folded member's was
  // added to it; every later partial is in the result.
  return level == 0 && !folded_ ? contribution_.data() : result_.data();
}

void HalvingRound::partial_ready(size_t g, size_t level) {
  ready_level_[g] = static_cast<int>(level);
  if (level == layout_.levels) {
    // One member alone: the root is its own leaf.
    const PieceRange p = piece_range(g);
    finish_single(contribution_.data() + p.offset, result_.data() + p.offset, p.count);
    unusable_ = unusable_ || !dctrain::usable(result_.subspan(p.offset, p.count));
    final_ready(level);
    return;
  }
  const size_t b = block_of(g);
  const size_t keep_first = layout_.range_first(*halver_, level + 1);
  if (b >= keep_first && b < keep_first + layout_.range_count(level + 1)) {
    try_sum(g, level);
  } else {
    send_piece(links_[1 + level].position, PieceKind::kHalvingReduce, 1 + level, g, partial(level),
               subtree_samples(level));
  }
}

void HalvingRound::try_sum(size_t g, size_t level) {
  if (ready_level_[g] != static_cast<int>(level)) return;
  auto& kept = kept_[g];
  auto it = std::find_if(kept.begin(), kept.end(), [&](const Kept& k) { return k.level == level; });
  if (it == kept.end()) return;
  const PieceRange p = piece_range(g);
  const bool root = level + 1 == layout_.levels;
  if (p.count > 0) {
    const auto begin = Clock::now();
    add_node(partial(level) + p.offset, it->bytes(), result_.data() + p.offset, p.count, root);
    stats_.summing += Clock::now() - begin;
  }
  kept.erase(it);  // the receive buffer goes back with its message's last piece
  if (!root) {
    partial_ready(g, level + 1);
    return;
  }
  unusable_ = unusable_ || !dctrain::usable(result_.subspan(p.offset, p.count));
  final_ready(layout_.levels);
  if (++own_summed_ == piece_first_[block_of(g) + 1] - piece_first_[block_of(g)]) {
    stats_.reduced_after = Clock::now() - start_;
  }
}

void HalvingRound::final_ready(size_t level) {
  if (--finals_missing_ == 0) stats_.gathered_after = Clock::now() - start_;
  if (!halver_) return;
  const uint64_t total = total_samples_.value_or(subtree_samples(layout_.levels));
  if (!total_samples_) total_samples_ = total;
  // Gather level j sends this halver's range after reduce level j, which
  // holds g for every j below `level`, once all of it is final: one message
  // a level when the range fits a piece (recursive doubling), not one for
  // every piece as it lands.
  for (size_t j = 0; j < level; ++j) {
    if (--gather_missing_[j] > 0) continue;
    const size_t first = layout_.range_first(*halver_, j + 1);
    for (size_t k = piece_first_[first]; k < piece_first_[first + layout_.range_count(j + 1)];
         ++k) {
      send_piece(links_[1 + j].position, PieceKind::kHalvingGather, 1 + j, k, result_.data(),
                 total);
    }
  }
  if (folded_ && finals_missing_ == 0) {
    for (size_t k = 0; k < piece_count(); ++k) {
      send_piece(*folded_, PieceKind::kHalvingGather, 0, k, result_.data(), total);
    }
  }
}

void HalvingRound::record_conflict(size_t from, uint32_t rank, const std::string& why) {
  if (!conflict_[from] && first_conflict_.empty()) {
    first_conflict_ = fmt::format("rank {}: {}", rank, why);
  }
  conflict_[from] = true;
}

std::optional<std::pair<size_t, size_t>> HalvingRound::find_pieces(
    const std::vector<size_t>& expected, const std::vector<bool>& in, uint64_t offset,
    uint64_t count) const {
  // The expected pieces are consecutive ids, ascending in offset. A message
  // holds consecutive pieces that tile it exactly; pieces of no floats (a
  // buffer shorter than the blocks) share an offset, come alone and are
  // taken in turn.
  auto it = std::lower_bound(expected.begin(), expected.end(), offset,
                             [&](size_t g, uint64_t at) { return piece_range(g).offset < at; });
  if (count == 0) {
    for (; it != expected.end() && piece_range(*it).offset == offset; ++it) {
      const size_t index = static_cast<size_t>(it - expected.begin());
      if (piece_range(*it).count == 0 && !in[index]) return std::pair{index, size_t{1}};
    }
    return std::nullopt;
  }
  const size_t first = static_cast<size_t>(it - expected.begin());
  uint64_t covered = 0;
  size_t n = 0;
  for (; it != expected.end() && covered < count; ++it, ++n) {
    const PieceRange p = piece_range(*it);
    if (p.offset != offset + covered) return std::nullopt;
    covered += p.count;
  }
  if (covered != count || n == 0) return std::nullopt;
  return std::pair{first, n};
}

std::optional<std::string> HalvingRound::take(const ChunkHeader& h, zmq::message_t&& payload) {
  const size_t from = position_of(h.from);
  if (!is_other_member(h.from)) {
    return fmt::format("a piece from rank {}, no partner of this member in the round", h.from);
  }
  auto conflict = [&](const std::string& why) {
    record_conflict(from, h.from, why);
    return std::nullopt;
  };
  if (auto why = round_mismatch(h, payload.size(), members_, digest_, blocks_.length(),
                                blocks_.piece_floats(), true)) {
    return conflict(*why);
  }
  if (h.stage >= links_.size() || !has_link_[h.stage] || links_[h.stage].position != from) {
    return conflict(
        fmt::format("sends pieces of stage {}, where it is no partner of this peer", h.stage));
  }
  Link& link = links_[h.stage];
  const bool reduce = h.kind == PieceKind::kHalvingReduce;
  const std::vector<size_t>& expected = reduce ? link.reduce_pieces : link.gather_pieces;
  std::vector<bool>& in = reduce ? received_[h.stage].reduce : received_[h.stage].gather;
  const auto span = find_pieces(expected, in, h.offset, h.count);
  if (!span) {
    return conflict(fmt::format("[{}, +{}) is no run of pieces it owes this peer at stage {}",
                                h.offset, h.count, h.stage));
  }
  const auto [first, n] = *span;
  for (size_t i = first; i < first + n; ++i) {
    if (in[i]) return fmt::format("a second copy of rank {}'s piece at {}", h.from, h.offset);
  }
  std::optional<uint64_t>& samples = reduce ? link.reduce_samples : total_samples_;
  if (samples && *samples != h.samples) {
    return conflict(fmt::format("reports {} samples, earlier {}", h.samples, *samples));
  }
  samples = h.samples;
  if (!link.heard) {
    link.heard = true;
    if (++heard_ == static_cast<size_t>(std::count(has_link_.begin(), has_link_.end(), true))) {
      all_heard_ = Clock::now();
    }
  }
  ++stats_.pieces_received;
  stats_.bytes_received += h.count * sizeof(float);
  const auto message = std::make_shared<zmq::message_t>(std::move(payload));
  const auto* bytes = static_cast<const std::byte*>(message->data());
  for (size_t i = first; i < first + n; ++i) {
    in[i] = true;
    const size_t g = expected[i];
    const PieceRange p = piece_range(g);
    const std::byte* at = bytes + (p.offset - h.offset) * sizeof(float);
    if (!reduce) {
      if (p.count > 0) {
        const std::span<float> sum = result_.subspan(p.offset, p.count);
        std::memcpy(sum.data(), at, p.count * sizeof(float));
        unusable_ = unusable_ || !dctrain::usable(sum);
      }
      final_ready(h.stage == 0 ? 0 : h.stage - 1);
    } else if (h.stage == 0) {
      // The folded member's contribution: this halver's leaf.
      if (p.count > 0) {
        add_node(contribution_.data() + p.offset, at, result_.data() + p.offset, p.count, false);
      }
      partial_ready(g, 0);
    } else {
      kept_[g].push_back(Kept{size_t{h.stage} - 1, message, static_cast<size_t>(at - bytes)});
      try_sum(g, h.stage - 1);
    }
  }
  flush_sends();
  return std::nullopt;
}

std::vector<std::string> HalvingRound::digests() {
  if (!sum_digest_ || digested_ || !complete()) return {};
  digested_ = true;
  return shard_digests(result_, members_.size(), *sum_digest_);
}

size_t HalvingRound::pieces_received_at_most() const {
  size_t pieces = 0;
  for (const Link& l : links_) pieces += l.reduce_pieces.size() + l.gather_pieces.size();
  return pieces;
}

std::pair<size_t, size_t> HalvingRound::contribution_pieces_missing(uint32_t rank) const {
  const size_t at = position_of(rank);
  for (size_t s = 0; s < links_.size(); ++s) {
    if (!has_link_[s] || links_[s].position != at) continue;
    const auto& in = received_[s].reduce;
    return {static_cast<size_t>(std::count(in.begin(), in.end(), false)), in.size()};
  }
  return {0, 0};
}

std::pair<size_t, size_t> HalvingRound::result_pieces_missing(uint32_t rank) const {
  const size_t at = position_of(rank);
  for (size_t s = 0; s < links_.size(); ++s) {
    if (!has_link_[s] || links_[s].position != at) continue;
    const auto& in = received_[s].gather;
    return {static_cast<size_t>(std::count(in.begin(), in.end(), false)), in.size()};
  }
  return {0, 0};
}

void HalvingRound::release_inputs() {
  for (auto& k : kept_) k.clear();
}

void HalvingRound::settle(ExchangeOutcome& out) {
  // A member knows its own count, and the round's total from the sum.
  out.member_samples.assign(members_.size(), 0);
  out.member_samples[me_] = own_samples_;
  out.samples = total_samples_.value_or(halver_ ? subtree_samples(layout_.levels) : own_samples_);
  for (size_t m = 0; m < members_.size(); ++m) {
    if (conflict_[m]) out.conflicting.push_back(members_[m]);
  }
  for (size_t s = 0; s < links_.size(); ++s) {
    if (!has_link_[s]) continue;
    const uint32_t rank = members_[links_[s].position];
    const auto& r = received_[s];
    if (std::find(r.reduce.begin(), r.reduce.end(), false) != r.reduce.end()) {
      out.missing_contributions.push_back(rank);
    }
    if (std::find(r.gather.begin(), r.gather.end(), false) != r.gather.end()) {
      out.missing_results.push_back(rank);
    }
  }
  std::sort(out.missing_contributions.begin(), out.missing_contributions.end());
  std::sort(out.missing_results.begin(), out.missing_results.end());
}

}  // namespace dctrain
