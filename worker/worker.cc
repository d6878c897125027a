#include "worker/worker.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "runtime/replica.h"
#include "runtime/setup.h"
#include "runtime/text_format.h"
#include "comm/transport.h"
#include "comm/validation.h"
#include "common/cli.h"
#include "common/stop_signals.h"
#include "common/version.h"
#include "worker/compute_loop.h"
#include "worker/delay_model.h"

namespace dctrain {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Work for the compute thread, in arrival order.
struct Job {
  Message message;
  Clock::time_point received;
};

class JobQueue {
 public:
  void push(Job job) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
  }
  // Blocks until a job arrives or the queue is closed (then nothing).
  std::optional<Job> pop() {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return closed_ || !jobs_.empty(); });
    if (jobs_.empty()) return std::nullopt;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    return job;
  }
  void close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> jobs_;
  bool closed_ = false;
};

// The compute thread: owns datasets, replica and compute loop. It sends, on
// its PAIR socket, either a message to forward to the coordinator (its first
// frame, the envelope, is never empty), or a status: an empty frame, then
// "exit:<code>" when finished.
class ComputeThread {
 public:
  ComputeThread(const WorkerOptions& options, zmq::context_t& context, const std::string& endpoint,
                std::shared_ptr<spdlog::logger> log)
      : options_(options), pair_(context, zmq::socket_type::pair), log_(std::move(log)) {
    pair_.connect(endpoint);
  }

  void run(JobQueue& jobs) {
    while (std::optional<Job> job = jobs.pop()) {
      try {
        if (!handle(std::move(*job))) return;
      } catch (const std::exception& e) {
        log_->error("{}", e.what());
        report_error(e.what());
        status(fmt::format("exit:{}", kWorkerFailed));
        return;
      }
    }
  }

 private:
  // False once the worker should stop.
  bool handle(Job job) {
    const v1::Envelope& envelope = job.message.envelope;
    switch (envelope.body_case()) {
      case v1::Envelope::kWelcome: return on_welcome(job.message);
      case v1::Envelope::kPlan: return on_plan(job);
      case v1::Envelope::kUpdate: return on_update(job.message);
      case v1::Envelope::kBye: return on_bye(envelope.bye());
      default: return true;
    }
  }

  bool on_welcome(const Message& welcome) {
    const v1::Welcome& w = welcome.envelope.welcome();
    config_ = w.config();
    rank_ = w.rank();
    if (needs_data_root(config_) && options_.data_dir.empty()) {
      throw std::runtime_error(
          fmt::format("the run trains on '{}' data but this worker has no --data-dir",
                      word(config_.dataset().kind())));
    }
    const std::string data_key = dataset_spec(config_, Split::kTrain).kind + "|" +
                                 config_.dataset().SerializeAsString();
    if (!train_ || data_key != data_key_) {
      const auto begin = Clock::now();
      train_ = open_dataset(config_, Split::kTrain, options_.data_dir);
      data_key_ = data_key;
      log_->info("training data: {} ({:.1f} s to load)", train_->describe(), seconds_since(begin));
    }
    replica_ = std::make_unique<Replica>(
        make_model(model_spec(config_, train_->shape(), options_.threads)), config_.optimizer());
    const std::vector<TensorSpec> specs = replica_->state_specs();
    if (const auto problem = check_tensors(welcome, specs)) {
      throw std::runtime_error(fmt::format("the welcome does not fit this build's model: {}", *problem));
    }
    replica_->load_state(welcome, 0, static_cast<int64_t>(w.optimizer_steps()));
    if (replica_->parameter_checksum() != w.parameter_checksum()) {
      throw std::runtime_error("the welcome's parameters do not match their checksum");
    }
    delays_ = std::make_unique<DelayModel>(config_.delay(), rank_);
    loop_ = std::make_unique<ComputeLoop>(*replica_, *train_, config_.seed(), *delays_);
    expected_ = {{"gradient", replica_->parameter_count()}};
    if (replica_->buffer_count() > 0) expected_.push_back({"statistics", replica_->buffer_count()});
    log_->info(
        "welcomed as rank {} of {}: model {} ({} parameters), {} updates applied so far, "
        "delay '{}'",
        rank_, config_.workers(), word(config_.model().name()), replica_->parameter_count(),
        w.optimizer_steps(), word(config_.delay().kind()));
    Message ready;
    ready.envelope = make_envelope(welcome.envelope.step(), options_.name);
    ready.envelope.mutable_ready()->set_parameter_checksum(replica_->parameter_checksum());
    forward(std::move(ready));
    return true;
  }

