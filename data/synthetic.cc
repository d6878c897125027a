#include "data/synthetic.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <stdexcept>

#include "common/random.h"
#include "data/io.h"

namespace dctrain {
namespace {

constexpr uint64_t kPatternStream = 0x7061747465726eULL;  // "pattern"
constexpr uint64_t kSampleStream = 0x73616d706c65ULL;     // "sample"
constexpr uint64_t kLexiconStream = 0x6c657869636f6eULL;  // "lexicon"
constexpr uint64_t kChainStream = 0x636861696eULL;        // "chain"
constexpr uint64_t kTextStream = 0x74657874ULL;           // "text"

// (C, H, W) class pattern in [0, 1], background 0.5: a few coloured blobs.
std::vector<float> class_pattern(const SyntheticImageOptions& o, int label) {
  Rng rng({o.seed, kPatternStream, static_cast<uint64_t>(label)});
  const int h = o.height, w = o.width;
  std::vector<float> pattern(static_cast<size_t>(o.channels) * h * w, 0.5f);
  constexpr int kBlobs = 4;
  // Weaker colour differences with more channels: each channel is evidence.
  const double amplitude_scale = 0.4 / std::sqrt(static_cast<double>(o.channels));
  for (int b = 0; b < kBlobs; ++b) {
    const double cy = rng.uniform_double() * h, cx = rng.uniform_double() * w;
    const double radius = (0.12 + 0.15 * rng.uniform_double()) * std::min(h, w);
    std::vector<double> amplitude(static_cast<size_t>(o.channels));
    for (double& a : amplitude) a = (rng.uniform_double() * 2.0 - 1.0) * amplitude_scale;
    for (int c = 0; c < o.channels; ++c) {
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          const double d2 = (y - cy) * (y - cy) + (x - cx) * (x - cx);
          pattern[(static_cast<size_t>(c) * h + y) * w + x] += static_cast<float>(
              amplitude[static_cast<size_t>(c)] * std::exp(-d2 / (2.0 * radius * radius)));
        }
      }
    }
  }
  return pattern;
}

}  // namespace

ImageSet generate_synthetic_images(const SyntheticImageOptions& o) {
  if (o.channels < 1 || o.height < 4 || o.width < 4 || o.classes < 2 || o.classes > 256 ||
      o.samples == 0) {
    throw DataError(
        fmt::format("synthetic-images: invalid shape {}x{}x{}, {} classes, {} samples "
                    "— use at least 1x4x4, 2 to 256 classes, 1 sample",
                    o.channels, o.height, o.width, o.classes, o.samples));
  }
  std::vector<std::vector<float>> patterns;
  for (int k = 0; k < o.classes; ++k) patterns.push_back(class_pattern(o, k));
  ImageSet set;
  set.channels = o.channels;
  set.height = o.height;
  set.width = o.width;
  set.labels.resize(o.samples);
  set.pixels.resize(o.samples * set.image_bytes());
  const int h = o.height, w = o.width;
  constexpr int kShift = 3;
  constexpr double kNoise = 0.25;
  for (uint64_t i = 0; i < o.samples; ++i) {
    Rng rng({o.seed, kSampleStream, o.eval ? 1u : 0u, i});
    const auto label = static_cast<int>(rng.below(static_cast<uint64_t>(o.classes)));
    set.labels[i] = static_cast<uint8_t>(label);
    const int dy = static_cast<int>(rng.below(2 * kShift + 1)) - kShift;
    const int dx = static_cast<int>(rng.below(2 * kShift + 1)) - kShift;
    const double contrast = 0.6 + 0.8 * rng.uniform_double();
    const double brightness = (rng.uniform_double() * 2.0 - 1.0) * 0.1;
    const std::vector<float>& pattern = patterns[static_cast<size_t>(label)];
    uint8_t* image = set.pixels.data() + i * set.image_bytes();
    for (int c = 0; c < o.channels; ++c) {
      for (int y = 0; y < h; ++y) {
        const int sy = std::clamp(y - dy, 0, h - 1);
        for (int x = 0; x < w; ++x) {
          const int sx = std::clamp(x - dx, 0, w - 1);
          const double p = pattern[(static_cast<size_t>(c) * h + sy) * w + sx];
          const double v = 0.5 + contrast * (p - 0.5) + brightness + kNoise * rng.normal();
          image[(static_cast<size_t>(c) * h + y) * w + x] =
              static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 1.0) * 255.0));
        }
      }
    }
  }
  return set;
}

