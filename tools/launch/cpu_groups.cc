#include "tools/launch/cpu_groups.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace dctrain {

namespace fs = std::filesystem;

namespace {

// A short period, so that a throttled worker runs as a slower CPU rather
// than in bursts of the kernel's default 100 ms.
constexpr long kPeriodMicros = 20000;

bool is_v1_cpu(const fs::path& dir) {
  return fs::exists(dir / "cpu.cfs_quota_us");
}

// A v2 directory whose children may get the cpu controller.
bool is_v2_cpu(const fs::path& dir) {
  std::ifstream in(dir / "cgroup.controllers");
  for (std::string c; in >> c;) {
    if (c == "cpu") return true;
  }
  return false;
}

// Writes `text` to a cgroup file; throws naming it and the reason.
void write_file(const fs::path& file, const std::string& text) {
  std::ofstream out(file);
  out << text << '\n';
  out.flush();
  if (!out) {
    throw std::runtime_error(
        fmt::format("cannot write '{}' to {}: {}", text, file.string(), std::strerror(errno)));
  }
}

// The hierarchy that holds the cpu controller, from /proc/self/mountinfo.
std::optional<CpuGroupParent> mounted_cpu_hierarchy() {
  std::ifstream in("/proc/self/mountinfo");
  std::optional<CpuGroupParent> v2;
  for (std::string line; std::getline(in, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream before(line.substr(0, dash)), after(line.substr(dash + 3));
    std::string id, parent, device, root, mount_point, type, source, options;
    before >> id >> parent >> device >> root >> mount_point;
    after >> type >> source >> options;
    if (type == "cgroup" && ("," + options + ",").find(",cpu,") != std::string::npos) {
      return CpuGroupParent{mount_point, false};
    }
    if (type == "cgroup2" && is_v2_cpu(mount_point)) v2 = CpuGroupParent{mount_point, true};
  }
  return v2;
}

}  // namespace

CpuGroupParent find_cpu_group_parent(const fs::path& given) {
  if (!given.empty()) {
    if (is_v1_cpu(given)) return {given, false};
    if (is_v2_cpu(given)) return {given, true};
    throw std::runtime_error(fmt::format(
        "{} is not a cgroup directory with the cpu controller (neither cpu.cfs_quota_us nor "
        "'cpu' in cgroup.controllers)",
        given.string()));
  }
  if (std::optional<CpuGroupParent> found = mounted_cpu_hierarchy()) return *found;
  throw std::runtime_error(
      "no cgroup hierarchy with the cpu controller is mounted on this host (see "
      "/proc/self/mountinfo); mount one, or pass --cgroup-parent DIR");
}

CpuGroup::CpuGroup(const CpuGroupParent& parent, const std::string& name)
    : parent_(parent), path_(parent.path / name) {
  if (parent_.v2) {
    // The parent's children get the cpu controller only once it is enabled
    // in its subtree (a no-op when it already is).
    write_file(parent_.path / "cgroup.subtree_control", "+cpu");
  }
  std::error_code ec;
  if (!fs::create_directory(path_, ec)) {
    throw std::runtime_error(fmt::format(
        "cannot create the cgroup {}: {} (real slowness needs root, or a cgroup delegated to "
        "this user: --cgroup-parent DIR)",
        path_.string(), ec ? ec.message() : "it exists"));
  }
}

CpuGroup::~CpuGroup() {
  std::ifstream procs(path_ / "cgroup.procs");
  for (std::string pid; std::getline(procs, pid);) {
    std::ofstream(parent_.path / "cgroup.procs") << pid << '\n';
  }
  std::error_code ec;
  fs::remove(path_, ec);
}

void CpuGroup::set_quota(double cores) {
  const long quota = std::lround(cores * kPeriodMicros);
  if (quota < 1000) {
    throw std::runtime_error(
        fmt::format("a CPU quota of {} cores is below the kernel's 1 ms per period", cores));
  }
  if (parent_.v2) {
    write_file(path_ / "cpu.max", fmt::format("{} {}", quota, kPeriodMicros));
  } else {
    write_file(path_ / "cpu.cfs_period_us", std::to_string(kPeriodMicros));
    write_file(path_ / "cpu.cfs_quota_us", std::to_string(quota));
  }
}

void CpuGroup::add(pid_t pid) {
  write_file(path_ / "cgroup.procs", std::to_string(pid));
}

long CpuGroup::throttled_periods() const {
  std::ifstream stat(path_ / "cpu.stat");
  std::string key;
  long value = 0;
  while (stat >> key >> value) {
    if (key == "nr_throttled") return value;
  }
  return -1;
}

}  // namespace dctrain
