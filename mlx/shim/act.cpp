// act.cpp: the sigmoid-gated products of a transformer layer as one MLX
// primitive on the CPU, vectorised.
//
// silu(a) ⊙ b (the SwiGLU MLP's activation) and x ⊙ σ(g) (the gated
// attention output) are fused by mlx.Compile into one JIT kernel each, but
// MLX builds its CPU kernels with `g++ -O3` and no target flags, and has no
// x86 SIMD type: every element takes the scalar path of MLX's exp, whose
// five std::fma calls go through libm (fmaf), about 15 ns an element. When
// the two operands are views of one fused projection (gate_up split in
// half), the strided variant is taken for every row. On go-tiny's 8-token
// verification these kernels cost more than the attention itself.
//
// SigmoidMulCPU computes the same operations as MLX's scalar path, in the
// same order, eight lanes at a time with AVX2+FMA (one fused multiply-add per
// std::fma, float32 rounding after every other operation, floor(x + 0.5)
// taken exactly as MLX takes it, in double), and the remainder through the
// scalar path itself: every element equals the compiled kernel's to the bit,
// wherever it sits in its row, so models keep their values and a row's
// result does not depend on the rows beside it. It is queued on the CPU
// stream's encoder as gdn.cpp's scan is (see there for why that is correct).
//
// ConvSiLUCPU is the delta-net's causal depthwise convolution with its SiLU
// (qwen35's causalConvSiLU, a compiled chain of Kc multiplies and adds and a
// SiLU), the same way: one multiply and one add per tap, each rounded to
// float32 as the compiled kernel rounds them (it is built without FMA), then
// s · σ(s).
//
// SoftmaxCPU is MLX's CPU Softmax in float32 (attention's, through
// shim.cpp's sdpa_cpu): the exps eight at a time with the same exp, the
// maximum (order-free on finite rows) and the sum in row order, each row's
// sum a chain of its own, eight rows' chains interleaved.

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace {

// mlx_exp is MLX's scalar exp (backend/cpu/simd/math.h, N = 1).
inline float mlx_exp(float x_init) {
  float x = x_init * 1.442695f;
  // MLX adds the double 0.5, so the sum and its floor are taken in double.
  const float ipart = static_cast<float>(std::floor(static_cast<double>(x) + 0.5));
  const float fpart = x - ipart;
  x = 1.535336188319500e-4f;
  x = std::fma(x, fpart, 1.339887440266574e-3f);
  x = std::fma(x, fpart, 9.618437357674640e-3f);
  x = std::fma(x, fpart, 5.550332471162809e-2f);
  x = std::fma(x, fpart, 2.402264791363012e-1f);
  x = std::fma(x, fpart, 6.931472028550421e-1f);
  x = std::fma(x, fpart, 1.000000000000000f);
  if (std::isnan(x_init)) {
    return x_init;
  }
  if (x_init > 88.0f) {
    return INFINITY;
  }
  if (x_init < -88.0f) {
    return 0.0f;
  }
  const int32_t ebits = (static_cast<int32_t>(ipart) + 127) << 23;
  float e;
  std::memcpy(&e, &ebits, sizeof e);
  return e * x;
}

// mlx_sigmoid is MLX's scalar Sigmoid (backend/cpu/unary_ops.h).
inline float mlx_sigmoid(float x) {
  const float y = 1.0f / (1.0f + mlx_exp(std::fabs(x)));
  return x < 0.0f ? y : 1.0f - y;
}

// gate_one is one output element: (a · σ(a)) · b with silu, a · σ(b)
// without, the compiled kernels' order.
inline float gate_one(float a, float b, bool silu) {
  return silu ? (a * mlx_sigmoid(a)) * b : a * mlx_sigmoid(b);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SPX_ACT_AVX2 __attribute__((target("avx2,fma")))

// floor(x + 0.5) in double for eight floats, rounded back to float (exact:
// the floor is an integer of at most 2^24 in magnitude wherever it is used).
SPX_ACT_AVX2 inline __m256 floor_half_up(__m256 x) {
  const __m256d half = _mm256_set1_pd(0.5);
  const __m256d lo = _mm256_floor_pd(_mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), half));
  const __m256d hi = _mm256_floor_pd(_mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), half));
  return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
}

