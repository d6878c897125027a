// dctrain-simulate: a run of the coordinator's own code against simulated
// workers on a virtual clock (sim/simulation.h), into a run folder of the
// real schema.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/cli.h"
#include "common/exit_codes.h"
#include "common/run_files.h"
#include "runtime/run_config.h"
#include "sim/simulation.h"

int main(int argc, char** argv) try {
  CLI::App app{
      "dctrain-simulate: runs the coordinator's own planner, ledger, threshold and step "
      "policies against N simulated workers on a virtual clock (the real worker session and "
      "compute loop; a stand-in model whose micro-batch takes --sample-seconds per sample, "
      "plus the config's delays), and writes a run folder like a real run's, with "
      "simulation.json saying what was simulated"};
  dctrain::SimulationOptions o;
  std::string config_path, out, tau, log_level = "info";
  uint32_t workers = 0, worker_batch = 0;
  uint64_t steps = 0;
  bool overwrite = false;
  dctrain::add_common_options(app, "dctrain-simulate", log_level);
  app.add_option("--config", config_path, "Run config file (Protobuf text format)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--workers", workers, "Simulated workers (0: the config's)");
  app.add_option("--worker-batch", worker_batch,
                 "Samples per worker per step: the global batch becomes this x the workers "
                 "(weak scaling, as a sweep's worker_batch; 0: the config's global batch)");
  app.add_option("--steps", steps, "Stop after this many steps (0: the config's limit)");
  app.add_option("--tau", tau, "Step compute threshold: seconds, 'inf' or 'auto'");
  app.add_option("--out", out, "Run folder to write")->required();
  app.add_flag("--overwrite", overwrite, "Replace a run folder that holds another run");
  app.add_option("--data-dir", o.data_root,
                 "Data root, for a dataset with files (its size and samples are used)");
  app.add_option("--sample-seconds", o.sample_seconds,
                 "A worker's compute per sample before the config's delays")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--trace", o.trace,
                 "A real run's metrics.jsonl (best a tau = inf run): each simulated worker's "
                 "micro-batch times are drawn from its recorded ones (worker i from rank i mod "
                 "its ranks), delays included, in place of --sample-seconds and the config's "
                 "delays")
      ->check(CLI::ExistingFile);
  app.add_flag("--fit-network", o.fit_network,
               "With --trace: every message takes the traced run's measured time per message "
               "(plan-to-arrival less compute and overhead, median, split between plan and "
               "contribution) in place of --latency and --bandwidth");
  app.add_option("--latency", o.latency_seconds, "Seconds per message")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--message-seconds", o.message_seconds,
                 "Exchange: what one message of a round costs its sender besides --latency "
                 "(default: fitted on this project's reference machine, docs/simulation.md)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bandwidth", o.bandwidth_bytes,
                 "Bytes per second per link (gradients count at the real model's size)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--mttf", o.mttf_seconds,
                 "Mean seconds (virtual) between failures of each worker process: it dies, "
                 "its connection closes, and a new one under its name starts --restart-seconds "
                 "later (0: no failures)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--restart-seconds", o.restart_seconds, "Seconds from a death to its restart")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  dctrain::add_examples(app, {"dctrain-simulate --config experiments/synthetic-mlp.cfg --workers "
                              "1024 --worker-batch 16 --steps 100 --tau auto --out runs/sim-1024"});
  if (const std::optional<int> status = dctrain::parse_command_line(app, argc, argv))
    return *status;
  dctrain::apply_log_level(log_level);
  o.config = dctrain::load_run_config(config_path);
  if (workers > 0) o.config.set_workers(workers);
  if (worker_batch > 0)
    o.config.mutable_step()->set_global_batch(worker_batch * o.config.workers());
  if (steps > 0) o.config.mutable_stop()->set_max_steps(steps);
  if (!tau.empty()) dctrain::apply_tau_option(tau, *o.config.mutable_step());
  if (o.config.slowness_size() > 0) {
    std::fprintf(
        stderr,
        "dctrain-simulate: %s asks for real slowness (CPU quotas, load, slow links), which "
        "only real processes have: run it with dctrain-launch\n",
        config_path.c_str());
    return dctrain::kExitUsage;
  }
  o.run_dir = out;
  if (std::filesystem::exists(o.run_dir / dctrain::run_files::kMetrics)) {
    if (!overwrite) {
      std::fprintf(stderr, "dctrain-simulate: %s holds a run; pass --overwrite to replace it\n",
                   out.c_str());
      return dctrain::kExitUsage;
    }
    std::filesystem::remove_all(o.run_dir);
  }
  const dctrain::SimulationResult r = dctrain::simulate(o, spdlog::default_logger());
  std::printf(
      "simulated %u workers, %llu steps: %.2f s on the virtual clock in %.2f s of wall time "
      "(%llu messages, %llu worker failures); run folder %s (exit status %d)\n",
      o.config.workers(), static_cast<unsigned long long>(r.steps), r.virtual_seconds,
      r.wall_seconds, static_cast<unsigned long long>(r.events),
      static_cast<unsigned long long>(r.failures), out.c_str(), r.exit_code);
  return r.exit_code;
} catch (const std::exception& e) {
  std::fprintf(stderr, "dctrain-simulate: %s\n", e.what());
  return dctrain::kExitFailed;
}
