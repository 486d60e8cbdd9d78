// shim.cpp: implementation of shim.h over the MLX C++ API.
//
// Every entry point runs inside SPX_TRY/SPX_CATCH so that no C++ exception
// reaches Go; the message is stored per thread for spx_last_error.

#include "shim.h"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/mlx.h"

namespace mx = mlx::core;

// One-node CPU kernels for ops that MLX composes from many nodes, or runs
// scalar, on the CPU (norm.cpp, rope.cpp, act.cpp); nothing when the call is not theirs.
std::optional<mx::array> rms_norm_cpu(const mx::array& x, const std::optional<mx::array>& w,
                                      float eps, const mx::Stream& s);
std::optional<mx::array> rope_cpu(const mx::array& x, int dims, bool traditional, float base,
                                  float scale, const mx::array& offset, const mx::Stream& s);
std::optional<mx::array> sigmoid_mul_cpu(const mx::array& a, const mx::array& b, bool silu,
                                         const mx::Stream& s);
std::optional<mx::array> conv_silu_cpu(const mx::array& x, const mx::array& w, const mx::Stream& s);
std::optional<mx::array> dynamic_conv_cpu(const mx::array& x, const mx::array& w, const mx::array& b,
                                          const mx::Stream& s);
std::optional<mx::array> softmax_cpu(const mx::array& x, const mx::Stream& s);

namespace {

thread_local std::string last_error;
thread_local bool is_worker = false;

const char* const kOffWorker =
    "mlx: called off the MLX worker thread; MLX streams belong to the OS "
    "thread that made them, so run MLX work through mlx.Do or mlx.Call";

mx::array& arr(spx_array a) {
  if (a.ctx == nullptr) {
    throw std::invalid_argument("mlx shim: empty array handle");
  }
  return *static_cast<mx::array*>(a.ctx);
}

std::optional<mx::array> opt(spx_array a) {
  if (a.ctx == nullptr) {
    return std::nullopt;
  }
  return *static_cast<mx::array*>(a.ctx);
}

void assign(spx_array* out, mx::array&& a) {
  if (out->ctx != nullptr) {
    *static_cast<mx::array*>(out->ctx) = std::move(a);
  } else {
    out->ctx = new mx::array(std::move(a));
  }
}

mx::Dtype dtype_of(int d) {
  switch (d) {
    case SPX_BOOL: return mx::bool_;
    case SPX_UINT8: return mx::uint8;
    case SPX_UINT16: return mx::uint16;
    case SPX_UINT32: return mx::uint32;
    case SPX_UINT64: return mx::uint64;
    case SPX_INT8: return mx::int8;
    case SPX_INT16: return mx::int16;
    case SPX_INT32: return mx::int32;
    case SPX_INT64: return mx::int64;
    case SPX_FLOAT16: return mx::float16;
    case SPX_FLOAT32: return mx::float32;
    case SPX_FLOAT64: return mx::float64;
    case SPX_BFLOAT16: return mx::bfloat16;
    case SPX_COMPLEX64: return mx::complex64;
  }
  throw std::invalid_argument("mlx shim: unknown dtype code " + std::to_string(d));
}

int dtype_code(mx::Dtype d) {
  switch (d.val()) {
    case mx::Dtype::Val::bool_: return SPX_BOOL;
    case mx::Dtype::Val::uint8: return SPX_UINT8;
    case mx::Dtype::Val::uint16: return SPX_UINT16;
    case mx::Dtype::Val::uint32: return SPX_UINT32;
    case mx::Dtype::Val::uint64: return SPX_UINT64;
    case mx::Dtype::Val::int8: return SPX_INT8;
    case mx::Dtype::Val::int16: return SPX_INT16;
    case mx::Dtype::Val::int32: return SPX_INT32;
    case mx::Dtype::Val::int64: return SPX_INT64;
    case mx::Dtype::Val::float16: return SPX_FLOAT16;
    case mx::Dtype::Val::float32: return SPX_FLOAT32;
    case mx::Dtype::Val::float64: return SPX_FLOAT64;
    case mx::Dtype::Val::bfloat16: return SPX_BFLOAT16;
    case mx::Dtype::Val::complex64: return SPX_COMPLEX64;
  }
  return -1;
}

mx::Device::DeviceType device_type(int t) {
  return t == SPX_GPU ? mx::Device::gpu : mx::Device::cpu;
}

mx::Stream stream(spx_stream s) {
  return mx::Stream(s.index, mx::Device(device_type(s.device_type), s.device_index));
}

void put_stream(spx_stream* out, const mx::Stream& s) {
  out->index = s.index;
  out->device_type = s.device.type == mx::Device::gpu ? SPX_GPU : SPX_CPU;
  out->device_index = s.device.index;
}

mx::Shape shape_of(const int* dims, int n) {
  return mx::Shape(dims, dims + n);
}

std::vector<int> ints(const int* v, int n) {
  return std::vector<int>(v, v + n);
}

std::vector<mx::array> arrays(const spx_array* a, size_t n) {
  std::vector<mx::array> out;
  out.reserve(n);
  for (size_t i = 0; i < n; i++) {
    out.push_back(arr(a[i]));
  }
  return out;
}

void set_error(const char* msg) {
  last_error = msg;
}

// A GPU stream request on a CPU-only library throws a message users cannot
// act on; name the cause instead.
void translate_gpu_error(std::string& msg) {
  if (msg.find("without gpu backend") != std::string::npos ||
      msg.find("no gpu backend") != std::string::npos) {
    msg = "this MLX build has no GPU backend (" + msg +
          "); use the CPU device or install the CUDA backend (MLX_BACKEND=cuda make deps)";
  }
}

}  // namespace

#define SPX_TRY            \
  if (!is_worker) {        \
    set_error(kOffWorker); \
    return SPX_OFF_WORKER; \
  }                        \
  try {
#define SPX_CATCH                          \
  }                                        \
  catch (const std::exception& e) {        \
    std::string msg = e.what();            \
    translate_gpu_error(msg);              \
    last_error = msg;                      \
    return SPX_ERROR;                      \
  }                                        \
  catch (...) {                            \
    set_error("unknown C++ exception in MLX"); \
    return SPX_ERROR;                      \
  }                                        \
  return SPX_OK;

