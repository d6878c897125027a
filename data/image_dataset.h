// Labelled images by global sample id: raw uint8 pixels in memory, normalised
// (and, for training, augmented) only when a micro-batch is filled.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_formats.h"

namespace dctrain {

// What fill() does to a raw image. Pixels become (pixel / 255 - mean) / std
// per channel, as torchvision's ToTensor + Normalize compute them in float.
struct ImageTransform {
  std::vector<float> mean;    // (C)
  std::vector<float> stddev;  // (C)
  // Training only: a random HxW crop of the image zero-padded by this many
  // pixels on every side (torchvision RandomCrop(padding=...): the padding is
  // raw 0, so after normalisation it reads -mean/std), then ...
  int crop_padding = 0;
  // ... a horizontal flip with probability 0.5.
  bool horizontal_flip = false;
};

// The recipes' normalisations.
ImageTransform mnist_transform();          // mean 0.1307, std 0.3081
ImageTransform fashion_mnist_transform();  // mean 0.2860, std 0.3530
// Per-channel mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616);
// with `augment`, 4-pixel padded random crop and horizontal flip.
ImageTransform cifar10_transform(bool augment);

class ImageDataset final : public Dataset {
 public:
  // `name` heads describe(), e.g. "cifar10 train". Throws DataError when the
  // transform does not fit the images (channel count, non-positive std).
  ImageDataset(std::string name, ImageSet images, int classes, ImageTransform transform);

  std::string describe() const override;
  uint64_t size() const override { return images_.size(); }
  SampleShape shape() const override;
  // Augmentation (context.train only) draws from
  // Rng({context.seed, context.epoch, id, kAugmentStream}): a pure function
  // of (seed, epoch, id), whatever the batch or the process.
  void fill(std::span<const uint64_t> ids, const SampleContext& context, Batch& out) const override;

  const ImageSet& images() const { return images_; }
  const ImageTransform& transform() const { return transform_; }

  static constexpr uint64_t kAugmentStream = 0x6175676d656e74ULL;  // "augment"

 private:
  std::string name_;
  ImageSet images_;
  int classes_;
  ImageTransform transform_;
  // (C, 256): the normalised value of every raw pixel value, per channel.
  std::vector<float> lookup_;
};

}  // namespace dctrain
