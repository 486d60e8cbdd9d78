/*
 * shim.h: specula's C interface over the MLX C++ API.
 *
 * Conventions follow mlx-c so that behaviour is predictable from Go:
 *  - an array is an opaque one-field handle; ctx == NULL is the empty handle,
 *    used for "none" (optional mask, optional weight, optional key);
 *  - every function returns an int status (0 ok, 1 MLX error, 2 called off
 *    the MLX worker thread) and writes results through its first pointer
 *    arguments; an empty *out is allocated, a non-empty one is reassigned;
 *  - the stream is the last argument of every op;
 *  - no C++ exception crosses this boundary: the message of a failure is kept
 *    in a thread-local buffer read with spx_last_error() right after the call.
 *
 * Only C types appear here; C++ stays inside shim.cpp.
 */
#ifndef SPECULA_MLX_SHIM_H
#define SPECULA_MLX_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  void* ctx;
} spx_array;

/* A stream is a plain value (MLX streams are small value types): the stream
 * index and its device. */
typedef struct {
  int index;
  int device_type; /* SPX_CPU or SPX_GPU */
  int device_index;
} spx_stream;

enum { SPX_CPU = 0, SPX_GPU = 1 };

/* Status codes. */
enum { SPX_OK = 0, SPX_ERROR = 1, SPX_OFF_WORKER = 2 };

/* Dtypes, numbered by specula (not by MLX). */
enum {
  SPX_BOOL = 0,
  SPX_UINT8 = 1,
  SPX_UINT16 = 2,
  SPX_UINT32 = 3,
  SPX_UINT64 = 4,
  SPX_INT8 = 5,
  SPX_INT16 = 6,
  SPX_INT32 = 7,
  SPX_INT64 = 8,
  SPX_FLOAT16 = 9,
  SPX_FLOAT32 = 10,
  SPX_FLOAT64 = 11,
  SPX_BFLOAT16 = 12,
  SPX_COMPLEX64 = 13,
};

/* Element-wise unary ops dispatched by spx_unary. */
enum {
  SPX_NEGATIVE = 0,
  SPX_EXP,
  SPX_LOG,
  SPX_LOG1P,
  SPX_SIGMOID,
  SPX_TANH,
  SPX_RSQRT,
  SPX_SQRT,
  SPX_SQUARE,
  SPX_ABS,
  SPX_FLOOR,
  SPX_CEIL,
  SPX_SIGN,
  SPX_LOGICAL_NOT,
  SPX_SIN,
  SPX_COS,
  SPX_ISNAN,
  SPX_ISINF,
  SPX_ERF,
  SPX_RECIPROCAL,
  SPX_STOP_GRADIENT,
  SPX_UNARY_COUNT
};

/* Element-wise binary ops (with NumPy broadcasting) dispatched by spx_binary. */
enum {
  SPX_ADD = 0,
  SPX_SUBTRACT,
  SPX_MULTIPLY,
  SPX_DIVIDE,
  SPX_MAXIMUM,
  SPX_MINIMUM,
  SPX_POWER,
  SPX_LOGADDEXP,
  SPX_EQUAL,
  SPX_NOT_EQUAL,
  SPX_LESS,
  SPX_LESS_EQUAL,
  SPX_GREATER,
  SPX_GREATER_EQUAL,
  SPX_LOGICAL_AND,
  SPX_LOGICAL_OR,
  SPX_REMAINDER,
  SPX_FLOOR_DIVIDE,
  SPX_MATMUL,
  SPX_BINARY_COUNT
};

/* Reductions over a list of axes dispatched by spx_reduce. */
enum {
  SPX_SUM = 0,
  SPX_MEAN,
  SPX_MAX,
  SPX_MIN,
  SPX_PROD,
  SPX_LOGSUMEXP,
  SPX_ALL,
  SPX_ANY,
  SPX_REDUCE_COUNT
};

/* ---- runtime ---------------------------------------------------------- */

/* Marks the calling OS thread as the MLX worker; every other entry point
 * refuses to run (status 2) on any other thread. */
