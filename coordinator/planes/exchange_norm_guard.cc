// The norm guard on the data plane "exchange" (coordinator/planes/sketch_check.h):
// between the members' agreement on a round's sum and its commit.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "coordinator/planes/exchange_plane.h"

namespace dctrain {

bool ExchangePlane::sketch_guard_on() const {
  return rooms_.guard.norm_guard() && rooms_.config.data_plane().check_sums() &&
         exchange_members_.size() >= 3;
}

bool ExchangePlane::check_contribution_norms(double now) {
  if (!sketch_guard_on() || sketch_check_passed_ || committed_ahead_ || !exchange_reports_ok() ||
      exchange_sum_unusable()) {
    return false;
  }
  if (!sketch_check_ || sketch_check_->attempt() != exchange_attempt_) {
    // Drawn now: every member has reported the sum it holds, so none could
    // shape its part of the round to the sketch.
    sketch_check_.emplace(exchange_attempt_, exchange_members_, rooms_.replica.parameter_count(),
                          rooms_.replica.buffer_count(), draw_sketch_seed_(), now);
    Message request;
    request.envelope = make_envelope(host_.step(), kCoordinatorName);
    *request.envelope.mutable_sketch_request() = sketch_check_->request();
    for (uint32_t rank : exchange_members_) {
      if (rooms_.membership.at(rank).live)
        host_.send(rooms_.membership.at(rank).name, share(request));
    }
    return true;
  }
  const uint32_t lowest = exchange_members_.front();
  if (refused_sums_.contains(lowest)) {
    // Its sum is not the one the members hold (on_sum said so, and
    // struck it): the round is redone without it.
    return redo_without(now, Removal::kLost,
                        {{lowest, "the sum it forwarded is not the one the members hold"}},
                        "the round's sum could not be checked");
  }
  const double timeout = answer_seconds();
  if ((!exchange_sum_ || !sketch_check_->complete()) && now - sketch_check_->asked_at() < timeout) {
    return true;
  }
  std::map<uint32_t, std::string> out = sketch_check_->failed();
  // An unusable answer (not finite, beyond any contribution's): this
  // process saw it, so it counts a failed round.
  for (const auto& [rank, why] : out) strike(rank, "its sketch was unusable: " + why);
  if (!exchange_sum_) {
    out.emplace(lowest, fmt::format("its sum did not come within {:.3g} s", timeout));
    strike(lowest, "it withheld the round's sum");
  }
  for (uint32_t rank : sketch_check_->unanswered()) {
    out.emplace(rank, fmt::format("it did not answer the request for a sketch of its "
                                  "contribution within {:.3g} s",
                                  timeout));
    strike(rank, "it did not answer the request for a sketch of its contribution");
  }
  if (!out.empty()) return redo_without(now, Removal::kLost, out, "the round could not be checked");

  std::vector<float> sum(rooms_.replica.parameter_count() + rooms_.replica.buffer_count());
  copy_tensor(*exchange_sum_, 0, std::span(sum).first(rooms_.replica.parameter_count()));
  if (rooms_.replica.buffer_count() > 0) {
    copy_tensor(*exchange_sum_, 1, std::span(sum).subspan(rooms_.replica.parameter_count()));
  }
  std::map<uint32_t, uint64_t> samples;  // as counted from the plan (on_contribution)
  for (uint32_t rank : exchange_members_) {
    samples[rank] = rooms_.book.at(rank).contribution->samples();
  }
  for (Refused& r : sketch_check_->judge(sum, rooms_.guard, host_.step(), samples)) {
    rooms_.log->error("step {}: the contribution of worker '{}' (rank {}) is refused: {}",
                      host_.step(), rooms_.membership.at(r.rank).name, r.rank, r.why);
    out.emplace(r.rank, "its contribution is refused by the norm guard");
  }
  if (out.empty()) {
    sketch_check_passed_ = true;
    return false;
  }
  refused_norm_in_step_ += static_cast<uint32_t>(out.size());
  v1::RunTotals& t = rooms_.totals;
  t.set_contributions_refused_norm(t.contributions_refused_norm() + out.size());
  return redo_without(now, Removal::kRefusedNorm, out, "the norm guard refused a contribution");
}

bool ExchangePlane::redo_without(double now, Removal removal,
                                 const std::map<uint32_t, std::string>& out,
                                 const std::string& why) {
  for (const auto& [rank, reason] : out) host_.remove(rank, removal, reason);
  return redo_among_the_rest(now, why);
}

void ExchangePlane::on_sketch(uint32_t rank, const Message& message, double now) {
  const std::string& peer = rooms_.membership.at(rank).name;
  const uint64_t step = message.envelope.step();
  if (!sketch_check_ || sketch_check_passed_ || !host_.stepping() || step != host_.step()) {
    rooms_.log->debug(
        "dropped a contribution sketch of step {} from worker '{}' (rank {}): not awaited", step,
        peer, rank);
    return;
  }
  if (const auto problem = sketch_check_->take(rank, message.envelope.contribution_sketch())) {
    rooms_.peer_log.peer_says(
        peer,
        fmt::format("step {}: worker '{}' (rank {}) sent no usable sketch of its "
                    "contribution: {}",
                    step, peer, rank, peer_text(*problem)),
        now);
  }
}

}  // namespace dctrain
