// blas.cpp: route MLX's CPU matmuls to an optimised BLAS.
//
// The mlx-cpu wheel links the reference BLAS (netlib), a plain triple loop:
// about 3 GFLOP/s on a 2-core x86 machine, where OpenBLAS reaches tens. MLX
// calls only cblas_sgemm, cblas_dgemm and cblas_cgemm (nm -D libmlx.so).
// These definitions live in the executable, which comes first in the dynamic
// linker's lookup order, so they take MLX's calls (cgo.go links with
// -rdynamic so that the executable exports them). On first use they load
// scipy-openblas32 (unpacked by `make deps` into .deps/openblas), whose
// symbols carry a scipy_ prefix, and fall back to the next definition in the
// lookup order (the wheel's reference BLAS) when it is absent. OpenBLAS is
// looked for relative to the loaded libmlx.so (<dir>/../../openblas/), which
// holds in the checkout (.deps/mlx/lib, .deps/openblas) and in an installed
// or bundled tree (lib/specula/mlx/lib, lib/specula/openblas), so a moved
// installation keeps it and an installed binary never reaches into a checkout.
//
// SPECULA_BLAS=reference keeps the reference BLAS; SPECULA_BLAS=/path/lib.so
// loads another library exporting scipy_cblas_* (or plain cblas_*) symbols.
//
// Threads. OpenBLAS splits a product over all cores and joins its threads at
// the end of every call. On a machine whose cores are shared with other
// processes the join waits until every thread has been scheduled once, which
// costs a scheduler slice (milliseconds) per call: decoding collapsed from
// 69.5 to 7.8 tokens/s on the 2-core development machine under load, and a
// [64, 384] x [384, 1164] product took 15 ms with 2 threads against 0.9 ms
// with 1 (medians, docs/PERFORMANCE.md). So each call gets one thread unless
// it has at least kParallelMultiplyAdds multiply-adds (m*n*k), where a second
// core pays for its join even under load (and gives about 1.9x when the
// machine is quiet): large prefill chunks keep every core, decode and
// verification products (a few rows) run on one. A user who sets
// OPENBLAS_NUM_THREADS (or GOTO_NUM_THREADS or OMP_NUM_THREADS, which
// OpenBLAS also reads) gets exactly that instead.
//
// Few rows. A decode step (1 row), a verification (the drafts plus one) and a
// block draft (its block and a few context rows) multiply a handful of
// activation rows by each weight matrix. OpenBLAS's sgemm first packs the
// weight into panels, a copy of the whole matrix per call: on go-tiny's
// speculative rounds the packing (sgemm_incopy) took 36% of the process's CPU
// time and the products themselves 12%. For x·Wᵀ with at most kSmallRows rows
// (the layout of every linear layer: W [out, in] read through a transposed
// view), the shim's own kernel instead streams each weight row once, straight from
// the checkpoint layout, and takes every activation row's dot product with it
// while it sits in L1. Each output element is one dot product summed in a
// fixed order whatever the number of rows, so a row's result does not depend
// on the rows beside it: a decode step and a verification agree bit for bit
// on every such product. SPECULA_BLAS (any value) or SPECULA_SMALL_ROWS=0
// leaves all products to the library.

#include <dlfcn.h>
#include <link.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if defined(__linux__)
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace {

using sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int,
                          const float*, int, float, float*, int);
using dgemm_fn = void (*)(int, int, int, int, int, int, double, const double*, int,
                          const double*, int, double, double*, int);
using cgemm_fn = void (*)(int, int, int, int, int, int, const void*, const void*, int,
                          const void*, int, const void*, void*, int);
using set_threads_fn = void (*)(int);
// A few-rows kernel: (m, n, k, A, lda, W, ldw, C, ldc), see small_rows_avx2.
using rows_fn = void (*)(int, int, int, const float*, int, const float*, int, float*, int);
using get_threads_fn = int (*)(void);
class rows_pool;

