// ExchangePeer::exchange (exchange/peer.h): one round, from the checks of
// the caller's arguments to the outcome, in stages: the pieces of this round
// read early are taken, this peer's contribution queued, the round run
// until complete, cancelled or out of time, ZeroMQ's hold on the caller's
// buffers released, the sample counts settled, and a failure put in words.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

#include "comm/rank_order_sum.h"
#include "comm/transport.h"
#include "common/usable_values.h"
#include "exchange/peer.h"
#include "exchange/peer_round.h"

namespace dctrain {

void ExchangePeer::check_round(const ExchangeRound& round, std::span<const uint32_t> members,
                               size_t contribution, size_t result) const {
  auto misuse = [&](const std::string& what) {
    throw std::invalid_argument(
        fmt::format("exchange ({}) on rank {}: {}", describe_round(round), rank_, what));
  };
  if (any_round_ && round <= last_round_) {
    misuse(fmt::format("rounds must increase; the last was ({})", describe_round(last_round_)));
  }
  if (!std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end()) {
    misuse(fmt::format("members [{}] must be ascending ranks, each once", fmt::join(members, ",")));
  }
  if (!std::binary_search(members.begin(), members.end(), rank_)) {
    misuse(fmt::format("members [{}] do not include this peer", fmt::join(members, ",")));
  }
  for (uint32_t m : members) {
    if (m != rank_ && (m >= outboxes_.size() || outboxes_[m].handle() == nullptr)) {
      misuse(fmt::format("member {} has no endpoint (call connect() with every member's)", m));
    }
  }
  if (contribution != result) {
    misuse(fmt::format("contribution has {} floats, result {}", contribution, result));
  }
}

void ExchangePeer::take_early_pieces(Round& r, ExchangeOutcome& out) {
  // Pieces of earlier rounds are dropped, this round's taken, later ones kept.
  std::vector<Early> early = std::move(early_);
  early_.clear();
  for (Early& e : early) {
    if (e.header.round < r.id) {
      ++out.stats.stale;
    } else if (e.header.round == r.id) {
      accept(r, e.header, std::move(e.payload), e.key, e.id, out);
    } else {
      early_.push_back(std::move(e));
    }
  }
}

void ExchangePeer::send_contribution(Round& r) {
  const size_t n = r.members.size();
  if (n == 1) {
    r.all_heard = r.start;
    const std::byte* own[] = {reinterpret_cast<const std::byte*>(r.contribution.data())};
    sum_in_rank_order(own, r.contribution.size(), r.result.data());
    r.unusable = !usable(r.result);
    r.pieces_reduced = r.inputs.size();
    if (r.digester) {
      for (size_t k = 0; k < r.plan.pieces(0); ++k) r.digester->landed(0, k);
    }
    return;
  }
  // Piece k to every other member before piece k + 1 to any, starting with
  // the next member, so every owner can begin summing early.
  size_t most = 0;
  for (size_t p = 0; p < n; ++p) most = std::max(most, r.plan.pieces(p));
  for (size_t k = 0; k < most; ++k) {
    for (size_t step = 1; step < n; ++step) {
      const size_t to = (r.me + step) % n;
      if (k >= r.plan.pieces(to)) continue;
      const PieceRange p = r.plan.piece(to, k);
      const ChunkHeader h = r.header(PieceKind::kContribution, rank_, p, r.own_samples);
      queue(r, r.members[to], h, r.contribution.data() + p.offset);
    }
  }
}

bool ExchangePeer::nothing_pending(const Round& r) const {
  for (uint32_t m : r.members) {
    if (m != rank_ && !pending_[m].empty()) return false;
  }
  return true;
}

Clock::time_point ExchangePeer::run_round(Round& r, Clock::time_point deadline,
                                          std::chrono::nanoseconds after_all_heard,
                                          ExchangeOutcome& out) {
  std::vector<zmq::message_t> parts;
  std::vector<zmq::pollitem_t> items;
  // When the round gives up: the deadline, or earlier once every member was
  // heard from (`after_all_heard`), or now when it is cancelled.
  Clock::time_point end = deadline;
  while (r.first_conflict.empty()) {
    for (uint32_t m : r.members) {
      if (m != rank_) flush(m);
    }
    if (r.complete() && nothing_pending(r)) break;
    if (cancel_.ended(r.id)) {
      out.cancelled = true;
      end = Clock::now();
      break;
    }
    if (r.all_heard && after_all_heard > std::chrono::nanoseconds::zero()) {
      end = std::min(deadline, *r.all_heard + after_all_heard);
    }
    const auto now = Clock::now();
    if (now >= end) {
      out.cut_short = end < deadline;
      break;
    }
    items.clear();
    items.push_back({static_cast<void*>(inbox_), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, cancel_.fd(), ZMQ_POLLIN, 0});
    for (uint32_t m : r.members) {
      if (m != rank_ && !pending_[m].empty()) {
        items.push_back({static_cast<void*>(outboxes_[m]), 0, ZMQ_POLLOUT, 0});
      }
    }
    // Rounded up, so a wait never ends just short of the deadline and spins.
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(end - now);
    zmq::poll(items.data(), items.size(), wait);
    if (items[1].revents & ZMQ_POLLIN) cancel_.drain();  // the mark is read above
    // A bounded batch, so pieces waiting for room get their turn.
    for (int i = 0; i < 256 && receive_parts(inbox_, parts, false); ++i) handle(r, parts, out);
  }
  return end;
}

std::vector<std::string> ExchangePeer::let_go_of_buffers(Round& r, Clock::time_point end,
                                                         ExchangeOutcome& out) {
  // For the error, if any: what this peer still had on its way out.
  std::vector<std::string> outgoing;
  for (uint32_t m : r.members) {
    if (m == rank_) continue;
    const size_t queued = pending_[m].size(), held = releases_->in_flight(m);
    if (queued + held > 0) {
      outgoing.push_back(fmt::format("rank {}: {} queued, {} in ZeroMQ", m, queued, held));
    }
  }
  // ZeroMQ must let go of the caller's buffers before exchange() returns.
  // Pieces it never took are dropped now; a member still holding pieces at
  // the deadline has its socket closed (ZeroMQ then drops them) and
  // reopened. Such a member is blamed only when nothing else went wrong:
  // when the round failed anyway, pieces still in flight at the deadline
  // prove nothing.
  for (uint32_t m : r.members) {
    if (m == rank_ || pending_[m].empty()) continue;
    if (out.complete) out.not_reading.push_back(m);  // ZeroMQ would not even queue more for it
    pending_[m].clear();
  }
  // Members that read take their pieces promptly, also after a conflict
  // (they then see it themselves); only a member that does not read keeps
  // this waiting until the deadline.
  if (!releases_->wait_all(end)) {
    for (uint32_t m : r.members) {
      if (m == rank_ || releases_->in_flight(m) == 0) continue;
      if (out.complete &&
          std::find(out.not_reading.begin(), out.not_reading.end(), m) == out.not_reading.end()) {
        out.not_reading.push_back(m);
      }
      reset_dealer(m);
    }
  }
  std::sort(out.not_reading.begin(), out.not_reading.end());
  for (auto& piece : r.inputs) piece.clear();
  return outgoing;
}

void ExchangePeer::settle_counts(Round& r, ExchangeOutcome& out) {
  const size_t n = r.members.size();
  // The sample counts, and each owner's total against this peer's.
  out.member_samples.assign(n, 0);
  for (size_t m = 0; m < n; ++m) {
    out.member_samples[m] = m == r.me ? r.own_samples : r.member_samples[m].value_or(0);
    out.samples += out.member_samples[m];
  }
  // An owner's total can be held against this peer's count only once every
  // member's count is in: while a contribution is still on its way (a slow
  // link), the owner that already had it is not at fault, and the missing
  // contribution names the member to blame.
  bool every_count = true;
  for (size_t m = 0; m < n; ++m) every_count = every_count && (m == r.me || r.member_samples[m]);
  for (size_t m = 0; m < n; ++m) {
    if (!every_count || m == r.me || !r.result_samples[m] || *r.result_samples[m] == out.samples) {
      continue;
    }
    r.conflict[m] = true;
    if (r.first_conflict.empty()) {
      r.first_conflict = fmt::format("rank {}: summed {} samples, this peer counts {}",
                                     r.members[m], *r.result_samples[m], out.samples);
    }
    out.complete = false;
  }
  for (size_t m = 0; m < n; ++m) {
    if (m == r.me) continue;
    if (r.conflict[m]) out.conflicting.push_back(r.members[m]);
    bool all_in = true;
    for (size_t k = 0; k < r.input_in.size(); ++k) all_in = all_in && r.input_in[k][m];
    if (!all_in) out.missing_contributions.push_back(r.members[m]);
    if (r.results_missing[m] > 0) out.missing_results.push_back(r.members[m]);
  }
}

std::string ExchangePeer::failure_text(const Round& r, const ExchangeOutcome& out,
                                       const std::vector<std::string>& outgoing,
                                       Clock::time_point end, Clock::time_point deadline,
                                       std::chrono::nanoseconds after_all_heard) const {
  // Where, what, and what to do.
  auto name = [&](uint32_t m) { return fmt::format("rank {} ({})", m, endpoints_[m]); };
  std::vector<std::string> what;
  if (!r.first_conflict.empty()) what.push_back("conflicting piece from " + r.first_conflict);
  const bool at_once = !out.conflicting.empty();
  for (uint32_t m : at_once ? std::vector<uint32_t>{} : out.missing_contributions) {
    const size_t pos = r.position_of(m);
    size_t missing = 0;
    for (const auto& in : r.input_in) missing += in[pos] ? 0 : 1;
    what.push_back(fmt::format("no contribution from {} ({} of {} pieces missing)", name(m),
                               missing, r.input_in.size()));
  }
  for (uint32_t m : at_once ? std::vector<uint32_t>{} : out.missing_results) {
    const size_t pos = r.position_of(m);
    what.push_back(fmt::format("no sum from {} ({} of {} pieces missing)", name(m),
                               r.results_missing[pos], r.plan.pieces(pos)));
  }
  for (uint32_t m : out.not_reading) {
    what.push_back(fmt::format("{} did not take this peer's pieces", name(m)));
  }
  if (!outgoing.empty()) {
    what.push_back(fmt::format("pieces of this peer's on their way when it stopped waiting: {}",
                               fmt::join(outgoing, ", ")));
  }
  if (out.stats.refused > 0) {
    what.push_back(fmt::format("{} pieces refused (the first: {})", out.stats.refused,
                               out.stats.first_refusal));
  }
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  std::string when;
  if (at_once) {
    when = "on a conflicting piece";
  } else if (out.cancelled) {
    when = fmt::format("when it was ended from outside ({} ms after it began)", ms(end - r.start));
  } else if (out.cut_short) {
    when = fmt::format("by its limit of {} ms after every member was heard from ({} ms after it "
                       "began)",
                       ms(after_all_heard), ms(end - r.start));
  } else {
    when = fmt::format("by its deadline ({} ms after it began)", ms(deadline - r.start));
  }
  return fmt::format(
      "exchange ({}) on rank {} among [{}] failed {}: {}; suspects [{}]. Check that they are "
      "alive and call exchange() for this round with the same members and length, then redo the "
      "round (next attempt) without the suspects",
      describe_round(r.id), rank_, fmt::join(r.members, ","), when, fmt::join(what, "; "),
      fmt::join(out.suspects(), ","));
}

ExchangeOutcome ExchangePeer::exchange(const ExchangeRound& round,
                                       std::span<const uint32_t> members,
                                       std::span<const float> contribution, uint64_t samples,
                                       std::span<float> result, Clock::time_point deadline,
                                       std::chrono::nanoseconds after_all_heard) {
  const auto start = Clock::now();
  check_round(round, members, contribution.size(), result.size());
  last_round_ = round;
  any_round_ = true;

  ExchangeOutcome out;
  if (cancel_.ended(round)) {
    // Ended before it began (the caller's session heard that the round is
    // over while the caller computed): nothing is sent for it.
    out.cancelled = true;
    out.error = fmt::format("exchange ({}) on rank {}: ended from outside before it began",
                            describe_round(round), rank_);
    return out;
  }
  Round r(round, members, contribution.size(), options_.piece_bytes / sizeof(float), rank_);
  r.contribution = contribution;
  r.result = result;
  r.own_samples = samples;
  r.stats = &out.stats;
  r.start = start;
  if (options_.digest_sum) r.digester.emplace(r.plan, result);

  take_early_pieces(r, out);
  send_contribution(r);
  const Clock::time_point end = run_round(r, deadline, after_all_heard, out);
  out.complete = r.complete() && r.first_conflict.empty();
  out.usable = out.complete && !r.unusable;
  const std::vector<std::string> outgoing = let_go_of_buffers(r, end, out);
  settle_counts(r, out);
  out.ok = out.complete && out.not_reading.empty() && out.conflicting.empty();
  if (out.ok && r.digester) out.shard_digests = r.digester->digests();
  out.elapsed = Clock::now() - start;
  if (r.all_heard) out.all_heard_after = *r.all_heard - start;
  if (!out.ok) out.error = failure_text(r, out, outgoing, end, deadline, after_all_heard);
  return out;
}

}  // namespace dctrain
