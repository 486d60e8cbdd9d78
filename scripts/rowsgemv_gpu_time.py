"""GPU time of the few-row product kernel (nn.rowsGEMV) against cuBLAS, on one NVIDIA GPU.

The kernel's CUDA text is read from arch/nn/rowsgemv.go, wrapped in the signature MLX gives a
custom kernel (pointers and shapes) and compiled with NVRTC for sm_90; cuBLAS runs through
torch. Both are timed with CUDA events over back-to-back launches, each on its own copy of the
weights out of >= 1.2 GB of them, so the weights stream from memory, not from L2. What this
leaves out is everything MLX adds around a product (graph capture, per-node host work): the
specula bench measures that. Products shorter than the host's launch interval (~10-25 us from
Python, small projections) are timed at the launch rate, not the GPU's, unless --graph records
the launches into a CUDA graph first and times its replays.

Run on a GPU machine with torch (and the CUDA toolkit's NVRTC, or torch's):
  python3 scripts/rowsgemv_gpu_time.py --rows 8 --launch 8x2 --launch 16x2 [--graph]
prints, per Qwen3.5 4B and 27B projection shape, microseconds and GB/s of weights.
"""
import argparse
import ctypes
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Projection shapes (K inputs -> N outputs) as specula fuses them.
SHAPES = [
    ('27B in', 5120, 16480), ('27B attention in', 5120, 14336), ('27B out', 6144, 5120),
    ('27B MLP in', 5120, 34816), ('27B down', 17408, 5120), ('27B head', 5120, 248320),
    ('27B k/v', 5120, 1024), ('27B b/a', 5120, 96),
    ('4B in', 2560, 12352), ('4B attention in', 2560, 10240), ('4B out', 4096, 2560),
    ('4B MLP in', 2560, 18432), ('4B down', 9216, 2560), ('4B head', 2560, 248320),
]


def first(patterns):
    for p in patterns:
        hits = sorted(glob.glob(p, recursive=True))
        if hits:
            return hits[0]
    raise SystemExit('not found: %s' % patterns[-1])


def kernel_text(path, var='rowsGEMVKernel'):
    """The Header and Source of a Go mlx.CUDAKernel literal."""
    src = open(path).read()
    i = src.index('var %s = &mlx.CUDAKernel{' % var)
    block = src[i:src.index('\n}\n', src.index('Source:', i))]
    field = lambda name: re.search(name + r':\s*`(.*?)`', block, re.S).group(1)
    return field('Header'), field('Source')


def wrap(header, body, consts):
    """The kernel as MLX would declare it: inputs x, w with their shapes, output y."""
    s = '#include <cuda_bf16.h>\n'
    s += 'struct Shape { int d[8]; __device__ const int& operator[](int i) const { return d[i]; } };\n'
    s += header + '\nextern "C" __global__ void k(const __nv_bfloat16* x, const __grid_constant__ Shape x_shape, '
    s += 'const __nv_bfloat16* w, const __grid_constant__ Shape w_shape, __nv_bfloat16* y) {\n'
    s += ''.join('  constexpr int %s = %d;\n' % kv for kv in consts.items())
    return s + body + '\n}\n'


class NVRTC:
    def __init__(self):
        self.lib = ctypes.CDLL(first(['/usr/local/cuda/lib64/libnvrtc.so*', '/usr/local/lib/python3*/*-packages/nvidia/*/lib/libnvrtc.so*',
                                      '/**/site-packages/nvidia/*/lib/libnvrtc.so*']))
        self.include = os.path.dirname(first(['/usr/local/cuda/include/cuda_bf16.h', '/**/site-packages/nvidia/*/include/cuda_bf16.h']))

    def cubin(self, text):
        """Compiles text for sm_90: the cubin and the registers a thread uses."""
        lib, prog = self.lib, ctypes.c_void_p()
        if lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), b'k.cu', 0, None, None):
            raise SystemExit('nvrtcCreateProgram failed')
        opts = [b'--gpu-architecture=sm_90', b'-I' + self.include.encode(), b'--std=c++17', b'-Xptxas', b'-v']
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, log)
        log = log.value.decode()
        if rc:
            raise SystemExit('the kernel does not compile:\n' + log)
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
        out = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetCUBIN(prog, out)
        regs = re.search(r'Used (\d+) registers', log)
        return out.raw, int(regs.group(1)) if regs else -1


