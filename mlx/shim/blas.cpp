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

#include <dlfcn.h>
#include <link.h>

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

struct blas_table {
  sgemm_fn sgemm = nullptr;
  dgemm_fn dgemm = nullptr;
  cgemm_fn cgemm = nullptr;
  std::string name = "reference BLAS (bundled with mlx-cpu)";
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
  blas().sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha,
                 const double* a, int lda, const double* b, int ldb, double beta,
                 double* c, int ldc) {
  blas().dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cblas_cgemm(int order, int ta, int tb, int m, int n, int k, const void* alpha,
                 const void* a, int lda, const void* b, int ldb, const void* beta,
                 void* c, int ldc) {
  blas().cgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// spx_blas_name says which BLAS serves the CPU matmuls.
const char* spx_blas_name(void) {
  return blas().name.c_str();
}

}  // extern "C"
