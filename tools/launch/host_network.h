// Hosts on this machine: network namespaces joined by veth pairs to a
// bridge that lives in a namespace of its own, host i at address(i) on its
// interface eth0, the switch's port to it p<i>. A link can be shaped (tc's
// netem: delay and rate; tbf: a rate). Nothing is configured outside the
// namespaces made here, and each is deleted with its owner (RAII). Used by
// dctrain-launch for a slow link (docs/stragglers.md) and by the
// multi-host tests. Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and
// iproute2.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace dctrain {

// One network namespace, deleted (with every interface in it) on destruction.
class NetworkNamespace {
 public:
  // Check error() after construction: empty when the namespace exists.
  explicit NetworkNamespace(std::string name);
  ~NetworkNamespace();
  NetworkNamespace(const NetworkNamespace&) = delete;
  NetworkNamespace& operator=(const NetworkNamespace&) = delete;

  const std::string& name() const { return name_; }
  const std::string& error() const { return error_; }
  // `ip -n NAME args...`; returns the error text, empty on success.
  std::string ip(const std::vector<std::string>& args) const;
  // `ip netns exec NAME tc args...`; returns the error text, empty on success.
  std::string tc(const std::vector<std::string>& args) const;
  // The argv prefix that runs a program inside this namespace.
  std::vector<std::string> exec_prefix() const { return {ip_, "netns", "exec", name_}; }

 private:
  std::string name_;
  std::string ip_;
  std::string error_;
  bool created_ = false;
};

// A switch (a bridge in its own namespace) and hosts plugged into it.
class Network {
 public:
  explicit Network(const std::string& prefix);
  const std::string& error() const { return error_; }

  // Adds a host; its namespace, or nothing with error() set.
  const NetworkNamespace* add_host(const std::string& host);
  // Limits host i's link both ways with a token bucket filter ("16mbit").
  std::string limit_link(size_t i, const std::string& rate);
  // Shapes host i's link both ways: `delay_seconds` added (netem), at most
  // `rate_bytes` per second (0: no limit; tbf when there is no delay).
  std::string slow_link(size_t i, double delay_seconds, double rate_bytes);

  // 10.231.0.10 for host 0, then up (a /16).
  static std::string address(size_t i);
  const NetworkNamespace& host(size_t i) const { return *hosts_.at(i); }

 private:
  // `qdisc` added on both ends of host i's link; the error text, or empty.
  std::string shape(size_t i, const std::vector<std::string>& qdisc);

  NetworkNamespace switch_;
  std::string prefix_;
  std::string error_;
  std::vector<std::unique_ptr<NetworkNamespace>> hosts_;
};

}  // namespace dctrain
