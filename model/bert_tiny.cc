#include "model/bert_tiny.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "common/random.h"
#include "model/blas.h"
#include "model/layers/attention.h"
#include "model/layers/cross_entropy.h"
#include "model/layers/dropout.h"
#include "model/layers/embedding.h"
#include "model/layers/gelu.h"
#include "model/layers/layer_norm.h"
#include "model/layers/linear.h"
#include "model/thread_pool.h"

namespace dctrain {

namespace {

using blas::Trans;

// Head work items: masked rows per logits block, words per vocabulary slice.
constexpr int kHeadRows = 64;
constexpr int kVocabSlice = 2048;

// Dropout sites per sequence: the embeddings, then per layer the attention
// probabilities, the attention output and the FFN output.
constexpr int kSitesPerLayer = 3;

}  // namespace

// Parameter-table entries, by role.
struct BertTiny::Indices {
  struct Norm {
    size_t weight, bias;
  };
  struct Layer {
    size_t wq, bq, wk, bk, wv, bv, wo, bo;
    Norm attention_norm;
    size_t w_in, b_in, w_out, b_out;
    Norm ffn_norm;
  };
  size_t word, position, token_type;
  Norm embedding_norm;
  std::vector<Layer> layers;
  size_t head_w, head_b;
  Norm head_norm;
  size_t decoder_bias;
  // The entries from `position` to the last layer's ffn_norm are contiguous:
  // each encoder chunk accumulates their gradients in its own buffer.
  size_t encoder_begin = 0, encoder_count = 0;
};

// Activations for one batch shape, allocated once per shape.
struct BertTiny::Workspace {
  struct Layer {
    std::vector<float> q, k, v, context;  // (rows, hidden)
    std::vector<float> probs;             // (n, heads, t, t)
    std::vector<float> sum1;              // (rows, hidden) x + attention: LayerNorm 1 input
    std::vector<float> mean1, rstd1;      // (rows)
    std::vector<float> normed1;           // (rows, hidden)
    std::vector<float> ffn_pre, ffn_act;  // (rows, ffn)
    std::vector<float> sum2;              // (rows, hidden) LayerNorm 2 input
    std::vector<float> mean2, rstd2;      // (rows)
  };
  // Per thread, for one chunk at a time.
  struct Scratch {
    std::vector<float> da, db;     // (chunk rows, hidden)
    std::vector<float> dffn;       // (chunk rows, ffn)
    std::vector<float> attention;  // attention_backward_scratch(chunk)
    std::vector<float> probs;      // attention_forward_scratch
  };

  int n = 0, t = 0;
  bool dropout = false;
  std::vector<float> embedded;  // (rows, hidden) LayerNorm input
  std::vector<float> embedded_mean, embedded_rstd;
  std::vector<std::vector<float>> hidden;  // layers + 1 of (rows, hidden)
  std::vector<Layer> layers;
  std::vector<float> dtop;                      // (rows, hidden) gradient at the encoder output
  std::vector<float> dembedded;                 // (rows, hidden)
  std::vector<uint64_t> keys;                   // (sites, n) dropout keys
  std::vector<std::vector<float>> chunk_grads;  // (chunks) x encoder_count
  std::vector<Scratch> scratch;                 // (threads)

  // Head, sized for the most masked tokens seen.
  int masked = 0;
  std::vector<int32_t> rows, labels;                               // (masked)
  std::vector<float> gathered, dense, act, normed, dnormed, dact;  // (masked, hidden)
  std::vector<float> head_mean, head_rstd;                         // (masked)
  std::vector<float> logits;  // (masked, vocab), dlogits in place
  std::vector<CrossEntropyResult> block_results;