  bool on_plan(const Job& job) {
    if (!loop_) return true;  // not welcomed yet: the coordinator will requeue
    const v1::Plan& plan = job.message.envelope.plan();
    const uint64_t step = job.message.envelope.step();
    if (plan.parameter_checksum() != replica_->parameter_checksum()) {
      log_->error("step {}: this replica differs from the coordinator's (checksum {:016x}, "
                  "coordinator {:016x})",
                  step, replica_->parameter_checksum(), plan.parameter_checksum());
    }
    for (const v1::MicroBatch& mb : plan.micro_batches()) {
      for (uint64_t id : mb.samples()) {
        if (id >= train_->size()) {
          throw std::runtime_error(fmt::format(
              "step {}: the plan names sample {} but the training set has {}; do the coordinator "
              "and this worker read the same data?",
              step, id, train_->size()));
        }
      }
    }
    Message contribution = loop_->run(plan, step, options_.name, job.received);
    const v1::Contribution& c = contribution.envelope.contribution();
    log_->debug("step {}: {} micro-batches done, {} dropped, {:.3f} s compute", step,
                c.completed_size(), c.dropped_size(), c.compute_seconds());
    forward(std::move(contribution));
    return true;
  }

  bool on_update(const Message& update) {
    if (!loop_) return true;
    if (const auto problem = check_tensors(update, expected_)) {
      throw std::runtime_error(fmt::format("step {}: unusable update: {}", update.envelope.step(), *problem));
    }
    loop_->apply(update);
    return true;
  }

  bool on_bye(const v1::Bye& bye) {
    if (bye.released()) {
      log_->warn("released from the run: {}", bye.reason());
      status(fmt::format("exit:{}", kWorkerReleased));
      return false;
    }
    int code = kWorkerDone;
    if (bye.has_checksum() && replica_) {
      const uint64_t mine = replica_->parameter_checksum();
      if (mine == bye.parameter_checksum()) {
        log_->info("final replica identical to the coordinator's (checksum {:016x})", mine);
      } else {
        log_->error("final replica differs from the coordinator's: {:016x} here, {:016x} there", mine,
                    bye.parameter_checksum());
        code = kWorkerDiverged;
      }
    }
    status(fmt::format("exit:{}", code));
    return false;
  }

