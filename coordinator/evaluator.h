// Evaluation of a replica on the held-out split: loss and accuracy over the
// first N samples (MLM: accuracy over the masked tokens), eval-mode forward.
#pragma once

#include <cstdint>

#include "data/dataset.h"
#include "model/model.h"

namespace dctrain {

struct Evaluation {
  double loss = 0.0;
  double accuracy = 0.0;
  uint64_t samples = 0;
};

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  virtual Evaluation evaluate(Model& model) = 0;
};

class DatasetEvaluator : public Evaluator {
 public:
  // Evaluates on ids [0, samples) of `dataset` in batches of `batch`; masks
  // and augmentation (none on the held-out split) drawn from `seed`.
  DatasetEvaluator(const Dataset& dataset, uint64_t samples, uint32_t batch, uint64_t seed);
  Evaluation evaluate(Model& model) override;

 private:
  const Dataset& dataset_;
  uint64_t samples_;
  uint32_t batch_;
  uint64_t seed_;
  Batch buffer_;
};

}  // namespace dctrain
