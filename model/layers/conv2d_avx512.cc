#include "model/layers/conv2d_avx512.h"

// GCC 12's AVX-512 headers build "undefined" vectors from themselves, which
// -Wmaybe-uninitialized reports wherever they are inlined (GCC bug 105593,
// fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "model/blas.h"
#include "model/layers/conv2d_lowering.h"

#define DCTRAIN_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,fma")))

namespace dctrain::conv2d_avx512 {
namespace {

constexpr int kMr = 8;                       // output rows per forward tile (broadcast weights)
constexpr int kNr = 3;                       // 16-lane segments per forward tile
constexpr int kWo = 4, kWk = 5;              // dw tile: output channels x (c, ky, kx) columns
constexpr int64_t kGroupBytes = 512 * 1024;  // dw: samples' padded x and dy kept in L2

// Stride 1 with padding below the kernel: computed from the padded input,
// and dx as a convolution of dy. Other shapes go through im2col (forward,
// dw) and a GEMM + col2im (dx).
bool direct(const Conv2dShape& s) {
  return s.stride == 1 && s.padding <= s.kernel_h - 1 && s.padding <= s.kernel_w - 1;
}

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// A zero-padded (C, H + 2 ph, W + 2 pw) copy of src (C, H, W).
struct Padded {
  int c, h, w, ph, pw;
  int rows() const { return h + 2 * ph; }
  int cols() const { return w + 2 * pw; }
  int64_t plane() const { return int64_t{rows()} * cols(); }
  int64_t size() const { return c * plane(); }
};

void pad_copy(float* dst, const float* src, const Padded& p) {
  const int cols = p.cols();
  for (int c = 0; c < p.c; ++c) {
    float* d = dst + c * p.plane();
    const float* s = src + int64_t{c} * p.h * p.w;
    std::fill(d, d + int64_t{p.ph} * cols, 0.0f);
    d += int64_t{p.ph} * cols;
    for (int y = 0; y < p.h; ++y) {
      std::fill(d, d + p.pw, 0.0f);
      std::memcpy(d + p.pw, s + int64_t{y} * p.w, sizeof(float) * static_cast<size_t>(p.w));
      std::fill(d + p.pw + p.w, d + cols, 0.0f);
      d += cols;
    }
    std::fill(d, d + int64_t{p.ph} * cols, 0.0f);
  }
}

// Rows k = (i0, i1, i2) of the implicit matrix B start at src + i0*s0 + i1*s1 + i2*s2.
struct KMap {
  int n0, n1, n2;
  int64_t s0, s1, s2;
  int64_t offset(int k) const {
    const int i2 = k % n2, i1 = (k / n2) % n1, i0 = k / (n1 * n2);
    return i0 * s0 + i1 * s1 + i2 * s2;
  }
};

// Output positions (oh, ow) in 16-lane segments; the source has rows of
// in_stride floats, the output rows of ow.
struct Plane {
  int oh, ow, in_stride;
  bool pair() const { return ow <= 8; }
  int count() const { return pair() ? (oh + 1) / 2 : oh * ((ow + 15) / 16); }
};

struct Seg {
  int in_lo = 0, in_hi = 0, out_lo = 0, out_hi = 0;
  __mmask16 mask = 0;                 // whole-row segments
  __mmask8 mask_lo = 0, mask_hi = 0;  // two-row segments
};

// Walks the segments of a plane in order.
class SegWalk {
 public:
  explicit SegWalk(const Plane& g) : g_(g) {}
  Seg next() {
    Seg s;
    if (g_.pair()) {
      s.in_lo = oy_ * g_.in_stride;
      s.out_lo = oy_ * g_.ow;
      s.mask_lo = static_cast<__mmask8>((1u << g_.ow) - 1);
      if (oy_ + 1 < g_.oh) {
        s.in_hi = s.in_lo + g_.in_stride;
        s.out_hi = s.out_lo + g_.ow;
        s.mask_hi = s.mask_lo;
      } else {
        s.in_hi = s.in_lo;
        s.out_hi = s.out_lo;
      }
      oy_ += 2;
    } else {
      const int len = std::min(16, g_.ow - ox_);
      s.in_lo = oy_ * g_.in_stride + ox_;
      s.out_lo = oy_ * g_.ow + ox_;
      s.mask = static_cast<__mmask16>((1u << len) - 1);
      ox_ += 16;
      if (ox_ >= g_.ow) {
        ox_ = 0;
        ++oy_;
      }
    }
    return s;
  }

