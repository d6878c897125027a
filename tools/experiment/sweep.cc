#include "tools/experiment/sweep.h"

#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "common/files.h"
#include "runtime/run_config.h"
#include "runtime/step_policy.h"
#include "runtime/text_format.h"
#include "tools/runs/run_folder.h"

namespace dctrain {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMaxLaunchedWorkers = 256;
constexpr uint32_t kMaxSimulatedWorkers = 4096;
// A simulated case's wall time: start-up, and per step per worker (1,024
// workers x 100 steps took 9 s on a 2-core machine).
constexpr double kSimulationStartSeconds = 0.5;
constexpr double kSimulatedWorkerStepSeconds = 9e-5;

// Letters, digits, '.', '-': safe in folder names and gnuplot titles.
bool name_safe(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// Steps a case will run: stop.max_steps, or its epochs over the training
// samples when the config says how many there are; 0 when unknown.
uint64_t expected_steps(const v1::RunConfig& c) {
  const uint64_t max_steps = c.stop().max_steps();
  uint64_t samples = c.dataset().train_limit();
  if (samples == 0 && !reads_files(c.dataset().kind())) samples = c.dataset().synthetic_samples();
  uint64_t epoch_steps = 0;
  if (c.stop().max_epochs() > 0 && samples > 0 && c.step().global_batch() > 0) {
    epoch_steps = static_cast<uint64_t>(
        std::ceil(c.stop().max_epochs() * static_cast<double>(samples) / c.step().global_batch()));
  }
  if (max_steps > 0 && epoch_steps > 0) return std::min(max_steps, epoch_steps);
  return max_steps > 0 ? max_steps : epoch_steps;
}

}  // namespace

TauPolicy parse_tau_policy(const std::string& text) {
  TauPolicy p;
  if (text == "inf" || text == "infinity") {
    p.text = "inf";
    return p;
  }
  if (text == "auto") {
    p.kind = TauPolicy::Kind::kAuto;
    p.text = "auto";
    return p;
  }
  const auto fail = [&] {
    return std::invalid_argument(
        fmt::format("tau policy '{}' is not one of: \"inf\", \"auto\", seconds > 0 (\"0.05\"), or "
                    "a percentile of the "
                    "baseline's worker step compute times (\"p90\", 0 < p <= 100)",
                    text));
  };
  if (!text.empty() && text[0] == 'p') {
    size_t used = 0;
    double value = 0.0;
    try {
      value = std::stod(text.substr(1), &used);
    } catch (const std::exception&) {
      throw fail();
    }
    if (used + 1 != text.size() || !(value > 0.0 && value <= 100.0)) throw fail();
    p.kind = TauPolicy::Kind::kPercentile;
    p.value = value;
    p.text = fmt::format("p{}", value);
    return p;
  }
  double seconds = 0.0;
  try {
    seconds = parse_tau(text);
  } catch (const std::exception&) {
    throw fail();
  }
  p.kind = TauPolicy::Kind::kSeconds;
  p.value = seconds;
  p.text = fmt::format("{}", seconds);
  return p;
}

std::string case_name(const std::string& model, uint32_t workers, const std::string& delay,
                      const TauPolicy& tau, bool requeue, uint64_t seed,
                      const std::string& policy) {
  std::string tau_part =
      tau.kind == TauPolicy::Kind::kSeconds ? fmt::format("tau-{}s", tau.text) : "tau-" + tau.text;
  if (!policy.empty()) {
    // "rebalance+dropcompute" -> "rebalance-dropcompute": '+' stays out of
    // folder names.
    std::string part = policy;
    std::replace(part.begin(), part.end(), '+', '-');
    tau_part = part + "_" + tau_part;
  }
  if (tau.kind == TauPolicy::Kind::kInfinity) {
    return fmt::format("{}_w{}_{}_{}_s{}", model, workers, delay, tau_part, seed);
  }
  return fmt::format("{}_w{}_{}_{}_{}_s{}", model, workers, delay, tau_part,
                     requeue ? "requeue" : "norequeue", seed);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "unknown";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{}m {:02}s", s / 60, s % 60);
  return fmt::format("{}h {:02}m", s / 3600, (s % 3600) / 60);
}

v1::Sweep parse_sweep(const std::string& text, const std::string& origin) {
  v1::Sweep sweep;
  parse_text_format(text, origin, sweep,
                    "a sweep is a dctrain.v1.Sweep in Protobuf text format; see proto/sweep.proto "
                    "and experiments/*.sweep");
  return sweep;
}

namespace {

// Clears the field of `message` at the dotted `path`; what is wrong with the
// path when it names no field.
std::optional<std::string> clear_field(google::protobuf::Message& message,
                                       const std::string& path) {
  google::protobuf::Message* at = &message;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string name = path.substr(start, dot == std::string::npos ? dot : dot - start);
    const google::protobuf::FieldDescriptor* field = at->GetDescriptor()->FindFieldByName(name);
    if (field == nullptr) {
      return fmt::format("'{}': {} has no field '{}'", path, at->GetDescriptor()->name(), name);
    }
    if (dot == std::string::npos) {
      at->GetReflection()->ClearField(at, field);
      return std::nullopt;
    }
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE ||
        field->is_repeated()) {
      return fmt::format("'{}': '{}' is not a message field, so nothing is inside it", path, name);
    }
    at = at->GetReflection()->MutableMessage(at, field);
    start = dot + 1;
  }
}

}  // namespace

