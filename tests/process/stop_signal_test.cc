// SIGTERM and SIGINT sent straight to dctrain-coordinator and dctrain-worker
// (docker stop, scancel, a pod's termination, Ctrl-C in a shell), not
// through dctrain-launch, which starts its children with both signals
// blocked. A thread that OpenBLAS starts before main() has them unblocked
// and the kernel may hand the signal to it: the programs must still end
// cleanly (the worker says bye and leaves with status 130, the coordinator
// says bye and writes summary.json), not die of the signal (status 143) or,
// as PID 1 of a container, ignore it. Real processes on 127.0.0.1.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "metrics/metrics_json.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"
#include "worker/worker.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::Process;
using testing::read_text;

std::filesystem::path test_dir(const std::string& name) {
  return testing::fresh_dir(fmt::format("signal-{}", name));
}

// A run for two workers, far longer than the test.
std::filesystem::path write_config(const std::filesystem::path& dir) {
  std::ofstream(dir / "run.cfg") << R"(
name: "signals"
seed: 5
workers: 2
model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: 2000 }
optimizer { kind: "sgd" lr: 0.05 }
step { global_batch: 32 micro_batch: 8 tau: inf }
liveness { heartbeat_seconds: 0.2 silence_seconds: 5 join_timeout_seconds: 60 }
eval { every_steps: 50 batch: 100 }
stop { max_steps: 1000000 }
)";
  return dir / "run.cfg";
}

// The coordinator of that run; its address is read from the run folder once
// it listens.
struct LongRun {
  explicit LongRun(const std::filesystem::path& folder)
      : dir(folder),
        coordinator(testing::program("dctrain-coordinator"),
                    {"--config", write_config(folder).string(), "--bind", "tcp://127.0.0.1:*",
                     "--out", (folder / "run").string()},
                    folder / "coordinator.out") {}

  std::string endpoint() { return testing::wait_for_endpoint(dir / "run", coordinator, 30s); }
  std::string log() const { return read_text(dir / "run" / "coordinator.log"); }
  size_t steps() const {
    return parse_metrics(read_text(dir / "run" / "metrics.jsonl"), "metrics.jsonl").steps.size();
  }

  std::filesystem::path dir;
  Process coordinator;
};

TEST(StopSignals, SigtermMakesTheWorkerSayByeAndTheCoordinatorWriteItsSummary) {
  const auto dir = test_dir("term");
  LongRun run(dir);
  const std::string endpoint = run.endpoint();
  ASSERT_FALSE(endpoint.empty()) << run.coordinator.output();
  Process a(testing::program("dctrain-worker"), {"--connect", endpoint, "--name", "a"},
            dir / "a.out");
  Process b(testing::program("dctrain-worker"), {"--connect", endpoint, "--name", "b"},
            dir / "b.out");
  ASSERT_TRUE(eventually([&] { return run.steps() >= 5; }, 60s))
      << run.coordinator.output() << a.output() << b.output();

  a.kill(SIGTERM);
  EXPECT_EQ(a.wait_for(10s), std::optional<int>(kWorkerInterrupted)) << a.output();
  EXPECT_NE(a.output().find("signal 15 received: leaving the run"), std::string::npos)
      << a.output();
  EXPECT_TRUE(eventually(
      [&] {
        return run.log().find("worker 'a' (rank ") != std::string::npos &&
               run.log().find("left: worker interrupted by a signal") != std::string::npos;
      },
      10s))
      << run.log();
  // The run goes on with b.
  const size_t steps_then = run.steps();
  EXPECT_TRUE(eventually([&] { return run.steps() >= steps_then + 5; }, 30s)) << run.log();

  run.coordinator.kill(SIGTERM);
  EXPECT_EQ(run.coordinator.wait_for(20s), std::optional<int>(130)) << run.coordinator.output();
  EXPECT_NE(run.log().find("signal 15 received: ending the run"), std::string::npos) << run.log();
  const v1::RunSummary summary =
      parse_summary(read_text(dir / "run" / "summary.json"), "summary.json");
  EXPECT_EQ(summary.stop_reason(), "interrupted by a signal") << summary.ShortDebugString();
  EXPECT_EQ(summary.samples_lost(), 0u) << summary.ShortDebugString();
  // b leaves on the coordinator's bye, not by its own timeout.
  const auto b_code = b.wait_for(15s);
  ASSERT_TRUE(b_code.has_value()) << b.output();
  EXPECT_NE(b.output().find("the coordinator ends the run: interrupted by a signal"),
            std::string::npos)
      << b.output();
  std::filesystem::remove_all(dir);
}

TEST(StopSignals, SigintEndsAWorkerThatIsStillWaitingForItsCoordinator) {
  const auto dir = test_dir("int");
  // The address of a coordinator that has ended: nothing answers there.
  LongRun run(dir);
  const std::string endpoint = run.endpoint();
  ASSERT_FALSE(endpoint.empty()) << run.coordinator.output();
  run.coordinator.kill(SIGTERM);
  ASSERT_EQ(run.coordinator.wait_for(20s), std::optional<int>(130)) << run.coordinator.output();

  Process worker(testing::program("dctrain-worker"),
                 {"--connect", endpoint, "--connect-timeout", "60"}, dir / "worker.out");
  ASSERT_TRUE(eventually(
      [&] { return worker.output().find("waiting for the coordinator at") != std::string::npos; },
      20s))
      << worker.output();
  worker.kill(SIGINT);
  EXPECT_EQ(worker.wait_for(10s), std::optional<int>(kWorkerInterrupted)) << worker.output();
  EXPECT_NE(worker.output().find("signal 2 received: leaving the run"), std::string::npos)
      << worker.output();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dctrain