// kParallelMultiplyAdds is the size (m*n*k) from which a product runs on
// every core: about 2.7e8 multiply-adds, 10 ms or more on one core of the
// development machine, where the medians under load favoured 2 threads
// (2048 x 384 x 1164: 55 ms on 1, 33 ms on 2) and everything smaller
// favoured 1.
constexpr double kParallelMultiplyAdds = 268435456.0;  // 2^28

struct blas_table {
  sgemm_fn sgemm = nullptr;
  dgemm_fn dgemm = nullptr;
  cgemm_fn cgemm = nullptr;
  std::string name = "reference BLAS (bundled with mlx-cpu)";
  // OpenBLAS's thread controls; set only when the per-product policy applies.
  set_threads_fn set_threads = nullptr;
  get_threads_fn get_threads = nullptr;
  int max_threads = 1;
  // Products of few rows go to this kernel (nullptr when SPECULA_BLAS chose
  // the library).
  rows_fn small_rows = nullptr;
  // Shares products of few rows with a helper thread (nullptr: one thread).
  rows_pool* pool = nullptr;
};

// kSmallRows is the most activation rows the kernel takes. On go-tiny's
// weights (every product of one forward, 61.8 MB, one thread's CPU time) it
// took 8.9 ms at 8 rows against OpenBLAS's 14.4, 14.9 at 16 against 16.5,
// and lost at 24 (22.1 against 18.5), where packing pays off.
constexpr int kSmallRows = 16;

std::atomic<long> small_row_products{0};
// The products of few rows whose chunks the helper thread was offered.
std::atomic<long> shared_products{0};

// The kernel is C = A·Wᵀ for A [m, k] (row stride lda), W [n, k] (row
// stride ldw), C [m, n] (row stride ldc), m ≤ kSmallRows. Each weight row is
// streamed once while the activation rows take their dot products with it.
// Every (i, j) is summed the same way, whatever m and whichever tile (i, j)
// falls in: eight lanes over p in order (fused multiply-adds on the AVX2
// path), the remainder of p through masked lanes, then the lanes in a fixed
// tree. The AVX2+FMA path is chosen once, by the CPU's features; the portable
// path (the same loops in GCC vector types, -O3) serves other CPUs.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SPX_AVX2 __attribute__((target("avx2,fma")))

