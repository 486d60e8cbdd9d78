// topk.cpp: the k largest entries of each row, sorted, as one MLX primitive
// on the CPU.
//
// DFlash2's selector takes the top 16 of each drafted row's 8192 logits,
// sorted by descending logit with ties to the lower id. Composed from MLX's
// ops that is an argpartition (std::nth_element over the whole row through
// an index indirection), a sort, an argsort and three gathers: nine graph
// nodes, and the argpartition alone took about 2.5 % of a go-tiny
// speculative run's CPU time. TopKCPU keeps the k best (value, index) pairs
// of a row in a small sorted list while it reads the row once; most entries
// are rejected by one comparison with the list's last. The order is the
// composition's exactly: by value, larger first, and among equal values
// (+0 and −0 are equal) the lower index first. NaN counts as smaller than
// every number (the composition leaves its place unspecified). It is queued
// on the CPU stream's encoder like gdn.cpp's scan (see there for why that is
// correct).

#include <cmath>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace {

// better reports whether value a at index ia goes before value b at index
// ib: larger first, NaN last, ties to the lower index.
inline bool better(float a, int ia, float b, int ib) {
  if (a > b) {
    return true;
  }
  if (a < b) {
    return false;
  }
  if (a == b) {
    return ia < ib;
  }
  // At least one NaN: a number goes before NaN; between NaNs, the index.
  const bool an = std::isnan(a), bn = std::isnan(b);
  if (an != bn) {
    return bn;
  }
  return ia < ib;
}

// topk_row writes the k best entries of row x (n values, stride xs) to
// ids and vals, best first.
void topk_row(const float* x, int64_t xs, int n, int k, int32_t* ids, float* vals) {
  int have = 0;
  for (int i = 0; i < n; i++) {
    const float v = x[i * xs];
    // Indices ascend, so an entry equal to the last kept one never beats it.
    if (have == k && !better(v, i, vals[k - 1], ids[k - 1])) {
      continue;
    }
    int at = have < k ? have++ : k - 1;
    while (at > 0 && better(v, i, vals[at - 1], ids[at - 1])) {
      vals[at] = vals[at - 1];
      ids[at] = ids[at - 1];
      at--;
    }
    vals[at] = v;
    ids[at] = i;
  }
}

// TopKCPU: for x [rows, n] (float32, any strides), ids [rows, k] (int32)
// and vals [rows, k] (float32) hold each row's k best entries, best first.
class TopKCPU : public mx::Primitive {
 public:
  TopKCPU(mx::Stream s, int k) : mx::Primitive(s), k_(k) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& out) override {
    for (auto& o : out) {
      o.set_data(mx::allocator::malloc(o.nbytes()));
    }
    const mx::array& x = in[0];
    const int rows = x.shape(0), n = x.shape(1), k = k_;
    const float* xp = x.data<float>();
    const int64_t rs = x.strides()[0], cs = x.strides()[1];
    int32_t* ip = out[0].data<int32_t>();
    float* vp = out[1].data<float>();
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(x);
    for (auto& o : out) {
      enc.set_output_array(o);
    }
    enc.dispatch([=]() {
      for (int r = 0; r < rows; r++) {
        topk_row(xp + r * rs, cs, n, k, ip + int64_t(r) * k, vp + int64_t(r) * k);
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("TopKCPU runs on the CPU only");
  }

  const char* name() const override { return "TopKCPU"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return k_ == static_cast<const TopKCPU&>(other).k_;
  }

 private:
  int k_;
};

}  // namespace

extern "C" {

int spx_topk_cpu(spx_array* ids, spx_array* vals, spx_array x, int k, spx_stream s) {
  SPX_TRY
  const auto st = stream(s);
  const auto& a = arr(x);
  if (st.device.type != mx::Device::cpu || a.dtype() != mx::float32 || a.ndim() != 2 || k < 1 ||
      k > a.shape(1)) {
    return 0;  // not this kernel's call: ids stays empty
  }
  auto res = mx::array::make_arrays({{a.shape(0), k}, {a.shape(0), k}}, {mx::int32, mx::float32},
                                    std::make_shared<TopKCPU>(st, k), {a});
  assign(ids, std::move(res[0]));
  assign(vals, std::move(res[1]));
  SPX_CATCH
}

}  // extern "C"
