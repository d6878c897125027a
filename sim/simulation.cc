#include "sim/simulation.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "comm/framing.h"
#include "common/files.h"
#include "common/random.h"
#include "common/run_files.h"
#include "coordinator/coordinator.h"
#include "data/dataset.h"
#include "data/dataset_factory.h"
#include "data/synthetic.h"
#include "metrics/run_identity.h"
#include "runtime/replica.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"
#include "sim/compute_trace.h"
#include "sim/network.h"
#include "trace/trace_writer.h"
#include "worker/in_process.h"
#include "worker/session.h"
#include "worker/trainer.h"
#include "worker/worker_clock.h"

namespace dctrain {
namespace {

// A micro-batch's compute on the worker's clock, by its sample count.
using ComputeCost = std::function<double(int samples)>;

// One parameter; a micro-batch costs what `cost` says on the worker's
// clock. Loss 1 per sample (no learning is simulated).
class StandInModel final : public Model {
 public:
  StandInModel(ManualClock* clock, ComputeCost cost) : clock_(clock), cost_(std::move(cost)) {
    table_.add("stand_in", {1});
    allocate_arenas();
  }
  std::string name() const override { return "stand-in"; }
  MicroBatchResult train_micro_batch(const Batch& batch) override {
    if (clock_ != nullptr) clock_->sleep(cost_(batch.size));
    return result(batch);
  }
  MicroBatchResult evaluate(const Batch& batch) override { return result(batch); }
  void apply_statistics(std::span<const float>) override {}

 private:
  static MicroBatchResult result(const Batch& batch) {
    return {static_cast<double>(batch.size), batch.size, batch.size, 0};
  }
  ManualClock* clock_;
  ComputeCost cost_;
};

// The run's training set as the simulation sees it: its size and shape.
// Its samples are never read: the stand-in model does not look at them (a
// batch holds its size and labels only).
class SizeAndShape final : public Dataset {
 public:
  SizeAndShape(std::string description, uint64_t size, SampleShape shape)
      : description_(std::move(description)), size_(size), shape_(shape) {}
  std::string describe() const override { return description_; }
  uint64_t size() const override { return size_; }
  SampleShape shape() const override { return shape_; }
  void fill(std::span<const uint64_t> ids, const SampleContext&, Batch& out) const override {
    out.kind = shape_.kind;
    out.size = static_cast<int>(ids.size());
    out.labels.assign(ids.size(), 0);
  }

 private:
  std::string description_;
  uint64_t size_;
  SampleShape shape_;
};

// The training set's size and shape. Generated images are not generated
// (their pixels would go unread, and a set sized for 1,024 workers takes
// gigabytes); a dataset of files is opened and checked as a run would.
SizeAndShape training_set(const v1::RunConfig& config, const std::filesystem::path& data_root) {
  const DatasetSpec spec = dataset_spec(config, Split::kTrain);
  if (spec.kind == "synthetic-images") {
    const SyntheticImageOptions defaults;
    SampleShape shape;
    shape.kind = BatchKind::kImage;
    shape.channels = spec.channels;
    shape.height = spec.height;
    shape.width = spec.width;
    shape.classes = defaults.classes;
    const uint64_t samples = spec.samples != 0 ? spec.samples : defaults.samples;
    return SizeAndShape(fmt::format("synthetic-images train (seed {}), {} samples, not generated",
                                    spec.seed, samples),
                        samples, shape);
  }
  const std::unique_ptr<Dataset> data = open_dataset(config, Split::kTrain, data_root);
  return SizeAndShape(data->describe(), data->size(), data->shape());
}

// The coordinator's outbox: what it sends, to be scheduled.
class QueueOutbox final : public Outbox {
 public:
  void send(const std::string& peer, Message message) override {
    sent.emplace_back(peer, std::move(message));
  }
  std::vector<std::pair<std::string, Message>> sent;
};

// The real worker session and trainer (worker/in_process.h). The session
// runs on the event queue's time (messages, compute results, its heartbeat
// ticks); the compute side on a clock of its own that moves only when it
// computes or sleeps a delay, as the compute thread does beside the session.
class SimulatedWorker {
 public:
  SimulatedWorker(const std::string& name, const SizeAndShape& train, ComputeCost cost,
                  std::shared_ptr<spdlog::logger> log)
      : worker_(options_for(name), parts_for(train, std::move(cost)), compute_clock_, log, 0.0) {}

