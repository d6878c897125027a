// dctrain-launch: a coordinator and its workers as one command per host.
//  - This host only (default): the coordinator binds an ephemeral port on
//    127.0.0.1 and writes it to RUN_DIR/endpoint; N workers connect there.
//  - The coordinator's host of several (--bind tcp://IP:PORT): the same, on
//    an address other hosts reach, starting --workers-per-host of the run's
//    --workers here.
//  - Another host (--connect tcp://HOST:PORT): workers only, for that
//    coordinator.
// Every line the processes print is streamed with a prefix (their warnings
// and errors to stderr); Ctrl-C (SIGINT/SIGTERM) is forwarded; the exit
// status is non-zero if any process failed (common/exit_codes.h). Keys:
// --curve makes throwaway ones in RUN_DIR/keys (this host only); --keys DIR
// takes those made once with dctrain-keygen (comm/security.h).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "comm/security.h"
#include "common/child_process.h"
#include "common/cli.h"
#include "common/exit_codes.h"
#include "common/run_files.h"
#include "common/run_flags.h"
#include "common/stop_signals.h"
#include "metrics/run_identity.h"
#include "runtime/run_config.h"
#include "tools/launch/host_slowness.h"
#include "tools/launch/supervisor.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// This host's name, for worker names on several hosts.
std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "host";
  return name;
}

// A worker's CURVE flags from a folder of keys made with dctrain-keygen:
// its own NAME.key, else a shared worker.key, and coordinator.pub.
std::vector<std::string> worker_keys(const fs::path& keys, const std::string& name) {
  fs::path secret = keys / (name + ".key");
  if (!fs::exists(secret)) secret = keys / "worker.key";
  if (!fs::exists(secret)) {
    throw dctrain::UsageError(fmt::format(
        "--keys {}: no key for worker '{}' (neither {}.key nor worker.key); make it with "
        "dctrain-keygen --dir {} {} and put its .pub in the coordinator's allow-list",
        keys.string(), name, name, keys.string(), name));
  }
  if (!fs::exists(keys / "coordinator.pub")) {
    throw dctrain::UsageError(fmt::format(
        "--keys {}: no coordinator.pub (copy it from the coordinator's host)", keys.string()));
  }
  return {"--secret-key", secret.string(), "--coordinator-key",
          (keys / "coordinator.pub").string()};
}

// The coordinator's CURVE flags from the same folder: coordinator.key and
// the allow-list, DIR/allowed when it exists, else DIR's .pub files.
std::vector<std::string> coordinator_keys(const fs::path& keys) {
  if (!fs::exists(keys / "coordinator.key")) {
    throw dctrain::UsageError(fmt::format(
        "--keys {}: no coordinator.key; make the keys once with dctrain-keygen --dir {} "
        "coordinator NAME...",
        keys.string(), keys.string()));
  }
  const fs::path allowed = fs::exists(keys / "allowed") ? keys / "allowed" : keys;
  return {"--secret-key", (keys / "coordinator.key").string(), "--allowed-keys", allowed.string()};
}

// The launcher's command line.
struct LaunchOptions {
  dctrain::RunFlags run;  // passed on to the coordinator (common/run_flags.h)
  std::string log_level = "info";
  int workers = 0;           // unless given: the config's
  int workers_per_host = 0;  // unless given: all of them
  std::string bind, connect, name_prefix, keys_dir;
  std::string cgroup_parent;  // real slowness's groups go here; empty: found
  bool insecure = false;
  bool curve = false;
  int threads = 1;
};

