#include "coordinator/program/program.h"

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>

#include "comm/security.h"
#include "comm/transport.h"
#include "common/blas_runtime.h"
#include "common/cli.h"
#include "common/files.h"
#include "common/run_files.h"
#include "common/stop_signals.h"
#include "coordinator/coordinator.h"
#include "coordinator/evaluation_thread.h"
#include "coordinator/evaluator.h"
#include "coordinator/program/metrics_server.h"
#include "coordinator/run_metrics.h"
#include "coordinator/step/peer_limits.h"
#include "metrics/run_identity.h"
#include "runtime/blas_info.h"
#include "runtime/checkpoint.h"
#include "runtime/model_file.h"
#include "runtime/replica.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"

namespace dctrain {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Command-line flags override the config's fields.
void apply_overrides(const CoordinatorOptions& options, v1::RunConfig& config) {
  if (options.workers > 0) config.set_workers(static_cast<uint32_t>(options.workers));
  if (!options.run.tau.empty()) apply_tau_option(options.run.tau, *config.mutable_step());
  if (options.run.steps > 0)
    config.mutable_stop()->set_max_steps(static_cast<uint64_t>(options.run.steps));
}

std::shared_ptr<spdlog::logger> make_logger(const fs::path& run_dir, const std::string& level) {
  auto console = std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
  auto file =
      std::make_shared<spdlog::sinks::basic_file_sink_mt>((run_dir / run_files::kLog).string());
  auto log =
      std::make_shared<spdlog::logger>("coordinator", spdlog::sinks_init_list{console, file});
  log->set_level(spdlog::level::from_str(level));
  log->flush_on(spdlog::level::info);
  return log;
}

// The security flags override the config's fields, on a new run and a
// resumed one alike.
void apply_security_overrides(const CoordinatorOptions& options, v1::RunConfig& config) {
  v1::SecurityConfig& security = *config.mutable_security();
  if (!options.secret_key.empty()) security.set_secret_key(options.secret_key);
  if (!options.allowed_keys.empty()) security.set_allowed_keys(options.allowed_keys);
  if (options.insecure) {
    if (!options.secret_key.empty()) {
      throw std::runtime_error(
          "--insecure and --secret-key contradict each other: drop --insecure to use CURVE");
    }
    security.set_mode("none");
  }
}

// The ROUTER's security, decided from the config's security { } (flags
// applied) and the address it binds. Throws, saying how to fix it, when the
// keys are missing, unreadable or readable by others, and when a plain
// socket would be reachable from other hosts without an explicit "none".
struct ServerSecurity {
  SocketSecurity socket;
  std::optional<AllowList> allowed;  // with CURVE
};

ServerSecurity resolve_security(const v1::SecurityConfig& config, const std::string& bind,
                                spdlog::logger& log) {
  const std::string& mode = config.mode();
  if (mode != "" && mode != "curve" && mode != "none") {
    throw std::runtime_error(fmt::format(
        "security.mode '{}' is not known: use \"curve\" or \"none\" (or leave it out)", mode));
  }
  const bool curve = mode == "curve" || (mode.empty() && !config.secret_key().empty());
  ServerSecurity out;
  if (!curve) {
    if (!config.secret_key().empty() || !config.allowed_keys().empty()) {
      throw std::runtime_error(
          "security.mode is \"none\" (or --insecure) but key files are named: drop one or the "
          "other");
    }
    if (is_local_only_endpoint(bind)) return out;
    if (mode != "none") {
      throw std::runtime_error(fmt::format(
          "refusing to bind '{}' without CURVE: other hosts can reach it, and anyone who does "
          "could join the run, send it gradients and read its traffic. Make keys with "
          "dctrain-keygen and pass --secret-key COORDINATOR.key --allowed-keys WORKERS (a file or "
          "folder of the workers' NAME.pub), or pass --insecure on a network you trust (or bind "
          "tcp://127.0.0.1:PORT for a run on this host)",
          bind));
    }
    log.warn(
        "security: plain TCP on '{}', which other hosts can reach (--insecure or security.mode "
        "\"none\"): anyone who reaches the port can join the run and read its traffic",
        bind);
    return out;
  }
  if (config.secret_key().empty() || config.allowed_keys().empty()) {
    throw std::runtime_error(
        "CURVE needs the coordinator's secret key and the workers' public keys: pass "
        "--secret-key COORDINATOR.key and --allowed-keys WORKERS (or set security.secret_key and "
        "security.allowed_keys); dctrain-keygen makes the keys");
  }
  out.socket.curve = true;
  out.socket.own = load_secret_key(config.secret_key());
  out.allowed = AllowList::load(config.allowed_keys());
  log.info(
      "security: CURVE on every connection; this coordinator's public key {} (workers pass it "
      "with --coordinator-key); {} worker keys allowed (from {})",
      out.socket.own.public_key, out.allowed->size(), config.allowed_keys());
  return out;
}

// Why a new run cannot start in `run_dir`: it holds another run, and
// --overwrite was not passed (with it, that run's files are removed).
std::optional<std::string> new_run_problem(const fs::path& run_dir,
                                           const CoordinatorOptions& options) {
  std::optional<std::string> refusal = new_run_refusal(run_dir);
  if (refusal && options.run.overwrite) {
    spdlog::warn("--overwrite: removing the run in '{}' ({})", run_dir.string(), *refusal);
    remove_run_files(run_dir);
    return std::nullopt;
  }
  return refusal;
}

// Why the checkpoint's run (its config's id) cannot resume in `run_dir`: the
// folder's records are another run's.
std::optional<std::string> resume_problem(const fs::path& run_dir, const v1::RunConfig& config) {
  if (config.run_id().empty()) return std::nullopt;  // a checkpoint of a build before run ids
  for (const std::string& id : recorded_run_ids(run_dir)) {
    if (id != config.run_id()) {
      return fmt::format(
          "the checkpoint in '{}' is run {}'s, but the folder's metrics.jsonl holds records of "
          "run {}: resuming would mix two runs. Resume the folder the checkpoint came from, or "
          "start a new run",
          run_dir.string(), config.run_id(), id);
    }
  }
  return std::nullopt;
}

// The run's config: a new run's from --config with the flags applied, or a
// resumed run's from its checkpoint (with its header); the security flags
// applied and the config finished. Nothing when it cannot be had (logged).
struct LoadedConfig {
  v1::RunConfig config;
  std::optional<v1::CheckpointHeader> resume;
};

std::optional<LoadedConfig> load_config(const CoordinatorOptions& options) {
  LoadedConfig out;
  try {
    if (!options.run.resume_dir.empty()) {
      out.resume = load_checkpoint_header(checkpoint_path(options.run.resume_dir));
      out.config = out.resume->config();
      if (options.run.steps > 0)
        out.config.mutable_stop()->set_max_steps(static_cast<uint64_t>(options.run.steps));
    } else {
      if (options.run.config_path.empty()) {
        spdlog::error(
            "no run config: pass --config FILE (see experiments/*.cfg) or --resume RUN_DIR");
        return std::nullopt;
      }
      out.config = load_run_config(options.run.config_path);
      apply_overrides(options, out.config);
    }
    apply_security_overrides(options, out.config);
    finalize_run_config(out.config);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return std::nullopt;
  }
  return out;
}

// The run folder (--out, --resume, or a new one under runs/), checked for
// what is in it, cleared of a killed process's temporary files and made;
// a new run gets its id. 0, or the exit status (the problem logged).
int prepare_run_folder(const CoordinatorOptions& options, v1::RunConfig& config,
                       fs::path& run_dir) {
  const bool resuming = !options.run.resume_dir.empty();
  run_dir = resuming ? fs::path(options.run.resume_dir) : fs::path(options.run.out_dir);
  if (run_dir.empty()) run_dir = new_run_folder("runs", config.name());
  if (const std::optional<std::string> problem =
          resuming ? resume_problem(run_dir, config) : new_run_problem(run_dir, options)) {
    spdlog::error("{}", *problem);
    return kCoordinatorUsage;
  }
  // A new run: its own id, in everything it writes (metrics/run_identity.h).
  if (!resuming) config.set_run_id(new_run_id());
  // What a process killed mid-write left (a resumed run's, or an
  // overwritten one's): a checkpoint.bin.tmp of hundreds of MB, say.
  remove_temporary_files(run_dir);
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) {
    spdlog::error("cannot create the run folder '{}': {}", run_dir.string(), ec.message());
    return 2;
  }
  return 0;
}

