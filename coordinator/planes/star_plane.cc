// The data plane "star" (coordinator/planes/star_plane.h).
#include "coordinator/planes/star_plane.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"

namespace dctrain {

StarPlane::StarPlane(PlaneHost& host, PlaneRooms rooms)
    : DataPlane(rooms.replica.parameter_count(), rooms.replica.buffer_count()),
      host_(host),
      rooms_(rooms) {
  reducer_.set_holding(rooms_.guard.norm_guard());
}

std::string_view StarPlane::description() const {
  return "star (every gradient through this process)";
}

void StarPlane::open_step(const std::vector<uint32_t>& ranks, double, double) {
  reducer_.begin(ranks, true);
}

double StarPlane::deadline(double now, double tau) const {
  return std::isinf(tau) ? std::numeric_limits<double>::infinity()
                         : now + tau + rooms_.config.liveness().grace_seconds();
}

std::optional<std::string> StarPlane::contribution_problem(const Message& message) const {
  std::vector<TensorSpec> expected = {{"gradient", rooms_.replica.parameter_count()}};
  if (rooms_.replica.buffer_count() > 0) {
    expected.push_back({"statistics", rooms_.replica.buffer_count()});
  }
  return check_tensors(message, expected);
}

void StarPlane::accept(uint32_t rank, Message message, double) {
  rooms_.book.at(rank).contribution = message.envelope.contribution();
  reducer_.add(rank, std::move(message));
  if (rooms_.config.step().policy() == v1::POLICY_BACKUP) cut_backup_workers();
}

void StarPlane::on_sum(uint32_t rank, Message message, double) {
  drop_exchange_message("a sum", rank, message);
}

void StarPlane::on_round_check(uint32_t rank, const Message& message, double) {
  drop_exchange_message("a contribution sketch", rank, message);
}

void StarPlane::drop_exchange_message(const char* what, uint32_t rank,
                                      const Message& message) const {
  rooms_.log->debug("dropped {} of step {} from rank {}: the data plane is the star", what,
                    message.envelope.step(), rank);
}

GuardedStep StarPlane::settle() {
  GuardedStep out;
  v1::RunTotals& t = rooms_.totals;
  const char* fate = rooms_.config.step().requeue() ? "requeued" : "lost";
  if (rooms_.guard.norm_guard()) {
    const std::map<uint32_t, double> cosines = reducer_.cosines_with_the_others();
    std::map<uint32_t, Measured> measured;
    for (const auto& [rank, added] : reducer_.added()) {
      if (!reducer_.has(rank)) continue;
      Measured& m = measured[rank];
      m.gradient = added.norm;
      m.statistics = added.statistics_norm;
      // As counted from the plan (on_contribution), not as the worker says.
      m.samples = rooms_.book.at(rank).contribution->samples();
      const auto cosine = cosines.find(rank);
      m.has_cosine = cosine != cosines.end() && !std::isnan(cosine->second);
      if (m.has_cosine) m.cosine = cosine->second;
    }
    std::set<uint32_t> refused;
    for (const Refused& r : rooms_.guard.refuse_by_norm(host_.step(), measured)) {
      const Planned& p = rooms_.book.at(r.rank);
      rooms_.log->warn(
          "refused worker '{}' (rank {})'s contribution for step {}: {}; its {} micro-batches "
          "({} samples) are {}",
          rooms_.membership.at(r.rank).name, r.rank, host_.step(), r.why, p.micro_batches.size(),
          p.samples, fate);
      host_.remove(r.rank, Removal::kRefusedNorm, r.why);
      refused.insert(r.rank);
    }
    reducer_.release(refused);
    out.refused_norm = static_cast<uint32_t>(refused.size());
    t.set_contributions_refused_norm(t.contributions_refused_norm() + refused.size());
  }

  const std::optional<Discard> discard =
      rooms_.guard.judge(reducer_.gradient(), reducer_.statistics(), reducer_.added());
  if (!discard) return out;
  out.discarded = true;
  std::string culprits;
  for (uint32_t rank : discard->culprits) {
    culprits += fmt::format("{}worker '{}' (rank {})", culprits.empty() ? "" : ", ",
                            rooms_.membership.at(rank).name, rank);
  }
  size_t micro_batches = 0;
  uint64_t samples = 0;
  for (const auto& [rank, p] : rooms_.book) {
    if (!p.contribution) continue;
    micro_batches += p.micro_batches.size();
    samples += p.samples;
    const bool named = std::find(discard->culprits.begin(), discard->culprits.end(), rank) !=
                       discard->culprits.end();
    host_.remove(rank, named ? Removal::kRefusedUpdate : Removal::kDiscarded,
                 "the step was discarded: " + discard->why);
  }
  reducer_.clear();
  t.set_steps_discarded(t.steps_discarded() + 1);
  rooms_.log->error(
      "step {} discarded: {}; caused by {}; nothing is applied, the step's {} contributed "
      "micro-batches ({} samples) are {}, and the run goes on from the parameters it had "
      "(checksum {:016x}); {} bad steps in a row (guard.max_bad_steps_in_a_row: {})",
      host_.step(), discard->why,
      culprits.empty() ? std::string("the sum of several contributions") : culprits, micro_batches,
      samples, fate, host_.start_checksum(), rooms_.guard.bad_in_a_row() + 1,
      rooms_.config.guard().max_bad_steps_in_a_row());
  return out;
}

void StarPlane::cut_backup_workers() {
  size_t arrived = 0;
  for (const auto& [rank, p] : rooms_.book) arrived += p.contribution ? 1 : 0;
  const size_t workers = rooms_.book.size();
  const size_t backups = rooms_.config.step().backup_workers();
  if (workers <= backups || arrived < workers - backups) return;
  for (const auto& entry : rooms_.book) {
    const uint32_t rank = entry.first;
    if (!reducer_.expects(rank) || reducer_.has(rank)) continue;
    host_.remove(rank, Removal::kCut,
                 fmt::format("it was cut as a backup: {} of {} contributed", arrived, workers));
  }
}

std::optional<uint64_t> StarPlane::apply(ClosedStep& closed) {
  v1::StepRecord& record = closed.record;
  const double reduce_begin = rooms_.clock();
  reducer_.finish(host_.step_divisor(closed),
                  static_cast<double>(record.samples()));
  record.set_reduce_seconds(rooms_.clock() - reduce_begin);
  rooms_.timeline.span("reduce", reduce_begin, reduce_begin + record.reduce_seconds());

  Message update;
  update.envelope = make_envelope(host_.step(), kCoordinatorName);
  v1::Update& body = *update.envelope.mutable_update();
  body.set_applied(record.applied());
  body.set_samples(record.samples());
  body.set_optimizer_steps(static_cast<uint64_t>(rooms_.replica.optimizer_steps()) +
                           (record.applied() ? 1 : 0));
  body.set_learning_rate(record.lr());
  add_tensor(update, "gradient", reducer_.gradient());
  if (rooms_.replica.buffer_count() > 0) add_tensor(update, "statistics", reducer_.statistics());
  // Under policy "async" each plan carries the parameters instead.
  if (rooms_.config.step().policy() != v1::POLICY_ASYNC) {
    for (uint32_t rank : rooms_.membership.live_ranks())
      host_.send(rooms_.membership.at(rank).name, share(update));
  }

  const double apply_begin = rooms_.clock();
  rooms_.timeline.span("send update", reduce_begin + record.reduce_seconds(), apply_begin);
  // The update hashes the parameters as it writes them.
  const uint64_t checksum =
      record.applied()
          ? rooms_.replica.apply_update(reducer_.gradient(), reducer_.statistics(), record.lr())
          : rooms_.replica.parameter_checksum();
  record.set_apply_seconds(rooms_.clock() - apply_begin);
  rooms_.timeline.span("apply", apply_begin, apply_begin + record.apply_seconds());
  return checksum;
}

}  // namespace dctrain