  int chunks() const { return (n + kSequencesPerChunk - 1) / kSequencesPerChunk; }
};

std::string BertTiny::name() const {
  const BertTinyConfig tiny;
  const BertTinyConfig& c = config_;
  if (c.layers == tiny.layers && c.hidden == tiny.hidden && c.heads == tiny.heads &&
      c.ffn == tiny.ffn) {
    return "bert-tiny";
  }
  std::string out = "bert-L" + std::to_string(c.layers) + "-H" + std::to_string(c.hidden) + "-A" +
                    std::to_string(c.heads);
  if (c.ffn != 4 * c.hidden) out += "-I" + std::to_string(c.ffn);
  return out;
}

int64_t BertTiny::parameter_count(int vocab_size, int max_positions) {
  return parameter_count(BertTinyConfig{.vocab_size = vocab_size, .max_positions = max_positions});
}

int64_t BertTiny::parameter_count(const BertTinyConfig& config) {
  const BertTinyConfig& c = config;
  const int64_t vocab_size = c.vocab_size, max_positions = c.max_positions;
  const int64_t h = c.hidden, f = c.ffn;
  const int64_t embeddings = (vocab_size + max_positions + c.type_vocab_size) * h + 2 * h;
  const int64_t layer = 4 * (h * h + h) + 2 * h + (h * f + f) + (f * h + h) + 2 * h;
  const int64_t head = h * h + h + 2 * h + vocab_size;
  return embeddings + c.layers * layer + head;
}

BertTiny::BertTiny(const ModelSpec& spec)
    : seed_(spec.seed), index_(std::make_unique<Indices>()), ws_(std::make_unique<Workspace>()) {
  config_.vocab_size = spec.vocab_size;
  config_.max_positions = spec.max_seq_len;
  config_.dropout = spec.dropout;
  config_.layers = spec.layers;
  config_.hidden = spec.hidden;
  config_.heads = spec.heads;
  config_.ffn = spec.intermediate;
  if (spec.layers < 1 || spec.hidden < 1 || spec.heads < 1 || spec.hidden % spec.heads != 0 ||
      spec.intermediate < 1) {
    throw std::invalid_argument(
        "bert: layers " + std::to_string(spec.layers) + ", hidden " + std::to_string(spec.hidden) +
        ", heads " + std::to_string(spec.heads) + ", intermediate " +
        std::to_string(spec.intermediate) + ": each positive, hidden a multiple of heads");
  }
  if (spec.vocab_size < 1 || spec.max_seq_len < 1) {
    throw std::invalid_argument("bert-tiny: vocab_size " + std::to_string(spec.vocab_size) +
                                " and max_seq_len " + std::to_string(spec.max_seq_len) +
                                " must be positive");
  }
  if (!(spec.dropout >= 0.0 && spec.dropout < 1.0)) {
    throw std::invalid_argument("bert-tiny: dropout " + std::to_string(spec.dropout) +
                                " must lie in [0, 1)");
  }
  const int64_t h = config_.hidden, f = config_.ffn;
  Indices& ix = *index_;
  ix.word = table_.add("embeddings.word.weight", {config_.vocab_size, h});
  ix.position = table_.add("embeddings.position.weight", {config_.max_positions, h});
  ix.token_type = table_.add("embeddings.token_type.weight", {config_.type_vocab_size, h});
  ix.embedding_norm = {table_.add("embeddings.norm.weight", {h}),
                       table_.add("embeddings.norm.bias", {h})};
  for (int l = 0; l < config_.layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    Indices::Layer layer;
    layer.wq = table_.add(p + "attention.query.weight", {h, h});
    layer.bq = table_.add(p + "attention.query.bias", {h});
    layer.wk = table_.add(p + "attention.key.weight", {h, h});
    layer.bk = table_.add(p + "attention.key.bias", {h});
    layer.wv = table_.add(p + "attention.value.weight", {h, h});
    layer.bv = table_.add(p + "attention.value.bias", {h});
    layer.wo = table_.add(p + "attention.output.weight", {h, h});
    layer.bo = table_.add(p + "attention.output.bias", {h});
    layer.attention_norm = {table_.add(p + "attention_norm.weight", {h}),
                            table_.add(p + "attention_norm.bias", {h})};
    layer.w_in = table_.add(p + "ffn.in.weight", {f, h});
    layer.b_in = table_.add(p + "ffn.in.bias", {f});
    layer.w_out = table_.add(p + "ffn.out.weight", {h, f});
    layer.b_out = table_.add(p + "ffn.out.bias", {h});
    layer.ffn_norm = {table_.add(p + "ffn_norm.weight", {h}), table_.add(p + "ffn_norm.bias", {h})};
    ix.layers.push_back(layer);
  }
  ix.head_w = table_.add("head.dense.weight", {h, h});
  ix.head_b = table_.add("head.dense.bias", {h});
  ix.head_norm = {table_.add("head.norm.weight", {h}), table_.add("head.norm.bias", {h})};
  ix.decoder_bias = table_.add("head.decoder.bias", {config_.vocab_size});
  ix.encoder_begin = table_[ix.position].offset;
  ix.encoder_count = table_[ix.head_w].offset - ix.encoder_begin;
  allocate_arenas();
  initialise(spec.seed);
  pool_ = std::make_unique<ThreadPool>(std::max(1, spec.threads));
}

BertTiny::~BertTiny() = default;

void BertTiny::initialise(uint64_t seed) {
  // BERT's initialisation: every matrix normal(0, 0.02), biases 0,
  // LayerNorm weights 1. Each tensor draws from its own stream.
  for (size_t i = 0; i < table_.size(); ++i) {
    const ParamEntry& e = table_[i];
    std::span<float> w = parameters_->view(i);
    const bool is_norm_weight = e.name.ends_with("norm.weight");
    if (e.shape.size() == 2) {
      Rng rng({seed, 0x62657274ULL, i});
      for (float& x : w) x = static_cast<float>(0.02 * rng.normal());
    } else {
      std::fill(w.begin(), w.end(), is_norm_weight ? 1.0f : 0.0f);
    }
  }
}

void BertTiny::apply_statistics(std::span<const float> averaged) {
  if (!averaged.empty()) {
    throw std::invalid_argument("bert-tiny: has no running statistics, got " +
                                std::to_string(averaged.size()) + " values");
  }
}

std::span<const float> BertTiny::masked_logits() const {
  return std::span<const float>(ws_->logits)
      .first(static_cast<size_t>(ws_->masked) * config_.vocab_size);
}

MicroBatchResult BertTiny::train_micro_batch(const Batch& batch) {
  return run(batch, true);
}
MicroBatchResult BertTiny::evaluate(const Batch& batch) {
  return run(batch, false);
}

void BertTiny::validate(const Batch& b) const {
  auto fail = [](const std::string& what) { throw std::invalid_argument("bert-tiny: " + what); };
  if (b.kind != BatchKind::kTokens) fail("needs a token batch (BatchKind::kTokens), got images");
  if (b.size < 1 || b.seq_len < 1) fail("empty batch");
  if (b.seq_len > config_.max_positions) {
    fail("sequence length " + std::to_string(b.seq_len) + " exceeds max_seq_len " +
         std::to_string(config_.max_positions) + "; raise max_seq_len or pack shorter sequences");
  }
  const size_t cells = static_cast<size_t>(b.size) * b.seq_len;
  if (b.tokens.size() != cells || b.token_types.size() != cells || b.attention.size() != cells ||
      b.labels.size() != cells) {
    fail("tokens/token_types/attention/labels must each hold size x seq_len = " +
         std::to_string(cells) + " values");
  }
  for (size_t i = 0; i < cells; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= config_.vocab_size) {
      fail("token id " + std::to_string(b.tokens[i]) + " at " + std::to_string(i) +
           " outside the vocabulary [0, " + std::to_string(config_.vocab_size) + ")");
    }
    if (b.token_types[i] < 0 || b.token_types[i] >= config_.type_vocab_size) {
      fail("token type " + std::to_string(b.token_types[i]) + " at " + std::to_string(i) +
           " outside [0, " + std::to_string(config_.type_vocab_size) + ")");
    }
    if (b.labels[i] != kIgnoreLabel && (b.labels[i] < 0 || b.labels[i] >= config_.vocab_size)) {
      fail("label " + std::to_string(b.labels[i]) + " at " + std::to_string(i) +
           " is neither kIgnoreLabel nor a vocabulary id");
    }
  }
}

