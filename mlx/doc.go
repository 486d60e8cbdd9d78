// Package mlx binds MLX, Apple's array framework, through cgo and a small C
// shim (mlx/shim) over MLX's C++ API, as shipped in its Linux wheels
// (mlx-cpu, mlx-cuda-13).
//
// # Threads
//
// MLX keeps streams per OS thread, so all MLX work runs on one worker
// goroutine locked to its thread. Do and Call run a function there from any
// goroutine; every other function of this package must be called from inside
// such a function and panics otherwise (the panic message names the rule).
// With SPECULA_SUBMIT_THREAD=1 (experimental) evaluations are submitted from
// a second thread while the worker builds on (submit.go); the rule for
// callers is the same.
//
// # Errors
//
// MLX errors never end the process. An op that fails (shape mismatch, bad
// dtype) records the first error in the current scope and returns an empty
// array; ops on empty arrays return empty arrays; the next Eval, or the end of
// the Do call, returns the error. Errors raised while evaluating (allocation
// failures, CPU-stream errors) are returned by Eval. Panics are reserved for
// programmer errors: calling off the worker, passing nil where an array is
// required, using a freed array.
//
// # Lifetimes
//
// Arrays belong to the scope that created them (each Do or Call opens one;
// Scope nests one). When a scope ends, or on Sweep, its unpinned arrays are
// freed. Pin keeps arrays (weights, cache state) alive until Unpin or Free.
// Finalizers are never used.
//
// # Evaluation
//
// Ops are lazy. Eval runs the graph; AsyncEval starts it and returns. Reading
// values (Float32s, Int32s, Bytes) evaluates, makes the array contiguous and
// copies it out: keep reads to small arrays (token ids, probabilities).
package mlx