class Shape(ctypes.Structure):
    _fields_ = [('d', ctypes.c_int * 8)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--rows', type=int, default=8, help='rows of x (1-17)')
    ap.add_argument('--launch', action='append', default=[], help='WARPSxU launch shape, repeatable (default 8x2 and 16x2)')
    ap.add_argument('--source', default=os.path.join(ROOT, 'arch', 'nn', 'rowsgemv.go'))
    ap.add_argument('--compile-only', action='store_true', help='compile and print registers; no GPU needed')
    ap.add_argument('--graph', action='store_true', help='time replays of a CUDA graph of the launches (no host launch cost)')
    a = ap.parse_args()
    if not 1 <= a.rows <= 17:
        raise SystemExit('--rows must be 1 to 17, not %d' % a.rows)
    launches = [tuple(int(v) for v in s.split('x')) for s in (a.launch or ['8x2', '16x2'])]
    nvrtc = NVRTC()
    header, body = kernel_text(a.source)
    built = []
    for warps, unroll in launches:
        cubin, regs = nvrtc.cubin(wrap(header, body, {'NT': (a.rows + 7) // 8, 'WARPS': warps, 'U': unroll}))
        built.append(('kernel %dx%d' % (warps, unroll), warps, cubin, regs))
        print('kernel %dx%d: %d registers a thread' % (warps, unroll, regs), flush=True)
    if a.compile_only:
        return
    import torch
    cuda = ctypes.CDLL('libcuda.so.1')
    torch.zeros(1, device='cuda')  # the primary context, current on this thread
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print('%s, %d SMs, %d rows' % (torch.cuda.get_device_name(0), sms, a.rows), flush=True)
    funcs = []
    for name, warps, cubin, regs in built:
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        if cuda.cuModuleLoadData(ctypes.byref(mod), cubin) or cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b'k'):
            raise SystemExit('cannot load ' + name)
        per_sm = ctypes.c_int()
        cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(per_sm), fn, 32 * warps, ctypes.c_size_t(0))
        funcs.append((name, warps, fn, regs, per_sm.value))

    def median_us(call, copies, reps=40, rounds=5):
        for i in range(3):
            call(i % copies)
        torch.cuda.synchronize()
        run = lambda: [call(i % copies) for i in range(reps)]
        if a.graph:
            # Inside the capture torch's current stream is the capturing one,
            # which call() launches on.
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                run()
            run = graph.replay
            run()
        times = []
        for _ in range(rounds):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / reps)
        return sorted(times)[rounds // 2]

    for label, K, N in SHAPES:
        nbytes = 2 * N * K
        copies = max(4, int(1.2e9 // nbytes))
        gen = torch.Generator(device='cuda').manual_seed(1)
        ws = [(torch.randn(N, K, device='cuda', generator=gen) * 0.05).to(torch.bfloat16) for _ in range(copies)]
        x = torch.randn(a.rows, K, device='cuda', generator=gen).to(torch.bfloat16)
        ref = x.float() @ ws[0].float().T
        scale = ref.abs().max().item()
        print('\n%s: K %d -> N %d, %.1f MB of weights' % (label, K, N, nbytes / 1e6))
        us = median_us(lambda i: torch.nn.functional.linear(x, ws[i]), copies)
        print('  %-14s %8.1f us %6.0f GB/s' % ('cuBLAS', us, nbytes / us / 1e3))
        y = torch.empty(a.rows, N, device='cuda', dtype=torch.bfloat16)
        for name, warps, fn, regs, per_sm in funcs:
            blocks = (N + 15) // 16
            # One argument block per weight copy, kept alive while launched.
            keep = []
            for w in ws:
                vals = [ctypes.c_void_p(x.data_ptr()), Shape((ctypes.c_int * 8)(a.rows, K)), ctypes.c_void_p(w.data_ptr()),
                        Shape((ctypes.c_int * 8)(N, K)), ctypes.c_void_p(y.data_ptr())]
                keep.append((vals, (ctypes.c_void_p * 5)(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])))

            def launch(i):
                stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
                rc = cuda.cuLaunchKernel(fn, blocks, 1, 1, 32 * warps, 1, 1, 0, stream, keep[i][1], None)
                if rc:
                    raise SystemExit('%s: launch failed (CUDA error %d)' % (name, rc))
            us = median_us(launch, copies)
            launch(0)
            torch.cuda.synchronize()
            err = (y.float() - ref).abs().max().item() / scale
            waves = blocks / (per_sm * sms) if per_sm else float('inf')
            print('  %-14s %8.1f us %6.0f GB/s  max error %.1e of the largest output; %d registers, %d blocks, %d a SM: %.2f waves'
                  % (name, us, nbytes / us / 1e3, err, regs, blocks, per_sm, waves), flush=True)
        del ws
        torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
