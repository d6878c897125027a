#include "model/model.h"

#include <stdexcept>

#include "model/bert_tiny.h"
#include "model/image_classifier.h"

namespace dctrain {

void Model::allocate_arenas() {
  parameters_ = std::make_unique<Arena>(table_);
  gradients_ = std::make_unique<Arena>(table_);
  buffers_ = std::make_unique<Arena>(buffer_table_);
  statistics_ = std::make_unique<Arena>(buffer_table_);
}

std::unique_ptr<Model> make_model(const ModelSpec& spec) {
  // resnet20 and bert-tiny are their families at the default sizes (the
  // ModelSpec's).
  const ModelSpec defaults;
  if (spec.name == "resnet20") {
    ModelSpec fixed = spec;
    fixed.depth = defaults.depth;
    fixed.width = defaults.width;
    return make_cifar_resnet(fixed);
  }
  if (spec.name == "resnet") return make_cifar_resnet(spec);
  if (spec.name == "mnist-cnn") return make_mnist_cnn(spec);
  if (spec.name == "mlp") return make_mlp(spec);
  if (spec.name == "bert-tiny") {
    ModelSpec fixed = spec;
    fixed.layers = defaults.layers;
    fixed.hidden = defaults.hidden;
    fixed.heads = defaults.heads;
    fixed.intermediate = defaults.intermediate;
    return std::make_unique<BertTiny>(fixed);
  }
  if (spec.name == "bert") return std::make_unique<BertTiny>(spec);
  throw std::invalid_argument("make_model: unknown model '" + spec.name +
                              "'; known models: resnet20, resnet, mnist-cnn, mlp, bert-tiny, bert");
}

}  // namespace dctrain
