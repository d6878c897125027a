// The run around the steps: evaluation, checkpoints, stop criteria and the
// end of the run; tick()'s deadlines, liveness, heartbeats and progress.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "common/run_files.h"
#include "coordinator/coordinator_impl.h"
#include "runtime/checkpoint.h"
#include "runtime/model_file.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"
#include "runtime/text_format.h"

namespace dctrain {

namespace {

std::string describe_seconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<uint64_t>(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace

std::optional<PendingFile> CoordinatorImpl::write_checkpoint(double now) {
  apply_pending();
  if (setup_.run_dir.empty()) return std::nullopt;
  const double begin = clock_();
  // An evaluation of an earlier step still running: its result goes into
  // the totals the checkpoint saves (a resumed run could not redo it).
  collect_evaluation(true, now);
  v1::CheckpointHeader header;
  *header.mutable_config() = config_;
  header.set_next_step(step_);
  header.set_optimizer_steps(replica_.optimizer_steps());
  *header.mutable_ledger() = ledger_.state();
  *header.mutable_totals() = metrics_.totals();
  *header.mutable_model_input() = setup_.model_input;
  header.mutable_totals()->set_wall_seconds(wall(now));
  PendingFile written =
      dctrain::write_checkpoint(checkpoint_path(setup_.run_dir), std::move(header), replica_);
  timeline_.span("checkpoint", begin, clock_());
  return written;
}

void CoordinatorImpl::put_checkpoint_in_place(PendingFile& checkpoint) {
  metrics_.sync();
  checkpoint.put_in_place();
  log_->info("checkpoint written at step {}", step_);
}

void CoordinatorImpl::run_folder_failed(const std::string& what, double now) {
  if (phase_ == Phase::kFinished) return;
  log_->error("{}", what);
  const std::string dir = setup_.run_dir.string();
  const std::string next =
      std::filesystem::exists(checkpoint_path(setup_.run_dir))
          ? fmt::format(
                "nothing after the last checkpoint is kept: free space, then continue "
                "with dctrain-coordinator --resume {}",
                dir)
          : fmt::format(
                "there is no checkpoint to resume from yet: free space, then start the "
                "run again (--out {} --overwrite)",
                dir);
  finish(fmt::format("the run folder cannot be written ({}); {}", what, next),
         kCoordinatorRunFolderFailed, now);
}

std::optional<std::string> CoordinatorImpl::stop_reached(double now) const {
  const v1::StopConfig& s = config_.stop();
  const v1::RunTotals& t = metrics_.totals();
  if (s.target_accuracy() > 0.0 && t.reached_target()) {
    return fmt::format("target accuracy {:.2f}% reached", 100.0 * s.target_accuracy());
  }
  if (s.max_steps() > 0 && t.steps() >= s.max_steps())
    return fmt::format("max steps {} reached", s.max_steps());
  if (s.max_epochs() > 0.0 && epochs() >= s.max_epochs() - 1e-9) {
    return fmt::format("max epochs {} reached", s.max_epochs());
  }
  if (s.max_wall_seconds() > 0.0 && wall(now) >= s.max_wall_seconds()) {
    return fmt::format("max wall time {} s reached", s.max_wall_seconds());
  }
  return std::nullopt;
}

void CoordinatorImpl::finish(std::string reason, int exit_code, double now) {
  apply_pending();
  v1::RunTotals& t = metrics_.totals();
  // A stop criterion met by a run that trained nothing is no success: every
  // step was dropped, refused or discarded (an attacker, a broken link).
  if (exit_code == kCoordinatorDone && t.steps() > 0 && t.samples_completed() == 0) {
    reason = fmt::format(
        "{}, but no update was applied in {} steps: every step was dropped, refused or "
        "discarded (see the log for why)",
        reason, t.steps());
    log_->error("{}", reason);
    exit_code = kCoordinatorFailed;
  }
  try {
    // The evaluation still running completes, and is recorded, before the
    // summary.
    collect_evaluation(true, now);
    if (exit_code == kCoordinatorDone && evaluations_ != nullptr &&
        (!t.has_eval() || t.last_eval_step() != t.steps())) {
      request_evaluation(now);
      collect_evaluation(true, now);
    }
    if (exit_code == kCoordinatorDone && config_.checkpoint().every_steps() > 0) {
      if (std::optional<PendingFile> checkpoint = write_checkpoint(now)) {
        put_checkpoint_in_place(*checkpoint);
      }
    }
    if (exit_code == kCoordinatorDone && !setup_.run_dir.empty() && setup_.write_model) {
      write_model_files();
    }
  } catch (const FileWriteError& e) {
    log_->error("{}", e.what());
    reason = fmt::format("{}, but the run folder cannot be written ({})", reason, e.what());
    exit_code = kCoordinatorRunFolderFailed;
  }
  phase_ = Phase::kFinished;
  exit_code_ = exit_code;
  stop_reason_ = reason;
  // Stopped between a commit that went out ahead of its sum and the sum:
  // the members applied an update this replica does not have.
  // Under policy "async" a worker holds the parameters of its last plan.
  const bool same_replicas = exit_code == 0 && !plane_->workers_ahead() && !async();
  if (plane_->workers_ahead()) {
    log_->warn(
        "step {} was committed but its sum had not arrived when the run stopped: the workers' "
        "replicas are one update past the coordinator's, whose checkpoint is the run's",
        step_);
  }
  for (uint32_t rank : membership_.live_ranks()) {
    Message bye;
    bye.envelope = make_envelope(step_, kCoordinatorName);
    bye.envelope.mutable_bye()->set_reason(reason);
    bye.envelope.mutable_bye()->set_parameter_checksum(start_checksum_);
    bye.envelope.mutable_bye()->set_has_checksum(same_replicas);
    send(membership_.at(rank).name, std::move(bye));
  }
  t.set_wall_seconds(wall(now));
  if (!setup_.run_dir.empty()) {
    try {
      v1::RunSummary summary = metrics_.summary(config_, wall(now), epochs(), reason);
      if (setup_.blas) *summary.mutable_blas() = *setup_.blas;
      if (!setup_.resume) summary.set_startup_seconds(run_started_ - created_);
      const double forward =
          replica_.model().forward_flops_per_sample(config_.dataset().masked_per_sequence());
      summary.set_forward_flops_per_sample(forward);
      summary.set_training_flops_per_sample(3.0 * forward);
      worker_summary_.add_to(summary, 3.0 * forward);
      summary.set_completed(exit_code_ == kCoordinatorDone);
      summary.set_exit_status(exit_code_);
      write_summary(setup_.run_dir / run_files::kSummary, summary);
    } catch (const std::exception& e) {
      // A run without its summary did not end well, whatever its reason.
      log_->error("summary.json not written: {}", e.what());
      if (exit_code == kCoordinatorDone) exit_code_ = kCoordinatorRunFolderFailed;
    }
  }
  if (exit_code_ == kCoordinatorDone) {
    log_->info("run finished after {} steps ({:.2f} epochs, {:.1f} s): {}", t.steps(), epochs(),
               wall(now), reason);
  } else {
    log_->error("run failed after {} steps (exit status {}): {}", t.steps(), exit_code_, reason);
  }
  publish_live(now);
  try {
    timeline_.close();
  } catch (const FileWriteError& e) {
    log_->error("trace.json not finished: {}", e.what());
    if (exit_code_ == kCoordinatorDone) exit_code_ = kCoordinatorRunFolderFailed;
  }
}

void CoordinatorImpl::write_model_files() {
  const std::vector<std::filesystem::path> written =
      write_model_file(setup_.run_dir / run_files::kModel, replica_.model(),
                       {to_text(config_), config_.run_id(), replica_.optimizer_steps()});
  std::vector<std::string> names;
  for (const std::filesystem::path& path : written) names.push_back(path.string());
  log_->info("the trained model: {}", fmt::join(names, ", "));
}

void CoordinatorImpl::stop(const std::string& reason, int exit_code, double now) {
  if (phase_ != Phase::kFinished) finish(reason, exit_code, now);
}

// -------------------------------------------------------------------- time

void CoordinatorImpl::tick(double now) {
  try {
    advance(now);
  } catch (const FileWriteError& e) {
    run_folder_failed(e.what(), now);
  }
}

void CoordinatorImpl::advance(double now) {
  if (phase_ == Phase::kFinished) return;
  const v1::LivenessConfig& live = config_.liveness();
  if (collect_evaluation(false, now)) {
    publish_live(now);
    // A step in flight closes first; with none (all workers gone), a
    // target reached ends the run now.
    if (phase_ == Phase::kWaiting && metrics_.totals().reached_target()) {
      if (const auto stop = stop_reached(now)) {
        finish(*stop, 0, now);
        return;
      }
    }
  }

  if (now - last_heartbeat_ >= live.heartbeat_seconds()) {
    last_heartbeat_ = now;
    for (uint32_t rank : membership_.live_ranks()) {
      Message hb;
      hb.envelope = make_envelope(step_, kCoordinatorName);
      hb.envelope.mutable_heartbeat()->set_sent_unix_micros(setup_.wall_clock());
      send(membership_.at(rank).name, std::move(hb));
    }
  }

  for (uint32_t rank : membership_.silent(now, live.silence_seconds())) {
    const Member& m = membership_.at(rank);
    log_->warn("worker '{}' (rank {}) silent for {:.1f} s: presumed dead", m.name, rank,
               now - m.last_heard);
    declare_dead(rank, "it died");
  }

  switch (phase_) {
    case Phase::kJoining:
      if (start_when_ready(now)) {
        return;
      } else if (now - created_ > live.join_timeout_seconds()) {
        const size_t ready = membership_.ready_ranks().size();
        if (live.min_workers() > 0 && ready >= live.min_workers()) {
          log_->warn(
              "{} of {} workers joined and loaded their data within {:.0f} s (at least {} "
              "needed, liveness.min_workers): training starts with them; the others are planned "
              "from the step after they join",
              ready, config_.workers(), live.join_timeout_seconds(), live.min_workers());
          start_step(now);
          return;
        }
        finish(fmt::format(
                   "only {} of {} workers joined within {:.0f} s{}: start more dctrain-worker "
                   "processes, lower --workers, raise liveness.join_timeout_seconds, or set "
                   "liveness.min_workers",
                   membership_.live_count(), config_.workers(), live.join_timeout_seconds(),
                   live.min_workers() > 0
                       ? fmt::format(" ({} ready, at least {} needed)", ready, live.min_workers())
                       : ""),
               1, now);
      }
      return;
    case Phase::kWaiting:
      if (start_when_ready(now)) {
        return;
      } else if (membership_.live_count() > 0) {
        waiting_since_ = now;  // a worker joined and is loading its data
      } else if (now - waiting_since_ > live.join_timeout_seconds()) {
        finish(fmt::format("every worker is gone and none joined within {:.0f} s",
                           live.join_timeout_seconds()),
               1, now);
      }
      return;
    case Phase::kStepping:
      plane_->tick(now);
      if (now > deadline_) {
        for (const auto& [rank, p] : planned_) {
          if (plane_->awaits(rank)) {
            lose_if_awaited(rank,
                            fmt::format("it missed the deadline (tau {} + grace {:.3g} s)",
                                        describe_tau(threshold_.tau()), live.grace_seconds()));
          }
        }
      }
      if (step_all_in()) close_step(now);
      if (async() && phase_ == Phase::kStepping) tick_flights(now);
      if (phase_ == Phase::kStepping && now - last_progress_ >= config_.progress_seconds())
        progress(now);
      return;
    case Phase::kFinished:
      return;
  }
}

void CoordinatorImpl::progress(double now) {
  const double period = now - last_progress_;
  const v1::RunTotals& t = metrics_.totals();
  const uint64_t planned =
      t.microbatches_completed() + t.microbatches_dropped() + t.microbatches_orphaned();
  const double drop =
      planned == 0
          ? 0.0
          : 100.0 * static_cast<double>(t.microbatches_dropped() + t.microbatches_orphaned()) /
                static_cast<double>(planned);
  double remaining = std::numeric_limits<double>::infinity();
  const v1::StopConfig& s = config_.stop();
  const double steps_per_epoch = std::ceil(static_cast<double>(setup_.train_size) /
                                           (config_.step().global_batch() * local_steps()));
  if (s.max_steps() > 0)
    remaining = static_cast<double>(s.max_steps() - std::min(s.max_steps(), t.steps()));
  if (s.max_epochs() > 0.0) {
    remaining = std::min(remaining, std::max(0.0, (s.max_epochs() - epochs()) * steps_per_epoch));
  }
  double eta = remaining * recent_step_seconds_;
  if (s.max_wall_seconds() > 0.0) eta = std::min(eta, s.max_wall_seconds() - wall(now));
  const std::string eval =
      t.has_eval() ? fmt::format("{:.2f}% (loss {:.4f}) @ step {}", 100.0 * t.last_eval_accuracy(),
                                 t.last_eval_loss(), t.last_eval_step())
                   : std::string("-");
  log_->info(
      "step {} | epoch {:.2f} | {:.0f} samples/s | loss {:.4f} | eval {} | drop {:.1f}% | "
      "tau {} | {} workers | ETA {}",
      t.steps(), epochs(), period > 0 ? static_cast<double>(progress_samples_) / period : 0.0,
      last_loss_, eval, drop, describe_tau(threshold_.tau()), membership_.live_count(),
      describe_seconds(eta));
  last_progress_ = now;
  progress_samples_ = 0;
}

void CoordinatorImpl::log_norm_guard() const {
  const bool exchange = config_.data_plane().kind() == v1::DATA_PLANE_EXCHANGE;
  if (exchange && !config_.data_plane().check_sums()) {
    log_->warn(
        "norm guard: off, as data_plane.check_sums is off: no member's contribution is bounded "
        "(docs/security.md)");
    return;
  }
  if (!guard_.norm_guard()) {
    log_->info("norm guard: off (guard.norm_multiple 0)");
    return;
  }
  if (exchange) {
    if (config_.workers() < 3) {
      log_->warn(
          "norm guard: off with fewer than 3 members in a round ({} workers): no member's "
          "contribution is bounded (docs/security.md)",
          config_.workers());
      return;
    }
  }
  log_->info(
      "norm guard: refuses a contribution beyond {:g} x the recent median, or of a member "
      "whose last {} steps were scaled beyond {:g} x the others' or flipped against their sum "
      "(guard.norm_multiple {:g})",
      ContributionRecord::kSpikeFactor * guard_.norm_multiple(), ContributionRecord::kWindow,
      guard_.norm_multiple(), guard_.norm_multiple());
}

}  // namespace dctrain
