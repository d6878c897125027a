// Checkpoints (runtime/checkpoint.h) of a coordinator's state: the saved run state (config with its
// kinds, the ledger in the middle of an epoch, counters, tensors) reads back as it was written; a
// checkpoint of the earlier format 1 is refused with a message naming the
// formats and what to do.
#include "runtime/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "coordinator/ledger.h"
#include "model/param_table.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"
#include "tests/testing/process.h"

namespace dctrain {
namespace {

v1::RunConfig small_config() {
  v1::RunConfig config = parse_run_config(R"(
    workers: 2 seed: 5
    model { name: "mlp" }
    dataset { synthetic_samples: 256 }
    optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
    step { global_batch: 32 micro_batch: 8 tau_policy: "auto" }
    delay { kind: "bimodal" probability: 0.1 stall_seconds: 0.5 }
    stop { max_steps: 20 })",
                                          "checkpoint_test");
  finalize_run_config(config);
  return config;
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Saved {
  std::filesystem::path dir;
  std::filesystem::path path;
  v1::RunConfig config;
  v1::LedgerState ledger;
  uint64_t parameters = 0;  // checksum of the saved replica's parameters
};

// A checkpoint of a run stopped with micro-batches requeued and in flight.
Saved save_mid_epoch(const std::string& name) {
  Saved saved;
  saved.dir = testing::fresh_dir(name);
  saved.path = checkpoint_path(saved.dir);
  saved.config = small_config();
  const auto train = open_dataset(saved.config, Split::kTrain, "");
  Replica replica(make_model(model_spec(saved.config, train->shape(), 1)),
                  saved.config.optimizer());
  saved.parameters = replica.parameter_checksum();

  Ledger ledger(train->size(), saved.config.seed(), true);
  const PlannedMicroBatch a = ledger.take(8, 0, 0);
  const PlannedMicroBatch b = ledger.take(8, 0, 1);
  ledger.take(8, 0, 1);
  ledger.complete(b.id);
  ledger.drop(a.id);
  saved.ledger = ledger.state();

  v1::CheckpointHeader header;
  *header.mutable_config() = saved.config;
  header.set_next_step(1);
  *header.mutable_ledger() = saved.ledger;
  header.mutable_totals()->set_steps(1);
  save_checkpoint(saved.path, header, replica);
  return saved;
}

TEST(Checkpoint, ReadsBackTheConfigTheLedgerAndTheTensors) {
  const Saved saved = save_mid_epoch("checkpoint-roundtrip");
  ASSERT_EQ(saved.ledger.requeued_size(), 1);
  ASSERT_EQ(saved.ledger.in_flight_size(), 1);

  const v1::CheckpointHeader header = load_checkpoint_header(saved.path);
  EXPECT_EQ(header.config().SerializeAsString(), saved.config.SerializeAsString());
  EXPECT_EQ(header.config().delay().kind(), v1::DELAY_BIMODAL);
  EXPECT_EQ(header.config().step().tau_policy(), v1::TAU_POLICY_AUTO);
  EXPECT_EQ(header.next_step(), 1u);
  EXPECT_EQ(header.totals().steps(), 1u);
  EXPECT_EQ(header.ledger().SerializeAsString(), saved.ledger.SerializeAsString());
  const Ledger restored = Ledger::restore(header.ledger());
  EXPECT_EQ(restored.state().SerializeAsString(), saved.ledger.SerializeAsString());

  // Another replica (another seed) gets the saved parameters.
  v1::RunConfig other = saved.config;
  other.set_seed(6);
  const auto train = open_dataset(other, Split::kTrain, "");
  Replica replica(make_model(model_spec(other, train->shape(), 1)), other.optimizer());
  ASSERT_NE(replica.parameter_checksum(), saved.parameters);
  load_checkpoint_state(saved.path, replica);
  EXPECT_EQ(replica.parameter_checksum(), saved.parameters);
  std::filesystem::remove_all(saved.dir);
}

TEST(Checkpoint, FormatOneFromEarlierBuildsIsRefusedNamingTheFormats) {
  const Saved saved = save_mid_epoch("checkpoint-format-one");
  // The same file as format 1 (u32 after the 8-byte magic), checksum made
  // valid again: what an earlier build's checkpoint looks like from outside.
  std::string bytes = read_bytes(saved.path);
  ASSERT_GT(bytes.size(), 20u);
  const uint32_t one = 1;
  std::memcpy(bytes.data() + 8, &one, sizeof one);
  const uint64_t sum = checksum(std::span<const float>(reinterpret_cast<const float*>(bytes.data()),
                                                       (bytes.size() - 8) / sizeof(float)));
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, sizeof sum);
  std::ofstream(saved.path, std::ios::binary | std::ios::trunc) << bytes;
  try {
    load_checkpoint_header(saved.path);
    FAIL() << "a format 1 checkpoint must be refused";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("has format 1, this build reads only format 2"), std::string::npos) << what;
    EXPECT_NE(what.find("an older dctrain"), std::string::npos) << what;
    EXPECT_NE(what.find("start the run again"), std::string::npos) << what;
    EXPECT_NE(what.find(saved.path.string()), std::string::npos) << what;
  }
  std::filesystem::remove_all(saved.dir);
}

