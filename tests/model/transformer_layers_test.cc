// The transformer layers against their definitions and against central finite
// differences: embedding, LayerNorm, GELU, dropout, self-attention.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "model/layers/attention.h"
#include "model/layers/dropout.h"
#include "model/layers/embedding.h"
#include "model/layers/gelu.h"
#include "model/layers/layer_norm.h"
#include "tests/model/gradcheck.h"

namespace dctrain {
namespace {

using testing::expect_gradient_matches;
using testing::random_vector;
using testing::weighted_sum;

TEST(Embedding, ForwardSumsTheThreeLookups) {
  constexpr int n = 2, t = 3, hidden = 4, vocab = 5;
  const std::vector<int32_t> tokens = {4, 0, 4, 1, 2, 3}, types = {0, 1, 1, 0, 0, 1};
  const auto word = random_vector(vocab * hidden, 1), pos = random_vector(t * hidden, 2),
             type = random_vector(2 * hidden, 3);
  std::vector<double> y(n * t * hidden);
  embedding_forward(y.data(), tokens.data(), types.data(), word.data(), pos.data(), type.data(), n,
                    t, hidden);
  for (int s = 0; s < n; ++s) {
    for (int p = 0; p < t; ++p) {
      const int row = s * t + p;
      for (int j = 0; j < hidden; ++j) {
        EXPECT_DOUBLE_EQ(y[row * hidden + j], word[tokens[row] * hidden + j] + pos[p * hidden + j] +
                                                  type[types[row] * hidden + j]);
      }
    }
  }
}

TEST(Embedding, GradientsMatchFiniteDifferencesWithRepeatedTokens) {
  constexpr int n = 2, t = 4, hidden = 3, vocab = 6;
  // Token 2 appears three times: its gradient row is a sum (scatter-add).
  const std::vector<int32_t> tokens = {2, 5, 2, 0, 1, 2, 3, 5}, types = {0, 0, 1, 1, 0, 1, 1, 0};
  auto word = random_vector(vocab * hidden, 1), pos = random_vector(t * hidden, 2),
       type = random_vector(2 * hidden, 3);
  const auto r = random_vector(n * t * hidden, 4);
  std::vector<double> y(r.size());
  auto loss = [&] {
    embedding_forward(y.data(), tokens.data(), types.data(), word.data(), pos.data(), type.data(),
                      n, t, hidden);
    return weighted_sum(y, r);
  };
  std::vector<double> dword(word.size(), 0.0), dpos(pos.size(), 0.0), dtype(type.size(), 0.0);
  embedding_backward(dword.data(), dpos.data(), dtype.data(), r.data(), tokens.data(), types.data(),
                     n, t, hidden);
  expect_gradient_matches("word", loss, word, dword);
  expect_gradient_matches("position", loss, pos, dpos);
  expect_gradient_matches("token_type", loss, type, dtype);
  // Token 4 never occurs: its row gets nothing.
  for (int j = 0; j < hidden; ++j) EXPECT_EQ(dword[4 * hidden + j], 0.0);
}

TEST(LayerNorm, ForwardNormalisesEachRow) {
  constexpr int n = 3, dim = 8;
  const auto x = random_vector(n * dim, 1, 5.0);
  const std::vector<double> gamma(dim, 1.0), beta(dim, 0.0);
  std::vector<double> y(x.size()), mean(n), rstd(n);
  layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), n,
                     dim, kBertLayerNormEps);
  for (int i = 0; i < n; ++i) {
    double m = 0, v = 0;
    for (int j = 0; j < dim; ++j) m += y[i * dim + j];
    m /= dim;
    for (int j = 0; j < dim; ++j) v += (y[i * dim + j] - m) * (y[i * dim + j] - m);
    EXPECT_NEAR(m, 0.0, 1e-12);
    EXPECT_NEAR(v / dim, 1.0, 1e-10);
  }
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  constexpr int n = 4, dim = 6;
  auto x = random_vector(n * dim, 1, 2.0), gamma = random_vector(dim, 2),
       beta = random_vector(dim, 3);
  const auto r = random_vector(n * dim, 4);
  std::vector<double> y(x.size()), mean(n), rstd(n);
  auto loss = [&] {
    layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), n,
                       dim, kBertLayerNormEps);
    return weighted_sum(y, r);
  };
  loss();
  std::vector<double> dx(x.size(), 7.0), dgamma(dim, 0.0), dbeta(dim, 0.0);
  layer_norm_backward(dx.data(), dgamma.data(), dbeta.data(), r.data(), mean.data(), rstd.data(),
                      x.data(), gamma.data(), n, dim);
  expect_gradient_matches("x", loss, x, dx);
  expect_gradient_matches("gamma", loss, gamma, dgamma);
  expect_gradient_matches("beta", loss, beta, dbeta);
}