  Message hello() const { return worker_.hello(); }

  // What the worker does at `now`: the messages it sends then, and the
  // compute results it will have at later times.
  struct Outcome {
    std::vector<Message> sent;
    std::vector<std::pair<double, ComputeOutput>> computed;
  };

  // A message from the coordinator arrives.
  Outcome deliver(Message message, double now) {
    worker_.deliver(std::move(message), now);
    return outcome(now);
  }
  // A compute result reaches the session.
  Outcome computed(ComputeOutput output, double now) {
    worker_.computed(std::move(output), now);
    return outcome(now);
  }
  // The session's clock work (heartbeats).
  Outcome tick(double now) {
    worker_.tick(now);
    return outcome(now);
  }
  bool done() const { return worker_.done(); }

 private:
  static WorkerOptions options_for(const std::string& name) {
    WorkerOptions options;
    options.name = name;
    options.connect = "sim://coordinator";  // never dialled
    options.connect_timeout = 0.0;
    // Never read (the stand-in's data are parts_for's): a run on a dataset
    // with files would refuse a worker without a data root.
    options.data_dir = "sim://data";
    return options;
  }
  TrainerParts parts_for(const SizeAndShape& train, ComputeCost cost) {
    TrainerParts parts;
    parts.open_train = [&train](const v1::RunConfig&) -> std::unique_ptr<Dataset> {
      return std::make_unique<SizeAndShape>(train);
    };
    parts.make_model = [this, cost = std::move(cost)](const v1::RunConfig&, const Dataset&) {
      return std::make_unique<StandInModel>(&compute_clock_, cost);
    };
    return parts;
  }
  // The jobs the session queued run now on the compute clock (which waits
  // for them to arrive: it is idle or still busy with earlier ones).
  Outcome outcome(double now) {
    Outcome out;
    out.sent = worker_.take_sent();
    while (worker_.has_job()) {
      compute_clock_.time = std::max(compute_clock_.time, now);
      for (ComputeOutput& output : worker_.run_job()) {
        out.computed.emplace_back(compute_clock_.time, std::move(output));
      }
    }
    return out;
  }

  ManualClock compute_clock_;  // before the worker: its trainer reads it
  InProcessWorker worker_;
};

// What happens at a time: a message reaches the coordinator or a worker, a
// worker's compute result reaches its session, or a worker's session ticks.
struct Event {
  enum class Kind {
    kToCoordinator,
    kToWorker,
    kComputed,
    kWorkerTick,
    kDeath,         // the process dies
    kDisconnected,  // the coordinator sees its connection close
    kRestart,       // a new process under its name starts
  };
  double time = 0.0;
  uint64_t order = 0;  // ties: first scheduled, first delivered
  Kind kind = Kind::kToWorker;
  std::string worker;  // the worker it goes to or comes from
  std::optional<Message> message;
  std::optional<ComputeOutput> output;
  uint64_t life = 0;  // the worker process it belongs to (a dead one's events are void)
};

// A min-heap of events by (time, order), kept with std::push_heap and
// std::pop_heap so that an event's message can be moved out.
struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.time != b.time ? a.time > b.time : a.order > b.order;
  }
};

// The exchange's schedule and message cost, as the run's config and the
// options set them.
ExchangeNetworkCosts exchange_costs(const v1::RunConfig& config, const SimulationOptions& o) {
  ExchangeNetworkCosts costs;
  const uint32_t from = config.data_plane().halving_from_members();
  costs.halving_from = from == 0 ? kHalvingFromMembers : from;
  costs.message_seconds = o.message_seconds;
  return costs;
}

