#include "tools/launch/host_slowness.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include "common/random.h"
#include "runtime/text_format.h"

namespace dctrain {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kLoadStream = 0x6c6f61642d6f6e2dULL;  // "load-on-"

// The workers an entry names (every one when it names none).
std::vector<int> targets(const v1::SlownessConfig& s, int workers) {
  std::vector<int> out;
  for (uint32_t w : s.workers()) out.push_back(static_cast<int>(w));
  if (out.empty()) {
    for (int w = 0; w < workers; ++w) out.push_back(w);
  }
  return out;
}

bool needs_groups(const v1::SlownessConfig& s) {
  return s.kind() == v1::SLOWNESS_CPU_QUOTA || s.kind() == v1::SLOWNESS_CO_LOCATED_LOAD;
}

// Every thread of `pid` allowed on `cpus` (threads it starts later inherit
// it from theirs).
void pin_process(pid_t pid, const cpu_set_t& cpus) {
  std::error_code ec;
  for (const auto& task : fs::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    ::sched_setaffinity(std::stoi(task.path().filename().string()), sizeof cpus, &cpus);
  }
}

void spin_for(double seconds) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  volatile double x = 1.0;
  while (Clock::now() < until) {
    for (int i = 0; i < 10000; ++i) x = x * 1.0000001 + 1e-9;
  }
}

// The load process's life: a burst in a drawn worker's group, a pause, and
// again, until the launcher is gone or stops it. Never returns.
// A burst shares one of the worker's CPUs with it: both are pinned there
// (and the load joins the worker's group, so a quota is shared too); the
// worker gets its CPUs back when the burst ends.
[[noreturn]] void run_load(const v1::SlownessConfig& s, const std::vector<fs::path>& procs,
                           const std::vector<pid_t>& worker_pids, uint64_t seed, size_t entry,
                           int log_fd, Clock::time_point t0) {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const std::vector<int> candidates = targets(s, static_cast<int>(procs.size()));
  for (uint64_t burst = 0;; ++burst) {
    Rng rng({seed, kLoadStream, entry, burst});
    const int w = candidates[rng.below(candidates.size())];
    cpu_set_t allowed, one;
    CPU_ZERO(&allowed);
    CPU_ZERO(&one);
    ::sched_getaffinity(worker_pids[w], sizeof allowed, &allowed);
    const int cpus = CPU_COUNT(&allowed);
    for (int c = 0, seen = 0; c < CPU_SETSIZE && cpus > 0; ++c) {
      if (CPU_ISSET(c, &allowed) && seen++ == w % cpus) CPU_SET(c, &one);
    }
    pin_process(worker_pids[w], one);
    ::sched_setaffinity(0, sizeof one, &one);
    const std::string pid = std::to_string(::getpid()) + "\n";
    const int fd = ::open(procs[w].c_str(), O_WRONLY);
    const bool joined = fd >= 0 && ::write(fd, pid.data(), pid.size()) > 0;
    if (fd >= 0) ::close(fd);
    const double at = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string line =
        joined ? fmt::format("{:.3f} s: co-located load on worker {} for {}\n", at, w,
                             s.quiet_seconds() > 0 ? fmt::format("{:g} s", s.busy_seconds())
                                                   : std::string("the rest of the run"))
               : fmt::format("{:.3f} s: the load cannot join worker {}'s group {}\n", at, w,
                             procs[w].string());
    if (log_fd >= 0 && ::write(log_fd, line.data(), line.size()) < 0) {
      // The log is a record; the load goes on without it.
    }
    if (s.quiet_seconds() <= 0) {
      for (;;) spin_for(3600);
    }
    spin_for(s.busy_seconds());
    pin_process(worker_pids[w], allowed);
    std::this_thread::sleep_for(std::chrono::duration<double>(s.quiet_seconds()));
  }
}

// Groups left by a launcher that was killed (SIGKILL leaves no time to
// remove them): dctrain-PID-worker-W whose PID is gone, and empty.
void remove_stale_groups(const CpuGroupParent& parent) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent.path, ec)) {
    const std::string name = entry.path().filename().string();
    int pid = 0;
    if (std::sscanf(name.c_str(), "dctrain-%d-worker-", &pid) != 1 || pid <= 0) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    ::rmdir(entry.path().c_str());  // fails, harmlessly, while a process is in it
  }
}

}  // namespace

HostSlowness::HostSlowness(const v1::RunConfig& config, int workers, const fs::path& cgroup_parent)
    : workers_(workers), seed_(config.seed()) {
  for (const v1::SlownessConfig& s : config.slowness()) {
    for (int w : targets(s, workers)) {
      if (w >= workers) {
        throw std::runtime_error(
            fmt::format("slowness '{}' names worker {}, but {} workers start here", word(s.kind()),
                        w, workers));
      }
    }
  }
  make_groups(config, cgroup_parent);
  make_network(config);
}

