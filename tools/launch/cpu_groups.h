// CPU groups for real slowness (docs/stragglers.md, "Real slowness"): a
// cgroup with the cpu controller per process that is to be slowed, under
// a parent where this user may make them; cgroup v2 (cpu.max) or v1
// (cpu.cfs_quota_us), whichever holds the cpu controller on this host.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

namespace dctrain {

// A cgroup directory under which groups with the cpu controller can be made.
struct CpuGroupParent {
  std::filesystem::path path;
  bool v2 = false;  // cgroup v2 (cpu.max), else v1 (cpu.cfs_quota_us)
};

// `given` when not empty (it must be a cgroup directory with the cpu
// controller), else the root of the hierarchy that holds the cpu controller
// here (/proc/self/mountinfo). Throws std::runtime_error saying what is
// missing.
CpuGroupParent find_cpu_group_parent(const std::filesystem::path& given);

// One cgroup, made on construction and removed on destruction (what is
// still in it goes back to the parent first). Every failure throws
// std::runtime_error naming the file and the reason (a permission, a
// missing controller).
class CpuGroup {
 public:
  CpuGroup(const CpuGroupParent& parent, const std::string& name);
  ~CpuGroup();
  CpuGroup(const CpuGroup&) = delete;
  CpuGroup& operator=(const CpuGroup&) = delete;

  // At most `cores` of CPU time per 20 ms period (0.5: half of one core;
  // at least 0.05, the kernel's 1 ms).
  void set_quota(double cores);
  // Moves the process (all its threads) into the group.
  void add(pid_t pid);
  // Periods in which the group was throttled so far (cpu.stat).
  long throttled_periods() const;
  const std::filesystem::path& path() const { return path_; }

 private:
  CpuGroupParent parent_;
  std::filesystem::path path_;
};

}  // namespace dctrain