extern "C" {

void spx_set_worker_thread(bool on) {
  is_worker = on;
}

bool spx_on_worker(void) {
  return is_worker;
}

const char* spx_last_error(void) {
  return last_error.c_str();
}

const char* spx_version(void) {
  return mx::version();
}

int spx_gpu_available(bool* out) {
  SPX_TRY
  *out = mx::is_available(mx::Device(mx::Device::gpu));
  SPX_CATCH
}

int spx_default_stream(spx_stream* out, int device_type_code) {
  SPX_TRY
  put_stream(out, mx::default_stream(mx::Device(device_type(device_type_code))));
  SPX_CATCH
}

int spx_new_stream(spx_stream* out, int device_type_code) {
  SPX_TRY
  put_stream(out, mx::new_stream(mx::Device(device_type(device_type_code))));
  SPX_CATCH
}

int spx_shared_stream(spx_stream* out, int device_type_code) {
  SPX_TRY
  mx::Stream st = mx::new_thread_unsafe_stream(mx::Device(device_type(device_type_code)));
  mx::set_default_stream(st);
  put_stream(out, st);
  SPX_CATCH
}

int spx_set_default_stream(spx_stream s) {
  SPX_TRY
  mx::set_default_stream(stream(s));
  SPX_CATCH
}

int spx_set_default_device(int device_type_code) {
  SPX_TRY
  mx::set_default_device(mx::Device(device_type(device_type_code)));
  SPX_CATCH
}

int spx_synchronize(spx_stream s) {
  SPX_TRY
  mx::synchronize(stream(s));
  SPX_CATCH
}

int spx_memory_active(size_t* out) {
  SPX_TRY
  *out = mx::get_active_memory();
  SPX_CATCH
}

int spx_memory_peak(size_t* out) {
  SPX_TRY
  *out = mx::get_peak_memory();
  SPX_CATCH
}

int spx_memory_reset_peak(void) {
  SPX_TRY
  mx::reset_peak_memory();
  SPX_CATCH
}

int spx_memory_cache(size_t* out) {
  SPX_TRY
  *out = mx::get_cache_memory();
  SPX_CATCH
}

int spx_memory_clear_cache(void) {
  SPX_TRY
  mx::clear_cache();
  SPX_CATCH
}

int spx_memory_set_limit(size_t* previous, size_t limit) {
  SPX_TRY
  *previous = mx::set_memory_limit(limit);
  SPX_CATCH
}

int spx_memory_set_cache_limit(size_t* previous, size_t limit) {
  SPX_TRY
  *previous = mx::set_cache_limit(limit);
  SPX_CATCH
}

int spx_array_free(spx_array a) {
  SPX_TRY
  delete static_cast<mx::array*>(a.ctx);
  SPX_CATCH
}

int spx_array_free_many(const spx_array* a, size_t n) {
  SPX_TRY
  for (size_t i = 0; i < n; i++) {
    delete static_cast<mx::array*>(a[i].ctx);
  }
  SPX_CATCH
}

int spx_array_from_data(spx_array* out, const void* data, size_t nbytes,
                        const int* shape, int ndim, int dtype) {
  SPX_TRY
  mx::Shape sh = shape_of(shape, ndim);
  mx::Dtype dt = dtype_of(dtype);
  size_t want = dt.size();
  for (int d : sh) {
    if (d < 0) {
      throw std::invalid_argument("negative dimension in shape");
    }
    want *= static_cast<size_t>(d);
  }
  if (want != nbytes) {
    throw std::invalid_argument("host data has " + std::to_string(nbytes) +
                                " bytes, shape and dtype need " + std::to_string(want));
  }
  // MLX on Linux copies host buffers anyway; do it explicitly into an MLX
  // allocation so the Go memory is never referenced after this call.
  auto buf = mx::allocator::malloc(nbytes);
  if (nbytes > 0) {
    std::memcpy(buf.buffer().raw_ptr(), data, nbytes);
  }
  assign(out, mx::array(std::move(buf), std::move(sh), dt));
  SPX_CATCH
}

int spx_array_scalar_float(spx_array* out, double value, int dtype) {
  SPX_TRY
  mx::Dtype dt = dtype_of(dtype);
  assign(out, mx::astype(mx::array(static_cast<float>(value)), dt));
  SPX_CATCH
}

int spx_array_scalar_int(spx_array* out, int64_t value, int dtype) {
  SPX_TRY
  mx::Dtype dt = dtype_of(dtype);
  assign(out, mx::astype(mx::array(value, mx::int64), dt));
  SPX_CATCH
}

int spx_array_ndim(int* out, spx_array a) {
  SPX_TRY
  *out = static_cast<int>(arr(a).ndim());
  SPX_CATCH
}

int spx_array_shape(int* out, int cap, spx_array a) {
  SPX_TRY
  const auto& sh = arr(a).shape();
  for (int i = 0; i < cap && i < static_cast<int>(sh.size()); i++) {
    out[i] = sh[i];
  }
  SPX_CATCH
}

int spx_array_dtype(int* out, spx_array a) {
  SPX_TRY
  *out = dtype_code(arr(a).dtype());
  SPX_CATCH
}

int spx_array_size(size_t* out, spx_array a) {
  SPX_TRY
  *out = arr(a).size();
  SPX_CATCH
}

int spx_array_nbytes(size_t* out, spx_array a) {
  SPX_TRY
  *out = arr(a).nbytes();
  SPX_CATCH
}

int spx_array_evaluated(bool* out, spx_array a) {
  SPX_TRY
  *out = arr(a).status() != mx::array::Status::unscheduled;
  SPX_CATCH
}

int spx_array_read(void* dst, size_t nbytes, spx_array a) {
  SPX_TRY
  // Flags are only meaningful once evaluated: evaluate, then copy into a
  // row-major layout if the result is strided or broadcast.
  mx::array c = arr(a);
  c.eval();
  if (!c.flags().row_contiguous) {
    c = mx::contiguous(c, false);
    c.eval();
  }
  if (c.nbytes() != nbytes) {
    throw std::invalid_argument("read of " + std::to_string(nbytes) +
                                " bytes from an array of " + std::to_string(c.nbytes()));
  }
  if (!c.flags().row_contiguous) {
    throw std::runtime_error("array is not row-contiguous after contiguous()");
  }
  if (nbytes > 0) {
    std::memcpy(dst, c.data<uint8_t>(), nbytes);
  }
  SPX_CATCH
}

int spx_eval(const spx_array* a, size_t n) {
  SPX_TRY
  mx::eval(arrays(a, n));
  SPX_CATCH
}

int spx_array_state(bool* available, bool* tracer, spx_array a) {
  SPX_TRY
  const mx::array& x = arr(a);
  *available = x.is_available();
  *tracer = x.is_tracer();
  SPX_CATCH
}

int spx_bundle_new(spx_bundle* out, const spx_array* a, size_t n) {
  SPX_TRY
  out->ctx = new std::vector<mx::array>(arrays(a, n));
  SPX_CATCH
}

int spx_bundle_async_eval(spx_bundle b) {
  SPX_TRY
  mx::async_eval(*static_cast<std::vector<mx::array>*>(b.ctx));
  SPX_CATCH
}

void spx_bundle_free(spx_bundle b) {
  delete static_cast<std::vector<mx::array>*>(b.ctx);
}

int spx_async_eval(const spx_array* a, size_t n) {
  SPX_TRY
  mx::async_eval(arrays(a, n));
  SPX_CATCH
}

int spx_full(spx_array* out, const int* shape, int ndim, double value,
             int dtype, spx_stream s) {
  SPX_TRY
  mx::Dtype dt = dtype_of(dtype);
  mx::array v = mx::issubdtype(dt, mx::integer) || dt == mx::bool_
                    ? mx::array(static_cast<int64_t>(value), mx::int64)
                    : mx::array(value, mx::float64 == dt ? mx::float64 : mx::float32);
  assign(out, mx::full(shape_of(shape, ndim), v, dt, stream(s)));
  SPX_CATCH
}

int spx_arange(spx_array* out, double start, double stop, double step,
               int dtype, spx_stream s) {
  SPX_TRY
  assign(out, mx::arange(start, stop, step, dtype_of(dtype), stream(s)));
  SPX_CATCH
}

int spx_tri(spx_array* out, int n, int m, int k, int dtype, spx_stream s) {
  SPX_TRY
  assign(out, mx::tri(n, m, k, dtype_of(dtype), stream(s)));
  SPX_CATCH
}

int spx_unary(spx_array* out, int op, spx_array a, spx_stream s) {
  SPX_TRY
  const mx::array& x = arr(a);
  mx::Stream st = stream(s);
  switch (op) {
    case SPX_NEGATIVE: assign(out, mx::negative(x, st)); break;
    case SPX_EXP: assign(out, mx::exp(x, st)); break;
    case SPX_LOG: assign(out, mx::log(x, st)); break;
    case SPX_LOG1P: assign(out, mx::log1p(x, st)); break;
    case SPX_SIGMOID: assign(out, mx::sigmoid(x, st)); break;
    case SPX_TANH: assign(out, mx::tanh(x, st)); break;
    case SPX_RSQRT: assign(out, mx::rsqrt(x, st)); break;
    case SPX_SQRT: assign(out, mx::sqrt(x, st)); break;
    case SPX_SQUARE: assign(out, mx::square(x, st)); break;
    case SPX_ABS: assign(out, mx::abs(x, st)); break;
    case SPX_FLOOR: assign(out, mx::floor(x, st)); break;
    case SPX_CEIL: assign(out, mx::ceil(x, st)); break;
    case SPX_SIGN: assign(out, mx::sign(x, st)); break;
    case SPX_LOGICAL_NOT: assign(out, mx::logical_not(x, st)); break;
    case SPX_SIN: assign(out, mx::sin(x, st)); break;
    case SPX_COS: assign(out, mx::cos(x, st)); break;
    case SPX_ISNAN: assign(out, mx::isnan(x, st)); break;
    case SPX_ISINF: assign(out, mx::isinf(x, st)); break;
    case SPX_ERF: assign(out, mx::erf(x, st)); break;
    case SPX_RECIPROCAL: assign(out, mx::reciprocal(x, st)); break;
    case SPX_STOP_GRADIENT: assign(out, mx::stop_gradient(x, st)); break;
    default: throw std::invalid_argument("mlx shim: unknown unary op " + std::to_string(op));
  }
  SPX_CATCH
}

int spx_binary(spx_array* out, int op, spx_array a, spx_array b, spx_stream s) {
  SPX_TRY
  const mx::array& x = arr(a);
  const mx::array& y = arr(b);
  mx::Stream st = stream(s);
  switch (op) {
    case SPX_ADD: assign(out, mx::add(x, y, st)); break;
    case SPX_SUBTRACT: assign(out, mx::subtract(x, y, st)); break;
    case SPX_MULTIPLY: assign(out, mx::multiply(x, y, st)); break;
    case SPX_DIVIDE: assign(out, mx::divide(x, y, st)); break;
    case SPX_MAXIMUM: assign(out, mx::maximum(x, y, st)); break;
    case SPX_MINIMUM: assign(out, mx::minimum(x, y, st)); break;
    case SPX_POWER: assign(out, mx::power(x, y, st)); break;
    case SPX_LOGADDEXP: assign(out, mx::logaddexp(x, y, st)); break;
    case SPX_EQUAL: assign(out, mx::equal(x, y, st)); break;
    case SPX_NOT_EQUAL: assign(out, mx::not_equal(x, y, st)); break;
    case SPX_LESS: assign(out, mx::less(x, y, st)); break;
    case SPX_LESS_EQUAL: assign(out, mx::less_equal(x, y, st)); break;
    case SPX_GREATER: assign(out, mx::greater(x, y, st)); break;
    case SPX_GREATER_EQUAL: assign(out, mx::greater_equal(x, y, st)); break;
    case SPX_LOGICAL_AND: assign(out, mx::logical_and(x, y, st)); break;
    case SPX_LOGICAL_OR: assign(out, mx::logical_or(x, y, st)); break;
    case SPX_REMAINDER: assign(out, mx::remainder(x, y, st)); break;
    case SPX_FLOOR_DIVIDE: assign(out, mx::floor_divide(x, y, st)); break;
    case SPX_MATMUL: assign(out, mx::matmul(x, y, st)); break;
    default: throw std::invalid_argument("mlx shim: unknown binary op " + std::to_string(op));
  }
  SPX_CATCH
}

int spx_where(spx_array* out, spx_array cond, spx_array x, spx_array y,
              spx_stream s) {
  SPX_TRY
  assign(out, mx::where(arr(cond), arr(x), arr(y), stream(s)));
  SPX_CATCH
}

int spx_astype(spx_array* out, spx_array a, int dtype, spx_stream s) {
  SPX_TRY
  assign(out, mx::astype(arr(a), dtype_of(dtype), stream(s)));
  SPX_CATCH
}

int spx_addmm(spx_array* out, spx_array c, spx_array a, spx_array b,
              float alpha, float beta, spx_stream s) {
  SPX_TRY
  assign(out, mx::addmm(arr(c), arr(a), arr(b), alpha, beta, stream(s)));
  SPX_CATCH
}

int spx_reduce(spx_array* out, int op, spx_array a, const int* axes,
               int naxes, bool keepdims, spx_stream s) {
  SPX_TRY
  const mx::array& x = arr(a);
  std::vector<int> ax = ints(axes, naxes);
  mx::Stream st = stream(s);
  switch (op) {
    case SPX_SUM: assign(out, mx::sum(x, ax, keepdims, st)); break;
    case SPX_MEAN: assign(out, mx::mean(x, ax, keepdims, st)); break;
    case SPX_MAX: assign(out, mx::max(x, ax, keepdims, st)); break;
    case SPX_MIN: assign(out, mx::min(x, ax, keepdims, st)); break;
    case SPX_PROD: assign(out, mx::prod(x, ax, keepdims, st)); break;
    case SPX_LOGSUMEXP: assign(out, mx::logsumexp(x, ax, keepdims, st)); break;
    case SPX_ALL: assign(out, mx::all(x, ax, keepdims, st)); break;
    case SPX_ANY: assign(out, mx::any(x, ax, keepdims, st)); break;
    default: throw std::invalid_argument("mlx shim: unknown reduction " + std::to_string(op));
  }
  SPX_CATCH
}

int spx_argmax(spx_array* out, spx_array a, int axis, bool keepdims,
               spx_stream s) {
  SPX_TRY
  assign(out, mx::argmax(arr(a), axis, keepdims, stream(s)));
  SPX_CATCH
}

int spx_argmin(spx_array* out, spx_array a, int axis, bool keepdims,
               spx_stream s) {
  SPX_TRY
  assign(out, mx::argmin(arr(a), axis, keepdims, stream(s)));
  SPX_CATCH
}

int spx_softmax(spx_array* out, spx_array a, const int* axes, int naxes,
                bool precise, spx_stream s) {
  SPX_TRY
  assign(out, mx::softmax(arr(a), ints(axes, naxes), precise, stream(s)));
  SPX_CATCH
}

int spx_topk(spx_array* out, spx_array a, int k, int axis, spx_stream s) {
  SPX_TRY
  assign(out, mx::topk(arr(a), k, axis, stream(s)));
  SPX_CATCH
}

int spx_argpartition(spx_array* out, spx_array a, int kth, int axis,
                     spx_stream s) {
  SPX_TRY
  assign(out, mx::argpartition(arr(a), kth, axis, stream(s)));
  SPX_CATCH
}

int spx_sort(spx_array* out, spx_array a, int axis, spx_stream s) {
  SPX_TRY
  assign(out, mx::sort(arr(a), axis, stream(s)));
  SPX_CATCH
}

int spx_argsort(spx_array* out, spx_array a, int axis, spx_stream s) {
  SPX_TRY
  assign(out, mx::argsort(arr(a), axis, stream(s)));
  SPX_CATCH
}

int spx_cumsum(spx_array* out, spx_array a, int axis, bool reverse,
               bool inclusive, spx_stream s) {
  SPX_TRY
  assign(out, mx::cumsum(arr(a), axis, reverse, inclusive, std::nullopt, stream(s)));
  SPX_CATCH
}

int spx_reshape(spx_array* out, spx_array a, const int* shape, int ndim,
                spx_stream s) {
  SPX_TRY
  assign(out, mx::reshape(arr(a), shape_of(shape, ndim), stream(s)));
  SPX_CATCH
}

int spx_transpose(spx_array* out, spx_array a, const int* axes, int naxes,
                  spx_stream s) {
  SPX_TRY
  assign(out, mx::transpose(arr(a), ints(axes, naxes), stream(s)));
  SPX_CATCH
}

int spx_expand_dims(spx_array* out, spx_array a, const int* axes, int naxes,
                    spx_stream s) {
  SPX_TRY
  assign(out, mx::expand_dims(arr(a), ints(axes, naxes), stream(s)));
  SPX_CATCH
}

int spx_squeeze(spx_array* out, spx_array a, const int* axes, int naxes,
                spx_stream s) {
  SPX_TRY
  if (naxes == 0) {
    assign(out, mx::squeeze(arr(a), stream(s)));
  } else {
    assign(out, mx::squeeze(arr(a), ints(axes, naxes), stream(s)));
  }
  SPX_CATCH
}

int spx_broadcast_to(spx_array* out, spx_array a, const int* shape, int ndim,
                     spx_stream s) {
  SPX_TRY
  assign(out, mx::broadcast_to(arr(a), shape_of(shape, ndim), stream(s)));
  SPX_CATCH
}

int spx_contiguous(spx_array* out, spx_array a, spx_stream s) {
  SPX_TRY
  assign(out, mx::contiguous(arr(a), false, stream(s)));
  SPX_CATCH
}

int spx_pad(spx_array* out, spx_array a, const int* axes, const int* low,
            const int* high, int naxes, spx_array value, spx_stream s) {
  SPX_TRY
  mx::array v = value.ctx ? arr(value) : mx::array(0);
  assign(out, mx::pad(arr(a), ints(axes, naxes), shape_of(low, naxes),
                      shape_of(high, naxes), v, "constant", stream(s)));
  SPX_CATCH
}

int spx_concatenate(spx_array* out, const spx_array* a, size_t n, int axis,
                    spx_stream s) {
  SPX_TRY
  assign(out, mx::concatenate(arrays(a, n), axis, stream(s)));
  SPX_CATCH
}

int spx_stack(spx_array* out, const spx_array* a, size_t n, int axis,
              spx_stream s) {
  SPX_TRY
  assign(out, mx::stack(arrays(a, n), axis, stream(s)));
  SPX_CATCH
}

int spx_split(spx_array* outs, spx_array a, const int* indices, int nidx,
              int axis, spx_stream s) {
  SPX_TRY
  auto parts = mx::split(arr(a), shape_of(indices, nidx), axis, stream(s));
  if (parts.size() != static_cast<size_t>(nidx) + 1) {
    throw std::runtime_error("split returned an unexpected number of parts");
  }
  for (size_t i = 0; i < parts.size(); i++) {
    assign(&outs[i], std::move(parts[i]));
  }
  SPX_CATCH
}

int spx_slice(spx_array* out, spx_array a, const int* start, const int* stop,
              const int* strides, int ndim, spx_stream s) {
  SPX_TRY
  assign(out, mx::slice(arr(a), shape_of(start, ndim), shape_of(stop, ndim),
                        shape_of(strides, ndim), stream(s)));
  SPX_CATCH
}

int spx_slice_dynamic(spx_array* out, spx_array a, spx_array start,
                      const int* axes, int naxes, const int* sizes, int ndim,
                      spx_stream s) {
  SPX_TRY
  assign(out, mx::slice(arr(a), arr(start), ints(axes, naxes),
                        shape_of(sizes, ndim), stream(s)));
  SPX_CATCH
}

int spx_slice_update(spx_array* out, spx_array src, spx_array update,
                     const int* start, const int* stop, const int* strides,
                     int ndim, spx_stream s) {
  SPX_TRY
  assign(out, mx::slice_update(arr(src), arr(update), shape_of(start, ndim),
                               shape_of(stop, ndim), shape_of(strides, ndim),
                               stream(s)));
  SPX_CATCH
}

int spx_slice_update_dynamic(spx_array* out, spx_array src, spx_array update,
                             spx_array start, const int* axes, int naxes,
                             spx_stream s) {
  SPX_TRY
  assign(out, mx::slice_update(arr(src), arr(update), arr(start),
                               ints(axes, naxes), stream(s)));
  SPX_CATCH
}

int spx_take(spx_array* out, spx_array a, spx_array indices, int axis,
             spx_stream s) {
  SPX_TRY
  assign(out, mx::take(arr(a), arr(indices), axis, stream(s)));
  SPX_CATCH
}

int spx_take_along_axis(spx_array* out, spx_array a, spx_array indices,
                        int axis, spx_stream s) {
  SPX_TRY
  assign(out, mx::take_along_axis(arr(a), arr(indices), axis, stream(s)));
  SPX_CATCH
}

int spx_put_along_axis(spx_array* out, spx_array a, spx_array indices,
                       spx_array values, int axis, spx_stream s) {
  SPX_TRY
  assign(out, mx::put_along_axis(arr(a), arr(indices), arr(values), axis, stream(s)));
  SPX_CATCH
}

int spx_scatter_add_axis(spx_array* out, spx_array a, spx_array indices,
                         spx_array values, int axis, spx_stream s) {
  SPX_TRY
  assign(out, mx::scatter_add_axis(arr(a), arr(indices), arr(values), axis, stream(s)));
  SPX_CATCH
}

int spx_conv1d(spx_array* out, spx_array input, spx_array weight, int stride,
               int padding, int dilation, int groups, spx_stream s) {
  SPX_TRY
  assign(out, mx::conv1d(arr(input), arr(weight), stride, padding, dilation,
                         groups, stream(s)));
  SPX_CATCH
}

int spx_softmax_cpu(spx_array* out, spx_array x, spx_stream s) {
  SPX_TRY
  if (auto y = softmax_cpu(arr(x), stream(s))) {
    assign(out, std::move(*y));
  }
  SPX_CATCH
}

int spx_sigmoid_mul_cpu(spx_array* out, spx_array a, spx_array b, bool silu, spx_stream s) {
  SPX_TRY
  if (auto y = sigmoid_mul_cpu(arr(a), arr(b), silu, stream(s))) {
    assign(out, std::move(*y));
  }
  SPX_CATCH
}

int spx_dynamic_conv_cpu(spx_array* out, spx_array x, spx_array w, spx_array b, spx_stream s) {
  SPX_TRY
  if (auto y = dynamic_conv_cpu(arr(x), arr(w), arr(b), stream(s))) {
    assign(out, std::move(*y));
  }
  SPX_CATCH
}

int spx_conv_silu_cpu(spx_array* out, spx_array x, spx_array w, spx_stream s) {
  SPX_TRY
  if (auto y = conv_silu_cpu(arr(x), arr(w), stream(s))) {
    assign(out, std::move(*y));
  }
  SPX_CATCH
}

int spx_rms_norm(spx_array* out, spx_array x, spx_array weight, float eps,
                 spx_stream s) {
  SPX_TRY
  if (auto y = rms_norm_cpu(arr(x), opt(weight), eps, stream(s))) {
    assign(out, std::move(*y));
  } else {
    assign(out, mx::fast::rms_norm(arr(x), opt(weight), eps, stream(s)));
  }
  SPX_CATCH
}

int spx_rope(spx_array* out, spx_array x, int dims, bool traditional,
             float base, float scale, int offset, spx_array offset_array,
             spx_stream s) {
  SPX_TRY
  mx::array off = offset_array.ctx != nullptr ? arr(offset_array) : mx::array(offset, mx::int32);
  if (auto y = rope_cpu(arr(x), dims, traditional, base, scale, off, stream(s))) {
    assign(out, std::move(*y));
  } else if (offset_array.ctx != nullptr) {
    assign(out, mx::fast::rope(arr(x), dims, traditional, base, scale,
                               arr(offset_array), std::nullopt, stream(s)));
  } else {
    assign(out, mx::fast::rope(arr(x), dims, traditional, base, scale, offset,
                               std::nullopt, stream(s)));
  }
  SPX_CATCH
}

namespace {

// attention_float32 is attention as two matmuls and a softmax over float32
// q [B, Hq, Lq, D] and k, v [B, Hkv, Lk, D] (Hq a multiple of Hkv: one matmul
// per key head over its group of query heads), with an end-aligned causal mask
// or an array mask broadcastable to [B, Hq, Lq, Lk]: a boolean one (true
// keeps) puts `masked` where it is false, any other is added. The softmax
// over the last axis is the caller's; when it has none to give, neither has
// this.
std::optional<mx::array> attention_float32(
    const mx::array& q, const mx::array& k, const mx::array& v, float scale,
    bool causal, const std::optional<mx::array>& mask, float masked,
    const std::function<std::optional<mx::array>(const mx::array&)>& softmax,
    mx::Stream s) {
  int kv_heads = k.shape(1), group = q.shape(1) / kv_heads;
  int lq = q.shape(2), lk = k.shape(2);
  mx::array qs = mx::multiply(mx::array(scale, mx::float32), q, s);
  mx::array kk = k, vv = v;
  if (group > 1) {
    qs = mx::unflatten(qs, 1, {kv_heads, group}, s);
    kk = mx::expand_dims(kk, 2, s);
    vv = mx::expand_dims(vv, 2, s);
  }
  mx::array scores = mx::matmul(qs, mx::swapaxes(kk, -1, -2, s), s);
  std::optional<mx::array> keep;
  if (causal) {
    keep = mx::greater_equal(mx::expand_dims(mx::arange(lk - lq, lk, s), 1, s),
                             mx::expand_dims(mx::arange(0, lk, s), 0, s), s);
  } else if (mask) {
    keep = *mask;
    if (group > 1 && keep->ndim() >= 3) {
      keep = keep->shape(-3) == 1 ? mx::expand_dims(*keep, -3, s)
                                  : mx::unflatten(*keep, -3, {kv_heads, group}, s);
    }
  }
  if (keep && keep->dtype() == mx::bool_) {
    scores = mx::where(*keep, scores, mx::array(masked, mx::float32), s);
  } else if (keep) {
    scores = mx::add(scores, mx::astype(*keep, mx::float32, s), s);
  }
  std::optional<mx::array> p = softmax(scores);
  if (!p) {
    return std::nullopt;
  }
  mx::array o = mx::matmul(*p, vv, s);
  return group > 1 ? mx::flatten(o, 1, 2, s) : o;
}

// sdpa_composed is attention_float32 for q, k, v of any float type: scores,
// softmax and the weighted sum are float32 whatever q's type, the result cast
// back to it. So a half-precision block gets what MLX's one-query vector
// kernel gives each decoding step (it keeps scores and sums in float32 and
// rounds once, at the end), and a verification's rows round like the decode
// steps they stand for.
mx::array sdpa_composed(const mx::array& q, const mx::array& k,
                        const mx::array& v, float scale, bool causal,
                        const std::optional<mx::array>& mask, mx::Stream s) {
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4 || k.shape(1) == 0 ||
      q.shape(1) % k.shape(1) != 0) {
    throw std::invalid_argument("sdpa: q, k, v must be [B, H, L, D] with query heads a multiple of key heads");
  }
  auto precise = [&](const mx::array& x) -> std::optional<mx::array> {
    return mx::softmax(x, std::vector<int>{-1}, true, s);
  };
  mx::array o = *attention_float32(
      mx::astype(q, mx::float32, s), mx::astype(k, mx::float32, s), mx::astype(v, mx::float32, s), scale,
      causal, mask, -std::numeric_limits<float>::infinity(), precise, s);
  return mx::astype(o, q.dtype(), s);
}

// sdpa_cpu is MLX's own attention on the CPU stream for float32 q, k, v
// without sinks: the composition MLX's fast::scaled_dot_product_attention
// falls back to on the CPU (mlx/fast.cpp, MLX 0.32), op for op — a bool mask
// fills with float32's lowest value, not −inf — except that the softmax is
// act.cpp's SoftmaxCPU, equal to the bit to MLX's (which runs its scalar exp
// element by element). Nothing when the call is not that case (other types,
// sinks, shapes MLX would reject): MLX then takes it, errors included.
std::optional<mx::array> sdpa_cpu(const mx::array& q, const mx::array& k, const mx::array& v,
                                  float scale, bool causal, const std::optional<mx::array>& mask,
                                  bool has_sinks, const mx::Stream& s) {
  if (s.device.type != mx::Device::cpu || has_sinks || q.dtype() != mx::float32 ||
      k.dtype() != mx::float32 || v.dtype() != mx::float32 || q.ndim() != 4 || k.ndim() != 4 ||
      v.ndim() != 4 || q.shape(0) != k.shape(0) || q.shape(0) != v.shape(0) ||
      q.shape(3) != k.shape(3) || k.shape(1) != v.shape(1) || k.shape(1) == 0 ||
      q.shape(1) % k.shape(1) != 0 || k.shape(2) != v.shape(2) || q.shape(3) == 0 ||
      k.shape(2) == 0 || (causal && mask) ||
      (mask && ((mask->dtype() != mx::bool_ && mask->dtype() != mx::float32) || mask->ndim() > 4))) {
    return std::nullopt;
  }
  std::optional<mx::array> m;
  if (mask) {  // MLX's fallback broadcasts the mask to the scores' shape first
    mx::Shape mshape = q.shape();
    mshape.back() = k.shape(2);
    m = mx::broadcast_to(*mask, mshape, s);
  }
  auto vectorised = [&](const mx::array& x) { return softmax_cpu(x, s); };
  return attention_float32(q, k, v, scale, causal, m, std::numeric_limits<float>::lowest(), vectorised, s);
}

// A GPU query block of 2-32 rows in half precision (a verification, a draft
// block) goes through sdpa_composed: MLX would run it on cuDNN, whose
// execution plan is cached per exact key length, so a block attending to a
// history that grows every round built a new plan every round (about 40 ms
// on an H200, 20 times a go-tiny decode step; MLX 0.32's vector kernel takes
// single queries only). Single queries keep MLX's vector kernel and longer
// blocks (prefill) cuDNN. SPECULA_CUDNN_BLOCKS=1 leaves every call to MLX.
bool compose_on_gpu(const mx::array& q, const mx::array& k, bool has_sinks,
                    const mx::Stream& s) {
  static const bool keep_mlx = [] {
    const char* v = std::getenv("SPECULA_CUDNN_BLOCKS");
    return v != nullptr && std::string(v) == "1";
  }();
  if (keep_mlx || has_sinks || s.device.type != mx::Device::gpu || q.ndim() != 4) {
    return false;
  }
  int lq = q.shape(2);
  bool half = q.dtype() == mx::bfloat16 || q.dtype() == mx::float16;
  // 32 is mlx.MaxComposedQueries (ops.go): keep the two equal.
  return half && lq >= 2 && lq <= 32 && lq <= k.shape(2);
}

}  // namespace