SPX_ACT_AVX2 inline __m256 exp8(__m256 x_init) {
  __m256 x = _mm256_mul_ps(x_init, _mm256_set1_ps(1.442695f));
  const __m256 ipart = floor_half_up(x);
  const __m256 fpart = _mm256_sub_ps(x, ipart);
  x = _mm256_set1_ps(1.535336188319500e-4f);
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(1.339887440266574e-3f));
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(9.618437357674640e-3f));
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(5.550332471162809e-2f));
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(2.402264791363012e-1f));
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(6.931472028550421e-1f));
  x = _mm256_fmadd_ps(x, fpart, _mm256_set1_ps(1.000000000000000f));
  const __m256i ebits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(ipart), _mm256_set1_epi32(127)), 23);
  __m256 r = _mm256_mul_ps(_mm256_castsi256_ps(ebits), x);
  r = _mm256_blendv_ps(r, x_init, _mm256_cmp_ps(x_init, x_init, _CMP_UNORD_Q));
  r = _mm256_blendv_ps(r, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x_init, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
  r = _mm256_blendv_ps(r, _mm256_setzero_ps(), _mm256_cmp_ps(x_init, _mm256_set1_ps(-88.0f), _CMP_LT_OQ));
  return r;
}

SPX_ACT_AVX2 inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 y = _mm256_div_ps(one, _mm256_add_ps(one, exp8(ax)));
  return _mm256_blendv_ps(_mm256_sub_ps(one, y), y, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
}

// gate_row_avx2 does a contiguous row of n elements: eight at a time, the
// rest through gate_one.
SPX_ACT_AVX2 void gate_row_avx2(const float* a, const float* b, float* y, int n, bool silu) {
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 av = _mm256_loadu_ps(a + j);
    const __m256 bv = _mm256_loadu_ps(b + j);
    const __m256 out = silu ? _mm256_mul_ps(_mm256_mul_ps(av, sigmoid8(av)), bv)
                            : _mm256_mul_ps(av, sigmoid8(bv));
    _mm256_storeu_ps(y + j, out);
  }
  for (; j < n; j++) {
    y[j] = gate_one(a[j], b[j], silu);
  }
}

bool have_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return yes;
}
#else
bool have_avx2() { return false; }
#endif

