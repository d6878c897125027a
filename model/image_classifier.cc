#include "model/image_classifier.h"

#include <memory>
#include <stdexcept>
#include <string>

#include "model/image_classifier_impl.h"

namespace dctrain {

using image_classifier::ImageClassifier;
using image_classifier::Init;


std::span<const float> classifier_logits(const Model& model) {
  const auto* classifier = dynamic_cast<const ImageClassifier*>(&model);
  if (classifier == nullptr) {
    throw std::invalid_argument("classifier_logits: " + model.name() +
                                " is not an image classifier");
  }
  return classifier->logits();
}

std::vector<LayerTiming> classifier_timings(const Model& model) {
  const auto* classifier = dynamic_cast<const ImageClassifier*>(&model);
  if (classifier == nullptr) {
    throw std::invalid_argument("classifier_timings: " + model.name() +
                                " is not an image classifier");
  }
  return classifier->timings();
}

std::unique_ptr<Model> make_cifar_resnet(const ModelSpec& spec) {
  if (spec.depth < 8 || (spec.depth - 2) % 6 != 0 || spec.width < 1) {
    throw std::invalid_argument("resnet: depth " + std::to_string(spec.depth) +
                                " is not 6n+2 (n >= 1), or width " + std::to_string(spec.width) +
                                " is not positive");
  }
  const int blocks = (spec.depth - 2) / 6;
  std::string name = "resnet" + std::to_string(spec.depth);
  if (spec.width != 16) name += "-w" + std::to_string(spec.width);
  auto m = std::make_unique<ImageClassifier>(name, spec);
  int x =
      m->conv("conv1", ImageClassifier::kInput, spec.width, 3, 1, 1, false, Init::kKaimingNormal);
  x = m->batch_norm("bn1", x);
  m->relu(x);
  for (int stage = 1; stage <= 3; ++stage) {
    const int planes = spec.width << (stage - 1);
    for (int block = 0; block < blocks; ++block) {
      const std::string prefix =
          "layer" + std::to_string(stage) + "." + std::to_string(block) + ".";
      const int stride = stage > 1 && block == 0 ? 2 : 1;
      int y = m->conv(prefix + "conv1", x, planes, 3, stride, 1, false, Init::kKaimingNormal);
      y = m->batch_norm(prefix + "bn1", y);
      m->relu(y);
      y = m->conv(prefix + "conv2", y, planes, 3, 1, 1, false, Init::kKaimingNormal);
      y = m->batch_norm(prefix + "bn2", y);
      m->shortcut(y, x);
      m->relu(y);
      x = y;
    }
  }
  x = m->global_avg_pool(x);
  x = m->linear("linear", x, spec.num_classes, Init::kKaimingNormal);
  m->finish(x);
  return m;
}

std::unique_ptr<Model> make_mnist_cnn(const ModelSpec& spec) {
  auto m = std::make_unique<ImageClassifier>("mnist-cnn", spec);
  int x = m->conv("conv1", ImageClassifier::kInput, 32, 5, 1, 2, true, Init::kTorchDefault);
  m->relu(x);
  x = m->max_pool(x, 2);
  x = m->conv("conv2", x, 64, 5, 1, 2, true, Init::kTorchDefault);
  m->relu(x);
  x = m->max_pool(x, 2);
  x = m->linear("fc1", x, 128, Init::kTorchDefault);
  m->relu(x);
  x = m->linear("fc2", x, spec.num_classes, Init::kTorchDefault);
  m->finish(x);
  return m;
}

std::unique_ptr<Model> make_mlp(const ModelSpec& spec) {
  auto m = std::make_unique<ImageClassifier>("mlp", spec);
  int x = m->linear("fc1", ImageClassifier::kInput, 256, Init::kTorchDefault);
  m->relu(x);
  x = m->linear("fc2", x, spec.num_classes, Init::kTorchDefault);
  m->finish(x);
  return m;
}

}  // namespace dctrain