int spx_sdpa(spx_array* out, spx_array q, spx_array k, spx_array v,
             float scale, const char* mask_mode, spx_array mask,
             spx_array sinks, bool mlx_only, spx_stream s) {
  SPX_TRY
  std::string mode = mask_mode ? mask_mode : "";
  mx::Stream st = stream(s);
  std::optional<mx::array> cpu;
  if (!mlx_only && (mode == "" || mode == "causal")) {
    cpu = sdpa_cpu(arr(q), arr(k), arr(v), scale, mode == "causal", opt(mask),
                   opt(sinks).has_value(), st);
  }
  if (cpu) {
    assign(out, std::move(*cpu));
  } else if (!mlx_only && compose_on_gpu(arr(q), arr(k), opt(sinks).has_value(), st)) {
    assign(out, sdpa_composed(arr(q), arr(k), arr(v), scale, mode == "causal", opt(mask), st));
  } else {
    assign(out, mx::fast::scaled_dot_product_attention(
                    arr(q), arr(k), arr(v), scale, mode, opt(mask), opt(sinks),
                    false, st));
  }
  SPX_CATCH
}

int spx_sdpa_composed(spx_array* out, spx_array q, spx_array k, spx_array v,
                      float scale, const char* mask_mode, spx_array mask,
                      spx_stream s) {
  SPX_TRY
  std::string mode = mask_mode ? mask_mode : "";
  assign(out, sdpa_composed(arr(q), arr(k), arr(v), scale, mode == "causal", opt(mask), stream(s)));
  SPX_CATCH
}