void spx_set_worker_thread(bool on);
/* Reports whether the calling thread is the MLX worker. */
bool spx_on_worker(void);
const char* spx_last_error(void);
const char* spx_version(void);
/* Names the BLAS serving MLX's CPU matmuls and its threading (see blas.cpp). */
const char* spx_blas_name(void);
/* The thread count OpenBLAS had for the most recent CPU product (0 before
 * the first, or when the BLAS is not OpenBLAS). */
int spx_blas_last_threads(void);
/* How many CPU products the few-rows kernel of blas.cpp served. */
long spx_blas_small_row_products(void);
/* How many of those the kernel shared with its helper thread. */
long spx_blas_shared_products(void);
int spx_gpu_available(bool* out);
int spx_default_stream(spx_stream* out, int device_type);
int spx_new_stream(spx_stream* out, int device_type);
int spx_set_default_device(int device_type);
// spx_shared_stream makes a new stream of the device that any thread may
// evaluate (MLX's thread-unsafe streams: one encoder for the process, which
// threads must take turns on) and makes it this thread's default.
int spx_shared_stream(spx_stream* out, int device_type);
// spx_set_default_stream makes s this thread's default stream of its device.
int spx_set_default_stream(spx_stream s);
int spx_synchronize(spx_stream s);

/* ---- memory ----------------------------------------------------------- */

int spx_memory_active(size_t* out);
int spx_memory_peak(size_t* out);
int spx_memory_reset_peak(void);
int spx_memory_cache(size_t* out);
int spx_memory_clear_cache(void);
int spx_memory_set_limit(size_t* previous, size_t limit);
int spx_memory_set_cache_limit(size_t* previous, size_t limit);

/* ---- arrays ----------------------------------------------------------- */

int spx_array_free(spx_array a);
/* Frees n handles in one call (a sweep frees thousands per decode step). */
int spx_array_free_many(const spx_array* a, size_t n);
/* Copies nbytes of host data (row-major, little-endian) into a new array. */
int spx_array_from_data(spx_array* out, const void* data, size_t nbytes,
                        const int* shape, int ndim, int dtype);
int spx_array_scalar_float(spx_array* out, double value, int dtype);
int spx_array_scalar_int(spx_array* out, int64_t value, int dtype);
int spx_array_ndim(int* out, spx_array a);
/* Writes min(ndim, cap) dimensions. */
int spx_array_shape(int* out, int cap, spx_array a);
int spx_array_dtype(int* out, spx_array a);
int spx_array_size(size_t* out, spx_array a);
int spx_array_nbytes(size_t* out, spx_array a);
/* Whether an evaluation has reached a (its value is computed or scheduled). */
int spx_array_evaluated(bool* out, spx_array a);
/* Evaluates a, makes it row-contiguous and copies exactly nbytes (which must
 * equal its byte size) into dst. */
int spx_array_read(void* dst, size_t nbytes, spx_array a);

int spx_eval(const spx_array* arrays, size_t n);

// A bundle holds references to arrays so that another thread can submit
// them (mlx/submit.go) while the worker frees its own handles.
typedef struct {
  void* ctx;
} spx_bundle;
int spx_bundle_new(spx_bundle* out, const spx_array* arrays, size_t n);
int spx_bundle_async_eval(spx_bundle b);
void spx_bundle_free(spx_bundle b);
// spx_array_state says whether a holds its data (evaluated, or made from
// data) rather than a pending computation, and whether it is a tracer (it
// depends on an input of a function being compiled, so it cannot be
// evaluated now).
int spx_array_state(bool* available, bool* tracer, spx_array a);
int spx_async_eval(const spx_array* arrays, size_t n);

/* ---- creation --------------------------------------------------------- */

int spx_full(spx_array* out, const int* shape, int ndim, double value,
             int dtype, spx_stream s);
int spx_arange(spx_array* out, double start, double stop, double step,
               int dtype, spx_stream s);
int spx_tri(spx_array* out, int n, int m, int k, int dtype, spx_stream s);

/* ---- element-wise ----------------------------------------------------- */

int spx_unary(spx_array* out, int op, spx_array a, spx_stream s);
int spx_binary(spx_array* out, int op, spx_array a, spx_array b, spx_stream s);
int spx_where(spx_array* out, spx_array cond, spx_array x, spx_array y,
              spx_stream s);
