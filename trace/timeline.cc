#include "trace/timeline.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "common/run_files.h"
#include "trace/recorder.h"

namespace dctrain {

namespace {

// Limits on what one report may carry, so a confused or hostile peer cannot
// make the coordinator write without bound.
constexpr size_t kMaxNameBytes = 64;
constexpr int kMaxArgs = 16;

std::optional<std::string> report_problem(const v1::TraceReport& r) {
  for (double t :
       {r.plan_sent_seconds(), r.plan_received_seconds(), r.built_seconds(), r.sent_seconds()}) {
    if (!std::isfinite(t)) return "a timestamp is not finite";
  }
  if (static_cast<size_t>(r.events_size()) > TraceRecorder::kMaxPendingEvents) {
    return fmt::format("{} events, more than the {} a worker keeps", r.events_size(),
                       TraceRecorder::kMaxPendingEvents);
  }
  for (const v1::TraceEvent& e : r.events()) {
    if (e.name().empty() || e.name().size() > kMaxNameBytes) {
      return fmt::format("an event name of {} bytes (1 to {})", e.name().size(), kMaxNameBytes);
    }
    if (!std::isfinite(e.begin_seconds()) || !std::isfinite(e.duration_seconds()) ||
        e.duration_seconds() < 0.0) {
      return fmt::format("event '{}' has time {} + {}", e.name(), e.begin_seconds(),
                         e.duration_seconds());
    }
    if (e.args_size() > kMaxArgs) {
      return fmt::format("event '{}' has {} args (at most {})", e.name(), e.args_size(), kMaxArgs);
    }
  }
  return std::nullopt;
}

}  // namespace

bool TraceSelection::traced(uint64_t step) const {
  const uint64_t begin = config_.window_begin();
  if (step >= begin && step - begin < config_.window_steps()) return true;
  // Counted from 1, as evaluations and checkpoints every K steps are: the
  // K-th step (index K - 1) is the one they follow.
  return config_.every_steps() > 0 && (step + 1) % config_.every_steps() == 0;
}

std::string TraceSelection::describe() const {
  std::string out;
  if (config_.window_steps() > 0) {
    out = fmt::format("steps {}-{}", config_.window_begin(),
                      config_.window_begin() + config_.window_steps() - 1);
  }
  if (config_.every_steps() > 0) {
    out += fmt::format("{}one step in {} (indices {}, {}, ...)", out.empty() ? "" : " and ",
                       config_.every_steps(), config_.every_steps() - 1,
                       2 * config_.every_steps() - 1);
  }
  return out.empty() ? std::string("no steps") : out;
}

Timeline::Timeline(const std::filesystem::path& run_dir, const v1::TraceConfig& config,
                   double origin, std::shared_ptr<spdlog::logger> log)
    : selection_(config), origin_(origin), log_(std::move(log)) {
  if (run_dir.empty() || !selection_.any()) return;
  writer_ = std::make_unique<TraceWriter>(run_dir / run_files::kTrace);
  writer_->process_name(kCoordinatorPid, "coordinator", 0);
  writer_->thread_name(kCoordinatorPid, 0, "steps");
  flush();
  log_->info("timeline: {} into {} (open it at ui.perfetto.dev)", selection_.describe(),
             writer_->path().string());
}

void Timeline::plan(uint64_t step, v1::Plan& plan, double now) {
  if (!active()) return;
  step_ = step;
  v1::TraceRequest& request = *plan.mutable_trace();
  request.set_sent_seconds(now);
  request.set_record(selection_.traced(step));
}

void Timeline::span(std::string_view name, double begin, double end) {
  if (!traced(step_)) return;
  writer_->complete(kCoordinatorPid, 0, name, us(begin), (end - begin) * 1e6,
                    {{"step", static_cast<double>(step_)}});
  flush();
}

void Timeline::contribution(uint32_t rank, const std::string& name, const v1::Envelope& envelope,
                            double received) {
  if (!active() || !envelope.has_contribution() || !envelope.contribution().has_trace()) return;
  const v1::TraceReport& report = envelope.contribution().trace();
  if (const auto problem = report_problem(report)) {
    ++reports_refused_;
    log_->warn("timeline: left out worker '{}' (rank {})'s report for step {}: {}", name, rank,
               envelope.step(), *problem);
    return;
  }
  WorkerTrack& track = workers_[rank];
  if (track.name != name) {
    // Another process in the slot: another clock.
    track = WorkerTrack{};
    track.name = name;
  }
  const RoundTrip trip{report.plan_sent_seconds(), report.plan_received_seconds(),
                       report.sent_seconds(), received};
  if (!track.clock.add(trip)) {
    log_->debug("timeline: worker '{}' step {}: round trip {} / {} / {} / {} left out", name,
                envelope.step(), trip.sent, trip.peer_received, trip.peer_sent, trip.received);
  }
  const double round_trip = (trip.received - trip.sent) - (trip.peer_sent - trip.peer_received);
  write_worker_events(rank, track, report, envelope.step(), round_trip);
}

void Timeline::name_worker(uint32_t rank, WorkerTrack& track) {
  if (track.named) return;
  const int pid = static_cast<int>(rank) + 1;
  writer_->process_name(pid, fmt::format("worker {} ({})", rank, track.name), pid);
  writer_->thread_name(pid, kComputeTid, "compute");
  writer_->thread_name(pid, kMessagesTid, "messages");
  track.named = true;
}

void Timeline::write_worker_events(uint32_t rank, WorkerTrack& track, const v1::TraceReport& report,
                                   uint64_t step, double round_trip) {
  const bool step_traced = selection_.traced(step);
  if (!step_traced && report.events_size() == 0) return;
  name_worker(rank, track);
  const int pid = static_cast<int>(rank) + 1;
  const ClockEstimate estimate = track.clock.estimate().value_or(ClockEstimate{0.0, INFINITY});
  const auto at = [&](double worker_time) { return us(track.clock.to_local(worker_time)); };
  uint64_t refused = 0;
  for (const v1::TraceEvent& e : report.events()) {
    // Only the steps this coordinator traces: a worker has no say in it.
    if (!selection_.traced(e.step()) || e.step() > step) {
      ++refused;
      continue;
    }
    TraceArgList args = {{"step", static_cast<double>(e.step())}};
    for (const auto& [key, value] : e.args()) args.push_back({key, value});
    if (e.name() == "apply" && track.sent && track.sent->first == e.step()) {
      // From the step's contribution leaving to its update being applied.
      writer_->complete(pid, kMessagesTid, "wait for update", at(track.sent->second),
                        (e.begin_seconds() - track.sent->second) * 1e6,
                        {{"step", static_cast<double>(e.step())}});
      track.sent.reset();
    }
    if (e.instant()) {
      writer_->instant(pid, kComputeTid, e.name(), at(e.begin_seconds()), args);
    } else {
      writer_->complete(pid, kComputeTid, e.name(), at(e.begin_seconds()),
                        e.duration_seconds() * 1e6, args);
    }
  }
  if (refused > 0) {
    log_->warn("timeline: left out {} events of worker '{}' (rank {}) for steps not traced",
               refused, track.name, rank);
  }
  if (report.events_lost() > 0) {
    log_->warn("timeline: worker '{}' (rank {}) left out {} events to stay bounded", track.name,
               rank, report.events_lost());
  }
  if (step_traced) {
    const double s = static_cast<double>(step);
    writer_->instant(pid, kComputeTid, "plan received", at(report.plan_received_seconds()),
                     {{"step", s},
                      {"clock_offset_us", estimate.offset * 1e6},
                      {"alignment_error_us", estimate.error_bound() * 1e6},
                      {"round_trip_us", round_trip * 1e6}});
    writer_->complete(pid, kMessagesTid, "send", at(report.built_seconds()),
                      (report.sent_seconds() - report.built_seconds()) * 1e6, {{"step", s}});
    track.sent = std::make_pair(step, report.sent_seconds());
  }
  // No flush here: the events go to the file with the coordinator's next
  // span (each traced step closes with several) or at close(). A flush per
  // contribution rewrote every worker's clock entry, O(workers) each time,
  // O(workers^2) a step (bench_coordinator_scale).
}

std::optional<ClockEstimate> Timeline::clock(uint32_t rank) const {
  const auto it = workers_.find(rank);
  if (it == workers_.end()) return std::nullopt;
  return it->second.clock.estimate();
}

void Timeline::flush() {
  std::string workers;
  for (const auto& [rank, track] : workers_) {
    const std::optional<ClockEstimate> e = track.clock.estimate();
    if (!workers.empty()) workers += ",";
    workers += fmt::format(
        "{{\"rank\":{},\"name\":{},\"round_trips\":{},\"clock_offset_us\":{},"
        "\"alignment_error_us\":{}}}",
        rank, json_string(track.name), track.clock.samples(),
        e ? json_number(e->offset * 1e6) : "null",
        e ? json_number(e->error_bound() * 1e6) : "null");
  }
  writer_->set_other_data(fmt::format(
      "{{\"traced\":{},\"time_origin\":\"the coordinator's clock when it started\","
      "\"clock_alignment\":\"each worker's offset from the plan/contribution round trip with the "
      "smallest delay: ((t1 - t0) + (t2 - t3)) / 2, off by at most half that delay\","
      "\"workers\":[{}]}}",
      json_string(selection_.describe()), workers));
  try {
    writer_->flush();
  } catch (...) {
    // A run folder that cannot be written stops the run (the caller's);
    // the timeline writes nothing more.
    writer_.reset();
    throw;
  }
}

void Timeline::close() {
  if (active()) flush();
}

}  // namespace dctrain
