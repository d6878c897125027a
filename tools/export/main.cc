// dctrain-export: a checkpoint's model as a safetensors file under the
// names PyTorch and Hugging Face users load with (runtime/model_file.h).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/exit_codes.h"
#include "runtime/checkpoint.h"
#include "runtime/model_file.h"
#include "runtime/replica.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"
#include "runtime/text_format.h"

namespace fs = std::filesystem;

namespace dctrain {
namespace {

// The sizes the model took from its data: the checkpoint's, or (a
// checkpoint of an earlier build) the dataset's under `data_dir`.
SampleShape model_input(const v1::CheckpointHeader& header, const std::string& data_dir,
                        const fs::path& checkpoint) {
  if (header.has_model_input()) return sample_shape_of(header.model_input());
  if (needs_data_root(header.config()) && data_dir.empty()) {
    throw std::runtime_error(fmt::format(
        "{} was written before checkpoints kept the model's input sizes; pass --data-dir DIR "
        "(the workers' data root) to read them from the run's dataset",
        checkpoint.string()));
  }
  return open_dataset(header.config(), Split::kTrain, data_dir)->shape();
}

int export_checkpoint(const fs::path& source, const fs::path& out, const std::string& data_dir) {
  const fs::path checkpoint = fs::is_directory(source) ? checkpoint_path(source) : source;
  const v1::CheckpointHeader header = load_checkpoint_header(checkpoint);
  const v1::RunConfig& config = header.config();
  Replica replica(make_model(model_spec(config, model_input(header, data_dir, checkpoint), 1)),
                  replicated_optimizer(config));
  load_checkpoint_state(checkpoint, replica);
  if (!out.parent_path().empty()) fs::create_directories(out.parent_path());
  const std::vector<fs::path> written = write_model_file(
      out, replica.model(), {to_text(config), config.run_id(), header.optimizer_steps()});
  std::printf("%s: model %s after %lld updates, %zu parameters in %zu tensors (run %s)\n",
              out.c_str(), replica.model().name().c_str(),
              static_cast<long long>(header.optimizer_steps()), replica.parameter_count(),
              replica.model().table().size() + replica.model().buffer_table().size(),
              config.run_id().empty() ? "?" : config.run_id().c_str());
  for (size_t i = 1; i < written.size(); ++i) {
    std::printf("%s: its Hugging Face config (from_pretrained(\"%s\") loads the pair)\n",
                written[i].c_str(), out.parent_path().empty() ? "." : out.parent_path().c_str());
  }
  return kExitDone;
}

}  // namespace
}  // namespace dctrain

int main(int argc, char** argv) try {
  CLI::App app{
      "dctrain-export: writes a checkpoint's model as a safetensors file under the names "
      "PyTorch and Hugging Face users load with (BERT: BertForMaskedLM's, with a config.json "
      "beside it; ResNets: the CIFAR ResNet's, BatchNorm statistics included). A completed "
      "run writes RUN_DIR/model.safetensors itself; this reads any checkpoint, e.g. of a run "
      "still going or stopped early."};
  std::string source, out, data_dir;
  std::string log_level = "info";
  dctrain::add_common_options(app, "dctrain-export", log_level);
  app.add_option("source", source, "A run folder (its checkpoint.bin) or a checkpoint file")
      ->required();
  app.add_option("--out", out, "The file to write, e.g. model.safetensors")->required();
  app.add_option("--data-dir", data_dir,
                 "The workers' data root; only for checkpoints of builds before they kept the "
                 "model's input sizes");
  app.footer(
      "Then, in Python:\n"
      "  BertForMaskedLM.from_pretrained(FOLDER)              # BERT, with config.json\n"
      "  model.load_state_dict(safetensors.torch.load_file(FILE), strict=True)  # ResNet\n"
      "Or start a run from it: model { init_from: \"FILE\" } in the run config.");
  dctrain::add_examples(app,
                        {"dctrain-export runs/bert --out exported/model.safetensors",
                         "dctrain-export runs/resnet/checkpoint.bin --out resnet.safetensors"});
  if (const std::optional<int> status = dctrain::parse_command_line(app, argc, argv))
    return *status;
  return dctrain::export_checkpoint(source, out, data_dir);
} catch (const std::exception& e) {
  std::fprintf(stderr, "dctrain-export: %s\n", e.what());
  return dctrain::kExitFailed;
}
