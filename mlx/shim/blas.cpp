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

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace {

using sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int,
                          const float*, int, float, float*, int);
using dgemm_fn = void (*)(int, int, int, int, int, int, double, const double*, int,
                          const double*, int, double, double*, int);
using cgemm_fn = void (*)(int, int, int, int, int, int, const void*, const void*, int,
                          const void*, int, const void*, void*, int);
using set_threads_fn = void (*)(int);
using get_threads_fn = int (*)(void);

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
};

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
  use_threads(blas(), double(m) * n * k);
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
  return blas().name.c_str();
}

// spx_blas_last_threads is the thread count OpenBLAS had for the most recent
// product (0 before the first one, or when the BLAS is not OpenBLAS).
int spx_blas_last_threads(void) {
  return last_threads.load(std::memory_order_relaxed);
}

}  // extern "C"
