// ExchangePeer::exchange (exchange/peer.h): one round, from the checks of
// the caller's arguments to the outcome, in stages: the pieces of this round
// read early are taken, the round's algorithm (exchange/round_schedule.h) sends
// this peer's contribution through the outboxes, the round runs until
// complete, cancelled or out of time, ZeroMQ's hold on the caller's buffers
// is released, the sample counts settled, and a failure put in words.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

#include "comm/rank_order_sum.h"
#include "comm/transport.h"
#include "common/usable_values.h"
#include "exchange/peer.h"
#include "exchange/round_schedule.h"

namespace dctrain {

using Clock = std::chrono::steady_clock;

// The round's pieces out through this peer's outboxes, counted in the
// round's stats.
class ExchangePeer::Outboxes final : public PieceSink {
 public:
  Outboxes(ExchangePeer& peer, ExchangeStats& stats) : peer_(peer), stats_(stats) {}
  void send(uint32_t to, const ChunkHeader& header, const float* data) override {
    peer_.queue(to, header, data, stats_);
  }

 private:
  ExchangePeer& peer_;
  ExchangeStats& stats_;
};

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
    if (m != rank_ && (m >= endpoints_.size() || endpoints_[m].empty())) {
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
    if (e.header.round < r.id()) {
      ++out.stats.stale;
    } else if (e.header.round == r.id()) {
      accept(r, e.header, std::move(e.payload), e.key, e.id, out);
    } else {
      early_.push_back(std::move(e));
    }
  }
}

bool ExchangePeer::nothing_pending(const Round& r) const {
  for (uint32_t m : r.members()) {
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
  while (r.conflict().empty()) {
    for (uint32_t m : r.members()) {
      if (m != rank_) flush(m);
    }
    if (r.complete() && nothing_pending(r)) break;
    if (cancel_.ended(r.id())) {
      out.cancelled = true;
      end = Clock::now();
      break;
    }
    if (r.all_heard() && after_all_heard > std::chrono::nanoseconds::zero()) {
      end = std::min(deadline, *r.all_heard() + after_all_heard);
    }
    const auto now = Clock::now();
    if (now >= end) {
      out.cut_short = end < deadline;
      break;
    }
    items.clear();
    items.push_back({static_cast<void*>(inbox_), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, cancel_.fd(), ZMQ_POLLIN, 0});
    for (uint32_t m : r.members()) {
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
  for (uint32_t m : r.members()) {
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
  for (uint32_t m : r.members()) {
    if (m == rank_ || pending_[m].empty()) continue;
    if (out.complete) out.not_reading.push_back(m);  // ZeroMQ would not even queue more for it
    pending_[m].clear();
  }
  // Members that read take their pieces promptly, also after a conflict
  // (they then see it themselves); only a member that does not read keeps
  // this waiting until the deadline.
  if (!releases_->wait_all(end)) {
    for (uint32_t m : r.members()) {
      if (m == rank_ || releases_->in_flight(m) == 0) continue;
      if (out.complete &&
          std::find(out.not_reading.begin(), out.not_reading.end(), m) == out.not_reading.end()) {
        out.not_reading.push_back(m);
      }
      reset_dealer(m);
    }
  }
  std::sort(out.not_reading.begin(), out.not_reading.end());
  r.release_inputs();
  return outgoing;
}

std::string ExchangePeer::failure_text(const Round& r, const ExchangeOutcome& out,
                                       const std::vector<std::string>& outgoing,
                                       Clock::time_point end, Clock::time_point deadline,
                                       std::chrono::nanoseconds after_all_heard) const {
  // Where, what, and what to do.
  auto name = [&](uint32_t m) { return fmt::format("rank {} ({})", m, endpoints_[m]); };
  std::vector<std::string> what;
  if (!r.conflict().empty()) what.push_back("conflicting piece from " + r.conflict());
  const bool at_once = !out.conflicting.empty();
  for (uint32_t m : at_once ? std::vector<uint32_t>{} : out.missing_contributions) {
    const auto [missing, of] = r.contribution_pieces_missing(m);
    what.push_back(
        fmt::format("no contribution from {} ({} of {} pieces missing)", name(m), missing, of));
  }
  for (uint32_t m : at_once ? std::vector<uint32_t>{} : out.missing_results) {
    const auto [missing, of] = r.result_pieces_missing(m);
    what.push_back(fmt::format("no sum from {} ({} of {} pieces missing)", name(m), missing, of));
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
    when =
        fmt::format("when it was ended from outside ({} ms after it began)", ms(end - r.start()));
  } else if (out.cut_short) {
    when = fmt::format(
        "by its limit of {} ms after every member was heard from ({} ms after it "
        "began)",
        ms(after_all_heard), ms(end - r.start()));
  } else {
    when = fmt::format("by its deadline ({} ms after it began)", ms(deadline - r.start()));
  }
  return fmt::format(
      "exchange ({}) on rank {} among [{}] failed {}: {}; suspects [{}]. Check that they are "
      "alive and call exchange() for this round with the same members and length, then redo the "
      "round (next attempt) without the suspects",
      describe_round(r.id()), rank_, fmt::join(r.members(), ","), when, fmt::join(what, "; "),
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
  Outboxes outboxes(*this, out.stats);
  const RoundInputs inputs{round,
                           members,
                           rank_,
                           contribution,
                           samples,
                           result,
                           options_.piece_bytes / sizeof(float),
                           options_.sum_digest};
  const std::unique_ptr<Round> round_of = make_round(
      schedule_for(members.size(), options_.halving_from), inputs, outboxes, out.stats, start);
  Round& r = *round_of;
  close_unused_outboxes(r);
  take_early_pieces(r, out);
  r.send_contribution();
  const Clock::time_point end = run_round(r, deadline, after_all_heard, out);
  out.complete = r.complete() && r.conflict().empty();
  out.usable = out.complete && r.usable();
  const std::vector<std::string> outgoing = let_go_of_buffers(r, end, out);
  r.settle(out);
  out.ok = out.complete && out.not_reading.empty() && out.conflicting.empty();
  if (out.ok) out.shard_digests = r.digests();
  out.elapsed = Clock::now() - start;
  if (r.all_heard()) out.all_heard_after = *r.all_heard() - start;
  if (!out.ok) out.error = failure_text(r, out, outgoing, end, deadline, after_all_heard);
  return out;
}

}  // namespace dctrain
