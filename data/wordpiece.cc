#include "data/wordpiece.h"

#include <fmt/core.h>

#include <algorithm>

#include "data/io.h"

namespace dctrain {
namespace {

// ---- UTF-8 ----

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    int extra = 0;
    char32_t cp = 0;
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    } else if ((b0 & 0xe0) == 0xc0) {
      extra = 1;
      cp = b0 & 0x1f;
    } else if ((b0 & 0xf0) == 0xe0) {
      extra = 2;
      cp = b0 & 0x0f;
    } else if ((b0 & 0xf8) == 0xf0) {
      extra = 3;
      cp = b0 & 0x07;
    } else {
      ++i;  // stray continuation or invalid lead byte: dropped
      continue;
    }
    if (i + static_cast<size_t>(extra) >= n) break;  // truncated sequence at the end
    bool valid = true;
    for (int k = 1; k <= extra; ++k) {
      const auto b = static_cast<uint8_t>(text[i + static_cast<size_t>(k)]);
      if ((b & 0xc0) != 0x80) {
        valid = false;
        break;
      }
      cp = (cp << 6) | (b & 0x3f);
    }
    if (!valid) {
      ++i;
      continue;
    }
    i += static_cast<size_t>(extra) + 1;
    out.push_back(cp);
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// ---- character classes (BERT's _is_whitespace, _is_control, _is_punctuation) ----

bool in(char32_t cp, char32_t lo, char32_t hi) {
  return cp >= lo && cp <= hi;
}

bool is_whitespace(char32_t cp) {
  // Space, \t, \n, \r and the Zs category.
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == 0x00a0 || cp == 0x1680 ||
         in(cp, 0x2000, 0x200a) || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

bool is_control(char32_t cp) {
  // Cc and Cf, except \t \n \r which count as whitespace.
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  return cp < 0x20 || in(cp, 0x7f, 0x9f) || cp == 0x00ad || in(cp, 0x0600, 0x0605) ||
         cp == 0x061c || cp == 0x06dd || cp == 0x070f || in(cp, 0x200b, 0x200f) ||
         in(cp, 0x202a, 0x202e) || in(cp, 0x2060, 0x2064) || in(cp, 0x2066, 0x206f) ||
         cp == 0xfeff || in(cp, 0xfff9, 0xfffb);
}

bool is_punctuation(char32_t cp) {
  // All non-alphanumeric ASCII counts, as in BERT, plus the P* categories.
  if (in(cp, 33, 47) || in(cp, 58, 64) || in(cp, 91, 96) || in(cp, 123, 126)) return true;
  return cp == 0x00a1 || cp == 0x00a7 || cp == 0x00ab || cp == 0x00b6 || cp == 0x00b7 ||
         cp == 0x00bb || cp == 0x00bf || cp == 0x037e || cp == 0x0387 || in(cp, 0x2010, 0x2027) ||
         in(cp, 0x2030, 0x2043) || in(cp, 0x2045, 0x2051) || in(cp, 0x2053, 0x205e) ||
         in(cp, 0x3001, 0x3003) || in(cp, 0x3008, 0x3011) || in(cp, 0x3014, 0x301f) ||
         in(cp, 0xff01, 0xff03) || in(cp, 0xff05, 0xff0a) || in(cp, 0xff0c, 0xff0f) ||
         in(cp, 0xff1a, 0xff1b) || in(cp, 0xff1f, 0xff20) || in(cp, 0xff3b, 0xff3d) ||
         cp == 0xff3f || cp == 0xff5b || cp == 0xff5d || in(cp, 0xff5f, 0xff65);
}

bool is_cjk(char32_t cp) {
  return in(cp, 0x4e00, 0x9fff) || in(cp, 0x3400, 0x4dbf) || in(cp, 0x20000, 0x2a6df) ||
         in(cp, 0x2a700, 0x2b73f) || in(cp, 0x2b740, 0x2b81f) || in(cp, 0x2b820, 0x2ceaf) ||
         in(cp, 0xf900, 0xfaff) || in(cp, 0x2f800, 0x2fa1f);
}

bool is_combining_mark(char32_t cp) {
  return in(cp, 0x0300, 0x036f);
}

char32_t to_lower(char32_t cp) {
  if (in(cp, 'A', 'Z')) return cp + 0x20;
  if (cp < 0x80) return cp;
  if (in(cp, 0x00c0, 0x00de) && cp != 0x00d7) return cp + 0x20;
  if (in(cp, 0x0100, 0x017f)) {
    if (cp == 0x0130) return 'i';  // İ lower-cases to i + U+0307, whose mark is stripped
    if (cp == 0x0178) return 0x00ff;
    const bool even_upper = in(cp, 0x0100, 0x0137) || in(cp, 0x014a, 0x0177);
    const bool odd_upper = in(cp, 0x0139, 0x0148) || in(cp, 0x0179, 0x017e);
    if (even_upper && cp % 2 == 0) return cp + 1;
    if (odd_upper && cp % 2 == 1) return cp + 1;
    return cp;
  }
  if (in(cp, 0x0391, 0x03a9) && cp != 0x03a2) return cp + 0x20;  // Greek capitals
  if (in(cp, 0x0410, 0x042f)) return cp + 0x20;                  // Cyrillic А-Я
  if (in(cp, 0x0400, 0x040f)) return cp + 0x50;                  // Cyrillic Ѐ-Џ
  return cp;
}

// NFD base letter of Latin-1 (U+00C0-00FF) and Latin Extended-A
// (U+0100-017F) letters with diacritics; '-' where there is none.
constexpr char kLatin1Base[] =
    "AAAAAA-CEEEEIIII"   // C0
    "-NOOOOO--UUUUY--"   // D0
    "aaaaaa-ceeeeiiii"   // E0
    "-nooooo--uuuuy-y";  // F0
constexpr char kLatinExtendedABase[] =
    "AaAaAaCcCcCcCcDd"   // 0100
    "--EeEeEeEeEeGgGg"   // 0110
    "GgGgHh--IiIiIiIi"   // 0120
    "I---JjKk-LlLlLl-"   // 0130
    "---NnNnNn---OoOo"   // 0140
    "Oo--RrRrRrSsSsSs"   // 0150
    "SsTtTt--UuUuUuUu"   // 0160
    "UuUuWwYyYZzZzZz-";  // 0170

// Accent stripping: the NFD decomposition without its combining marks.
char32_t strip_accent(char32_t cp) {
  char base = '-';
  if (in(cp, 0x00c0, 0x00ff))
    base = kLatin1Base[cp - 0x00c0];
  else if (in(cp, 0x0100, 0x017f))
    base = kLatinExtendedABase[cp - 0x0100];
  else
    return cp;
  return base == '-' ? cp : static_cast<char32_t>(base);
}

}  // namespace

WordpieceVocab WordpieceVocab::from_file(const std::filesystem::path& path) {
  const std::vector<uint8_t> bytes = read_data_file(path);
  std::vector<std::string> tokens;
  std::string line;
  for (uint8_t b : bytes) {
    if (b == '\n') {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      tokens.push_back(std::move(line));
      line.clear();
    } else {
      line.push_back(static_cast<char>(b));
    }
  }
  if (!line.empty()) tokens.push_back(std::move(line));
  return from_tokens(std::move(tokens), path.string());
}

WordpieceVocab WordpieceVocab::from_tokens(std::vector<std::string> tokens,
                                           const std::string& source) {
  WordpieceVocab vocab;
  vocab.source_ = source;
  if (tokens.empty()) {
    throw DataError(
        fmt::format("{}: empty vocab — expected a WordPiece vocab, one token per line "
                    "(e.g. bert-base-uncased/vocab.txt)",
                    source));
  }
  vocab.tokens_ = std::move(tokens);
  vocab.ids_.reserve(vocab.tokens_.size());
  for (size_t i = 0; i < vocab.tokens_.size(); ++i) {
    vocab.ids_.emplace(vocab.tokens_[i], static_cast<int32_t>(i));  // keeps the first
  }
  auto require = [&](const char* token) {
    const auto found = vocab.find(token);
    if (!found) {
      throw DataError(
          fmt::format("{}: vocab of {} tokens has no {} token — masked language "
                      "modelling needs [PAD] [UNK] [CLS] [SEP] [MASK]; use a BERT "
                      "WordPiece vocab such as bert-base-uncased/vocab.txt",
                      source, vocab.tokens_.size(), token));
    }
    return *found;
  };
  vocab.special_.pad = require("[PAD]");
  vocab.special_.unk = require("[UNK]");
  vocab.special_.cls = require("[CLS]");
  vocab.special_.sep = require("[SEP]");
  vocab.special_.mask = require("[MASK]");
  return vocab;
}

std::optional<int32_t> WordpieceVocab::find(std::string_view token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

BertTokenizer::BertTokenizer(const WordpieceVocab& vocab, int max_chars_per_word)
    : vocab_(vocab), max_chars_per_word_(max_chars_per_word) {}

std::vector<std::string> BertTokenizer::basic_tokenize(std::string_view text) const {
  std::vector<std::string> tokens;
  std::string current;
  auto flush = [&] {
    if (!current.empty()) {
      tokens.push_back(std::move(current));
      current.clear();
    }
  };
  // One pass does what BERT does in several: clean (drop NUL, U+FFFD and
  // control characters, whitespace separates), CJK characters and
  // punctuation stand alone, lower-case, strip accents.
  for (char32_t cp : decode_utf8(text)) {
    if (cp == 0 || cp == 0xfffd || is_control(cp)) continue;
    if (is_whitespace(cp)) {
      flush();
      continue;
    }
    if (is_cjk(cp)) {
      flush();
      append_utf8(current, cp);
      flush();
      continue;
    }
    const char32_t lower = to_lower(cp);
    if (is_combining_mark(lower)) continue;  // NFD marks dropped (Mn)
    const char32_t base = strip_accent(lower);
    if (is_punctuation(base)) {
      flush();
      append_utf8(current, base);
      flush();
      continue;
    }
    append_utf8(current, base);
  }
  flush();
  return tokens;
}

void BertTokenizer::wordpiece(std::string_view word, std::vector<int32_t>& ids) const {
  const std::u32string chars = decode_utf8(word);
  if (chars.empty()) return;
  if (static_cast<int>(chars.size()) > max_chars_per_word_) {
    ids.push_back(vocab_.special().unk);
    return;
  }
  const size_t first_piece = ids.size();
  std::string candidate;
  size_t start = 0;
  while (start < chars.size()) {
    size_t end = chars.size();
    std::optional<int32_t> match;
    while (start < end) {
      candidate.clear();
      if (start > 0) candidate = "##";
      for (size_t k = start; k < end; ++k) append_utf8(candidate, chars[k]);
      match = vocab_.find(candidate);
      if (match) break;
      --end;
    }
    if (!match) {
      ids.resize(first_piece);
      ids.push_back(vocab_.special().unk);
      return;
    }
    ids.push_back(*match);
    start = end;
  }
}

std::vector<int32_t> BertTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  // Words repeat a lot in natural text: segment each distinct word once.
  std::unordered_map<std::string, std::vector<int32_t>> cache;
  std::vector<int32_t> pieces;
  for (std::string& word : basic_tokenize(text)) {
    auto it = cache.find(word);
    if (it == cache.end()) {
      pieces.clear();
      wordpiece(word, pieces);
      it = cache.emplace(std::move(word), pieces).first;
    }
    ids.insert(ids.end(), it->second.begin(), it->second.end());
  }
  return ids;
}

std::vector<std::string> BertTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  std::vector<int32_t> ids;
  for (const std::string& word : basic_tokenize(text)) {
    ids.clear();
    wordpiece(word, ids);
    for (int32_t id : ids) pieces.push_back(vocab_.token(id));
  }
  return pieces;
}

}  // namespace dctrain