void BertTiny::prepare(const Batch& b, bool train) {
  Workspace& w = *ws_;
  const int h = config_.hidden, f = config_.ffn, heads = config_.heads;
  if (w.n != b.size || w.t != b.seq_len) {
    w.n = b.size;
    w.t = b.seq_len;
    const size_t rows = static_cast<size_t>(w.n) * w.t;
    w.embedded.assign(rows * h, 0.0f);
    w.embedded_mean.assign(rows, 0.0f);
    w.embedded_rstd.assign(rows, 0.0f);
    w.hidden.assign(config_.layers + 1, std::vector<float>(rows * h));
    w.layers.assign(config_.layers, {});
    for (Workspace::Layer& l : w.layers) {
      for (auto* v : {&l.q, &l.k, &l.v, &l.context, &l.sum1, &l.normed1, &l.sum2}) {
        v->assign(rows * h, 0.0f);
      }
      for (auto* v : {&l.mean1, &l.rstd1, &l.mean2, &l.rstd2}) v->assign(rows, 0.0f);
      l.probs.assign(static_cast<size_t>(w.n) * heads * w.t * w.t, 0.0f);
      l.ffn_pre.assign(rows * f, 0.0f);
      l.ffn_act.assign(rows * f, 0.0f);
    }
    w.dtop.assign(rows * h, 0.0f);
    w.dembedded.assign(rows * h, 0.0f);
    w.keys.assign(static_cast<size_t>(1 + kSitesPerLayer * config_.layers) * w.n, 0);
    w.chunk_grads.assign(w.chunks(), std::vector<float>(index_->encoder_count));
    const int chunk_n = std::min(w.n, kSequencesPerChunk);
    const size_t chunk_rows = static_cast<size_t>(chunk_n) * w.t;
    w.scratch.assign(pool_->size(), {});
    for (Workspace::Scratch& s : w.scratch) {
      s.da.assign(chunk_rows * h, 0.0f);
      s.db.assign(chunk_rows * h, 0.0f);
      s.dffn.assign(chunk_rows * f, 0.0f);
      s.attention.assign(attention_backward_scratch(chunk_n, w.t, h), 0.0f);
      s.probs.assign(attention_forward_scratch(w.t), 0.0f);
    }
  }
  // Masked positions, in (sequence, position) order.
  w.rows.clear();
  w.labels.clear();
  const size_t cells = static_cast<size_t>(w.n) * w.t;
  for (size_t i = 0; i < cells; ++i) {
    if (b.labels[i] != kIgnoreLabel) {
      w.rows.push_back(static_cast<int32_t>(i));
      w.labels.push_back(b.labels[i]);
    }
  }
  const int masked = static_cast<int>(w.rows.size());
  if (masked > w.masked || w.logits.empty()) {
    // Grows only: the capacity of rows/labels follows the same high-water mark.
    const size_t m = static_cast<size_t>(std::max(masked, 1));
    for (auto* v : {&w.gathered, &w.dense, &w.act, &w.normed, &w.dnormed, &w.dact}) {
      v->resize(m * h);
    }
    w.head_mean.resize(m);
    w.head_rstd.resize(m);
    w.logits.resize(m * config_.vocab_size);
    w.block_results.resize((m + kHeadRows - 1) / kHeadRows);
  }
  w.masked = masked;
  // Dropout keys: site keys per sequence, from the model seed and a hash of
  // the sequence's contents.
  w.dropout = train && config_.dropout > 0.0;
  if (w.dropout) {
    const int sites = 1 + kSitesPerLayer * config_.layers;
    for (int s = 0; s < w.n; ++s) {
      uint64_t content = 0x6d6c6d2d64726f70ULL;
      const size_t at = static_cast<size_t>(s) * w.t;
      for (int p = 0; p < w.t; ++p) {
        const uint64_t cell =
            (static_cast<uint64_t>(static_cast<uint32_t>(b.tokens[at + p])) << 32) ^
            (static_cast<uint64_t>(static_cast<uint32_t>(b.labels[at + p])) << 2) ^
            (static_cast<uint64_t>(b.token_types[at + p]) << 1) ^
            static_cast<uint64_t>(b.attention[at + p]);
        content = mix64(content ^ cell);
      }
      const uint64_t sequence_key = hash_key({seed_, content});
      for (int site = 0; site < sites; ++site) {
        w.keys[static_cast<size_t>(site) * w.n + s] =
            hash_key({sequence_key, static_cast<uint64_t>(site)});
      }
    }
  }
}