void write_simulation_json(const SimulationOptions& o, const v1::RunConfig& config,
                           uint64_t model_parameters, const std::string& compute,
                           const SimulatedNetwork& network, const std::string& network_text) {
  write_file_atomically(
      o.run_dir / "simulation.json",
      fmt::format(
          "{{\n  \"simulated\": true,\n  \"workers\": {},\n  \"compute\": {},\n"
          "  \"sample_seconds\": {},\n  \"trace\": {},\n  \"network\": {},\n"
          "  \"latency_seconds\": {},\n  \"bandwidth_bytes_per_second\": {},\n"
          "  \"message_seconds\": {},\n  \"exchange_schedule\": {},\n"
          "  \"exchange_round_seconds\": {},\n"
          "  \"model_parameters\": {},\n  \"data_plane\": {},\n"
          "  \"left_out\": \"gradients (a one-parameter stand-in model: losses and accuracy are "
          "not the model's); the exchange's failed and redone rounds\",\n"
          "  \"mttf_seconds\": {},\n  \"restart_seconds\": {}\n}}\n",
          config.workers(), json_string(compute), o.sample_seconds, json_string(o.trace.string()),
          json_string(network_text), json_number(network.latency_seconds()),
          json_number(network.bandwidth_bytes_per_second()), json_number(network.message_seconds()),
          json_string(std::string(network.kind()) != "exchange"          ? ""
                      : network.schedule() == ExchangeSchedule::kHalving ? "halving"
                                                                         : "direct"),
          json_number(std::string(network.kind()) == "exchange" ? network.round_seconds() : 0.0),
          model_parameters, json_string(network.kind()), o.mttf_seconds, o.restart_seconds));
}

// One simulation's event loop: the coordinator on the virtual clock, the
// simulated worker processes (their lives, deaths and restarts), and the
// messages between them, timed by the network.
class Simulation {
 public:
  // `config`: finalized, on the star (the coordinator's side of any plane).
  Simulation(const SimulationOptions& o, const v1::RunConfig& config, const SizeAndShape& train,
             SimulatedNetwork network, const std::optional<ComputeTrace>& trace,
             std::shared_ptr<spdlog::logger> log)
      : o_(o),
        config_(config),
        train_(train),
        network_(std::move(network)),
        trace_(trace),
        log_(std::move(log)),
        replica_(std::make_unique<StandInModel>(nullptr, nullptr), replicated_optimizer(config_)),
        coordinator_(coordinator_setup(), replica_, nullptr, outbox_, log_,
                     [this] { return now_; }),
        quiet_(std::make_shared<spdlog::logger>("worker")),  // workers' logs: none
        failures_({config_.seed(), 0x6661696cULL}),
        heartbeat_(config_.liveness().heartbeat_seconds()) {}