// SigmoidMulCPU: silu(a) ⊙ b (silu) or a ⊙ σ(b), float32, for a and b of
// one shape (rank ≥ 1, any strides); the output is row-contiguous.
class SigmoidMulCPU : public mx::UnaryPrimitive {
 public:
  SigmoidMulCPU(mx::Stream s, bool silu) : mx::UnaryPrimitive(s), silu_(silu) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    const mx::array& a = in[0];
    const mx::array& b = in[1];
    const int D = a.shape(-1);
    std::vector<int64_t> as = row_starts(a), bs = row_starts(b);
    const float* ap = a.data<float>();
    const float* bp = b.data<float>();
    const int64_t ast = a.strides()[a.ndim() - 1], bst = b.strides()[b.ndim() - 1];
    float* yp = out.data<float>();
    const bool silu = silu_;
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (const auto& x : in) {
      enc.set_input_array(x);
    }
    enc.set_output_array(out);
    enc.dispatch([as = std::move(as), bs = std::move(bs), ap, bp, ast, bst, yp, D, silu]() {
      const bool fast = ast == 1 && bst == 1 && have_avx2();
      for (size_t r = 0; r < as.size(); r++) {
        const float* a = ap + as[r];
        const float* b = bp + bs[r];
        float* y = yp + r * D;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (fast) {
          gate_row_avx2(a, b, y, D, silu);
          continue;
        }
#endif
        for (int j = 0; j < D; j++) {
          y[j] = gate_one(a[j * ast], b[j * bst], silu);
        }
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("SigmoidMulCPU runs on the CPU only");
  }

  const char* name() const override { return "SigmoidMulCPU"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return silu_ == static_cast<const SigmoidMulCPU&>(other).silu_;
  }

 private:
  bool silu_;
};

// rounded returns v as it is, but hides it from the compiler, which would
// otherwise fuse the multiply that made v into the add that uses it (GCC
// contracts a·b + c into one fused multiply-add, with one rounding instead
// of two, wherever FMA is enabled, as in the AVX2 functions below and
// anything inlined into them).
inline float rounded(float v) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __asm__("" : "+x"(v));
#endif
  return v;
}

// conv_one is one output channel of ConvSiLUCPU: Σ_j x[j]·w[j] in tap order
// (a multiply and an add, each rounded), then s · σ(s).
inline float conv_one(const float* x, int64_t xst, const float* w, int64_t wst, int taps) {
  float s = rounded(x[0] * w[0]);
  for (int j = 1; j < taps; j++) {
    s = s + rounded(x[j * xst] * w[j * wst]);
  }
  return s * mlx_sigmoid(s);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
SPX_ACT_AVX2 inline __m256 rounded8(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

// conv_row_avx2 does one output row of C channels, eight at a time, from
// the taps' input rows x + j·xst and weight rows w + j·wst (channels
// contiguous in both), the rest through conv_one.
SPX_ACT_AVX2 void conv_row_avx2(const float* x, int64_t xst, const float* w, int64_t wst, int taps,
                                float* y, int C) {
  int c = 0;
  for (; c + 8 <= C; c += 8) {
    __m256 s = _mm256_mul_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(w + c));
    for (int j = 1; j < taps; j++) {
      s = _mm256_add_ps(s, rounded8(_mm256_mul_ps(_mm256_loadu_ps(x + j * xst + c), _mm256_loadu_ps(w + j * wst + c))));
    }
    _mm256_storeu_ps(y + c, _mm256_mul_ps(s, sigmoid8(s)));
  }
  for (; c < C; c++) {
    y[c] = conv_one(x + c, xst, w + c, wst, taps);
  }
}
#endif

// ConvSiLUCPU: y[b, t, c] = silu(Σ_j x[b, t + j, c] · w[j, c]) for x
// [B, L + Kc − 1, C] and w [Kc, C] (float32, any strides); y [B, L, C] is
// row-contiguous.
class ConvSiLUCPU : public mx::UnaryPrimitive {
 public:
  explicit ConvSiLUCPU(mx::Stream s) : mx::UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    const mx::array& x = in[0];
    const mx::array& w = in[1];
    const int B = out.shape(0), L = out.shape(1), C = out.shape(2), taps = w.shape(0);
    const float* xp = x.data<float>();
    const float* wp = w.data<float>();
    const int64_t xb = x.strides()[0], xt = x.strides()[1], xc = x.strides()[2];
    const int64_t wt = w.strides()[0], wc = w.strides()[1];
    float* yp = out.data<float>();
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (const auto& a : in) {
      enc.set_input_array(a);
    }
    enc.set_output_array(out);
    enc.dispatch([=]() {
      const bool fast = xc == 1 && wc == 1 && have_avx2();
      for (int b = 0; b < B; b++) {
        for (int t = 0; t < L; t++) {
          const float* xr = xp + b * xb + t * xt;
          float* y = yp + (int64_t(b) * L + t) * C;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
          if (fast) {
            conv_row_avx2(xr, xt, wp, wt, taps, y, C);
            continue;
          }
#endif
          for (int c = 0; c < C; c++) {
            y[c] = conv_one(xr + c * xc, xt, wp + c * wc, wt, taps);
          }
        }
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("ConvSiLUCPU runs on the CPU only");
  }

  const char* name() const override { return "ConvSiLUCPU"; }

  bool is_equivalent(const mx::Primitive&) const override { return true; }
};

// DynamicConvCPU is DFlash2's block-local dynamic convolution (arch/dflash2
// dynamicConv): y[t, c] = Σ_{j < min(K, L)} (w[t, j, c / S] + b[j, c]) ·
// x[t − j, c], x before row 0 being +0, summed in tap order with each add
// and multiply rounded as the composed ops round them. Composed, it is about
// twelve graph nodes per tap, four taps, four convolutions per draft layer;
// here one node and a plain loop. x [1, L, H], w [1, L, K, G], b [K, H]
// (float32, any strides), S = H / G; y [1, L, H] is row-contiguous.
class DynamicConvCPU : public mx::UnaryPrimitive {
 public:
  DynamicConvCPU(mx::Stream s, int group) : mx::UnaryPrimitive(s), group_(group) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    const mx::array& x = in[0];
    const mx::array& w = in[1];
    const mx::array& b = in[2];
    const int L = x.shape(1), H = x.shape(2), K = w.shape(2), S = group_;
    const float* xp = x.data<float>();
    const float* wp = w.data<float>();
    const float* bp = b.data<float>();
    const int64_t xt = x.strides()[1], xc = x.strides()[2];
    const int64_t wt = w.strides()[1], wj = w.strides()[2], wg = w.strides()[3];
    const int64_t bj = b.strides()[0], bc = b.strides()[1];
    float* yp = out.data<float>();
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (const auto& a : in) {
      enc.set_input_array(a);
    }
    enc.set_output_array(out);
    enc.dispatch([=]() {
      const int taps = std::min(K, L);
      for (int t = 0; t < L; t++) {
        float* y = yp + int64_t(t) * H;
        for (int c = 0; c < H; c++) {
          float acc = 0.0f;
          for (int j = 0; j < taps; j++) {
            const float coef = rounded(wp[t * wt + j * wj + (c / S) * wg] + bp[j * bj + c * bc]);
            const float xv = t >= j ? xp[(t - j) * xt + c * xc] : 0.0f;
            const float term = rounded(coef * xv);
            acc = j == 0 ? term : acc + term;
          }
          y[c] = acc;
        }
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("DynamicConvCPU runs on the CPU only");
  }

  const char* name() const override { return "DynamicConvCPU"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return group_ == static_cast<const DynamicConvCPU&>(other).group_;
  }

 private:
  int group_;
};

// softmax_row_mlx is one row of MLX's CPU Softmax for float32 (backend/cpu/
// softmax.cpp, N = 1 on x86): the maximum in row order (a NaN wins, the last
// one seen), exp(x − max) through MLX's scalar exp, their sum in row order
// from 0, then each exp times 1 / sum. x has element stride xst; y is
// contiguous.
inline void softmax_row_mlx(const float* x, int64_t xst, float* y, int n) {
  float m = -INFINITY;
  for (int j = 0; j < n; j++) {
    const float v = x[j * xst];
    m = std::isnan(v) ? v : (v > m ? v : m);
  }
  float sum = 0.0f;
  for (int j = 0; j < n; j++) {
    y[j] = mlx_exp(x[j * xst] - m);
    sum = sum + y[j];
  }
  const float inv = 1 / sum;
  for (int j = 0; j < n; j++) {
    y[j] = y[j] * inv;
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// softmax_rows_avx2 does up to eight contiguous rows of n floats (x[r], y[r];
// a missing row repeats the last one and is written twice with equal
// values). The maximum is order-free for finite rows (a row holding NaN or
// +inf, or only −inf, goes through softmax_row_mlx whole, as do rows when
// any row of the group does). The exps are act.cpp's exp8, equal to MLX's
// scalar exp lane for lane; the sums stay in row order, one chain per row,
// the eight chains interleaved so that their adds overlap.
SPX_ACT_AVX2 void softmax_rows_avx2(const float* const* x, float* const* y, int rows, int n) {
  float m[8];
  bool plain = true;
  for (int r = 0; r < rows; r++) {
    __m256 vm = _mm256_set1_ps(-INFINITY);
    __m256 bad = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 v = _mm256_loadu_ps(x[r] + j);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      vm = _mm256_max_ps(vm, v);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, vm);
    float mr = lanes[0];
    for (int k = 1; k < 8; k++) {
      mr = lanes[k] > mr ? lanes[k] : mr;
    }
    bool nan = _mm256_movemask_ps(bad) != 0;
    for (; j < n; j++) {
      nan = nan || std::isnan(x[r][j]);
      mr = x[r][j] > mr ? x[r][j] : mr;
    }
    if (nan || !std::isfinite(mr)) {
      plain = false;
      break;
    }
    m[r] = mr;
  }
  if (!plain) {
    for (int r = 0; r < rows; r++) {
      softmax_row_mlx(x[r], 1, y[r], n);
    }
    return;
  }
  for (int r = 0; r < rows; r++) {
    const __m256 vm = _mm256_set1_ps(m[r]);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
      _mm256_storeu_ps(y[r] + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(x[r] + j), vm)));
    }
    for (; j < n; j++) {
      y[r][j] = mlx_exp(x[r][j] - m[r]);
    }
  }
  const float* e[8];
  for (int r = 0; r < 8; r++) {
    e[r] = y[r < rows ? r : rows - 1];
  }
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  for (int j = 0; j < n; j++) {
    s0 = s0 + e[0][j];
    s1 = s1 + e[1][j];
    s2 = s2 + e[2][j];
    s3 = s3 + e[3][j];
    s4 = s4 + e[4][j];
    s5 = s5 + e[5][j];
    s6 = s6 + e[6][j];
    s7 = s7 + e[7][j];
  }
  const float sums[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
  for (int r = 0; r < rows; r++) {
    const float inv = 1 / sums[r];
    const __m256 vi = _mm256_set1_ps(inv);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
      _mm256_storeu_ps(y[r] + j, _mm256_mul_ps(_mm256_loadu_ps(y[r] + j), vi));
    }
    for (; j < n; j++) {
      y[r][j] = y[r][j] * inv;
    }
  }
}
#endif

// SoftmaxCPU: the softmax of each row of a float32 array's last axis (any
// strides), equal to the bit to MLX's CPU Softmax (which runs MLX's scalar
// exp element by element); the output is row-contiguous.
class SoftmaxCPU : public mx::UnaryPrimitive {
 public:
  explicit SoftmaxCPU(mx::Stream s) : mx::UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    const mx::array& x = in[0];
    const int n = x.shape(-1);
    std::vector<int64_t> starts = row_starts(x);
    const float* xp = x.data<float>();
    const int64_t xst = x.strides()[x.ndim() - 1];
    float* yp = out.data<float>();
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(x);
    enc.set_output_array(out);
    enc.dispatch([starts = std::move(starts), xp, xst, yp, n]() {
      const size_t rows = starts.size();
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
      if (xst == 1 && have_avx2()) {
        for (size_t r = 0; r < rows; r += 8) {
          const int g = static_cast<int>(std::min<size_t>(8, rows - r));
          const float* xs[8];
          float* ys[8];
          for (int k = 0; k < g; k++) {
            xs[k] = xp + starts[r + k];
            ys[k] = yp + (r + k) * n;
          }
          softmax_rows_avx2(xs, ys, g, n);
        }
        return;
      }
#endif
      for (size_t r = 0; r < rows; r++) {
        softmax_row_mlx(xp + starts[r], xst, yp + r * n, n);
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("SoftmaxCPU runs on the CPU only");
  }

  const char* name() const override { return "SoftmaxCPU"; }

  bool is_equivalent(const mx::Primitive&) const override { return true; }
};

}  // namespace

// softmax_cpu returns the softmax over x's last axis as one SoftmaxCPU node
// when it can serve the call (the CPU stream, float32, rank ≥ 1, a non-empty
// last axis), and nothing otherwise.
std::optional<mx::array> softmax_cpu(const mx::array& x, const mx::Stream& s) {
  if (s.device.type != mx::Device::cpu || x.ndim() == 0 || x.dtype() != mx::float32 || x.shape(-1) == 0) {
    return std::nullopt;
  }
  return mx::array(x.shape(), mx::float32, std::make_shared<SoftmaxCPU>(s), std::vector<mx::array>{x});
}

// sigmoid_mul_cpu returns silu(a) ⊙ b (silu) or a ⊙ σ(b) as one
// SigmoidMulCPU node when it can serve the call (the CPU stream, float32
// operands of one shape with a non-empty last axis), and nothing otherwise,
// so that the caller composes it from MLX's ops.
std::optional<mx::array> sigmoid_mul_cpu(const mx::array& a, const mx::array& b, bool silu,
                                         const mx::Stream& s) {
  if (s.device.type != mx::Device::cpu || a.ndim() == 0 || a.dtype() != mx::float32 ||
      b.dtype() != mx::float32 || a.shape() != b.shape() || a.shape(-1) == 0) {
    return std::nullopt;
  }
  return mx::array(a.shape(), mx::float32, std::make_shared<SigmoidMulCPU>(s, silu),
                   std::vector<mx::array>{a, b});
}

// conv_silu_cpu returns silu of the causal depthwise convolution of x
// [B, L + Kc − 1, C] by w [Kc, C] as one ConvSiLUCPU node when it can serve
// the call (the CPU stream, float32, those shapes with L ≥ 1), and nothing
// otherwise.
std::optional<mx::array> conv_silu_cpu(const mx::array& x, const mx::array& w, const mx::Stream& s) {
  if (s.device.type != mx::Device::cpu || x.dtype() != mx::float32 || w.dtype() != mx::float32 ||
      x.ndim() != 3 || w.ndim() != 2 || w.shape(0) < 1 || x.shape(2) != w.shape(1) ||
      x.shape(1) < w.shape(0) || x.shape(2) == 0 || x.shape(0) == 0) {
    return std::nullopt;
  }
  const int L = x.shape(1) - w.shape(0) + 1;
  return mx::array({x.shape(0), L, x.shape(2)}, mx::float32, std::make_shared<ConvSiLUCPU>(s),
                   std::vector<mx::array>{x, w});
}

// dynamic_conv_cpu returns DFlash2's dynamic convolution of x [1, L, H] with
// per-row group taps w [1, L, K, G] and base taps b [K, H] (channels in
// groups of H / G) as one DynamicConvCPU node when it can serve the call (the
// CPU stream, float32, those shapes), and nothing otherwise.
std::optional<mx::array> dynamic_conv_cpu(const mx::array& x, const mx::array& w, const mx::array& b,
                                          const mx::Stream& s) {
  if (s.device.type != mx::Device::cpu || x.dtype() != mx::float32 || w.dtype() != mx::float32 ||
      b.dtype() != mx::float32 || x.ndim() != 3 || w.ndim() != 4 || b.ndim() != 2 || x.shape(0) != 1 ||
      w.shape(0) != 1 || w.shape(1) != x.shape(1) || x.shape(1) < 1 || w.shape(2) < 1 ||
      b.shape(0) != w.shape(2) || b.shape(1) != x.shape(2) || w.shape(3) < 1 ||
      x.shape(2) % w.shape(3) != 0) {
    return std::nullopt;
  }
  return mx::array(x.shape(), mx::float32,
                   std::make_shared<DynamicConvCPU>(s, x.shape(2) / w.shape(3)),
                   std::vector<mx::array>{x, w, b});
}
