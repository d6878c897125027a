// The data plane "star" (coordinator/star_plane.h).
#include "coordinator/star_plane.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "coordinator/coordinator_impl.h"

namespace dctrain {

std::string_view StarPlane::description() const {
  return "star (every gradient through this process)";
}

void StarPlane::open_step(const std::vector<uint32_t>& ranks, double, double) {
  c_.reducer_.begin(ranks, true);
}

double StarPlane::deadline(double now, double tau) const {
  return std::isinf(tau) ? std::numeric_limits<double>::infinity()
                         : now + tau + c_.config_.liveness().grace_seconds();
}

std::optional<std::string> StarPlane::contribution_problem(const Message& message) const {
  std::vector<TensorSpec> expected = {{"gradient", c_.replica_.parameter_count()}};
  if (c_.replica_.buffer_count() > 0) {
    expected.push_back({"statistics", c_.replica_.buffer_count()});
  }
  return check_tensors(message, expected);
}

void StarPlane::accept(uint32_t rank, Message message, double) {
  c_.planned_.at(rank).contribution = message.envelope.contribution();
  c_.reducer_.add(rank, std::move(message));
  if (c_.config_.step().policy() == v1::POLICY_BACKUP) cut_backup_workers();
}

void StarPlane::on_sum(uint32_t rank, Message message, double) {
  drop_exchange_message("a sum", rank, message);
}

void StarPlane::on_sketch(uint32_t rank, const Message& message, double) {
  drop_exchange_message("a contribution sketch", rank, message);
}

void StarPlane::drop_exchange_message(const char* what, uint32_t rank,
                                      const Message& message) const {
  c_.log_->debug("dropped {} of step {} from rank {}: the data plane is the star", what,
                 message.envelope.step(), rank);
}

GuardedStep StarPlane::settle() {
  GuardedStep out;
  v1::RunTotals& t = c_.metrics_.totals();
  const char* fate = c_.config_.step().requeue() ? "requeued" : "lost";
  if (c_.guard_.norm_guard()) {
    const std::map<uint32_t, double> cosines = c_.reducer_.cosines_with_the_others();
    std::map<uint32_t, Measured> measured;
    for (const auto& [rank, added] : c_.reducer_.added()) {
      if (!c_.reducer_.has(rank)) continue;
      Measured& m = measured[rank];
      m.gradient = added.norm;
      m.statistics = added.statistics_norm;
      // As counted from the plan (on_contribution), not as the worker says.
      m.samples = c_.planned_.at(rank).contribution->samples();
      const auto cosine = cosines.find(rank);
      m.has_cosine = cosine != cosines.end() && !std::isnan(cosine->second);
      if (m.has_cosine) m.cosine = cosine->second;
    }
    std::set<uint32_t> refused;
    for (const Refused& r : c_.guard_.refuse_by_norm(c_.step_, measured)) {
      const Planned& p = c_.planned_.at(r.rank);
      c_.log_->warn(
          "refused worker '{}' (rank {})'s contribution for step {}: {}; its {} micro-batches "
          "({} samples) are {}",
          c_.membership_.at(r.rank).name, r.rank, c_.step_, r.why, p.micro_batches.size(),
          p.samples, fate);
      c_.remove(r.rank, Removal::kRefusedNorm, r.why);
      refused.insert(r.rank);
    }
    c_.reducer_.release(refused);
    out.refused_norm = static_cast<uint32_t>(refused.size());
    t.set_contributions_refused_norm(t.contributions_refused_norm() + refused.size());
  }

  const std::optional<Discard> discard =
      c_.guard_.judge(c_.reducer_.gradient(), c_.reducer_.statistics(), c_.reducer_.added());
  if (!discard) return out;
  out.discarded = true;
  std::string culprits;
  for (uint32_t rank : discard->culprits) {
    culprits += fmt::format("{}worker '{}' (rank {})", culprits.empty() ? "" : ", ",
                            c_.membership_.at(rank).name, rank);
  }
  size_t micro_batches = 0;
  uint64_t samples = 0;
  for (const auto& [rank, p] : c_.planned_) {
    if (!p.contribution) continue;
    micro_batches += p.micro_batches.size();
    samples += p.samples;
    const bool named = std::find(discard->culprits.begin(), discard->culprits.end(), rank) !=
                       discard->culprits.end();
    c_.remove(rank, named ? Removal::kRefusedUpdate : Removal::kDiscarded,
              "the step was discarded: " + discard->why);
  }
  c_.reducer_.clear();
  t.set_steps_discarded(t.steps_discarded() + 1);
  c_.log_->error(
      "step {} discarded: {}; caused by {}; nothing is applied, the step's {} contributed "
      "micro-batches ({} samples) are {}, and the run goes on from the parameters it had "
      "(checksum {:016x}); {} bad steps in a row (guard.max_bad_steps_in_a_row: {})",
      c_.step_, discard->why,
      culprits.empty() ? std::string("the sum of several contributions") : culprits, micro_batches,
      samples, fate, c_.start_checksum_, c_.guard_.bad_in_a_row() + 1,
      c_.config_.guard().max_bad_steps_in_a_row());
  return out;
}

void StarPlane::cut_backup_workers() {
  size_t arrived = 0;
  for (const auto& [rank, p] : c_.planned_) arrived += p.contribution ? 1 : 0;
  const size_t workers = c_.planned_.size();
  const size_t backups = c_.config_.step().backup_workers();
  if (workers <= backups || arrived < workers - backups) return;
  for (const auto& entry : c_.planned_) {
    const uint32_t rank = entry.first;
    if (!c_.reducer_.expects(rank) || c_.reducer_.has(rank)) continue;
    c_.remove(rank, Removal::kCut,
              fmt::format("it was cut as a backup: {} of {} contributed", arrived, workers));
  }
}

void StarPlane::apply(ClosedStep& closed, uint64_t planned_samples) {
  v1::StepRecord& record = closed.record;
  const double reduce_begin = c_.clock_();
  c_.reducer_.finish(c_.step_divisor(closed, planned_samples),
                     static_cast<double>(record.samples()));
  record.set_reduce_seconds(c_.clock_() - reduce_begin);
  c_.timeline_.span("reduce", reduce_begin, reduce_begin + record.reduce_seconds());

  Message update;
  update.envelope = make_envelope(c_.step_, kCoordinatorName);
  v1::Update& body = *update.envelope.mutable_update();
  body.set_applied(record.applied());
  body.set_samples(record.samples());
  body.set_optimizer_steps(static_cast<uint64_t>(c_.replica_.optimizer_steps()) +
                           (record.applied() ? 1 : 0));
  body.set_learning_rate(record.lr());
  add_tensor(update, "gradient", c_.reducer_.gradient());
  if (c_.replica_.buffer_count() > 0) add_tensor(update, "statistics", c_.reducer_.statistics());
  for (uint32_t rank : c_.membership_.live_ranks())
    c_.send(c_.membership_.at(rank).name, share(update));

  const double apply_begin = c_.clock_();
  c_.timeline_.span("send update", reduce_begin + record.reduce_seconds(), apply_begin);
  // The update hashes the parameters as it writes them.
  c_.start_checksum_ =
      record.applied()
          ? c_.replica_.apply_update(c_.reducer_.gradient(), c_.reducer_.statistics(), record.lr())
          : c_.replica_.parameter_checksum();
  record.set_apply_seconds(c_.clock_() - apply_begin);
  c_.timeline_.span("apply", apply_begin, apply_begin + record.apply_seconds());
}

}  // namespace dctrain