int spx_quantize(spx_array* wq, spx_array* scales, spx_array* biases,
                 spx_array w, int group_size, int bits, const char* mode,
                 spx_stream s) {
  SPX_TRY
  auto parts = mx::quantize(arr(w), group_size, bits, mode, std::nullopt,
                            stream(s));
  if (parts.size() < 2 || parts.size() > 3) {
    throw std::runtime_error("quantize returned an unexpected number of arrays");
  }
  assign(wq, std::move(parts[0]));
  assign(scales, std::move(parts[1]));
  if (parts.size() == 3) {
    assign(biases, std::move(parts[2]));
  }
  SPX_CATCH
}

int spx_dequantize(spx_array* out, spx_array w, spx_array scales,
                   spx_array biases, int group_size, int bits,
                   const char* mode, int dtype, spx_stream s) {
  SPX_TRY
  std::optional<mx::Dtype> dt;
  if (dtype >= 0) {
    dt = dtype_of(dtype);
  }
  assign(out, mx::dequantize(arr(w), arr(scales), opt(biases), group_size,
                             bits, mode, std::nullopt, dt, stream(s)));
  SPX_CATCH
}

int spx_quantized_matmul(spx_array* out, spx_array x, spx_array w,
                         spx_array scales, spx_array biases, bool transpose,
                         int group_size, int bits, const char* mode,
                         spx_stream s) {
  SPX_TRY
  assign(out, mx::quantized_matmul(arr(x), arr(w), arr(scales), opt(biases),
                                   transpose, group_size, bits, mode,
                                   stream(s)));
  SPX_CATCH
}

