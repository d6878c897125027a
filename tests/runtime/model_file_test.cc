// The model file (runtime/model_file.h): export and import give back every
// bit, the names are the ones PyTorch and Hugging Face users load with
// (listed here by hand from those libraries' modules), a file of another
// model or size is refused naming the first differing tensor, and PyTorch
// loads the export into the independent reference modules and computes
// dctrain's logits (skipped without python3-torch).
#include "runtime/model_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/child_process.h"
#include "common/random.h"
#include "model/bert_tiny.h"
#include "model/image_classifier.h"
#include "tests/testing/paths.h"

namespace dctrain {
namespace {

ModelSpec resnet_spec(int depth, int width, uint64_t seed) {
  ModelSpec spec;
  spec.name = "resnet";
  spec.depth = depth;
  spec.width = width;
  spec.seed = seed;
  return spec;
}

ModelSpec bert_spec(int layers, int hidden, int heads, uint64_t seed) {
  ModelSpec spec;
  spec.name = "bert";
  spec.layers = layers;
  spec.hidden = hidden;
  spec.heads = heads;
  spec.intermediate = 4 * hidden;
  spec.vocab_size = 384;
  spec.max_seq_len = 16;
  spec.seed = seed;
  return spec;
}

// Every float of the arena drawn afresh, so that nothing equals an
// initialisation by chance (running variances kept positive).
void scramble(Arena& arena, uint64_t seed, bool positive) {
  Rng rng(seed);
  for (float& x : arena.flat()) {
    x = static_cast<float>(positive ? 0.5 + rng.uniform_double() : rng.normal() * 0.1);
  }
}

// BatchNorm's and LayerNorm's scale and shift, and BatchNorm's running
// statistics, of their own, near what training leaves (scales and running
// variances about 1, shifts and running means about 0).
void scramble_normalisation(Model& model, uint64_t seed) {
  Rng rng(seed);
  const auto fill = [&](const ParamTable& table, Arena& arena) {
    for (size_t i = 0; i < table.size(); ++i) {
      const std::string& name = table[i].name;
      const bool norm =
          name.find("bn") != std::string::npos || name.find("norm") != std::string::npos;
      const bool scale = name.ends_with("running_var") || (norm && name.ends_with(".weight"));
      const bool shift = name.ends_with("running_mean") || (norm && name.ends_with(".bias"));
      for (float& x : arena.view(i)) {
        if (scale) x = static_cast<float>(0.5 + rng.uniform_double());
        if (shift) x = static_cast<float>(0.1 * rng.normal());
      }
    }
  };
  fill(model.table(), model.parameters());
  fill(model.buffer_table(), model.buffers());
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::string> names_of(const SafeTensors& file) {
  std::vector<std::string> names;
  for (const SafeTensor& t : file.tensors) names.push_back(t.name);
  return names;
}

std::string refusal(const SafeTensors& file, Model& model) {
  try {
    import_model(file, "m.safetensors", model);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(imported)";
}

TEST(ModelFile, ExportAndImportGiveBackEveryBit) {
  for (const ModelSpec& spec : {resnet_spec(8, 4, 1), bert_spec(2, 32, 2, 1)}) {
    std::unique_ptr<Model> from = make_model(spec);
    scramble(from->parameters(), 7, false);
    if (from->buffer_table().total() > 0) scramble(from->buffers(), 8, true);
    const std::string bytes = encode_safetensors(export_model(*from, {"name: \"x\"", "run-1", 12}));

    ModelSpec other = spec;
    other.seed = 99;
    std::unique_ptr<Model> to = make_model(other);
    ASSERT_FALSE(same_bits(to->parameters().flat(), from->parameters().flat()));
    import_model(decode_safetensors(bytes, "m.safetensors"), "m.safetensors", *to);
    EXPECT_TRUE(same_bits(to->parameters().flat(), from->parameters().flat())) << spec.name;
    if (from->buffer_table().total() > 0) {
      EXPECT_TRUE(same_bits(to->buffers().flat(), from->buffers().flat())) << spec.name;
    }
    EXPECT_EQ(encode_safetensors(export_model(*to, {"name: \"x\"", "run-1", 12})), bytes)
        << "the imported model exports to the same bytes";
  }
}

TEST(ModelFile, BertTensorsHaveHuggingFacesBertForMaskedLMNamesAndShapes) {
  std::unique_ptr<Model> model = make_model(bert_spec(1, 32, 2, 1));
  const SafeTensors file = export_model(*model, {"cfg", "run-7", 3});
  // BertForMaskedLM's state dict for one layer, by hand, less the tied
  // cls.predictions.decoder.{weight,bias} (Hugging Face writes those once,
  // as the embeddings and cls.predictions.bias).
  const std::vector<std::string> expected = {
      "bert.embeddings.word_embeddings.weight",
      "bert.embeddings.position_embeddings.weight",
      "bert.embeddings.token_type_embeddings.weight",
      "bert.embeddings.LayerNorm.weight",
      "bert.embeddings.LayerNorm.bias",
      "bert.encoder.layer.0.attention.self.query.weight",
      "bert.encoder.layer.0.attention.self.query.bias",
      "bert.encoder.layer.0.attention.self.key.weight",
      "bert.encoder.layer.0.attention.self.key.bias",
      "bert.encoder.layer.0.attention.self.value.weight",
      "bert.encoder.layer.0.attention.self.value.bias",
      "bert.encoder.layer.0.attention.output.dense.weight",
      "bert.encoder.layer.0.attention.output.dense.bias",
      "bert.encoder.layer.0.attention.output.LayerNorm.weight",
      "bert.encoder.layer.0.attention.output.LayerNorm.bias",
      "bert.encoder.layer.0.intermediate.dense.weight",
      "bert.encoder.layer.0.intermediate.dense.bias",
      "bert.encoder.layer.0.output.dense.weight",
      "bert.encoder.layer.0.output.dense.bias",
      "bert.encoder.layer.0.output.LayerNorm.weight",
      "bert.encoder.layer.0.output.LayerNorm.bias",
      "cls.predictions.transform.dense.weight",
      "cls.predictions.transform.dense.bias",
      "cls.predictions.transform.LayerNorm.weight",
      "cls.predictions.transform.LayerNorm.bias",
      "cls.predictions.bias",
  };
  EXPECT_EQ(names_of(file), expected);
  // nn.Linear(in, out).weight is [out, in].
  EXPECT_EQ(file.find("bert.encoder.layer.0.intermediate.dense.weight")->shape,
            (std::vector<int64_t>{128, 32}));
  EXPECT_EQ(file.find("bert.encoder.layer.0.output.dense.weight")->shape,
            (std::vector<int64_t>{32, 128}));
  EXPECT_EQ(file.find("bert.embeddings.word_embeddings.weight")->shape,
            (std::vector<int64_t>{384, 32}));
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("model"), "bert-L1-H32-A2");
  EXPECT_EQ(file.metadata.at("run_id"), "run-7");
  EXPECT_EQ(file.metadata.at("config"), "cfg");

  const std::string config = bert_config_json(dynamic_cast<const BertTiny&>(*model));
  for (const char* field :
       {"\"architectures\": [\"BertForMaskedLM\"]", "\"model_type\": \"bert\"",
        "\"vocab_size\": 384,", "\"hidden_size\": 32,", "\"num_hidden_layers\": 1,",
        "\"num_attention_heads\": 2,", "\"intermediate_size\": 128,", "\"hidden_act\": \"gelu\"",
        "\"max_position_embeddings\": 16,", "\"type_vocab_size\": 2,", "\"layer_norm_eps\": 1e-12,",
        "\"tie_word_embeddings\": true"}) {
    EXPECT_NE(config.find(field), std::string::npos) << field << " in\n" << config;
  }
}

TEST(ModelFile, ResNetTensorsAreTheCifarResNetsStateDictWithBatchNormCounters) {
  std::unique_ptr<Model> model = make_model(resnet_spec(20, 16, 1));
  const SafeTensors file = export_model(*model, {"cfg", "run", 41});
  // The CIFAR ResNet-20's state dict: conv1 and bn1 (weight, bias,
  // running_mean, running_var, num_batches_tracked), 9 blocks of two convs
  // and two BatchNorms, linear: 1 + 5 + 9 * 12 + 2.
  EXPECT_EQ(file.tensors.size(), 116u);
  for (const char* name : {"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                           "bn1.running_var", "bn1.num_batches_tracked", "layer1.0.conv1.weight",
                           "layer2.0.bn1.running_var", "layer3.2.conv2.weight",
                           "layer3.2.bn2.num_batches_tracked", "linear.weight", "linear.bias"}) {
    EXPECT_NE(file.find(name), nullptr) << name;
  }
  EXPECT_EQ(file.find("layer2.0.conv1.weight")->shape, (std::vector<int64_t>{32, 16, 3, 3}));
  EXPECT_EQ(file.find("linear.weight")->shape, (std::vector<int64_t>{10, 64}));
  const SafeTensor& count = *file.find("layer3.2.bn2.num_batches_tracked");
  EXPECT_EQ(count.dtype, SafeDtype::kI64);
  EXPECT_TRUE(count.shape.empty());
  EXPECT_EQ(count.integers, std::vector<int64_t>{41});
}

TEST(ModelFile, AFileOfAnotherModelIsRefusedNamingTheFirstDifferingTensor) {
  std::unique_ptr<Model> resnet20 = make_model(resnet_spec(20, 16, 1));
  std::unique_ptr<Model> resnet32 = make_model(resnet_spec(32, 16, 1));
  std::unique_ptr<Model> narrow = make_model(resnet_spec(20, 8, 1));
  const SafeTensors file20 = export_model(*resnet20, {});
  const std::vector<float> before(resnet32->parameters().flat().begin(),
                                  resnet32->parameters().flat().end());

  // Deeper: the first block resnet20 lacks.
  EXPECT_NE(
      refusal(file20, *resnet32)
          .find("m.safetensors: no tensor 'layer1.3.conv1.weight' [16, 16, 3, 3], which model "
                "resnet32 needs"),
      std::string::npos)
      << refusal(file20, *resnet32);
  EXPECT_TRUE(same_bits(resnet32->parameters().flat(), before)) << "a refused file changes nothing";
  // Shallower: the first tensor of the file the model has not.
  EXPECT_NE(refusal(export_model(*resnet32, {}), *resnet20)
                .find("tensor 'layer1.3.conv1.weight' [16, 16, 3, 3] is not one of model "
                      "resnet20's"),
            std::string::npos)
      << refusal(export_model(*resnet32, {}), *resnet20);
  // Narrower: the very first tensor's shape.
  EXPECT_NE(
      refusal(file20, *narrow)
          .find(
              "tensor 'conv1.weight' is [16, 3, 3, 3], but model resnet20-w8 has it [8, 3, 3, 3]"),
      std::string::npos)
      << refusal(file20, *narrow);
  // Another dtype.
  SafeTensors ints = file20;
  SafeTensor& bias = ints.tensors[2];
  ASSERT_EQ(bias.name, "bn1.bias");
  bias.dtype = SafeDtype::kI64;
  bias.integers.assign(bias.values.size(), 1);
  bias.values.clear();
  EXPECT_NE(refusal(ints, *resnet20).find("tensor 'bn1.bias' is I64; model resnet20 needs F32"),
            std::string::npos)
      << refusal(ints, *resnet20);
  // BERT into a ResNet: the first tensor is missing.
  std::unique_ptr<Model> bert = make_model(bert_spec(1, 32, 2, 1));
  EXPECT_NE(refusal(export_model(*bert, {}), *resnet20).find("no tensor 'conv1.weight'"),
            std::string::npos);
}

TEST(ModelFile, HuggingFacesExtrasAreAcceptedAndAnUntiedDecoderIsRefused) {
  std::unique_ptr<Model> from = make_model(bert_spec(1, 32, 2, 1));
  scramble(from->parameters(), 3, false);
  SafeTensors file = export_model(*from, {});
  // What a Hugging Face checkpoint may hold beside dctrain's tensors.
  const SafeTensor embeddings = *file.find("bert.embeddings.word_embeddings.weight");
  file.tensors.push_back({"cls.predictions.decoder.weight", embeddings.shape, embeddings.values});
  file.tensors.push_back(
      {"cls.predictions.decoder.bias", {384}, file.find("cls.predictions.bias")->values});
  file.tensors.push_back(
      SafeTensor::int64("bert.embeddings.position_ids", {1, 16}, std::vector<int64_t>(16, 0)));
  file.tensors.push_back({"bert.pooler.dense.weight", {32, 32}, std::vector<float>(32 * 32, 0.5f)});
  file.tensors.push_back({"cls.seq_relationship.bias", {2}, {0.0f, 1.0f}});
  for (SafeTensor& t : file.tensors) {  // older checkpoints' LayerNorm names
    if (t.name == "bert.embeddings.LayerNorm.weight") t.name = "bert.embeddings.LayerNorm.gamma";
    if (t.name == "bert.embeddings.LayerNorm.bias") t.name = "bert.embeddings.LayerNorm.beta";
  }
  std::unique_ptr<Model> to = make_model(bert_spec(1, 32, 2, 2));
  import_model(file, "hf.safetensors", *to);
  EXPECT_TRUE(same_bits(to->parameters().flat(), from->parameters().flat()));

  for (SafeTensor& t : file.tensors) {
    if (t.name == "cls.predictions.decoder.weight") t.values[5] += 1.0f;
  }
  EXPECT_NE(refusal(file, *to).find("tensor 'cls.predictions.decoder.weight' differs from "
                                    "'bert.embeddings.word_embeddings.weight'"),
            std::string::npos)
      << refusal(file, *to);
}

// ---- PyTorch loads the export (skipped without python3-torch) ------------

bool have_torch() {
  ChildOptions options;
  options.argv = {"/usr/bin/python3", "-c", "import torch"};
  return std::filesystem::exists("/usr/bin/python3") &&
         run_command(std::move(options), std::chrono::seconds(120)).ok();
}

template <typename T>
void write_raw(const std::filesystem::path& path, const std::vector<T>& values) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(values.data()),
             static_cast<std::streamsize>(values.size() * sizeof(T)));
}

std::vector<double> read_doubles(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<double> out(bytes.size() / sizeof(double));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(double));
  return out;
}

