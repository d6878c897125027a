// A small real model for the coordinator's unit tests: softmax regression on
// flattened images (y = x W^T + b, cross-entropy), with one pretend BatchNorm
// buffer (the running mean and mean square of the pixels) so that the
// statistics exchange is exercised too.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "common/random.h"
#include "model/layers/linear.h"
#include "model/model.h"

namespace dctrain::testing {

class SoftmaxModel : public Model {
 public:
  SoftmaxModel(int features, int classes, uint64_t seed) : features_(features), classes_(classes) {
    table_.add("w", {classes, features});
    table_.add("b", {classes});
    buffer_table_.add("pixel_moments", {2});
    parameters_ = std::make_unique<Arena>(table_);
    gradients_ = std::make_unique<Arena>(table_);
    buffers_ = std::make_unique<Arena>(buffer_table_);
    statistics_ = std::make_unique<Arena>(buffer_table_);
    Rng rng(seed);
    for (float& w : parameters_->view(0)) w = 0.01f * static_cast<float>(rng.normal());
  }

  std::string name() const override { return "softmax"; }

  MicroBatchResult train_micro_batch(const Batch& batch) override {
    MicroBatchResult r = forward(batch, true);
    linear_backward<float>(nullptr, gradients_->view(0).data(), gradients_->view(1).data(),
                           dlogits_.data(), batch.images.data(), parameters_->view(0).data(),
                           batch.size, features_, classes_);
    double sum = 0.0, square = 0.0;
    for (float v : batch.images) {
      sum += v;
      square += static_cast<double>(v) * v;
    }
    const double n = static_cast<double>(batch.images.size());
    std::span<float> s = statistics_->flat();
    s[0] += static_cast<float>(batch.size * (sum / n));
    s[1] += static_cast<float>(batch.size * (square / n));
    return r;
  }

  MicroBatchResult evaluate(const Batch& batch) override { return forward(batch, false); }

  void apply_statistics(std::span<const float> averaged) override {
    std::span<float> running = buffers_->flat();
    for (size_t i = 0; i < running.size(); ++i) running[i] = 0.9f * running[i] + 0.1f * averaged[i];
  }

 private:
  MicroBatchResult forward(const Batch& batch, bool keep_gradient) {
    const int n = batch.size;
    logits_.resize(static_cast<size_t>(n) * classes_);
    dlogits_.resize(logits_.size());
    linear_forward<float>(logits_.data(), batch.images.data(), parameters_->view(0).data(),
                          parameters_->view(1).data(), n, features_, classes_);
    MicroBatchResult r;
    r.samples = n;
    r.loss_terms = n;
    for (int i = 0; i < n; ++i) {
      const float* z = &logits_[static_cast<size_t>(i) * classes_];
      float* dz = &dlogits_[static_cast<size_t>(i) * classes_];
      const float top = *std::max_element(z, z + classes_);
      double total = 0.0;
      for (int k = 0; k < classes_; ++k) total += std::exp(static_cast<double>(z[k] - top));
      const int label = batch.labels[i];
      r.loss_sum += std::log(total) - static_cast<double>(z[label] - top);
      if (std::max_element(z, z + classes_) - z == label) ++r.correct;
      if (keep_gradient) {
        for (int k = 0; k < classes_; ++k) {
          dz[k] = static_cast<float>(std::exp(static_cast<double>(z[k] - top)) / total) -
                  (k == label ? 1.0f : 0.0f);
        }
      }
    }
    return r;
  }

  int features_, classes_;
  std::vector<float> logits_, dlogits_;
};

}  // namespace dctrain::testing