 private:
  Plane g_;
  int oy_ = 0, ox_ = 0;
};

template <bool Pair>
DCTRAIN_AVX512 inline __m512 load_in(const float* p, const Seg& s) {
  if constexpr (Pair) {
    const __m256 lo = _mm256_maskz_loadu_ps(s.mask_lo, p + s.in_lo);
    const __m256 hi = _mm256_maskz_loadu_ps(s.mask_hi, p + s.in_hi);
    return _mm512_insertf32x8(_mm512_zextps256_ps512(lo), hi, 1);
  } else {
    return _mm512_maskz_loadu_ps(s.mask, p + s.in_lo);
  }
}

template <bool Pair>
DCTRAIN_AVX512 inline __m512 load_out(const float* p, const Seg& s) {
  if constexpr (Pair) {
    const __m256 lo = _mm256_maskz_loadu_ps(s.mask_lo, p + s.out_lo);
    const __m256 hi = _mm256_maskz_loadu_ps(s.mask_hi, p + s.out_hi);
    return _mm512_insertf32x8(_mm512_zextps256_ps512(lo), hi, 1);
  } else {
    return _mm512_maskz_loadu_ps(s.mask, p + s.out_lo);
  }
}

template <bool Pair>
DCTRAIN_AVX512 inline void store_out(float* p, const Seg& s, __m512 v) {
  if constexpr (Pair) {
    _mm256_mask_storeu_ps(p + s.out_lo, s.mask_lo, _mm512_castps512_ps256(v));
    _mm256_mask_storeu_ps(p + s.out_hi, s.mask_hi, _mm512_extractf32x8_ps(v, 1));
  } else {
    _mm512_mask_storeu_ps(p + s.out_lo, s.mask, v);
  }
}

// A (m, k) packed as panels of kMr rows: panel[k][r] = a(panel * kMr + r, k),
// zero past m.
template <typename F>
void pack_panels(float* dst, int m, int k, F&& a) {
  for (int p0 = 0; p0 < m; p0 += kMr) {
    for (int j = 0; j < k; ++j) {
      for (int r = 0; r < kMr; ++r) *dst++ = p0 + r < m ? a(p0 + r, j) : 0.0f;
    }
  }
}

// y rows [0, rows) (row stride ldy) at nr segments = panel (kMr, K) * B; starts
// from bias (or zero) and adds y's content when accumulate.
template <bool Pair, int Nr>
DCTRAIN_AVX512 void forward_tile(float* y, int64_t ldy, int rows, const float* panel,
                                 const float* src, const KMap& km, const Seg* seg,
                                 const float* bias, bool accumulate) {
  __m512 acc[kMr][Nr];
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
    const __m512 init = bias != nullptr && r < rows ? _mm512_set1_ps(bias[r]) : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int j = 0; j < Nr; ++j) acc[r][j] = init;
  }
  // One loop over k = (i0, i1, i2) keeps the accumulators in registers.
  const int k = km.n0 * km.n1 * km.n2;
  const float* plane = src;
  const float* row = src;
  const float* p = src;
  int i1 = 0, i2 = 0;
  for (int kk = 0; kk < k; ++kk) {
    const float* a = panel + kk * kMr;
    __m512 b[Nr];
#pragma GCC unroll 4
    for (int j = 0; j < Nr; ++j) b[j] = load_in<Pair>(p, seg[j]);
#pragma GCC unroll 8
    for (int r = 0; r < kMr; ++r) {
      const __m512 w = _mm512_set1_ps(a[r]);
#pragma GCC unroll 4
      for (int j = 0; j < Nr; ++j) acc[r][j] = _mm512_fmadd_ps(w, b[j], acc[r][j]);
    }
    if (++i2 < km.n2) {
      p += km.s2;
    } else if (i2 = 0, ++i1 < km.n1) {
      row += km.s1;
      p = row;
    } else {
      i1 = 0;
      plane += km.s0;
      row = p = plane;
    }
  }
  // Constant bounds (rows tested inside) keep acc out of memory.
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
    if (r >= rows) break;
    float* out = y + r * ldy;
#pragma GCC unroll 4
    for (int j = 0; j < Nr; ++j) {
      __m512 v = acc[r][j];
      if (accumulate) v = _mm512_add_ps(load_out<Pair>(out, seg[j]), v);
      store_out<Pair>(out, seg[j], v);
    }
  }
}

