// The forward and backward passes of the image classifiers
// (model/image_classifier_impl.h).
#include <chrono>

#include "model/image_classifier_impl.h"

namespace dctrain::image_classifier {

void ImageClassifier::forward(int n, bool train) {
  for (Op& op : ops_) {
    const auto t0 = std::chrono::steady_clock::now();
    const float* x = input_act(op.in);
    const Dims in = dims(op.in), out = dims(op.out);
    float* y = act(op.out);
    switch (op.kind) {
      case OpKind::kConv: {
        const float* w = param(op.weight);
        const float* b = op.bias >= 0 ? param(op.bias) : nullptr;
        // Chunks of samples: the weights are laid out for the kernel once
        // per call. Each sample's output does not depend on the chunking.
        const int chunks = conv_chunks(n, op.conv);
        pool_.parallel_for(chunks, [&](int64_t c, int t) {
          const auto [begin, end] = chunk(static_cast<int>(c), chunks, n);
          Conv2dShape s = op.conv;
          s.n = end - begin;
          conv2d_forward(y + begin * out.size(), col_.data() + t * max_col_,
                         x + begin * in.size(), w, b, s);
        });
        break;
      }
      case OpKind::kBatchNorm: {
        const BatchNormShape s = batch_norm_shape(n, in);
        const float* gamma = param(op.weight);
        const float* beta = param(op.bias);
        if (train) {
          const int64_t m = int64_t{n} * in.h * in.w;
          if (m < 2) {
            throw std::invalid_argument(name_ +
                                        ": BatchNorm in training needs more than one value "
                                        "per channel; use micro-batches of 2 or more samples");
          }
          pool_.parallel_for(in.c, [&](int64_t c, int) {
            BatchNormShape part = s;
            part.channel_begin = static_cast<int>(c);
            part.channel_end = static_cast<int>(c) + 1;
            batch_norm_forward_train(y, op.mean.data(), op.var.data(), x, gamma, beta, part);
          });
          // Sample-weighted batch mean and unbiased variance for the exchange.
          float* stat_mean = statistics_->view(static_cast<size_t>(op.running_mean)).data();
          float* stat_var = statistics_->view(static_cast<size_t>(op.running_var)).data();
          const double unbias = static_cast<double>(m) / static_cast<double>(m - 1);
          for (int c = 0; c < in.c; ++c) {
            stat_mean[c] +=
                static_cast<float>(n * static_cast<double>(op.mean[static_cast<size_t>(c)]));
            stat_var[c] += static_cast<float>(
                n * unbias * static_cast<double>(op.var[static_cast<size_t>(c)]));
          }
        } else {
          const float* rm = buffers_->view(static_cast<size_t>(op.running_mean)).data();
          const float* rv = buffers_->view(static_cast<size_t>(op.running_var)).data();
          pool_.parallel_for(in.c, [&](int64_t c, int) {
            BatchNormShape part = s;
            part.channel_begin = static_cast<int>(c);
            part.channel_end = static_cast<int>(c) + 1;
            batch_norm_forward_eval(y, x, gamma, beta, rm, rv, part);
          });
        }
        break;
      }
      case OpKind::kRelu:
        pool_.parallel_for(n, [&](int64_t i, int) {
          relu_forward(y + i * out.size(), y + i * out.size(), out.size());
        });
        break;
      case OpKind::kShortcut:
        pool_.parallel_for(n, [&](int64_t i, int) {
          if (op.identity) {
            identity_shortcut_forward(y + i * out.size(), x + i * in.size(), out.size());
          } else {
            option_a_shortcut_forward(y + i * out.size(), x + i * in.size(), op.shortcut);
          }
        });
        break;
      case OpKind::kMaxPool:
        pool_.parallel_for(n, [&](int64_t i, int) {
          max_pool_forward(y + i * out.size(), op.argmax.data() + i * out.size(),
                           x + i * in.size(), op.pool);
        });
        break;
      case OpKind::kAvgPool:
        pool_.parallel_for(n, [&](int64_t i, int) {
          global_avg_pool_forward(y + i * out.size(), x + i * in.size(), 1, in.c, in.h * in.w);
        });
        break;
      case OpKind::kLinear: {
        const float* w = param(op.weight);
        const float* b = param(op.bias);
        const int chunks = std::min(n, kMaxChunks);
        pool_.parallel_for(chunks, [&](int64_t c, int) {
          const auto [begin, end] = chunk(static_cast<int>(c), chunks, n);
          linear_forward(y + int64_t{begin} * op.out_features,
                         x + int64_t{begin} * op.in_features, w, b, end - begin, op.in_features,
                         op.out_features);
        });
        break;
      }
    }
    op.forward_seconds += seconds_since(t0);
  }
}

void ImageClassifier::backward(int n) {
  for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
    Op& op = *it;
    const auto t0 = std::chrono::steady_clock::now();
    const float* x = input_act(op.in);
    const Dims in = dims(op.in), out = dims(op.out);
    float* dy = grad(op.out);
    float* dx = op.write_dx && op.kind != OpKind::kRelu ? grad(op.in) : nullptr;
    switch (op.kind) {
      case OpKind::kConv: {
        const float* w = param(op.weight);
        const int64_t wcount = static_cast<int64_t>(table_[static_cast<size_t>(op.weight)].count);
        const int64_t bcount = op.bias >= 0 ? op.conv.out_channels : 0;
        const int chunks = conv_chunks(n, op.conv);
        pool_.parallel_for(chunks, [&](int64_t c, int t) {
          float* pw = partials_.data() + c * max_param_;
          std::fill(pw, pw + wcount + bcount, 0.0f);
          const auto [begin, end] = chunk(static_cast<int>(c), chunks, n);
          Conv2dShape s = op.conv;
          s.n = end - begin;
          conv2d_backward(dx != nullptr ? dx + begin * in.size() : nullptr, pw,
                          bcount > 0 ? pw + wcount : nullptr, col_.data() + t * max_col_,
                          dy + begin * out.size(), x + begin * in.size(), w, s, op.accumulate_dx);
        });
        reduce_partials(param_grad(op.weight), 0, wcount, chunks);
        if (bcount > 0) reduce_partials(param_grad(op.bias), wcount, bcount, chunks);
        break;
      }
      case OpKind::kBatchNorm: {
        const BatchNormShape s = batch_norm_shape(n, in);
        const float* gamma = param(op.weight);
        float* dgamma = param_grad(op.weight);
        float* dbeta = param_grad(op.bias);
        pool_.parallel_for(in.c, [&](int64_t c, int) {
          BatchNormShape part = s;
          part.channel_begin = static_cast<int>(c);
          part.channel_end = static_cast<int>(c) + 1;
          batch_norm_backward(dx, dgamma, dbeta, dy, op.mean.data(), op.var.data(), x, gamma,
                              part);
        });
        break;
      }
      case OpKind::kRelu: {
        const float* y = act(op.out);
        pool_.parallel_for(n, [&](int64_t i, int) {
          relu_backward(dy + i * out.size(), dy + i * out.size(), y + i * out.size(), out.size());
        });
        break;
      }
      case OpKind::kShortcut:
        if (dx == nullptr) break;
        pool_.parallel_for(n, [&](int64_t i, int) {
          float* dxi = dx + i * in.size();
          if (!op.accumulate_dx) std::fill(dxi, dxi + in.size(), 0.0f);
          if (op.identity) {
            identity_shortcut_backward(dxi, dy + i * out.size(), in.size());
          } else {
            option_a_shortcut_backward(dxi, dy + i * out.size(), op.shortcut);
          }
        });
        break;
      case OpKind::kMaxPool:
        if (dx == nullptr) break;
        pool_.parallel_for(n, [&](int64_t i, int) {
          max_pool_backward(dx + i * in.size(), dy + i * out.size(),
                            op.argmax.data() + i * out.size(), op.pool);
        });
        break;
      case OpKind::kAvgPool:
        if (dx == nullptr) break;
        pool_.parallel_for(n, [&](int64_t i, int) {
          global_avg_pool_backward(dx + i * in.size(), dy + i * out.size(), 1, in.c, in.h * in.w);
        });
        break;
      case OpKind::kLinear: {
        const float* w = param(op.weight);
        const int64_t wcount = int64_t{op.out_features} * op.in_features;
        const int chunks = std::min(n, kMaxChunks);
        pool_.parallel_for(chunks, [&](int64_t c, int) {
          float* pw = partials_.data() + c * max_param_;
          std::fill(pw, pw + wcount + op.out_features, 0.0f);
          const auto [begin, end] = chunk(static_cast<int>(c), chunks, n);
          linear_backward(dx != nullptr ? dx + int64_t{begin} * op.in_features : nullptr, pw,
                          pw + wcount, dy + int64_t{begin} * op.out_features,
                          x + int64_t{begin} * op.in_features, w, end - begin, op.in_features,
                          op.out_features);
        });
        reduce_partials(param_grad(op.weight), 0, wcount, chunks);
        reduce_partials(param_grad(op.bias), wcount, op.out_features, chunks);
        break;
      }
    }
    op.backward_seconds += seconds_since(t0);
  }
}

}  // namespace dctrain::image_classifier