// The reference replica's starting state: the checkpoint's when resuming
// (`checkpoint` not empty), else model.init_from's file if set, else the
// seed's (as made).
void load_reference_state(const v1::RunConfig& config, const fs::path& checkpoint, Replica& replica,
                          spdlog::logger& log) {
  if (!checkpoint.empty()) {
    load_checkpoint_state(checkpoint, replica);
  } else if (!config.model().init_from().empty()) {
    read_model_file(config.model().init_from(), replica.model());
    log.info("model initialised from {} (not from the seed)", config.model().init_from());
  }
  log.info("model {}: {} parameters, {} buffer values; optimizer {}", replica.model().name(),
           replica.parameter_count(), replica.buffer_count(), word(config.optimizer().kind()));
}

// The run config's one line on the console (the whole is config.cfg).
// The run's training and held-out sets, and what they settle in the config:
// the step budget of an epoch count, the model's input shape (a shape other
// than the config said is logged).
std::pair<std::unique_ptr<Dataset>, std::unique_ptr<Dataset>> open_data(
    v1::RunConfig& config, const fs::path& data_dir, spdlog::logger& log) {
  const auto begin = Clock::now();
  std::unique_ptr<Dataset> train = open_dataset(config, Split::kTrain, data_dir);
  std::unique_ptr<Dataset> test = open_dataset(config, Split::kEval, data_dir);
  const uint64_t train_size = train_samples(config, *train);
  resolve_step_budget(config, train_size);
  log.info("data: {} ({} used), held out: {} ({} evaluated), loaded in {:.1f} s",
           train->describe(), train_size, test->describe(), test_samples(config, *test),
           std::chrono::duration<double>(Clock::now() - begin).count());
  if (const auto fitted = fit_model_to_data(config, train->shape())) {
    log.warn(
        "model {} is built for its data: {}; config.cfg, the checkpoints and the export record "
        "the shape it takes",
        word(config.model().name()), *fitted);
  }
  return {std::move(train), std::move(test)};
}

