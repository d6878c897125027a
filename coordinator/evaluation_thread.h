// Evaluation off the step loop (coordinator/evaluations.h): a copy of the
// replica's parameters and running statistics (a snapshot) is evaluated in a
// thread of its own while the coordinator goes on with the next steps. One evaluation at a time:
// the snapshot model is the thread's only while it runs, so nothing is
// locked while it computes, and the step loop only copies into it (a few
// milliseconds for bert-tiny's 4.4 M parameters) when none runs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "coordinator/evaluations.h"
#include "coordinator/evaluator.h"
#include "model/model.h"

namespace dctrain {

class EvaluationThread : public Evaluations {
 public:
  // `snapshot`: a model of the replica's architecture (its parameters are
  // overwritten by every start()); `evaluator` is used by this thread only.
  EvaluationThread(Evaluator& evaluator, std::unique_ptr<Model> snapshot);
  // An evaluation in progress runs to its end (it cannot be cut between
  // batches), then the thread is joined.
  ~EvaluationThread() override;
  EvaluationThread(const EvaluationThread&) = delete;
  EvaluationThread& operator=(const EvaluationThread&) = delete;

  bool in_step_loop() const override { return false; }
  // Copies `replica`'s parameters and buffers into the snapshot and starts
  // evaluating it. Returns false, copying nothing, while an evaluation runs
  // or its result has not been taken: the caller decides whether to wait.
  bool start(Model& replica, const EvaluationRequest& request) override;
  // Running, or finished with its result not yet taken.
  bool busy() const override;
  // The step of the evaluation running or waiting to be taken.
  std::optional<uint64_t> pending_step() const override;
  // The finished result, once; nothing while it runs or when none started.
  std::optional<EvaluationResult> take() override;
  // Waits for the evaluation in progress (if any) and takes its result.
  std::optional<EvaluationResult> wait() override;
  // Waits until no evaluation runs (a result may wait to be taken).
  void wait_idle() const;

 private:
  void run();

  Evaluator& evaluator_;
  std::unique_ptr<Model> snapshot_;  // the thread's while running_, the caller's otherwise
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::optional<EvaluationRequest> request_;  // handed to the thread, not yet picked up
  bool running_ = false;                      // requested or computing
  uint64_t running_step_ = 0;
  bool stopping_ = false;
  std::optional<EvaluationResult> result_;
  std::thread thread_;  // last: it starts once everything above exists
};

}  // namespace dctrain