namespace {

// One arm of the sweep: a policy at one tau.
struct Arm {
  v1::Policy policy = v1::POLICY_UNSET;  // unset: the config's
  TauPolicy tau;
  std::string name;                       // one of the sweep's arms; "": the policy's word
  const v1::RunConfig* config = nullptr;  // that arm's, merged into its cases' configs
};

// The sweep's arms. The baseline is the first and always there: tau = inf, with the
// config's policy, or "sync" when the sweep has a policies axis. Then each
// policy of the axis: those that run at tau = inf once, those with a
// threshold at each finite tau of the taus axis.
std::vector<Arm> plan_arms(const v1::Sweep& sweep, std::vector<std::string>& problems) {
  std::vector<TauPolicy> finite;
  for (const std::string& t : sweep.taus()) {
    try {
      const TauPolicy tau = parse_tau_policy(t);
      if (tau.kind != TauPolicy::Kind::kInfinity) finite.push_back(tau);
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("taus: {}", e.what()));
    }
  }
  std::vector<Arm> arms = {{sweep.policies().empty() ? v1::POLICY_UNSET : v1::POLICY_SYNC,
                            parse_tau_policy("inf"), "", nullptr}};
  if (sweep.policies().empty()) {
    for (const TauPolicy& t : finite) arms.push_back({v1::POLICY_UNSET, t, "", nullptr});
  }
  for (const std::string& text : sweep.policies()) {
    const auto arm = std::find_if(sweep.arms().begin(), sweep.arms().end(),
                                  [&](const v1::Arm& a) { return a.name() == text; });
    if (arm != sweep.arms().end()) {
      const v1::Policy policy = arm->config().step().policy();
      if (policy == v1::POLICY_UNSET || !name_safe(text)) {
        problems.push_back(fmt::format(
            "arms: '{}' needs a step.policy and a name of letters, digits, '-' or '.'", text));
        continue;
      }
      arms.push_back({policy, parse_tau_policy("inf"), text, &arm->config()});
      continue;
    }
    const std::optional<v1::Policy> parsed = parse_policy(text);
    if (!parsed) {
      problems.push_back(fmt::format(
          "policies: '{}' is neither a step policy (\"sync\", \"dropcompute\", \"rebalance\", "
          "\"rebalance+dropcompute\", \"backup\", \"async\", \"local-sgd\") nor one of the "
          "sweep's arms",
          text));
      continue;
    }
    const v1::Policy policy = *parsed;
    if (policy == v1::POLICY_SYNC) continue;  // the baseline
    // An arm's word names its shares and whether it has a threshold
    // (sweep.proto): the config takes the shares (step.policy), the taus
    // axis the threshold.
    if (shares_of(policy) == policy) {
      arms.push_back({policy, parse_tau_policy("inf"), "", nullptr});
      continue;
    }
    if (finite.empty()) {
      problems.push_back(fmt::format(
          "policies: '{}' needs a threshold: add a finite tau or \"auto\" to taus", text));
    }
    for (const TauPolicy& t : finite) arms.push_back({policy, t, "", nullptr});
  }
  return arms;
}

