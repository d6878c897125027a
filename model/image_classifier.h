// Image classifiers built from the layers in model/layers: ResNet-20 for
// CIFAR-10, the small MNIST CNN and an MLP.
//
// A classifier is a straight list of operations over numbered activations
// (N, C, H, W). ReLU and the residual shortcut run in place on their
// activation; everything else writes a new one. Training runs every
// operation's forward, the fused softmax cross-entropy, then every backward in
// reverse, each operation spread over samples (or channels, for BatchNorm) on
// the model's thread pool with single-threaded BLAS inside.
//
// Memory: activations are kept for backward (one buffer each, sized for the
// largest micro-batch seen); gradients of activations share a few buffers,
// assigned once at build time from their lifetimes in the backward pass. All
// of it is allocated when a batch size is first seen (or grows), never
// inside a step.
//
// Determinism: every weight gradient is summed per fixed chunk of samples
// (the chunking depends on the batch size and the layer's shape only,
// never on the thread count)
// and the chunk partials are added in chunk order, so results are
// bit-identical for any number of threads.
//
// BatchNorm: training normalises with the micro-batch's statistics and ADDS
// samples * mean and samples * unbiased variance into statistics(); running
// estimates change only in apply_statistics(), which folds the step's
// averaged statistics in with momentum 0.1. With one micro-batch per step this
// is exactly PyTorch's update (running stats updated once per forward); with
// several micro-batches it is one update per step from the sample-weighted
// mean of the micro-batches' statistics, where PyTorch would apply the
// momentum once per micro-batch.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"

namespace dctrain {

// He et al. 2016 CIFAR ResNet-20: conv 3x3 16, 3 stages x 3 basic blocks of
// 16/32/64 channels, option-A shortcuts, global average pool, linear to
// num_classes. Parameter and buffer names follow the common PyTorch CIFAR
// ResNet code ("layer2.0.conv1.weight", "bn1.running_mean", "linear.bias").
// Kaiming-normal (fan-in, gain sqrt 2) conv and linear weights, PyTorch's
// default uniform linear bias, BatchNorm weight 1 and bias 0.
// The CIFAR ResNet of He et al. (2016): a 3x3 convolution to spec.width
// channels, three stages of (spec.depth - 2) / 6 basic blocks at width, 2x
// and 4x (stride 2 into stages 2 and 3, zero-padding shortcuts), global
// average pooling, a linear classifier. Named "resnet20" at depth 20 and
// width 16, else "resnet<depth>" (with "-w<width>" off 16).
std::unique_ptr<Model> make_cifar_resnet(const ModelSpec& spec);

// conv 5x5 32 pad 2, ReLU, max-pool 2; conv 5x5 64 pad 2, ReLU, max-pool 2;
// linear 128, ReLU; linear num_classes (454,922 parameters on 1x28x28).
// Names conv1, conv2, fc1, fc2; PyTorch's default initialisation.
std::unique_ptr<Model> make_mnist_cnn(const ModelSpec& spec);

// Flattened image -> linear 256, ReLU -> linear num_classes (fc1, fc2);
// PyTorch's default initialisation.
std::unique_ptr<Model> make_mlp(const ModelSpec& spec);

// The logits (N, classes) of a classifier's last train_micro_batch() or
// evaluate(), valid until its next call. Throws std::invalid_argument for a
// model that is not one of the classifiers above.
std::span<const float> classifier_logits(const Model& model);

// Wall time per operation, summed over every call since the model was built
// (for benchmarks: where a step's time goes). In-place operations (ReLU,
// shortcut) carry the label of the layer whose output they modify.
struct LayerTiming {
  std::string layer;  // e.g. "layer2.0.conv1", "loss"
  std::string kind;   // conv, batchnorm, relu, shortcut, maxpool, avgpool, linear, ...
  double forward_seconds = 0.0;
  double backward_seconds = 0.0;
};
std::vector<LayerTiming> classifier_timings(const Model& model);

}  // namespace dctrain