int spx_astype(spx_array* out, spx_array a, int dtype, spx_stream s);
int spx_addmm(spx_array* out, spx_array c, spx_array a, spx_array b,
              float alpha, float beta, spx_stream s);

/* ---- reductions and friends ------------------------------------------- */

int spx_reduce(spx_array* out, int op, spx_array a, const int* axes,
               int naxes, bool keepdims, spx_stream s);
int spx_argmax(spx_array* out, spx_array a, int axis, bool keepdims,
               spx_stream s);
int spx_argmin(spx_array* out, spx_array a, int axis, bool keepdims,
               spx_stream s);
int spx_softmax(spx_array* out, spx_array a, const int* axes, int naxes,
                bool precise, spx_stream s);
int spx_topk(spx_array* out, spx_array a, int k, int axis, spx_stream s);
int spx_argpartition(spx_array* out, spx_array a, int kth, int axis,
                     spx_stream s);
int spx_sort(spx_array* out, spx_array a, int axis, spx_stream s);
int spx_argsort(spx_array* out, spx_array a, int axis, spx_stream s);
int spx_cumsum(spx_array* out, spx_array a, int axis, bool reverse,
               bool inclusive, spx_stream s);

/* ---- shape ------------------------------------------------------------ */

int spx_reshape(spx_array* out, spx_array a, const int* shape, int ndim,
                spx_stream s);
int spx_transpose(spx_array* out, spx_array a, const int* axes, int naxes,
                  spx_stream s);
int spx_expand_dims(spx_array* out, spx_array a, const int* axes, int naxes,
                    spx_stream s);
int spx_squeeze(spx_array* out, spx_array a, const int* axes, int naxes,
                spx_stream s);
int spx_broadcast_to(spx_array* out, spx_array a, const int* shape, int ndim,
                     spx_stream s);
int spx_contiguous(spx_array* out, spx_array a, spx_stream s);
int spx_pad(spx_array* out, spx_array a, const int* axes, const int* low,
            const int* high, int naxes, spx_array value, spx_stream s);
int spx_concatenate(spx_array* out, const spx_array* arrays, size_t n,
                    int axis, spx_stream s);
int spx_stack(spx_array* out, const spx_array* arrays, size_t n, int axis,
              spx_stream s);
/* Splits a at the given indices along axis into nidx+1 parts. */
int spx_split(spx_array* outs, spx_array a, const int* indices, int nidx,
              int axis, spx_stream s);

/* ---- indexing --------------------------------------------------------- */

int spx_slice(spx_array* out, spx_array a, const int* start, const int* stop,
              const int* strides, int ndim, spx_stream s);
int spx_slice_dynamic(spx_array* out, spx_array a, spx_array start,
                      const int* axes, int naxes, const int* sizes, int ndim,
                      spx_stream s);
int spx_slice_update(spx_array* out, spx_array src, spx_array update,
                     const int* start, const int* stop, const int* strides,
                     int ndim, spx_stream s);
int spx_slice_update_dynamic(spx_array* out, spx_array src, spx_array update,
                             spx_array start, const int* axes, int naxes,
                             spx_stream s);
int spx_take(spx_array* out, spx_array a, spx_array indices, int axis,
             spx_stream s);
int spx_take_along_axis(spx_array* out, spx_array a, spx_array indices,
                        int axis, spx_stream s);
int spx_put_along_axis(spx_array* out, spx_array a, spx_array indices,
                       spx_array values, int axis, spx_stream s);
int spx_scatter_add_axis(spx_array* out, spx_array a, spx_array indices,
                         spx_array values, int axis, spx_stream s);

/* ---- neural-network ops ----------------------------------------------- */

int spx_conv1d(spx_array* out, spx_array input, spx_array weight, int stride,
               int padding, int dilation, int groups, spx_stream s);
/* weight may be empty (weightless RMSNorm). */
int spx_rms_norm(spx_array* out, spx_array x, spx_array weight, float eps,
                 spx_stream s);
/* silu(a) ⊙ b (silu) or a ⊙ σ(b) as one vectorised node on the CPU in float32
   (operands of one shape); *out is left empty when the call is not the
   kernel's (another device or dtype, shapes that differ). */
