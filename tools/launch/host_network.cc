#include "tools/launch/host_network.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <cmath>

#include "common/child_process.h"

namespace dctrain {

namespace {

// Runs an `ip` or `tc` command line (argv[0] a full path, no shell), its
// output in the result; one that cannot start, or runs past 60 s, fails
// with the reason in its output.
CommandResult run_tool(const std::vector<std::string>& argv) {
  ChildOptions options;
  options.argv = argv;
  try {
    CommandResult r = run_command(std::move(options), std::chrono::seconds(60));
    if (r.timed_out) r.output += "\n(killed: still running after 60 s)";
    return r;
  } catch (const std::exception& e) {
    CommandResult r;
    r.status.code = 127;
    r.output = e.what();
    return r;
  }
}

std::string find_program(const char* name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    const std::string path = std::string(dir) + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

}  // namespace

NetworkNamespace::NetworkNamespace(std::string name)
    : name_(std::move(name)), ip_(find_program("ip")) {
  if (ip_.empty()) {
    error_ = "iproute2's 'ip' is not installed (apt-get install iproute2)";
    return;
  }
  CommandResult r = run_tool({ip_, "netns", "add", name_});
  if (!r.ok()) {
    error_ = fmt::format("'ip netns add {}' failed: {}", name_, r.output);
    return;
  }
  created_ = true;
  r = run_tool({ip_, "-n", name_, "link", "set", "lo", "up"});
  if (!r.ok()) error_ = fmt::format("cannot bring up lo in namespace {}: {}", name_, r.output);
}

NetworkNamespace::~NetworkNamespace() {
  if (created_) run_tool({ip_, "netns", "del", name_});
}

std::string NetworkNamespace::ip(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {ip_, "-n", name_};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult r = run_tool(argv);
  return r.ok() ? ""
                : fmt::format("'ip -n {} {}' failed: {}", name_, fmt::join(args, " "), r.output);
}

std::string NetworkNamespace::tc(const std::vector<std::string>& args) const {
  const std::string tc = find_program("tc");
  if (tc.empty()) return "iproute2's 'tc' is not installed (apt-get install iproute2)";
  std::vector<std::string> argv = {ip_, "netns", "exec", name_, tc};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult r = run_tool(argv);
  return r.ok() ? ""
                : fmt::format("'tc {}' in namespace {} failed: {}", fmt::join(args, " "), name_,
                              r.output);
}

Network::Network(const std::string& prefix) : switch_(prefix + "-sw"), prefix_(prefix) {
  error_ = switch_.error();
  if (error_.empty()) error_ = switch_.ip({"link", "add", "br0", "type", "bridge"});
  if (error_.empty()) error_ = switch_.ip({"link", "set", "br0", "up"});
}

const NetworkNamespace* Network::add_host(const std::string& host) {
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
  if (error_.empty()) error_ = ns->ip({"addr", "add", address(i) + "/16", "dev", "eth0"});
  if (error_.empty()) error_ = ns->ip({"link", "set", "eth0", "up"});
  hosts_.push_back(std::move(ns));
  return error_.empty() ? hosts_.back().get() : nullptr;
}

std::string Network::shape(size_t i, const std::vector<std::string>& qdisc) {
  std::vector<std::string> up = {"qdisc", "add", "dev", "eth0", "root"},
                           down = {"qdisc", "add", "dev", fmt::format("p{}", i), "root"};
  up.insert(up.end(), qdisc.begin(), qdisc.end());
  down.insert(down.end(), qdisc.begin(), qdisc.end());
  std::string e = hosts_.at(i)->tc(up);
  if (e.empty()) e = switch_.tc(down);
  return e;
}

std::string Network::limit_link(size_t i, const std::string& rate) {
  return shape(i, {"tbf", "rate", rate, "burst", "64kb", "latency", "1s"});
}

std::string Network::slow_link(size_t i, double delay_seconds, double rate_bytes) {
  const std::string rate = fmt::format("{}bit", std::llround(rate_bytes * 8));
  // A rate alone is tbf's (in every kernel); a delay needs netem, with a
  // queue long enough that a gradient's packets wait rather than drop.
  if (delay_seconds <= 0) return limit_link(i, rate);
  std::vector<std::string> netem = {"netem", "limit", "100000", "delay",
                                    fmt::format("{}us", std::llround(delay_seconds * 1e6))};
  if (rate_bytes > 0) netem.insert(netem.end(), {"rate", rate});
  const std::string e = shape(i, netem);
  return e.empty() ? e : e + " (a delay needs the kernel's sch_netem; a rate alone does not)";
}

std::string Network::address(size_t i) {
  return fmt::format("10.231.{}.{}", (10 + i) / 256, (10 + i) % 256);
}

}  // namespace dctrain
