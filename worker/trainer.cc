#include "worker/trainer.h"

#include <fmt/format.h>

#include <stdexcept>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "runtime/setup.h"
#include "runtime/text_format.h"
#include "worker/exit_codes.h"

namespace dctrain {

TrainerParts process_parts(const WorkerOptions& options) {
  TrainerParts parts;
  parts.open_train = [data_dir = options.data_dir](const v1::RunConfig& config) {
    return open_dataset(config, Split::kTrain, data_dir);
  };
  parts.make_model = [threads = options.threads](const v1::RunConfig& config,
                                                 const Dataset& train) {
    return make_model(model_spec(config, train.shape(), threads));
  };
  return parts;
}

Trainer::Trainer(WorkerOptions options, TrainerParts parts, WorkerClock& clock,
                 std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), parts_(std::move(parts)), clock_(clock), log_(std::move(log)) {}

std::vector<ComputeOutput> Trainer::handle(ComputeJob job) {
  if (finished_) return {};
  try {
    std::vector<ComputeOutput> out = dispatch(job);
    for (const ComputeOutput& o : out) finished_ |= std::holds_alternative<ComputeStatus>(o);
    return out;
  } catch (const std::exception& e) {
    log_->error("{}", e.what());
    finished_ = true;
    Message error;
    error.envelope = make_envelope(0, options_.name);
    error.envelope.mutable_error()->set_message(e.what());
    std::vector<ComputeOutput> out;
    out.emplace_back(std::move(error));
    out.emplace_back(ComputeStatus{kWorkerFailed});
    return out;
  }
}

std::vector<ComputeOutput> Trainer::dispatch(ComputeJob& job) {
  const v1::Envelope& envelope = job.message.envelope;
  // The commit's update and a request for the round's sum or a check of
  // the contribution leave the arenas alone; every other job may use them.
  const bool beside_zeroing = (envelope.has_update() && envelope.update().commit()) ||
                              envelope.has_sum_request() || envelope.has_round_check_request();
  if (!beside_zeroing) finish_zeroing();
  std::vector<ComputeOutput> out;
  switch (envelope.body_case()) {
    case v1::Envelope::kWelcome:
      out.emplace_back(on_welcome(job.message));
      break;
    case v1::Envelope::kPlan:
      return on_plan(job);
    case v1::Envelope::kUpdate:
      on_update(job.message);
      break;
    case v1::Envelope::kSumRequest:
      out.emplace_back(on_sum_request(job.message));
      break;
    case v1::Envelope::kRoundCheckRequest:
      out.emplace_back(on_round_check_request(job.message));
      break;
    case v1::Envelope::kBye:
      out.emplace_back(on_bye(envelope.bye()));
      break;
    default:
      break;
  }
  return out;
}

Message Trainer::on_welcome(const Message& welcome) {
  const v1::Welcome& w = welcome.envelope.welcome();
  config_ = w.config();
  rank_ = w.rank();
  if (needs_data_root(config_) && options_.data_dir.empty()) {
    throw std::runtime_error(
        fmt::format("the run trains on '{}' data but this worker has no --data-dir",
                    word(config_.dataset().kind())));
  }
  const std::string data_key =
      dataset_spec(config_, Split::kTrain).kind + "|" + config_.dataset().SerializeAsString();
  if (!train_ || data_key != data_key_) {
    const double begin = clock_.now();
    train_ = parts_.open_train(config_);
    data_key_ = data_key;
    log_->info("training data: {} ({:.1f} s to load)", train_->describe(), clock_.now() - begin);
  }
  replica_ =
      std::make_unique<Replica>(parts_.make_model(config_, *train_), replicated_optimizer(config_));
  const std::vector<TensorSpec> specs = replica_->state_specs();
  if (const auto problem = check_tensors(welcome, specs)) {
    throw std::runtime_error(
        fmt::format("the welcome does not fit this build's model: {}", *problem));
  }
  replica_->load_state(welcome, 0, static_cast<int64_t>(w.optimizer_steps()));
  if (replica_->parameter_checksum() != w.parameter_checksum()) {
    throw std::runtime_error("the welcome's parameters do not match their checksum");
  }
  delays_ = std::make_unique<DelayModel>(config_.delay(), rank_);
  std::unique_ptr<LocalSteps> local;
  if (config_.step().policy() == v1::POLICY_LOCAL_SGD) {
    local = std::make_unique<LocalSteps>(config_.optimizer(), replica_->model().table(),
                                         replica_->model().thread_pool());
  }
  loop_ = std::make_unique<ComputeLoop>(*replica_, *train_, config_.seed(), *delays_, clock_,
                                        &latest_plan_, std::move(local));
  expected_ = {{"gradient", replica_->parameter_count()}};
  if (replica_->buffer_count() > 0) expected_.push_back({"statistics", replica_->buffer_count()});
  log_->info(
      "welcomed as rank {} of {}: model {} ({} parameters), {} updates applied so far, "
      "delay '{}'",
      rank_, config_.workers(), replica_->model().name(), replica_->parameter_count(),
      w.optimizer_steps(), word(config_.delay().kind()));
  Message ready;
  ready.envelope = make_envelope(welcome.envelope.step(), options_.name);
  ready.envelope.mutable_ready()->set_parameter_checksum(replica_->parameter_checksum());
  return ready;
}

std::vector<ComputeOutput> Trainer::on_plan(const ComputeJob& job) {
  std::vector<ComputeOutput> out;
  if (!loop_) return out;  // not welcomed yet: the coordinator will requeue
  const v1::Plan& plan = job.message.envelope.plan();
  const uint64_t step = job.message.envelope.step();
  if (plan.carries_parameters()) take_parameters(job.message);
  if (!plan.exchange().checksum_follows() &&
      plan.parameter_checksum() != loop_->start_checksum()) {
    log_->error(
        "step {}: this replica differs from the coordinator's (checksum {:016x}, "
        "coordinator {:016x})",
        step, loop_->start_checksum(), plan.parameter_checksum());
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
  if (plan.has_exchange()) return on_exchange_plan(job);
  Message contribution = loop_->run(plan, step, options_.name, job.received);
  const v1::Contribution& c = contribution.envelope.contribution();
  log_->debug("step {}: {} micro-batches done, {} dropped, {:.3f} s compute", step,
              c.completed_size(), c.dropped_size(), c.compute_seconds());
  out.emplace_back(std::move(contribution));
  return out;
}

void Trainer::take_parameters(const Message& plan) {
  std::vector<TensorSpec> specs = {{"parameters", replica_->parameter_count()}};
  if (replica_->buffer_count() > 0) specs.push_back({"buffers", replica_->buffer_count()});
  if (const auto problem = check_tensors(plan, specs)) {
    throw std::runtime_error(fmt::format("step {}: unusable parameters in the plan: {}",
                                         plan.envelope.step(), *problem));
  }
  copy_tensor(plan, 0, replica_->model().parameters().flat());
  if (replica_->buffer_count() > 0) copy_tensor(plan, 1, replica_->buffers());
  const uint64_t checksum = replica_->parameter_checksum();
  if (checksum != plan.envelope.plan().parameter_checksum()) {
    throw std::runtime_error(fmt::format(
        "step {}: the plan's parameters do not match their checksum ({:016x}, plan {:016x})",
        plan.envelope.step(), checksum, plan.envelope.plan().parameter_checksum()));
  }
  loop_->applied(checksum);
}

void Trainer::on_update(const Message& update) {
  if (!loop_) return;
  if (update.envelope.update().commit()) {
    on_commit(update);
    return;
  }
  if (const auto problem = check_tensors(update, expected_)) {
    throw std::runtime_error(
        fmt::format("step {}: unusable update: {}", update.envelope.step(), *problem));
  }
  loop_->apply(update);
}

ComputeStatus Trainer::on_bye(const v1::Bye& bye) {
  if (bye.released()) {
    log_->warn("released from the run: {}", bye.reason());
    return ComputeStatus{kWorkerReleased};
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
  return ComputeStatus{code};
}

}  // namespace dctrain