int spx_gather_qmm(spx_array* out, spx_array x, spx_array w, spx_array scales,
                   spx_array biases, spx_array lhs_indices,
                   spx_array rhs_indices, bool transpose, int group_size,
                   int bits, const char* mode, bool sorted_indices,
                   spx_stream s) {
  SPX_TRY
  assign(out, mx::gather_qmm(arr(x), arr(w), arr(scales), opt(biases),
                             opt(lhs_indices), opt(rhs_indices), transpose,
                             group_size, bits, mode, std::nullopt,
                             sorted_indices, stream(s)));
  SPX_CATCH
}

int spx_gather_mm(spx_array* out, spx_array a, spx_array b,
                  spx_array lhs_indices, spx_array rhs_indices,
                  bool sorted_indices, spx_stream s) {
  SPX_TRY
  assign(out, mx::gather_mm(arr(a), arr(b), opt(lhs_indices),
                            opt(rhs_indices), sorted_indices, stream(s)));
  SPX_CATCH
}

int spx_cuda_fn_new(spx_cuda_fn* out, const char* name, const char* source,
                    const char* header, const char* const* input_names,
                    size_t nin, const char* const* output_names, size_t nout,
                    int row_contiguous) {
  SPX_TRY
  std::vector<std::string> in_names(input_names, input_names + nin);
  std::vector<std::string> out_names(output_names, output_names + nout);
  out->fn = new mx::fast::CustomKernelFunction(mx::fast::cuda_kernel(
      name, in_names, out_names, source, header ? header : "", row_contiguous != 0, 0));
  SPX_CATCH
}