// Runs tests/fixtures/load_export.py; returns its logits.
std::vector<double> pytorch_logits(const std::string& kind, const std::filesystem::path& dir) {
  ChildOptions options;
  options.argv = {"/usr/bin/python3",
                  (testing::source_dir() / "tests/fixtures/load_export.py").string(),
                  kind,
                  (dir / "model.safetensors").string(),
                  (dir / "input.bin").string(),
                  (dir / "logits.bin").string()};
  const CommandResult r = run_command(std::move(options), std::chrono::seconds(300));
  EXPECT_TRUE(r.ok()) << r.output;
  std::printf("%s", r.output.c_str());
  return read_doubles(dir / "logits.bin");
}

// Largest |ours - theirs|, relative to the largest |theirs|; `classes`
// logits a row.
double relative_difference(std::span<const float> ours, const std::vector<double>& theirs,
                           size_t classes) {
  EXPECT_EQ(ours.size(), theirs.size());
  double worst = 0.0, scale = 0.0, spread = 0.0;
  for (size_t i = 0; i < std::min(ours.size(), theirs.size()); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(ours[i]) - theirs[i]));
    scale = std::max(scale, std::abs(theirs[i]));
    spread = std::max(spread, std::abs(theirs[i] - theirs[i % classes]));
  }
  // Rows that differ: the inputs reach the logits (not a dead network whose
  // logits are the last bias).
  std::printf("%zu logits, largest |logit| %.4g, largest difference between rows %.4g\n",
              theirs.size(), scale, spread);
  EXPECT_GT(spread, 0.01 * scale) << "the rows' logits should differ";
  return worst / std::max(scale, 1e-30);
}