  SimulationResult run() {
    for (uint32_t i = 0; i < config_.workers(); ++i) {
      // Ticks spread over the period, as processes started apart would.
      const std::string name = fmt::format("sim-{}", i);
      index_of_[name] = i;
      start_worker(name, 0.0, heartbeat_ * (i + 1) / config_.workers());
    }
    const auto wall0 = std::chrono::steady_clock::now();
    auto last_progress = wall0;
    double next_tick = 0.0;
    while (!coordinator_.finished()) {
      if (queue_.empty() || queue_.front().time > next_tick) {
        now_ = next_tick;  // nothing happens before the coordinator's next tick
        coordinator_.tick(now_);
        next_tick += o_.tick_seconds;
      } else {
        std::pop_heap(queue_.begin(), queue_.end(), Later{});
        Event e = std::move(queue_.back());
        queue_.pop_back();
        now_ = e.time;
        handle(std::move(e));
      }
      for (auto& [peer, message] : outbox_.sent) {
        send(now_, peer, Event::Kind::kToWorker, std::move(message));
      }
      outbox_.sent.clear();
      if (o_.progress_seconds > 0.0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - last_progress).count() >
              o_.progress_seconds) {
        last_progress = std::chrono::steady_clock::now();
        log_->info("simulated step {} of {}: {:.1f} s on the virtual clock, {} messages",
                   coordinator_.totals().steps(), config_.stop().max_steps(), now_, result_.events);
      }
    }
    result_.exit_code = coordinator_.exit_code();
    result_.steps = coordinator_.totals().steps();
    result_.virtual_seconds = now_;
    result_.wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    return result_;
  }

 private:
  CoordinatorSetup coordinator_setup() const {
    CoordinatorSetup setup{config_, train_samples(config_, train_), o_.run_dir, std::nullopt,
                           std::nullopt};
    setup.write_model = false;
    return setup;
  }

  void handle(Event e) {
    if (e.kind == Event::Kind::kRestart) {
      start_worker(e.worker, now_, now_ + heartbeat_);
      return;
    }
    if (e.kind == Event::Kind::kDisconnected) {
      closed_.insert(e.life);
      coordinator_.on_disconnected(e.worker, now_);
      return;
    }
    // A dead process neither receives, computes nor ticks. What it sent
    // before it died arrives, unless its connection was seen to close
    // first (a process's socket is drained before its close is taken).
    const bool stale = e.kind == Event::Kind::kToCoordinator ? closed_.contains(e.life)
                                                             : e.life != lives_[e.worker];
    if (stale) return;
    SimulatedWorker& worker = *workers_.at(e.worker);
    switch (e.kind) {
      case Event::Kind::kToCoordinator:
        ++result_.events;
        coordinator_.handle(Received{e.worker, encode(std::move(*e.message))}, now_);
        break;
      case Event::Kind::kToWorker:
        ++result_.events;
        schedule(e.worker, now_, worker.deliver(std::move(*e.message), now_));
        break;
      case Event::Kind::kComputed:
        schedule(e.worker, now_, worker.computed(std::move(*e.output), now_));
        break;
      case Event::Kind::kWorkerTick:
        schedule(e.worker, now_, worker.tick(now_));
        if (!worker.done()) {
          push(Event{now_ + heartbeat_, 0, Event::Kind::kWorkerTick, e.worker, std::nullopt,
                     std::nullopt, e.life});
        }
        break;
      case Event::Kind::kDeath:
        ++result_.failures;
        lives_[e.worker] = 0;
        push(Event{now_ + network_.latency_seconds(), 0, Event::Kind::kDisconnected, e.worker,
                   std::nullopt, std::nullopt, e.life});
        push(Event{now_ + o_.restart_seconds, 0, Event::Kind::kRestart, e.worker, std::nullopt,
                   std::nullopt, 0});
        break;
      case Event::Kind::kDisconnected:
      case Event::Kind::kRestart:
        break;  // taken above
    }
  }

  void push(Event event) {
    event.order = order_++;
    queue_.push_back(std::move(event));
    std::push_heap(queue_.begin(), queue_.end(), Later{});
  }

  // `message` leaves at `time`; it arrives when the network says.
  void send(double time, const std::string& worker, Event::Kind kind, Message message) {
    const double arrival = network_.arrival(
        time,
        kind == Event::Kind::kToCoordinator ? SimulatedNetwork::Direction::kToCoordinator
                                            : SimulatedNetwork::Direction::kToWorker,
        message.envelope.body_case(), static_cast<double>(message.envelope.ByteSizeLong()));
    push(Event{arrival, 0, kind, worker, std::move(message), std::nullopt, lives_[worker]});
  }

  // What a worker's session did at `at`: its messages and its compute.
  void schedule(const std::string& worker, double at, SimulatedWorker::Outcome outcome) {
    for (Message& m : outcome.sent) send(at, worker, Event::Kind::kToCoordinator, std::move(m));
    for (auto& [time, output] : outcome.computed) {
      push(Event{time, 0, Event::Kind::kComputed, worker, std::nullopt, std::move(output),
                 lives_[worker]});
    }
  }

  // A worker's compute: the stand-in's per sample, or draws from the trace
  // (its own stream of the run seed, the same in every life).
  ComputeCost cost_for(uint32_t index) const {
    if (!trace_) {
      return [seconds = o_.sample_seconds](int samples) { return seconds * samples; };
    }
    auto rng = std::make_shared<Rng>(Rng({config_.seed(), 0x7472616365ULL, index}));
    return [this, rng, index](int samples) { return trace_->draw(index, *rng) * samples; };
  }

  // A worker process starts: it says hello, ticks, and (with failures) has
  // its death drawn.
  void start_worker(const std::string& name, double at, double first_tick) {
    workers_[name] =
        std::make_unique<SimulatedWorker>(name, train_, cost_for(index_of_[name]), quiet_);
    lives_[name] = next_life_++;
    send(at, name, Event::Kind::kToCoordinator, workers_[name]->hello());
    push(Event{first_tick, 0, Event::Kind::kWorkerTick, name, std::nullopt, std::nullopt,
               lives_[name]});
    if (o_.mttf_seconds > 0.0) {
      const double life = -o_.mttf_seconds * std::log(1.0 - failures_.uniform_double());
      push(
          Event{at + life, 0, Event::Kind::kDeath, name, std::nullopt, std::nullopt, lives_[name]});
    }
  }

  const SimulationOptions& o_;
  const v1::RunConfig& config_;
  const SizeAndShape& train_;
  SimulatedNetwork network_;
  const std::optional<ComputeTrace>& trace_;
  std::shared_ptr<spdlog::logger> log_;
  double now_ = 0.0;  // the virtual clock
  Replica replica_;
  QueueOutbox outbox_;
  Coordinator coordinator_;
  std::shared_ptr<spdlog::logger> quiet_;
  std::map<std::string, std::unique_ptr<SimulatedWorker>> workers_;
  std::map<std::string, uint32_t> index_of_;  // a worker's index, the same in every life
  std::map<std::string, uint64_t> lives_;     // each worker's current process; 0: none now
  uint64_t next_life_ = 1;
  std::set<uint64_t> closed_;  // the lives whose connection the coordinator saw close
  Rng failures_;
  std::vector<Event> queue_;  // a heap (Later)
  uint64_t order_ = 0;
  const double heartbeat_;
  SimulationResult result_;
};

}  // namespace

