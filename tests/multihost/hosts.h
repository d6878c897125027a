// Hosts on this machine for the multi-host tests: network namespaces joined
// by veth pairs to a bridge that lives in a namespace of its own, each host
// with an address in 10.231.0.0/24; a link limited with tc's token bucket
// filter; a CPU quota through the cgroup v1 cpu controller. Nothing is
// configured outside the namespaces and cgroup this code makes, and every
// piece is removed when its owner goes away (RAII), whatever the test did.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/child_process.h"

namespace dctrain::testing {

// Runs an `ip` or `tc` command line: argv[0] is a full path, no shell;
// stdout and stderr together in the result. One that cannot be started,
// or that runs past 60 s, is a failure with the reason in its output.
inline CommandResult run_command(const std::vector<std::string>& argv) {
  ChildOptions options;
  options.argv = argv;
  try {
    CommandResult r = dctrain::run_command(std::move(options), std::chrono::seconds(60));
    if (r.timed_out) r.output += "\n(killed: still running after 60 s)";
    return r;
  } catch (const std::exception& e) {
    CommandResult r;
    r.status.code = 127;
    r.output = e.what();
    return r;
  }
}

// iproute2's `ip`, or empty when it is not installed.
inline std::string ip_program() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

inline std::string tc_program() {
  for (const char* path : {"/usr/sbin/tc", "/sbin/tc", "/usr/bin/tc", "/bin/tc"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

// One network namespace, deleted (with every interface in it) on destruction.
class NetworkNamespace {
 public:
  // Check error() after construction: empty when the namespace exists.
  explicit NetworkNamespace(std::string name) : name_(std::move(name)), ip_(ip_program()) {
    if (ip_.empty()) {
      error_ = "iproute2's 'ip' is not installed (apt-get install iproute2)";
      return;
    }
    CommandResult r = run_command({ip_, "netns", "add", name_});
    if (!r.ok()) {
      error_ = fmt::format("'ip netns add {}' failed: {}", name_, r.output);
      return;
    }
    created_ = true;
    r = run_command({ip_, "-n", name_, "link", "set", "lo", "up"});
    if (!r.ok()) error_ = fmt::format("cannot bring up lo in namespace {}: {}", name_, r.output);
  }
  ~NetworkNamespace() {
    if (created_) run_command({ip_, "netns", "del", name_});
  }
  NetworkNamespace(const NetworkNamespace&) = delete;
  NetworkNamespace& operator=(const NetworkNamespace&) = delete;

  const std::string& name() const { return name_; }
  const std::string& error() const { return error_; }
  // `ip -n NAME args...`; returns the error text, empty on success.
  std::string ip(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {ip_, "-n", name_};
    argv.insert(argv.end(), args.begin(), args.end());
    const CommandResult r = run_command(argv);
    return r.ok() ? ""
                  : fmt::format("'ip -n {} {}' failed: {}", name_, fmt::join(args, " "), r.output);
  }
  // `ip netns exec NAME tc args...`; returns the error text, empty on success.
  std::string tc(const std::vector<std::string>& args) const {
    const std::string tc = tc_program();
    if (tc.empty()) return "iproute2's 'tc' is not installed (apt-get install iproute2)";
    std::vector<std::string> argv = {ip_, "netns", "exec", name_, tc};
    argv.insert(argv.end(), args.begin(), args.end());
    const CommandResult r = run_command(argv);
    return r.ok() ? ""
                  : fmt::format("'tc {}' in namespace {} failed: {}", fmt::join(args, " "), name_,
                                r.output);
  }
  // The argv prefix that runs a program inside this namespace.
  std::vector<std::string> exec_prefix() const { return {ip_, "netns", "exec", name_}; }

 private:
  std::string name_;
  std::string ip_;
  std::string error_;
  bool created_ = false;
};

// A switch (a bridge in its own namespace) and hosts plugged into it, host
// i at 10.231.0.<10 + i> on its interface eth0; the switch's port to host i
// is p<i>.
class Network {
 public:
  explicit Network(const std::string& prefix) : switch_(prefix + "-sw"), prefix_(prefix) {
    error_ = switch_.error();
    if (error_.empty()) error_ = switch_.ip({"link", "add", "br0", "type", "bridge"});
    if (error_.empty()) error_ = switch_.ip({"link", "set", "br0", "up"});
  }
  const std::string& error() const { return error_; }

  // Adds a host; its namespace, or nothing with error() set.
  const NetworkNamespace* add_host(const std::string& host) {
    if (!error_.empty()) return nullptr;
    const size_t i = hosts_.size();
    auto ns = std::make_unique<NetworkNamespace>(prefix_ + "-" + host);
    error_ = ns->error();
    const std::string port = fmt::format("p{}", i);
    if (error_.empty()) {
      error_ = switch_.ip(
          {"link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns->name()});
    }
    if (error_.empty()) error_ = switch_.ip({"link", "set", port, "master", "br0", "up"});
    if (error_.empty()) error_ = ns->ip({"addr", "add", address(i) + "/24", "dev", "eth0"});
    if (error_.empty()) error_ = ns->ip({"link", "set", "eth0", "up"});
    hosts_.push_back(std::move(ns));
    return error_.empty() ? hosts_.back().get() : nullptr;
  }

  // Limits host i's link both ways with a token bucket filter.
  std::string limit_link(size_t i, const std::string& rate) {
    const std::vector<std::string> tbf = {"root",  "tbf",  "rate",    rate,
                                          "burst", "64kb", "latency", "1s"};
    std::vector<std::string> up = {"qdisc", "add", "dev", "eth0"},
                             down = {"qdisc", "add", "dev", fmt::format("p{}", i)};
    up.insert(up.end(), tbf.begin(), tbf.end());
    down.insert(down.end(), tbf.begin(), tbf.end());
    std::string e = hosts_.at(i)->tc(up);
    if (e.empty()) e = switch_.tc(down);
    return e;
  }

  static std::string address(size_t i) { return fmt::format("10.231.0.{}", 10 + i); }
  const NetworkNamespace& host(size_t i) const { return *hosts_.at(i); }

 private:
  NetworkNamespace switch_;
  std::string prefix_;
  std::string error_;
  std::vector<std::unique_ptr<NetworkNamespace>> hosts_;
};

// A cgroup v1 cpu group with a CPU quota; processes are put in it by pid.
// On destruction, whatever is still in it goes back to the root group and
// the group is removed.
class CpuQuota {
 public:
  static constexpr const char* kRoot = "/sys/fs/cgroup/cpu";

  CpuQuota(const std::string& name, double cpus) : path_(std::filesystem::path(kRoot) / name) {
    if (!std::filesystem::exists(std::filesystem::path(kRoot) / "cpu.cfs_quota_us")) {
      error_ =
          fmt::format("no cgroup v1 cpu controller at {} (cpu.cfs_quota_us is missing)", kRoot);
      return;
    }
    std::error_code ec;
    if (!std::filesystem::create_directory(path_, ec) || ec) {
      error_ = fmt::format("cannot create cgroup {}: {}", path_.string(),
                           ec ? ec.message() : "it exists");
      return;
    }
    created_ = true;
    const long period = 100000;
    if (!write(path_ / "cpu.cfs_period_us", std::to_string(period)) ||
        !write(path_ / "cpu.cfs_quota_us", std::to_string(static_cast<long>(cpus * period)))) {
      error_ = fmt::format("cannot set the CPU quota of {}", path_.string());
    }
  }
  ~CpuQuota() {
    if (!created_) return;
    std::ifstream procs(path_ / "cgroup.procs");
    for (std::string pid; std::getline(procs, pid);)
      write(std::filesystem::path(kRoot) / "cgroup.procs", pid);
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  CpuQuota(const CpuQuota&) = delete;
  CpuQuota& operator=(const CpuQuota&) = delete;

  const std::string& error() const { return error_; }
  // The file a process writes its pid into to join the group.
  std::filesystem::path procs() const { return path_ / "cgroup.procs"; }
  // Throttled periods so far (cpu.stat nr_throttled).
  long throttled_periods() const {
    std::ifstream stat(path_ / "cpu.stat");
    std::string key;
    long value = 0;
    while (stat >> key >> value) {
      if (key == "nr_throttled") return value;
    }
    return -1;
  }

 private:
  static bool write(const std::filesystem::path& file, const std::string& text) {
    std::ofstream out(file);
    out << text << '\n';
    out.flush();
    return static_cast<bool>(out);
  }
  std::filesystem::path path_;
  std::string error_;
  bool created_ = false;
};

}  // namespace dctrain::testing
