#include "common/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace dctrain {

namespace {

using Clock = std::chrono::steady_clock;

// The parent's environment with `options`' changes, as "NAME=value" strings.
std::vector<std::string> child_environment(const ChildOptions& options) {
  auto changed = [&](std::string_view entry) {
    const std::string_view name = entry.substr(0, entry.find('='));
    for (const std::string& u : options.unset_environment) {
      if (name == u) return true;
    }
    for (const auto& [n, v] : options.set_environment) {
      if (name == n) return true;
    }
    return false;
  };
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (!changed(*e)) out.emplace_back(*e);
  }
  for (const auto& [name, value] : options.set_environment) out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// posix_spawn's attributes and file actions, destroyed on every path out.
class SpawnSetup {
 public:
  SpawnSetup() {
    ::posix_spawnattr_init(&attributes_);
    ::posix_spawn_file_actions_init(&actions_);
  }
  ~SpawnSetup() {
    ::posix_spawn_file_actions_destroy(&actions_);
    ::posix_spawnattr_destroy(&attributes_);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
  posix_spawnattr_t* attributes() { return &attributes_; }
  posix_spawn_file_actions_t* actions() { return &actions_; }

 private:
  posix_spawnattr_t attributes_;
  posix_spawn_file_actions_t actions_;
};

// A pipe's two ends, closed unless handed on.
struct Pipe {
  int read = -1, write = -1;
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
};

pid_t wait_no_hang(pid_t pid, int& status) {
  pid_t r;
  do {
    r = ::waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  return r;
}

pid_t wait_blocking(pid_t pid, int& status) {
  pid_t r;
  do {
    r = ::waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  return r;
}

}  // namespace

std::string ExitStatus::describe() const {
  if (signal == 0) return fmt::format("exit code {}", code);
  const char* name = ::sigdescr_np(signal);
  return fmt::format("killed by signal {} ({})", signal, name != nullptr ? name : "unknown");
}

ExitStatus ExitStatus::from_wait_status(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  } else {
    s.code = WEXITSTATUS(status);
  }
  return s;
}

ChildProcess::ChildProcess(ChildOptions options) {
  if (options.argv.empty() || options.argv.front().empty()) {
    throw std::invalid_argument("ChildProcess: no program to run (argv is empty)");
  }
  program_ = options.argv.front();
  own_group_ = options.own_process_group;

  SpawnSetup setup;
  Pipe pipe;
  if (options.output == ChildOutput::kPipe) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      throw std::runtime_error(fmt::format("cannot make a pipe for the output of {}: {}", program_,
                                           std::strerror(errno)));
    }
    pipe.read = fds[0];
    pipe.write = fds[1];
    ::posix_spawn_file_actions_adddup2(setup.actions(), pipe.write, STDOUT_FILENO);
    ::posix_spawn_file_actions_adddup2(setup.actions(), pipe.write, STDERR_FILENO);
  } else if (options.output == ChildOutput::kFile) {
    ::posix_spawn_file_actions_addopen(setup.actions(), STDOUT_FILENO, options.output_file.c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::posix_spawn_file_actions_adddup2(setup.actions(), STDOUT_FILENO, STDERR_FILENO);
  }
  // After the open, so that a relative output file is the parent's.
  if (!options.working_directory.empty()) {
    ::posix_spawn_file_actions_addchdir_np(setup.actions(), options.working_directory.c_str());
  }

  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  sigset_t none;
  sigemptyset(&none);
  ::posix_spawnattr_setsigmask(setup.attributes(), &none);
  // Handlers are reset by exec anyway; ignored signals are not, and the
  // child of a program that ignores SIGPIPE should not start ignoring it.
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM})
    sigaddset(&defaults, s);
  ::posix_spawnattr_setsigdefault(setup.attributes(), &defaults);
  if (own_group_) {
    flags |= POSIX_SPAWN_SETPGROUP;
    ::posix_spawnattr_setpgroup(setup.attributes(), 0);
  }
  ::posix_spawnattr_setflags(setup.attributes(), flags);

  std::vector<std::string> environment = child_environment(options);
  std::vector<char*> envp = pointers(environment);
  std::vector<char*> argv = pointers(options.argv);
  // What the parent printed comes before what the child prints.
  std::fflush(nullptr);
  const int error = ::posix_spawn(&pid_, program_.c_str(), setup.actions(), setup.attributes(),
                                  argv.data(), envp.data());
  if (error != 0) {
    pid_ = -1;
    std::string what = fmt::format("cannot run {}: {}", program_, std::strerror(error));
    if (options.output == ChildOutput::kFile) {
      what +=
          fmt::format(" (or its output file {} cannot be written)", options.output_file.string());
    }
    if (!options.working_directory.empty()) {
      what += fmt::format(" (or its working directory {} cannot be entered)",
                          options.working_directory.string());
    }
    throw std::runtime_error(what);
  }
  if (pipe.read >= 0) {
    ::fcntl(pipe.read, F_SETFL, ::fcntl(pipe.read, F_GETFL) | O_NONBLOCK);
    output_fd_ = pipe.read;
    pipe.read = -1;
  }
}

