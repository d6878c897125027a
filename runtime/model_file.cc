#include "runtime/model_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "common/files.h"
#include "model/bert_tiny.h"
#include "model/layers/layer_norm.h"

namespace dctrain {

namespace {

using Renames = std::vector<std::pair<std::string_view, std::string_view>>;

// dctrain's BERT names (model/bert_tiny.cc) -> BertForMaskedLM's, by prefix.
const Renames& bert_outer_renames() {
  static const Renames renames = {
      {"embeddings.word.", "bert.embeddings.word_embeddings."},
      {"embeddings.position.", "bert.embeddings.position_embeddings."},
      {"embeddings.token_type.", "bert.embeddings.token_type_embeddings."},
      {"embeddings.norm.", "bert.embeddings.LayerNorm."},
      {"head.dense.", "cls.predictions.transform.dense."},
      {"head.norm.", "cls.predictions.transform.LayerNorm."},
      {"head.decoder.", "cls.predictions."},
  };
  return renames;
}

// Inside "layerN." -> "bert.encoder.layer.N.".
const Renames& bert_layer_renames() {
  static const Renames renames = {
      {"attention.query.", "attention.self.query."},
      {"attention.key.", "attention.self.key."},
      {"attention.value.", "attention.self.value."},
      {"attention.output.", "attention.output.dense."},
      {"attention_norm.", "attention.output.LayerNorm."},
      {"ffn.in.", "intermediate.dense."},
      {"ffn.out.", "output.dense."},
      {"ffn_norm.", "output.LayerNorm."},
  };
  return renames;
}

std::optional<std::string> renamed(std::string_view name, const Renames& renames) {
  for (const auto& [from, to] : renames) {
    if (name.starts_with(from)) return std::string(to) + std::string(name.substr(from.size()));
  }
  return std::nullopt;
}

std::string bert_file_name(const std::string& name) {
  if (std::optional<std::string> outer = renamed(name, bert_outer_renames())) return *outer;
  const size_t dot = name.find('.');
  if (name.starts_with("layer") && dot != std::string::npos && dot > 5) {
    const std::string index = name.substr(5, dot - 5);
    if (std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      if (std::optional<std::string> inner =
              renamed(std::string_view(name).substr(dot + 1), bert_layer_renames())) {
        return "bert.encoder.layer." + index + "." + *inner;
      }
    }
  }
  throw std::logic_error("no Hugging Face name for BERT tensor '" + name + "'");
}

const BertTiny* as_bert(const Model& model) {
  return dynamic_cast<const BertTiny*>(&model);
}

constexpr std::string_view kRunningVar = ".running_var";

SafeTensor tensor_of(std::string name, const ParamEntry& entry, std::span<const float> values) {
  return SafeTensor{std::move(name), entry.shape, std::vector<float>(values.begin(), values.end())};
}

// Tensors other tools keep beside the weights, which dctrain neither needs
// nor has: counters, a position index, BERT's pooler and next-sentence head.
// (The tied decoder is checked against the embeddings instead.)
bool kept_beside_weights(std::string_view name) {
  return name.ends_with(".num_batches_tracked") || name.ends_with("position_ids") ||
         name.starts_with("bert.pooler.") || name.starts_with("cls.seq_relationship.");
}

// A file's name as dctrain reads it: LayerNorm's gamma and beta (older
// BERT checkpoints) are its weight and bias.
std::string current_name(std::string_view name) {
  for (const auto& [old_suffix, suffix] :
       {std::pair<std::string_view, std::string_view>{"LayerNorm.gamma", "LayerNorm.weight"},
        {"LayerNorm.beta", "LayerNorm.bias"}}) {
    if (name.ends_with(old_suffix)) {
      return std::string(name.substr(0, name.size() - old_suffix.size())) + std::string(suffix);
    }
  }
  return std::string(name);
}

struct Assignment {
  std::span<float> target;
  const SafeTensor* source;
};

}  // namespace

std::string file_name_of(const Model& model, const std::string& name) {
  return as_bert(model) != nullptr ? bert_file_name(name) : name;
}

SafeTensors export_model(Model& model, const ModelFileOrigin& origin) {
  SafeTensors file;
  file.metadata["format"] = "pt";  // what Hugging Face's loaders look for
  file.metadata["model"] = model.name();
  file.metadata["run_id"] = origin.run_id;
  file.metadata["updates"] = std::to_string(origin.updates);
  file.metadata["config"] = origin.config;
  const ParamTable& params = model.table();
  for (size_t i = 0; i < params.size(); ++i) {
    file.tensors.push_back(
        tensor_of(file_name_of(model, params[i].name), params[i], model.parameters().view(i)));
  }
  const ParamTable& buffers = model.buffer_table();
  for (size_t i = 0; i < buffers.size(); ++i) {
    const std::string& name = buffers[i].name;
    file.tensors.push_back(
        tensor_of(file_name_of(model, name), buffers[i], model.buffers().view(i)));
    if (name.ends_with(kRunningVar)) {
      // PyTorch's BatchNorm counts its training forwards; dctrain folds the
      // statistics in once per update.
      file.tensors.push_back(SafeTensor::int64(
          name.substr(0, name.size() - kRunningVar.size()) + ".num_batches_tracked", {},
          {origin.updates}));
    }
  }
  return file;
}

std::string bert_config_json(const BertTiny& model) {
  const BertTinyConfig& c = model.config();
  return fmt::format(
      R"({{
  "architectures": ["BertForMaskedLM"],
  "model_type": "bert",
  "vocab_size": {},
  "hidden_size": {},
  "num_hidden_layers": {},
  "num_attention_heads": {},
  "intermediate_size": {},
  "hidden_act": "gelu",
  "hidden_dropout_prob": {},
  "attention_probs_dropout_prob": {},
  "max_position_embeddings": {},
  "type_vocab_size": {},
  "initializer_range": 0.02,
  "layer_norm_eps": {},
  "pad_token_id": 0,
  "position_embedding_type": "absolute",
  "tie_word_embeddings": true,
  "torch_dtype": "float32"
}}
)",
      c.vocab_size, c.hidden, c.layers, c.heads, c.ffn, c.dropout, c.dropout, c.max_positions,
      c.type_vocab_size, kBertLayerNormEps);
}

