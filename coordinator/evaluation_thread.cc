#include "coordinator/evaluation_thread.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace dctrain {

namespace {

void copy_arena(Arena& from, Arena& to, const char* what) {
  const std::span<const float> source = from.flat();
  const std::span<float> target = to.flat();
  if (source.size() != target.size()) {
    throw std::logic_error(std::string("evaluation snapshot: the replica's ") + what + " hold " +
                           std::to_string(source.size()) + " values, the snapshot model's " +
                           std::to_string(target.size()) +
                           ": build the snapshot from the run's own model spec");
  }
  std::copy(source.begin(), source.end(), target.begin());
}

}  // namespace

EvaluationThread::EvaluationThread(Evaluator& evaluator, std::unique_ptr<Model> snapshot)
    : evaluator_(evaluator), snapshot_(std::move(snapshot)), thread_([this] { run(); }) {}

EvaluationThread::~EvaluationThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

bool EvaluationThread::start(Model& replica, const EvaluationRequest& request) {
  {
    std::lock_guard lock(mutex_);
    if (running_ || result_) return false;
  }
  // No evaluation runs: the snapshot is this caller's until the request is
  // handed over below.
  copy_arena(replica.parameters(), snapshot_->parameters(), "parameters");
  copy_arena(replica.buffers(), snapshot_->buffers(), "running statistics");
  {
    std::lock_guard lock(mutex_);
    request_ = request;
    running_ = true;
    running_step_ = request.step;
  }
  changed_.notify_all();
  return true;
}

bool EvaluationThread::busy() const {
  std::lock_guard lock(mutex_);
  return running_ || result_.has_value();
}

std::optional<uint64_t> EvaluationThread::pending_step() const {
  std::lock_guard lock(mutex_);
  if (result_) return result_->request.step;
  return running_ ? std::optional<uint64_t>(running_step_) : std::nullopt;
}

std::optional<EvaluationResult> EvaluationThread::take() {
  std::lock_guard lock(mutex_);
  std::optional<EvaluationResult> out = std::move(result_);
  result_.reset();
  return out;
}

std::optional<EvaluationResult> EvaluationThread::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !running_; });
  std::optional<EvaluationResult> out = std::move(result_);
  result_.reset();
  return out;
}

void EvaluationThread::wait_idle() const {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !running_; });
}

void EvaluationThread::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || request_.has_value(); });
    if (!request_) return;  // stopping, nothing left to evaluate
    const EvaluationRequest request = *request_;
    request_.reset();
    lock.unlock();
    const auto begin = std::chrono::steady_clock::now();
    EvaluationResult result;
    result.request = request;
    try {
      result.evaluation = evaluator_.evaluate(*snapshot_);
    } catch (const std::exception& e) {
      // The step loop reports it; a throw here would end the process.
      result.error = e.what();
    }
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    lock.lock();
    result_ = std::move(result);
    running_ = false;
    changed_.notify_all();
  }
}

}  // namespace dctrain
