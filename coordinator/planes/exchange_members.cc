// The exchange's members in a round (coordinator/planes/exchange_plane.h): who is
// overdue, stopped, lost or silent by the coordinator's clock, and the
// strikes that release a member after failed rounds in a row.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "comm/envelope.h"
#include "coordinator/planes/exchange_plane.h"

namespace dctrain {

void ExchangePlane::cancel_overdue_members(double now) {
  // Once: after the cut-off (silent_after_) nobody it could ask is left.
  const std::optional<double> overdue = round_clock_.overdue_at(round_deadline_.seconds());
  if (!overdue || now <= *overdue || silent_after_ || committed_ahead_) return;
  const double answer = round_deadline_.seconds();
  std::vector<uint32_t> asked;
  for (uint32_t rank : exchange_members_) {
    if (!reducer_.expects(rank)) continue;  // reported, or out
    asked.push_back(rank);
    Message cancel;
    cancel.envelope = make_envelope(host_.step(), kCoordinatorName);
    v1::ExchangeCancel& body = *cancel.envelope.mutable_exchange_cancel();
    body.set_attempt(exchange_attempt_);
    body.set_reason("the round is overdue: other members of it reported long ago");
    host_.send(rooms_.membership.at(rank).name, std::move(cancel));
  }
  if (asked.empty()) return;
  rooms_.log->warn(
      "step {}: exchange round {} is overdue (round deadline {:.3g} s); asked ranks {} to end it "
      "and report what they have, within {:.3g} s",
      host_.step(), exchange_attempt_ + 1, round_deadline_.seconds(), fmt::join(asked, ", "),
      answer);
  silent_after_ = now + answer;
}

void ExchangePlane::take_out_stopped_members(double now) {
  const v1::LivenessConfig& live = rooms_.config.liveness();
  const double silence = std::min(live.silence_seconds(), 3.0 * live.heartbeat_seconds());
  for (uint32_t rank : exchange_members_) {
    const Member& m = rooms_.membership.at(rank);
    if (!reducer_.expects(rank) || !m.live || now - m.last_heard <= silence) continue;
    rooms_.log->warn(
        "worker '{}' (rank {}) silent for {:.2f} s (3 heartbeats) while its round waits on it: "
        "presumed dead (stopped or hung), not after liveness.silence_seconds",
        m.name, rank, now - m.last_heard);
    host_.declare_dead(rank, "it went silent during the step");
    strike(rank, "silent during the step");
  }
}

void ExchangePlane::members_lost(double now) {
  if (!host_.stepping() || committed_ahead_) return;
  std::vector<uint32_t> lost, left;
  bool waiting = false;
  for (uint32_t rank : exchange_members_) {
    const Planned& p = rooms_.book.at(rank);
    // A member that reported its round ok holds the whole sum: it delivered
    // its part before it died or left, and the others can finish without it.
    const bool done = p.contribution && p.contribution->exchange().ok();
    if (p.out() || (!rooms_.membership.at(rank).live && !done)) {
      lost.push_back(rank);
      continue;
    }
    // A redo is among the live: one that died after its report is out of it.
    if (rooms_.membership.at(rank).live) left.push_back(rank);
    waiting = waiting || !p.contribution;
  }
  // With every member left reported, host_.close_step() judges and redoes the round.
  if (lost.empty() || !waiting) return;
  if (plan_next_attempt(now, left,
                        fmt::format("ranks {} left the round in flight", fmt::join(lost, ", ")))) {
    return;
  }
  // No rounds left: the step is dropped for everyone now (the commit that
  // says so ends the round the members wait in). The members still in the
  // round missed nothing: their micro-batches are requeued as a dropped
  // step's are (settle does it for those that reported).
  rooms_.log->warn(
      "step {}: ranks {} left the round in flight and the step's {} rounds are spent: the "
      "step is dropped",
      host_.step(), fmt::join(lost, ", "), rooms_.config.data_plane().rounds_per_step());
  for (uint32_t rank : left) {
    if (reducer_.expects(rank)) host_.drop_from_step(rank);
  }
}

void ExchangePlane::strike(uint32_t rank, const std::string& why) {
  Member& m = rooms_.membership.at(rank);
  if (auto p = rooms_.book.find(rank); p != rooms_.book.end()) p->second.struck = true;
  ++m.failed_rounds_in_a_row;
  const uint32_t limit = rooms_.config.liveness().release_after_failed_rounds();
  rooms_.log->info(
      "worker '{}' (rank {}) failed its exchange round ({}): {} in a row (released at {})", m.name,
      rank, why, m.failed_rounds_in_a_row,
      limit > 0 ? fmt::to_string(limit) : std::string("never"));
  if (limit == 0 || m.failed_rounds_in_a_row < limit) return;
  // A member presumed dead is released when it comes back (on_hello).
  if (m.live) {
    host_.release(rank, fmt::format("after failing {} exchange rounds in a row (the last: {})",
                                    m.failed_rounds_in_a_row, why));
  }
}

double ExchangePlane::answer_seconds() const {
  const std::optional<double> measured = round_clock_.round_seconds();
  return measured ? round_deadline_.seconds_given(*measured) : round_deadline_.seconds();
}

void ExchangePlane::observe_round() {
  if (const std::optional<double> seconds = round_clock_.round_seconds()) {
    round_deadline_.observe(*seconds);
  }
  round_clock_.committed();
}

void ExchangePlane::take_out_silent_members(double now) {
  if (!silent_after_ || now <= *silent_after_) return;
  silent_after_.reset();
  // Past the plan's compute bound and two round deadlines on this clock:
  // late, as the star's late worker (a missed step, counted towards
  // liveness.release_after_missed_steps), whatever it reports. Not a failed
  // round: its control plane is alive, and a slow compute is no fault of
  // its links (take_out_stopped_members strikes a silent process). Before
  // that, on the word of members that heard from all: cut from the step
  // (its micro-batches requeued), counted against nobody.
  const double deadline = round_deadline_.seconds();
  for (uint32_t rank : exchange_members_) {
    if (!reducer_.expects(rank)) continue;
    if (!round_clock_.past_bound(now, deadline)) {
      rooms_.log->warn(
          "worker '{}' (rank {}) did not answer within the round deadline when asked to end its "
          "round, which members that heard from every member had ended: cut from step {} (inside "
          "the plan's compute bound: no missed step)",
          rooms_.membership.at(rank).name, rank, host_.step());
      host_.remove(rank, Removal::kCut, "the round was ended without it");
      continue;
    }
    host_.declare_dead(
        rank, fmt::format("it did not report its exchange round (nor end it when asked) by {:.3g} "
                          "s after its plan (the plan's compute bound and two round deadlines)",
                          now - round_clock_.planned_at()));
  }
}

}  // namespace dctrain
