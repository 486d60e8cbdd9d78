package mlxtest

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef int (*nvrtc_create_fn)(void**, const char*, const char*, int, const char* const*, const char* const*);
typedef int (*nvrtc_compile_fn)(void*, int, const char* const*);
typedef int (*nvrtc_log_size_fn)(void*, size_t*);
typedef int (*nvrtc_log_fn)(void*, char*);
typedef int (*nvrtc_destroy_fn)(void**);

// spx_nvrtc_compile compiles src with the NVRTC library at lib and the
// given options. It returns NVRTC's result (0 for success), or -1 when the
// library or one of its functions could not be loaded (*log then holds
// dlerror's text), and the compiler's log in *log (malloc'd; the caller
// frees it).
static int spx_nvrtc_compile(const char* lib, const char* src, const char* const* opts, int nopts, char** log) {
	*log = NULL;
	void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char* e = dlerror();
		size_t n = 0;
		while (e && e[n]) n++;
		*log = malloc(n + 1);
		for (size_t i = 0; i < n; i++) (*log)[i] = e[i];
		(*log)[n] = 0;
		return -1;
	}
	nvrtc_create_fn create = (nvrtc_create_fn)dlsym(h, "nvrtcCreateProgram");
	nvrtc_compile_fn compile = (nvrtc_compile_fn)dlsym(h, "nvrtcCompileProgram");
	nvrtc_log_size_fn log_size = (nvrtc_log_size_fn)dlsym(h, "nvrtcGetProgramLogSize");
	nvrtc_log_fn get_log = (nvrtc_log_fn)dlsym(h, "nvrtcGetProgramLog");
	nvrtc_destroy_fn destroy = (nvrtc_destroy_fn)dlsym(h, "nvrtcDestroyProgram");
	if (!create || !compile || !log_size || !get_log || !destroy) {
		return -1;
	}
	void* prog = NULL;
	int rc = create(&prog, src, "kernel.cu", 0, NULL, NULL);
	if (rc != 0) {
		return rc;
	}
	rc = compile(prog, nopts, opts);
	size_t n = 0;
	if (log_size(prog, &n) == 0 && n > 0) {
		*log = malloc(n);
		if (get_log(prog, *log) != 0) {
			(*log)[0] = 0;
		}
	}
	destroy(&prog);
	return rc;
}
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/specula-dev/specula/mlx"
)

// nvrtcArch is the virtual architecture the kernels are compiled for: the
// H100's and H200's (sm_90), the GPUs they are written and measured on.
const nvrtcArch = "compute_90"

// nvrtcMachine is the same architecture's machine code, for ptxas's report
// of the registers a kernel uses.
const nvrtcMachine = "sm_90"

// nvrtcDir returns the folder that holds NVRTC and the CUDA headers
// (scripts/deps.sh with NVRTC=1 unpacks them into .deps/nvrtc): $SPECULA_NVRTC,
// else .deps/nvrtc of the module the test runs in.
func nvrtcDir() string {
	if d := os.Getenv("SPECULA_NVRTC"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, ".deps", "nvrtc")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// CompileCUDA compiles the CUDA kernel k, launched with inputs of the given
// dtypes and l's output dtypes and template constants, with NVRTC for the
// H100/H200 architecture: the check, on a machine without a GPU, that a
// kernel's source compiles as MLX will compile it (CUDASource). It fails
// the test with NVRTC's log when it does not. Without NVRTC (make test
// unpacks it; `NVRTC=1 scripts/deps.sh`) the test is skipped, unless
// SPECULA_REQUIRE_NVRTC=1 (as make test sets) makes that a failure.
//
// When l.Block is set, the kernel is compiled to the H100's and H200's
// machine code (sm_90) instead, and the test also fails when a block of
// that many threads needs more registers than an SM has: such a launch
// fails on the GPU ("too many resources requested for launch"), which the
// kernel's switch would quietly turn into its slower fallback.
func CompileCUDA(t testing.TB, k *mlx.CUDAKernel, inputs []mlx.DType, l mlx.KernelLaunch) {
	t.Helper()
	threads := l.Block[0] * max(l.Block[1], 1) * max(l.Block[2], 1)
	log := compileCUDA(t, k, inputs, l, threads > 0)
	if threads == 0 {
		return
	}
	regs, ok := registersUsed(log)
	if !ok {
		t.Fatalf("kernel %s: no register count in ptxas's report:\n%s", k.Name, log)
	}
	// Registers are handed to warps in units of 256 (8 a thread).
	if need := (regs + 7) / 8 * 8 * threads; need > registersPerSM {
		t.Fatalf("kernel %s (templates %v) uses %d registers a thread: a block of %d threads needs %d, more than the %d of an SM, so its launch would fail",
			k.Name, l.Templates, regs, threads, need, registersPerSM)
	}
}

// registersPerSM is the register file of an H100's or H200's SM (and of
// every GPU since compute capability 5.0): 64K 32-bit registers.
const registersPerSM = 65536

// registersUsed reads "Used N registers" from ptxas's verbose report.
func registersUsed(log string) (int, bool) {
	_, rest, ok := strings.Cut(log, "Used ")
	if !ok {
		return 0, false
	}
	var n int
	if _, err := fmt.Sscanf(rest, "%d registers", &n); err != nil {
		return 0, false
	}
	return n, true
}

// compileCUDA is CompileCUDA's compilation: to machine code with ptxas's
// report in the returned log when machine is set, else to PTX.
func compileCUDA(t testing.TB, k *mlx.CUDAKernel, inputs []mlx.DType, l mlx.KernelLaunch, machine bool) string {
	t.Helper()
	dir := nvrtcDir()
	lib := filepath.Join(dir, "cu13", "lib", "libnvrtc.so.13")
	if _, err := os.Stat(lib); err != nil {
		if os.Getenv("SPECULA_REQUIRE_NVRTC") == "1" {
			t.Fatalf("NVRTC is not at %s: run NVRTC=1 scripts/deps.sh", lib)
		}
		t.Skipf("NVRTC is not at %s (NVRTC=1 scripts/deps.sh unpacks it)", lib)
	}
	src := CUDASource(k, inputs, l)
	opts := []string{
		"--gpu-architecture=" + nvrtcArch, "--std=c++17", "--device-as-default-execution-space",
		"--include-path=" + filepath.Join(dir, "cu13", "include"),
	}
	if machine {
		opts[0] = "--gpu-architecture=" + nvrtcMachine
		opts = append(opts, "--ptxas-options=--verbose")
	}
	cOpts := make([]*C.char, len(opts))
	for i, o := range opts {
		cOpts[i] = C.CString(o)
		defer C.free(unsafe.Pointer(cOpts[i]))
	}
	cLib, cSrc := C.CString(lib), C.CString(src)
	defer C.free(unsafe.Pointer(cLib))
	defer C.free(unsafe.Pointer(cSrc))
	var cLog *C.char
	rc := C.spx_nvrtc_compile(cLib, cSrc, &cOpts[0], C.int(len(opts)), &cLog)
	log := ""
	if cLog != nil {
		log = C.GoString(cLog)
		C.free(unsafe.Pointer(cLog))
	}
	if rc != 0 {
		t.Fatalf("kernel %s (templates %v) does not compile (NVRTC result %d):\n%s\nsource:\n%s", k.Name, l.Templates, int(rc), log, numbered(src))
	}
	return log
}

// numbered prefixes each line of src with its number, as NVRTC's log
// counts them.
func numbered(src string) string {
	var b strings.Builder
	for i, line := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, line)
	}
	return b.String()
}

