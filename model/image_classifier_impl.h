// The image classifiers' one class (model/image_classifier.h): a list of
// layers over activations, built by the factories in image_classifier.cc,
// its passes in image_classifier_passes.cc. Private to model/.
#pragma once

#include "model/image_classifier.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/random.h"
#include "model/layers/batch_norm.h"
#include "model/layers/conv2d.h"
#include "model/layers/cross_entropy.h"
#include "model/layers/linear.h"
#include "model/layers/pooling.h"
#include "model/layers/relu.h"
#include "model/layers/residual.h"
#include "model/thread_pool.h"

namespace dctrain::image_classifier {


// Weight gradients are summed over at most this many fixed chunks of a
// micro-batch, each into its own partial buffer (see the header: results do
// not depend on the thread count).
constexpr int kMaxChunks = 16;

// A convolution's chunks hold at least this many output positions (samples
// x out_height x out_width) where the micro-batch allows: the weight
// gradient of one 8x8 sample is 4 vectors of positions per output, and its
// tile's horizontal sums, the partial buffer's zeroing and its reduction
// then cost as much as the products (ResNet-20's last stage ran at half its
// per-image speed at micro-batch 16 with one sample per chunk).
constexpr int64_t kMinChunkPositions = 512;

// How many chunks a convolution splits n samples into: at most kMaxChunks
// and at most n, each of at least kMinChunkPositions positions when n
// allows. A function of n and the shape only (never of the thread count),
// so results are the same for any number of threads; at micro-batch 128
// every ResNet-20 layer keeps 16 chunks.
inline int conv_chunks(int n, const Conv2dShape& s) {
  const int64_t positions = int64_t{s.out_height()} * s.out_width();
  const int64_t samples_per_chunk = (kMinChunkPositions + positions - 1) / positions;
  const int64_t wanted = (n + samples_per_chunk - 1) / samples_per_chunk;
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, std::min(n, kMaxChunks)));
}

struct Dims {
  int c = 0, h = 0, w = 0;
  int64_t size() const { return int64_t{c} * h * w; }
  bool operator==(const Dims&) const = default;
};

inline BatchNormShape batch_norm_shape(int n, const Dims& d) {
  BatchNormShape s;
  s.n = n;
  s.channels = d.c;
  s.spatial = d.h * d.w;
  return s;
}

enum class Init {
  kKaimingNormal,  // normal(0, sqrt(2 / fan_in)): torch.nn.init.kaiming_normal_
  kTorchDefault,   // uniform(+-1 / sqrt(fan_in)): PyTorch's default for conv and linear
  kOnes,
  kZeros,
};

struct InitRule {
  size_t entry;
  Init init;
  int64_t fan_in;
};

enum class OpKind { kConv, kBatchNorm, kRelu, kShortcut, kMaxPool, kAvgPool, kLinear };

inline const char* kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kConv:
      return "conv";
    case OpKind::kBatchNorm:
      return "batchnorm";
    case OpKind::kRelu:
      return "relu";
    case OpKind::kShortcut:
      return "shortcut";
    case OpKind::kMaxPool:
      return "maxpool";
    case OpKind::kAvgPool:
      return "avgpool";
    case OpKind::kLinear:
      return "linear";
  }
  return "?";
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Op {
  OpKind kind = OpKind::kRelu;
  std::string label;  // parameter prefix, or the producing layer's for in-place ops
  double forward_seconds = 0.0, backward_seconds = 0.0;  // summed over calls
  int in = -1;                                           // activation read (the shortcut's source)
  int out = -1;                // activation written (in place for ReLU and the shortcut)
  bool write_dx = true;        // false when `in` is the model's input
  bool accumulate_dx = false;  // another backward wrote the gradient of `in` first
  int weight = -1, bias = -1;  // parameter table entries, -1: none
  int running_mean = -1, running_var = -1;  // buffer table entries (BatchNorm)
  Conv2dShape conv;                         // n = 1; samples are looped outside
  MaxPoolShape pool;                        // n = 1
  ShortcutShape shortcut;                   // n = 1
  bool identity = false;                    // identity shortcut
  int in_features = 0, out_features = 0;    // linear
  // Saved for backward, sized with the workspace.
  std::vector<float> mean, var;  // BatchNorm (C)
  std::vector<int32_t> argmax;   // max-pool (N, C, out_h, out_w)
};

