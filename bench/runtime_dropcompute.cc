// DropCompute against plain synchronous SGD, on real processes: 4 workers
// (dctrain-launch) train mnist-cnn on generated images with the DropCompute
// paper's delay model. First tau = infinity (the baseline), then tau at the
// 90th percentile of the workers' step compute times measured in the
// baseline. Prints step time and samples/s of both, the speedup and the drop
// rate; and, from the baseline, the framework overhead per step (the
// coordinator's reduce and update, the workers' time outside micro-batches)
// as a fraction of the step time, next to compute and communication.
//
//   build/release/bench/bench_runtime_dropcompute [--steps 30] [--workers 4] [--rounds 2]
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.h"
#include "common/run_files.h"
#include "metrics/metrics_json.h"

namespace {

namespace fs = std::filesystem;

struct StepFigures {
  double step = 0, reduce = 0, apply = 0, max_compute = 0, max_overhead = 0;
  uint64_t samples = 0, planned = 0, dropped = 0;
  std::vector<double> compute;  // per worker
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<StepFigures> read_steps(const fs::path& metrics) {
  std::vector<StepFigures> steps;
  for (const dctrain::v1::StepRecord& r :
       dctrain::parse_metrics(read_text(metrics), metrics.string()).steps) {
    StepFigures s;
    s.step = r.step_seconds();
    s.reduce = r.reduce_seconds();
    s.apply = r.apply_seconds();
    s.samples = r.samples();
    s.planned = r.planned();
    s.dropped = r.dropped() + r.orphaned();
    std::vector<double> overhead;
    for (const dctrain::v1::WorkerStep& w : r.workers()) {
      s.compute.push_back(w.compute_seconds());
      overhead.push_back(w.overhead_seconds());
    }
    s.max_compute = s.compute.empty() ? 0.0 : *std::max_element(s.compute.begin(), s.compute.end());
    s.max_overhead = overhead.empty() ? 0.0 : *std::max_element(overhead.begin(), overhead.end());
    steps.push_back(s);
  }
  return steps;
}

// Which CPU and OpenBLAS core the processes of a run computed on, from its
// summary.json (the coordinator's "blas" and each worker's).
void print_blas(const fs::path& path) {
  const dctrain::v1::RunSummary summary = dctrain::parse_summary(read_text(path), path.string());
  const auto print = [](const std::string& who, const dctrain::v1::BlasInfo& b) {
    std::printf("BLAS: %s on %s: core %s (%s), start-up sgemm %.1f GFLOP/s\n", who.c_str(),
                b.cpu_model().c_str(), b.core().c_str(), b.how().c_str(), b.sgemm_gflops());
  };
  if (summary.has_blas()) print("coordinator", summary.blas());
  for (const dctrain::v1::PerWorkerTotals& w : summary.per_worker()) {
    if (w.has_blas()) print(w.name(), w.blas());
  }
}

int run_launch(const fs::path& bin, const std::vector<std::string>& args, const fs::path& log) {
  dctrain::ChildOptions options;
  options.argv = args;
  options.argv.insert(options.argv.begin(), (bin / "dctrain-launch").string());
  options.output = dctrain::ChildOutput::kFile;
  options.output_file = log;
  try {
    return dctrain::ChildProcess(std::move(options)).wait().shell_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 127;  // as a shell says of a program it cannot start
  }
}

struct RunFigures {
  double step_seconds = 0, samples_per_second = 0, drop_rate = 0;
  std::vector<StepFigures> steps;
};

RunFigures summarise(std::vector<StepFigures> steps, size_t warmup) {
  RunFigures r;
  if (steps.size() > warmup) steps.erase(steps.begin(), steps.begin() + static_cast<long>(warmup));
  double time = 0;
  uint64_t samples = 0, planned = 0, dropped = 0;
  for (const StepFigures& s : steps) {
    time += s.step;
    samples += s.samples;
    planned += s.planned;
    dropped += s.dropped;
  }
  r.step_seconds = steps.empty() ? 0 : time / static_cast<double>(steps.size());
  r.samples_per_second = time > 0 ? static_cast<double>(samples) / time : 0;
  r.drop_rate = planned > 0 ? static_cast<double>(dropped) / static_cast<double>(planned) : 0;
  r.steps = std::move(steps);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "DropCompute (tau at p90 of compute) against tau = infinity, 4 workers, real processes"};
  int steps = 30, workers = 4, rounds = 2;
  double factor = 1.0;
  app.add_option("--steps", steps, "Steps per run (the first 3 are not measured)")
      ->capture_default_str();
  app.add_option("--workers", workers, "Worker processes")->capture_default_str();
  app.add_option("--factor", factor, "DropCompute delay factor")->capture_default_str();
  app.add_option("--rounds", rounds, "Alternating baseline / DropCompute pairs")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const fs::path bin = fs::canonical("/proc/self/exe").parent_path().parent_path() / "bin";
  const fs::path dir = fs::temp_directory_path() / fmt::format("dctrain-bench-{}", ::getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "bench.cfg") << fmt::format(R"(
name: "bench-dropcompute"
seed: 3
workers: {}
model {{ name: "mnist-cnn" }}
dataset {{ kind: "synthetic" synthetic_samples: 8192 test_limit: 500 }}
optimizer {{ kind: "sgd" lr: 0.05 momentum: 0.9 }}
step {{ global_batch: {} micro_batch: 16 tau: inf }}
delay {{ kind: "dropcompute" factor: {} }}
eval {{ every_steps: 1000000 batch: 500 }}
stop {{ max_steps: {} }}
)",
                                                  workers, 64 * workers, factor, steps);
  constexpr size_t kWarmup = 3;
  auto launch = [&](const std::string& name,
                    const std::string& tau_text) -> std::optional<RunFigures> {
    std::vector<std::string> args = {"--workers", std::to_string(workers),
                                     "--config",  (dir / "bench.cfg").string(),
                                     "--out",     (dir / name).string()};
    if (!tau_text.empty()) args.insert(args.end(), {"--tau", tau_text});
    if (run_launch(bin, args, dir / (name + ".log")) != 0) {
      std::fprintf(stderr, "run %s failed; see %s\n", name.c_str(),
                   (dir / (name + ".log")).c_str());
      return std::nullopt;
    }
    return summarise(read_steps(dir / name / dctrain::run_files::kMetrics), kWarmup);
  };

