// rope.cpp: rotary position embedding as one MLX primitive on the CPU.
//
// MLX's fast::rope has kernels on Metal and CUDA only; on the CPU it returns
// its fallback, about 25 graph nodes per call (positions from one arange,
// inverse frequencies from another and an exp, their product, cos and sin,
// slices of x, four products, a subtraction, an addition and the
// concatenations), each costing microseconds of MLX bookkeeping for a few
// hundred floats of work. A Qwen3.5 or DFlash forward rotates q and k in
// every attention layer: on go-tiny those nodes took 7-13 % of a CPU decode
// step (measured by leaving the rotation out). RoPECPU computes each row in
// one pass, queued on the CPU stream's encoder like norm.cpp's RMSNormCPU,
// with the fallback's own float32 operations in its order, exp, cos and sin
// being MLX's own CPU approximations (mlx/backend/cpu/simd/math.h, what its
// Exp, Cos and Sin nodes run), so the values do not change: only the number
// of nodes does.

#include "mlx/backend/cpu/simd/simd.h"

namespace {

// cpu_exp, cpu_cos and cpu_sin are MLX's CPU Exp, Cos and Sin of one float.
float cpu_exp(float v) { return mx::simd::exp(mx::simd::Simd<float, 1>(v)).value; }
float cpu_cos(float v) { return mx::simd::cos(mx::simd::Simd<float, 1>(v)).value; }
float cpu_sin(float v) { return mx::simd::sin(mx::simd::Simd<float, 1>(v)).value; }

// RoPECPU rotates the first dims features of each row of x [..., T, D]
// (float32, any strides) at position offset + t, t being the row's index
// along axis −2; offset is an int32 scalar read when the node runs. The
// output is contiguous, x's shape.
class RoPECPU : public mx::UnaryPrimitive {
 public:
  RoPECPU(mx::Stream s, int dims, bool traditional, float base, float scale)
      : mx::UnaryPrimitive(s), dims_(dims), traditional_(traditional), base_(base), scale_(scale) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    const mx::array& x = in[0];
    const int nd = x.ndim();
    const int D = x.shape(-1);
    const int T = x.shape(-2);
    std::vector<int64_t> starts = row_starts(x);
    const float* xp = x.data<float>();
    const int64_t xs = x.strides()[nd - 1];
    const int32_t* op = in[1].data<int32_t>();
    float* yp = out.data<float>();
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (const auto& a : in) {
      enc.set_input_array(a);
    }
    enc.set_output_array(out);
    enc.dispatch([starts = std::move(starts), xp, xs, op, yp, D, T, dims = dims_,
                  traditional = traditional_, base = base_, scale = scale_]() {
      rotate_rows(starts, xp, xs, *op, yp, D, T, dims, traditional, base, scale);
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("RoPECPU runs on the CPU only");
  }

  const char* name() const override { return "RoPECPU"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const RoPECPU&>(other);
    return dims_ == o.dims_ && traditional_ == o.traditional_ && base_ == o.base_ &&
           scale_ == o.scale_;
  }

 private:
  int dims_;
  bool traditional_;
  float base_;
  float scale_;

  // rotate_rows is MLX's fallback (mlx/fast.cpp, rope) row by row:
  //   inv_j   = exp(−j · (log(base) / (dims/2)))          (arange · scalar, exp)
  //   pos_t   = (t + offset) · scale                      (arange + offset, · scale)
  //   θ       = pos_t · inv_j;  c = cos θ;  s = sin θ
  //   first   = x1·c − x2·s;  second = x1·s + x2·c        (four products, − and +)
  // where (x1, x2) pairs feature j with j + dims/2, or 2j with 2j+1 when
  // traditional; features from dims on are copied. Every operation is a
  // float32 one, rounded as MLX's separate nodes round it.
  static void rotate_rows(const std::vector<int64_t>& starts, const float* xp, int64_t xs,
                          int32_t offset, float* yp, int D, int T, int dims, bool traditional,
                          float base, float scale) {
    const int half = dims / 2;
    const float step = std::log(base) / half;
    std::vector<float> inv(half);
    for (int j = 0; j < half; j++) {
      inv[j] = cpu_exp(static_cast<float>(-j) * step);
    }
    const float off = static_cast<float>(offset);
    for (size_t r = 0; r < starts.size(); r++) {
      const float* x = xp + starts[r];
      float* y = yp + r * D;
      const float pos = (static_cast<float>(static_cast<int>(r % T)) + off) * scale;
      for (int j = 0; j < half; j++) {
        const float theta = pos * inv[j];
        const float c = cpu_cos(theta);
        const float s = cpu_sin(theta);
        const int i1 = traditional ? 2 * j : j;
        const int i2 = traditional ? 2 * j + 1 : j + half;
        const float a = x[i1 * xs];
        const float b = x[i2 * xs];
        const float ac = a * c, bs = b * s, as = a * s, bc = b * c;
        y[i1] = ac - bs;
        y[i2] = as + bc;
      }
      for (int j = dims; j < D; j++) {
        y[j] = x[j * xs];
      }
    }
  }
};

}  // namespace

// rope_cpu returns RoPE as one RoPECPU node when it can serve the call (the
// CPU stream, float32 x of at least three dimensions, an even dims within
// its last axis, a scalar integer offset), and nothing otherwise, so that
// the caller takes MLX's op (which also raises MLX's errors for bad calls).
std::optional<mx::array> rope_cpu(const mx::array& x, int dims, bool traditional, float base,
                                  float scale, const mx::array& offset, const mx::Stream& s) {
  if (s.device.type != mx::Device::cpu || x.dtype() != mx::float32 || x.ndim() < 3 ||
      dims <= 0 || dims % 2 != 0 || dims > x.shape(-1) || x.size() == 0 ||
      offset.size() != 1 || offset.ndim() > 1 || !mx::issubdtype(offset.dtype(), mx::integer)) {
    return std::nullopt;
  }
  mx::array off = offset.dtype() == mx::int32 ? offset : mx::astype(offset, mx::int32, s);
  return mx::array(x.shape(), mx::float32,
                   std::make_shared<RoPECPU>(s, dims, traditional, base, scale), {x, off});
}
