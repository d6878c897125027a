#include "tools/launch/supervisor.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>

#include "common/exit_codes.h"

namespace dctrain {

using Clock = std::chrono::steady_clock;

SupervisedChild& Supervisor::start(const std::string& label, std::vector<std::string> argv) {
  ChildOptions options;
  options.argv = std::move(argv);
  options.output = ChildOutput::kPipe;
  children_.push_back(SupervisedChild{label, ChildProcess(std::move(options)), {}, {}, {}});
  return children_.back();
}

FILE* Supervisor::stream_for(std::string_view line) const {
  for (std::string_view level : {"] [warning] ", "] [error] ", "] [critical] "}) {
    if (line.find(level) != std::string_view::npos) return options_.err;
  }
  return options_.out;
}

void Supervisor::print_line(const SupervisedChild& child, std::string_view text) const {
  const std::string line = fmt::format("[{}] {}\n", child.label, text);
  FILE* stream = stream_for(text);
  std::fwrite(line.data(), 1, line.size(), stream);
  std::fflush(stream);
}

void Supervisor::drain(SupervisedChild& child, bool flush_partial) {
  if (!child.process.read_output(child.pending)) flush_partial = true;
  size_t start = 0;
  for (size_t nl; (nl = child.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    print_line(child, std::string_view(child.pending).substr(start, nl - start));
  }
  child.pending.erase(0, start);
  if (flush_partial && !child.pending.empty()) {
    print_line(child, child.pending);
    child.pending.clear();
  }
}

void Supervisor::reap() {
  for (SupervisedChild& c : children_) {
    if (c.status) continue;
    if (const auto s = c.process.poll()) c.status = s->shell_code();
  }
}

bool Supervisor::all_done() const {
  for (const SupervisedChild& c : children_) {
    if (!c.status || c.process.output_fd() >= 0) return false;
  }
  return true;
}

int Supervisor::supervise(bool coordinator, StopSignals& signals, const std::string& run_dir) {
  std::optional<Clock::time_point> coordinator_done;
  bool interrupted = false;
  while (true) {
    std::vector<pollfd> fds;
    for (SupervisedChild& c : children_) {
      if (c.process.output_fd() >= 0) fds.push_back({c.process.output_fd(), POLLIN, 0});
    }
    fds.push_back({signals.fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    for (SupervisedChild& c : children_) drain(c, false);
    if (const int signal_number = signals.take(); signal_number != 0) {
      std::fprintf(options_.err, "dctrain-launch: signal %d: stopping the run\n", signal_number);
      interrupted = true;
      for (SupervisedChild& c : children_) {
        if (!c.status) c.process.signal(SIGINT);
      }
    }
    reap();
    if (every_pass_) every_pass_();
    std::chrono::milliseconds grace = options_.workers_after_coordinator;
    if (coordinator && children_[0].status && !coordinator_done) {
      coordinator_done = Clock::now();
      if (*children_[0].status != 0 && !all_done()) {
        // No bye will come, and no run is left to finish: stop them now.
        std::fprintf(options_.err,
                     "dctrain-launch: the coordinator exited with status %d; stopping the "
                     "workers\n",
                     *children_[0].status);
        for (SupervisedChild& c : children_) {
          if (c.status || &c == &children_[0]) continue;
          c.process.signal(SIGTERM);
          c.stopped_because = "stopped by dctrain-launch after the coordinator failed";
        }
      }
    }
    if (coordinator_done && *children_[0].status != 0) {
      grace = options_.workers_after_failed_coordinator;
    }
    if (all_done()) break;
    // Workers leave when the coordinator says bye; do not wait for ever.
    if (coordinator_done && Clock::now() - *coordinator_done > grace) {
      for (SupervisedChild& c : children_) {
        if (c.status) continue;
        std::fprintf(options_.err,
                     "dctrain-launch: %s still running %.3g s after the coordinator; killing it\n",
                     c.label.c_str(), std::chrono::duration<double>(grace).count());
        c.process.signal(SIGKILL);
        c.stopped_because = "killed by dctrain-launch, still running after the coordinator ended";
      }
      coordinator_done = Clock::now();
    }
  }
  return status(coordinator, interrupted, run_dir);
}

int Supervisor::status(bool coordinator, bool interrupted, const std::string& run_dir) const {
  int failed = 0;
  for (const SupervisedChild& c : children_) {
    const bool is_coordinator = coordinator && &c == &children_[0];
    if (!is_coordinator && *c.status == kExitReleased) {
      std::fprintf(options_.err,
                   "dctrain-launch: %s was released from the run (see the coordinator's log)\n",
                   c.label.c_str());
      continue;
    }
    if (*c.status != 0) {
      ++failed;
      std::fprintf(options_.err, "dctrain-launch: %s exited with status %d%s%s%s\n",
                   c.label.c_str(), *c.status, c.stopped_because.empty() ? "" : " (",
                   c.stopped_because.c_str(), c.stopped_because.empty() ? "" : ")");
    }
  }
  if (failed == 0) {
    if (!run_dir.empty()) std::fprintf(options_.out, "dctrain-launch: run folder %s\n", run_dir.c_str());
    return kExitDone;
  }
  if (interrupted) return kExitInterrupted;
  // The coordinator's own status says the most (3: the run folder could not
  // be written); a worker's failure alone is 1.
  if (coordinator && *children_[0].status != 0) return *children_[0].status;
  return kExitFailed;
}

}  // namespace dctrain
