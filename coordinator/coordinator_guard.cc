// The coordinator's guard over a closing step (coordinator/update_guard.h):
// what it refuses and discards, and how that reaches the ledger, the log and
// the metrics. Kept apart from coordinator_steps.cc, which calls guard_step()
// before the step settles.
#include <fmt/format.h>

#include <algorithm>

#include "coordinator/coordinator_impl.h"

namespace dctrain {

GuardedStep CoordinatorImpl::guard_step() {
  GuardedStep out;
  v1::RunTotals& t = metrics_.totals();
  const char* fate = config_.step().requeue() ? "requeued" : "lost";
  if (guard_.norm_guard()) {
    std::map<uint32_t, double> norms;
    std::map<uint32_t, uint64_t> samples;  // as counted from the plan (on_contribution)
    for (const auto& [rank, added] : reducer_.added()) {
      if (!reducer_.has(rank)) continue;
      norms[rank] = added.norm;
      samples[rank] = planned_.at(rank).contribution->samples();
    }
    std::set<uint32_t> refused;
    for (const Refused& r : guard_.refuse_by_norm(norms, samples)) {
      const Planned& p = planned_.at(r.rank);
      log_->warn(
          "refused worker '{}' (rank {})'s contribution for step {}: {}; its {} micro-batches "
          "({} samples) are {}",
          membership_.at(r.rank).name, r.rank, step_, r.why, p.micro_batches.size(), p.samples,
          fate);
      remove(r.rank, Removal::kRefusedNorm, r.why);
      refused.insert(r.rank);
    }
    reducer_.release(refused);
    out.refused_norm = static_cast<uint32_t>(refused.size());
    t.set_contributions_refused_norm(t.contributions_refused_norm() + refused.size());
  }

  const std::optional<Discard> discard =
      guard_.judge(reducer_.gradient(), reducer_.statistics(), reducer_.added());
  if (!discard) return out;
  out.discarded = true;
  std::string culprits;
  for (uint32_t rank : discard->culprits) {
    culprits += fmt::format("{}worker '{}' (rank {})", culprits.empty() ? "" : ", ",
                            membership_.at(rank).name, rank);
  }
  size_t micro_batches = 0;
  uint64_t samples = 0;
  for (auto& [rank, p] : planned_) {
    if (!p.contribution) continue;
    micro_batches += p.micro_batches.size();
    samples += p.samples;
    const bool named = std::find(discard->culprits.begin(), discard->culprits.end(), rank) !=
                       discard->culprits.end();
    remove(rank, named ? Removal::kRefusedUpdate : Removal::kDiscarded,
           "the step was discarded: " + discard->why);
  }
  reducer_.clear();
  t.set_steps_discarded(t.steps_discarded() + 1);
  log_->error(
      "step {} discarded: {}; caused by {}; nothing is applied, the step's {} contributed "
      "micro-batches ({} samples) are {}, and the run goes on from the parameters it had "
      "(checksum {:016x}); {} bad steps in a row (guard.max_bad_steps_in_a_row: {})",
      step_, discard->why,
      culprits.empty() ? std::string("the sum of several contributions") : culprits, micro_batches,
      samples, fate, start_checksum_, guard_.bad_in_a_row() + 1,
      config_.guard().max_bad_steps_in_a_row());
  return out;
}

void CoordinatorImpl::bad_message(const std::string& peer, const std::string& line, double now) {
  v1::RunTotals& t = metrics_.totals();
  t.set_bad_messages(t.bad_messages() + 1);
  peer_log_.bad_message(peer, line, now);
}

void CoordinatorImpl::refuse_hello(const std::string& peer, const std::string& line,
                                   const std::string& reason, double now) {
  if (peer_log_.answer_refusal(peer, line, now)) refuse(peer, reason);
}

void CoordinatorImpl::on_disconnected(const std::string& peer, double now) {
  try {
    declare_disconnected(peer, now);
  } catch (const FileWriteError& e) {
    run_folder_failed(e.what(), now);
  }
}

void CoordinatorImpl::declare_disconnected(const std::string& peer, double now) {
  if (phase_ == Phase::kFinished) return;
  Member* m = membership_.live_member(peer);
  if (m == nullptr) return;
  const uint32_t rank = m->rank;
  log_->warn(
      "worker '{}' (rank {}): its connection closed; declared dead now, not after "
      "liveness.silence_seconds (its slot is free for a restarted or new worker)",
      peer, rank);
  v1::RunTotals& t = metrics_.totals();
  t.set_workers_disconnected(t.workers_disconnected() + 1);
  if (phase_ == Phase::kStepping) lose_if_awaited(rank, "it died (its connection closed)");
  membership_.mark_dead(rank);
  end_round_without_lost_members(now);
  if (phase_ == Phase::kStepping && reducer_.complete()) close_step(now);
}

}  // namespace dctrain