// y (m, plane) = panels (m, K) * B (+ bias, + y when accumulate).
template <bool Pair>
DCTRAIN_AVX512 void forward_plane(float* y, int m, const float* panels, const float* src,
                                  const KMap& km, const Plane& g, const float* bias,
                                  bool accumulate) {
  const int k = km.n0 * km.n1 * km.n2;
  const int64_t ldy = int64_t{g.oh} * g.ow;
  const int count = g.count();
  const int groups = (count + kNr - 1) / kNr;
  SegWalk walk(g);
  for (int gi = 0, done = 0; gi < groups; ++gi) {
    // Spread the segments evenly over the groups (4 -> 2 + 2, not 3 + 1).
    const int nr = (count - done + (groups - gi) - 1) / (groups - gi);
    Seg seg[kNr];
    for (int j = 0; j < nr; ++j) seg[j] = walk.next();
    done += nr;
    for (int p0 = 0; p0 < m; p0 += kMr) {
      const int rows = std::min(kMr, m - p0);
      float* yp = y + p0 * ldy;
      const float* panel = panels + int64_t{p0} * k;
      const float* bp = bias != nullptr ? bias + p0 : nullptr;
      switch (nr) {
        case 3:
          forward_tile<Pair, 3>(yp, ldy, rows, panel, src, km, seg, bp, accumulate);
          break;
        case 2:
          forward_tile<Pair, 2>(yp, ldy, rows, panel, src, km, seg, bp, accumulate);
          break;
        default:
          forward_tile<Pair, 1>(yp, ldy, rows, panel, src, km, seg, bp, accumulate);
          break;
      }
    }
  }
}

void run_forward(float* y, int m, const float* panels, const float* src, const KMap& km,
                 const Plane& g, const float* bias, bool accumulate) {
  if (g.pair()) {
    forward_plane<true>(y, m, panels, src, km, g, bias, accumulate);
  } else {
    forward_plane<false>(y, m, panels, src, km, g, bias, accumulate);
  }
}