int spx_cuda_kernel(spx_array* outs, size_t nout, spx_cuda_fn fn,
                    const spx_array* inputs, size_t nin, const int* out_shapes,
                    const int* out_ndims, const int* out_dtypes, int gx, int gy,
                    int gz, int tx, int ty, int tz,
                    const char* const* tmpl_names, const int* tmpl_values,
                    const int* tmpl_kinds, size_t ntmpl, spx_stream s) {
  SPX_TRY
  auto& kernel = *static_cast<mx::fast::CustomKernelFunction*>(fn.fn);
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  const int* dim = out_shapes;
  for (size_t i = 0; i < nout; i++) {
    shapes.push_back(shape_of(dim, out_ndims[i]));
    dim += out_ndims[i];
    dtypes.push_back(dtype_of(out_dtypes[i]));
  }
  std::vector<std::pair<std::string, mx::fast::TemplateArg>> tmpl;
  for (size_t i = 0; i < ntmpl; i++) {
    if (tmpl_kinds[i] == 1) {
      tmpl.emplace_back(tmpl_names[i], mx::fast::TemplateArg(tmpl_values[i] != 0));
    } else {
      tmpl.emplace_back(tmpl_names[i], mx::fast::TemplateArg(tmpl_values[i]));
    }
  }
  auto result = kernel(arrays(inputs, nin), shapes, dtypes, {gx, gy, gz},
                       {tx, ty, tz}, tmpl, std::nullopt, false, stream(s));
  if (result.size() != nout) {
    throw std::runtime_error("cuda_kernel returned an unexpected number of outputs");
  }
  for (size_t i = 0; i < nout; i++) {
    assign(&outs[i], std::move(result[i]));
  }
  SPX_CATCH
}