void log_run_config(spdlog::logger& log, const v1::RunConfig& config, const fs::path& run_dir) {
  log.info(
      "run config in {}: model {}, {} workers, global batch {} in micro-batches of {}, tau {}{}, "
      "delay {}, data plane {}",
      (run_dir / run_files::kConfig).string(), word(config.model().name()), config.workers(),
      config.step().global_batch(), config.step().micro_batch(),
      config.step().tau_policy() == v1::TAU_POLICY_AUTO ? std::string("auto")
      : std::isfinite(config.step().tau())              ? fmt::format("{:g} s", config.step().tau())
                                                        : std::string("inf"),
      config.step().policy() == v1::POLICY_UNSET
          ? ""
          : fmt::format(", policy {}", word(config.step().policy())),
      word(config.delay().kind()), word(config.data_plane().kind()));
  log.debug("run config:\n{}", to_text(config));
}

// The metrics server of --metrics-port, its address in the run folder;
// none without the flag.
std::unique_ptr<MetricsServer> start_metrics_server(const CoordinatorOptions& options,
                                                    const fs::path& run_dir,
                                                    const std::shared_ptr<spdlog::logger>& log) {
  std::error_code ec;
  fs::remove(run_dir / run_files::kMetricsEndpoint, ec);  // a resumed run's is stale
  if (options.run.metrics_port < 0) return nullptr;
  auto server = std::make_unique<MetricsServer>(
      options.run.metrics_address, static_cast<uint16_t>(options.run.metrics_port), log);
  write_file_atomically(run_dir / run_files::kMetricsEndpoint, server->url() + "\n");
  log->info("metrics: Prometheus text at {} (try: curl -s {})", server->url(), server->url());
  return server;
}

// The coordinator's loop until it has finished: messages, closed
// connections, the clock, signals. Then the workers' connections drained
// (at most 10 s) so that their byes reach them.
void serve(Coordinator& coordinator, RouterTransport& transport, StopSignals& signals,
           spdlog::logger& log, const std::function<double()>& now) {
  Received received;
  while (!coordinator.finished()) {
    if (transport.receive(received, std::chrono::milliseconds(5))) {
      coordinator.handle(std::move(received), now());
      // Take whatever else is already waiting before the clock work.
      while (transport.receive(received, std::chrono::milliseconds(0))) {
        coordinator.handle(std::move(received), now());
      }
    }
    const std::vector<std::string> gone = transport.take_disconnected();
    if (!gone.empty()) {
      // What a peer sent before its connection closed is in the socket
      // before the close is reported, but may have come after the reads
      // above (a report, a sum, a bye right before it exits): take it
      // first, so that its connection's end does not overtake its words.
      while (transport.receive(received, std::chrono::milliseconds(0))) {
        coordinator.handle(std::move(received), now());
      }
      for (const std::string& peer : gone) coordinator.on_disconnected(peer, now());
    }
    coordinator.tick(now());
    if (const int signal_number = signals.take()) {
      log.warn("signal {} received: ending the run", signal_number);
      coordinator.stop("interrupted by a signal", 130, now());
    }
  }
  // Let the byes reach the workers before the socket closes. A worker on a
  // slow link may still have updates queued ahead of its bye and late
  // contributions on their way here; closing a connection that still
  // receives resets it and throws away what is in flight to that worker,
  // its bye included. So read (and discard) until the workers, having read
  // their byes, have closed their connections; at most 10 s.
  const Clock::time_point closing = Clock::now();
  while (transport.connections() > 0 &&
         std::chrono::duration<double>(Clock::now() - closing).count() < 10.0) {
    transport.receive(received, std::chrono::milliseconds(50));
  }
  transport.set_linger(std::chrono::milliseconds(10000));
}

}  // namespace