int spx_sigmoid_mul_cpu(spx_array* out, spx_array a, spx_array b, bool silu, spx_stream s);
/* The softmax over x's last axis as one vectorised node on the CPU in
   float32, equal to the bit to MLX's; *out is left empty when the call is
   not the kernel's (another device or dtype, an empty last axis). */
int spx_softmax_cpu(spx_array* out, spx_array x, spx_stream s);
/* silu of the causal depthwise convolution of x [B, L+Kc-1, C] by w [Kc, C]
 * as one CPU node (act.cpp); out stays empty when the kernel does not serve
 * the call. */
int spx_conv_silu_cpu(spx_array* out, spx_array x, spx_array w, spx_stream s);
/* DFlash2's dynamic convolution of x [1, L, H] by w [1, L, K, G] and b [K, H]
 * as one CPU node (act.cpp); out stays empty when the kernel does not serve
 * the call. */
int spx_dynamic_conv_cpu(spx_array* out, spx_array x, spx_array w, spx_array b, spx_stream s);
/* The k largest entries of each row of x [rows, n] (float32, CPU), best
 * first with ties to the lower index: ids [rows, k] int32 and vals [rows, k]
 * float32 as one node (topk.cpp); both stay empty when the kernel does not
 * serve the call. */
int spx_topk_cpu(spx_array* ids, spx_array* vals, spx_array x, int k, spx_stream s);
/* DFlash2's greedy selector walk as one CPU node (float32): tokens [n]
 * (int32), one-hot probs [n, K] and each row's largest probability at
 * temperature 1 [n], from candidate ids [n, K] (int32), unary scores [n, K],
 * u [n, R], successor rows [n, K, R], the predecessor table [V, R] and the
 * anchor [1] (int32). Returns 0 with *tokens empty when the call is not the
 * kernel's (not the CPU, wrong dtypes or shapes). */
int spx_selector_walk_cpu(spx_array* tokens, spx_array* probs, spx_array* conf, spx_array ids,
                          spx_array unary, spx_array u, spx_array succ, spx_array table,
                          spx_array anchor, spx_stream s);
/* offset_array may be empty, then offset is used. */
int spx_rope(spx_array* out, spx_array x, int dims, bool traditional,
             float base, float scale, int offset, spx_array offset_array,
             spx_stream s);
/* mask_mode: "" or "causal"; mask may be empty; sinks may be empty.
   mlx_only: MLX's fast::scaled_dot_product_attention as it is (tests);
   otherwise float32 on the CPU takes MLX's composition with the vectorised
   softmax, and short half-precision GPU blocks spx_sdpa_composed. */
int spx_sdpa(spx_array* out, spx_array q, spx_array k, spx_array v,
             float scale, const char* mask_mode, spx_array mask,
             spx_array sinks, bool mlx_only, spx_stream s);
/* The same attention as matmuls and a softmax, on any device (spx_sdpa uses
 * it for short half-precision query blocks on the GPU; tests compare it with
 * MLX's kernels). No sinks. */
int spx_sdpa_composed(spx_array* out, spx_array q, spx_array k, spx_array v,
                      float scale, const char* mask_mode, spx_array mask,
                      spx_stream s);

/* ---- quantization ------------------------------------------------------ */

/* Quantizes w along its last axis (mode "affine", "mxfp4", "nvfp4" or
 * "mxfp8"). Writes the packed uint32 weight and the scales; *biases is left
 * empty by the modes that have none (all but affine). */
int spx_quantize(spx_array* wq, spx_array* scales, spx_array* biases,
                 spx_array w, int group_size, int bits, const char* mode,
                 spx_stream s);
/* biases may be empty; dtype < 0 keeps MLX's default (the scales' dtype). */
int spx_dequantize(spx_array* out, spx_array w, spx_array scales,
                   spx_array biases, int group_size, int bits,
                   const char* mode, int dtype, spx_stream s);
/* x · wᵀ (transpose) or x · w of a quantized w; biases may be empty. */
int spx_quantized_matmul(spx_array* out, spx_array x, spx_array w,
                         spx_array scales, spx_array biases, bool transpose,
                         int group_size, int bits, const char* mode,
                         spx_stream s);
/* Quantized matmul with matrix-level gather over stacked weights
 * [..., E, out, in/pack]; lhs_indices, rhs_indices and biases may be empty. */