TEST(Gelu, ForwardIsTheErfForm) {
  const std::vector<double> x = {-3.0, -1.0, 0.0, 0.5, 1.0, 2.0};
  std::vector<double> y(x.size());
  gelu_forward(y.data(), x.data(), x.size());
  // x * Phi(x), Phi from tables of the normal distribution.
  const std::vector<double> expected = {-0.0040496937, -0.1586552539, 0.0,
                                        0.3457312306,  0.8413447461,  1.9544997361};
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], expected[i], 1e-9) << x[i];
  std::vector<float> xf = {1.0f}, yf(1);
  gelu_forward(yf.data(), xf.data(), 1);
  EXPECT_NEAR(yf[0], 0.8413447461f, 1e-6f);
}

TEST(Gelu, GradientMatchesFiniteDifferences) {
  auto x = random_vector(50, 1, 4.0);
  const auto r = random_vector(50, 2);
  std::vector<double> y(x.size());
  auto loss = [&] {
    gelu_forward(y.data(), x.data(), x.size());
    return weighted_sum(y, r);
  };
  std::vector<double> dx(x.size());
  gelu_backward(dx.data(), r.data(), x.data(), x.size());
  expect_gradient_matches("x", loss, x, dx);
}

TEST(Dropout, MaskIsAPureFunctionOfKeyAndIndex) {
  constexpr size_t count = 100001;  // odd: the last draw is half used
  constexpr double p = 0.1;
  const std::vector<float> x(count, 1.0f);
  std::vector<float> a(count), b(count), c(count);
  dropout_forward(a.data(), x.data(), p, 42, count);
  dropout_forward(b.data(), x.data(), p, 42, count);
  dropout_forward(c.data(), x.data(), p, 43, count);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  size_t kept = 0;
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (size_t i = 0; i < count; ++i) {
    ASSERT_TRUE(a[i] == 0.0f || a[i] == scale) << i;
    ASSERT_EQ(a[i] != 0.0f, dropout_keeps(42, i, p)) << i;
    kept += a[i] != 0.0f;
  }
  // Binomial(100001, 0.9): standard deviation about 95.
  EXPECT_NEAR(static_cast<double>(kept), 0.9 * count, 600.0);
  // A prefix of a longer call draws the same mask.
  std::vector<float> prefix(17);
  dropout_forward(prefix.data(), x.data(), p, 42, prefix.size());
  for (size_t i = 0; i < prefix.size(); ++i) EXPECT_EQ(prefix[i], a[i]);
}

TEST(Dropout, BackwardUsesTheForwardMaskAndZeroIsIdentity) {
  constexpr size_t count = 64;
  auto x = random_vector(count, 1);
  const auto r = random_vector(count, 2);
  std::vector<double> y(count);
  auto loss = [&] {
    dropout_forward(y.data(), x.data(), 0.5, 7, count);
    return weighted_sum(y, r);
  };
  std::vector<double> dx(count);
  dropout_backward(dx.data(), r.data(), 0.5, 7, count);
  expect_gradient_matches("x", loss, x, dx);
  std::vector<double> same(count);
  dropout_forward(same.data(), x.data(), 0.0, 7, count);
  EXPECT_EQ(same, x);
}

// Attention fixture: 2 sequences of 5 tokens, the second with 2 padded.
struct AttentionCase {
  static constexpr int n = 2, t = 5, hidden = 6, heads = 2;
  std::vector<double> x = random_vector(n * t * hidden, 1);
  std::vector<uint8_t> attention = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  std::vector<double> wq = random_vector(hidden * hidden, 2), bq = random_vector(hidden, 3),
                      wk = random_vector(hidden * hidden, 4), bk = random_vector(hidden, 5),
                      wv = random_vector(hidden * hidden, 6), bv = random_vector(hidden, 7),
                      wo = random_vector(hidden * hidden, 8), bo = random_vector(hidden, 9);
  std::vector<double> q = std::vector<double>(n * t * hidden), k = q, v = q, context = q;
  std::vector<double> probs = std::vector<double>(n * heads * t * t);
  std::vector<double> scratch = std::vector<double>(attention_backward_scratch(n, t, hidden));
  std::vector<uint64_t> keys = {11, 12};

  AttentionParams<double> params() const {
    return {wq.data(), bq.data(), wk.data(), bk.data(), wv.data(), bv.data(), wo.data(), bo.data()};
  }
  AttentionSaved<double> saved() {
    return {q.data(), k.data(), v.data(), probs.data(), context.data()};
  }
  std::vector<double> forward(const AttentionDropout& dropout) {
    std::vector<double> y(n * t * hidden);
    attention_forward(y.data(), saved(), scratch.data(), x.data(), attention.data(), params(),
                      dropout, n, t, hidden, heads);
    return y;
  }
};

