// dctrain-launch: a coordinator and N workers on this host, as one command.
// The coordinator binds an ephemeral port on 127.0.0.1 and writes it to
// RUN_DIR/endpoint; the workers connect there. Every line the processes
// print is streamed with a role/rank prefix; Ctrl-C (SIGINT/SIGTERM) is
// forwarded; the exit status is non-zero if any process failed. With
// --curve every connection uses CURVE with throwaway keys made for this run
// in RUN_DIR/keys (comm/security.h).
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/security.h"
#include "common/child_process.h"
#include "common/cli.h"
#include "common/stop_signals.h"
#include "metrics/run_identity.h"
#include "runtime/run_config.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Child {
  std::string label;              // "coordinator", "worker 0", ...
  dctrain::ChildProcess process;  // stdout+stderr into a pipe the launcher reads
  std::string pending;            // a partial line
  std::optional<int> status;
};

// Starts `argv` with stdout and stderr into a pipe the launcher reads.
Child spawn(const std::string& label, std::vector<std::string> argv) {
  dctrain::ChildOptions options;
  options.argv = std::move(argv);
  options.output = dctrain::ChildOutput::kPipe;
  return Child{label, dctrain::ChildProcess(std::move(options)), {}, {}};
}

// Prints the complete lines waiting on `child`'s pipe with its prefix.
void drain(Child& child, bool flush_partial) {
  if (!child.process.read_output(child.pending)) flush_partial = true;
  size_t start = 0;
  for (size_t nl; (nl = child.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = fmt::format("[{}] {}\n", child.label,
                                         std::string_view(child.pending).substr(start, nl - start));
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  child.pending.erase(0, start);
  if (flush_partial && !child.pending.empty()) {
    std::fputs(fmt::format("[{}] {}\n", child.label, child.pending).c_str(), stdout);
    child.pending.clear();
  }
  std::fflush(stdout);
}

void reap(std::vector<Child>& children) {
  for (Child& c : children) {
    if (c.status) continue;
    if (const auto s = c.process.poll()) c.status = s->shell_code();
  }
}

}  // namespace

// A program that cannot be started (or a run folder that cannot be made)
// ends the launcher with its reason; the children it started are killed and
// reaped on the way out (ChildProcess).
int main(int argc, char** argv) try {
  CLI::App app{"dctrain-launch: runs a coordinator and N workers on this host"};
  int workers = 0;  // unless given: the config's
  std::string config, out_dir, data_dir, tau, log_level = "info", resume;
  bool overwrite = false;
  int threads = 1;
  int64_t steps = 0;
  int metrics_port = -1;
  std::string metrics_address;
  bool curve = false;
  dctrain::add_common_options(app, "dctrain-launch", log_level);
  app.add_flag("--curve", curve,
               "Encrypt and authenticate every connection with CURVE, with throwaway keys made "
               "for this run in RUN_DIR/keys (replaced on every launch)");
  app.add_option("--workers", workers,
                 "Worker processes to start (default: the config's 'workers'; with --resume, the "
                 "run's)")
      ->check(CLI::Range(1, 256));
  app.add_option("--config", config, "Run config file (Protobuf text format)")
      ->check(CLI::ExistingFile);
  app.add_option("--out", out_dir,
                 "Run folder (default: a new folder runs/NAME-YYYYMMDD-HHMMSS, NAME the config's "
                 "name); one that holds another run is refused unless --overwrite");
  app.add_flag("--overwrite", overwrite,
               "Start the run in --out even if that folder holds another run (its files are "
               "removed first)");
  app.add_option("--resume", resume, "Continue the run in this folder from its last checkpoint")
      ->check(CLI::ExistingDirectory);
  app.add_option("--data-dir", data_dir, "Data root for every process (empty: synthetic data only)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--threads", threads, "Compute threads per worker")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--tau", tau, "Override the config's threshold: seconds, 'inf' or 'auto'");
  app.add_option("--steps", steps, "Override the config's max steps (0: keep)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--metrics-port", metrics_port,
                 "The coordinator's live metrics port (0: a free one, in RUN_DIR/metrics_endpoint; "
                 "absent: none)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-address", metrics_address,
                 "Numeric address the coordinator's metrics server listens on (default: its own, "
                 "127.0.0.1; 0.0.0.0 or :: for every interface)");
  app.footer(
      "Environment:\n"
      "  OPENBLAS_CORETYPE   passed on to the coordinator and the workers, like the rest of the\n"
      "                      environment; unset, each settles its own OpenBLAS core (see\n"
      "                      dctrain-worker --help)");
  CLI11_PARSE(app, argc, argv);
  if (config.empty() && resume.empty()) {
    std::fprintf(stderr,
                 "dctrain-launch: pass --config FILE (see experiments/) or --resume RUN_DIR\n");
    return 2;
  }

  if (app.count("--workers") == 0) {
    // As many as the run asks for: its config, or the config the resumed
    // run wrote into its folder when it began.
    const std::string source =
        resume.empty() ? config : (fs::path(resume) / "config.cfg").string();
    const uint32_t wanted = dctrain::load_run_config(source).workers();
    if (wanted < 1 || wanted > 256) {
      std::fprintf(stderr,
                   "dctrain-launch: %s asks for %u workers; set 'workers: N' (1 to 256) there or "
                   "pass --workers N\n",
                   source.c_str(), wanted);
      return 2;
    }
    workers = static_cast<int>(wanted);
  }

  const fs::path bin = fs::canonical("/proc/self/exe").parent_path();
  if (resume.empty() && out_dir.empty()) {
    out_dir = dctrain::new_run_folder("runs", dctrain::load_run_config(config).name()).string();
    std::fprintf(stderr, "dctrain-launch: run folder %s\n", out_dir.c_str());
  }
  const fs::path run_dir = resume.empty() ? fs::path(out_dir) : fs::path(resume);
  // Refused here, before the launcher touches the folder (its endpoint, its
  // keys), as the coordinator would refuse it.
  if (resume.empty() && !overwrite) {
    if (const std::optional<std::string> refusal = dctrain::new_run_refusal(run_dir)) {
      std::fprintf(stderr, "dctrain-launch: %s\n", refusal->c_str());
      return 2;
    }
  }
  fs::create_directories(run_dir);
  fs::remove(run_dir / "endpoint");

  // Ctrl-C is read here and forwarded; the children start with it unblocked.
  dctrain::StopSignals signals;

  std::vector<std::string> coordinator = {(bin / "dctrain-coordinator").string(),
                                          "--bind",
                                          "tcp://127.0.0.1:*",
                                          "--log-level",
                                          log_level,
                                          "--workers",
                                          std::to_string(workers)};
  if (resume.empty()) {
    coordinator.insert(coordinator.end(), {"--config", config, "--out", out_dir});
    if (overwrite) coordinator.push_back("--overwrite");
  } else {
    coordinator.insert(coordinator.end(), {"--resume", resume});
  }
  if (!data_dir.empty()) coordinator.insert(coordinator.end(), {"--data-dir", data_dir});
  if (!tau.empty()) coordinator.insert(coordinator.end(), {"--tau", tau});
  if (steps > 0) coordinator.insert(coordinator.end(), {"--steps", std::to_string(steps)});
  if (metrics_port >= 0) {
    coordinator.insert(coordinator.end(), {"--metrics-port", std::to_string(metrics_port)});
  }
  if (!metrics_address.empty()) {
    coordinator.insert(coordinator.end(), {"--metrics-address", metrics_address});
  }

  // Throwaway keys: a pair per process, the workers' public keys in a
  // folder that is the coordinator's allow-list.
  const fs::path keys = run_dir / "keys";
  if (curve) {
    fs::create_directories(keys / "allowed");
    dctrain::write_key_pair(keys / "coordinator", dctrain::generate_curve_keypair(), "coordinator",
                            true);
    for (int w = 0; w < workers; ++w) {
      const std::string name = fmt::format("worker-{}", w);
      dctrain::write_key_pair(keys / name, dctrain::generate_curve_keypair(), name, true);
      fs::copy_file(keys / (name + ".pub"), keys / "allowed" / (name + ".pub"),
                    fs::copy_options::overwrite_existing);
    }
    coordinator.insert(coordinator.end(), {"--secret-key", (keys / "coordinator.key").string(),
                                           "--allowed-keys", (keys / "allowed").string()});
  }

  std::vector<Child> children;
  children.push_back(spawn("coordinator", coordinator));

  // The coordinator reports its port in RUN_DIR/endpoint.
  std::string endpoint;
  const auto give_up = Clock::now() + std::chrono::seconds(120);
  while (endpoint.empty()) {
    drain(children[0], false);
    reap(children);
    if (children[0].status) {
      drain(children[0], true);
      std::fprintf(stderr,
                   "dctrain-launch: the coordinator exited with status %d before listening\n",
                   *children[0].status);
      return 1;
    }
    std::ifstream in(run_dir / "endpoint");
    std::getline(in, endpoint);
    if (Clock::now() > give_up) {
      std::fprintf(stderr,
                   "dctrain-launch: the coordinator did not report its endpoint in 120 s\n");
      children[0].process.kill();
      return 1;
    }
    if (endpoint.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int w = 0; w < workers; ++w) {
    std::vector<std::string> args = {(bin / "dctrain-worker").string(),
                                     "--connect",
                                     endpoint,
                                     "--name",
                                     fmt::format("worker-{}", w),
                                     "--threads",
                                     std::to_string(threads),
                                     "--log-level",
                                     log_level};
    if (!data_dir.empty()) args.insert(args.end(), {"--data-dir", data_dir});
    if (curve) {
      args.insert(args.end(), {"--secret-key", (keys / fmt::format("worker-{}.key", w)).string(),
                               "--coordinator-key", (keys / "coordinator.pub").string()});
    }
    children.push_back(spawn(fmt::format("worker {}", w), args));
  }

  std::optional<Clock::time_point> coordinator_done;
  bool interrupted = false;
  while (true) {
    std::vector<pollfd> fds;
    for (Child& c : children) {
      if (c.process.output_fd() >= 0) fds.push_back({c.process.output_fd(), POLLIN, 0});
    }
    fds.push_back({signals.fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    for (Child& c : children) drain(c, false);
    if (const int signal_number = signals.take(); signal_number != 0) {
      std::fprintf(stderr, "dctrain-launch: signal %d: stopping the run\n", signal_number);
      interrupted = true;
      for (Child& c : children) {
        if (!c.status) c.process.signal(SIGINT);
      }
    }
    reap(children);
    if (children[0].status && !coordinator_done) coordinator_done = Clock::now();
    bool all_done = true;
    for (const Child& c : children)
      all_done = all_done && c.status.has_value() && c.process.output_fd() < 0;
    if (all_done) break;
    // Workers leave when the coordinator says bye; do not wait for ever.
    if (coordinator_done && Clock::now() - *coordinator_done > std::chrono::seconds(20)) {
      for (Child& c : children) {
        if (!c.status) {
          std::fprintf(stderr,
                       "dctrain-launch: %s still running 20 s after the coordinator; killing it\n",
                       c.label.c_str());
          c.process.signal(SIGKILL);
        }
      }
      coordinator_done = Clock::now();
    }
  }
  int failed = 0;
  for (const Child& c : children) {
    // A worker the coordinator released (worker/worker.h kWorkerReleased)
    // left a run that went on without it: the run did not fail.
    constexpr int kWorkerReleased = 5;
    if (&c != &children[0] && *c.status == kWorkerReleased) {
      std::fprintf(stderr,
                   "dctrain-launch: %s was released from the run (see the coordinator's log)\n",
                   c.label.c_str());
      continue;
    }
    if (*c.status != 0) {
      ++failed;
      std::fprintf(stderr, "dctrain-launch: %s exited with status %d\n", c.label.c_str(),
                   *c.status);
    }
  }
  if (failed == 0) std::printf("dctrain-launch: run folder %s\n", run_dir.c_str());
  if (failed == 0) return 0;
  if (interrupted) return 130;
  // The coordinator's own status says the most (3: the run folder could not
  // be written, docs/failure-handling.md, "Exit statuses"); a worker's failure alone is 1.
  return *children[0].status != 0 ? *children[0].status : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "dctrain-launch: %s\n", e.what());
  return 1;
}