// The worker counts, the simulation and the delay names, checked; the
// simulation (its trace made absolute) into `plan`.
void check_axes(const v1::Sweep& sweep, const fs::path& sweep_dir, SweepPlan& plan,
                std::vector<std::string>& problems) {
  // Real runs are one process per worker; a simulation is one process.
  const uint32_t max_workers = sweep.simulate() ? kMaxSimulatedWorkers : kMaxLaunchedWorkers;
  for (uint32_t w : sweep.workers()) {
    if (w < 1 || w > max_workers) {
      problems.push_back(fmt::format("workers: {} is not in 1..{}{}", w, max_workers,
                                     sweep.simulate() ? " (simulated)" : ""));
    }
  }
  if (sweep.simulate()) {
    plan.simulation = sweep.simulation();
    if (sweep.simulation().fit_network() && sweep.simulation().trace().empty()) {
      problems.push_back("simulation.fit_network: the network is fitted from a trace: set trace");
    }
    if (!sweep.simulation().trace().empty()) {
      const fs::path trace = sweep_dir / sweep.simulation().trace();
      if (!fs::exists(trace)) {
        problems.push_back(fmt::format("simulation.trace: {} does not exist", trace.string()));
      }
      plan.simulation->set_trace(fs::absolute(trace).string());
    }
  } else if (sweep.has_simulation()) {
    problems.push_back("simulation: set, but simulate is not: add simulate: true");
  }
  std::set<std::string> delay_names;
  for (const v1::DelayCase& d : sweep.delays()) {
    if (!name_safe(d.name())) {
      problems.push_back(
          fmt::format("delays: name '{}' must be non-empty letters, digits, '-' or '.' (it goes "
                      "into folder names)",
                      d.name()));
    }
    if (sweep.simulate() && d.slowness_size() > 0) {
      problems.push_back(fmt::format(
          "delays: '{}' has real slowness, which a simulated sweep cannot apply (simulate: false)",
          d.name()));
    }
    if (!delay_names.insert(d.name()).second) {
      problems.push_back(fmt::format("delays: the name '{}' is used twice", d.name()));
    }
  }
}

// A config of the sweep with its clears and overrides, and the model name
// its cases carry; nothing when it cannot be used (the problem added).
std::optional<std::pair<v1::RunConfig, std::string>> base_config(
    const v1::Sweep& sweep, const fs::path& sweep_dir, const std::string& config_file,
    std::vector<std::string>& problems) {
  v1::RunConfig base;
  try {
    base = load_run_config((sweep_dir / config_file).string());
  } catch (const std::exception& e) {
    problems.push_back(
        fmt::format("configs: '{}' (relative to the sweep file): {}", config_file, e.what()));
    return std::nullopt;
  }
  bool cleared = true;
  for (const std::string& path : sweep.clear()) {
    if (const std::optional<std::string> problem = clear_field(base, path)) {
      problems.push_back(fmt::format("clear: {}", *problem));
      cleared = false;
    }
  }
  if (!cleared) return std::nullopt;
  base.MergeFrom(sweep.overrides());
  const std::string model =
      base.name().empty() ? fs::path(config_file).stem().string() : base.name();
  if (!name_safe(model)) {
    problems.push_back(
        fmt::format("'{}': the config's name '{}' must be letters, digits, '-' or '.' (it goes "
                    "into folder names)",
                    config_file, model));
    return std::nullopt;
  }
  return std::make_pair(std::move(base), model);
}

