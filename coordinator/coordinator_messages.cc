// The accept phase: every message in, decoded and checked (version, sender,
// key), and the hellos, byes, readiness and star contributions it carries.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "common/source_version.h"
#include "common/version.h"
#include "coordinator/coordinator_impl.h"
#include "runtime/checkpoint.h"
#include "runtime/setup.h"
#include "runtime/text_format.h"

namespace dctrain {

// ---------------------------------------------------------------- messages

void CoordinatorImpl::handle(Received received, double now) {
  try {
    dispatch(std::move(received), now);
    plane_->members_lost(now);
    if (step_all_in()) close_step(now);
    start_when_ready(now);
    if (async() && phase_ == Phase::kStepping) send_async_plans(now);
  } catch (const FileWriteError& e) {
    run_folder_failed(e.what(), now);
  }
}

bool CoordinatorImpl::start_when_ready(double now) {
  if (phase_ == Phase::kJoining && membership_.ready_ranks().size() == config_.workers()) {
    log_->info("all {} workers joined and loaded their data; training starts", config_.workers());
    start_step(now);
    return true;
  }
  if (phase_ == Phase::kWaiting && !membership_.ready_ranks().empty()) {
    start_step(now);
    return true;
  }
  return false;
}

void CoordinatorImpl::dispatch(Received received, double now) {
  const std::string peer = received.peer;
  Message message;
  if (const auto problem = decode(std::move(received.parts), message)) {
    bad_message(peer, fmt::format("dropped a message from peer '{}': {}", peer, *problem), now);
    return;
  }
  if (const auto problem = version_problem(message.envelope)) {
    refuse_hello(peer, fmt::format("refused peer '{}': {}", peer, *problem), *problem, now);
    return;
  }
  if (message.envelope.sender() != peer) {
    bad_message(peer,
                fmt::format("dropped a {} from peer '{}' that signs as '{}': the sender must be "
                            "the worker's name",
                            body_name(message.envelope), peer, message.envelope.sender()),
                now);
    return;
  }
  // A running worker's name belongs to the key it joined with (CURVE): a
  // message under that name from another key is not its.
  if (const Member* m = membership_.live_member(peer); m != nullptr && m->key != received.key) {
    log_->warn(
        "refused a {} from peer '{}' with CURVE key {}: that name belongs to the running worker "
        "with key {}; give each worker its own name",
        body_name(message.envelope), peer, received.key.empty() ? "(none)" : received.key,
        m->key.empty() ? "(none)" : m->key);
    if (message.envelope.body_case() == v1::Envelope::kHello) {
      refuse(peer, fmt::format("the name '{}' belongs to a running worker with another key", peer));
    }
    return;
  }
  switch (message.envelope.body_case()) {
    case v1::Envelope::kHello:
      on_hello(received, message, now);
      return;
    case v1::Envelope::kHeartbeat:
      if (Member* m = membership_.live_member(peer)) {
        m->last_heard = now;
      } else {
        ask_to_rejoin(peer, "heartbeat from a worker that is not in the run");
      }
      return;
    case v1::Envelope::kContribution:
      on_contribution(peer, std::move(message), now);
      return;
    case v1::Envelope::kBye:
      on_bye(peer, message, now);
      return;
    case v1::Envelope::kReady:
      on_ready(peer, now);
      return;
    case v1::Envelope::kExchangeSum:
    case v1::Envelope::kRoundCheckAnswer:
      on_plane_message(peer, std::move(message), now);
      return;
    case v1::Envelope::kError:
      peer_log_.peer_says(peer,
                          fmt::format("worker '{}' reports: {}", peer,
                                      peer_text(message.envelope.error().message())),
                          now);
      if (Member* m = membership_.live_member(peer)) m->last_heard = now;
      return;
    default:
      bad_message(peer,
                  fmt::format("dropped a {} from peer '{}': workers do not send that",
                              body_name(message.envelope), peer),
                  now);
      return;
  }
}

void CoordinatorImpl::on_hello(const Received& from, const Message& message, double now) {
  const v1::Hello& hello = message.envelope.hello();
  if (phase_ == Phase::kFinished) {
    refuse(from.peer, "the run has finished");
    return;
  }
  if (hello.worker_name() != from.peer) {
    bad_message(from.peer,
                fmt::format("dropped a hello from peer '{}' naming itself '{}'", from.peer,
                            hello.worker_name()),
                now);
    return;
  }
  if (needs_data_root_ && !hello.has_data_dir()) {
    const std::string reason = fmt::format(
        "this run trains on '{}' data: start the worker with --data-dir pointing at a data root "
        "that holds it",
        word(config_.dataset().kind()));
    refuse_hello(from.peer, fmt::format("refused worker '{}': {}", from.peer, reason), reason, now);
    return;
  }
  if (const auto problem = plane_->hello_problem(hello)) {
    log_->warn("refused worker '{}': {}", from.peer, *problem);
    refuse(from.peer, *problem);
    return;
  }
  if (Member* existing = membership_.live_member(from.peer)) {
    if (!existing->ready && now - existing->welcomed_at < config_.liveness().silence_seconds()) {
      // Its welcome (the whole replica's state) went out less than the
      // silence ago and is not taken yet: another would only queue another
      // copy of the state. A welcome lost on the way is sent again at the
      // first hello past the silence.
      bad_message(from.peer,
                  fmt::format("worker '{}' (rank {}) said hello again {:.3g} s after its welcome, "
                              "before it took it; the welcome already sent stands",
                              existing->name, existing->rank, now - existing->welcomed_at),
                  now);
      return;
    }
    // The worker restarted (or lost its state) before we noticed.
    log_->warn("worker '{}' (rank {}) said hello again: it restarted; welcoming it afresh",
               existing->name, existing->rank);
    declare_dead(existing->rank, "it restarted during the step");
  }
  const std::optional<uint32_t> rank = membership_.admit(from.peer, hello.threads(), now);
  if (rank) speed_planner_.forget(*rank);  // a new worker: the old one's speed is not its own
  if (!rank) {
    const std::string reason =
        fmt::format("the run already has its {} workers, all alive; raise 'workers' to add more",
                    config_.workers());
    refuse_hello(from.peer, fmt::format("refused worker '{}': {}", from.peer, reason), reason, now);
    return;
  }
  membership_.identify(*rank, worker_identity(from.key, hello.exchange_endpoint()));
  if (missed_too_many(membership_.at(*rank))) {
    // Taken out of its steps (a slow or failing link on the exchange) until
    // the limit, presumed dead each time: the churn of welcomes ends here.
    const Member& m = membership_.at(*rank);
    release(*rank, fmt::format("at its return: it missed its last {} steps in a row (its "
                               "deadline, or its part of the exchange) and failed its last {} "
                               "exchange rounds, and has not contributed since",
                               m.missed_in_a_row, m.failed_rounds_in_a_row));
    return;
  }
  log_->info(
      "worker '{}' joined as rank {} ({} threads, dctrain {}, BLAS core {}); {} of {} "
      "workers live",
      from.peer, *rank, hello.threads(), hello.software_version(),
      hello.has_blas() ? fmt::format("{} ({}), sgemm {:.1f} GFLOP/s", hello.blas().core(),
                                     hello.blas().how(), hello.blas().sgemm_gflops())
                       : std::string("not reported"),
      membership_.live_count(), config_.workers());
  if (hello.has_blas() && !hello.blas().warning().empty()) {
    log_->warn("worker '{}': BLAS: {}", from.peer, hello.blas().warning());
  }
  if (hello.software_version() != source_version()) {
    log_->warn(
        "worker '{}' runs dctrain {}, this coordinator {}: the builds differ (both speak "
        "protocol {}), so its compute may not be this build's; rebuild it from the same commit "
        "to rule that out",
        from.peer, hello.software_version(), source_version(), kProtocolVersion);
  }
  membership_.at(*rank).key = from.key;
  worker_summary_.joined(from.peer, *rank, hello);
  plane_->joined(*rank, hello);
  membership_.at(*rank).welcomed_at = now;
  welcome(*rank);
}

void CoordinatorImpl::welcome(uint32_t rank) {
  apply_pending();  // the welcome carries the replica's state
  Message m;
  m.envelope = make_envelope(step_, kCoordinatorName);
  v1::Welcome& w = *m.envelope.mutable_welcome();
  w.set_rank(rank);
  *w.mutable_config() = config_;
  w.set_optimizer_steps(static_cast<uint64_t>(replica_.optimizer_steps()));
  w.set_parameter_checksum(start_checksum_);
  replica_.add_state(m);
  send(membership_.at(rank).name, std::move(m));
}

void CoordinatorImpl::refuse(const std::string& peer, const std::string& reason) {
  Message m;
  m.envelope = make_envelope(step_, kCoordinatorName);
  m.envelope.mutable_refusal()->set_reason(reason);
  m.envelope.mutable_refusal()->set_expected_protocol_version(m.envelope.protocol_version());
  send(peer, std::move(m));
}

void CoordinatorImpl::ask_to_rejoin(const std::string& peer, const std::string& why) {
  log_->info("asked peer '{}' to say hello again ({})", peer, why);
  Message m;
  m.envelope = make_envelope(step_, kCoordinatorName);
  m.envelope.mutable_error()->set_message(
      fmt::format("{}: you are not a member of the run; say hello to rejoin", why));
  m.envelope.mutable_error()->set_rejoin(true);
  send(peer, std::move(m));
}

void CoordinatorImpl::on_bye(const std::string& peer, const Message& message, double now) {
  Member* m = membership_.live_member(peer);
  if (m == nullptr) return;
  const uint32_t rank = m->rank;
  peer_log_.peer_says(peer,
                      fmt::format("worker '{}' (rank {}) left: {}", peer, rank,
                                  peer_text(message.envelope.bye().reason())),
                      now);
  declare_dead(rank, "it left during the step");
}

void CoordinatorImpl::on_ready(const std::string& peer, double now) {
  Member* m = membership_.live_member(peer);
  if (m == nullptr) {
    ask_to_rejoin(peer, "ready from a worker that is not in the run");
    return;
  }
  m->last_heard = now;
  if (!m->ready) log_->debug("worker '{}' (rank {}) is ready", peer, m->rank);
  m->ready = true;
}

void CoordinatorImpl::on_contribution(const std::string& peer, Message message, double now) {
  const uint64_t step = message.envelope.step();
  Member* member = membership_.live_member(peer);
  if (member == nullptr) {
    ask_to_rejoin(peer, fmt::format("contribution for step {}", step));
    return;
  }
  member->last_heard = now;
  const uint32_t rank = member->rank;
  timeline_.contribution(rank, peer, message.envelope, now);
  if (async()) {
    on_async_contribution(rank, std::move(message), now);
    return;
  }
  // A redone exchange round reports the same compute again: counted once.
  const bool redo_report = message.envelope.contribution().exchange().attempt() > 0;
  if (message.envelope.has_contribution() && !redo_report) {
    if (!worker_summary_.contribution_arrived(peer, step, message.envelope.contribution(), now)) {
      log_->warn(
          "worker '{}' (rank {})'s contribution for step {} has negative or non-finite "
          "times, or more samples than its micro-batches hold: left out of the per-worker "
          "summary",
          peer, rank, step);
    }
  }
  if (phase_ != Phase::kStepping || step < step_) {
    log_->info("discarded worker '{}' (rank {})'s contribution for past step {} (now at step {})",
               peer, rank, step, step_);
    return;
  }
  if (step > step_) {
    log_->warn("dropped worker '{}' (rank {})'s contribution for future step {} (now at step {})",
               peer, rank, step, step_);
    return;
  }
  auto planned = planned_.find(rank);
  if (planned == planned_.end() || !plane_->awaits(rank)) {
    log_->warn("dropped worker '{}' (rank {})'s contribution for step {}: {}", peer, rank, step,
               planned == planned_.end() ? "it has no plan in this step"
                                         : "the step no longer waits for it");
    return;
  }
  Planned& p = planned->second;
  const v1::Contribution& c = message.envelope.contribution();
  if (const std::optional<std::string> stale = plane_->out_of_round(c)) {
    log_->warn("dropped worker '{}' (rank {})'s contribution for step {}: {}", peer, rank, step,
               *stale);
    return;
  }

  // Everything is checked before anything is used.
  const std::optional<std::string> problem = contribution_problem(p, message);
  if (problem) {
    if (!tensors_finite(message)) guard_.nonfinite_contribution();
    log_->error("rejected worker '{}' (rank {})'s contribution for step {}: {}", peer, rank, step,
                *problem);
    lose_if_awaited(rank, "its contribution was rejected");
    return;
  }
  if (c.parameter_checksum() != start_checksum_) {
    // Its gradient was computed on other parameters: using it would move
    // every replica by a wrong update. Drop it, and resend the state.
    v1::RunTotals& t = metrics_.totals();
    t.set_checksum_mismatches(t.checksum_mismatches() + 1);
    p.resync = true;
    lose_if_awaited(
        rank, fmt::format("its replica differs from the coordinator's (checksum {:016x}, "
                          "expected {:016x}); it gets the coordinator's state after the update",
                          c.parameter_checksum(), start_checksum_));
    return;
  }
  plane_->accept(rank, std::move(message), now);
}

std::optional<std::string> CoordinatorImpl::contribution_problem(const Planned& p,
                                                                 const Message& message) const {
  const v1::Contribution& c = message.envelope.contribution();
  std::optional<std::string> problem = plane_->contribution_problem(message);
  if (!problem) {
    std::set<uint64_t> seen;
    uint64_t samples = 0;
    for (const v1::MicroBatchTime& t : c.completed()) {
      if (!p.micro_batches.contains(t.id()) || !seen.insert(t.id()).second) {
        problem =
            fmt::format("completed micro-batch {} was not planned or is listed twice", t.id());
        break;
      }
      if (!std::isfinite(t.compute_seconds()) || t.compute_seconds() < 0.0) {
        problem = fmt::format("micro-batch {} has compute time {}", t.id(), t.compute_seconds());
        break;
      }
      samples += p.sizes.at(t.id());
    }
    for (uint64_t id : c.dropped()) {
      if (problem) break;
      if (!p.micro_batches.contains(id) || !seen.insert(id).second) {
        problem = fmt::format("dropped micro-batch {} was not planned or is listed twice", id);
      }
    }
    if (!problem && seen.size() != p.micro_batches.size()) {
      problem = fmt::format("it accounts for {} of its {} planned micro-batches", seen.size(),
                            p.micro_batches.size());
    }
    if (!problem) {
      problem = contribution_totals_problem(c, samples, max_loss_terms_per_sample(config_.model()));
    }
  }
  return problem;
}

void CoordinatorImpl::on_plane_message(const std::string& peer, Message message, double now) {
  Member* member = membership_.live_member(peer);
  const bool sum = message.envelope.has_exchange_sum();
  if (member == nullptr) {
    ask_to_rejoin(peer, fmt::format("{} from a worker that is not in the run",
                                    sum ? "exchange sum" : "round check answer"));
    return;
  }
  member->last_heard = now;
  if (sum) {
    plane_->on_sum(member->rank, std::move(message), now);
  } else {
    plane_->on_round_check(member->rank, message, now);
  }
}

void CoordinatorImpl::log_standby(const StepShares& shares) {
  for (uint32_t rank : shares.entered_standby) {
    const Member& m = membership_.at(rank);
    const std::optional<double> own = speed_planner_.estimate(rank);
    log_->warn(
        "worker '{}' (rank {}) kept as a standby from step {}: its share would be below one "
        "micro-batch ({} per micro-batch); it gets an empty plan, and one micro-batch every "
        "{} steps to measure it again",
        m.name, rank, step_, own ? fmt::format("{:.4g} s", *own) : std::string("no estimate"),
        config_.step().rebalance().probe_every_steps());
  }
  for (uint32_t rank : shares.left_standby) {
    log_->info("worker '{}' (rank {}) is no longer a standby from step {}: it has a share again",
               membership_.at(rank).name, rank, step_);
  }
  if (shares.changed) {
    std::string text;
    for (const WorkerShare& s : shares.workers) {
      text += fmt::format("{}rank {}: {}", text.empty() ? "" : ", ", s.rank, s.micro_batches);
    }
    log_->info("step {}: micro-batch shares by measured speed: {}", step_, text);
  }
}

// ------------------------------------------------- bad peers, lost connections
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
  declare_dead(rank, "it died (its connection closed)");
  plane_->members_lost(now);
  if (step_all_in()) close_step(now);
  if (async() && phase_ == Phase::kStepping) send_async_plans(now);
}

}  // namespace dctrain