SPX_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// tile_avx2 takes R rows of A against J weight rows at once: R·J
// independent accumulators keep both FMA pipes busy (one row's chain of
// dependent FMAs waits four cycles per step), and each loaded weight vector
// serves R rows. With Ahead it prefetches the next J weight rows towards L2
// (_MM_HINT_T2) as it goes: J interleaved row streams defeat the hardware
// prefetcher on the development machine (a tile without it ran at half the
// speed of one weight row at a time with the weights coming from memory), and a hint
// to L1 evicted the rows in use.
template <int R, int J, bool Ahead>
SPX_AVX2 inline void tile_avx2(const float* __restrict a, int lda, const float* __restrict w,
                               int ldw, float* __restrict c, int ldc, int k, int k8,
                               __m256i tail) {
  __m256 acc[R][J];
#pragma GCC unroll 4
  for (int i = 0; i < R; i++) {
#pragma GCC unroll 3
    for (int j = 0; j < J; j++) {
      acc[i][j] = _mm256_setzero_ps();
    }
  }
  for (int p = 0; p < k8; p += 8) {
    if (Ahead && (p & 15) == 0) {
#pragma GCC unroll 3
      for (int j = 0; j < J; j++) {
        _mm_prefetch(reinterpret_cast<const char*>(w + size_t(J + j) * ldw + p), _MM_HINT_T2);
      }
    }
    __m256 wv[J];
#pragma GCC unroll 3
    for (int j = 0; j < J; j++) {
      wv[j] = _mm256_loadu_ps(w + size_t(j) * ldw + p);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) {
      const __m256 av = _mm256_loadu_ps(a + size_t(i) * lda + p);
#pragma GCC unroll 3
      for (int j = 0; j < J; j++) {
        acc[i][j] = _mm256_fmadd_ps(av, wv[j], acc[i][j]);
      }
    }
  }
  if (k8 < k) {
    __m256 wv[J];
#pragma GCC unroll 3
    for (int j = 0; j < J; j++) {
      wv[j] = _mm256_maskload_ps(w + size_t(j) * ldw + k8, tail);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) {
      const __m256 av = _mm256_maskload_ps(a + size_t(i) * lda + k8, tail);
#pragma GCC unroll 3
      for (int j = 0; j < J; j++) {
        acc[i][j] = _mm256_fmadd_ps(av, wv[j], acc[i][j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; i++) {
#pragma GCC unroll 3
    for (int j = 0; j < J; j++) {
      c[size_t(i) * ldc + j] = hsum8(acc[i][j]);
    }
  }
}

// strip_avx2 multiplies every row of A by J weight rows, four rows of A at a
// time; the first tile prefetches the next strip.
template <int J>
SPX_AVX2 void strip_avx2(int m, const float* a, int lda, const float* w, int ldw, float* c, int ldc,
                         int k, int k8, __m256i tail) {
  tile_avx2<4, J, true>(a, lda, w, ldw, c, ldc, k, k8, tail);
  int i = 4;
  for (; i + 4 <= m; i += 4) {
    tile_avx2<4, J, false>(a + size_t(i) * lda, lda, w, ldw, c + size_t(i) * ldc, ldc, k, k8, tail);
  }
  const float* ai = a + size_t(i) * lda;
  float* ci = c + size_t(i) * ldc;
  switch (m - i) {
    case 3: tile_avx2<3, J, false>(ai, lda, w, ldw, ci, ldc, k, k8, tail); break;
    case 2: tile_avx2<2, J, false>(ai, lda, w, ldw, ci, ldc, k, k8, tail); break;
    case 1: tile_avx2<1, J, false>(ai, lda, w, ldw, ci, ldc, k, k8, tail); break;
  }
}

// kTileRows is the fewest rows that go to the tiles of several weight rows;
// fewer rows take one weight row at a time, a single stream that the
// hardware prefetcher follows.
// Streaming go-tiny's weight shapes from memory (one thread, 2026-12-04),
// tiles of 3 weight rows against one at a time: 0.8–1.1x at 1 and 2 rows,
// 0.9–1.1x at 3, 1.1–2.2x at 4, 1.2–2.1x at 7 and 8, 1.4–1.9x at 16.
constexpr int kTileRows = 4;
// kStripRows is J of the tiles: 4×3 accumulators, 3 weight vectors and one
// activation vector fill AVX2's 16 registers.
constexpr int kStripRows = 3;

SPX_AVX2 void small_rows_avx2(int m, int n, int k, const float* a, int lda, const float* w, int ldw,
                              float* c, int ldc) {
  alignas(32) int lanes[8];
  for (int q = 0; q < 8; q++) {
    lanes[q] = q < k % 8 ? -1 : 0;
  }
  const __m256i tail = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
  const int k8 = k / 8 * 8;
  if (m < kTileRows) {
    for (int j = 0; j < n; j++) {
      const float* wj = w + size_t(j) * ldw;
      switch (m) {
        case 3: tile_avx2<3, 1, false>(a, lda, wj, ldw, c + j, ldc, k, k8, tail); break;
        case 2: tile_avx2<2, 1, false>(a, lda, wj, ldw, c + j, ldc, k, k8, tail); break;
        case 1: tile_avx2<1, 1, false>(a, lda, wj, ldw, c + j, ldc, k, k8, tail); break;
      }
    }
    return;
  }
  int j = 0;
  for (; j + kStripRows <= n; j += kStripRows) {
    strip_avx2<kStripRows>(m, a, lda, w + size_t(j) * ldw, ldw, c + j, ldc, k, k8, tail);
  }
  for (; j < n; j++) {
    strip_avx2<1>(m, a, lda, w + size_t(j) * ldw, ldw, c + j, ldc, k, k8, tail);
  }
}
#endif

#pragma GCC push_options
#pragma GCC optimize("O3")

template <int R>
inline void rows_wt_portable(const float* __restrict a, int lda, const float* __restrict w,
                             float* __restrict c, int ldc, int k) {
  typedef float lanes __attribute__((vector_size(32)));
  const int k8 = k / 8 * 8;
  lanes acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; i++) {
    acc[i] = lanes{};
  }
  for (int p = 0; p < k8; p += 8) {
    lanes wv;
    std::memcpy(&wv, w + p, sizeof wv);
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) {
      lanes av;
      std::memcpy(&av, a + (size_t)i * lda + p, sizeof av);
      acc[i] += av * wv;
    }
  }
  for (int i = 0; i < R; i++) {
    lanes av{}, wv{};
    for (int p = k8; p < k; p++) {
      av[p - k8] = a[(size_t)i * lda + p];
      wv[p - k8] = w[p];
    }
    acc[i] += av * wv;
    float t[8];
    std::memcpy(t, &acc[i], sizeof t);
    c[(size_t)i * ldc] = ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
  }
}

void small_rows_portable(int m, int n, int k, const float* a, int lda, const float* w, int ldw,
                         float* c, int ldc) {
  for (int j = 0; j < n; j++) {
    const float* wj = w + (size_t)j * ldw;
    int i = 0;
    for (; i + 4 <= m; i += 4) {
      rows_wt_portable<4>(a + (size_t)i * lda, lda, wj, c + (size_t)i * ldc + j, ldc, k);
    }
    for (; i < m; i++) {
      rows_wt_portable<1>(a + (size_t)i * lda, lda, wj, c + (size_t)i * ldc + j, ldc, k);
    }
  }
}

#pragma GCC pop_options

// pick_small_rows chooses the kernel; SPECULA_SMALL_ROWS=0 turns it off (to
// compare with the library) and =portable forces the portable path.
rows_fn pick_small_rows() {
  if (const char* e = std::getenv("SPECULA_SMALL_ROWS")) {
    if (std::strcmp(e, "0") == 0) {
      return nullptr;
    }
    if (std::strcmp(e, "portable") == 0) {
      return small_rows_portable;
    }
  }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return small_rows_avx2;
  }
#endif
  return small_rows_portable;
}

// A second core for products of few rows. A verification multiplies 8 rows
// by every weight of the target and a block draft 7-16 rows by the head:
// there the kernel is bound by its arithmetic, and a decode step's larger
// products by memory, which a second core also widens (24 to 44 GB/s on the
// development machine). So a product of at least kSplitMultiplyAdds has its
// weight rows (C's columns) cut into chunks that the calling thread and one
// helper thread claim in turn. Claiming keeps the caller from waiting on a
// helper the system has not scheduled (the reason OpenBLAS's own threads are
// off for such products, see use_threads): when the helper is late the caller
// takes every chunk itself, and it only ever waits for a chunk the helper has
// claimed and is computing. Which thread computes a column changes nothing in
// it: every (i, j) is the same dot product in the same order, so the results
// stay bit-identical to one thread's and independent of the row count.
// SPECULA_SMALL_ROWS_THREADS=1 keeps one thread.
//
// Only products of at least kSplitRows rows are shared. A decode step's
// one-row products gained nothing measurable on the quiet development
// machine (go-tiny plain decoding 266.8/255.8 tok/s on one thread against
// 266.4/270.5 on two, 2026-12-04) for about 20 % more CPU time, and lost
// under other processes' load; a verification's and a block draft's rows
// gained (go-tiny's DFlash2 round 11.4/11.2 ms against 10.9/9.7).
#if defined(__linux__)
constexpr double kSplitMultiplyAdds = 262144.0;  // 2^18, about 10 µs of work
constexpr int kSplitRows = 2;
// kChunkMultiplyAdds sizes a chunk: small enough that a late helper costs
// the caller little, large enough that claiming costs nothing.
constexpr int kChunkMultiplyAdds = 49152;
// kChunkAlign divides every chunk's column count: whole strips of the AVX2
// tiles (3 weight rows) and whole 32-byte runs of C's rows (8 columns).
constexpr int kChunkAlign = 24;
// kHelperSpin is how long the helper keeps polling for the next product
// before it sleeps: the products of one forward come tens of microseconds
// apart, and waking a sleeping thread costs about as much.
constexpr std::chrono::microseconds kHelperSpin{50};

class rows_pool {
 public:
  // run computes the product with f on this thread and the helper, or
  // returns false (nothing done) when the helper is busy with another
  // caller's product.
  bool run(rows_fn f, int m, int n, int k, const float* a, int lda, const float* w, int ldw,
           float* c, int ldc) {
    std::unique_lock<std::mutex> own(busy_, std::try_to_lock);
    if (!own.owns_lock()) {
      return false;
    }
    std::call_once(started_, [this] { std::thread([this] { helper(); }).detach(); });
    int cols = kChunkMultiplyAdds / (m * k);
    cols = std::max(kChunkAlign, cols / kChunkAlign * kChunkAlign);
    const uint32_t id = ++last_id_;
    job_ = job{f, m, n, k, a, lda, w, ldw, c, ldc, cols};
    const uint32_t chunks = uint32_t((n + cols - 1) / cols);
    done_.store(0, std::memory_order_relaxed);
    ticket_.store(uint64_t(id) << 32 | chunks, std::memory_order_release);
    seq_.store(id, std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst)) {
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seq_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
    work(id);
    // The helper is computing its last chunk. Should it share this core
    // (the other one busy with another process), spinning would keep it
    // off until the scheduler's slice ends: yield after a short spin.
    for (int spins = 0; done_.load(std::memory_order_acquire) != chunks; spins++) {
      if (spins < 256) {
        spin_pause();
      } else {
        sched_yield();
      }
    }
    return true;
  }

 private:
  struct job {
    rows_fn f;
    int m, n, k;
    const float* a;
    int lda;
    const float* w;
    int ldw;
    float* c;
    int ldc, cols;
  };

  static void spin_pause() {
#if defined(__x86_64__)
    _mm_pause();
#endif
  }

  // work computes chunks of product id until none is left, and returns how
  // many it computed. A chunk is
  // claimed by counting down the ticket (id, chunks left) with a
  // compare-and-swap, so a thread still holding an older id claims nothing,
  // and job_ stays as it is while any chunk of its product is unfinished.
  int work(uint32_t id) {
    int done = 0;
    uint64_t t = ticket_.load(std::memory_order_acquire);
    for (;;) {
      if (uint32_t(t >> 32) != id || uint32_t(t) == 0) {
        return done;
      }
      if (!ticket_.compare_exchange_weak(t, t - 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        continue;
      }
      const job& j = job_;
      const int first = int(uint32_t(t) - 1) * j.cols;
      const int cols = std::min(j.cols, j.n - first);
      j.f(j.m, cols, j.k, j.a, j.lda, j.w + size_t(first) * j.ldw, j.ldw, j.c + first, j.ldc);
      done_.fetch_add(1, std::memory_order_release);
      done++;
      t = ticket_.load(std::memory_order_acquire);
    }
  }

  // helper computes chunks of each product it sees. After a product it had
  // a share of, it polls for the next one for kHelperSpin; when it came too
  // late for the last one (this core was busy elsewhere), polling would
  // only take time from other threads, so it sleeps at once.
  void helper() {
    uint32_t seen = 0;
    bool helped = false;
    for (;;) {
      uint32_t id = seq_.load(std::memory_order_acquire);
      if (id == seen && helped) {
        const auto until = std::chrono::steady_clock::now() + kHelperSpin;
        while ((id = seq_.load(std::memory_order_acquire)) == seen &&
               std::chrono::steady_clock::now() < until) {
          for (int q = 0; q < 32; q++) {
            spin_pause();
          }
        }
      }
      if (id == seen) {
        sleeping_.store(true, std::memory_order_seq_cst);
        if (seq_.load(std::memory_order_seq_cst) == seen) {
          syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seq_), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
        }
        sleeping_.store(false, std::memory_order_relaxed);
        continue;
      }
      seen = id;
      helped = work(id) > 0;
    }
  }

  std::mutex busy_;  // held by the caller whose product the pool is computing
  std::once_flag started_;
  uint32_t last_id_ = 0;
  job job_{};
  std::atomic<uint64_t> ticket_{0};
  std::atomic<uint32_t> done_{0};
  std::atomic<uint32_t> seq_{0};  // the latest product's id; the helper sleeps on it
  std::atomic<bool> sleeping_{false};
};
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word");

rows_pool* pick_pool() {
  if (const char* e = std::getenv("SPECULA_SMALL_ROWS_THREADS"); e != nullptr && std::strcmp(e, "1") == 0) {
    return nullptr;
  }
  if (std::thread::hardware_concurrency() < 2) {
    return nullptr;
  }
  return new rows_pool();  // lives as long as the process, as does its thread
}
#else
class rows_pool {
 public:
  bool run(rows_fn, int, int, int, const float*, int, const float*, int, float*, int) { return false; }
};
constexpr double kSplitMultiplyAdds = 0;
constexpr int kSplitRows = 0;
rows_pool* pick_pool() { return nullptr; }
#endif

// CBLAS's codes for the arguments the kernel serves.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

blas_table table;
std::once_flag table_once;

// mlx_dir returns the folder of the loaded libmlx.so ("" if none is loaded).
std::string mlx_dir() {
  std::string dir;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* out) -> int {
        const char* name = info->dlpi_name;
        const char* slash = name ? std::strrchr(name, '/') : nullptr;
        if (slash == nullptr || std::strcmp(slash + 1, "libmlx.so") != 0) {
          return 0;
        }
        static_cast<std::string*>(out)->assign(name, slash - name);
        return 1;
      },
      &dir);
  return dir;
}

