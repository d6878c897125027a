// Hosts on this machine for the multi-host tests: the launcher's network
// namespaces and CPU groups (tools/launch/host_network.h,
// tools/launch/cpu_groups.h), with the names the tests use.
#pragma once

#include <unistd.h>

#include <string>
#include <vector>

#include "tools/launch/cpu_groups.h"
#include "tools/launch/host_network.h"

namespace dctrain::testing {

using dctrain::Network;
using dctrain::NetworkNamespace;

// Whether iproute2's `ip` is installed.
inline bool have_ip() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(path, X_OK) == 0) return true;
  }
  return false;
}

// The command that joins `group`, then becomes `argv` (so that every thread
// it ever starts is in the group).
inline std::vector<std::string> joining(const CpuGroup& group, std::vector<std::string> argv) {
  std::vector<std::string> out = {
      "/bin/sh", "-c",
      "echo $$ > '" + (group.path() / "cgroup.procs").string() + "' && exec \"$@\"", "sh"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

}  // namespace dctrain::testing
