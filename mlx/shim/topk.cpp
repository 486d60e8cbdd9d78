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

// The greedy walk of DFlash2's candidate selector (arch/dflash2, spec
// dflash2.md 3.3) as one node. Composed from MLX's ops each of a block's
// positions is about 25 nodes — the predecessor's codebook row, the pair
// scores as a broadcast product and a matmul, the argmax, a one-hot row, a
// gather and the row's confidence — so a 7-token proposal is ~175 of a draft
// forward's ~390 nodes, each paying MLX's per-node bookkeeping on the stream
// thread and its building on the host. Here position p scores its K
// candidates given the token chosen at p − 1 (the anchor at p = 0):
// s[j] = unary[p, j] + Σ_r (a[r]·u[p, r])·succ[p, j, r] with a the
// predecessor's table row (a·u rounded to float32 first, as the composition
// does; the sum over r runs in order, where the composition's matmul may
// order it otherwise, so scores can differ in the last bits), picks the
// first largest score, and reports max_j softmax(s)[j].
namespace {

class SelectorWalkCPU : public mx::Primitive {
 public:
  explicit SelectorWalkCPU(mx::Stream s) : mx::Primitive(s) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& out) override {
    for (auto& o : out) {
      o.set_data(mx::allocator::malloc(o.nbytes()));
    }
    const mx::array &ids = in[0], &unary = in[1], &u = in[2], &succ = in[3], &table = in[4],
                    &anchor = in[5];
    const int n = ids.shape(0), k = ids.shape(1), r = u.shape(1), v = table.shape(0);
    const int32_t* ip = ids.data<int32_t>();
    const float* un = unary.data<float>();
    const float* up = u.data<float>();
    const float* sp = succ.data<float>();
    const float* tp = table.data<float>();
    const int32_t* ap = anchor.data<int32_t>();
    int32_t* tok = out[0].data<int32_t>();
    float* probs = out[1].data<float>();
    float* conf = out[2].data<float>();
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) {
      enc.set_input_array(a);
    }
    for (auto& o : out) {
      enc.set_output_array(o);
    }
    enc.dispatch([=]() {
      std::vector<float> au(r), s(k);
      int32_t prev = ap[0];
      for (int p = 0; p < n; p++) {
        // An id outside the table would be a corrupt candidate list; clamp
        // rather than read out of bounds (the composition's gather clamps too).
        const int32_t row = prev < 0 ? 0 : (prev >= v ? v - 1 : prev);
        const float* a = tp + int64_t(row) * r;
        const float* uu = up + int64_t(p) * r;
        for (int q = 0; q < r; q++) {
          au[q] = a[q] * uu[q];
        }
        int best = 0;
        for (int j = 0; j < k; j++) {
          const float* b = sp + (int64_t(p) * k + j) * r;
          float dot = 0;
          for (int q = 0; q < r; q++) {
            dot += au[q] * b[q];
          }
          s[j] = un[int64_t(p) * k + j] + dot;
          if (s[j] > s[best]) {
            best = j;
          }
        }
        double z = 0;
        for (int j = 0; j < k; j++) {
          z += std::exp(double(s[j]) - double(s[best]));
          probs[int64_t(p) * k + j] = j == best ? 1.0f : 0.0f;
        }
        conf[p] = float(1.0 / z);
        tok[p] = ip[int64_t(p) * k + best];
        prev = tok[p];
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("SelectorWalkCPU runs on the CPU only");
  }

  const char* name() const override { return "SelectorWalkCPU"; }

  bool is_equivalent(const mx::Primitive&) const override { return true; }
};

}  // namespace

extern "C" {

int spx_selector_walk_cpu(spx_array* tokens, spx_array* probs, spx_array* conf, spx_array ids,
                          spx_array unary, spx_array u, spx_array succ, spx_array table,
                          spx_array anchor, spx_stream s) {
  SPX_TRY
  const auto st = stream(s);
  const auto &i = arr(ids), &un = arr(unary), &uu = arr(u), &sc = arr(succ), &t = arr(table),
             &a = arr(anchor);
  const bool fits = st.device.type == mx::Device::cpu && i.dtype() == mx::int32 && i.ndim() == 2 &&
                    un.dtype() == mx::float32 && un.shape() == i.shape() &&
                    uu.dtype() == mx::float32 && uu.ndim() == 2 && uu.shape(0) == i.shape(0) &&
                    sc.dtype() == mx::float32 && sc.ndim() == 3 && sc.shape(0) == i.shape(0) &&
                    sc.shape(1) == i.shape(1) && sc.shape(2) == uu.shape(1) &&
                    t.dtype() == mx::float32 && t.ndim() == 2 && t.shape(1) == uu.shape(1) &&
                    t.shape(0) > 0 && a.dtype() == mx::int32 && a.size() == 1 && i.shape(1) > 0;
  if (!fits) {
    return 0;
  }
  // The kernel reads every input densely in row-major order.
  auto dense = [&](const mx::array& x) { return mx::contiguous(x, false, st); };
  const int n = i.shape(0), k = i.shape(1);
  auto res = mx::array::make_arrays({{n}, {n, k}, {n}}, {mx::int32, mx::float32, mx::float32},
                                    std::make_shared<SelectorWalkCPU>(st),
                                    {dense(i), dense(un), dense(uu), dense(sc), dense(t),
                                     dense(mx::reshape(a, {1}, st))});
  assign(tokens, std::move(res[0]));
  assign(probs, std::move(res[1]));
  assign(conf, std::move(res[2]));
  SPX_CATCH
}

}  // extern "C"
