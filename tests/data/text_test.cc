// The tokenizer (basic + WordPiece), the vocab's errors, corpus splitting,
// packing into sequences and MLM masking.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "data/dataset_factory.h"
#include "data/io.h"
#include "data/text_mlm.h"
#include "data/wordpiece.h"
#include "tests/data/data_test_util.h"

namespace dctrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

WordpieceVocab small_vocab() {
  return WordpieceVocab::from_tokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "want",   "##want", "##ed",  "wa",
       "un",    "runn",  "##ing", ",",     "##aff",  "##able", "hello",  "world", "!",
       "cafe",  "naive", ".",     "'",     "t",      "don",    "a",      "b"},
      "small vocab");
}

TEST(Wordpiece, GreedyLongestMatchFirst) {
  // The example of BERT's WordpieceTokenizer docstring.
  const WordpieceVocab vocab = small_vocab();
  const BertTokenizer tokenizer(vocab);
  EXPECT_THAT(tokenizer.tokenize("unaffable"), ElementsAre("un", "##aff", "##able"));
  EXPECT_THAT(tokenizer.tokenize("unwanted running"),
              ElementsAre("un", "##want", "##ed", "runn", "##ing"));
  // No full segmentation: the whole word is one [UNK].
  EXPECT_THAT(tokenizer.tokenize("unwantedX wanted"), ElementsAre("[UNK]", "want", "##ed"));
  const std::vector<int32_t> ids = tokenizer.encode("unaffable, hello");
  EXPECT_THAT(ids, ElementsAre(9, 13, 14, 12, 15));
}

TEST(Wordpiece, BasicTokenizerLowersStripsAccentsAndSplitsPunctuation) {
  const WordpieceVocab vocab = small_vocab();
  const BertTokenizer tokenizer(vocab);
  EXPECT_THAT(tokenizer.basic_tokenize(" Hello,\tWORLD!\n"),
              ElementsAre("hello", ",", "world", "!"));
  EXPECT_THAT(tokenizer.basic_tokenize("Café naïve ÀÉÎÕÜ Łódź"),
              ElementsAre("cafe", "naive", "aeiou", "łodz"));
  // Combining marks (NFD input) are dropped too; control characters vanish.
  EXPECT_THAT(tokenizer.basic_tokenize("cafe\xcc\x81 a\x01"
                                       "b"),
              ElementsAre("cafe", "ab"));
  EXPECT_THAT(tokenizer.basic_tokenize("don't"), ElementsAre("don", "'", "t"));
  // CJK characters stand alone; general punctuation splits.
  EXPECT_THAT(tokenizer.basic_tokenize("ab\xe4\xb8\xad\xe6\x96\x87"
                                       "cd\xe2\x80\xa6"),
              ElementsAre("ab", "\xe4\xb8\xad", "\xe6\x96\x87", "cd", "\xe2\x80\xa6"));
  // Non-breaking space separates words; invalid UTF-8 bytes are dropped.
  EXPECT_THAT(tokenizer.basic_tokenize("a\xc2\xa0"
                                       "b \xff"
                                       "a"),
              ElementsAre("a", "b", "a"));
  EXPECT_THAT(tokenizer.tokenize("Don't, Café!"), ElementsAre("don", "'", "t", ",", "cafe", "!"));
}

TEST(Wordpiece, OverlongWordIsUnknown) {
  const WordpieceVocab vocab = small_vocab();
  const BertTokenizer tokenizer(vocab, 5);
  EXPECT_THAT(tokenizer.tokenize("wanted ababab"), ElementsAre("[UNK]", "[UNK]"));
}

TEST(WordpieceVocab, ErrorsNameTheFile) {
  test::TempDir dir;
  test::write_text(dir / "vocab.txt", "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nhello\r\n");
  try {
    WordpieceVocab::from_file(dir / "vocab.txt");
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("vocab.txt"));
    EXPECT_THAT(e.what(), HasSubstr("no [MASK] token"));
    EXPECT_THAT(e.what(), HasSubstr("bert-base-uncased/vocab.txt"));
  }
  test::write_text(dir / "empty.txt", "");
  EXPECT_THROW(WordpieceVocab::from_file(dir / "empty.txt"), DataError);
  EXPECT_THROW(WordpieceVocab::from_file(dir / "absent.txt"), DataError);
  test::write_text(dir / "ok.txt", "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nhello\r\n");
  const WordpieceVocab vocab = WordpieceVocab::from_file(dir / "ok.txt");
  EXPECT_EQ(vocab.size(), 6);
  EXPECT_EQ(vocab.find("hello"), 5);
  EXPECT_EQ(vocab.special().mask, 4);
}