struct Activation {
  Dims dims;
  int grad_slot = -1;       // which gradient buffer holds d loss / d this
  int producer = -1;        // op that creates it (-1: the input)
  std::vector<float> data;  // (capacity, C, H, W); unused for the input
};

class ImageClassifier final : public Model {
 public:
  ImageClassifier(std::string name, const ModelSpec& spec)
      : name_(std::move(name)), seed_(spec.seed), pool_(spec.threads) {
    if (spec.image_channels < 1 || spec.image_height < 1 || spec.image_width < 1 ||
        spec.num_classes < 2) {
      throw std::invalid_argument(name_ + ": image shape " + std::to_string(spec.image_channels) +
                                  "x" + std::to_string(spec.image_height) + "x" +
                                  std::to_string(spec.image_width) + " and " +
                                  std::to_string(spec.num_classes) +
                                  " classes: sizes must be positive and classes at least 2");
    }
    activations_.push_back(
        Activation{{spec.image_channels, spec.image_height, spec.image_width}, -1, -1, {}});
  }

  std::string name() const override { return name_; }

  std::vector<LayerTiming> timings() const {
    std::vector<LayerTiming> out;
    for (const Op& op : ops_) {
      out.push_back({op.label, kind_name(op.kind), op.forward_seconds, op.backward_seconds});
    }
    out.push_back({"loss", "softmax_cross_entropy", loss_seconds_, 0.0});
    return out;
  }

  std::span<const float> logits() const {
    const Activation& a = activations_.back();
    return std::span<const float>(a.data).first(static_cast<size_t>(last_n_ * a.dims.size()));
  }

  double forward_flops_per_sample(int) const override {
    double flops = 0.0;
    for (const Op& op : ops_) {
      if (op.kind == OpKind::kConv) {
        const Conv2dShape& c = op.conv;
        flops += 2.0 * c.in_channels * c.out_channels * c.kernel_h * c.kernel_w * c.out_height() *
                 c.out_width();
      } else if (op.kind == OpKind::kLinear) {
        flops += 2.0 * op.in_features * op.out_features;
      }
    }
    return flops;
  }

  // ---- building ----------------------------------------------------------

  static constexpr int kInput = 0;
  const Dims& dims(int a) const { return activations_[static_cast<size_t>(a)].dims; }

  int conv(const std::string& prefix, int in, int out_channels, int kernel, int stride, int padding,
           bool bias, Init weight_init) {
    Op op;
    op.kind = OpKind::kConv;
    op.label = prefix;
    op.in = in;
    const Dims d = dims(in);
    op.conv.n = 1;
    op.conv.in_channels = d.c;
    op.conv.in_height = d.h;
    op.conv.in_width = d.w;
    op.conv.out_channels = out_channels;
    op.conv.kernel_h = op.conv.kernel_w = kernel;
    op.conv.stride = stride;
    op.conv.padding = padding;
    validate(op.conv);
    const int64_t fan_in = int64_t{d.c} * kernel * kernel;
    op.weight =
        add_param(prefix + ".weight", {out_channels, d.c, kernel, kernel}, weight_init, fan_in);
    if (bias) op.bias = add_param(prefix + ".bias", {out_channels}, Init::kTorchDefault, fan_in);
    return push(std::move(op), {out_channels, op.conv.out_height(), op.conv.out_width()});
  }

  int batch_norm(const std::string& prefix, int in) {
    Op op;
    op.kind = OpKind::kBatchNorm;
    op.label = prefix;
    op.in = in;
    const int c = dims(in).c;
    op.weight = add_param(prefix + ".weight", {c}, Init::kOnes, 0);
    op.bias = add_param(prefix + ".bias", {c}, Init::kZeros, 0);
    op.running_mean = static_cast<int>(buffer_table_.add(prefix + ".running_mean", {c}));
    op.running_var = static_cast<int>(buffer_table_.add(prefix + ".running_var", {c}));
    op.mean.resize(static_cast<size_t>(c));
    op.var.resize(static_cast<size_t>(c));
    return push(std::move(op), dims(in));
  }

  void relu(int a) {
    Op op;
    op.kind = OpKind::kRelu;
    op.label = producer_label(a);
    op.in = op.out = a;
    ops_.push_back(std::move(op));
  }

