// Real slowness through dctrain-launch (tools/launch/host_slowness.h): a CPU
// quota shows in the throttled worker's own recorded compute times (as a
// ratio to the other workers', whatever the machine's speed), and a run
// that cannot get the slowness it asks for is refused with what is missing
// and a non-zero status, never run without it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/exit_codes.h"
#include "common/median.h"
#include "metrics/metrics_json.h"
#include "tests/testing/cluster.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"
#include "tools/launch/cpu_groups.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::Process;
using testing::small_config;

// Three workers, each a device of 0.45 cores (so that the others' speed
// does not hang on how the kernel shares this host's cores), worker 0 at
// 0.05, a ninth of theirs: its step's compute (ten micro-batches of 32)
// spans many 1 ms budgets on any machine where it takes more than 1 ms.
std::string quota_config() {
  return small_config(3,
                      "stop { max_steps: 8 }\n"
                      "slowness { kind: \"cpu-quota\" cores: 0.45 }\n"
                      "slowness { kind: \"cpu-quota\" workers: [0] cores: 0.05 }",
                      "step { global_batch: 960 micro_batch: 32 tau: inf }");
}

std::string why_not_cgroups() {
  try {
    const CpuGroup probe(find_cpu_group_parent({}), fmt::format("dctrain-probe-{}", ::getpid()));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(RealSlowness, ACpuQuotaShowsInTheThrottledWorkersRecordedComputeTimes) {
  if (const std::string why = why_not_cgroups(); !why.empty()) {
    GTEST_SKIP() << "this machine cannot make CPU groups: " << why;
  }
  const testing::ScratchDir dir("slowness-quota");
  std::ofstream(dir / "run.cfg") << quota_config();
  Process launch(testing::program("dctrain-launch"),
                 {"--config", (dir / "run.cfg").string(), "--out", (dir / "run").string()},
                 dir / "launch.out");
  ASSERT_EQ(launch.wait_for(120s), std::optional<int>(0)) << launch.output();
  EXPECT_NE(launch.output().find(
                "slowness from the first step record on: worker 0: a CPU quota of 0.05 cores"),
            std::string::npos)
      << launch.output();

  // Each worker's step compute times as it reported them (no injected
  // sleep: the config has no delay), after the first step.
  std::map<std::string, std::vector<double>> compute;
  for (const v1::StepRecord& s :
       parse_metrics(testing::read_text(dir / "run" / "metrics.jsonl"), "metrics.jsonl").steps) {
    if (s.step() == 0) continue;
    for (const v1::WorkerStep& w : s.workers()) compute[w.name()].push_back(w.compute_seconds());
  }
  ASSERT_EQ(compute.size(), 3u);
  const double throttled = median(compute["worker-0"]);
  const double others = std::max(median(compute["worker-1"]), median(compute["worker-2"]));
  EXPECT_GT(throttled, 3.0 * others)
      << "worker-0 " << throttled << " s against " << others << " s for the slower other";
  // The groups are gone with the run.
  const CpuGroupParent parent = find_cpu_group_parent({});
  for (const auto& entry : std::filesystem::directory_iterator(parent.path)) {
    EXPECT_EQ(entry.path().filename().string().find(fmt::format("dctrain-{}-", launch.pid())),
              std::string::npos)
        << entry.path();
  }
}

TEST(RealSlowness, WithoutACgroupForTheQuotaTheRunIsRefusedWithTheReason) {
  const testing::ScratchDir dir("slowness-no-cgroup");
  std::ofstream(dir / "run.cfg") << quota_config();
  std::filesystem::create_directories(dir / "not-a-cgroup");
  Process launch(testing::program("dctrain-launch"),
                 {"--config", (dir / "run.cfg").string(), "--out", (dir / "run").string(),
                  "--cgroup-parent", (dir / "not-a-cgroup").string()},
                 dir / "launch.out");
  ASSERT_EQ(launch.wait_for(30s), std::optional<int>(kExitUsage)) << launch.output();
  EXPECT_NE(launch.output().find("asks for real slowness, which cannot be applied here"),
            std::string::npos)
      << launch.output();
  EXPECT_NE(launch.output().find("not a cgroup directory with the cpu controller"),
            std::string::npos)
      << launch.output();
  EXPECT_FALSE(std::filesystem::exists(dir / "run")) << "nothing was started";
}

// As an unprivileged user (setpriv, from root): neither the CPU groups nor
// the network namespaces can be made, and each refusal says so.
TEST(RealSlowness, WithoutPermissionsGroupsAndNamespacesAreRefusedWithTheReason) {
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) {
    GTEST_SKIP() << "needs root and setpriv (util-linux) to run the launcher as another user";
  }
  const testing::ScratchDir dir("slowness-unprivileged");
  ::chmod(dir.path().c_str(), 0777);
  const std::string link = small_config(
      2, "stop { max_steps: 3 }\nslowness { kind: \"slow-link\" workers: [1] rate_bytes: 1e6 }");
  const std::pair<std::string, std::string> cases[] = {
      {small_config(2, "stop { max_steps: 3 }\nslowness { kind: \"cpu-quota\" cores: 0.5 }"),
       "cannot create the cgroup"},
      {link, "a slow link needs network namespaces (root and iproute2)"}};
  int n = 0;
  for (const auto& [config, reason] : cases) {
    SCOPED_TRACE(reason);
    const std::filesystem::path cfg = dir / fmt::format("run{}.cfg", n);
    std::ofstream(cfg) << config;
    ::chmod(cfg.c_str(), 0644);
    Process launch("/usr/bin/setpriv",
                   {"--reuid=65534", "--regid=65534", "--clear-groups", "--",
                    testing::program("dctrain-launch"), "--config", cfg.string(), "--out",
                    (dir / fmt::format("run{}", n)).string()},
                   dir / fmt::format("launch{}.out", n));
    ++n;
    ASSERT_EQ(launch.wait_for(60s), std::optional<int>(kExitUsage)) << launch.output();
    EXPECT_NE(launch.output().find(reason), std::string::npos) << launch.output();
  }
}

}  // namespace
}  // namespace dctrain
