// Where the coordinator's evaluations run: one way to drive them, two
// places. InlineEvaluations evaluates the replica itself inside start(), on
// the step loop (the steps wait for it); EvaluationThread
// (coordinator/evaluation_thread.h) evaluates a snapshot in a thread of its
// own while the steps go on. The coordinator starts one, then takes or
// waits for its result, whichever it holds.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "coordinator/evaluator.h"
#include "model/model.h"

namespace dctrain {

// Which state an evaluation looked at: the model after `step` steps done,
// closed at `wall_seconds` on the run's clock.
struct EvaluationRequest {
  uint64_t step = 0;
  double wall_seconds = 0.0;
  double epochs = 0.0;
};

struct EvaluationResult {
  EvaluationRequest request;
  Evaluation evaluation;
  double seconds = 0.0;  // how long it took
  std::string error;     // the evaluator threw: what it said (evaluation is then unset)
};

class Evaluations {
 public:
  virtual ~Evaluations() = default;

  // Whether start() returns with the evaluation done (on the step loop).
  virtual bool in_step_loop() const = 0;
  // Starts evaluating `replica` as it is now. Returns false, starting
  // nothing, while an evaluation runs or its result has not been taken.
  virtual bool start(Model& replica, const EvaluationRequest& request) = 0;
  // Running, or finished with its result not yet taken.
  virtual bool busy() const = 0;
  // The step of the evaluation running or waiting to be taken.
  virtual std::optional<uint64_t> pending_step() const = 0;
  // The finished result, once; nothing while it runs or when none started.
  virtual std::optional<EvaluationResult> take() = 0;
  // Waits for the evaluation in progress (if any) and takes its result.
  virtual std::optional<EvaluationResult> wait() = 0;
};

// Evaluates in start(), on the caller's thread, timed on `clock` (seconds).
class InlineEvaluations : public Evaluations {
 public:
  InlineEvaluations(Evaluator& evaluator, std::function<double()> clock)
      : evaluator_(evaluator), clock_(std::move(clock)) {}

  bool in_step_loop() const override { return true; }
  bool start(Model& replica, const EvaluationRequest& request) override;
  bool busy() const override { return result_.has_value(); }
  std::optional<uint64_t> pending_step() const override;
  std::optional<EvaluationResult> take() override;
  std::optional<EvaluationResult> wait() override { return take(); }

 private:
  Evaluator& evaluator_;
  std::function<double()> clock_;
  std::optional<EvaluationResult> result_;
};

}  // namespace dctrain