  // target += shortcut(source): identity when the shapes agree, option A
  // when the target halves the resolution and adds channels.
  void shortcut(int target, int source) {
    Op op;
    op.kind = OpKind::kShortcut;
    op.label = producer_label(target);
    op.in = source;
    op.out = target;
    const Dims s = dims(source), t = dims(target);
    op.identity = s == t;
    if (!op.identity) {
      op.shortcut.n = 1;
      op.shortcut.in_channels = s.c;
      op.shortcut.in_height = s.h;
      op.shortcut.in_width = s.w;
      op.shortcut.out_channels = t.c;
      op.shortcut.stride = 2;
      if (t.c < s.c || (t.c - s.c) % 2 != 0 || op.shortcut.out_height() != t.h ||
          op.shortcut.out_width() != t.w) {
        throw std::logic_error(name_ + ": no option-A shortcut from " + std::to_string(s.c) +
                               " to " + std::to_string(t.c) + " channels");
      }
    }
    ops_.push_back(std::move(op));
  }

  int max_pool(int in, int window) {
    Op op;
    op.kind = OpKind::kMaxPool;
    op.label = producer_label(in);
    op.in = in;
    const Dims d = dims(in);
    op.pool.n = 1;
    op.pool.channels = d.c;
    op.pool.in_height = d.h;
    op.pool.in_width = d.w;
    op.pool.window = op.pool.stride = window;
    return push(std::move(op), {d.c, op.pool.out_height(), op.pool.out_width()});
  }

  int global_avg_pool(int in) {
    Op op;
    op.kind = OpKind::kAvgPool;
    op.label = producer_label(in);
    op.in = in;
    return push(std::move(op), {dims(in).c, 1, 1});
  }

  std::string producer_label(int a) const {
    const int p = activations_[static_cast<size_t>(a)].producer;
    return p < 0 ? "input" : ops_[static_cast<size_t>(p)].label;
  }

  int linear(const std::string& prefix, int in, int out_features, Init weight_init) {
    Op op;
    op.kind = OpKind::kLinear;
    op.label = prefix;
    op.in = in;
    op.in_features = static_cast<int>(dims(in).size());
    op.out_features = out_features;
    op.weight =
        add_param(prefix + ".weight", {out_features, op.in_features}, weight_init, op.in_features);
    op.bias = add_param(prefix + ".bias", {out_features}, Init::kTorchDefault, op.in_features);
    return push(std::move(op), {out_features, 1, 1});
  }

  // Completes the model once the last op produced the logits: plans the
  // gradient buffers, allocates and initialises the arenas.
  void finish(int logits) {
    if (logits != static_cast<int>(activations_.size()) - 1 || dims(logits).h != 1 ||
        dims(logits).w != 1) {
      throw std::logic_error(name_ + ": the last activation must be the (N, classes) logits");
    }
    plan_gradient_buffers(logits);
    for (const Op& op : ops_) {
      if (op.kind == OpKind::kConv) {
        max_col_ = std::max(max_col_, op.conv.col_size());
      }
      if (op.kind == OpKind::kConv || op.kind == OpKind::kLinear) {
        int64_t count = static_cast<int64_t>(table_[static_cast<size_t>(op.weight)].count);
        if (op.bias >= 0) count += static_cast<int64_t>(table_[static_cast<size_t>(op.bias)].count);
        max_param_ = std::max(max_param_, count);
      }
    }
    for (const Activation& a : activations_)
      max_activation_ = std::max(max_activation_, a.dims.size());
    col_.resize(static_cast<size_t>(max_col_ * pool_.size()));
    partials_.resize(static_cast<size_t>(max_param_ * kMaxChunks));
    allocate_arenas();
    initialise();
  }

  // ---- Model -------------------------------------------------------------

  MicroBatchResult train_micro_batch(const Batch& batch) override {
    const int n = prepare(batch);
    forward(n, /*train=*/true);
    const int logits = static_cast<int>(activations_.size()) - 1;
    const auto t0 = std::chrono::steady_clock::now();
    const CrossEntropyResult ce = softmax_cross_entropy<float>(
        grad(logits), act(logits), batch.labels.data(), n, dims(logits).c);
    loss_seconds_ += seconds_since(t0);
    backward(n);
    return {ce.loss_sum, ce.scored, n, ce.correct};
  }