MicroBatchResult BertTiny::run(const Batch& batch, bool train) {
  validate(batch);
  prepare(batch, train);
  Workspace& w = *ws_;
  current_ = &batch;
  pool_->parallel_for(w.chunks(), [&](int64_t chunk, int thread) {
    forward_chunk(static_cast<int>(chunk), thread);
  });
  MicroBatchResult result = head(train);
  if (train) {
    pool_->parallel_for(w.chunks(), [&](int64_t chunk, int thread) {
      backward_chunk(static_cast<int>(chunk), thread);
    });
    // Chunk gradients into the arena, in chunk order.
    std::span<float> encoder =
        gradients_->flat().subspan(index_->encoder_begin, index_->encoder_count);
    for (const std::vector<float>& g : w.chunk_grads) {
      for (size_t i = 0; i < g.size(); ++i) encoder[i] += g[i];
    }
    embedding_backward(gradients_->view(index_->word).data(),
                       gradients_->view(index_->position).data(),
                       gradients_->view(index_->token_type).data(), w.dembedded.data(),
                       batch.tokens.data(), batch.token_types.data(), w.n, w.t, config_.hidden);
  }
  current_ = nullptr;
  result.samples = batch.size;
  return result;
}

namespace {

// Hidden dropout on a chunk: sequence s of the chunk uses keys[s].
void dropout_rows(float* x, bool on, double p, const uint64_t* keys, int n, size_t per_sequence) {
  if (!on) return;
  for (int s = 0; s < n; ++s) {
    dropout_forward(x + s * per_sequence, x + s * per_sequence, p, keys[s], per_sequence);
  }
}
void dropout_rows_backward(float* dx, const float* dy, bool on, double p, const uint64_t* keys,
                           int n, size_t per_sequence) {
  if (!on) {
    if (dx != dy) std::copy(dy, dy + n * per_sequence, dx);
    return;
  }
  for (int s = 0; s < n; ++s) {
    dropout_backward(dx + s * per_sequence, dy + s * per_sequence, p, keys[s], per_sequence);
  }
}

void add_into(float* y, const float* x, size_t count) {
  for (size_t i = 0; i < count; ++i) y[i] += x[i];
}

}  // namespace

