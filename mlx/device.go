package mlx

/*
#include "shim/shim.h"
*/
import "C"

import "fmt"

// Device is where ops run.
type Device int

// Devices.
const (
	CPU Device = C.SPX_CPU
	GPU Device = C.SPX_GPU
)

func (d Device) String() string {
	if d == GPU {
		return "gpu"
	}
	return "cpu"
}

// Version is the MLX library version.
func Version() string { return C.GoString(C.spx_version()) }

// BLAS names the library serving MLX's CPU matmuls: OpenBLAS when `make deps`
// unpacked it (or SPECULA_BLAS points at one), else the reference BLAS the
// mlx-cpu wheel bundles. Set SPECULA_BLAS=reference to force the latter. For
// OpenBLAS it also says how products are threaded: one thread below 2^28
// multiply-adds and every core above (a shared machine makes OpenBLAS's
// per-call thread join cost milliseconds), unless OPENBLAS_NUM_THREADS (or
// GOTO_NUM_THREADS, OMP_NUM_THREADS) fixes the count.
func BLAS() string { return C.GoString(C.spx_blas_name()) }

// lastBLASThreads is the thread count OpenBLAS had for the most recent CPU
// product (0 before the first one, or with another BLAS).
func lastBLASThreads() int { return int(C.spx_blas_last_threads()) }

// smallRowProducts counts the CPU products of few rows that the shim
// computed itself instead of the BLAS (shim/blas.cpp).
func smallRowProducts() int { return int(C.spx_blas_small_row_products()) }

// sharedProducts counts those of them whose columns the shim shared with its
// helper thread.
func sharedProducts() int { return int(C.spx_blas_shared_products()) }

// GPUAvailable reports whether this MLX build has a usable GPU backend.
func GPUAvailable() bool {
	mustWorker()
	return gpuAvailable
}

// CurrentDevice is the device new ops run on.
func CurrentDevice() Device {
	mustWorker()
	return device
}

// SetDevice makes d the device of new ops. The worker starts on the GPU when
// the build has one (CPU otherwise, or when SPECULA_DEVICE=cpu).
func SetDevice(d Device) error {
	mustWorker()
	return setDevice(d)
}

func setDevice(d Device) error {
	if d == GPU && !gpuAvailable {
		return fmt.Errorf("mlx: this MLX build has no GPU backend (MLX %s); use the CPU or run `MLX_BACKEND=cuda make deps`", Version())
	}
	s, err := deviceStream(d)
	if err != nil {
		return err
	}
	if err := status(C.spx_set_default_device(C.int(d))); err != nil {
		return err
	}
	defaultStream = s
	device = d
	return nil
}

// sharedStreams are the worker's streams per device when the submitter runs
// (submit.go): streams the submitter's thread may evaluate too.
var sharedStreams = map[Device]C.spx_stream{}

// deviceStream returns the stream new ops on d go to: the worker thread's
// default stream of d, or with the submitter a shared one, made once.
func deviceStream(d Device) (C.spx_stream, error) {
	var s C.spx_stream
	if !submitThreadOn {
		return s, status(C.spx_default_stream(&s, C.int(d)))
	}
	if s, ok := sharedStreams[d]; ok {
		// Default on this thread too (a replacement worker's is new).
		return s, status(C.spx_set_default_stream(s))
	}
	if err := status(C.spx_shared_stream(&s, C.int(d))); err != nil {
		return s, err
	}
	sharedStreams[d] = s
	return s, nil
}

// Synchronize waits for all work queued on the current stream.
func Synchronize() error {
	mustWorker()
	if sub != nil {
		// Whatever was handed to the submitter is queued first (submit.go).
		if err := sub.drain(); err != nil {
			return err
		}
	}
	return status(C.spx_synchronize(defaultStream))
}