void add_launch_options(CLI::App& app, LaunchOptions& o) {
  dctrain::add_common_options(app, "dctrain-launch", o.log_level);
  app.add_flag("--curve", o.curve,
               "Encrypt and authenticate every connection with CURVE, with throwaway keys made "
               "for this run in RUN_DIR/keys (replaced on every launch)");
  app.add_option("--workers", o.workers,
                 "Workers of the run (default: the config's 'workers'; with --resume, the run's); "
                 "all start here unless --workers-per-host")
      ->check(CLI::Range(1, 256));
  app.add_option("--workers-per-host", o.workers_per_host,
                 "Workers to start on this host (with --bind: this host's share of --workers; "
                 "with --connect: required)")
      ->check(CLI::Range(1, 256));
  CLI::Option* bind_option = app.add_option(
      "--bind", o.bind,
      "The coordinator listens here, tcp://IP:PORT with the address other hosts reach this one "
      "by, for their workers as well as this host's (default tcp://127.0.0.1:*, this host only); "
      "needs --keys or --insecure");
  CLI::Option* connect_option =
      app.add_option("--connect", o.connect,
                     "Start only workers, for the coordinator at tcp://HOST:PORT (another host's "
                     "dctrain-launch --bind)");
  connect_option->excludes(bind_option);
  app.add_option("--name-prefix", o.name_prefix,
                 "Worker names PREFIX-0, PREFIX-1, ... (default: 'worker' on this host only, "
                 "else this host's name); unique per host")
      ->check([](const std::string& p) {
        return p.empty() || p.find_first_of(" /") != std::string::npos
                   ? std::string("a plain word (no space or '/')")
                   : std::string();
      });
  app.add_option("--keys", o.keys_dir,
                 "CURVE keys made once with dctrain-keygen: coordinator.key and the allow-list "
                 "(DIR/allowed, else DIR's .pub files) for the coordinator; coordinator.pub and "
                 "NAME.key (or worker.key) for each worker")
      ->check(CLI::ExistingDirectory);
  app.add_flag("--insecure", o.insecure,
               "With --bind: no keys, plain TCP that other hosts reach (a trusted network only)");
  app.add_option("--cgroup-parent", o.cgroup_parent,
                 "A config's cpu-quota and co-located-load slowness: the cgroup (v2, or v1's cpu "
                 "controller) under which each worker gets a group of its own (default: the root "
                 "of the hierarchy with the cpu controller; needs root, or a delegated cgroup)");
  dctrain::add_run_flags(app, o.run);
  app.add_option("--threads", o.threads, "Compute threads per worker")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.footer(
      "Environment:\n"
      "  OPENBLAS_CORETYPE   passed on to the coordinator and the workers, like the rest of the\n"
      "                      environment; unset, each settles its own OpenBLAS core (see\n"
      "                      dctrain-worker --help)");
  dctrain::add_examples(
      app, {"dctrain-launch --config experiments/synthetic-mlp.cfg --workers 4 --out runs/quick",
            "dctrain-launch --config experiments/mnist-cnn.cfg --data-dir ../shared/data --tau "
            "auto --curve --out runs/mnist",
            "dctrain-launch --resume runs/mnist --data-dir ../shared/data"});
}

void refuse(const std::string& why) {
  std::fprintf(stderr, "dctrain-launch: %s\n", why.c_str());
}

// With --connect: a flag of the coordinator's host given here, if any.
std::optional<std::string> coordinator_flag_given(const CLI::App& app) {
  for (const char* flag : {"--config", "--resume", "--out", "--curve", "--tau", "--steps",
                           "--metrics-port", "--metrics-address", "--insecure", "--workers"}) {
    if (app.count(flag) > 0) return flag;
  }
  return std::nullopt;
}

// With --bind: why it cannot serve other hosts as given, if it cannot.
std::optional<std::string> bind_problem(const LaunchOptions& o) {
  const bool any_address = o.bind.find("://*") != std::string::npos ||
                           o.bind.find("0.0.0.0") != std::string::npos ||
                           o.bind.find("[::]") != std::string::npos;
  if (any_address) {
    return fmt::format(
        "--bind {}: give the address other hosts reach this one by (tcp://IP:PORT), which this "
        "host's workers use too",
        o.bind);
  }
  if (o.curve) {
    return "--curve makes throwaway keys for this host only; across hosts make them once "
           "(dctrain-keygen) and pass --keys DIR";
  }
  if (o.keys_dir.empty() && !o.insecure) {
    return fmt::format(
        "--bind {} serves other hosts: pass --keys DIR (made once with dctrain-keygen) or, on a "
        "trusted network, --insecure",
        o.bind);
  }
  return std::nullopt;
}

// The run's worker count: --workers, else the config's; why not, if neither
// gives one that --workers-per-host fits.
std::optional<std::string> settle_worker_counts(const CLI::App& app, const std::string& source,
                                                const dctrain::v1::RunConfig& config,
                                                LaunchOptions& o) {
  if (app.count("--workers") == 0) {
    const uint32_t wanted = config.workers();
    if (wanted < 1 || wanted > 256) {
      return fmt::format(
          "{} asks for {} workers; set 'workers: N' (1 to 256) there or pass --workers N", source,
          wanted);
    }
    o.workers = static_cast<int>(wanted);
  }
  if (o.workers_per_host == 0) o.workers_per_host = o.workers;
  if (o.workers_per_host > o.workers) {
    return fmt::format("--workers-per-host {} is more than the run's {} workers",
                       o.workers_per_host, o.workers);
  }
  if (o.workers_per_host < o.workers && o.bind.empty()) {
    return fmt::format(
        "{} of the run's {} workers would start elsewhere: pass --bind tcp://IP:PORT so that "
        "other hosts reach the coordinator",
        o.workers - o.workers_per_host, o.workers);
  }
  return std::nullopt;
}