HostSlowness::~HostSlowness() {
  for (pid_t pid : load_pids_) {
    ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void HostSlowness::make_groups(const v1::RunConfig& config, const fs::path& parent_dir) {
  bool wanted = false;
  for (const v1::SlownessConfig& s : config.slowness()) wanted = wanted || needs_groups(s);
  if (!wanted) return;
  const CpuGroupParent parent = find_cpu_group_parent(parent_dir);
  remove_stale_groups(parent);
  for (int w = 0; w < workers_; ++w) {
    groups_.push_back(
        std::make_unique<CpuGroup>(parent, fmt::format("dctrain-{}-worker-{}", ::getpid(), w)));
  }
  for (const v1::SlownessConfig& s : config.slowness()) {
    if (s.kind() == v1::SLOWNESS_CO_LOCATED_LOAD) {
      loads_.push_back(s);
      continue;
    }
    if (s.kind() != v1::SLOWNESS_CPU_QUOTA) continue;
    for (int w : targets(s, workers_)) {
      groups_[w]->set_quota(s.cores());
      applied_.push_back(fmt::format("worker {}: a CPU quota of {:g} cores (cgroup {})", w,
                                     s.cores(), groups_[w]->path().string()));
    }
  }
}

void HostSlowness::make_network(const v1::RunConfig& config) {
  for (const v1::SlownessConfig& s : config.slowness()) {
    if (s.kind() != v1::SLOWNESS_SLOW_LINK) continue;
    if (!network_) {
      network_ = std::make_unique<Network>(fmt::format("dctrain-{}", ::getpid()));
      network_->add_host("coordinator");
      for (int w = 0; w < workers_; ++w) network_->add_host(fmt::format("worker-{}", w));
      if (!network_->error().empty()) {
        throw std::runtime_error(fmt::format(
            "a slow link needs network namespaces (root and iproute2): {}", network_->error()));
      }
    }
    for (int w : targets(s, workers_)) {
      const std::string e =
          network_->slow_link(static_cast<size_t>(w) + 1, s.delay_seconds(), s.rate_bytes());
      if (!e.empty()) throw std::runtime_error("a slow link needs tc's netem: " + e);
      std::vector<std::string> shape;
      if (s.delay_seconds() > 0)
        shape.push_back(fmt::format("{:g} ms added", 1e3 * s.delay_seconds()));
      if (s.rate_bytes() > 0)
        shape.push_back(fmt::format("at most {:g} MB/s", s.rate_bytes() / 1e6));
      applied_.push_back(fmt::format("worker {}: a slow link, {} each way (namespace {})", w,
                                     fmt::join(shape, ", "),
                                     network_->host(static_cast<size_t>(w) + 1).name()));
    }
  }
}

std::vector<std::string> HostSlowness::coordinator_command(std::vector<std::string> argv) const {
  if (!network_) return argv;
  std::vector<std::string> out = network_->host(0).exec_prefix();
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<std::string> HostSlowness::worker_command(int w, std::vector<std::string> argv) const {
  if (!network_) return argv;
  std::vector<std::string> out = network_->host(static_cast<size_t>(w) + 1).exec_prefix();
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::optional<std::string> HostSlowness::coordinator_bind() const {
  if (!network_) return std::nullopt;
  return fmt::format("tcp://{}:*", Network::address(0));
}

void HostSlowness::start(const fs::path& log, const std::vector<pid_t>& worker_pids) {
  for (size_t w = 0; w < groups_.size() && w < worker_pids.size(); ++w) {
    groups_[w]->add(worker_pids[w]);
  }
  std::vector<fs::path> procs;
  for (const auto& g : groups_) procs.push_back(g->path() / "cgroup.procs");
  const Clock::time_point t0 = Clock::now();
  if (loads_.empty()) return;
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  for (size_t i = 0; i < loads_.size(); ++i) {
    const v1::SlownessConfig& s = loads_[i];
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("cannot start the co-located load: fork failed");
    if (pid == 0) run_load(s, procs, worker_pids, seed_, i, log_fd, t0);
    load_pids_.push_back(pid);
    const std::vector<int> on = targets(s, workers_);
    applied_.push_back(fmt::format(
        "a co-located busy process{} on {}",
        s.quiet_seconds() > 0 ? fmt::format(" in bursts of {:g} s every {:g} s", s.busy_seconds(),
                                            s.busy_seconds() + s.quiet_seconds())
                              : "",
        on.size() == 1 ? fmt::format("worker {}", on[0])
                       : fmt::format("a worker drawn per burst of {}", on.size())));
  }
  if (log_fd >= 0) ::close(log_fd);
}

}  // namespace dctrain