  void forward(Message message) {
    std::vector<zmq::message_t> parts = encode(std::move(message));
    for (size_t i = 0; i < parts.size(); ++i) {
      pair_.send(parts[i], i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  void status(const std::string& text) {
    pair_.send(zmq::message_t(), zmq::send_flags::sndmore);
    pair_.send(zmq::buffer(text), zmq::send_flags::none);
  }

  void report_error(const std::string& text) {
    Message m;
    m.envelope = make_envelope(0, options_.name);
    m.envelope.mutable_error()->set_message(text);
    forward(std::move(m));
  }

  const WorkerOptions& options_;
  zmq::socket_t pair_;
  std::shared_ptr<spdlog::logger> log_;
  v1::RunConfig config_;
  uint32_t rank_ = 0;
  std::string data_key_;
  std::unique_ptr<Dataset> train_;
  std::unique_ptr<Replica> replica_;
  std::unique_ptr<DelayModel> delays_;
  std::unique_ptr<ComputeLoop> loop_;
  std::vector<TensorSpec> expected_;
};

}  // namespace

std::string default_worker_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{}:{}", host, ::getpid());
}

int run_worker(const WorkerOptions& options_in, const v1::BlasInfo& blas,
               std::shared_ptr<spdlog::logger> log) {
  WorkerOptions options = options_in;
  if (options.name.empty()) options.name = default_worker_name();
  if (!options.data_dir.empty()) options.data_dir = std::filesystem::absolute(options.data_dir).string();

  StopSignals signals;
  zmq::context_t context(1);
  DealerTransport dealer(context, options.connect, options.name, log);
  const std::string inproc = "inproc://compute";
  zmq::socket_t from_compute(context, zmq::socket_type::pair);
  from_compute.bind(inproc);

  JobQueue jobs;
  ComputeThread compute(options, context, inproc, log);
  std::thread compute_thread([&] { compute.run(jobs); });
  struct Joiner {
    JobQueue& jobs;
    std::thread& thread;
    ~Joiner() {
      jobs.close();
      if (thread.joinable()) thread.join();
    }
  } joiner{jobs, compute_thread};

  auto hello = [&] {
    Message m;
    m.envelope = make_envelope(0, options.name);
    v1::Hello& h = *m.envelope.mutable_hello();
    h.set_worker_name(options.name);
    h.set_software_version(kVersion);
    h.set_threads(static_cast<uint32_t>(options.threads));
    h.set_has_data_dir(!options.data_dir.empty());
    *h.mutable_blas() = blas;
    dealer.send(std::move(m));
  };
  auto send_simple = [&](auto fill) {
    Message m;
    m.envelope = make_envelope(0, options.name);
    fill(m.envelope);
    dealer.send(std::move(m));
  };

  log->info("{} connecting to {} as '{}' ({} threads, data {})", version_line("dctrain-worker"),
            options.connect, options.name, options.threads,
            options.data_dir.empty() ? std::string("synthetic only") : options.data_dir);

  double heartbeat_seconds = 0.5;
  double silence_seconds = 10.0;
  Clock::time_point last_sent = Clock::now(), last_heard = Clock::now();
  int exit_code = -1;
  std::vector<zmq::message_t> parts;

  // Until the coordinator answers, the worker waits: it says hello on every
  // connection ZeroMQ establishes (ZeroMQ retries a refused or unreachable
  // address by itself), sends no heartbeats (they would only pile up in the
  // queue), and gives up after --connect-timeout.
  const double timeout = options.connect_timeout;
  const std::string limit = timeout > 0 ? fmt::format("{:.0f} s", timeout) : std::string("no limit");
  constexpr double kWaitLogSeconds = 2.0;
  bool answered = false;
  bool connected = false;
  bool leaving = false;  // the coordinator said bye: never say hello again
  int attempts = 1;
  Clock::time_point waiting_since = Clock::now(), last_wait_log = Clock::now();
  auto start_waiting = [&] {
    answered = false;
    attempts = 1;
    waiting_since = last_wait_log = Clock::now();
  };

  while (exit_code < 0) {
    zmq::pollitem_t items[] = {
        {static_cast<void*>(dealer.socket()), 0, ZMQ_POLLIN, 0},
        {static_cast<void*>(from_compute), 0, ZMQ_POLLIN, 0},
        {nullptr, signals.fd(), ZMQ_POLLIN, 0},
        {static_cast<void*>(dealer.events()), 0, ZMQ_POLLIN, 0},
    };
    const double wait = answered ? heartbeat_seconds * 0.5 : 0.25;
    zmq::poll(items, 4, std::chrono::milliseconds(static_cast<int>(wait * 1000)));

    // A wake-up with nothing to take is a signal on its way to this thread
    // (see StopSignals::take): the next poll sees it.
    if (items[2].revents & ZMQ_POLLIN) {
      if (const int signal_number = signals.take()) {
        log->warn("signal {} received: leaving the run", signal_number);
        send_simple([&](v1::Envelope& e) { e.mutable_bye()->set_reason("worker interrupted by a signal"); });
        exit_code = kWorkerInterrupted;
        break;
      }
    }

    while (const std::optional<ConnectionEvent> event = dealer.try_event()) {
      switch (*event) {
        case ConnectionEvent::kConnected:
          connected = true;
          if (!answered) {
            log->debug("connected to {} (attempt {}); saying hello", options.connect, attempts);
            hello();
          }
          break;
        case ConnectionEvent::kRetried:
          ++attempts;
          break;
        case ConnectionEvent::kDisconnected:
          connected = false;
          if (answered) log->warn("lost the connection to the coordinator at {}; reconnecting", options.connect);
          break;
        case ConnectionEvent::kHandshakeFailed:
          log->warn("something answers at {} but does not speak dctrain's protocol (the ZeroMQ "
                    "handshake failed): is that the coordinator's address and port?",
                    options.connect);
          break;
      }
    }

    while (receive_parts(from_compute, parts, false)) {
      if (parts.size() == 2 && parts[0].size() == 0) {
        const std::string status = parts[1].to_string();
        if (status.rfind("exit:", 0) == 0) exit_code = std::stoi(status.substr(5));
        continue;
      }
      std::vector<zmq::message_t> out = std::move(parts);
      // Forward the compute thread's message as it is.
      for (size_t i = 0; i < out.size(); ++i) {
        dealer.socket().send(out[i], i + 1 < out.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
      last_sent = Clock::now();
    }
    if (exit_code >= 0) break;

    while (dealer.try_receive(parts)) {
      Message message;
      if (const auto problem = decode(std::move(parts), message)) {
        log->warn("dropped a message from the coordinator: {}", *problem);
        continue;
      }
      if (message.envelope.body_case() != v1::Envelope::kRefusal) {
        if (const auto problem = version_problem(message.envelope)) {
          log->warn("dropped a message: {}", *problem);
          continue;
        }
      }
      last_heard = Clock::now();
      if (!answered) {
        answered = true;
        const double waited = seconds_since(waiting_since);
        if (waited >= kWaitLogSeconds) {
          log->info("the coordinator at {} answered after {:.1f} s", options.connect, waited);
        }
      }
      const Clock::time_point received = Clock::now();
      switch (message.envelope.body_case()) {
        case v1::Envelope::kWelcome:
          heartbeat_seconds = message.envelope.welcome().config().liveness().heartbeat_seconds();
          silence_seconds = message.envelope.welcome().config().liveness().silence_seconds();
          jobs.push(Job{std::move(message), received});
          break;
        case v1::Envelope::kPlan:
        case v1::Envelope::kUpdate:
        case v1::Envelope::kBye:
          if (message.envelope.body_case() == v1::Envelope::kBye) {
            if (!message.envelope.bye().released()) {
              log->info("the coordinator ends the run: {}", message.envelope.bye().reason());
            }
            leaving = true;
          }
          jobs.push(Job{std::move(message), received});
          break;
        case v1::Envelope::kRefusal:
          log->error("the coordinator refused this worker: {}", message.envelope.refusal().reason());
          exit_code = kWorkerRefused;
          break;
        case v1::Envelope::kError:
          if (message.envelope.error().rejoin()) {
            if (leaving) break;
            log->warn("{}; saying hello again", message.envelope.error().message());
            hello();
          } else {
            log->warn("the coordinator reports: {}", message.envelope.error().message());
          }
          break;
        case v1::Envelope::kHeartbeat:
          break;
        default:
          log->warn("dropped a {} from the coordinator", body_name(message.envelope));
      }
      if (exit_code >= 0) break;
    }
    if (exit_code >= 0) break;

    if (!answered) {
      const double waited = seconds_since(waiting_since);
      if (timeout > 0 && waited >= timeout) {
        log->error("no answer from the coordinator at {} within {:.0f} s ({} connection attempts{}): "
                   "is dctrain-coordinator running there, and can this host reach that address and "
                   "port? (--connect-timeout sets how long to wait)",
                   options.connect, timeout, attempts,
                   connected ? "; connected, but the hello got no answer" : "");
        exit_code = kWorkerNoCoordinator;
        break;
      }
      if (seconds_since(last_wait_log) >= kWaitLogSeconds) {
        log->info("waiting for the coordinator at {}: {} (attempt {}, {:.0f} s of {})", options.connect,
                  connected ? "connected, no answer to the hello yet" : "no answer yet", attempts,
                  waited, limit);
        last_wait_log = Clock::now();
      }
      continue;
    }

    if (seconds_since(last_sent) >= heartbeat_seconds) {
      send_simple([&](v1::Envelope& e) {
        e.mutable_heartbeat()->set_sent_unix_micros(static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count()));
      });
      last_sent = Clock::now();
    }
    // A coordinator silent for long may have restarted (resume): say hello
    // again, and wait for an answer as at the start.
    const double patience = std::max(30.0, 3.0 * silence_seconds);
    if (seconds_since(last_heard) > patience) {
      log->warn("no word from the coordinator for {:.0f} s; saying hello again", patience);
      start_waiting();
      hello();
    }
  }
  return exit_code;
}

}  // namespace dctrain