// Found by fuzz/checkpoint_fuzz.cc: a header length near 2^64 wrapped
// around the bounds check and reached Protobuf as a negative size, which
// aborts the process; the file is refused as unreadable instead.
TEST(Checkpoint, HeaderLengthPastTheFileIsRefusedNotAborted) {
  const Saved saved = save_mid_epoch("checkpoint-huge-length");
  std::string bytes = read_bytes(saved.path);
  ASSERT_GT(bytes.size(), 28u);
  for (const uint64_t length : {~uint64_t{0}, ~uint64_t{0} - 11, uint64_t{bytes.size()}}) {
    std::memcpy(bytes.data() + 12, &length, sizeof length);  // after the magic and format
    const uint64_t sum = checksum(std::span<const float>(
        reinterpret_cast<const float*>(bytes.data()), (bytes.size() - 8) / sizeof(float)));
    std::memcpy(bytes.data() + bytes.size() - 8, &sum, sizeof sum);
    std::ofstream(saved.path, std::ios::binary | std::ios::trunc) << bytes;
    try {
      load_checkpoint_header(saved.path);
      FAIL() << "a header length of " << length << " must be refused";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("has an unreadable header"), std::string::npos)
          << e.what();
    }
  }
  std::filesystem::remove_all(saved.dir);
}

// Found by fuzz/checkpoint_fuzz.cc: a header with fewer tensor sizes than
// tensor names (checksum valid) made the state loader read past Protobuf's
// list, which aborts the process; the file is refused, naming both counts.
TEST(Checkpoint, AHeaderWithFewerSizesThanNamesIsRefusedNotAborted) {
  const Saved saved = save_mid_epoch("checkpoint-short-sizes");
  const std::string bytes = read_bytes(saved.path);
  uint64_t length = 0;
  std::memcpy(&length, bytes.data() + 12, sizeof length);  // after the magic and format
  v1::CheckpointHeader header;
  ASSERT_TRUE(header.ParseFromArray(bytes.data() + 20, static_cast<int>(length)));
  ASSERT_GT(header.tensor_counts_size(), 1);
  header.mutable_tensor_counts()->RemoveLast();
  const std::string head = header.SerializeAsString();
  std::string out = bytes.substr(0, 12);
  const uint64_t new_length = head.size();
  out.append(reinterpret_cast<const char*>(&new_length), sizeof new_length);
  out += head;
  while (out.size() % sizeof(float) != 0) out.push_back('\0');
  const size_t tensors_at = (20 + length + 3) / 4 * 4;
  out += bytes.substr(tensors_at, bytes.size() - 8 - tensors_at);
  const uint64_t sum = checksum(std::span<const float>(reinterpret_cast<const float*>(out.data()),
                                                       out.size() / sizeof(float)));
  out.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  std::ofstream(saved.path, std::ios::binary | std::ios::trunc) << out;
  const auto train = open_dataset(saved.config, Split::kTrain, "");
  Replica replica(make_model(model_spec(saved.config, train->shape(), 1)),
                  saved.config.optimizer());
  try {
    load_checkpoint_state(saved.path, replica);
    FAIL() << "a header with a size missing must be refused";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(
        what.find("names " + std::to_string(header.tensor_names_size()) + " tensors and gives " +
                  std::to_string(header.tensor_counts_size()) + " sizes"),
        std::string::npos)
        << what;
  }
  std::filesystem::remove_all(saved.dir);
}

}  // namespace
}  // namespace dctrain
