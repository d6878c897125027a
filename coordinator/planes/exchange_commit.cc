// The exchange's commit (coordinator/planes/exchange_steps.cc says the protocol):
// a round whose members all reported success is committed on their reports
// alone; the sum forwarded by the lowest member is taken once its digests
// are those every member gave, chased from the next member when it does not
// come, and divided and applied to the coordinator's replica after the next
// plans are out.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "common/usable_values.h"
#include "coordinator/planes/exchange_blame.h"
#include "coordinator/planes/exchange_plane.h"
#include "exchange/chunk.h"
#include "exchange/sum_digest.h"

namespace dctrain {

void ExchangePlane::on_sum(uint32_t rank, Message message, double now) {
  const std::string& peer = rooms_.membership.at(rank).name;
  const uint64_t step = message.envelope.step();
  const v1::ExchangeSum& body = message.envelope.exchange_sum();
  // Awaited from the round's lowest member, which sends it after its report,
  // or from the member the coordinator asked since.
  const bool awaited =
      host_.stepping() && step == host_.step() && body.attempt() == exchange_attempt_ &&
      !exchange_sum_ && !exchange_members_.empty() && !refused_sums_.contains(rank) &&
      (rank == exchange_members_.front() ||
       (committed_ahead_ && !committed_ahead_->lost && committed_ahead_->source == rank)) &&
      rooms_.book.contains(rank) && rooms_.book.at(rank).contribution &&
      rooms_.book.at(rank).contribution->exchange().ok();
  if (!awaited) {
    rooms_.log->debug("dropped a sum of step {} attempt {} from worker '{}' (rank {}): not awaited",
                      step, body.attempt(), peer, rank);
    return;
  }
  std::optional<std::string> problem;
  if (!body.error().empty()) {
    problem = peer_text(body.error());
  } else {
    std::vector<TensorSpec> expected = {{"gradient", rooms_.replica.parameter_count()}};
    if (rooms_.replica.buffer_count() > 0)
      expected.push_back({"statistics", rooms_.replica.buffer_count()});
    // The values are checked off the step's critical path, when the sum is
    // applied (take_pending_sum): the members checked theirs before reporting.
    problem = check_tensor_layout(message, expected);
  }
  if (!problem) problem = forwarded_sum_problem(rank, message);
  if (problem) {
    rooms_.peer_log.peer_says(
        peer,
        fmt::format("step {}: worker '{}' (rank {}) sent no usable sum of the "
                    "round: {}",
                    step, peer, rank, *problem),
        now);
    refused_sums_.insert(rank);
    if (committed_ahead_ && !committed_ahead_->lost && committed_ahead_->source == rank) {
      committed_ahead_->failed.insert(rank);
      ask_next_for_sum(now);
    }
    return;
  }
  exchange_sum_ = std::move(message);
}

std::optional<std::string> ExchangePlane::forwarded_sum_problem(uint32_t rank, const Message& sum) {
  // The sender's own report says what it holds; the commit waits until every
  // member's report says the same (refuse_disagreeing_sums), so a sum that
  // matches it is the sum every member applies.
  // (A keyed check takes the forwarded sum before it draws its key, and
  // checks it with the members' answers: check_round.)
  if (!rooms_.config.data_plane().check_sums() || keyed(sum_digest_)) return std::nullopt;
  const v1::ExchangeReport& x = rooms_.book.at(rank).contribution->exchange();
  std::vector<std::span<const std::byte>> pieces = tensor_bytes(sum, 0);
  if (rooms_.replica.buffer_count() > 0) {
    for (std::span<const std::byte> p : tensor_bytes(sum, 1)) pieces.push_back(p);
  }
  const std::vector<size_t> differ =
      differing_shards(shard_digests(pieces, exchange_members_.size(), sum_digest_),
                       {x.sum_digests().begin(), x.sum_digests().end()});
  if (differ.empty()) return std::nullopt;
  strike(rank, "it forwarded a sum that differs from the one the members hold");
  // On the direct schedule shard i is the i-th member's to sum; on the
  // halving one the digests' shards are only a layout.
  const std::string owner =
      halving_round(exchange_members_.size())
          ? std::string()
          : fmt::format(", owned by rank {}", exchange_members_[differ.front()]);
  return fmt::format(
      "its sum differs from the sum the round's members hold (the digests of {} of {} shards "
      "differ, the first shard {}{}); it is not applied",
      differ.size(), exchange_members_.size(), differ.front(), owner);
}

v1::Update ExchangePlane::exchange_commit() const {
  // What the close will settle (settle_step), read from the reports.
  ClosedStep closed;
  uint64_t samples = 0;
  for (const auto& [rank, p] : rooms_.book) {
    if (!p.contribution) continue;
    closed.loss_terms += p.contribution->loss_terms();
    samples += p.contribution->samples();
  }
  closed.record.set_samples(static_cast<uint32_t>(samples));
  const bool applied = samples > 0;
  v1::Update body;
  body.set_commit(true);
  body.set_applied(applied);
  body.set_samples(samples);
  body.set_optimizer_steps(static_cast<uint64_t>(rooms_.replica.optimizer_steps()) +
                           (applied ? 1 : 0));
  body.set_learning_rate(host_.step_learning_rate());
  body.set_gradient_divisor(host_.step_divisor(closed));
  body.set_statistics_divisor(static_cast<double>(samples));
  return body;
}

bool ExchangePlane::commit_ahead_of_sum(double now) {
  if (committed_ahead_) return !exchange_sum_ && !committed_ahead_->lost;
  if (exchange_sum_ || !exchange_reports_ok() || exchange_sum_unusable()) return false;
  v1::Update body = exchange_commit();
  if (!body.applied()) return false;  // nothing to apply: no sum is needed
  Message commit;
  commit.envelope = make_envelope(host_.step(), kCoordinatorName);
  *commit.envelope.mutable_update() = body;
  for (uint32_t rank : exchange_members_) {
    if (rooms_.membership.at(rank).live) host_.send(rooms_.membership.at(rank).name, share(commit));
  }
  committed_ahead_ =
      CommittedAhead{std::move(body), exchange_members_.front(), now, refused_sums_, false};
  rooms_.timeline.span("commit", now, rooms_.clock());
  // The lowest member's sum came already and was refused: ask the next.
  if (refused_sums_.contains(committed_ahead_->source)) ask_next_for_sum(now);
  return !committed_ahead_->lost;
}

void ExchangePlane::chase_committed_sum(double now) {
  if (!committed_ahead_ || exchange_sum_ || committed_ahead_->lost) return;
  CommittedAhead& c = *committed_ahead_;
  const Member& source = rooms_.membership.at(c.source);
  // The sum follows its report as a round's pieces follow each other: the
  // round deadline (in the first round, from that round's own time).
  const double timeout = answer_seconds();
  if (source.live && now - c.asked_at < timeout) return;
  rooms_.log->warn(
      "step {}: the sum of the committed round did not come from worker '{}' (rank {}): {}",
      host_.step(), source.name, c.source,
      source.live ? fmt::format("not within {:.3g} s", timeout) : std::string("it died"));
  c.failed.insert(c.source);
  strike(c.source, "it withheld the committed round's sum");
  ask_next_for_sum(now);
}

void ExchangePlane::ask_next_for_sum(double now) {
  CommittedAhead& c = *committed_ahead_;
  for (uint32_t rank : exchange_members_) {
    if (c.failed.contains(rank) || !rooms_.membership.at(rank).live) continue;
    c.source = rank;
    c.asked_at = now;
    Message request;
    request.envelope = make_envelope(host_.step(), kCoordinatorName);
    request.envelope.mutable_sum_request()->set_attempt(exchange_attempt_);
    host_.send(rooms_.membership.at(rank).name, std::move(request));
    rooms_.log->info("step {}: asked worker '{}' (rank {}) for the round's sum", host_.step(),
                     rooms_.membership.at(rank).name, rank);
    return;
  }
  c.lost = true;
  std::vector<uint32_t> resent;
  for (uint32_t rank : exchange_members_) {
    if (!rooms_.membership.at(rank).live) continue;
    rooms_.book.at(rank).resync = true;
    resent.push_back(rank);
  }
  rooms_.log->error(
      "step {}: no member of the committed round is left to send its sum; the step is dropped "
      "after all: its micro-batches are {}, the coordinator's replica goes on without it, and the "
      "live members that applied it (ranks {}) get the coordinator's state",
      host_.step(), rooms_.config.step().requeue() ? "requeued" : "lost", fmt::join(resent, ", "));
}

bool ExchangePlane::exchange_sum_unusable() const {
  // Every member holds the same sum, so one that found it unusable speaks
  // for all.
  for (const auto& [rank, p] : rooms_.book) {
    if (p.contribution && p.contribution->exchange().sum_unusable()) return true;
  }
  return false;
}

std::optional<uint64_t> ExchangePlane::commit_exchange(ClosedStep& closed) {
  v1::StepRecord& record = closed.record;
  const bool applied = record.applied() && exchange_sum_.has_value();
  // The members have the commit already when it went out ahead of the sum
  // (commit_ahead_of_sum): the same one, as the reports it was read from
  // are what the step settled.
  const bool committed = committed_ahead_.has_value();
  Message commit;
  commit.envelope = make_envelope(host_.step(), kCoordinatorName);
  v1::Update& body = *commit.envelope.mutable_update();
  body = committed ? committed_ahead_->commit : exchange_commit();
  committed_ahead_.reset();
  if (!applied) {  // the reports say so too, unless the committed sum was lost
    exchange_sum_.reset();
    if (!committed) {
      for (uint32_t rank : rooms_.membership.live_ranks())
        host_.send(rooms_.membership.at(rank).name, share(commit));
    }
    return rooms_.replica.parameter_checksum();
  }
  const double divisor = body.gradient_divisor();
  // The commit goes out first; the sum is read, checked and applied after
  // the next plans (apply_pending).
  pending_apply_ = PendingApply{divisor, body.statistics_divisor(), body.learning_rate(),
                                host_.step(), std::move(*exchange_sum_)};
  exchange_sum_.reset();
  // A live worker that holds no sum of this round (it joined during the
  // step) gets the whole update, as on the star path.
  std::optional<Message> update;
  for (uint32_t rank : rooms_.membership.live_ranks()) {
    auto p = rooms_.book.find(rank);
    if (p != rooms_.book.end() && p->second.contribution) {
      if (!committed) host_.send(rooms_.membership.at(rank).name, share(commit));
      continue;
    }
    if (!update) {
      if (!take_pending_sum()) continue;  // it resyncs at its first report
      reducer_.finish(divisor, pending_apply_->statistics_divisor);
      pending_apply_->divided = true;
      update.emplace();
      update->envelope = make_envelope(host_.step(), kCoordinatorName);
      *update->envelope.mutable_update() = body;
      update->envelope.mutable_update()->set_commit(false);
      add_tensor(*update, "gradient", reducer_.gradient());
      if (rooms_.replica.buffer_count() > 0)
        add_tensor(*update, "statistics", reducer_.statistics());
    }
    host_.send(rooms_.membership.at(rank).name, share(*update));
  }
  record.set_apply_seconds(0.0);  // after the next plans: apply_pending()
  return std::nullopt;
}

bool ExchangePlane::take_pending_sum() {
  PendingApply& pending = *pending_apply_;
  if (!pending.sum) return pending.usable;
  Message sum = std::move(*pending.sum);
  pending.sum.reset();
  reducer_.set_sum(sum);
  // Every member found these bits usable before the commit; this is the
  // lowest member's copy of them.
  pending.usable = usable(reducer_.gradient()) && usable(reducer_.statistics());
  if (!pending.usable) {
    rooms_.log->error(
        "step {}: the sum forwarded by '{}' holds NaN, infinite or overflowing values although "
        "every member of the round found its own copy usable; the coordinator's replica does not "
        "apply it, and each worker, whose replica then differs, is sent the coordinator's state at "
        "its next report",
        pending.step, sum.envelope.sender());
  }
  return pending.usable;
}

std::optional<uint64_t> ExchangePlane::apply_pending() {
  if (!pending_apply_) return std::nullopt;
  if (!take_pending_sum()) {
    pending_apply_.reset();
    return rooms_.replica.parameter_checksum();
  }
  const PendingApply pending = std::move(*pending_apply_);
  pending_apply_.reset();
  // The update hashes the parameters as it writes them.
  if (pending.divided) {
    return rooms_.replica.apply_update(reducer_.gradient(), reducer_.statistics(), pending.lr);
  }
  // As every member does: the gradient averaged inside the optimizer's pass.
  reducer_.finish(0.0, pending.statistics_divisor);
  const float divisor = pending.divisor > 0.0 ? static_cast<float>(pending.divisor) : 1.0f;
  return rooms_.replica.apply_summed_update(reducer_.gradient(), divisor, reducer_.statistics(),
                                            pending.lr);
}

}  // namespace dctrain
