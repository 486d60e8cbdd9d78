//go:build cgotraceback

package mlx

/*
#include <stdint.h>
#include <unwind.h>

// The argument the Go runtime passes to a cgo traceback function
// (runtime.SetCgoTraceback).
struct spx_traceback_arg {
	uintptr_t context;
	uintptr_t sig_context;
	uintptr_t* buf;
	uintptr_t max;
};

struct spx_unwind_state {
	uintptr_t* buf;
	uintptr_t max;
	uintptr_t n;
	int seen_signal_frame;
};

static _Unwind_Reason_Code spx_unwind_step(struct _Unwind_Context* ctx, void* arg) {
	struct spx_unwind_state* s = (struct spx_unwind_state*)arg;
	int before = 0;
	uintptr_t pc = _Unwind_GetIPInfo(ctx, &before);
	if (pc == 0 || s->n >= s->max) {
		return _URC_END_OF_STACK;
	}
	// The unwind starts in the profiling signal's handler: its frames end
	// at the signal frame, after which come the interrupted code's.
	if (!s->seen_signal_frame) {
		if (before) {
			s->seen_signal_frame = 1;
			s->buf[s->n++] = pc;
		}
		return _URC_NO_REASON;
	}
	// Return addresses, pointing after each call (scripts/pprof-cgo.py
	// names the byte before).
	s->buf[s->n++] = pc;
	return _URC_NO_REASON;
}

static void spx_cgo_traceback(void* p) {
	struct spx_traceback_arg* a = (struct spx_traceback_arg*)p;
	struct spx_unwind_state s = {a->buf, a->max, 0, a->sig_context == 0};
	if (a->context != 0) {
		// Called for a Go stack's cgo frames, not from the signal: nothing
		// to add (no context function is registered).
		a->buf[0] = 0;
		return;
	}
	_Unwind_Backtrace(spx_unwind_step, &s);
	if (s.n < s.max) {
		a->buf[s.n] = 0;
	}
}

static void* spx_cgo_traceback_fn(void) { return (void*)spx_cgo_traceback; }
*/
import "C"

import "runtime"

// With the cgotraceback build tag (go build -tags cgotraceback), a Go CPU
// profile (specula bench --cpuprofile) also records the C and C++ frames
// under each cgo call: where MLX spends the host's time building and
// submitting a graph, which a plain profile shows only as the cgo call
// that entered it. The frames are unwound with libgcc's unwinder inside
// the profiling signal's handler, which is not async-signal-safe in every
// case (a signal that lands while the dynamic loader holds its lock can
// deadlock), so it is a measuring build, not the default. `go tool pprof`
// leaves the frames as bare addresses in the shared libraries the
// profile's mappings name; scripts/pprof-cgo.py names them (with
// --libdir for a profile taken on another machine).
func init() {
	runtime.SetCgoTraceback(0, C.spx_cgo_traceback_fn(), nil, nil)
}