// --curve: a throwaway key pair per process of this run in RUN_DIR/keys,
// the workers' public keys in keys/allowed, the coordinator's allow-list.
fs::path make_throwaway_keys(const fs::path& run_dir, const LaunchOptions& o) {
  const fs::path keys = run_dir / "keys";
  fs::create_directories(keys / "allowed");
  dctrain::write_key_pair(keys / "coordinator", dctrain::generate_curve_keypair(), "coordinator",
                          true);
  for (int w = 0; w < o.workers; ++w) {
    const std::string name = fmt::format("{}-{}", o.name_prefix, w);
    dctrain::write_key_pair(keys / name, dctrain::generate_curve_keypair(), name, true);
    fs::copy_file(keys / (name + ".pub"), keys / "allowed" / (name + ".pub"),
                  fs::copy_options::overwrite_existing);
  }
  return keys;
}

// The coordinator's command line: the run's flags, its address, keys.
std::vector<std::string> coordinator_command(const fs::path& bin, LaunchOptions o,
                                             const fs::path& keys) {
  std::vector<std::string> args = {(bin / "dctrain-coordinator").string(),
                                   "--bind",
                                   o.bind.empty() ? "tcp://127.0.0.1:*" : o.bind,
                                   "--log-level",
                                   o.log_level,
                                   "--workers",
                                   std::to_string(o.workers)};
  // A resumed run's config and folder are the checkpoint's.
  if (!o.run.resume_dir.empty()) {
    o.run.config_path = o.run.out_dir = "";
    o.run.overwrite = false;
  }
  const std::vector<std::string> run_args = dctrain::run_flag_arguments(o.run);
  args.insert(args.end(), run_args.begin(), run_args.end());
  if (o.insecure) args.push_back("--insecure");
  if (!keys.empty()) {
    const std::vector<std::string> key_args = coordinator_keys(keys);
    args.insert(args.end(), key_args.begin(), key_args.end());
  }
  return args;
}