  MicroBatchResult evaluate(const Batch& batch) override {
    const int n = prepare(batch);
    forward(n, /*train=*/false);
    const int logits = static_cast<int>(activations_.size()) - 1;
    const CrossEntropyResult ce =
        softmax_cross_entropy<float>(nullptr, act(logits), batch.labels.data(), n, dims(logits).c);
    return {ce.loss_sum, ce.scored, n, ce.correct};
  }

  void apply_statistics(std::span<const float> averaged) override {
    std::span<float> running = buffers_->flat();
    if (averaged.size() != running.size()) {
      throw std::invalid_argument(name_ + ": apply_statistics got " +
                                  std::to_string(averaged.size()) + " values for " +
                                  std::to_string(running.size()) +
                                  " running statistics; pass statistics() divided by the samples");
    }
    // As PyTorch: momentum * batch value + (1 - momentum) * running, in double.
    for (size_t i = 0; i < running.size(); ++i) {
      running[i] = static_cast<float>(kBatchNormMomentum * static_cast<double>(averaged[i]) +
                                      (1.0 - kBatchNormMomentum) * static_cast<double>(running[i]));
    }
  }

  ThreadPool* thread_pool() override { return &pool_; }

 private:
  int push(Op op, Dims out_dims) {
    const int a = static_cast<int>(activations_.size());
    activations_.push_back(Activation{out_dims, -1, static_cast<int>(ops_.size()), {}});
    op.out = a;
    ops_.push_back(std::move(op));
    return a;
  }

  int add_param(const std::string& name, std::vector<int64_t> shape, Init init, int64_t fan_in) {
    const size_t entry = table_.add(name, std::move(shape));
    init_rules_.push_back({entry, init, fan_in});
    return static_cast<int>(entry);
  }

  void initialise() {
    for (const InitRule& rule : init_rules_) {
      std::span<float> v = parameters_->view(rule.entry);
      Rng rng({seed_, 0x1417ULL, rule.entry});  // one stream per tensor
      switch (rule.init) {
        case Init::kKaimingNormal: {
          const double std = std::sqrt(2.0 / static_cast<double>(rule.fan_in));
          for (float& x : v) x = static_cast<float>(std * rng.normal());
          break;
        }
        case Init::kTorchDefault: {
          const double bound = 1.0 / std::sqrt(static_cast<double>(rule.fan_in));
          for (float& x : v) x = static_cast<float>(bound * (2.0 * rng.uniform_double() - 1.0));
          break;
        }
        case Init::kOnes:
          std::fill(v.begin(), v.end(), 1.0f);
          break;
        case Init::kZeros:
          std::fill(v.begin(), v.end(), 0.0f);
          break;
      }
    }
    // Running statistics start as PyTorch's: mean 0, var 1.
    for (const Op& op : ops_) {
      if (op.kind != OpKind::kBatchNorm) continue;
      std::span<float> var = buffers_->view(static_cast<size_t>(op.running_var));
      std::fill(var.begin(), var.end(), 1.0f);
    }
  }