  // Baseline and DropCompute runs alternate, so that a change in the
  // machine's load hits both alike; tau comes from the first baseline.
  std::printf("%d workers, %d steps per run, DropCompute delays x%.2g, %d rounds\n", workers, steps,
              factor, rounds);
  std::printf(
      "all %d workers and the coordinator share this host's %u cores: absolute times "
      "are not a cluster's; compare the ratios\n",
      workers, std::thread::hardware_concurrency());
  std::vector<RunFigures> bases, drops;
  double tau = 0.0;
  for (int round = 0; round < rounds; ++round) {
    auto base_run = launch(fmt::format("baseline-{}", round), "inf");
    if (!base_run) return 1;
    if (round == 0) {
      std::vector<double> computes;
      for (const StepFigures& s : base_run->steps)
        computes.insert(computes.end(), s.compute.begin(), s.compute.end());
      std::sort(computes.begin(), computes.end());
      tau = computes.empty() ? 1.0 : computes[computes.size() * 9 / 10];
      std::printf(
          "tau = %.4f s: the 90th percentile of %zu worker step compute times at tau = inf\n", tau,
          computes.size());
      print_blas(dir / "baseline-0" / dctrain::run_files::kSummary);
    }
    auto drop_run = launch(fmt::format("dropcompute-{}", round), fmt::format("{:.6f}", tau));
    if (!drop_run) return 1;
    std::printf("round %d: tau = inf %.1f ms/step, tau = p90 %.1f ms/step (%.1f%% dropped)\n",
                round, 1e3 * base_run->step_seconds, 1e3 * drop_run->step_seconds,
                100 * drop_run->drop_rate);
    std::fflush(stdout);
    bases.push_back(std::move(*base_run));
    drops.push_back(std::move(*drop_run));
  }
  auto pool = [](const std::vector<RunFigures>& runs) {
    std::vector<StepFigures> all;
    for (const RunFigures& r : runs) all.insert(all.end(), r.steps.begin(), r.steps.end());
    return summarise(all, 0);
  };
  const RunFigures base = pool(bases), drop = pool(drops);

  std::printf("\n%-22s %12s %12s %10s\n", "", "step time", "samples/s", "dropped");
  std::printf("%-22s %10.1f ms %12.0f %9.1f%%\n", "tau = inf", 1e3 * base.step_seconds,
              base.samples_per_second, 100 * base.drop_rate);
  std::printf("%-22s %10.1f ms %12.0f %9.1f%%\n",
              fmt::format("tau = {:.1f} ms (p90)", 1e3 * tau).c_str(), 1e3 * drop.step_seconds,
              drop.samples_per_second, 100 * drop.drop_rate);
  std::printf("speedup (samples/s): %.3fx   step-time ratio: %.3fx   drop rate %.1f%%\n",
              drop.samples_per_second / base.samples_per_second,
              base.step_seconds / drop.step_seconds, 100 * drop.drop_rate);

  // Where a baseline step's time goes.
  double step = 0, compute = 0, framework = 0;
  for (const StepFigures& s : base.steps) {
    step += s.step;
    compute += s.max_compute;
    framework += s.reduce + s.apply + s.max_overhead;
  }
  const double rest = std::max(0.0, step - compute - framework);
  std::printf("\nbaseline step breakdown (mean over %zu steps):\n", base.steps.size());
  std::printf("  slowest worker's compute          %6.1f%%\n", 100 * compute / step);
  std::printf(
      "  framework (reduce, update, worker time outside micro-batches) %6.2f%%  (target < 3%%)\n",
      100 * framework / step);
  std::printf("  communication and waiting         %6.1f%%\n", 100 * rest / step);
  std::printf("run folders: %s\n", dir.c_str());
  return 0;
}