int spx_gather_qmm(spx_array* out, spx_array x, spx_array w, spx_array scales,
                   spx_array biases, spx_array lhs_indices,
                   spx_array rhs_indices, bool transpose, int group_size,
                   int bits, const char* mode, bool sorted_indices,
                   spx_stream s);

/* Matmul with matrix-level gather (the dense counterpart of gather_qmm);
 * lhs_indices and rhs_indices may be empty. */
int spx_gather_mm(spx_array* out, spx_array a, spx_array b,
                  spx_array lhs_indices, spx_array rhs_indices,
                  bool sorted_indices, spx_stream s);

/* ---- compiled functions ------------------------------------------------ */

/* A function compiled by MLX (mx::compile) whose body is a Go function. */
typedef struct {
  void* ctx;
} spx_closure;

/* Compiles the Go function registered under fn (a cgo.Handle): MLX traces
 * it through spxGoTrace once per input signature and fuses its element-wise
 * chains. shapeless reuses one trace for every input shape. */
int spx_compile(spx_closure* out, uintptr_t fn, bool shapeless);

/* Calls a compiled function; at most cap outputs are written to outs and
 * their count to *nout. */
int spx_compiled_call(spx_array* outs, size_t cap, size_t* nout, spx_closure f,
                      const spx_array* inputs, size_t nin);

/* Drops a compiled function's cached traces; the next calls trace again
 * (worker thread only). */
void spx_compiled_reset(spx_closure f);

/* Frees a compiled function and its cached traces (worker thread only). */
void spx_compiled_free(spx_closure f);

/* For the Go side of a trace: append a to the trace's outputs, and record
 * why a trace failed. */
void spx_sink_push(void* sink, spx_array a);
void spx_set_error(const char* msg);

/* Writes to *out (malloc'd, freed by the caller) one line "name count" per
 * primitive among the pending nodes reachable from outputs: what the next
 * evaluation will run. */
int spx_graph_ops(char** out, const spx_array* outputs, size_t n);

/* ---- custom GPU kernels ------------------------------------------------ */

/* Runs the gated delta rule (spec/qwen35.md section 7) as one primitive on
 * the CPU stream s (gdn.cpp): q, k [1, L, Hk, Dk], v [1, L, Hv, Dv], alpha,
 * beta [1, L, Hv] and state [1, Hv, Dv, Dk], all float32, Hv a multiple of
 * Hk (value head h reads key head h / (Hv/Hk)). outs[0] receives the outputs
 * [1, L, Hv, Dv], outs[1 + i] the state after bounds[i] tokens (ascending,
 * within 1 … L), so outs holds nbounds + 1 handles. */
int spx_gated_delta_scan(spx_array* outs, spx_array q, spx_array k, spx_array v,
                         spx_array alpha, spx_array beta, spx_array state,
                         const int* bounds, size_t nbounds, spx_stream s);
/* A CUDA kernel that MLX compiles at run time (fast::cuda_kernel): the
 * function MLX returns for a name, source, header and input and output
 * names, kept so that a launch does not rebuild it (MLX scans the source for
 * each input's `<in>_shape` and copies every string when it does). */
typedef struct {
  void* fn;
} spx_cuda_fn;

/* Makes the kernel function. The source is the kernel body; MLX writes the
 * signature from the input and output names (inputs are `const T* name`,
 * outputs `T* name`; `<in>_shape`, `<in>_strides` and `<in>_ndim` in the
 * source also pass an input's shape, strides and rank). name is also the compiled module's name, which MLX caches by name
 * alone, in the process and on disk: it must change whenever the compiled
 * text would. With row_contiguous, MLX copies every input that is not
 * row-contiguous before the launch; without, inputs come as they are (a
 * view's data pointer; the kernel indexes them by <in>_strides). The
 * function lives as long as the process (a kernel is made once per input
 * dtypes and kept). */
int spx_cuda_fn_new(spx_cuda_fn* out, const char* name, const char* source,
                    const char* header, const char* const* input_names,
                    size_t nin, const char* const* output_names, size_t nout,
                    int row_contiguous);

/* Launches fn on inputs. out_shapes holds the output shapes back to back,
 * out_ndims their ranks. Template constants are ints (kind 0) or bools
 * (kind 1). grid counts threads, as in MLX. */
