// Real slowness on the workers dctrain-launch starts (RunConfig.slowness,
// docs/stragglers.md "Real slowness"): a CPU quota on a worker's own
// cgroup, a busy process co-located in a worker's cgroup (for the whole
// run, or in bursts on a worker drawn at random), a slow link (every
// process in a network namespace of its own on a bridge, netem on the
// worker's link). Nothing here sleeps in the worker: its recorded compute
// times show the slowness as it is.
//
// What a kind needs (root, a cgroup with the cpu controller, iproute2) is
// made on construction or refused there, with what is missing: a run never
// goes on without the slowness it asked for. Everything made is undone on
// destruction (the load stopped, the groups and namespaces removed).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/config.pb.h"
#include "tools/launch/cpu_groups.h"
#include "tools/launch/host_network.h"

namespace dctrain {

class HostSlowness {
 public:
  // `workers`: those started here, worker-0 to worker-(workers - 1).
  // `cgroup_parent`: where the groups go (empty: found, cpu_groups.h).
  // Throws std::runtime_error saying what is missing.
  HostSlowness(const v1::RunConfig& config, int workers,
               const std::filesystem::path& cgroup_parent);
  ~HostSlowness();
  HostSlowness(const HostSlowness&) = delete;
  HostSlowness& operator=(const HostSlowness&) = delete;

  // The coordinator's and worker w's command lines, inside their
  // namespaces.
  std::vector<std::string> coordinator_command(std::vector<std::string> argv) const;
  std::vector<std::string> worker_command(int w, std::vector<std::string> argv) const;
  // With a slow link: the address the coordinator binds in its namespace,
  // which the workers reach over the bridge.
  std::optional<std::string> coordinator_bind() const;

  // Puts the workers (their pids, worker-0 first) in their groups and
  // starts the co-located load, if any, its bursts logged to `log`: once
  // the run's first step is recorded, so that the workers' start-up
  // (joining, loading data) is not what is slowed. Throws when a worker
  // cannot be moved (the run must not go on without its slowness).
  void start(const std::filesystem::path& log, const std::vector<pid_t>& worker_pids);

  // What was applied, a sentence each ("worker 0: a CPU quota of 0.5
  // cores (cgroup /sys/fs/cgroup/cpu/dctrain-7-worker-0)").
  const std::vector<std::string>& applied() const { return applied_; }

 private:
  void make_groups(const v1::RunConfig& config, const std::filesystem::path& parent);
  void make_network(const v1::RunConfig& config);

  int workers_ = 0;
  uint64_t seed_ = 0;
  std::vector<std::unique_ptr<CpuGroup>> groups_;  // per worker; empty: none needed
  std::unique_ptr<Network> network_;               // host 0 the coordinator, w + 1 worker w
  std::vector<v1::SlownessConfig> loads_;
  std::vector<pid_t> load_pids_;
  std::vector<std::string> applied_;
};

}  // namespace dctrain