std::vector<std::filesystem::path> write_model_file(const std::filesystem::path& path, Model& model,
                                                    const ModelFileOrigin& origin) {
  std::vector<std::filesystem::path> written = {path};
  write_safetensors(path, export_model(model, origin));
  if (const BertTiny* bert = as_bert(model)) {
    written.push_back(path.parent_path() / "config.json");
    write_file_atomically(written.back(), bert_config_json(*bert));
  }
  return written;
}

void import_model(const SafeTensors& file, const std::string& origin, Model& model) {
  std::map<std::string, const SafeTensor*> by_name;
  for (const SafeTensor& t : file.tensors) by_name[current_name(t.name)] = &t;
  const std::string model_name = model.name();
  std::vector<Assignment> assignments;
  const auto take = [&](const ParamEntry& entry, Arena& arena, size_t index) {
    const std::string name = file_name_of(model, entry.name);
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      throw std::runtime_error(fmt::format(
          "{}: no tensor '{}' [{}], which model {} needs (the file names model '{}', {} "
          "tensors)",
          origin, name, fmt::join(entry.shape, ", "), model_name,
          file.metadata.count("model") != 0 ? file.metadata.at("model") : "?",
          file.tensors.size()));
    }
    const SafeTensor& t = *it->second;
    if (t.dtype != SafeDtype::kF32) {
      throw std::runtime_error(fmt::format("{}: tensor '{}' is {}; model {} needs F32", origin,
                                           t.name, dtype_word(t.dtype), model_name));
    }
    if (t.shape != entry.shape) {
      throw std::runtime_error(fmt::format("{}: tensor '{}' is [{}], but model {} has it [{}]",
                                           origin, t.name, fmt::join(t.shape, ", "), model_name,
                                           fmt::join(entry.shape, ", ")));
    }
    assignments.push_back({arena.view(index), &t});
    by_name.erase(it);
  };
  for (size_t i = 0; i < model.table().size(); ++i) take(model.table()[i], model.parameters(), i);
  for (size_t i = 0; i < model.buffer_table().size(); ++i) {
    take(model.buffer_table()[i], model.buffers(), i);
  }
  // BERT's decoder weight and bias, where a file keeps them, must be the
  // embeddings and the bias they are tied to.
  for (const auto& [tied, to] :
       {std::pair<std::string, std::string>{"cls.predictions.decoder.weight",
                                            "bert.embeddings.word_embeddings.weight"},
        {"cls.predictions.decoder.bias", "cls.predictions.bias"}}) {
    const auto it = by_name.find(tied);
    if (it == by_name.end() || as_bert(model) == nullptr) continue;
    const SafeTensor* other = file.find(to);
    if (other == nullptr || it->second->shape != other->shape ||
        it->second->dtype != other->dtype ||
        std::memcmp(it->second->values.data(), other->values.data(),
                    other->values.size() * sizeof(float)) != 0) {
      throw std::runtime_error(fmt::format(
          "{}: tensor '{}' differs from '{}'; dctrain's BERT ties the two (the file's model "
          "does not)",
          origin, tied, to));
    }
    by_name.erase(it);
  }
  for (const SafeTensor& t : file.tensors) {
    const std::string name = current_name(t.name);
    if (!by_name.contains(name) || kept_beside_weights(name)) continue;
    throw std::runtime_error(fmt::format(
        "{}: tensor '{}' [{}] is not one of model {}'s (a file of another model or size?)", origin,
        t.name, fmt::join(t.shape, ", "), model_name));
  }
  for (const Assignment& a : assignments) {
    std::copy(a.source->values.begin(), a.source->values.end(), a.target.begin());
  }
}

void read_model_file(const std::filesystem::path& path, Model& model) {
  import_model(read_safetensors(path), path.string(), model);
}

}  // namespace dctrain
