// Model FLOPs per sample (Model::forward_flops_per_sample), against counts
// done by hand from the layer shapes: 2 per multiply-add of every
// convolution and matrix product.
#include <gtest/gtest.h>

#include "model/model.h"

namespace dctrain {
namespace {

TEST(ModelFlops, TheMlpIsItsTwoMatrixProducts) {
  ModelSpec spec;
  spec.name = "mlp";
  spec.image_channels = 1;
  spec.image_height = spec.image_width = 28;
  // fc1 784 x 256 + fc2 256 x 10 = 203,264 multiply-adds.
  EXPECT_DOUBLE_EQ(make_model(spec)->forward_flops_per_sample(0), 406'528.0);
  // Another input size changes fc1 only: 64 x 256 + 256 x 10.
  spec.image_height = spec.image_width = 8;
  EXPECT_DOUBLE_EQ(make_model(spec)->forward_flops_per_sample(0), 2.0 * (64 * 256 + 256 * 10));
}

TEST(ModelFlops, ResNet20IsFortyMillionMultiplyAdds) {
  ModelSpec spec;
  spec.name = "resnet20";  // 3 x 32 x 32, 10 classes
  // conv1 3 -> 16 at 32 x 32; stage 1: 6 convs 16 -> 16 at 32 x 32; stage
  // 2: 16 -> 32 then 5 of 32 -> 32 at 16 x 16; stage 3: 32 -> 64 then 5 of
  // 64 -> 64 at 8 x 8 (3 x 3 kernels; the shortcuts pad, no conv); the
  // linear 64 -> 10.
  const double macs = 16.0 * 3 * 9 * 1024 + 6.0 * 16 * 16 * 9 * 1024 + 32.0 * 16 * 9 * 256 +
                      5.0 * 32 * 32 * 9 * 256 + 64.0 * 32 * 9 * 64 + 5.0 * 64 * 64 * 9 * 64 +
                      64.0 * 10;
  EXPECT_DOUBLE_EQ(macs, 40'551'040.0);  // the figure published for ResNet-20 on CIFAR-10
  EXPECT_DOUBLE_EQ(make_model(spec)->forward_flops_per_sample(0), 2.0 * macs);
}

TEST(ModelFlops, BertTinyCountsItsEncoderAndTheHeadOnTheMaskedRowsOnly) {
  ModelSpec spec;
  spec.name = "bert-tiny";  // 2 layers, hidden 128, ffn 512, vocab 30,522
  spec.max_seq_len = 128;
  const double t = 128, h = 128, ffn = 512, vocab = 30522;
  // Per layer: Q, K, V and the output projection, the scores and the
  // weighted sum over 128 positions, the feed-forward's two products.
  const double layer = 4 * t * h * h + 2 * t * t * h + 2 * t * h * ffn;
  const double head_row = h * h + h * vocab;  // dense, then the decoder
  const std::unique_ptr<Model> model = make_model(spec);
  EXPECT_DOUBLE_EQ(model->forward_flops_per_sample(19), 2 * (2 * layer + 19 * head_row));
  EXPECT_DOUBLE_EQ(model->forward_flops_per_sample(19), 266'522'112.0);
  EXPECT_DOUBLE_EQ(model->forward_flops_per_sample(20) - model->forward_flops_per_sample(19),
                   2 * head_row)
      << "each masked row costs one row of the head";
}

}  // namespace
}  // namespace dctrain
