// norm.cpp: RMSNorm as one MLX primitive on the CPU.
//
// MLX's fast::rms_norm has kernels on Metal and CUDA only; on the CPU it
// returns its fallback, composed of about seven graph nodes (cast, square,
// sum, scale, add ε, rsqrt, multiply, weight). A Qwen3.5 forward normalises
// about five times per layer, so a go-tiny verification graph held some 200
// such nodes, each costing microseconds of MLX bookkeeping for a few hundred
// floats of work. RMSNormCPU computes each row in one pass in plain C++,
// queued on the CPU stream's encoder like gdn.cpp's scan (see there for how
// this stays correct with MLX's asynchronous CPU stream). Each row is
// computed alone, with the fallback's own operations in their order, so the
// values do not change: only the number of nodes does.

#include <cmath>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace {

// row_starts returns, for each row of x's last axis (in row-major order of
// the other axes), the offset of its first element in x's layout; act.cpp
// reads its operands through it too.
std::vector<int64_t> row_starts(const mx::array& x) {
  const int D = x.ndim() == 0 ? 0 : x.shape(-1);
  const size_t rows = D == 0 ? 0 : x.size() / D;
  std::vector<int64_t> starts(rows);
  const int nd = x.ndim();
  std::vector<int> idx(nd > 0 ? nd - 1 : 0, 0);
  for (size_t r = 0; r < rows; r++) {
    int64_t off = 0;
    for (int a = 0; a < nd - 1; a++) {
      off += int64_t(idx[a]) * x.strides()[a];
    }
    starts[r] = off;
    for (int a = nd - 2; a >= 0; a--) {
      if (++idx[a] < x.shape(a)) {
        break;
      }
      idx[a] = 0;
    }
  }
  return starts;
}

// RMSNormCPU: y = x · rsqrt(mean(x²) + ε) · w over the last axis, float32.
// Inputs x (any rank ≥ 1, any strides) and optionally w [D] (any stride).
class RMSNormCPU : public mx::UnaryPrimitive {
 public:
  RMSNormCPU(mx::Stream s, float eps) : mx::UnaryPrimitive(s), eps_(eps) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    const mx::array& x = in[0];
    const int D = x.shape(-1);
    const int nd = x.ndim();
    std::vector<int64_t> starts = row_starts(x);
    const float* xp = x.data<float>();
    const int64_t xs = x.strides()[nd - 1];
    const float* wp = in.size() > 1 ? in[1].data<float>() : nullptr;
    const int64_t ws = in.size() > 1 ? in[1].strides()[0] : 0;
    float* yp = out.data<float>();
    const float eps = eps_;
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (const auto& a : in) {
      enc.set_input_array(a);
    }
    enc.set_output_array(out);
    enc.dispatch([starts = std::move(starts), xp, xs, wp, ws, yp, D, eps]() {
      rms_rows(starts, xp, xs, wp, ws, yp, D, eps);
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("RMSNormCPU runs on the CPU only");
  }

  const char* name() const override { return "RMSNormCPU"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return eps_ == static_cast<const RMSNormCPU&>(other).eps_;
  }

 private:
  float eps_;

  // rms_rows normalises each row with the operations of MLX's own fallback,
  // in its order (mlx/fast.cpp: x · rsqrt(mean(x²) + ε), then · w, where
  // mean is the sum, taken in order as MLX's x86 reduction does, times 1/D
  // rounded to float), so that the result is the same to the bit and
  // agrees with mlx-lm as closely as before.
  static void rms_rows(const std::vector<int64_t>& starts, const float* xp, int64_t xs,
                       const float* wp, int64_t ws, float* yp, int D, float eps) {
    const float inv_d = static_cast<float>(1.0 / D);
    for (size_t r = 0; r < starts.size(); r++) {
      const float* x = xp + starts[r];
      float* y = yp + r * D;
      float ss = 0.0f;
      for (int j = 0; j < D; j++) {
        const float v = x[j * xs];
        ss += v * v;
      }
      const float scale = 1.0f / std::sqrt(ss * inv_d + eps);
      if (wp != nullptr) {
        for (int j = 0; j < D; j++) {
          y[j] = (x[j * xs] * scale) * wp[j * ws];
        }
      } else {
        for (int j = 0; j < D; j++) {
          y[j] = x[j * xs] * scale;
        }
      }
    }
  }
};

}  // namespace

// rms_norm_cpu returns RMSNorm as one RMSNormCPU node when it can serve the
// call (the CPU stream, float32 x and weight, a last axis of at least one
// element), and nothing otherwise, so that the caller takes MLX's op.
std::optional<mx::array> rms_norm_cpu(const mx::array& x, const std::optional<mx::array>& w,
                                      float eps, const mx::Stream& s) {
  if (s.device.type != mx::Device::cpu || x.ndim() == 0 || x.dtype() != mx::float32 ||
      x.shape(-1) == 0) {
    return std::nullopt;
  }
  std::vector<mx::array> inputs{x};
  if (w) {
    if (w->dtype() != mx::float32 || w->ndim() != 1 || w->shape(0) != x.shape(-1)) {
      return std::nullopt;
    }
    inputs.push_back(*w);
  }
  return mx::array(x.shape(), mx::float32, std::make_shared<RMSNormCPU>(s, eps), std::move(inputs));
}
