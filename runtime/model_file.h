// A model's weights in a file other tools load: safetensors
// (runtime/safetensors.h) under the names and layouts their users know.
//
//   - The BERT family: Hugging Face's BertForMaskedLM
//     ("bert.embeddings.word_embeddings.weight",
//     "bert.encoder.layer.0.attention.self.query.weight", ...,
//     "cls.predictions.transform.dense.weight", "cls.predictions.bias"),
//     Linear weights [out, in] as dctrain keeps them. The decoder is tied to
//     the word embeddings and written once, as Hugging Face writes it; a
//     config.json in BertConfig's fields goes beside the file, so that
//     BertForMaskedLM.from_pretrained(folder) loads it.
//   - The classifiers: the PyTorch CIFAR ResNet's names (conv1, bn1,
//     layer1.0.conv1, ..., linear), which are dctrain's own, with
//     BatchNorm's running statistics and num_batches_tracked, so that
//     load_state_dict(strict=True) takes the file; likewise mnist-cnn and
//     mlp (conv1, fc1, ...).
//
// The file's metadata names the model, the run and its config.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "model/model.h"
#include "runtime/safetensors.h"

namespace dctrain {

class BertTiny;

// Where the weights come from, for the file's "__metadata__".
struct ModelFileOrigin {
  std::string config;  // the run config, in its text format
  std::string run_id;
  int64_t updates = 0;  // optimizer updates applied (BatchNorm's num_batches_tracked)
};

// The name the file gives the parameter or buffer `name` of `model`.
std::string file_name_of(const Model& model, const std::string& name);

// The parameters and buffers of `model`, in the order of its tables, plus
// the counters PyTorch keeps beside them, with the metadata keys "format"
// ("pt"), "model", "run_id", "updates" and "config".
SafeTensors export_model(Model& model, const ModelFileOrigin& origin);

// Hugging Face's BertConfig of a BERT model, as JSON.
std::string bert_config_json(const BertTiny& model);

// export_model() written atomically to `path`; for the BERT family also
// config.json in the same folder. Returns the files written.
std::vector<std::filesystem::path> write_model_file(const std::filesystem::path& path, Model& model,
                                                    const ModelFileOrigin& origin);

// Sets the parameters and BatchNorm running statistics of `model` from
// `file`, which must hold every one of them under its file name, of its
// shape, as float32. Accepted and left unused: the counters and copies
// other tools keep beside weights (num_batches_tracked, position_ids, the
// tied decoder, BERT's pooler and next-sentence head); LayerNorm's older
// names gamma and beta are read as weight and bias. Throws
// std::runtime_error naming `origin` and the first tensor that differs
// (missing, of another shape or dtype), or else the first tensor of the
// file the model does not have; the model is then unchanged.
void import_model(const SafeTensors& file, const std::string& origin, Model& model);

// read_safetensors() and import_model().
void read_model_file(const std::filesystem::path& path, Model& model);

}  // namespace dctrain
