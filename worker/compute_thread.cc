#include "worker/compute_thread.h"

#include <fmt/format.h>

namespace dctrain {

ComputeThread::ComputeThread(zmq::context_t& context, Trainer& trainer)
    : trainer_(trainer),
      wake_reader_(context, zmq::socket_type::pair),
      wake_writer_(context, zmq::socket_type::pair) {
  // One name per object: a test may run several in one context.
  // A wake-up left unread at the end is worth nothing: never wait for it.
  wake_reader_.set(zmq::sockopt::linger, 0);
  wake_writer_.set(zmq::sockopt::linger, 0);
  const std::string endpoint = fmt::format("inproc://compute-{}", static_cast<void*>(this));
  wake_reader_.bind(endpoint);
  wake_writer_.connect(endpoint);
  thread_ = std::thread([this] { run(); });
}

ComputeThread::~ComputeThread() {
  close();
  if (thread_.joinable()) thread_.join();
}

void ComputeThread::push(ComputeJob job) {
  // Heard now, not when the job is taken: the step in progress stops
  // starting micro-batches once a plan for another step has arrived.
  if (job.message.envelope.has_plan()) trainer_.latest_plan().heard(job.message.envelope.step());
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  ready_.notify_one();
}

void ComputeThread::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  ready_.notify_all();
}

std::optional<ComputeOutput> ComputeThread::try_take() {
  // Every output is followed by a wake-up; reading them all here is safe
  // whatever their order against the outputs: an output put after this read
  // brings its own wake-up, so the poll comes back for it.
  zmq::message_t wake;
  while (wake_reader_.recv(wake, zmq::recv_flags::dontwait)) {
  }
  std::lock_guard lock(mutex_);
  if (outputs_.empty()) return std::nullopt;
  ComputeOutput out = std::move(outputs_.front());
  outputs_.pop_front();
  return out;
}

void ComputeThread::add_poll_item(std::vector<zmq::pollitem_t>& items) {
  items.push_back({static_cast<void*>(wake_reader_), 0, ZMQ_POLLIN, 0});
}

void ComputeThread::run() {
  while (true) {
    ComputeJob job;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return closed_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::vector<ComputeOutput> out = trainer_.handle(std::move(job));
    if (!out.empty()) {
      {
        std::lock_guard lock(mutex_);
        for (ComputeOutput& o : out) outputs_.push_back(std::move(o));
      }
      wake_writer_.send(zmq::message_t(), zmq::send_flags::none);
    }
    if (trainer_.finished()) return;
  }
}

}  // namespace dctrain
