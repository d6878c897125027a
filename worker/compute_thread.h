// The thread a worker computes on. The session pushes jobs onto its queue;
// the thread runs them through the trainer in order and leaves what the
// trainer hands back (messages for the coordinator, the final status) in a
// queue the main thread takes from. An inproc PAIR only wakes the main
// thread's poll: nothing is parsed from it, so nothing can be misread. The
// DEALER stays on the main thread, so heartbeats flow while a plan computes.
#pragma once

#include <spdlog/logger.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <zmq.hpp>

#include "worker/trainer.h"

namespace dctrain {

class ComputeThread : public ComputeQueue {
 public:
  // Starts the thread. `trainer` must outlive this object.
  ComputeThread(zmq::context_t& context, Trainer& trainer);
  // Closes the queue and waits for the job in progress, if any.
  ~ComputeThread() override;
  ComputeThread(const ComputeThread&) = delete;
  ComputeThread& operator=(const ComputeThread&) = delete;

  void push(ComputeJob job) override;
  // What the trainer handed back, oldest first, if anything is waiting.
  std::optional<ComputeOutput> try_take();
  // Appends what to poll: readable after the trainer handed something back.
  void add_poll_item(std::vector<zmq::pollitem_t>& items);

 private:
  void run();
  void close();

  Trainer& trainer_;
  zmq::socket_t wake_reader_;  // main thread
  zmq::socket_t wake_writer_;  // compute thread
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<ComputeJob> jobs_;
  bool closed_ = false;
  std::deque<ComputeOutput> outputs_;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace dctrain
