#include "coordinator/evaluator.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace dctrain {

DatasetEvaluator::DatasetEvaluator(const Dataset& dataset, uint64_t samples, uint32_t batch,
                                   uint64_t seed)
    : dataset_(dataset), samples_(samples), batch_(std::max<uint32_t>(batch, 1)), seed_(seed) {}

Evaluation DatasetEvaluator::evaluate(Model& model) {
  double loss_sum = 0.0;
  int64_t terms = 0, correct = 0;
  std::vector<uint64_t> ids;
  const SampleContext context{seed_, 0, false};
  for (uint64_t begin = 0; begin < samples_; begin += batch_) {
    const uint64_t n = std::min<uint64_t>(batch_, samples_ - begin);
    ids.resize(n);
    std::iota(ids.begin(), ids.end(), begin);
    dataset_.fill(ids, context, buffer_);
    const MicroBatchResult r = model.evaluate(buffer_);
    loss_sum += r.loss_sum;
    terms += r.loss_terms;
    correct += r.correct;
  }
  Evaluation e;
  e.samples = samples_;
  if (terms > 0) {
    e.loss = loss_sum / static_cast<double>(terms);
    e.accuracy = static_cast<double>(correct) / static_cast<double>(terms);
  }
  return e;
}

}  // namespace dctrain
