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
  if (spec.name == "resnet20") return make_resnet20(spec);
  if (spec.name == "mnist-cnn") return make_mnist_cnn(spec);
  if (spec.name == "mlp") return make_mlp(spec);
  if (spec.name == "bert-tiny") return std::make_unique<BertTiny>(spec);
  throw std::invalid_argument("make_model: unknown model '" + spec.name +
                              "'; known models: resnet20, mnist-cnn, mlp, bert-tiny");
}

}  // namespace dctrain