void BertTiny::forward_chunk(int chunk, int thread) {
  Workspace& w = *ws_;
  const Indices& ix = *index_;
  const Batch& b = *current_;
  const int h = config_.hidden, f = config_.ffn, t = w.t;
  const int s0 = chunk * kSequencesPerChunk, cn = std::min(kSequencesPerChunk, w.n - s0);
  const size_t r0 = static_cast<size_t>(s0) * t, rc = static_cast<size_t>(cn) * t;
  const size_t per_sequence = static_cast<size_t>(t) * h;
  const double p = config_.dropout;
  auto param = [&](size_t i) { return parameters_->view(i).data(); };
  auto keys = [&](int site) { return w.keys.data() + static_cast<size_t>(site) * w.n + s0; };
  const int rows = static_cast<int>(rc);

  float* embedded = w.embedded.data() + r0 * h;
  embedding_forward(embedded, b.tokens.data() + r0, b.token_types.data() + r0, param(ix.word),
                    param(ix.position), param(ix.token_type), cn, t, h);
  float* x = w.hidden[0].data() + r0 * h;
  layer_norm_forward(x, w.embedded_mean.data() + r0, w.embedded_rstd.data() + r0, embedded,
                     param(ix.embedding_norm.weight), param(ix.embedding_norm.bias), rows, h,
                     kBertLayerNormEps);
  dropout_rows(x, w.dropout, p, keys(0), cn, per_sequence);
  for (int l = 0; l < config_.layers; ++l) {
    const Indices::Layer& li = ix.layers[l];
    Workspace::Layer& lw = w.layers[l];
    const float* in = w.hidden[l].data() + r0 * h;
    const int site = 1 + kSitesPerLayer * l;
    const AttentionSaved<float> saved{
        lw.q.data() + r0 * h, lw.k.data() + r0 * h, lw.v.data() + r0 * h,
        lw.probs.data() + r0 * config_.heads * t, lw.context.data() + r0 * h};
    const AttentionParams<float> params{param(li.wq), param(li.bq), param(li.wk), param(li.bk),
                                        param(li.wv), param(li.bv), param(li.wo), param(li.bo)};
    const AttentionDropout attention_dropout{w.dropout ? p : 0.0, keys(site)};
    float* sum1 = lw.sum1.data() + r0 * h;
    attention_forward(sum1, saved, w.scratch[thread].probs.data(), in, b.attention.data() + r0,
                      params, attention_dropout, cn, t, h, config_.heads);
    dropout_rows(sum1, w.dropout, p, keys(site + 1), cn, per_sequence);
    add_into(sum1, in, rc * h);
    float* normed1 = lw.normed1.data() + r0 * h;
    layer_norm_forward(normed1, lw.mean1.data() + r0, lw.rstd1.data() + r0, sum1,
                       param(li.attention_norm.weight), param(li.attention_norm.bias), rows, h,
                       kBertLayerNormEps);
    float* pre = lw.ffn_pre.data() + r0 * f;
    float* act = lw.ffn_act.data() + r0 * f;
    linear_forward(pre, normed1, param(li.w_in), param(li.b_in), rows, h, f);
    gelu_forward(act, pre, rc * f);
    float* sum2 = lw.sum2.data() + r0 * h;
    linear_forward(sum2, act, param(li.w_out), param(li.b_out), rows, f, h);
    dropout_rows(sum2, w.dropout, p, keys(site + 2), cn, per_sequence);
    add_into(sum2, normed1, rc * h);
    layer_norm_forward(w.hidden[l + 1].data() + r0 * h, lw.mean2.data() + r0, lw.rstd2.data() + r0,
                       sum2, param(li.ffn_norm.weight), param(li.ffn_norm.bias), rows, h,
                       kBertLayerNormEps);
  }
}

