// The image loaders against small files written here in the real formats,
// their errors on bad input, normalisation and augmentation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "data/dataset_factory.h"
#include "data/image_dataset.h"
#include "data/image_formats.h"
#include "data/io.h"
#include "tests/data/data_test_util.h"

namespace dctrain {
namespace {

using test::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Expects `body` to throw DataError whose message contains every fragment.
template <typename F>
void expect_data_error(F body, std::initializer_list<std::string> fragments) {
  try {
    body();
    ADD_FAILURE() << "no DataError thrown";
  } catch (const DataError& e) {
    for (const auto& f : fragments) EXPECT_THAT(e.what(), HasSubstr(f));
  }
}

TEST(Cifar10, ReadsAnyNumberOfFilesAndRecords) {
  TempDir dir;
  test::write_file(dir / "a.bin", test::cifar_records(3, 0));
  test::write_file(dir / "b.bin", test::cifar_records(5, 3));
  const ImageSet set = read_cifar10({dir / "a.bin", dir / "b.bin"});
  ASSERT_EQ(set.size(), 8u);
  EXPECT_EQ(set.channels, 3);
  EXPECT_EQ(set.height, 32);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(set.labels[static_cast<size_t>(r)], r % 10);
    // Record r, channel 2 (blue), row 5, column 7.
    EXPECT_EQ(set.pixels[static_cast<size_t>(r) * 3072 + 2 * 1024 + 5 * 32 + 7],
              static_cast<uint8_t>((r * 13 + 100 + 15 + 7) % 256));
  }
}

TEST(Cifar10, TruncatedRecordNamesFileAndHints) {
  TempDir dir;
  std::vector<uint8_t> bytes = test::cifar_records(2);
  bytes.resize(bytes.size() - 100);
  test::write_file(dir / "data_batch_1.bin", bytes);
  expect_data_error([&] { read_cifar10({dir / "data_batch_1.bin"}); },
                    {"data_batch_1.bin", "6046 bytes", "not a multiple of the 3073", "truncated"});
}

TEST(Cifar10, MissingFileAndBadLabel) {
  TempDir dir;
  expect_data_error([&] { read_cifar10({dir / "nope.bin"}); }, {"nope.bin", "not found"});
  std::vector<uint8_t> bytes = test::cifar_records(2);
  bytes[3073] = 42;
  test::write_file(dir / "bad.bin", bytes);
  expect_data_error([&] { read_cifar10({dir / "bad.bin"}); }, {"bad.bin", "record 1", "label 42"});
}

TEST(Idx, ReadsGzipAndPlainIdentically) {
  TempDir dir;
  const std::vector<uint8_t> images = test::idx_images(6, 28, 28);
  const std::vector<uint8_t> labels = test::idx_labels({5, 0, 4, 1, 9, 2});
  test::write_file(dir / "i", images);
  test::write_file(dir / "l", labels);
  test::write_file(dir / "i.gz", test::gzip_bytes(images));
  test::write_file(dir / "l.gz", test::gzip_bytes(labels));
  const ImageSet plain = read_idx(dir / "i", dir / "l");
  const ImageSet gz = read_idx(dir / "i.gz", dir / "l.gz");
  ASSERT_EQ(plain.size(), 6u);
  EXPECT_EQ(plain.channels, 1);
  EXPECT_EQ(plain.height, 28);
  EXPECT_EQ(plain.width, 28);
  EXPECT_EQ(plain.labels, (std::vector<uint8_t>{5, 0, 4, 1, 9, 2}));
  EXPECT_EQ(plain.pixels[3 * 784 + 10 * 28 + 4], (3 * 31 + 70 + 4) % 256);
  EXPECT_EQ(plain.pixels, gz.pixels);
  EXPECT_EQ(plain.labels, gz.labels);
}

TEST(Idx, ErrorsNameTheFileAndWhatIsWrong) {
  TempDir dir;
  const std::vector<uint8_t> images = test::idx_images(4, 28, 28);
  const std::vector<uint8_t> labels = test::idx_labels({1, 2, 3, 4});
  test::write_file(dir / "images", images);
  test::write_file(dir / "labels", labels);
  // Wrong magic: the pair swapped.
  expect_data_error([&] { read_idx(dir / "labels", dir / "images"); },
                    {"labels", "IDX magic is 0x00000801, expected 0x00000803"});
  // Truncated pixels.
  std::vector<uint8_t> cut(images.begin(), images.end() - 10);
  test::write_file(dir / "cut", cut);
  expect_data_error([&] { read_idx(dir / "cut", dir / "labels"); },
                    {"cut", "truncated", "3136 bytes", "3126"});
  // Count mismatch.
  test::write_file(dir / "three", test::idx_labels({1, 2, 3}));
  expect_data_error([&] { read_idx(dir / "images", dir / "three"); },
                    {"4 images", "3 labels", "not a pair"});
  // Missing.
  expect_data_error([&] { read_idx(dir / "absent.gz", dir / "labels"); },
                    {"absent.gz", "not found"});
  // Corrupt gzip: flip bytes in the deflate stream.
  std::vector<uint8_t> gz = test::gzip_bytes(images);
  for (size_t i = 12; i < 40; ++i) gz[i] ^= 0x5a;
  test::write_file(dir / "corrupt.gz", gz);
  expect_data_error([&] { read_idx(dir / "corrupt.gz", dir / "labels"); },
                    {"corrupt.gz", "corrupt gzip"});
  // Truncated gzip.
  std::vector<uint8_t> short_gz = test::gzip_bytes(images);
  short_gz.resize(short_gz.size() / 2);
  test::write_file(dir / "short.gz", short_gz);
  expect_data_error([&] { read_idx(dir / "short.gz", dir / "labels"); }, {"short.gz", "truncated"});
  // Named .gz but not gzip.
  test::write_file(dir / "fake.gz", images);
  expect_data_error([&] { read_idx(dir / "fake.gz", dir / "labels"); }, {"fake.gz", "gzip magic"});
}

TEST(ImageDataset, NormalisesLikeToTensorThenNormalize) {
  ImageSet set;
  set.channels = 3;
  set.height = 2;
  set.width = 2;
  set.labels = {7};
  set.pixels = {0, 255, 128, 64, 1, 2, 3, 4, 10, 20, 30, 40};
  ImageDataset dataset("t", set, 10, cifar10_transform(false));
  const std::vector<uint64_t> ids = {0};
  const Batch b = dataset.make_batch(ids, {});
  ASSERT_EQ(b.images.size(), 12u);
  EXPECT_EQ(b.labels[0], 7);
  const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, stddev[3] = {0.2470f, 0.2435f, 0.2616f};
  for (int c = 0; c < 3; ++c) {
    for (int k = 0; k < 4; ++k) {
      const auto i = static_cast<size_t>(c * 4 + k);
      const float expected = (static_cast<float>(set.pixels[i]) / 255.0f - mean[c]) / stddev[c];
      EXPECT_EQ(b.images[i], expected);
    }
  }
  EXPECT_NEAR(b.images[0], -0.4914 / 0.2470, 1e-6);
}

TEST(ImageDataset, CifarAugmentationIsAPaddedCropAndFlipOfTheNormalisedImage) {
  TempDir dir;
  test::write_file(dir / "cifar-10-partial/data_batch_1.bin", test::cifar_records(20));
  DatasetSpec spec;
  spec.kind = "cifar10";
  const auto dataset = make_dataset(spec, dir.path());
  const auto& plain = dynamic_cast<const ImageDataset&>(*dataset);
  std::vector<uint64_t> ids(20);
  for (uint64_t i = 0; i < 20; ++i) ids[i] = i;
  const Batch reference = dataset->make_batch(ids, {.seed = 1, .epoch = 0, .train = false});
  const float zero[3] = {-0.4914f / 0.2470f, -0.4822f / 0.2435f, -0.4465f / 0.2616f};
  std::set<std::pair<int, int>> offsets;
  int flips = 0, draws = 0;
  for (uint64_t epoch = 0; epoch < 40; ++epoch) {
    const Batch b = dataset->make_batch(ids, {.seed = 1, .epoch = epoch, .train = true});
    for (size_t n = 0; n < ids.size(); ++n) {
      const float* out = b.images.data() + n * 3072;
      const float* src = reference.images.data() + n * 3072;
      // Find the (dy, dx, flip) that explains the output: exactly one should.
      int matches = 0;
      for (int dy = -4; dy <= 4; ++dy) {
        for (int dx = -4; dx <= 4; ++dx) {
          for (int flip = 0; flip < 2; ++flip) {
            bool same = true;
            for (int c = 0; c < 3 && same; ++c)
              for (int y = 0; y < 32 && same; ++y)
                for (int x = 0; x < 32 && same; ++x) {
                  const int sy = y + dy, sx = (flip ? 31 - x : x) + dx;
                  const bool inside = sy >= 0 && sy < 32 && sx >= 0 && sx < 32;
                  const float expected = inside ? src[c * 1024 + sy * 32 + sx] : zero[c];
                  if (std::abs(out[c * 1024 + y * 32 + x] - expected) > 1e-6f) same = false;
                }
            if (same) {
              ++matches;
              offsets.insert({dy, dx});
              flips += flip;
            }
          }
        }
      }
      EXPECT_EQ(matches, 1) << "epoch " << epoch << " sample " << n;
      ++draws;
    }
  }
  EXPECT_EQ(offsets.size(), 81u);  // every crop offset occurs in 800 draws
  EXPECT_NEAR(static_cast<double>(flips) / draws, 0.5, 0.06);
  EXPECT_THAT(plain.describe(), HasSubstr("20 images"));
}

TEST(ImageDataset, AugmentationDependsOnlyOnSeedEpochAndId) {
  ImageSet set;
  set.channels = 3;
  set.height = set.width = 32;
  set.labels.assign(64, 1);
  set.pixels.resize(64 * 3072);
  for (size_t i = 0; i < set.pixels.size(); ++i)
    set.pixels[i] = static_cast<uint8_t>(i * 7919 % 251);
  ImageDataset dataset("t", set, 10, cifar10_transform(true));
  const std::vector<uint64_t> forward = {3, 9, 27, 40}, other = {40, 1, 27, 3, 9};
  const SampleContext context{.seed = 5, .epoch = 2, .train = true};
  const Batch a = dataset.make_batch(forward, context);
  const Batch b = dataset.make_batch(other, context);
  EXPECT_EQ(test::sample_hash(a, 0), test::sample_hash(b, 3));  // id 3
  EXPECT_EQ(test::sample_hash(a, 3), test::sample_hash(b, 0));  // id 40
  const Batch next_epoch = dataset.make_batch(forward, {.seed = 5, .epoch = 3, .train = true});
  int changed = 0;
  for (int n = 0; n < 4; ++n)
    changed += test::sample_hash(a, n) != test::sample_hash(next_epoch, n);
  EXPECT_GE(changed, 2);  // a fixed crop for all four by chance is (1/162)^... negligible
  const std::vector<uint64_t> bad = {64};
  EXPECT_THROW(dataset.make_batch(bad, context), std::out_of_range);
}

TEST(DatasetFactory, MnistFromADataRootWithPlainOrGzipFiles) {
  TempDir dir;
  test::write_file(dir / "mnist/train-images-idx3-ubyte.gz",
                   test::gzip_bytes(test::idx_images(5, 28, 28)));
  test::write_file(dir / "mnist/train-labels-idx1-ubyte.gz",
                   test::gzip_bytes(test::idx_labels({5, 0, 4, 1, 9})));
  test::write_file(dir / "mnist/t10k-images-idx3-ubyte", test::idx_images(2, 28, 28));
  test::write_file(dir / "mnist/t10k-labels-idx1-ubyte", test::idx_labels({7, 2}));
  DatasetSpec spec;
  spec.kind = "mnist";
  const auto train = make_dataset(spec, dir.path());
  EXPECT_EQ(train->size(), 5u);
  const SampleShape shape = train->shape();
  EXPECT_EQ(shape.channels, 1);
  EXPECT_EQ(shape.height, 28);
  EXPECT_EQ(shape.classes, 10);
  spec.split = Split::kEval;
  const auto eval = make_dataset(spec, dir.path());
  EXPECT_EQ(eval->size(), 2u);
  const std::vector<uint64_t> ids = {1};
  const Batch b = eval->make_batch(ids, {.train = false});
  EXPECT_EQ(b.labels[0], 2);
  EXPECT_FLOAT_EQ(b.images[0], (31.0f / 255.0f - 0.1307f) / 0.3081f);
  spec.kind = "fashion-mnist";
  expect_data_error([&] { make_dataset(spec, dir.path()); },
                    {"fashion-mnist/t10k-images-idx3-ubyte.gz", "not found"});
  spec.kind = "cifar10";
  expect_data_error([&] { make_dataset(spec, dir.path()); },
                    {"cifar-10-batches-bin", "cifar-10-partial", "synthetic-images"});
  spec.kind = "imagenet";
  EXPECT_THROW(make_dataset(spec, dir.path()), std::invalid_argument);
}

}  // namespace
}  // namespace dctrain
