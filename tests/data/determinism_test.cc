// Augmentation and masking are pure functions of (seed, epoch, sample id):
// a second process, built from scratch and asked for the same samples in
// other batches and another order, produces bit-identical data.
//
// The test runs this binary again (/proc/self/exe) with only the disabled
// child test selected; the child prints one hash per sample.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "common/child_process.h"
#include "data/dataset_factory.h"
#include "data/image_dataset.h"
#include "data/synthetic.h"
#include "tests/data/data_test_util.h"

namespace dctrain {
namespace {

const std::filesystem::path kRoot = DCTRAIN_SHARED_DATA;

struct Case {
  std::string name;
  std::unique_ptr<Dataset> dataset;
  SampleContext context;
  uint64_t samples;
};

// Built from nothing but constants (and the real files where present), so
// both processes construct them independently.
std::vector<Case> cases() {
  std::vector<Case> list;
  SyntheticImageOptions images;
  images.samples = 200;
  images.seed = 3;
  list.push_back({"augmented-images",
                  std::make_unique<ImageDataset>("augmented", generate_synthetic_images(images), 10,
                                                 cifar10_transform(true)),
                  {.seed = 11, .epoch = 2, .train = true},
                  200});
  DatasetSpec text;
  text.kind = "synthetic-text";
  text.seed = 5;
  text.samples = 20000;
  list.push_back(
      {"masked-text", make_dataset(text, kRoot), {.seed = 11, .epoch = 4, .train = true}, 64});
  text.split = Split::kEval;
  list.push_back(
      {"eval-text", make_dataset(text, kRoot), {.seed = 11, .epoch = 9, .train = false}, 16});
  if (std::filesystem::exists(kRoot / "cifar-10-partial")) {
    DatasetSpec cifar;
    cifar.kind = "cifar10";
    list.push_back(
        {"cifar10", make_dataset(cifar, kRoot), {.seed = 1, .epoch = 3, .train = true}, 96});
  }
  return list;
}

// name -> id -> hash, filling batches of `batch` ids, in reverse when asked.
std::map<std::string, std::map<uint64_t, uint64_t>> hashes(size_t batch, bool reverse) {
  std::map<std::string, std::map<uint64_t, uint64_t>> out;
  for (const Case& c : cases()) {
    std::vector<uint64_t> ids;
    for (uint64_t i = 0; i < c.samples; ++i) ids.push_back(reverse ? c.samples - 1 - i : i);
    Batch b;
    for (size_t start = 0; start < ids.size(); start += batch) {
      const size_t n = std::min(batch, ids.size() - start);
      c.dataset->fill(std::span(ids).subspan(start, n), c.context, b);
      for (size_t k = 0; k < n; ++k) {
        out[c.name][ids[start + k]] = test::sample_hash(b, static_cast<int>(k));
      }
    }
  }
  return out;
}

TEST(CrossProcessDeterminism, DISABLED_ChildPrintsHashes) {
  for (const auto& [name, per_id] : hashes(7, true)) {
    for (const auto& [id, hash] : per_id) {
      std::printf("HASH %s %llu %llu\n", name.c_str(), static_cast<unsigned long long>(id),
                  static_cast<unsigned long long>(hash));
    }
  }
  std::fflush(stdout);
}

TEST(CrossProcessDeterminism, AnotherProcessProducesBitIdenticalSamples) {
  const auto mine = hashes(32, false);
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  ChildOptions options;
  options.argv = {self.string(), "--gtest_also_run_disabled_tests",
                  "--gtest_filter=CrossProcessDeterminism.DISABLED_ChildPrintsHashes"};
  const CommandResult child = run_command(std::move(options), std::chrono::seconds(300));
  ASSERT_TRUE(child.ok()) << "the child process failed (" << child.status.describe()
                          << (child.timed_out ? ", out of time" : "") << "):\n"
                          << child.output;
  std::map<std::string, std::map<uint64_t, uint64_t>> theirs;
  std::istringstream lines(child.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string tag, name;
    unsigned long long id = 0, hash = 0;
    if (in >> tag >> name >> id >> hash && tag == "HASH") theirs[name][id] = hash;
  }
  ASSERT_EQ(theirs.size(), mine.size());
  size_t compared = 0;
  for (const auto& [name, per_id] : mine) {
    ASSERT_EQ(theirs[name].size(), per_id.size()) << name;
    for (const auto& [id, hash] : per_id) {
      EXPECT_EQ(theirs[name][id], hash) << name << " sample " << id;
      ++compared;
    }
  }
  EXPECT_GE(compared, 280u);
  // The hashes are not all the same (they do depend on the sample).
  std::set<uint64_t> distinct;
  for (const auto& [id, hash] : mine.at("masked-text")) distinct.insert(hash);
  EXPECT_EQ(distinct.size(), mine.at("masked-text").size());
}

}  // namespace
}  // namespace dctrain
