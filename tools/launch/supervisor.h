// dctrain-launch's children: started with their output into pipes, every
// line they print streamed with a prefix (warnings and errors to the error
// stream), a stop signal forwarded, their ends awaited, and the launcher's
// exit status from theirs (docs/failure-handling.md, "Exit statuses").
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/child_process.h"
#include "common/stop_signals.h"

namespace dctrain {

struct SupervisedChild {
  std::string label;     // "coordinator", "worker 0", ...
  ChildProcess process;  // stdout+stderr into a pipe the supervisor reads
  std::string pending;   // a partial line
  std::optional<int> status;
  // Why the supervisor stopped it, when it did ("" if it ended by itself).
  std::string stopped_because;
};

struct SupervisorOptions {
  FILE* out = stdout;  // the children's lines but warnings and errors
  FILE* err = stderr;  // their warnings and errors, and the supervisor's own
  // How long the workers get to leave once the coordinator has ended
  // (they leave on its bye); then they are killed.
  std::chrono::milliseconds workers_after_coordinator{20000};
  // Once the coordinator has failed (a status other than 0), no bye comes:
  // the workers are asked to stop (SIGTERM) at once and killed after this.
  std::chrono::milliseconds workers_after_failed_coordinator{3000};
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options = {}) : options_(options) {}

  // Starts `argv` (its output into a pipe read here); throws
  // std::runtime_error when it cannot be started.
  SupervisedChild& start(const std::string& label, std::vector<std::string> argv);
  std::vector<SupervisedChild>& children() { return children_; }

  // Prints the complete lines waiting on `child`'s pipe with its prefix (the
  // partial one too with `flush_partial`, or once the pipe has ended).
  void drain(SupervisedChild& child, bool flush_partial);
  // Takes the status of every child that has ended.
  void reap();

  // Called once per pass of supervise()'s loop (about every 100 ms), on its
  // thread: work that waits for the run to reach a point.
  void every_pass(std::function<void()> work) { every_pass_ = std::move(work); }

  // Streams the children's output until every one has ended, forwarding a
  // stop signal (SIGINT to each); returns the launcher's status. With
  // `coordinator`, children()[0] is the coordinator: its status says the
  // most, and its end gives the workers workers_after_coordinator to
  // leave (its failure: a SIGTERM, and workers_after_failed_coordinator). A worker the coordinator
  // released (kExitReleased) left a run that went on without it: not a failure. `run_dir`: named on
  // success.
  int supervise(bool coordinator, StopSignals& signals, const std::string& run_dir);

  // Where a child's line goes: its warnings and errors (spdlog's
  // "[warning]", "[error]" and "[critical]" levels) to `err`, the rest to
  // `out`.
  FILE* stream_for(std::string_view line) const;

 private:
  void print_line(const SupervisedChild& child, std::string_view text) const;
  // Every child has ended and its pipe reached its end.
  bool all_done() const;
  // The launcher's status from the children's (after all_done()).
  int status(bool coordinator, bool interrupted, const std::string& run_dir) const;

  SupervisorOptions options_;
  std::vector<SupervisedChild> children_;
  std::function<void()> every_pass_;
};

}  // namespace dctrain
