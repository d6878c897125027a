// BERT's tokenizer: the basic tokenizer (text cleaning, lower-casing, accent
// stripping, punctuation and CJK splitting, as in Google's uncased BERT) and
// greedy longest-match-first WordPiece over a vocab file.
//
// Unicode coverage without ICU: UTF-8 is decoded (invalid bytes dropped);
// lower-casing and accent stripping handle ASCII, Latin-1, Latin Extended-A,
// combining diacritics (U+0300-036F), Greek and Cyrillic capitals; whitespace,
// control and punctuation classes cover ASCII, Latin-1, General Punctuation,
// CJK symbols and full-width forms. Other characters pass through unchanged
// (and usually become [UNK]). Plain English text is tokenised exactly as the
// reference implementation does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dctrain {

struct SpecialTokens {
  int32_t pad = 0, unk = 0, cls = 0, sep = 0, mask = 0;
};

class WordpieceVocab {
 public:
  // One token per line, id = line index ("\r\n" endings accepted). Throws
  // DataError naming the file when it is missing, empty, or lacks one of
  // [PAD] [UNK] [CLS] [SEP] [MASK].
  static WordpieceVocab from_file(const std::filesystem::path& path);
  // The same from tokens in memory; `source` names them in errors.
  static WordpieceVocab from_tokens(std::vector<std::string> tokens, const std::string& source);

  int size() const { return static_cast<int>(tokens_.size()); }
  // The id of `token`; the first one when the vocab lists it twice.
  std::optional<int32_t> find(std::string_view token) const;
  const std::string& token(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  const SpecialTokens& special() const { return special_; }
  const std::string& source() const { return source_; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::string source_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
  SpecialTokens special_;
};

class BertTokenizer {
 public:
  // Keeps a reference: `vocab` must outlive the tokenizer.
  explicit BertTokenizer(const WordpieceVocab& vocab, int max_chars_per_word = 100);

  // Basic tokens of `text` (UTF-8): cleaned, lower-cased, accents stripped,
  // split on whitespace and punctuation, CJK characters on their own.
  std::vector<std::string> basic_tokenize(std::string_view text) const;
  // WordPiece ids of one basic token, appended to `ids`: longest vocab prefix
  // first, continuations looked up as "##piece"; a token with no full
  // segmentation, or longer than max_chars_per_word, is one [UNK].
  void wordpiece(std::string_view word, std::vector<int32_t>& ids) const;
  // Basic tokenizer then WordPiece: the id stream of `text`, without
  // [CLS]/[SEP].
  std::vector<int32_t> encode(std::string_view text) const;
  // The same as piece strings ("un", "##aff", ...), for inspection and tests.
  std::vector<std::string> tokenize(std::string_view text) const;

 private:
  const WordpieceVocab& vocab_;
  int max_chars_per_word_;
};

}  // namespace dctrain