TEST(Corpus, SplitsNinetyTenAtTheNextNewline) {
  const std::string text = "0123456789\nabcdefghij\nklmnopqrst\nuvwxyz\n";  // 40 bytes
  const CorpusSplit split = split_corpus(text, 0.1);
  // 90% of 40 = 36, inside "uvwxyz": the cut moves past the last newline.
  EXPECT_EQ(split.train, text);
  EXPECT_EQ(split.eval, "");
  const CorpusSplit half = split_corpus(text, 0.5);  // 20 -> after "abcdefghij\n"
  EXPECT_EQ(half.train, "0123456789\nabcdefghij\n");
  EXPECT_EQ(half.eval, "klmnopqrst\nuvwxyz\n");
}

// A dataset over a stream 5, 6, 7, ... with a small vocab of 40 ids.
TextMlmDataset counting_dataset(int tokens, MlmOptions options) {
  std::vector<std::string> names = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int i = 5; i < 40; ++i) names.push_back(std::string(1, 'w').append(std::to_string(i)));
  auto vocab = std::make_shared<const WordpieceVocab>(
      WordpieceVocab::from_tokens(std::move(names), "counting"));
  std::vector<int32_t> stream(static_cast<size_t>(tokens));
  for (int i = 0; i < tokens; ++i) stream[static_cast<size_t>(i)] = 5 + i % 35;
  return TextMlmDataset("counting", vocab, std::move(stream), options);
}

TEST(TextMlm, PacksClsTokensSepAndDropsTheTrailingPartial) {
  MlmOptions options;
  options.masked_per_sequence = 0;
  const TextMlmDataset dataset = counting_dataset(126 * 3 + 50, options);
  EXPECT_EQ(dataset.size(), 3u);
  EXPECT_EQ(dataset.shape().seq_len, 128);
  EXPECT_EQ(dataset.shape().vocab_size, 40);
  const std::vector<uint64_t> ids = {2, 0};
  const Batch b = dataset.make_batch(ids, {});
  ASSERT_EQ(b.tokens.size(), 256u);
  EXPECT_EQ(b.tokens[0], 2);    // [CLS]
  EXPECT_EQ(b.tokens[127], 3);  // [SEP]
  EXPECT_EQ(b.tokens[1], 5 + (2 * 126) % 35);
  EXPECT_EQ(b.tokens[128 + 1], 5);
  EXPECT_EQ(b.tokens[128 + 126], 5 + 125 % 35);
  for (size_t i = 0; i < 256; ++i) {
    EXPECT_EQ(b.labels[i], kIgnoreLabel);
    EXPECT_EQ(b.attention[i], 1);
    EXPECT_EQ(b.token_types[i], 0);
  }
  EXPECT_THROW(counting_dataset(125, options), DataError);
  options.masked_per_sequence = 127;
  EXPECT_THROW(counting_dataset(1000, options), DataError);
}