ImageTransform synthetic_image_transform(int channels) {
  ImageTransform t;
  t.mean.assign(static_cast<size_t>(channels), 0.5f);
  t.stddev.assign(static_cast<size_t>(channels), 0.25f);
  return t;
}

SyntheticCorpus generate_synthetic_corpus(uint64_t seed, uint64_t words) {
  constexpr std::string_view kConsonants = "bdfgklmnprstvz";
  constexpr std::string_view kVowels = "aeiou";
  constexpr size_t kLexicon = 600, kWholeWords = 250, kSuccessors = 4;
  constexpr double kSuccessorWeight[kSuccessors] = {0.55, 0.25, 0.15, 0.05};

  std::vector<std::string> syllables;
  for (char c : kConsonants) {
    for (char v : kVowels) syllables.push_back(std::string{c, v});
  }
  // The lexicon: distinct words of 1 to 3 syllables.
  Rng lexicon_rng({seed, kLexiconStream});
  std::vector<std::string> lexicon;
  std::set<std::string> seen;
  while (lexicon.size() < kLexicon) {
    const int length = 1 + static_cast<int>(lexicon_rng.below(3));
    std::string word;
    for (int s = 0; s < length; ++s) word += syllables[lexicon_rng.below(syllables.size())];
    if (seen.insert(word).second) lexicon.push_back(word);
  }

  SyntheticCorpus corpus;
  corpus.vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "!"};
  for (char c = 'a'; c <= 'z'; ++c) corpus.vocab.push_back(std::string(1, c));
  for (char c = 'a'; c <= 'z'; ++c) corpus.vocab.push_back("##" + std::string(1, c));
  for (const auto& s : syllables) corpus.vocab.push_back(s);
  for (const auto& s : syllables) corpus.vocab.push_back("##" + s);
  std::set<std::string> in_vocab(corpus.vocab.begin(), corpus.vocab.end());
  for (size_t i = 0; i < kWholeWords; ++i) {
    if (in_vocab.insert(lexicon[i]).second) corpus.vocab.push_back(lexicon[i]);
  }

  // Sentences from a Markov chain: word -> one of its successors.
  std::vector<std::array<size_t, kSuccessors>> successors(kLexicon);
  for (size_t i = 0; i < kLexicon; ++i) {
    Rng rng({seed, kChainStream, i});
    for (auto& s : successors[i]) s = rng.below(kLexicon);
  }
  Rng rng({seed, kTextStream});
  auto next_word = [&](size_t word) {
    double u = rng.uniform_double();
    for (size_t k = 0; k < kSuccessors; ++k) {
      if (u < kSuccessorWeight[k]) return successors[word][k];
      u -= kSuccessorWeight[k];
    }
    return successors[word][kSuccessors - 1];
  };
  std::string& text = corpus.text;
  uint64_t written = 0;
  while (written < words) {
    const auto length = 5 + rng.below(10);
    // Sentence starts favour the first words (Zipf-like: the minimum of two draws).
    size_t word = std::min(rng.below(kLexicon), rng.below(kLexicon));
    for (uint64_t k = 0; k < length; ++k) {
      std::string token = lexicon[word];
      if (k == 0) token[0] = static_cast<char>(token[0] - 'a' + 'A');
      text += token;
      ++written;
      if (k + 1 < length) {
        if (rng.uniform_double() < 0.08) text += ',';
        text += ' ';
        word = next_word(word);
      }
    }
    const double end = rng.uniform_double();
    text += end < 0.7 ? '.' : end < 0.9 ? '?' : '!';
    text += rng.below(3) == 0 ? '\n' : ' ';
  }
  text += '\n';
  return corpus;
}

}  // namespace dctrain