int spx_random_key(spx_array* out, uint64_t seed) {
  SPX_TRY
  assign(out, mx::random::key(seed));
  SPX_CATCH
}

int spx_random_split(spx_array* out, spx_array key, int num, spx_stream s) {
  SPX_TRY
  assign(out, mx::random::split(arr(key), num, stream(s)));
  SPX_CATCH
}

int spx_random_uniform(spx_array* out, const int* shape, int ndim, int dtype,
                       spx_array key, spx_stream s) {
  SPX_TRY
  assign(out, mx::random::uniform(shape_of(shape, ndim), dtype_of(dtype),
                                  opt(key), stream(s)));
  SPX_CATCH
}

int spx_random_normal(spx_array* out, const int* shape, int ndim, int dtype,
                      float loc, float scale, spx_array key, spx_stream s) {
  SPX_TRY
  assign(out, mx::random::normal(shape_of(shape, ndim), dtype_of(dtype), loc,
                                 scale, opt(key), stream(s)));
  SPX_CATCH
}

int spx_random_categorical(spx_array* out, spx_array logits, int axis,
                           spx_array key, spx_stream s) {
  SPX_TRY
  assign(out, mx::random::categorical(arr(logits), axis, opt(key), stream(s)));
  SPX_CATCH
}

namespace {
struct tensor_map {
  std::vector<std::string> names;
  std::vector<mx::array> arrays;
};
}  // namespace