// cudaTypes are the CUDA element types MLX writes for each dtype.
var cudaTypes = map[mlx.DType]string{
	mlx.Bool: "bool", mlx.Int32: "int32_t", mlx.Float16: "__half", mlx.BFloat16: "__nv_bfloat16", mlx.Float32: "float",
}

// CUDASource is the text MLX's cuda_kernel compiles for k launched with
// inputs of these dtypes and l: its prelude (here a stand-in for MLX's
// device utilities: the half and bfloat16 headers and its Shape type; not
// cooperative groups, whose headers need CUDA's C++ library, and which no
// kernel of ours uses), the kernel's header, the signature MLX writes (each
// input `const T* name`, with `name_shape`, `name_strides` and `name_ndim`
// when the source mentions them; each output `T* name`), the template
// constants, and the body.
func CUDASource(k *mlx.CUDAKernel, inputs []mlx.DType, l mlx.KernelLaunch) string {
	var b strings.Builder
	b.WriteString("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n")
	b.WriteString("struct Shape { int d[10]; __device__ const int& operator[](int i) const { return d[i]; } };\n")
	b.WriteString("struct Strides { long long d[10]; __device__ const long long& operator[](int i) const { return d[i]; } };\n")
	b.WriteString(k.Header)
	b.WriteString("\nnamespace mlx::core::cu {\n__global__ void custom_kernel_" + k.CompiledName(inputs) + "(\n")
	var params []string
	for i, name := range k.Inputs {
		params = append(params, "    const "+cudaType(inputs[i])+"* "+name)
		if strings.Contains(k.Source, name+"_shape") {
			params = append(params, "    const __grid_constant__ Shape "+name+"_shape")
		}
		if strings.Contains(k.Source, name+"_strides") {
			params = append(params, "    const __grid_constant__ Strides "+name+"_strides")
		}
		if strings.Contains(k.Source, name+"_ndim") {
			params = append(params, "    const __grid_constant__ int "+name+"_ndim")
		}
	}
	for i, name := range k.Outputs {
		params = append(params, "    "+cudaType(l.OutputDTypes[i])+"* "+name)
	}
	b.WriteString(strings.Join(params, ",\n") + ") {\n")
	for _, tc := range l.Templates {
		if tc.Bool {
			fmt.Fprintf(&b, "  constexpr bool %s = %t;\n", tc.Name, tc.Value != 0)
		} else {
			fmt.Fprintf(&b, "  constexpr int %s = %d;\n", tc.Name, tc.Value)
		}
	}
	b.WriteString(k.Source)
	b.WriteString("\n}\n} // namespace mlx::core::cu\n")
	return b.String()
}

func cudaType(d mlx.DType) string {
	if s, ok := cudaTypes[d]; ok {
		return s
	}
	panic(fmt.Sprintf("mlxtest: no CUDA type for dtype %v", d))
}
