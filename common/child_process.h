// Child processes, started and ended in one place: the launcher's
// coordinator and workers, the experiment runner's cases, the report's
// gnuplot, the benchmarks' and the tests' programs.
//
// Started with posix_spawn (glibc's runs the child on the parent's memory
// until exec, and reports a failed exec as an error here rather than as a
// child that exits 127). The child gets an empty signal mask and the
// default actions for the usual signals, whatever the parent blocks: a
// program that reads SIGINT and SIGTERM from a signalfd (StopSignals) blocks
// them, and its children must not inherit that.
//
// RAII: a child that was not waited for is killed (SIGKILL, its whole
// process group when it has one of its own) and reaped on destruction, so
// an exception or a failed test leaves nothing running and no zombie.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dctrain {

// How a child ended.
struct ExitStatus {
  int code = 0;    // its exit code, when it exited
  int signal = 0;  // the signal that ended it; 0 when it exited

  bool exited() const { return signal == 0; }
  bool success() const { return signal == 0 && code == 0; }
  // The shell's number: the exit code, or 128 + the signal.
  int shell_code() const { return signal == 0 ? code : 128 + signal; }
  // "exit code 3", "killed by signal 9 (Killed)".
  std::string describe() const;

  // From a waitpid() status word.
  static ExitStatus from_wait_status(int status);
};

// Where the child's stdout and stderr go (both to the same place).
enum class ChildOutput {
  kInherit,  // the parent's
  kFile,     // ChildOptions::output_file, created or truncated (mode 0644)
  kPipe,     // a pipe the parent reads (ChildProcess::read_output)
};

struct ChildOptions {
  // argv[0] is the program's path; there is no PATH search.
  std::vector<std::string> argv;
  // Variables set (or replaced) in the child's copy of the parent's
  // environment, and variables removed from it.
  std::vector<std::pair<std::string, std::string>> set_environment;
  std::vector<std::string> unset_environment;
  ChildOutput output = ChildOutput::kInherit;
  std::filesystem::path output_file;        // for ChildOutput::kFile; opened before the chdir
  std::filesystem::path working_directory;  // empty: the parent's
  // The child leads a process group of its own; signal() and the
  // destructor then reach everything it started that stayed in the group.
  bool own_process_group = false;
};

class ChildProcess {
 public:
  // Starts the child; throws std::runtime_error naming the program and the
  // reason when it cannot be started (no such file, not executable, the
  // output file cannot be opened, ...).
  explicit ChildProcess(ChildOptions options);
  // Kills and reaps the child unless it was waited for.
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& program() const { return program_; }

  // The read end of the output pipe (non-blocking, close-on-exec), for
  // poll(); -1 without ChildOutput::kPipe or once the pipe reached its end.
  int output_fd() const { return output_fd_; }
  // Appends what is waiting in the pipe to `into` without blocking.
  // Returns false once the pipe has reached its end (every writer, the
  // child and whatever inherited its output, closed it) and is closed.
  bool read_output(std::string& into);
  // Reads the pipe to its end, blocking (at most until `deadline`; false
  // when the deadline came first).
  bool read_output_until_end(std::string& into, std::chrono::steady_clock::time_point deadline);

  // Sends `signal_number` to the child (to its group with
  // own_process_group); nothing once it has been reaped.
  void signal(int signal_number);
  // The exit status once the child has ended, without blocking.
  std::optional<ExitStatus> poll();
  // Waits at most `timeout` for the child to end.
  std::optional<ExitStatus> wait_for(std::chrono::milliseconds timeout);
  // Waits for the child to end.
  ExitStatus wait();
  // SIGKILL (the group's too) and wait.
  ExitStatus kill();
  // The exit status, once poll() or a wait has seen it.
  const std::optional<ExitStatus>& status() const { return status_; }

 private:
  void close_output();
  void release() noexcept;  // kill and reap, for the destructor

  std::string program_;
  pid_t pid_ = -1;
  bool own_group_ = false;
  int output_fd_ = -1;
  std::optional<ExitStatus> status_;
};

// What run_command() saw.
struct CommandResult {
  ExitStatus status;
  std::string output;      // stdout and stderr together
  bool timed_out = false;  // killed (with its process group) when the time ran out
  bool ok() const { return !timed_out && status.success(); }
};

// Runs `options.argv` to its end with stdout and stderr captured (the
// output fields of `options` are overridden), in a process group of its own
// that is killed when `timeout` runs out. Throws like ChildProcess when the
// program cannot be started.
CommandResult run_command(ChildOptions options,
                          std::chrono::milliseconds timeout = std::chrono::hours(24));

}  // namespace dctrain
