// BERT's input embedding: the sum of a word, a position and a token-type
// (segment) embedding per token. Lookups are row copies; the backward pass
// scatter-adds each output row's gradient into the rows it came from.
#pragma once

#include <cstdint>

namespace dctrain {

// y (n, t, hidden) = word[tokens] + position[p] + token_type[types], p the
// position within the sequence. tokens, types (n, t); word (vocab, hidden),
// position (>= t, hidden), token_type (types, hidden). Ids are trusted: the
// caller validates them against the table sizes.
template <typename T>
void embedding_forward(T* y, const int32_t* tokens, const int32_t* types, const T* word,
                       const T* position, const T* token_type, int n, int t, int hidden);

// dword[tokens] += dy; dposition[p] += dy; dtoken_type[types] += dy. Each
// gradient pointer may be null (that table is then not trained).
template <typename T>
void embedding_backward(T* dword, T* dposition, T* dtoken_type, const T* dy, const int32_t* tokens,
                        const int32_t* types, int n, int t, int hidden);

}  // namespace dctrain