void BertTiny::backward_chunk(int chunk, int thread) {
  Workspace& w = *ws_;
  const Indices& ix = *index_;
  const int h = config_.hidden, f = config_.ffn, t = w.t;
  const int s0 = chunk * kSequencesPerChunk, cn = std::min(kSequencesPerChunk, w.n - s0);
  const size_t r0 = static_cast<size_t>(s0) * t, rc = static_cast<size_t>(cn) * t;
  const size_t per_sequence = static_cast<size_t>(t) * h;
  const int rows = static_cast<int>(rc);
  const double p = config_.dropout;
  std::vector<float>& grads = w.chunk_grads[chunk];
  std::fill(grads.begin(), grads.end(), 0.0f);
  auto param = [&](size_t i) { return parameters_->view(i).data(); };
  auto grad = [&](size_t i) { return grads.data() + (table_[i].offset - ix.encoder_begin); };
  auto keys = [&](int site) { return w.keys.data() + static_cast<size_t>(site) * w.n + s0; };
  Workspace::Scratch& s = w.scratch[thread];
  float* da = s.da.data();
  float* db = s.db.data();
  float* dffn = s.dffn.data();
  float* dcur = w.dtop.data() + r0 * h;  // gradient at the current layer's output, then input

  for (int l = config_.layers - 1; l >= 0; --l) {
    const Indices::Layer& li = ix.layers[l];
    Workspace::Layer& lw = w.layers[l];
    const float* in = w.hidden[l].data() + r0 * h;
    const int site = 1 + kSitesPerLayer * l;
    const float* normed1 = lw.normed1.data() + r0 * h;
    // LayerNorm 2: d(sum2) into da; it reaches normed1 (residual) and the FFN.
    layer_norm_backward(da, grad(li.ffn_norm.weight), grad(li.ffn_norm.bias), dcur,
                        lw.mean2.data() + r0, lw.rstd2.data() + r0, lw.sum2.data() + r0 * h,
                        param(li.ffn_norm.weight), rows, h);
    dropout_rows_backward(db, da, w.dropout, p, keys(site + 2), cn, per_sequence);
    linear_backward(dffn, grad(li.w_out), grad(li.b_out), db, lw.ffn_act.data() + r0 * f,
                    param(li.w_out), rows, f, h);
    gelu_backward(dffn, dffn, lw.ffn_pre.data() + r0 * f, rc * f);
    linear_backward(db, grad(li.w_in), grad(li.b_in), dffn, normed1, param(li.w_in), rows, h, f);
    add_into(da, db, rc * h);
    // LayerNorm 1: d(sum1) into db; it reaches the layer input (residual)
    // and, through dropout, the attention output.
    layer_norm_backward(db, grad(li.attention_norm.weight), grad(li.attention_norm.bias), da,
                        lw.mean1.data() + r0, lw.rstd1.data() + r0, lw.sum1.data() + r0 * h,
                        param(li.attention_norm.weight), rows, h);
    dropout_rows_backward(da, db, w.dropout, p, keys(site + 1), cn, per_sequence);
    const AttentionSaved<float> saved{
        lw.q.data() + r0 * h, lw.k.data() + r0 * h, lw.v.data() + r0 * h,
        lw.probs.data() + r0 * config_.heads * t, lw.context.data() + r0 * h};
    const AttentionParams<float> params{param(li.wq), param(li.bq), param(li.wk), param(li.bk),
                                        param(li.wv), param(li.bv), param(li.wo), param(li.bo)};
    const AttentionGrads<float> agrads{grad(li.wq), grad(li.bq), grad(li.wk), grad(li.bk),
                                       grad(li.wv), grad(li.bv), grad(li.wo), grad(li.bo)};
    const AttentionDropout attention_dropout{w.dropout ? p : 0.0, keys(site)};
    attention_backward(dcur, agrads, s.attention.data(), da, saved, in, params, attention_dropout,
                       cn, t, h, config_.heads);
    add_into(dcur, db, rc * h);
  }
  // Embedding dropout and LayerNorm; the table lookups' scatter runs after
  // all chunks (it writes rows shared between chunks).
  dropout_rows_backward(dcur, dcur, w.dropout, p, keys(0), cn, per_sequence);
  layer_norm_backward(w.dembedded.data() + r0 * h, grad(ix.embedding_norm.weight),
                      grad(ix.embedding_norm.bias), dcur, w.embedded_mean.data() + r0,
                      w.embedded_rstd.data() + r0, w.embedded.data() + r0 * h,
                      param(ix.embedding_norm.weight), rows, h);
}

