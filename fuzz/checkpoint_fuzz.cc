// The checkpoint reader (coordinator/checkpoint) as --resume uses it: the
// header, the ledger restored from it (Ledger::restore), and the tensors
// into a replica of the fuzz run's model. Any file is either read or
// refused with the exception the API names. The file ends in a checksum a
// mutation almost never keeps right, so the first input byte chooses: odd,
// the harness appends the right checksum to the rest (what a deliberately
// crafted file would carry); even, the rest is the file as it is.
// Property: a restored ledger's state() restores to the same state().
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include "coordinator/ledger.h"
#include "fuzz/harness.h"
#include "model/param_table.h"
#include "runtime/checkpoint.h"
#include "runtime/replica.h"
#include "tests/testing/softmax_model.h"

namespace dctrain::fuzz {
namespace {

std::string with_checksum(std::string bytes) {
  while (bytes.size() % sizeof(float) != 0) bytes.push_back('\0');
  const uint64_t sum = checksum(std::span<const float>(reinterpret_cast<const float*>(bytes.data()),
                                                       bytes.size() / sizeof(float)));
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  return bytes;
}

void check_ledger(const v1::CheckpointHeader& header) {
  std::optional<Ledger> ledger;
  try {
    ledger.emplace(Ledger::restore(header.ledger()));
  } catch (const std::invalid_argument&) {
    return;
  }
  const std::string state = ledger->state().SerializeAsString();
  const Ledger again = Ledger::restore(ledger->state());
  if (again.state().SerializeAsString() != state) {
    std::fprintf(stderr, "Ledger::restore(state()) is not the same ledger\n");
    std::abort();
  }
  ledger->drop_all_in_flight();  // as the coordinator does on resume
  (void)ledger->audit();
}

}  // namespace
}  // namespace dctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dctrain;
  // Once per process: where the file goes, and the model it must fit.
  static const std::filesystem::path path = fuzz::scratch_dir("checkpoint") / "checkpoint.bin";
  static const v1::RunConfig config = fuzz::run_config();
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) bytes = fuzz::with_checksum(std::move(bytes));
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  v1::CheckpointHeader header;
  try {
    header = load_checkpoint_header(path);
  } catch (const std::runtime_error&) {
    return 0;
  }
  fuzz::check_ledger(header);
  const v1::ModelConfig& m = config.model();
  Replica replica(
      std::make_unique<testing::SoftmaxModel>(
          m.image_channels() * m.image_height() * m.image_width(), m.num_classes(), config.seed()),
      config.optimizer());
  try {
    load_checkpoint_state(path, replica);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