// One case's axes.
struct CaseAxes {
  uint32_t workers = 0;
  const v1::DelayCase* delay = nullptr;
  uint64_t seed = 0;
  const Arm* arm = nullptr;
  bool baseline_arm = false;
  bool requeue = true;
};

// The case of `base` at `axes`: its config, name and info (no baseline,
// no estimate yet).
SweepCase make_case(const v1::Sweep& sweep, const std::string& sweep_name,
                    const v1::RunConfig& base, const std::string& model, const CaseAxes& axes) {
  const TauPolicy& tau = axes.arm->tau;
  const v1::Policy policy = axes.arm->policy;
  SweepCase c;
  c.tau = tau;
  c.config = base;
  c.config.set_workers(axes.workers);
  if (sweep.worker_batch() > 0) {
    c.config.mutable_step()->set_global_batch(sweep.worker_batch() * axes.workers);
  }
  *c.config.mutable_delay() = axes.delay->delay();
  c.config.mutable_slowness()->MergeFrom(axes.delay->slowness());
  c.config.set_seed(axes.seed);
  v1::StepConfig& step = *c.config.mutable_step();
  step.set_requeue(axes.requeue);
  // Requeue off is the original DropCompute: what was dropped is lost, and
  // the step's gradient is still averaged over the nominal batch (normalize
  // "nominal"), as in the paper.
  if (!axes.requeue) step.set_normalize(v1::NORMALIZE_NOMINAL);
  // As dctrain-launch --tau does: "auto" hands tau to the coordinator; any
  // other policy is fixed (a percentile is resolved when its baseline has
  // run).
  step.set_tau(tau.kind == TauPolicy::Kind::kSeconds ? tau.value
                                                     : std::numeric_limits<double>::infinity());
  if (tau.kind == TauPolicy::Kind::kAuto) {
    step.set_tau_policy(v1::TAU_POLICY_AUTO);
  } else {
    step.set_tau_policy(v1::TAU_POLICY_FIXED);
    step.clear_auto_tau();
  }
  if (policy != v1::POLICY_UNSET) step.set_policy(policy);
  if (axes.arm->config != nullptr) c.config.MergeFrom(*axes.arm->config);
  const std::string arm_name = axes.arm->name.empty() ? word(policy) : axes.arm->name;
  const std::string name =
      policy == v1::POLICY_UNSET || axes.baseline_arm
          ? case_name(model, axes.workers, axes.delay->name(), tau, axes.requeue, axes.seed)
          : case_name(model, axes.workers, axes.delay->name(), tau, axes.requeue, axes.seed,
                      arm_name);
  c.config.set_name(name);
  c.info.set_sweep(sweep_name);
  c.info.set_case_name(name);
  c.info.set_model(model);
  c.info.set_workers(axes.workers);
  c.info.set_delay(axes.delay->name());
  c.info.set_tau_policy(tau.text);
  c.info.set_tau_seconds(c.config.step().tau());
  c.info.set_requeue(axes.requeue);
  c.info.set_seed(axes.seed);
  if (policy != v1::POLICY_UNSET) c.info.set_policy(arm_name);
  c.info.set_simulated(sweep.simulate());
  return c;
}

// How long the sweep's cases are expected to take.
struct Estimate {
  double default_step = 0.1;  // seconds per step of a model without its own
  double startup = 3.0;       // seconds a real case takes to start

  explicit Estimate(const v1::Sweep& sweep)
      : default_step(sweep.default_step_seconds() > 0 ? sweep.default_step_seconds() : 0.1),
        startup(sweep.startup_seconds() > 0 ? sweep.startup_seconds() : 3.0) {}

