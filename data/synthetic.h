// Datasets generated from a seed, so that training runs with no files at all.
//
// Images: ten classes, each a fixed smooth pattern of coloured blobs drawn
// from the seed; a sample is its class pattern shifted by up to 3 pixels,
// with random contrast and brightness and strong per-pixel Gaussian noise,
// stored as uint8 like a real dataset. Learnable by a small CNN, not by
// memorising pixels; see data/README.md for the accuracies measured.
//
// Text: a seeded lexicon of made-up words built from consonant-vowel
// syllables, a vocab in BERT's format (specials, punctuation, letters,
// syllables and their "##" continuations, the commoner whole words), and a
// corpus of sentences from a first-order Markov chain over the lexicon (each
// word has four likely successors), capitalised and punctuated. WordPiece
// splits the rarer words into syllable pieces; the next token is often
// predictable from its neighbours, so masked-token accuracy well above the
// unigram rate is reachable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/image_dataset.h"
#include "data/image_formats.h"

namespace dctrain {

struct SyntheticImageOptions {
  int channels = 3, height = 32, width = 32;
  int classes = 10;
  uint64_t samples = 10000;
  uint64_t seed = 0;
  bool eval = false;  // the eval split: other samples of the same classes
};

ImageSet generate_synthetic_images(const SyntheticImageOptions& options);
// Normalisation for the generated images: mean 0.5, std 0.25 per channel.
ImageTransform synthetic_image_transform(int channels);

struct SyntheticCorpus {
  std::vector<std::string> vocab;  // one token per entry, id = index; specials first
  std::string text;
};

// About `words` words of text; the same seed gives the same bytes.
SyntheticCorpus generate_synthetic_corpus(uint64_t seed, uint64_t words = 120000);

}  // namespace dctrain
