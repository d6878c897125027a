// The coordinator's side of the timeline (trace/README.md): it decides
// which steps are traced, stamps every plan with its send time, takes each
// contribution's report (the round trip's timestamps and the worker's
// events), estimates each worker's clock offset from those round trips
// (trace/clock_offset.h), and writes trace.json in the run folder with
// every event on the coordinator's clock: a track for the coordinator and
// one per worker rank.
//
// trace.json is written as the run goes (trace/trace_writer.h): it is a
// whole JSON document after every step that recorded something, so a run
// stopped by a signal, or even killed, leaves a file that opens. A write
// that fails throws FileWriteError (common/files.h) to the coordinator,
// which stops the run; the timeline writes nothing more.
//
// Coordinator events belong to the step of the latest plan (its reduce,
// update, evaluation and checkpoint come before the next plan). A worker's
// event is written with the offset estimate in force when its report
// arrives; the estimate only ever moves to a round trip with a smaller
// delay, so the error bound written with a step's "plan received" mark
// bounds every event of that step.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "proto/config.pb.h"
#include "proto/wire.pb.h"
#include "trace/clock_offset.h"
#include "trace/trace_writer.h"

namespace dctrain {

// Which steps a config traces.
class TraceSelection {
 public:
  explicit TraceSelection(const v1::TraceConfig& config) : config_(config) {}
  bool any() const { return config_.window_steps() > 0 || config_.every_steps() > 0; }
  bool traced(uint64_t step) const;
  // "steps 0-19 and one step in 100 (indices 99, 199, ...)", for logs and the file.
  std::string describe() const;

 private:
  v1::TraceConfig config_;
};

class Timeline {
 public:
  static constexpr int kCoordinatorPid = 0;
  static constexpr int kComputeTid = 1;   // a worker's compute thread
  static constexpr int kMessagesTid = 2;  // a worker's messages: send, wait for the update

  // Writes `run_dir`/trace.json when `config` traces any step and `run_dir`
  // is not empty; otherwise every call returns at once. `origin` (the
  // coordinator's clock) is time 0 in the file.
  Timeline(const std::filesystem::path& run_dir, const v1::TraceConfig& config, double origin,
           std::shared_ptr<spdlog::logger> log);

  bool active() const { return writer_ != nullptr; }
  bool traced(uint64_t step) const { return active() && selection_.traced(step); }

  // A plan for `step` is about to leave at `now`: stamps it (t0), and asks
  // for the step's events when it is traced.
  void plan(uint64_t step, v1::Plan& plan, double now);

  // A slice on the coordinator's track (coordinator clock), in the step of
  // the latest plan: "step", "plan", "reduce", "evaluation", ...
  void span(std::string_view name, double begin, double end);

  // A contribution from worker `name` at `rank` arrived at `received`: its
  // round trip feeds the worker's clock estimate, its events are written (to the
  // file with the next span's flush, or at close()).
  // A report that does not hold together is logged and left out.
  void contribution(uint32_t rank, const std::string& name, const v1::Envelope& envelope,
                    double received);

  // Writes what is pending (the file is whole after every call anyway).
  void close();

  // The clock estimate of the worker at `rank`, if any round trip came back.
  std::optional<ClockEstimate> clock(uint32_t rank) const;

 private:
  struct WorkerTrack {
    std::string name;
    ClockOffsetEstimator clock;
    bool named = false;
    // The latest traced step's contribution: when it left (worker clock),
    // for the wait until that step's update is applied.
    std::optional<std::pair<uint64_t, double>> sent;
  };

  double us(double coordinator_time) const { return (coordinator_time - origin_) * 1e6; }
  void write_worker_events(uint32_t rank, WorkerTrack& track, const v1::TraceReport& report,
                           uint64_t step, double round_trip);
  void name_worker(uint32_t rank, WorkerTrack& track);
  void flush();

  TraceSelection selection_;
  double origin_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<TraceWriter> writer_;
  uint64_t step_ = 0;  // the latest plan's
  std::map<uint32_t, WorkerTrack> workers_;
  uint64_t reports_refused_ = 0;
};

}  // namespace dctrain