int spx_cuda_kernel(spx_array* outs, size_t nout, spx_cuda_fn fn,
                    const spx_array* inputs, size_t nin, const int* out_shapes,
                    const int* out_ndims, const int* out_dtypes, int gx, int gy,
                    int gz, int tx, int ty, int tz,
                    const char* const* tmpl_names, const int* tmpl_values,
                    const int* tmpl_kinds, size_t ntmpl, spx_stream s);

/* ---- distributed (dist.cpp) ------------------------------------------ */

/* A process group of MLX's distributed layer. */
typedef struct {
  void* ctx;
} spx_group;

/* Reports whether MLX can start backend ("ring", "nccl", "mpi", "jaccl" or
 * "any") in this process: the library has it and its environment is set. */
int spx_dist_is_available(bool* out, const char* backend);
/* Starts backend and returns the group of every process it finds; an error
 * when the backend cannot start (never a group of one in its place). */
int spx_dist_init(spx_group* out, const char* backend);
int spx_group_rank(int* out, spx_group g);
int spx_group_size(int* out, spx_group g);
int spx_group_free(spx_group g);
/* The element-wise sum of a over the group's processes (same shape). */
int spx_all_sum(spx_array* out, spx_array a, spx_group g);
/* The processes' a concatenated along axis 0, in rank order. */
int spx_all_gather(spx_array* out, spx_array a, spx_group g);

/* ---- random ----------------------------------------------------------- */

int spx_random_key(spx_array* out, uint64_t seed);
int spx_random_split(spx_array* out, spx_array key, int num, spx_stream s);
/* key may be empty (MLX's global generator). */
int spx_random_uniform(spx_array* out, const int* shape, int ndim, int dtype,
                       spx_array key, spx_stream s);
int spx_random_normal(spx_array* out, const int* shape, int ndim, int dtype,
                      float loc, float scale, spx_array key, spx_stream s);
int spx_random_categorical(spx_array* out, spx_array logits, int axis,
                           spx_array key, spx_stream s);

/* ---- safetensors through MLX's own loader ------------------------------ */

/* Loads lazily: arrays are read from the file when evaluated on stream s.
 * The result is an opaque map read with the accessors below and released
 * with spx_tensor_map_free. */
typedef struct {
  void* ctx;
} spx_tensor_map;
int spx_load_safetensors(spx_tensor_map* out, const char* path, spx_stream s);
int spx_tensor_map_size(size_t* out, spx_tensor_map m);
/* The i-th entry (in a stable order); *name stays valid until the map is
 * freed. */
int spx_tensor_map_get(const char** name, spx_array* arr, spx_tensor_map m,
                       size_t i);
int spx_tensor_map_free(spx_tensor_map m);
int spx_save_safetensors(const char* path, const char* const* names,
                         const spx_array* arrays, size_t n,
                         const char* const* meta_keys,
                         const char* const* meta_values, size_t nmeta);

/* ---- parts of stored tensors (part.cpp) -------------------------------- */

/* A safetensors file opened to read parts of its tensors (a rank of a
 * tensor-parallel model reads only its slices). The descriptor is shared by
 * the parts loaded from it and closed when the handle and the last of them
 * are freed. spx_tensor_file_free may be called on any thread. */
typedef struct {
  void* ctx;
} spx_tensor_file;
int spx_tensor_file_open(spx_tensor_file* out, const char* path);
int spx_tensor_file_free(spx_tensor_file f);
/* A lazy array of the given shape and safetensors dtype name ("BF16"),
 * read when evaluated on stream s by MLX's own Load primitive: blocks
 * blocks, block i starting at byte offset + i*stride of the file, and of
 * each block the nranges byte ranges [starts[j], starts[j] + lens[j]),
 * concatenated in order. Only those bytes are read. */
int spx_tensor_file_load(spx_array* out, spx_tensor_file f, const char* dtype,
                         const int* shape, int ndim, uint64_t offset,
                         uint64_t blocks, uint64_t stride,
                         const uint64_t* starts, const uint64_t* lens,
                         size_t nranges, spx_stream s);

#ifdef __cplusplus
}
#endif

#endif