// Straightforward loops, one output element at a time.
std::vector<double> naive_attention(const AttentionCase& c) {
  constexpr int n = AttentionCase::n, t = AttentionCase::t, hidden = AttentionCase::hidden,
                heads = AttentionCase::heads, dh = hidden / heads;
  auto project = [&](const std::vector<double>& in, const std::vector<double>& w,
                     const std::vector<double>& b) {
    std::vector<double> out(n * t * hidden);
    for (int r = 0; r < n * t; ++r) {
      for (int o = 0; o < hidden; ++o) {
        double s = b[o];
        for (int i = 0; i < hidden; ++i) s += in[r * hidden + i] * w[o * hidden + i];
        out[r * hidden + o] = s;
      }
    }
    return out;
  };
  const auto q = project(c.x, c.wq, c.bq), k = project(c.x, c.wk, c.bk),
             v = project(c.x, c.wv, c.bv);
  std::vector<double> context(n * t * hidden, 0.0);
  for (int s = 0; s < n; ++s) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < t; ++i) {
        std::vector<double> w(t);
        double total = 0;
        for (int j = 0; j < t; ++j) {
          if (c.attention[s * t + j] == 0) continue;  // masked key: weight exactly 0
          double dot = 0;
          for (int d = 0; d < dh; ++d) {
            dot += q[(s * t + i) * hidden + h * dh + d] * k[(s * t + j) * hidden + h * dh + d];
          }
          w[j] = std::exp(dot / std::sqrt(static_cast<double>(dh)));
          total += w[j];
        }
        for (int j = 0; j < t; ++j) {
          for (int d = 0; d < dh; ++d) {
            context[(s * t + i) * hidden + h * dh + d] +=
                w[j] / total * v[(s * t + j) * hidden + h * dh + d];
          }
        }
      }
    }
  }
  return project(context, c.wo, c.bo);
}

TEST(Attention, ForwardMatchesNaiveLoopsAndIgnoresPaddedKeys) {
  AttentionCase c;
  const auto y = c.forward({});
  const auto expected = naive_attention(c);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], expected[i], 1e-12) << i;
  // Changing a padded token changes nothing for the real tokens of its sequence.
  for (int j = 0; j < AttentionCase::hidden; ++j) c.x[(5 + 4) * AttentionCase::hidden + j] += 3.0;
  const auto moved = c.forward({});
  for (int r = 5; r < 8; ++r) {
    for (int j = 0; j < AttentionCase::hidden; ++j) {
      EXPECT_NEAR(moved[r * AttentionCase::hidden + j], y[r * AttentionCase::hidden + j], 1e-12);
    }
  }
}

TEST(Attention, DropoutOnProbabilitiesIsDeterministicAndActive) {
  AttentionCase c;
  const AttentionDropout dropout{0.3, c.keys.data()};
  const auto a = c.forward(dropout), b = c.forward(dropout), plain = c.forward({});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, plain);
}

void check_attention_gradients(const AttentionDropout& dropout) {
  AttentionCase c;
  const auto r = random_vector(AttentionCase::n * AttentionCase::t * AttentionCase::hidden, 20);
  auto loss = [&] { return weighted_sum(c.forward(dropout), r); };
  loss();
  const size_t h2 = AttentionCase::hidden * AttentionCase::hidden, h = AttentionCase::hidden;
  std::vector<double> dx(c.x.size(), 5.0), dwq(h2, 0.0), dbq(h, 0.0), dwk(h2, 0.0), dbk(h, 0.0),
      dwv(h2, 0.0), dbv(h, 0.0), dwo(h2, 0.0), dbo(h, 0.0);
  const AttentionGrads<double> grads{dwq.data(), dbq.data(), dwk.data(), dbk.data(),
                                     dwv.data(), dbv.data(), dwo.data(), dbo.data()};
  attention_backward(dx.data(), grads, c.scratch.data(), r.data(), c.saved(), c.x.data(),
                     c.params(), dropout, AttentionCase::n, AttentionCase::t, AttentionCase::hidden,
                     AttentionCase::heads);
  expect_gradient_matches("x", loss, c.x, dx);
  expect_gradient_matches("wq", loss, c.wq, dwq);
  expect_gradient_matches("bq", loss, c.bq, dbq);
  expect_gradient_matches("wk", loss, c.wk, dwk);
  // bk shifts every score of a row equally: the softmax cancels it exactly.
  for (double g : dbk) EXPECT_NEAR(g, 0.0, 1e-12);
  expect_gradient_matches("wv", loss, c.wv, dwv);
  expect_gradient_matches("bv", loss, c.bv, dbv);
  expect_gradient_matches("wo", loss, c.wo, dwo);
  expect_gradient_matches("bo", loss, c.bo, dbo);
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  check_attention_gradients({});
}

TEST(Attention, GradientsMatchFiniteDifferencesWithDropout) {
  const std::vector<uint64_t> keys = {11, 12};
  check_attention_gradients({0.3, keys.data()});
}

}  // namespace
}  // namespace dctrain
