// gdn.cpp: the gated delta rule (spec/qwen35.md section 7) as one MLX
// primitive on the CPU.
//
// Built from MLX ops, the scan costs about seven graph nodes per token and
// delta-net layer; a verification forward of 8 tokens spends more time in
// those small ops than in its matmuls, and a 2,000-token prefill took tens of
// seconds. MLX has no kernel for the rule outside Metal, and MLX's
// CPU backend offers no custom-kernel hook, so this file adds a Primitive
// subclass whose eval_cpu runs the whole recurrence in plain C++. It emits
// the state after each requested token count (the per-boundary states a
// speculative round snapshots for rollback), as the CUDA kernel does.
//
// How evaluation stays correct on MLX's asynchronous CPU stream (MLX 0.32,
// backend/cpu/encoder.h and eval.cpp): eval_cpu runs on the thread that
// called eval. It allocates the outputs there, reads the inputs' data
// pointers and strides (set by their producers' eval_cpu, which ran first;
// the values themselves are written later by tasks already queued on the
// same stream), and queues the computation with the stream's command
// encoder. The stream runs its tasks in order on one thread, so the inputs
// are complete when the task runs; after eval_cpu returns, MLX queues a task
// that holds the input buffers until then. Nothing here touches array
// objects inside the task: only raw pointers, strides and sizes.

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstring>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace {

// transpose writes dst[c·dld + r] = src[r·sld + c] for r < rows and
// c < cols: the state's change of layout on the way in and at every bound.
// Element by element, the strided side made these copies most of the scan's
// time in a verification (a state per token and head); with AVX it moves
// 8×8 blocks through registers. Values are only moved, never computed.
void transpose_scalar(const float* src, int64_t sld, float* dst, int64_t dld, int rows, int cols) {
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < cols; c++) {
      dst[c * dld + r] = src[r * sld + c];
    }
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx"))) void transpose_avx(const float* src, int64_t sld, float* dst, int64_t dld,
                                                  int rows, int cols) {
  int r = 0;
  for (; r + 8 <= rows; r += 8) {
    int c = 0;
    for (; c + 8 <= cols; c += 8) {
      const float* s0 = src + r * sld + c;
      const __m256 v0 = _mm256_loadu_ps(s0), v1 = _mm256_loadu_ps(s0 + sld);
      const __m256 v2 = _mm256_loadu_ps(s0 + 2 * sld), v3 = _mm256_loadu_ps(s0 + 3 * sld);
      const __m256 v4 = _mm256_loadu_ps(s0 + 4 * sld), v5 = _mm256_loadu_ps(s0 + 5 * sld);
      const __m256 v6 = _mm256_loadu_ps(s0 + 6 * sld), v7 = _mm256_loadu_ps(s0 + 7 * sld);
      // Pairs of rows interleaved, then quadruples, then the 128-bit halves.
      const __m256 t0 = _mm256_unpacklo_ps(v0, v1), t1 = _mm256_unpackhi_ps(v0, v1);
      const __m256 t2 = _mm256_unpacklo_ps(v2, v3), t3 = _mm256_unpackhi_ps(v2, v3);
      const __m256 t4 = _mm256_unpacklo_ps(v4, v5), t5 = _mm256_unpackhi_ps(v4, v5);
      const __m256 t6 = _mm256_unpacklo_ps(v6, v7), t7 = _mm256_unpackhi_ps(v6, v7);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      float* d0 = dst + c * dld + r;
      _mm256_storeu_ps(d0, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_storeu_ps(d0 + dld, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_storeu_ps(d0 + 2 * dld, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_storeu_ps(d0 + 3 * dld, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_storeu_ps(d0 + 4 * dld, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_storeu_ps(d0 + 5 * dld, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_storeu_ps(d0 + 6 * dld, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_storeu_ps(d0 + 7 * dld, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
    transpose_scalar(src + r * sld + c, sld, dst + c * dld + r, dld, 8, cols - c);
  }
  transpose_scalar(src + r * sld, sld, dst + r, dld, rows - r, cols);
}
#endif

void transpose(const float* src, int64_t sld, float* dst, int64_t dld, int rows, int cols) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool avx = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx");
  }();
  if (avx) {
    transpose_avx(src, sld, dst, dld, rows, cols);
    return;
  }
#endif
  transpose_scalar(src, sld, dst, dld, rows, cols);
}

// The loops below run over one state column of Dv contiguous floats at a
// time; they are compiled at -O3 (the package builds at -O2, which leaves
// such loops scalar) and, on x86-64 with GCC, also for AVX2+FMA, picked at
// load time by the CPU's features.
#pragma GCC push_options
#pragma GCC optimize("O3")

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPX_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SPX_SIMD_CLONES
#endif

// A float32 array of rank ≤ 4 read through its element strides, so that
// views (the value slice of the convolution output, reshaped heads) need no
// copy.
struct view {
  const float* p = nullptr;
  int64_t st[4] = {0, 0, 0, 0};

  float at(int64_t a, int64_t b, int64_t c = 0, int64_t d = 0) const {
    return p[a * st[0] + b * st[1] + c * st[2] + d * st[3]];
  }
};

view view_of(const mx::array& a) {
  view v;
  v.p = a.data<float>();
  for (size_t i = 0; i < a.ndim() && i < 4; i++) {
    v.st[i] = a.strides()[i];
  }
  return v;
}

struct scan_args {
  view q, k, v, a, b, s0;  // [1, L, Hk, Dk] ×2, [1, L, Hv, Dv], [1, L, Hv] ×2, [1, Hv, Dv, Dk]
  int L, hk, hv, dk, dv;
  float* out;                  // [1, L, Hv, Dv], contiguous
  std::vector<int> bounds;     // ascending token counts in 1 … L
  std::vector<float*> states;  // per bound: [1, Hv, Dv, Dk], held as [1, Hv, Dk, Dv] (see eval_cpu)
};

// scan_head runs value head h over all tokens. The state is held transposed,
// st[j·Dv + i] = S[i][j], so that every step is a contiguous loop over the
// Dv rows i (vectorisable without reordering a sum):
//
//	S ← α·S;  kv ← S·k;  δ ← β·(v − kv);  S ← S + δ ⊗ k;  o ← S·q
SPX_SIMD_CLONES
void scan_head(const scan_args& x, int h, float* st, float* kv, float* d) {
  const int dv = x.dv, dk = x.dk, hk = h / (x.hv / x.hk);
  if (x.s0.st[2] == 1 && x.s0.st[3] == dv) {
    // A state this primitive wrote: already in the scan's layout.
    std::memcpy(st, x.s0.p + h * x.s0.st[1], sizeof(float) * dk * dv);
  } else if (x.s0.st[3] == 1) {
    transpose(x.s0.p + h * x.s0.st[1], x.s0.st[2], st, dv, dv, dk);
  } else {
    for (int i = 0; i < dv; i++) {
      for (int j = 0; j < dk; j++) {
        st[j * dv + i] = x.s0.at(0, h, i, j);
      }
    }
  }
  size_t next = 0;
  float* __restrict kvr = kv;
  float* __restrict dr = d;
  for (int t = 0; t < x.L; t++) {
    const float at = x.a.at(0, t, h), bt = x.b.at(0, t, h);
    for (int i = 0; i < dv; i++) {
      kvr[i] = 0.f;
    }
    for (int j = 0; j < dk; j++) {
      const float kj = x.k.at(0, t, hk, j);
      float* __restrict row = st + j * dv;
      for (int i = 0; i < dv; i++) {
        row[i] *= at;
        kvr[i] += kj * row[i];
      }
    }
    for (int i = 0; i < dv; i++) {
      dr[i] = bt * (x.v.at(0, t, h, i) - kvr[i]);
    }
    float* __restrict o = x.out + ((size_t)t * x.hv + h) * dv;
    for (int i = 0; i < dv; i++) {
      o[i] = 0.f;
    }
    for (int j = 0; j < dk; j++) {
      const float kj = x.k.at(0, t, hk, j), qj = x.q.at(0, t, hk, j);
      float* __restrict row = st + j * dv;
      for (int i = 0; i < dv; i++) {
        row[i] += kj * dr[i];
        o[i] += qj * row[i];
      }
    }
    while (next < x.bounds.size() && x.bounds[next] == t + 1) {
      std::memcpy(x.states[next] + (size_t)h * dv * dk, st, sizeof(float) * dk * dv);
      next++;
    }
  }
}

#pragma GCC pop_options

void run_scan(const scan_args& x) {
  std::vector<float> st((size_t)x.dk * x.dv), kv(x.dv), d(x.dv);
  for (int h = 0; h < x.hv; h++) {
    scan_head(x, h, st.data(), kv.data(), d.data());
  }
}

// GatedDeltaScan: inputs q, k, v, α, β, state; outputs the per-token outputs
// then the state at each bound.
class GatedDeltaScan : public mx::Primitive {
 public:
  GatedDeltaScan(mx::Stream s, std::vector<int> bounds)
      : mx::Primitive(s), bounds_(std::move(bounds)) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& out) override {
    out[0].set_data(mx::allocator::malloc(out[0].nbytes()));
    // The states keep the scan's own layout, each head's state transposed
    // ([1, Hv, Dk, Dv] in memory), and are shaped [1, Hv, Dv, Dk] by their
    // strides: a bound's state is then one copy of the scan's buffer rather
    // than a transposition, and the next scan, reading it as its initial
    // state, copies it back the same way. A speculative round writes a state
    // per verified token, per head and layer (go-tiny: 4.7 MB per round), and
    // the transpositions were ~6 % of the CPU stream thread's time. Readers
    // that need rows (Bytes, MLX ops) see an ordinary transposed view.
    const int64_t hv = in[2].shape(2), dv = in[2].shape(3), dk = in[0].shape(3);
    for (size_t i = 1; i < out.size(); i++) {
      auto& o = out[i];
      if (dv == 1 || dk == 1) {
        o.set_data(mx::allocator::malloc(o.nbytes()));
        continue;
      }
      mx::array::Flags flags;
      flags.contiguous = true;
      flags.row_contiguous = false;
      flags.col_contiguous = false;
      o.set_data(mx::allocator::malloc(o.nbytes()), o.size(), {hv * dv * dk, dv * dk, 1, dv}, flags);
    }
    scan_args x;
    x.q = view_of(in[0]);
    x.k = view_of(in[1]);
    x.v = view_of(in[2]);
    x.a = view_of(in[3]);
    x.b = view_of(in[4]);
    x.s0 = view_of(in[5]);
    x.L = in[0].shape(1);
    x.hk = in[0].shape(2);
    x.dk = in[0].shape(3);
    x.hv = in[2].shape(2);
    x.dv = in[2].shape(3);
    x.out = out[0].data<float>();
    x.bounds = bounds_;
    for (size_t i = 1; i < out.size(); i++) {
      x.states.push_back(out[i].data<float>());
    }
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (const auto& a : in) {
      enc.set_input_array(a);
    }
    for (auto& o : out) {
      enc.set_output_array(o);
    }
    enc.dispatch([x = std::move(x)]() { run_scan(x); });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("GatedDeltaScan runs on the CPU only");
  }

  const char* name() const override { return "GatedDeltaScan"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return bounds_ == static_cast<const GatedDeltaScan&>(other).bounds_;
  }

 private:
  std::vector<int> bounds_;
};

void check_f32(const mx::array& a, const char* what, std::initializer_list<int> shape) {
  if (a.dtype() != mx::float32) {
    throw std::invalid_argument(std::string("gated delta scan: ") + what + " must be float32");
  }
  if (a.shape() != mx::Shape(shape)) {
    std::string want, got;
    for (int d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    for (int d : a.shape()) got += (got.empty() ? "" : ", ") + std::to_string(d);
    throw std::invalid_argument(std::string("gated delta scan: ") + what + " has shape [" + got +
                                "], want [" + want + "]");
  }
}

}  // namespace

extern "C" {

int spx_gated_delta_scan(spx_array* outs, spx_array q, spx_array k, spx_array v,
                         spx_array alpha, spx_array beta, spx_array state,
                         const int* bounds, size_t nbounds, spx_stream s) {
  SPX_TRY
  auto st = stream(s);
  if (st.device.type != mx::Device::cpu) {
    throw std::invalid_argument("gated delta scan: the primitive runs on the CPU stream only");
  }
  const auto& qa = arr(q);
  if (qa.ndim() != 4 || arr(v).ndim() != 4) {
    throw std::invalid_argument("gated delta scan: q and v must be [1, L, heads, dim]");
  }
  const int L = qa.shape(1), hk = qa.shape(2), dk = qa.shape(3);
  const int hv = arr(v).shape(2), dv = arr(v).shape(3);
  if (L < 1 || hk < 1 || hv % hk != 0) {
    throw std::invalid_argument("gated delta scan: need L >= 1 and value heads a multiple of key heads");
  }
  check_f32(qa, "q", {1, L, hk, dk});
  check_f32(arr(k), "k", {1, L, hk, dk});
  check_f32(arr(v), "v", {1, L, hv, dv});
  check_f32(arr(alpha), "alpha", {1, L, hv});
  check_f32(arr(beta), "beta", {1, L, hv});
  check_f32(arr(state), "state", {1, hv, dv, dk});
  std::vector<int> bs(bounds, bounds + nbounds);
  if (bs.empty()) {
    throw std::invalid_argument("gated delta scan: at least one bound is needed");
  }
  for (size_t i = 0; i < bs.size(); i++) {
    if (bs[i] < 1 || bs[i] > L || (i > 0 && bs[i] <= bs[i - 1])) {
      throw std::invalid_argument("gated delta scan: bounds must ascend within 1 … L");
    }
  }
  std::vector<mx::Shape> shapes{{1, L, hv, dv}};
  for (size_t i = 0; i < bs.size(); i++) {
    shapes.push_back({1, hv, dv, dk});
  }
  std::vector<mx::Dtype> dtypes(shapes.size(), mx::float32);
  auto res = mx::array::make_arrays(
      std::move(shapes), dtypes, std::make_shared<GatedDeltaScan>(st, std::move(bs)),
      {arr(q), arr(k), arr(v), arr(alpha), arr(beta), arr(state)});
  for (size_t i = 0; i < res.size(); i++) {
    assign(&outs[i], std::move(res[i]));
  }
  SPX_CATCH
}

}  // extern "C"
