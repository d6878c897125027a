#include "coordinator/evaluations.h"

#include <exception>

namespace dctrain {

bool InlineEvaluations::start(Model& replica, const EvaluationRequest& request) {
  if (result_) return false;
  EvaluationResult result;
  result.request = request;
  const double begin = clock_();
  try {
    result.evaluation = evaluator_.evaluate(replica);
  } catch (const std::exception& e) {
    result.error = e.what();  // reported by the step loop, as the thread's
  }
  result.seconds = clock_() - begin;
  result_ = std::move(result);
  return true;
}

std::optional<uint64_t> InlineEvaluations::pending_step() const {
  return result_ ? std::optional<uint64_t>(result_->request.step) : std::nullopt;
}

std::optional<EvaluationResult> InlineEvaluations::take() {
  std::optional<EvaluationResult> out = std::move(result_);
  result_.reset();
  return out;
}

}  // namespace dctrain