int spx_load_safetensors(spx_tensor_map* out, const char* path, spx_stream s) {
  SPX_TRY
  auto loaded = mx::load_safetensors(std::string(path), stream(s));
  // Sort by name so that the order seen from Go is stable.
  std::map<std::string, mx::array> sorted(loaded.first.begin(), loaded.first.end());
  auto* m = new tensor_map();
  for (auto& [name, a] : sorted) {
    m->names.push_back(name);
    m->arrays.push_back(a);
  }
  out->ctx = m;
  SPX_CATCH
}

int spx_tensor_map_size(size_t* out, spx_tensor_map m) {
  SPX_TRY
  *out = static_cast<tensor_map*>(m.ctx)->names.size();
  SPX_CATCH
}

int spx_tensor_map_get(const char** name, spx_array* a, spx_tensor_map m,
                       size_t i) {
  SPX_TRY
  auto* tm = static_cast<tensor_map*>(m.ctx);
  if (i >= tm->names.size()) {
    throw std::out_of_range("tensor map index out of range");
  }
  *name = tm->names[i].c_str();
  assign(a, mx::array(tm->arrays[i]));
  SPX_CATCH
}

int spx_tensor_map_free(spx_tensor_map m) {
  SPX_TRY
  delete static_cast<tensor_map*>(m.ctx);
  SPX_CATCH
}

int spx_save_safetensors(const char* path, const char* const* names,
                         const spx_array* a, size_t n,
                         const char* const* meta_keys,
                         const char* const* meta_values, size_t nmeta) {
  SPX_TRY
  std::unordered_map<std::string, mx::array> m;
  for (size_t i = 0; i < n; i++) {
    m.insert_or_assign(std::string(names[i]), arr(a[i]));
  }
  std::unordered_map<std::string, std::string> meta;
  for (size_t i = 0; i < nmeta; i++) {
    meta[meta_keys[i]] = meta_values[i];
  }
  mx::save_safetensors(std::string(path), std::move(m), std::move(meta));
  SPX_CATCH
}

}  // extern "C"