int run_coordinator(CoordinatorOptions options, const BlasReport& blas) {
  // SIGINT / SIGTERM end the run cleanly (bye to workers, summary written).
  StopSignals signals;

  const bool resuming = !options.run.resume_dir.empty();
  std::optional<LoadedConfig> loaded = load_config(options);
  if (!loaded) return 2;
  v1::RunConfig& config = loaded->config;
  fs::path run_dir;
  if (const int status = prepare_run_folder(options, config, run_dir)) return status;
  auto log = make_logger(run_dir, options.log_level);
  log->info("{}", version_line("dctrain-coordinator"));
  log_blas(*log, blas);

  // First: a key problem is reported before minutes of data loading, as a
  // usage error (status 2) like a bad config.
  ServerSecurity security;
  try {
    security = resolve_security(config.security(), options.bind, *log);
  } catch (const std::exception& e) {
    log->error("{}", e.what());
    return 2;
  }
  try {
    if (needs_data_root(config) && options.run.data_dir.empty()) {
      throw std::runtime_error(fmt::format(
          "the run trains on '{}' data: pass --data-dir with the data root the workers use too",
          word(config.dataset().kind())));
    }
    const auto [train, test] = open_data(config, options.run.data_dir, *log);
    const uint64_t train_size = train_samples(config, *train);
    write_file_atomically(run_dir / run_files::kConfig, to_text(config));
    log_run_config(*log, config, run_dir);

    Replica replica(make_model(model_spec(config, train->shape(), options.threads)),
                    replicated_optimizer(config));
    load_reference_state(config, resuming ? checkpoint_path(run_dir) : fs::path(), replica, *log);
    DatasetEvaluator evaluator(*test, test_samples(config, *test), config.eval().batch(),
                               config.seed());

    // Before the endpoint is out: a metrics port that cannot be bound ends
    // the run before any worker connects.
    const std::unique_ptr<MetricsServer> metrics_server =
        start_metrics_server(options, run_dir, log);

    zmq::context_t context(1);
    // Before the ROUTER binds, so that no connection goes unauthenticated;
    // after the context, so that it stops before the context closes.
    std::unique_ptr<ZapHandler> zap;
    if (security.allowed) zap = std::make_unique<ZapHandler>(context, *security.allowed, log);
    RouterTransport transport(context, options.bind, log, transport_limits(config, replica),
                              security.socket);
    const std::string endpoint = transport.endpoint();
    write_file_atomically(run_dir / run_files::kEndpoint, endpoint + "\n");
    log->info("listening on {}; waiting for {} workers (dctrain-worker --connect {})", endpoint,
              config.workers(), endpoint);

    // Evaluation off the step loop: a second model of the same architecture
    // holds the snapshot (with its own compute threads).
    std::optional<EvaluationThread> evaluation_thread;
    if (!config.eval().in_step_loop()) {
      evaluation_thread.emplace(evaluator,
                                make_model(model_spec(config, train->shape(), options.threads)));
    }
    const Clock::time_point t0 = Clock::now();
    const std::function<double()> now = [t0] {
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    CoordinatorSetup setup{config,         train_size,     run_dir,
                           loaded->resume, to_proto(blas), model_input_of(train->shape())};
    if (evaluation_thread) setup.evaluation_thread = &*evaluation_thread;
    setup.host_load = [] {
      double load = 0.0;
      std::ifstream("/proc/loadavg") >> load;
      return load;
    };
    if (metrics_server) {
      setup.publish_metrics = [server = metrics_server.get()](auto snapshot) {
        server->publish(std::move(snapshot));
      };
    }
    Coordinator coordinator(std::move(setup), replica, &evaluator, transport, log, now);
    serve(coordinator, transport, signals, *log, now);
    return coordinator.exit_code();
  } catch (const FileWriteError& e) {
    // Before the run began (config.cfg, the endpoint): nothing to stop.
    log->error("{}", e.what());
    return kCoordinatorRunFolderFailed;
  } catch (const std::exception& e) {
    log->error("{}", e.what());
    return kCoordinatorFailed;
  }
}

}  // namespace dctrain