void* sym(void* lib, const char* prefixed, const char* plain) {
  void* p = dlsym(lib, prefixed);
  return p ? p : dlsym(lib, plain);
}

// user_threads names the thread-count variable the user set, or nullptr.
const char* user_threads() {
  for (const char* v : {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"}) {
    const char* e = std::getenv(v);
    if (e != nullptr && e[0] != '\0') {
      return v;
    }
  }
  return nullptr;
}

// OpenBLAS's idle threads spin for 2^28 processor cycles (about 0.1 s) after
// each product that used them before they sleep. Prefill chunks use every
// core, so after each prompt's prefill a spinning thread competed with
// decoding for the development machine's two cores (6 % of a go-tiny bench's
// CPU samples were blas_thread_server; idle, it burns half the process's CPU
// time, TestOpenBLASIdleThreadsSleep). With OPENBLAS_THREAD_TIMEOUT=4 (its least, 2^4 cycles) they
// sleep at once, and each product that wants them pays a wake-up: only
// products of 2^28 multiply-adds and more, which take milliseconds. OpenBLAS
// reads the variable when it is loaded (load_table's dlopen), so it is set
// here, before main, while the process has one thread; a user's own value is
// kept.
__attribute__((constructor)) void openblas_idle_threads_sleep() {
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
}

// The thread count the last product ran with (0: none yet, or not OpenBLAS).
std::atomic<int> last_threads{0};
std::atomic<int> current_threads{0};

// use_threads applies the policy to a product of m*n*k multiply-adds.
void use_threads(const blas_table& t, double mnk) {
  if (t.get_threads == nullptr) {
    return;
  }
  if (t.set_threads != nullptr) {
    int want = mnk >= kParallelMultiplyAdds ? t.max_threads : 1;
    if (current_threads.exchange(want, std::memory_order_relaxed) != want) {
      t.set_threads(want);
    }
  }
  last_threads.store(t.get_threads(), std::memory_order_relaxed);
}

void load_table() {
  const char* env = std::getenv("SPECULA_BLAS");
  std::string path;
  if (env != nullptr && std::strcmp(env, "reference") != 0) {
    path = env;
  }
  if (env == nullptr) {
    table.small_rows = pick_small_rows();
    if (table.small_rows != nullptr) {
      table.pool = pick_pool();
    }
    std::string dir = mlx_dir();
    if (!dir.empty()) {
      path = dir + "/../../openblas/libscipy_openblas.so";
    }
  }
  if (!path.empty()) {
    if (void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      table.sgemm = reinterpret_cast<sgemm_fn>(sym(lib, "scipy_cblas_sgemm", "cblas_sgemm"));
      table.dgemm = reinterpret_cast<dgemm_fn>(sym(lib, "scipy_cblas_dgemm", "cblas_dgemm"));
      table.cgemm = reinterpret_cast<cgemm_fn>(sym(lib, "scipy_cblas_cgemm", "cblas_cgemm"));
      if (table.sgemm && table.dgemm && table.cgemm) {
        table.name = "OpenBLAS (" + path + ")";
        table.get_threads = reinterpret_cast<get_threads_fn>(
            sym(lib, "scipy_openblas_get_num_threads", "openblas_get_num_threads"));
        auto set = reinterpret_cast<set_threads_fn>(
            sym(lib, "scipy_openblas_set_num_threads", "openblas_set_num_threads"));
        if (table.get_threads != nullptr) {
          table.max_threads = table.get_threads();
          if (const char* v = user_threads()) {
            table.name += ", " + std::to_string(table.max_threads) + " thread(s) as " + v + " says";
          } else if (set != nullptr && table.max_threads > 1) {
            table.set_threads = set;
            table.name += ", 1 thread per product below 2^28 multiply-adds, else " +
                          std::to_string(table.max_threads);
          }
        }
        return;
      }
    }
  }
  table.sgemm = reinterpret_cast<sgemm_fn>(dlsym(RTLD_NEXT, "cblas_sgemm"));
  table.dgemm = reinterpret_cast<dgemm_fn>(dlsym(RTLD_NEXT, "cblas_dgemm"));
  table.cgemm = reinterpret_cast<cgemm_fn>(dlsym(RTLD_NEXT, "cblas_cgemm"));
  table.name = "reference BLAS (bundled with mlx-cpu)";
}

const blas_table& blas() {
  std::call_once(table_once, load_table);
  return table;
}

}  // namespace