SimulationResult simulate(SimulationOptions o, std::shared_ptr<spdlog::logger> log) {
  v1::RunConfig& config = o.config;
  std::optional<ComputeTrace> trace;
  std::string compute = fmt::format("{} s per sample, then the config's delays", o.sample_seconds);
  if (!o.trace.empty()) {
    trace = ComputeTrace::load(o.trace);
    compute = "resampled from " + trace->describe() + " (delays included; the config's are off)";
    log->info("compute times: {}", compute);
    config.clear_delay();  // the trace's times hold the run's delays
  }
  if (o.fit_network && (!trace || !trace->message_seconds())) {
    throw std::runtime_error(
        "--fit-network needs a --trace whose step records have arrival times (a run's "
        "metrics.jsonl)");
  }
  finalize_run_config(config);
  if (config.run_id().empty()) config.set_run_id(new_run_id());
  const SizeAndShape train = training_set(config, o.data_root);
  resolve_step_budget(config, train_samples(config, train));
  const uint64_t model_parameters =
      make_model(model_spec(config, train.shape(), 1))->table().total();
  // The config's data plane sets the network's model.
  const bool exchange = config.data_plane().kind() == v1::DATA_PLANE_EXCHANGE;
  const double gradient_bytes = 4.0 * static_cast<double>(model_parameters);
  SimulatedNetwork network =
      o.fit_network ? SimulatedNetwork::fitted(*trace->message_seconds())
      : exchange ? SimulatedNetwork::exchange(o.latency_seconds, o.bandwidth_bytes, gradient_bytes,
                                              config.workers(), exchange_costs(config, o))
                 : SimulatedNetwork::star(o.latency_seconds, o.bandwidth_bytes, gradient_bytes);
  std::string network_text = network.describe();
  if (o.fit_network) {
    network_text +=
        " (the traced run's plan-to-arrival time less compute and the worker's overhead, median, "
        "split between plan and contribution)";
  }
  log->info("network: {}", network_text);

  std::filesystem::create_directories(o.run_dir);
  write_file_atomically(o.run_dir / run_files::kConfig, to_text(config));
  write_simulation_json(o, config, model_parameters, compute, network, network_text);
  // The coordinator runs the star's code whatever the plane (the sums of a
  // stand-in model are not the point); the messages cost what the plane's
  // would.
  config.mutable_data_plane()->set_kind(v1::DATA_PLANE_STAR);
  Simulation simulation(o, config, train, std::move(network), trace, std::move(log));
  SimulationResult result = simulation.run();
  result.model_parameters = model_parameters;
  return result;
}

}  // namespace dctrain