ChildProcess::~ChildProcess() {
  release();
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : program_(std::move(other.program_)),
      pid_(std::exchange(other.pid_, -1)),
      own_group_(other.own_group_),
      output_fd_(std::exchange(other.output_fd_, -1)),
      status_(std::move(other.status_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    release();
    program_ = std::move(other.program_);
    pid_ = std::exchange(other.pid_, -1);
    own_group_ = other.own_group_;
    output_fd_ = std::exchange(other.output_fd_, -1);
    status_ = std::move(other.status_);
  }
  return *this;
}

void ChildProcess::release() noexcept {
  if (pid_ > 0 && !status_) {
    ::kill(own_group_ ? -pid_ : pid_, SIGKILL);
    int status = 0;
    if (wait_blocking(pid_, status) == pid_) status_ = ExitStatus::from_wait_status(status);
  }
  close_output();
}

void ChildProcess::close_output() {
  if (output_fd_ >= 0) ::close(output_fd_);
  output_fd_ = -1;
}

bool ChildProcess::read_output(std::string& into) {
  char buffer[65536];
  while (output_fd_ >= 0) {
    const ssize_t n = ::read(output_fd_, buffer, sizeof buffer);
    if (n > 0) {
      into.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    close_output();  // the end, or an error that will not go away
  }
  return false;
}

bool ChildProcess::read_output_until_end(std::string& into, Clock::time_point deadline) {
  while (read_output(into)) {
    const auto now = Clock::now();
    if (now >= deadline) return false;
    // Rounded up: poll() takes whole milliseconds, and a wait rounded down
    // would give up before the deadline (0.96 ms left read as 0).
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    pollfd fd{output_fd_, POLLIN, 0};
    ::poll(&fd, 1, static_cast<int>(std::min<long long>(left, 1000)));
  }
  return true;
}

void ChildProcess::signal(int signal_number) {
  if (pid_ > 0 && !status_) ::kill(own_group_ ? -pid_ : pid_, signal_number);
}

std::optional<ExitStatus> ChildProcess::poll() {
  if (pid_ > 0 && !status_) {
    int status = 0;
    if (wait_no_hang(pid_, status) == pid_) status_ = ExitStatus::from_wait_status(status);
  }
  return status_;
}

std::optional<ExitStatus> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  // Short sleeps first: most waits are for a child that is about to end.
  auto pause = std::chrono::milliseconds(1);
  while (!poll() && pid_ > 0) {
    const auto now = Clock::now();
    if (now >= until) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, until - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  return status_;
}

ExitStatus ChildProcess::wait() {
  if (pid_ > 0 && !status_) {
    int status = 0;
    if (wait_blocking(pid_, status) == pid_) status_ = ExitStatus::from_wait_status(status);
  }
  if (!status_) {
    throw std::logic_error(
        fmt::format("waiting for {} (pid {}): it is not a child of this process", program_, pid_));
  }
  return *status_;
}

ExitStatus ChildProcess::kill() {
  signal(SIGKILL);
  return wait();
}

CommandResult run_command(ChildOptions options, std::chrono::milliseconds timeout) {
  options.output = ChildOutput::kPipe;
  options.own_process_group = true;
  const auto deadline = Clock::now() + timeout;
  ChildProcess child(std::move(options));
  CommandResult result;
  const bool ended = child.read_output_until_end(result.output, deadline);
  std::optional<ExitStatus> status;
  if (ended) {
    // Rounded up, so the child has the whole time limit, never a fraction less.
    status = child.wait_for(std::chrono::ceil<std::chrono::milliseconds>(
        std::max<Clock::duration>(deadline - Clock::now(), Clock::duration::zero())));
  }
  if (!status) {
    result.timed_out = true;
    status = child.kill();
    child.read_output(result.output);
  }
  result.status = *status;
  return result;
}

}  // namespace dctrain