extern "C" {

void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta,
                 float* c, int ldc) {
  const double mnk = double(m) * n * k;
  if (blas().small_rows && order == kRowMajor && ta == kNoTrans && tb == kTrans && m >= 1 &&
      m <= kSmallRows && n >= 1 && k >= 1 && alpha == 1.0f && beta == 0.0f &&
      mnk < kParallelMultiplyAdds && lda >= k && ldb >= k && ldc >= n) {
    const blas_table& t = blas();
    if (t.pool != nullptr && mnk >= kSplitMultiplyAdds && m >= kSplitRows &&
        t.pool->run(t.small_rows, m, n, k, a, lda, b, ldb, c, ldc)) {
      shared_products.fetch_add(1, std::memory_order_relaxed);
    } else {
      t.small_rows(m, n, k, a, lda, b, ldb, c, ldc);
    }
    small_row_products.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  use_threads(blas(), mnk);
  blas().sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha,
                 const double* a, int lda, const double* b, int ldb, double beta,
                 double* c, int ldc) {
  use_threads(blas(), double(m) * n * k);
  blas().dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cblas_cgemm(int order, int ta, int tb, int m, int n, int k, const void* alpha,
                 const void* a, int lda, const void* b, int ldb, const void* beta,
                 void* c, int ldc) {
  use_threads(blas(), double(m) * n * k);
  blas().cgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// spx_blas_name says which BLAS serves the CPU matmuls, and how it is
// threaded.
const char* spx_blas_name(void) {
  static const std::string name =
      blas().name + (blas().small_rows ? "; x·Wᵀ of at most 16 rows by the shim's own kernel" : "") +
      (blas().pool ? ", on two threads from 2 rows and 2^18 multiply-adds" : "");
  return name.c_str();
}

// spx_blas_small_row_products counts the products the few-rows kernel served.
long spx_blas_small_row_products(void) {
  return small_row_products.load(std::memory_order_relaxed);
}

// spx_blas_shared_products counts the few-rows products shared with the
// helper thread.
long spx_blas_shared_products(void) {
  return shared_products.load(std::memory_order_relaxed);
}

// spx_blas_last_threads is the thread count OpenBLAS had for the most recent
// product (0 before the first one, or when the BLAS is not OpenBLAS).
int spx_blas_last_threads(void) {
  return last_threads.load(std::memory_order_relaxed);
}

}  // extern "C"
