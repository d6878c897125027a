// The check of a round of the data plane "exchange" (coordinator/planes/
// round_check.h): a keyed sum check and the norm guard, between the
// members' reports and the commit.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "coordinator/planes/exchange_plane.h"
#include "exchange/sum_digest.h"

namespace dctrain {

bool ExchangePlane::sketch_guard_on() const {
  return rooms_.guard.norm_guard() && rooms_.config.data_plane().check_sums() &&
         exchange_members_.size() >= 3;
}

bool ExchangePlane::keyed_sum_check_on() const {
  return rooms_.config.data_plane().check_sums() && keyed(sum_digest_);
}

std::string ExchangePlane::draw_sum_key() const {
  std::string key;
  while (key.size() < kSumKeyBytes) {
    const uint64_t word = draw_random_();
    key.append(reinterpret_cast<const char*>(&word), sizeof word);
  }
  key.resize(kSumKeyBytes);
  return key;
}

bool ExchangePlane::check_round(double now) {
  if ((!sketch_guard_on() && !keyed_sum_check_on()) || round_check_passed_ || committed_ahead_ ||
      !exchange_reports_ok() || exchange_sum_unusable()) {
    return false;
  }
  const uint32_t lowest = exchange_members_.front();
  const double timeout = answer_seconds();
  if (refused_sums_.contains(lowest)) {
    // Its sum is not the one the members hold, or no sum (on_sum said so,
    // and struck it): the round is redone without it.
    return redo_without(now, Removal::kLost,
                        {{lowest, "the sum it forwarded is not the one the members hold"}},
                        "the round's sum could not be checked");
  }
  if (!round_check_ || round_check_->attempt() != exchange_attempt_) {
    if (keyed_sum_check_on() && !exchange_sum_) {
      // A keyed check's key is drawn once the forwarded sum is here too: its
      // sender must not know the key while it chooses what it sends.
      if (!sum_awaited_since_) sum_awaited_since_ = now;
      if (now - *sum_awaited_since_ < timeout) return true;
      return redo_without(now, Removal::kLost, {withheld_sum(timeout)},
                          "the round's sum did not come");
    }
    // Drawn now: every member has reported the sum it holds (and the
    // forwarded sum is here), so none could shape its part of the round,
    // nor what it forwards, to what is asked.
    RoundCheck::Asked asked;
    asked.seed = draw_random_();
    asked.buckets = sketch_guard_on() ? kSketchBuckets : 0;
    if (keyed_sum_check_on()) asked.sum_key = draw_sum_key();
    round_check_.emplace(exchange_attempt_, exchange_members_, rooms_.replica.parameter_count(),
                         rooms_.replica.buffer_count(), std::move(asked), now);
    Message request;
    request.envelope = make_envelope(host_.step(), kCoordinatorName);
    *request.envelope.mutable_round_check_request() = round_check_->request();
    for (uint32_t rank : exchange_members_) {
      if (rooms_.membership.at(rank).live)
        host_.send(rooms_.membership.at(rank).name, share(request));
    }
    // The forwarded sum's own tags, while the members take theirs.
    if (round_check_->tagged()) forwarded_tags_ = tags_of_forwarded_sum();
    return true;
  }
  if ((!exchange_sum_ || !round_check_->complete()) && now - round_check_->asked_at() < timeout) {
    return true;
  }
  std::map<uint32_t, std::string> out = round_check_->failed();
  // An unusable answer (not finite, beyond any contribution's, the wrong
  // size): this process saw it, so it counts a failed round.
  for (const auto& [rank, why] : out) strike(rank, "its round check was unusable: " + why);
  if (!exchange_sum_) out.insert(withheld_sum(timeout));
  for (uint32_t rank : round_check_->unanswered()) {
    out.emplace(rank, fmt::format("it did not answer the round's check within {:.3g} s", timeout));
    strike(rank, "it did not answer the round's check");
  }
  if (!out.empty()) return redo_without(now, Removal::kLost, out, "the round could not be checked");

  if (round_check_->tagged() && refuse_differing_tags(now)) return true;
  if (round_check_->sketched()) {
    std::vector<float> sum(rooms_.replica.parameter_count() + rooms_.replica.buffer_count());
    copy_tensor(*exchange_sum_, 0, std::span(sum).first(rooms_.replica.parameter_count()));
    if (rooms_.replica.buffer_count() > 0) {
      copy_tensor(*exchange_sum_, 1, std::span(sum).subspan(rooms_.replica.parameter_count()));
    }
    if (refuse_by_sketches(now, sum)) return true;
  }
  round_check_passed_ = true;
  return false;
}

std::pair<uint32_t, std::string> ExchangePlane::withheld_sum(double timeout) {
  const uint32_t lowest = exchange_members_.front();
  strike(lowest, "it withheld the round's sum");
  return {lowest, fmt::format("its sum did not come within {:.3g} s", timeout)};
}

bool ExchangePlane::refuse_differing_tags(double now) {
  const uint32_t lowest = exchange_members_.front();
  // The forwarded sum's tags, as this process took them: its sender's
  // answer must give the same, and every member's the same as its owner's.
  const std::map<uint32_t, std::vector<std::string>>& tags = round_check_->tags();
  if (const std::vector<size_t> differ = differing_shards(forwarded_tags_, tags.at(lowest));
      !differ.empty()) {
    refused_sums_.insert(lowest);
    strike(lowest, "it forwarded a sum that differs from the one it holds");
    rooms_.log->error(
        "step {}: worker '{}' (rank {}) forwarded a sum that is not the one it holds (the tags of "
        "{} of {} shards differ, the first shard {}); it is not applied",
        host_.step(), rooms_.membership.at(lowest).name, lowest, differ.size(),
        exchange_members_.size(), differ.front());
    return redo_without(now, Removal::kLost,
                        {{lowest, "the sum it forwarded is not the one it holds"}},
                        "the round's sum could not be checked");
  }
  return refuse_disagreement(now, tags, "tag");
}

std::vector<std::string> ExchangePlane::tags_of_forwarded_sum() const {
  std::vector<std::span<const std::byte>> pieces = tensor_bytes(*exchange_sum_, 0);
  if (rooms_.replica.buffer_count() > 0) {
    for (std::span<const std::byte> p : tensor_bytes(*exchange_sum_, 1)) pieces.push_back(p);
  }
  return shard_tags(pieces, exchange_members_.size(),
                    std::as_bytes(std::span(round_check_->sum_key())));
}

bool ExchangePlane::refuse_by_sketches(double now, std::span<const float> sum) {
  std::map<uint32_t, uint64_t> samples;  // as counted from the plan (on_contribution)
  for (uint32_t rank : exchange_members_) {
    samples[rank] = rooms_.book.at(rank).contribution->samples();
  }
  std::map<uint32_t, std::string> out;
  for (Refused& r : round_check_->judge(sum, rooms_.guard, host_.step(), samples)) {
    rooms_.log->error("step {}: the contribution of worker '{}' (rank {}) is refused: {}",
                      host_.step(), rooms_.membership.at(r.rank).name, r.rank, r.why);
    out.emplace(r.rank, "its contribution is refused by the norm guard");
  }
  if (out.empty()) return false;
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

void ExchangePlane::on_round_check(uint32_t rank, const Message& message, double now) {
  const std::string& peer = rooms_.membership.at(rank).name;
  const uint64_t step = message.envelope.step();
  if (!round_check_ || round_check_passed_ || !host_.stepping() || step != host_.step()) {
    rooms_.log->debug(
        "dropped a round check answer of step {} from worker '{}' (rank {}): not awaited", step,
        peer, rank);
    return;
  }
  if (const auto problem = round_check_->take(rank, message.envelope.round_check_answer())) {
    rooms_.peer_log.peer_says(
        peer,
        fmt::format("step {}: worker '{}' (rank {}) sent no usable answer to the round's "
                    "check: {}",
                    step, peer, rank, peer_text(*problem)),
        now);
  }
}

}  // namespace dctrain
