#include "data/image_dataset.h"

#include <fmt/core.h>

#include <stdexcept>

#include "common/random.h"
#include "data/io.h"

namespace dctrain {

ImageTransform mnist_transform() {
  return {{0.1307f}, {0.3081f}, 0, false};
}

ImageTransform fashion_mnist_transform() {
  return {{0.2860f}, {0.3530f}, 0, false};
}

ImageTransform cifar10_transform(bool augment) {
  ImageTransform t{{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}, 0, false};
  if (augment) {
    t.crop_padding = 4;
    t.horizontal_flip = true;
  }
  return t;
}

ImageDataset::ImageDataset(std::string name, ImageSet images, int classes, ImageTransform transform)
    : name_(std::move(name)),
      images_(std::move(images)),
      classes_(classes),
      transform_(std::move(transform)) {
  const auto channels = static_cast<size_t>(images_.channels);
  if (transform_.mean.size() != channels || transform_.stddev.size() != channels) {
    throw DataError(fmt::format("{}: normalisation has {} means and {} stds for {} channels", name_,
                                transform_.mean.size(), transform_.stddev.size(), channels));
  }
  if (images_.pixels.size() != images_.size() * images_.image_bytes()) {
    throw DataError(fmt::format("{}: {} pixel bytes for {} images of {}x{}x{}", name_,
                                images_.pixels.size(), images_.size(), images_.channels,
                                images_.height, images_.width));
  }
  if (transform_.crop_padding < 0) {
    throw DataError(fmt::format("{}: crop padding {} is negative", name_, transform_.crop_padding));
  }
  lookup_.resize(channels * 256);
  for (size_t c = 0; c < channels; ++c) {
    if (!(transform_.stddev[c] > 0.0f)) {
      throw DataError(fmt::format("{}: std of channel {} is {}, must be positive", name_, c,
                                  transform_.stddev[c]));
    }
    for (int v = 0; v < 256; ++v) {
      // Same float operations as ToTensor (x / 255) then Normalize ((x - m) / s).
      const float x = static_cast<float>(v) / 255.0f;
      lookup_[c * 256 + static_cast<size_t>(v)] = (x - transform_.mean[c]) / transform_.stddev[c];
    }
  }
}

std::string ImageDataset::describe() const {
  return fmt::format("{} ({} images {}x{}x{}, {} classes{})", name_, images_.size(),
                     images_.channels, images_.height, images_.width, classes_,
                     transform_.crop_padding > 0 || transform_.horizontal_flip
                         ? ", train augmentation: crop + flip"
                         : "");
}

SampleShape ImageDataset::shape() const {
  SampleShape s;
  s.kind = BatchKind::kImage;
  s.channels = images_.channels;
  s.height = images_.height;
  s.width = images_.width;
  s.classes = classes_;
  return s;
}

void ImageDataset::fill(std::span<const uint64_t> ids, const SampleContext& context,
                        Batch& out) const {
  const int channels = images_.channels, height = images_.height, width = images_.width;
  const size_t image_bytes = images_.image_bytes();
  out.kind = BatchKind::kImage;
  out.size = static_cast<int>(ids.size());
  out.channels = channels;
  out.height = height;
  out.width = width;
  out.images.resize(ids.size() * image_bytes);
  out.labels.resize(ids.size());
  out.seq_len = 0;
  out.tokens.clear();
  out.token_types.clear();
  out.attention.clear();
  const int pad = transform_.crop_padding;
  for (size_t n = 0; n < ids.size(); ++n) {
    const uint64_t id = ids[n];
    if (id >= images_.size()) {
      throw std::out_of_range(fmt::format("{}: sample id {} is not below the dataset size {}",
                                          name_, id, images_.size()));
    }
    out.labels[n] = images_.labels[id];
    // Crop offset (top, left) in the padded image, and the flip.
    int top = pad, left = pad;
    bool flip = false;
    if (context.train && (pad > 0 || transform_.horizontal_flip)) {
      Rng rng({context.seed, context.epoch, id, kAugmentStream});
      top = static_cast<int>(rng.below(2 * static_cast<uint64_t>(pad) + 1));
      left = static_cast<int>(rng.below(2 * static_cast<uint64_t>(pad) + 1));
      flip = transform_.horizontal_flip && rng.uniform_float() < 0.5f;
    }
    const int dy = top - pad, dx = left - pad;  // source = destination + (dy, dx)
    const uint8_t* image = images_.pixels.data() + id * image_bytes;
    float* dest = out.images.data() + n * image_bytes;  // (C, H, W)
    for (int c = 0; c < channels; ++c) {
      const float* lut = lookup_.data() + static_cast<size_t>(c) * 256;
      const float zero = lut[0];
      const uint8_t* plane = image + static_cast<size_t>(c) * height * width;
      float* dest_plane = dest + static_cast<size_t>(c) * height * width;
      for (int y = 0; y < height; ++y) {
        float* row = dest_plane + static_cast<size_t>(y) * width;
        const int sy = y + dy;
        if (sy < 0 || sy >= height) {
          for (int x = 0; x < width; ++x) row[x] = zero;
          continue;
        }
        const uint8_t* source = plane + static_cast<size_t>(sy) * width;
        for (int x = 0; x < width; ++x) {
          // After the crop, a flip reads column width - 1 - x of the crop.
          const int sx = (flip ? width - 1 - x : x) + dx;
          row[x] = (sx < 0 || sx >= width) ? zero : lut[source[sx]];
        }
      }
    }
  }
}

}  // namespace dctrain
