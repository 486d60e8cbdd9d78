// dist.cpp: MLX's distributed layer (mlx::core::distributed) for shim.h.
//
// A group is a process group made by init from a backend name; the
// collectives are lazy graph nodes like every other op. Their stream is left
// to MLX (the empty StreamOrDevice): the ring backend runs on a CPU
// communication stream of its own, NCCL on a GPU stream, whatever the
// caller's default stream is.

#include "shim.h"

#include <memory>
#include <string>

#include "mlx/distributed/distributed.h"
#include "mlx/distributed/ops.h"

namespace mxd = mlx::core::distributed;

namespace {

mxd::Group& group_of(spx_group g) {
  if (g.ctx == nullptr) {
    throw std::invalid_argument("mlx shim: empty distributed group handle");
  }
  return *static_cast<mxd::Group*>(g.ctx);
}

}  // namespace

extern "C" {

int spx_dist_is_available(bool* out, const char* backend) {
  SPX_TRY
  *out = mxd::is_available(std::string(backend));
  SPX_CATCH
}

int spx_dist_init(spx_group* out, const char* backend) {
  SPX_TRY
  // strict: a backend that cannot start is an error, never a silent group of
  // one (every rank would then compute the whole model on its own slices).
  auto g = mxd::init(true, std::string(backend));
  out->ctx = new mxd::Group(std::move(g));
  SPX_CATCH
}

int spx_group_rank(int* out, spx_group g) {
  SPX_TRY
  *out = group_of(g).rank();
  SPX_CATCH
}

int spx_group_size(int* out, spx_group g) {
  SPX_TRY
  *out = group_of(g).size();
  SPX_CATCH
}

int spx_group_free(spx_group g) {
  SPX_TRY
  delete static_cast<mxd::Group*>(g.ctx);
  SPX_CATCH
}

int spx_all_sum(spx_array* out, spx_array a, spx_group g) {
  SPX_TRY
  assign(out, mxd::all_sum(arr(a), group_of(g)));
  SPX_CATCH
}

int spx_all_gather(spx_array* out, spx_array a, spx_group g) {
  SPX_TRY
  assign(out, mxd::all_gather(arr(a), group_of(g)));
  SPX_CATCH
}

}  // extern "C"