  // Sets c.expected_steps and c.expected_seconds from its finished config.
  void of(const v1::Sweep& sweep, const v1::RunConfig& finished, double step_seconds,
          SweepCase& c) const {
    c.expected_steps = expected_steps(finished);
    c.expected_seconds =
        sweep.simulate()
            ? kSimulationStartSeconds + static_cast<double>(c.expected_steps) *
                                            c.info.workers() * kSimulatedWorkerStepSeconds
            : startup + static_cast<double>(c.expected_steps) * step_seconds;
    if (finished.stop().max_wall_seconds() > 0) {
      c.expected_seconds = std::min(c.expected_seconds, startup + finished.stop().max_wall_seconds());
    }
  }

  // The words of SweepPlan::estimate_basis.
  std::string basis(const v1::Sweep& sweep, bool unknown_steps) const {
    if (sweep.simulate()) {
      return fmt::format(
          "simulated: per case {} s + steps x workers x {} s (measured on a 2-core machine)",
          kSimulationStartSeconds, kSimulatedWorkerStepSeconds);
    }
    std::string per_model;
    for (const auto& [model, seconds] : sweep.step_seconds()) {
      per_model += fmt::format("{}{} {} s", per_model.empty() ? "" : ", ", model, seconds);
    }
    return fmt::format(
        "per case {} s start-up + steps x seconds per step ({}{}default {} s; set in the sweep "
        "file, measured "
        "on a 2-core machine){}",
        startup, per_model, per_model.empty() ? "" : "; ", default_step,
        unknown_steps
            ? "; cases without stop.max_steps and a known training-set size count no steps"
            : "");
  }
};

// Every problem found, as one error.
[[noreturn]] void refuse_sweep(const std::string& name, const std::vector<std::string>& problems) {
  std::string text = fmt::format("sweep '{}' cannot run:", name);
  for (const std::string& p : problems) {
    std::string indented;
    for (char ch : p) indented += ch == '\n' ? std::string("\n    ") : std::string(1, ch);
    text += "\n  - " + indented;
  }
  throw std::runtime_error(text);
}

// Appends one seed's cases (the baseline first) to the plan in an order
// that rotates with the seed: over as many seeds as cases each case runs at
// each place once, so that a host that drifts during a sweep (slower as it
// warms, a neighbour's job) does not always favour the cases that run first
// (measured: the same config run second was 2-7% slower in 5 pairs of 5).
// A percentile case takes its tau from its baseline's run, so it runs just
// after it, wherever that falls.
void append_in_rotation(SweepPlan& plan, std::vector<SweepCase> block, size_t seed_index) {
  std::vector<size_t> independent, after_baseline;
  for (size_t i = 0; i < block.size(); ++i) {
    (block[i].tau.kind == TauPolicy::Kind::kPercentile ? after_baseline : independent).push_back(i);
  }
  std::rotate(independent.begin(),
              independent.begin() + static_cast<std::ptrdiff_t>(seed_index % independent.size()),
              independent.end());
  const size_t baseline_at =
      plan.cases.size() + static_cast<size_t>(std::find(independent.begin(), independent.end(), 0) -
                                              independent.begin());
  for (size_t i : independent) {
    if (i != 0) block[i].baseline = baseline_at;
    plan.cases.push_back(std::move(block[i]));
    if (i != 0) continue;
    for (size_t k : after_baseline) {
      block[k].baseline = baseline_at;
      plan.cases.push_back(std::move(block[k]));
    }
  }
}

}  // namespace