// The address the coordinator (children[0]) reports in RUN_DIR/endpoint,
// its output streamed meanwhile; nothing if it exited first (its status in
// `status`) or did not report within 120 s (then it is killed).
std::optional<std::string> wait_for_endpoint(dctrain::Supervisor& supervisor,
                                             const fs::path& run_dir, int& status) {
  std::vector<dctrain::SupervisedChild>& children = supervisor.children();
  std::string endpoint;
  const auto give_up = Clock::now() + std::chrono::seconds(120);
  while (endpoint.empty()) {
    supervisor.drain(children[0], false);
    supervisor.reap();
    if (children[0].status) {
      supervisor.drain(children[0], true);
      std::fprintf(stderr,
                   "dctrain-launch: the coordinator exited with status %d before listening\n",
                   *children[0].status);
      status =
          *children[0].status == dctrain::kExitUsage ? dctrain::kExitUsage : dctrain::kExitFailed;
      return std::nullopt;
    }
    std::ifstream in(run_dir / dctrain::run_files::kEndpoint);
    std::getline(in, endpoint);
    if (Clock::now() > give_up) {
      refuse("the coordinator did not report its endpoint in 120 s");
      children[0].process.kill();
      status = dctrain::kExitFailed;
      return std::nullopt;
    }
    if (endpoint.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return endpoint;
}

// What starts this host's processes.
struct Host {
  const LaunchOptions& o;
  fs::path bin;  // the folder of this program, and of the others
  bool several_hosts = false;
  dctrain::Supervisor& supervisor;
  // The config's real slowness on this host's processes; null: none.
  const dctrain::HostSlowness* slowness = nullptr;

  // This host's `count` workers, for the coordinator at `endpoint`.
  void start_workers(const std::string& endpoint, int count, const fs::path& keys) const {
    for (int w = 0; w < count; ++w) {
      const std::string name = fmt::format("{}-{}", o.name_prefix, w);
      std::vector<std::string> args = {
          (bin / "dctrain-worker").string(), "--connect",   endpoint,   "--name", name, "--threads",
          std::to_string(o.threads),         "--log-level", o.log_level};
      if (!o.run.data_dir.empty()) args.insert(args.end(), {"--data-dir", o.run.data_dir});
      if (!keys.empty()) {
        const std::vector<std::string> key_args = worker_keys(keys, name);
        args.insert(args.end(), key_args.begin(), key_args.end());
      }
      if (slowness != nullptr) args = slowness->worker_command(w, std::move(args));
      supervisor.start(several_hosts ? name : fmt::format("worker {}", w), std::move(args));
    }
  }
};

// The config's real slowness for this host's processes, into `slowness`
// (left empty when the config asks for none); the reason when it cannot be
// applied here.
std::optional<std::string> make_slowness(const dctrain::v1::RunConfig& run_config,
                                         const std::string& source, const LaunchOptions& o,
                                         bool several_hosts,
                                         std::optional<dctrain::HostSlowness>& slowness) {
  if (run_config.slowness_size() == 0) return std::nullopt;
  try {
    slowness.emplace(run_config, o.workers_per_host, o.cgroup_parent);
  } catch (const std::exception& e) {
    return fmt::format("{} asks for real slowness, which cannot be applied here: {}", source,
                       e.what());
  }
  if (slowness->coordinator_bind() && several_hosts) {
    return "a slow link puts this host's processes in network namespaces of their own: run it "
           "on one host (no --bind)";
  }
  return std::nullopt;
}

// Applies `slowness` from the run's first step record on (the workers'
// start-up is not slowed), and records what was applied in the run folder.
void apply_from_first_record(dctrain::Supervisor& supervisor, dctrain::HostSlowness& slowness,
                             const fs::path& run_dir) {
  supervisor.every_pass([&supervisor, &slowness, run_dir, started = false]() mutable {
    std::error_code ec;
    if (started || fs::file_size(run_dir / dctrain::run_files::kMetrics, ec) == 0 || ec) return;
    started = true;
    std::vector<pid_t> worker_pids;
    for (size_t c = 1; c < supervisor.children().size(); ++c)
      worker_pids.push_back(supervisor.children()[c].process.pid());
    slowness.start(run_dir / dctrain::run_files::kSlownessLog, worker_pids);
    std::ofstream applied(run_dir / dctrain::run_files::kSlowness);
    for (const std::string& line : slowness.applied()) {
      std::fprintf(stderr, "dctrain-launch: slowness from the first step record on: %s\n",
                   line.c_str());
      applied << line << '\n';
    }
  });
}

// The coordinator's host: the run's config and folder checked, the
// coordinator started, then this host's workers once it listens.
int run_coordinator_host(const CLI::App& app, LaunchOptions& o, Host host,
                         dctrain::StopSignals& signals) {
  if (o.run.config_path.empty() && o.run.resume_dir.empty()) {
    refuse("pass --config FILE (see experiments/) or --resume RUN_DIR");
    return dctrain::kExitUsage;
  }
  if (!o.bind.empty()) {
    if (const std::optional<std::string> problem = bind_problem(o)) {
      refuse(*problem);
      return dctrain::kExitUsage;
    }
  }
  // The run's config: the one given, or the one the resumed run wrote into
  // its folder when it began. One that does not parse or validate is
  // refused here, before any folder is made.
  const std::string source =
      o.run.resume_dir.empty()
          ? o.run.config_path
          : (fs::path(o.run.resume_dir) / dctrain::run_files::kConfig).string();
  dctrain::v1::RunConfig run_config;
  try {
    run_config = dctrain::load_run_config(source);
  } catch (const std::exception& e) {
    refuse(e.what());
    return dctrain::kExitUsage;
  }
  if (const std::optional<std::string> problem = settle_worker_counts(app, source, run_config, o)) {
    refuse(*problem);
    return dctrain::kExitUsage;
  }

  if (o.run.resume_dir.empty() && o.run.out_dir.empty()) {
    o.run.out_dir = dctrain::new_run_folder("runs", run_config.name()).string();
    std::fprintf(stderr, "dctrain-launch: run folder %s\n", o.run.out_dir.c_str());
  }
  const fs::path run_dir =
      o.run.resume_dir.empty() ? fs::path(o.run.out_dir) : fs::path(o.run.resume_dir);
  // Refused here, before the launcher touches the folder (its endpoint, its
  // keys), as the coordinator would refuse it.
  if (o.run.resume_dir.empty() && !o.run.overwrite) {
    if (const std::optional<std::string> refusal = dctrain::new_run_refusal(run_dir)) {
      refuse(*refusal);
      return dctrain::kExitUsage;
    }
  }
  // Real slowness: made now, or refused with what it needs.
  std::optional<dctrain::HostSlowness> slowness;
  if (const std::optional<std::string> problem =
          make_slowness(run_config, source, o, host.several_hosts, slowness)) {
    refuse(*problem);
    return dctrain::kExitUsage;
  }
  if (slowness) host.slowness = &*slowness;
  fs::create_directories(run_dir);
  fs::remove(run_dir / dctrain::run_files::kEndpoint);

  // Keys: made once (--keys), or throwaway ones for this host's processes.
  const fs::path keys = o.curve ? make_throwaway_keys(run_dir, o) : fs::path(o.keys_dir);
  LaunchOptions coordinator_options = o;
  if (slowness && slowness->coordinator_bind()) {
    // On the bridge of namespaces made for this run, which only this host
    // reaches.
    coordinator_options.bind = *slowness->coordinator_bind();
    coordinator_options.insecure = keys.empty();
  }
  std::vector<std::string> coordinator = coordinator_command(host.bin, coordinator_options, keys);
  if (slowness) coordinator = slowness->coordinator_command(std::move(coordinator));
  host.supervisor.start("coordinator", std::move(coordinator));
  int status = 0;
  const std::optional<std::string> endpoint = wait_for_endpoint(host.supervisor, run_dir, status);
  if (!endpoint) return status;
  if (host.several_hosts) {
    std::fprintf(stderr,
                 "dctrain-launch: the coordinator listens at %s; %d of its %d workers start here, "
                 "the others with: dctrain-launch --connect %s --workers-per-host N%s\n",
                 endpoint->c_str(), o.workers_per_host, o.workers, endpoint->c_str(),
                 keys.empty() ? "" : " --keys DIR");
  }
  host.start_workers(*endpoint, o.workers_per_host, keys);
  if (slowness) apply_from_first_record(host.supervisor, *slowness, run_dir);
  return host.supervisor.supervise(/*coordinator=*/true, signals, run_dir.string());
}

}  // namespace

// A program that cannot be started (or a run folder that cannot be made)
// ends the launcher with its reason; the children it started are killed and
// reaped on the way out (ChildProcess).
int main(int argc, char** argv) try {
  CLI::App app{
      "dctrain-launch: runs a coordinator and its workers on this host, or this host's share of "
      "a run across hosts (--bind on the coordinator's host, --connect on the others)"};
  LaunchOptions o;
  add_launch_options(app, o);
  if (const std::optional<int> status = dctrain::parse_command_line(app, argc, argv))
    return *status;
  const bool several_hosts = !o.connect.empty() || !o.bind.empty();
  if (o.name_prefix.empty()) o.name_prefix = several_hosts ? host_name() : "worker";
  // Ctrl-C is read here and forwarded; the children start with it unblocked.
  dctrain::StopSignals signals;
  dctrain::Supervisor supervisor;
  const Host host{o, fs::canonical("/proc/self/exe").parent_path(), several_hosts, supervisor};
  if (!o.connect.empty()) {
    if (const std::optional<std::string> flag = coordinator_flag_given(app)) {
      refuse(fmt::format(
          "{} belongs to the coordinator's host; with --connect this host starts workers only "
          "(--workers-per-host, --keys, --data-dir, --threads, --name-prefix)",
          *flag));
      return dctrain::kExitUsage;
    }
    if (o.workers_per_host == 0) {
      refuse("--connect needs --workers-per-host N");
      return dctrain::kExitUsage;
    }
    host.start_workers(o.connect, o.workers_per_host, o.keys_dir);
    std::fprintf(stderr, "dctrain-launch: %d workers for the coordinator at %s\n",
                 o.workers_per_host, o.connect.c_str());
    return supervisor.supervise(/*coordinator=*/false, signals, "");
  }
  return run_coordinator_host(app, o, host, signals);
} catch (const std::exception& e) {
  std::fprintf(stderr, "dctrain-launch: %s\n", e.what());
  return dctrain::kExitFailed;
}