MicroBatchResult BertTiny::head(bool train) {
  Workspace& w = *ws_;
  const Indices& ix = *index_;
  const int h = config_.hidden, vocab = config_.vocab_size, m = w.masked;
  MicroBatchResult result;
  if (train) std::fill(w.dtop.begin(), w.dtop.end(), 0.0f);
  if (m == 0) return result;
  auto param = [&](size_t i) { return parameters_->view(i).data(); };
  auto grad = [&](size_t i) { return gradients_->view(i).data(); };
  const float* top = w.hidden[config_.layers].data();
  for (int r = 0; r < m; ++r) {
    std::copy_n(top + static_cast<size_t>(w.rows[r]) * h, h, w.gathered.data() + r * h);
  }
  // Transform: dense, GELU, LayerNorm (small: masked x hidden).
  linear_forward(w.dense.data(), w.gathered.data(), param(ix.head_w), param(ix.head_b), m, h, h);
  gelu_forward(w.act.data(), w.dense.data(), static_cast<size_t>(m) * h);
  layer_norm_forward(w.normed.data(), w.head_mean.data(), w.head_rstd.data(), w.act.data(),
                     param(ix.head_norm.weight), param(ix.head_norm.bias), m, h, kBertLayerNormEps);
  // Decoder and fused softmax + cross-entropy, by blocks of masked rows;
  // training overwrites the logits with d loss_sum / d logits.
  const int blocks = (m + kHeadRows - 1) / kHeadRows;
  const float* word = param(ix.word);
  pool_->parallel_for(blocks, [&](int64_t block, int) {
    const int r0 = static_cast<int>(block) * kHeadRows, rows = std::min(kHeadRows, m - r0);
    float* logits = w.logits.data() + static_cast<size_t>(r0) * vocab;
    linear_forward(logits, w.normed.data() + static_cast<size_t>(r0) * h, word,
                   param(ix.decoder_bias), rows, h, vocab);
    w.block_results[block] =
        softmax_cross_entropy(train ? logits : nullptr, logits, w.labels.data() + r0, rows, vocab);
  });
  for (int block = 0; block < blocks; ++block) {
    result.loss_sum += w.block_results[block].loss_sum;
    result.loss_terms += w.block_results[block].scored;
    result.correct += w.block_results[block].correct;
  }
  if (!train) return result;

  const float* dlogits = w.logits.data();
  // Word-embedding (decoder) and bias gradients, by vocabulary slices; the
  // gradient at the transform's output, by blocks of rows.
  const int slices = (vocab + kVocabSlice - 1) / kVocabSlice;
  float* dword = grad(ix.word);
  float* dbias = grad(ix.decoder_bias);
  pool_->parallel_for(slices + blocks, [&](int64_t item, int) {
    if (item < slices) {
      const int v0 = static_cast<int>(item) * kVocabSlice,
                words = std::min(kVocabSlice, vocab - v0);
      blas::gemm<float>(Trans::kYes, Trans::kNo, words, h, m, 1.0f, dlogits + v0, vocab,
                        w.normed.data(), h, 1.0f, dword + static_cast<size_t>(v0) * h, h);
      for (int r = 0; r < m; ++r) {
        const float* row = dlogits + static_cast<size_t>(r) * vocab + v0;
        for (int j = 0; j < words; ++j) dbias[v0 + j] += row[j];
      }
    } else {
      const int r0 = static_cast<int>(item - slices) * kHeadRows,
                rows = std::min(kHeadRows, m - r0);
      blas::gemm<float>(Trans::kNo, Trans::kNo, rows, h, vocab, 1.0f,
                        dlogits + static_cast<size_t>(r0) * vocab, word, 0.0f,
                        w.dnormed.data() + static_cast<size_t>(r0) * h);
    }
  });
  layer_norm_backward(w.dact.data(), grad(ix.head_norm.weight), grad(ix.head_norm.bias),
                      w.dnormed.data(), w.head_mean.data(), w.head_rstd.data(), w.act.data(),
                      param(ix.head_norm.weight), m, h);
  gelu_backward(w.dact.data(), w.dact.data(), w.dense.data(), static_cast<size_t>(m) * h);
  linear_backward(w.dnormed.data(), grad(ix.head_w), grad(ix.head_b), w.dact.data(),
                  w.gathered.data(), param(ix.head_w), m, h, h);
  for (int r = 0; r < m; ++r) {
    std::copy_n(w.dnormed.data() + r * h, h, w.dtop.data() + static_cast<size_t>(w.rows[r]) * h);
  }
  return result;
}

double BertTiny::forward_flops_per_sample(int masked_per_sequence) const {
  const double t = config_.max_positions, h = config_.hidden, ffn = config_.ffn;
  const double layer = 4.0 * t * h * h + 2.0 * t * t * h + 2.0 * t * h * ffn;
  const double head = masked_per_sequence * (h * h + h * config_.vocab_size);
  return 2.0 * (config_.layers * layer + head);
}

}  // namespace dctrain
