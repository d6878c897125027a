// The coordinator's own work per step against the number of workers: the
// real Coordinator (membership, planner, ledger, reduce, update, metrics
// records, run folder) on a fake clock, its workers in this process (the
// real worker session and trainer on a small softmax model, as the
// coordinator's unit tests run them), each message through encode and
// decode. Only the time inside the coordinator's handle() and tick() is
// counted; the workers' is not. Each worker gets one micro-batch of 4 a
// step (global batch 4 x workers), star data plane, tau = infinity.
//
//   bench_coordinator_scale [--workers N]... [--steps S]
//
// Prints, per worker count, the coordinator's milliseconds per step and per
// worker, and that per-worker cost as a ratio to the smallest run's: a
// coordinator whose per-step cost is O(workers) keeps the ratio near 1.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "coordinator/coordinator.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"
#include "tests/testing/fake_cluster.h"

namespace {

using namespace dctrain;
using Clock = std::chrono::steady_clock;

struct Result {
  int workers = 0;
  uint64_t steps = 0;
  double coordinator_seconds = 0.0, wall_seconds = 0.0;
};

Result run(int workers, int steps, const std::filesystem::path& run_dir) {
  const std::string text = fmt::format(
      R"(name: "scale"
seed: 5
workers: {}
model {{ name: "mlp" image_channels: 1 image_height: 8 image_width: 8 }}
dataset {{ kind: "synthetic" synthetic_samples: {} }}
optimizer {{ kind: "sgd" lr: 0.1 momentum: 0.9 }}
step {{ global_batch: {} micro_batch: 4 tau: inf }}
data_plane {{ kind: "star" }}
liveness {{ heartbeat_seconds: 1000 silence_seconds: 10000 grace_seconds: 1000 join_timeout_seconds: 10000 }}
stop {{ max_steps: {} }}
)",
      workers, 4 * workers * (steps + 1), 4 * workers, steps);
  v1::RunConfig config = parse_run_config(text, "scale");
  finalize_run_config(config);
  const std::unique_ptr<Dataset> train = open_dataset(config, Split::kTrain, "");
  resolve_step_budget(config, train_samples(config, *train));
  Replica replica(testing::softmax_for(config), config.optimizer());
  testing::RecordingOutbox outbox;
  testing::CapturedLog log;
  log.logger->set_level(spdlog::level::warn);
  double now = 0.0;
  CoordinatorSetup setup{config, train_samples(config, *train), run_dir, std::nullopt,
                         std::nullopt};
  Coordinator coordinator(setup, replica, nullptr, outbox, log.logger, [&] { return now; });
  std::map<std::string, testing::FakeWorker> fakes;
  std::vector<std::string> names;
  for (int i = 0; i < workers; ++i) {
    names.push_back(fmt::format("w{:04d}", i));
    fakes.emplace(names.back(), testing::FakeWorker(names.back(), *train));
  }

  Result result{workers, 0, 0.0, 0.0};
  const auto wall0 = Clock::now();
  // Times the coordinator's part only.
  const auto coordinator_does = [&](auto&& work) {
    const auto t0 = Clock::now();
    work();
    result.coordinator_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (const std::string& name : names) {
    coordinator_does(
        [&] { coordinator.handle(testing::as_received(name, fakes.at(name).hello()), now); });
  }
  bool moved = true;
  while (moved && !coordinator.finished()) {
    moved = false;
    coordinator_does([&] { coordinator.tick(now); });
    for (const std::string& name : names) {
      auto& queue = outbox.inbox[name];
      while (!queue.empty()) {
        Message m = std::move(queue.front());
        queue.pop_front();
        moved = true;
        now += 1e-6;
        testing::FakeWorker& worker = fakes.at(name);
        for (Message& answer : worker.deliver(m)) {
          coordinator_does(
              [&] { coordinator.handle(testing::as_received(name, std::move(answer)), now); });
        }
      }
    }
  }
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - wall0).count();
  result.steps = coordinator.totals().steps();
  if (!coordinator.finished() || coordinator.exit_code() != 0) {
    std::fprintf(stderr, "the run at %d workers did not finish (%llu steps); its log:\n%s\n",
                 workers, static_cast<unsigned long long>(result.steps), log.text.str().c_str());
    std::exit(1);
  }
  return result;
}

int parse_int(const char* flag, const char* value) {
  if (value == nullptr) {
    std::fprintf(stderr, "%s needs a value\n", flag);
    std::exit(2);
  }
  return std::atoi(value);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts;
  int steps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (arg == "--workers") {
      counts.push_back(parse_int("--workers", value));
      ++i;
    } else if (arg == "--steps") {
      steps = parse_int("--steps", value);
      ++i;
    } else {
      std::fprintf(stderr, "usage: bench_coordinator_scale [--workers N]... [--steps S]\n");
      return 2;
    }
  }
  if (counts.empty()) counts = {64, 256, 1024};
  const std::filesystem::path scratch =
      std::filesystem::temp_directory_path() / fmt::format("dctrain-scale-{}", ::getpid());
  std::printf(
      "the coordinator's work per step (handle + tick, the workers' excluded), %d steps, one "
      "micro-batch of 4 per worker, star, tau inf; one thread\n",
      steps);
  std::printf("%8s %12s %14s %16s %14s\n", "workers", "ms/step", "us/step/worker", "ratio to first",
              "run wall s");
  double first = 0.0;
  for (const int workers : counts) {
    const std::filesystem::path dir = scratch / std::to_string(workers);
    std::filesystem::create_directories(dir);
    const Result r = run(workers, steps, dir);
    const double per_step = r.coordinator_seconds / static_cast<double>(r.steps);
    const double per_worker = per_step / workers;
    if (first == 0.0) first = per_worker;
    std::printf("%8d %12.3f %14.2f %16.2f %14.1f\n", workers, 1e3 * per_step, 1e6 * per_worker,
                per_worker / first, r.wall_seconds);
    std::fflush(stdout);
  }
  std::filesystem::remove_all(scratch);
  return 0;
}
