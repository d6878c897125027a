// Real processes for the end-to-end tests: started from DCTRAIN_BIN_DIR with
// their output in a log file, killed (SIGKILL) and reaped when the handle
// goes away, so a failing test leaves nothing running.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.h"
#include "common/files.h"
#include "tests/testing/paths.h"

namespace dctrain::testing {

// The whole file, or "" while it does not exist.
inline std::string read_text(const std::filesystem::path& path) {
  return read_file_if_present(path).value_or("");
}

class Process {
 public:
  Process(const std::string& program, const std::vector<std::string>& args,
          const std::filesystem::path& log)
      : log_(log), child_(options(program, args, log)) {}

  pid_t pid() const { return child_.pid(); }
  void kill(int signal) { child_.signal(signal); }
  // The exit code (128 + signal when killed) once the process ended, or
  // nothing when it is still running after `timeout`.
  std::optional<int> wait_for(std::chrono::milliseconds timeout) {
    const std::optional<ExitStatus> status = child_.wait_for(timeout);
    return status ? std::optional<int>(status->shell_code()) : std::nullopt;
  }
  std::string output() const { return read_text(log_); }

 private:
  static ChildOptions options(const std::string& program, const std::vector<std::string>& args,
                              const std::filesystem::path& log) {
    ChildOptions o;
    o.argv = {program};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.output = ChildOutput::kFile;
    o.output_file = log;
    return o;
  }

  std::filesystem::path log_;
  ChildProcess child_;  // killed (SIGKILL) and reaped on destruction
};

// How many times `part` occurs in `text` (overlaps counted).
inline size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

// Polls `predicate` every 20 ms until it holds or `timeout` passes.
template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return predicate();
}

// The address a coordinator started with --out RUN_DIR wrote into
// RUN_DIR/endpoint (its first line), once it is there; empty when the
// coordinator ended first or `timeout` passed.
inline std::string wait_for_endpoint(const std::filesystem::path& run_dir, Process& coordinator,
                                     std::chrono::milliseconds timeout) {
  std::string line;
  const auto written = [&] {
    std::ifstream in(run_dir / "endpoint");
    return static_cast<bool>(std::getline(in, line)) && !line.empty();
  };
  eventually([&] { return written() || coordinator.wait_for(std::chrono::milliseconds(0)); },
             timeout);
  return written() ? line : std::string();
}

}  // namespace dctrain::testing