SweepPlan plan_sweep(const v1::Sweep& sweep, const fs::path& sweep_dir,
                     const std::string& default_name) {
  std::vector<std::string> problems;
  SweepPlan plan;
  plan.name = sweep.name().empty() ? default_name : sweep.name();
  if (sweep.configs().empty()) {
    problems.push_back(
        "the sweep names no run config: add configs: \"NAME.cfg\" (relative to the sweep file)");
  }
  const std::vector<Arm> arms = plan_arms(sweep, problems);
  check_axes(sweep, sweep_dir, plan, problems);
  const Estimate estimate(sweep);

  std::set<std::string> names;
  bool unknown_steps = false;
  for (const std::string& config_file : sweep.configs()) {
    const auto loaded = base_config(sweep, sweep_dir, config_file, problems);
    if (!loaded) continue;
    const auto& [base, model] = *loaded;
    const double step_seconds = sweep.step_seconds().count(model) > 0
                                    ? sweep.step_seconds().at(model)
                                    : estimate.default_step;
    std::vector<uint32_t> workers(sweep.workers().begin(), sweep.workers().end());
    if (workers.empty()) workers.push_back(base.workers() > 0 ? base.workers() : 1);
    std::vector<v1::DelayCase> delays(sweep.delays().begin(), sweep.delays().end());
    if (delays.empty()) {
      v1::DelayCase d;
      d.set_name(
          word(base.delay().kind() == v1::DELAY_UNSET ? v1::DELAY_NONE : base.delay().kind()));
      *d.mutable_delay() = base.delay();
      delays.push_back(d);
    }
    std::vector<bool> requeues(sweep.requeue().begin(), sweep.requeue().end());
    if (requeues.empty()) requeues.push_back(requeue_enabled(base.step()));
    std::vector<uint64_t> seeds(sweep.seeds().begin(), sweep.seeds().end());
    if (seeds.empty()) seeds.push_back(base.seed());

    for (uint32_t w : workers) {
      for (const v1::DelayCase& delay : delays) {
        for (size_t seed_index = 0; seed_index < seeds.size(); ++seed_index) {
          std::vector<SweepCase> block;  // this seed's cases, the baseline first
          for (size_t arm = 0; arm < arms.size(); ++arm) {
            const bool infinite = arms[arm].tau.kind == TauPolicy::Kind::kInfinity;
            for (size_t r = 0; r < (infinite ? 1 : requeues.size()); ++r) {
              const CaseAxes axes{w,          &delay,   seeds[seed_index],
                                  &arms[arm], arm == 0, infinite ? true : requeues[r]};
              SweepCase c = make_case(sweep, plan.name, base, model, axes);
              const std::string& name = c.info.case_name();
              if (arm > 0) c.info.set_baseline(block.front().info.case_name());
              v1::RunConfig check = c.config;
              try {
                finalize_run_config(check);
              } catch (const std::exception& e) {
                problems.push_back(fmt::format("case {}: {}", name, e.what()));
              }
              estimate.of(sweep, check, step_seconds, c);
              if (c.expected_steps == 0) unknown_steps = true;
              if (!names.insert(name).second) {
                problems.push_back(fmt::format(
                    "case {} appears twice: two configs share a name, or an axis repeats a value",
                    name));
              }
              block.push_back(std::move(c));
            }
          }
          append_in_rotation(plan, std::move(block), seed_index);
        }
      }
    }
  }
  if (!problems.empty()) refuse_sweep(plan.name, problems);
  plan.estimate_basis = estimate.basis(sweep, unknown_steps);
  return plan;
}

std::vector<std::string> simulation_arguments(const v1::SimulationModel& model) {
  std::vector<std::string> args;
  const auto add = [&](bool has, const char* flag, double value) {
    if (has) args.insert(args.end(), {flag, fmt::format("{}", value)});
  };
  add(model.has_sample_seconds(), "--sample-seconds", model.sample_seconds());
  add(model.has_latency_seconds(), "--latency", model.latency_seconds());
  add(model.has_bandwidth_bytes(), "--bandwidth", model.bandwidth_bytes());
  add(model.has_message_seconds(), "--message-seconds", model.message_seconds());
  add(model.has_mttf_seconds(), "--mttf", model.mttf_seconds());
  add(model.has_restart_seconds(), "--restart-seconds", model.restart_seconds());
  if (!model.trace().empty()) args.insert(args.end(), {"--trace", model.trace()});
  if (model.fit_network()) args.push_back("--fit-network");
  return args;
}

SweepPlan load_sweep(const fs::path& path) {
  const std::string text = read_text_file(path);
  const v1::Sweep sweep = parse_sweep(text, path.string());
  return plan_sweep(sweep, path.parent_path(), path.stem().string());
}

}  // namespace dctrain