TEST(ModelFile, PyTorchLoadsTheExportedResNet20AndComputesTheSameLogits) {
  if (!have_torch()) GTEST_SKIP() << "python3-torch is not installed (tools/setup.sh --torch)";
  std::unique_ptr<Model> model = make_model(resnet_spec(20, 16, 5));
  scramble_normalisation(*model, 6);
  const testing::ScratchDir dir("model-file-resnet");
  write_model_file(dir / "model.safetensors", *model, {"cfg", "run", 2});
  Batch batch;
  batch.size = 4;
  batch.channels = 3;
  batch.height = batch.width = 32;
  Rng rng(11);
  batch.images.resize(4 * 3 * 32 * 32);
  for (float& x : batch.images) x = static_cast<float>(rng.normal());
  batch.labels = {0, 3, 7, 9};
  model->evaluate(batch);
  write_raw(dir / "input.bin", batch.images);
  const double difference =
      relative_difference(classifier_logits(*model), pytorch_logits("resnet20", dir), 10);
  std::printf("resnet20: logits differ from PyTorch's (float64) by %.3g of their largest\n",
              difference);
  EXPECT_LT(difference, 1e-5);
}

TEST(ModelFile, PyTorchLoadsTheExportedBertByItsHuggingFaceNamesAndComputesTheSameLogits) {
  if (!have_torch()) GTEST_SKIP() << "python3-torch is not installed (tools/setup.sh --torch)";
  // bert-tiny's sizes (the reference module's), a small vocabulary.
  ModelSpec spec = bert_spec(2, 128, 2, 5);
  spec.intermediate = 512;
  std::unique_ptr<Model> model = make_model(spec);
  scramble(model->parameters(), 9, false);
  scramble_normalisation(*model, 10);
  const testing::ScratchDir dir("model-file-bert");
  write_model_file(dir / "model.safetensors", *model, {"cfg", "run", 2});
  EXPECT_TRUE(std::filesystem::exists(dir / "config.json"));
  const int n = 3, t = 16;
  Batch batch;
  batch.kind = BatchKind::kTokens;
  batch.size = n;
  batch.seq_len = t;
  Rng rng(12);
  std::vector<int32_t> ints = {n, t, 384, 16};
  for (int i = 0; i < n * t; ++i) batch.tokens.push_back(static_cast<int32_t>(rng.below(384)));
  for (int i = 0; i < n * t; ++i) batch.token_types.push_back(i % t >= t / 2 ? 1 : 0);
  for (int i = 0; i < n * t; ++i) batch.attention.push_back(i >= 2 * t + 12 ? 0 : 1);
  batch.labels.assign(n * t, kIgnoreLabel);
  for (int i : {1, 5, 9, 17, 20, 30, 33, 40})
    batch.labels[i] = static_cast<int32_t>(rng.below(384));
  model->evaluate(batch);
  ints.insert(ints.end(), batch.tokens.begin(), batch.tokens.end());
  ints.insert(ints.end(), batch.token_types.begin(), batch.token_types.end());
  ints.insert(ints.end(), batch.attention.begin(), batch.attention.end());
  ints.insert(ints.end(), batch.labels.begin(), batch.labels.end());
  write_raw(dir / "input.bin", ints);
  const double difference = relative_difference(
      dynamic_cast<const BertTiny&>(*model).masked_logits(), pytorch_logits("bert", dir), 384);
  std::printf("bert-tiny: logits differ from PyTorch's (float64) by %.3g of their largest\n",
              difference);
  EXPECT_LT(difference, 1e-5);
}

}  // namespace
}  // namespace dctrain