  // Gradients of activations live from their first write in the backward
  // pass (the loss, or the backward of their last reader) to the backward of
  // the op that produced them. Buffers are handed out and returned along that
  // order, so a few buffers of the largest activation size serve them all.
  void plan_gradient_buffers(int logits) {
    std::vector<int> free_slots;
    auto take = [&](int a) {
      if (!free_slots.empty()) {
        activations_[static_cast<size_t>(a)].grad_slot = free_slots.back();
        free_slots.pop_back();
      } else {
        activations_[static_cast<size_t>(a)].grad_slot = grad_slot_count_++;
      }
    };
    take(logits);
    for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
      Op& op = *it;
      if (op.kind != OpKind::kRelu) {
        op.write_dx = op.in != kInput;
        if (op.write_dx) {
          Activation& in = activations_[static_cast<size_t>(op.in)];
          op.accumulate_dx = in.grad_slot >= 0;
          if (!op.accumulate_dx) take(op.in);
          if (op.accumulate_dx && op.kind != OpKind::kConv && op.kind != OpKind::kShortcut) {
            throw std::logic_error(name_ +
                                   ": an activation read by two ops must feed a convolution "
                                   "or a shortcut");
          }
        }
      }
      const Activation& out = activations_[static_cast<size_t>(op.out)];
      if (out.producer == static_cast<int>(ops_.rend() - it) - 1)
        free_slots.push_back(out.grad_slot);
    }
  }

  float* act(int a) { return activations_[static_cast<size_t>(a)].data.data(); }
  const float* input_act(int a) const {
    return a == kInput ? input_ : activations_[static_cast<size_t>(a)].data.data();
  }
  float* grad(int a) {
    return grad_slots_[static_cast<size_t>(activations_[static_cast<size_t>(a)].grad_slot)].data();
  }
  float* param(int entry) { return parameters_->view(static_cast<size_t>(entry)).data(); }
  float* param_grad(int entry) {
    return entry < 0 ? nullptr : gradients_->view(static_cast<size_t>(entry)).data();
  }

  // Checks the batch against the model and grows the workspace if needed.
  int prepare(const Batch& batch) {
    const Dims& in = dims(kInput);
    const int n = batch.size;
    if (batch.kind != BatchKind::kImage || n < 1 || batch.channels != in.c ||
        batch.height != in.h || batch.width != in.w ||
        batch.images.size() != static_cast<size_t>(n * in.size()) ||
        batch.labels.size() != static_cast<size_t>(n)) {
      throw std::invalid_argument(
          name_ + ": expected an image batch of (N, " + std::to_string(in.c) + ", " +
          std::to_string(in.h) + ", " + std::to_string(in.w) +
          ") with N labels, got N = " + std::to_string(n) + ", " + std::to_string(batch.channels) +
          "x" + std::to_string(batch.height) + "x" + std::to_string(batch.width) + ", " +
          std::to_string(batch.images.size()) + " pixels, " + std::to_string(batch.labels.size()) +
          " labels; check the dataset matches the model spec's image shape");
    }
    if (n > capacity_) {
      capacity_ = n;
      for (size_t a = 1; a < activations_.size(); ++a) {
        activations_[a].data.resize(static_cast<size_t>(n * activations_[a].dims.size()));
      }
      grad_slots_.resize(static_cast<size_t>(grad_slot_count_));
      for (auto& slot : grad_slots_) slot.resize(static_cast<size_t>(n * max_activation_));
      for (Op& op : ops_) {
        if (op.kind == OpKind::kMaxPool) {
          op.argmax.resize(static_cast<size_t>(n * dims(op.out).size()));
        }
      }
    }
    input_ = batch.images.data();
    last_n_ = n;
    return n;
  }

  // Samples [begin, end) of chunk c of n.
  static std::pair<int, int> chunk(int c, int chunks, int n) {
    return {static_cast<int>(int64_t{c} * n / chunks),
            static_cast<int>(int64_t{c + 1} * n / chunks)};
  }

  // dst (count) += sum over chunks of the partial buffers, in chunk order.
  void reduce_partials(float* dst, int64_t offset, int64_t count, int chunks) {
    constexpr int64_t kBlock = 4096;
    pool_.parallel_for((count + kBlock - 1) / kBlock, [&](int64_t b, int) {
      const int64_t begin = b * kBlock, end = std::min(count, begin + kBlock);
      for (int64_t j = begin; j < end; ++j) {
        float sum = partials_[static_cast<size_t>(offset + j)];
        for (int c = 1; c < chunks; ++c)
          sum += partials_[static_cast<size_t>(c * max_param_ + offset + j)];
        dst[j] += sum;
      }
    });
  }

  // The passes over a micro-batch of n samples (image_classifier_passes.cc).
  void forward(int n, bool train);
  void backward(int n);

  std::string name_;
  uint64_t seed_;
  ThreadPool pool_;
  std::vector<Activation> activations_;
  std::vector<Op> ops_;
  std::vector<InitRule> init_rules_;
  int grad_slot_count_ = 0;
  int64_t max_col_ = 0, max_param_ = 0, max_activation_ = 0;

  // Workspace.
  int capacity_ = 0;  // largest batch seen
  int last_n_ = 0;    // samples of the last batch
  double loss_seconds_ = 0.0;
  const float* input_ = nullptr;                // the batch's images (N, C, H, W)
  std::vector<std::vector<float>> grad_slots_;  // (capacity, largest activation) each
  std::vector<float> col_;                      // (threads, max_col) im2col scratch
  std::vector<float> partials_;                 // (kMaxChunks, max_param) weight-gradient chunks
};


}  // namespace dctrain::image_classifier