TEST(TextMlm, MasksExactlyNineteenWithEightyTenTen) {
  const TextMlmDataset dataset = counting_dataset(126 * 200, MlmOptions{});
  std::vector<uint64_t> ids(200);
  for (uint64_t i = 0; i < 200; ++i) ids[i] = i;
  const SampleContext context{.seed = 3, .epoch = 1, .train = true};
  const Batch b = dataset.make_batch(ids, context);
  const Batch original =
      counting_dataset(126 * 200, {.masked_per_sequence = 0}).make_batch(ids, context);
  int masked = 0, mask_token = 0, unchanged = 0, random = 0;
  for (int n = 0; n < 200; ++n) {
    int in_sequence = 0;
    for (int t = 0; t < 128; ++t) {
      const size_t i = static_cast<size_t>(n) * 128 + static_cast<size_t>(t);
      if (b.labels[i] == kIgnoreLabel) {
        EXPECT_EQ(b.tokens[i], original.tokens[i]);
        continue;
      }
      ASSERT_GE(t, 1);  // never [CLS] or [SEP]
      ASSERT_LE(t, 126);
      EXPECT_EQ(b.labels[i], original.tokens[i]);
      ++in_sequence;
      if (b.tokens[i] == 4)
        ++mask_token;
      else if (b.tokens[i] == original.tokens[i])
        ++unchanged;
      else
        ++random;
      ASSERT_LT(b.tokens[i], 40);
      ASSERT_GE(b.tokens[i], 0);
    }
    EXPECT_EQ(in_sequence, 19);
    masked += in_sequence;
  }
  ASSERT_EQ(masked, 3800);
  // 3800 draws: binomial standard deviations 25 (80%) and 18 (10%); 5 sigma bounds.
  EXPECT_NEAR(mask_token, 3040, 125);
  // A random id equal to the original counts as unchanged: 10% + 10% / 40.
  EXPECT_NEAR(unchanged, 380 + 9.5, 90);
  EXPECT_NEAR(random, 380 - 9.5, 90);
}

TEST(TextMlm, FreshMasksEachEpochFixedMasksForEval) {
  const TextMlmDataset dataset = counting_dataset(126 * 10, MlmOptions{});
  const std::vector<uint64_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const Batch e0 = dataset.make_batch(ids, {.seed = 1, .epoch = 0, .train = true});
  const Batch e0_again = dataset.make_batch(ids, {.seed = 1, .epoch = 0, .train = true});
  const Batch e1 = dataset.make_batch(ids, {.seed = 1, .epoch = 1, .train = true});
  EXPECT_EQ(e0.tokens, e0_again.tokens);
  EXPECT_EQ(e0.labels, e0_again.labels);
  EXPECT_NE(e0.labels, e1.labels);
  const Batch eval0 = dataset.make_batch(ids, {.seed = 1, .epoch = 0, .train = false});
  const Batch eval7 = dataset.make_batch(ids, {.seed = 1, .epoch = 7, .train = false});
  EXPECT_EQ(eval0.tokens, eval7.tokens);
  EXPECT_EQ(eval0.labels, eval7.labels);
  // A sample's masks do not depend on its batch mates or position.
  const std::vector<uint64_t> one = {6};
  const Batch alone = dataset.make_batch(one, {.seed = 1, .epoch = 1, .train = true});
  EXPECT_EQ(test::sample_hash(alone, 0), test::sample_hash(e1, 6));
}

TEST(TextMlm, FactoryReadsCorpusAndVocabFromTheDataRoot) {
  test::TempDir dir;
  test::write_text(dir / "bert-base-uncased/vocab.txt",
                   "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\nc\n,\n.\n##b\n");
  std::string text;
  for (int i = 0; i < 400; ++i) text += "A b, c. ab\n";
  test::write_text(dir / "text/tiny/input.txt", text);
  DatasetSpec spec;
  spec.kind = "text-mlm";
  spec.corpus = "tiny";
  spec.seq_len = 16;
  spec.masked_per_sequence = 2;
  const auto train = make_dataset(spec, dir.path());
  // 400 lines of 11 bytes, 7 tokens each (a b , c . a ##b). 90% of 4400 is
  // 3960, the first byte of line 361: the cut moves to the end of that line.
  EXPECT_EQ(train->size(), 361u * 7 / 14);
  spec.split = Split::kEval;
  const auto eval = make_dataset(spec, dir.path());
  EXPECT_EQ(eval->size(), 39u * 7 / 14);
  EXPECT_EQ(eval->shape().vocab_size, 11);

  test::write_text(dir / "text/blank/input.txt", " \n\n\t\n");
  spec.corpus = "blank";
  try {
    make_dataset(spec, dir.path());
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("text/blank/input.txt"));
    EXPECT_THAT(e.what(), HasSubstr("empty corpus"));
  }
  spec.corpus = "tiny";
  spec.vocab = "missing/vocab.txt";
  EXPECT_THROW(make_dataset(spec, dir.path()), DataError);
}

}  // namespace
}  // namespace dctrain