// dw rows [o0, o0 + orows) x columns [k0, k0 + kcols) += sum over samples and
// positions of dy (o, position) * B (k, position).
template <bool Pair>
DCTRAIN_AVX512 void weight_tile(float* dw, int k_total, int o0, int orows, int k0, int kcols,
                                const float* dy, int64_t dy_sample, const float* src,
                                int64_t src_sample, int samples, const KMap& km, const Plane& g) {
  __m512 acc[kWo][kWk];
#pragma GCC unroll 4
  for (int r = 0; r < kWo; ++r) {
#pragma GCC unroll 8
    for (int i = 0; i < kWk; ++i) acc[r][i] = _mm512_setzero_ps();
  }
  int64_t off[kWk];
  for (int i = 0; i < kWk; ++i) off[i] = km.offset(k0 + std::min(i, kcols - 1));
  const int64_t plane = int64_t{g.oh} * g.ow;
  const int count = g.count();
  for (int n = 0; n < samples; ++n) {
    const float* dyn = dy + n * dy_sample;
    const float* srcn = src + n * src_sample;
    const float* drow[kWo];
    for (int r = 0; r < kWo; ++r) drow[r] = dyn + (o0 + std::min(r, orows - 1)) * plane;
    SegWalk walk(g);
    for (int j = 0; j < count; ++j) {
      const Seg s = walk.next();
      __m512 d[kWo];
#pragma GCC unroll 4
      for (int r = 0; r < kWo; ++r) d[r] = load_out<Pair>(drow[r], s);
#pragma GCC unroll 8
      for (int i = 0; i < kWk; ++i) {
        const __m512 b = load_in<Pair>(srcn + off[i], s);
#pragma GCC unroll 4
        for (int r = 0; r < kWo; ++r) acc[r][i] = _mm512_fmadd_ps(d[r], b, acc[r][i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kWo; ++r) {
#pragma GCC unroll 8
    for (int i = 0; i < kWk; ++i) {
      if (r < orows && i < kcols)
        dw[(o0 + r) * int64_t{k_total} + k0 + i] += _mm512_reduce_add_ps(acc[r][i]);
    }
  }
}

void run_weight(float* dw, int m, const float* dy, int64_t dy_sample, const float* src,
                int64_t src_sample, int samples, const KMap& km, const Plane& g) {
  const int k = km.n0 * km.n1 * km.n2;
  for (int o0 = 0; o0 < m; o0 += kWo) {
    for (int k0 = 0; k0 < k; k0 += kWk) {
      const int orows = std::min(kWo, m - o0), kcols = std::min(kWk, k - k0);
      if (g.pair()) {
        weight_tile<true>(dw, k, o0, orows, k0, kcols, dy, dy_sample, src, src_sample, samples, km,
                          g);
      } else {
        weight_tile<false>(dw, k, o0, orows, k0, kcols, dy, dy_sample, src, src_sample, samples, km,
                           g);
      }
    }
  }
}

Padded input_padding(const Conv2dShape& s) {
  return {s.in_channels, s.in_height, s.in_width, s.padding, s.padding};
}
Padded output_padding(const Conv2dShape& s) {
  return {s.out_channels, s.out_height(), s.out_width(), s.kernel_h - 1 - s.padding,
          s.kernel_w - 1 - s.padding};
}

}  // namespace

bool handles(const Conv2dShape& s) {
  return !s.pointwise() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("fma");
}

int64_t scratch_size(const Conv2dShape& s) {
  if (s.pointwise()) return 0;
  const int64_t k = int64_t{s.in_channels} * s.kernel_h * s.kernel_w;
  const int64_t col = k * s.out_height() * s.out_width();
  if (!direct(s)) return round_up(s.out_channels, kMr) * k + col;
  const int64_t kt = int64_t{s.out_channels} * s.kernel_h * s.kernel_w;
  const int64_t fwd = round_up(s.out_channels, kMr) * k + input_padding(s).size();
  const int64_t dx = round_up(s.in_channels, kMr) * kt + output_padding(s).size();
  return std::max(fwd, dx);
}

void forward(float* y, float* scratch, const float* x, const float* w, const float* b,
             const Conv2dShape& s) {
  const int k = s.in_channels * s.kernel_h * s.kernel_w;
  float* panels = scratch;
  pack_panels(panels, s.out_channels, k, [&](int o, int j) { return w[int64_t{o} * k + j]; });
  float* src = panels + round_up(s.out_channels, kMr) * k;
  if (!direct(s)) {
    // B is the im2col matrix (K, P), taken as one row of P positions.
    const int p = s.out_height() * s.out_width();
    const KMap km{k, 1, 1, p, 0, 0};
    const Plane g{1, p, p};
    for (int i = 0; i < s.n; ++i) {
      im2col(src, x + i * s.in_size(), s);
      run_forward(y + i * s.out_size(), s.out_channels, panels, src, km, g, b, false);
    }
    return;
  }
  const Padded pad = input_padding(s);
  const KMap km{s.in_channels, s.kernel_h, s.kernel_w, pad.plane(), pad.cols(), 1};
  const Plane g{s.out_height(), s.out_width(), pad.cols()};
  for (int i = 0; i < s.n; ++i) {
    pad_copy(src, x + i * s.in_size(), pad);
    run_forward(y + i * s.out_size(), s.out_channels, panels, src, km, g, b, false);
  }
}

void backward(float* dx, float* dw, float* db, float* scratch, const float* dy, const float* x,
              const float* w, const Conv2dShape& s, bool accumulate_dx) {
  const int p = s.out_height() * s.out_width();
  if (db != nullptr) {
    for (int i = 0; i < s.n; ++i) {
      const float* dyi = dy + i * s.out_size();
      for (int o = 0; o < s.out_channels; ++o) {
        const float* row = dyi + int64_t{o} * p;
        float sum = 0.0f;
        for (int j = 0; j < p; ++j) sum += row[j];
        db[o] += sum;
      }
    }
  }
  if (!direct(s)) {
    // One sample's positions are too few to amortise the dw kernel's
    // horizontal sums here: BLAS takes both GEMMs.
    const int k = s.in_channels * s.kernel_h * s.kernel_w;
    for (int i = 0; i < s.n; ++i) {
      const float* dyi = dy + i * s.out_size();
      im2col(scratch, x + i * s.in_size(), s);
      blas::gemm<float>(blas::Trans::kNo, blas::Trans::kYes, s.out_channels, k, p, 1.0f, dyi,
                        scratch, 1.0f, dw);
      if (dx == nullptr) continue;
      float* dxi = dx + i * s.in_size();
      blas::gemm<float>(blas::Trans::kYes, blas::Trans::kNo, k, p, s.out_channels, 1.0f, w, dyi,
                        0.0f, scratch);
      if (!accumulate_dx) std::fill(dxi, dxi + s.in_size(), 0.0f);
      col2im_add(dxi, scratch, s);
    }
    return;
  }
  if (dx != nullptr) {
    // dx (in_c, H, W) = conv of dy padded by kernel - 1 - padding with
    // w'(c, (o, ky, kx)) = w(o, c, kh - 1 - ky, kw - 1 - kx).
    const int kh = s.kernel_h, kw = s.kernel_w;
    const int kt = s.out_channels * kh * kw;
    float* panels = scratch;
    pack_panels(panels, s.in_channels, kt, [&](int c, int j) {
      const int o = j / (kh * kw), t = j % (kh * kw);
      const int ky = kh - 1 - t / kw, kx = kw - 1 - t % kw;
      return w[((int64_t{o} * s.in_channels + c) * kh + ky) * kw + kx];
    });
    const Padded pad = output_padding(s);
    float* dyp = panels + round_up(s.in_channels, kMr) * kt;
    const KMap km{s.out_channels, kh, kw, pad.plane(), pad.cols(), 1};
    const Plane g{s.in_height, s.in_width, pad.cols()};
    for (int i = 0; i < s.n; ++i) {
      pad_copy(dyp, dy + i * s.out_size(), pad);
      run_forward(dx + i * s.in_size(), s.in_channels, panels, dyp, km, g, nullptr, accumulate_dx);
    }
  }
  // dw over groups of samples whose padded inputs (and dy) stay in L2.
  const Padded pad = input_padding(s);
  const int64_t per_sample_bytes = int64_t{sizeof(float)} * (pad.size() + s.out_size());
  const int64_t fit =
      std::max<int64_t>(1, std::min(s.col_size() / pad.size(), kGroupBytes / per_sample_bytes));
  const int groups = static_cast<int>((s.n + fit - 1) / fit);
  const KMap km{s.in_channels, s.kernel_h, s.kernel_w, pad.plane(), pad.cols(), 1};
  const Plane g{s.out_height(), s.out_width(), pad.cols()};
  for (int gi = 0; gi < groups; ++gi) {
    const int begin = static_cast<int>(int64_t{gi} * s.n / groups);
    const int end = static_cast<int>(int64_t{gi + 1} * s.n / groups);
    for (int i = begin; i < end; ++i)
      pad_copy(scratch + (i - begin) * pad.size(), x + i * s.in_size(), pad);
    run_weight(dw, s.out_channels, dy + begin * s.out_size(), s.out_size(), scratch, pad.size(),
               end - begin, km, g);
  }
}

}  // namespace dctrain::conv2d_avx512
