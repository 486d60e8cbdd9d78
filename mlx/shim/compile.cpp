// compile.cpp: functions compiled by MLX whose body is a Go function.
//
// MLX's compile traces a function once per signature of its inputs (shapes
// and dtypes), simplifies the graph and fuses chains of element-wise ops into
// single kernels. The function is Go code here: the traced body calls back
// into Go (spxGoTrace, exported by mlx/compile.go), which runs the Go
// function on the tracer arrays with the ordinary ops of this shim and
// pushes its outputs into the sink it was given.

#include <cstdlib>
#include <memory>
#include <unordered_set>

#include "mlx/compile_impl.h"
#include "mlx/primitives.h"

// Defined in Go (//export). It returns 0, or non-zero after storing the
// reason with spx_set_error.
extern "C" int spxGoTrace(uintptr_t fn, spx_array* inputs, size_t nin,
                          void* sink);

namespace {

using array_fn =
    std::function<std::vector<mx::array>(const std::vector<mx::array>&)>;

struct compiled {
  array_fn call;
};

// go_body adapts the Go function fn to MLX's function type.
array_fn go_body(uintptr_t fn) {
  return [fn](const std::vector<mx::array>& in) {
    // Tracer inputs are lent to Go as handles owned here.
    std::vector<std::unique_ptr<mx::array>> owned;
    std::vector<spx_array> handles;
    owned.reserve(in.size());
    handles.reserve(in.size());
    for (const auto& a : in) {
      owned.push_back(std::make_unique<mx::array>(a));
      handles.push_back(spx_array{owned.back().get()});
    }
    std::vector<mx::array> out;
    int rc = spxGoTrace(fn, handles.data(), handles.size(), &out);
    if (rc != 0) {
      throw std::runtime_error(last_error.empty()
                                   ? std::string("mlx: compiled Go function failed")
                                   : last_error);
    }
    return out;
  };
}

}  // namespace

extern "C" {

void spx_set_error(const char* msg) {
  set_error(msg);
}

void spx_sink_push(void* sink, spx_array a) {
  static_cast<std::vector<mx::array>*>(sink)->push_back(arr(a));
}

int spx_compile(spx_closure* out, uintptr_t fn, bool shapeless) {
  SPX_TRY
  auto* c = new compiled{};
  // The object's address is the compile-cache id: unique while it lives,
  // and erased from the cache when it is freed.
  c->call = mx::detail::compile(go_body(fn), reinterpret_cast<uintptr_t>(c),
                                shapeless);
  out->ctx = c;
  SPX_CATCH
}

int spx_compiled_call(spx_array* outs, size_t cap, size_t* nout, spx_closure f,
                      const spx_array* inputs, size_t nin) {
  SPX_TRY
  if (f.ctx == nullptr) {
    throw std::invalid_argument("mlx shim: empty compiled function handle");
  }
  auto result = static_cast<compiled*>(f.ctx)->call(arrays(inputs, nin));
  if (result.size() > cap) {
    throw std::runtime_error("compiled function returned " +
                             std::to_string(result.size()) +
                             " outputs, more than the " + std::to_string(cap) +
                             " expected");
  }
  *nout = result.size();
  for (size_t i = 0; i < result.size(); i++) {
    assign(&outs[i], std::move(result[i]));
  }
  SPX_CATCH
}

void spx_compiled_reset(spx_closure f) {
  if (f.ctx == nullptr) {
    return;
  }
  try {
    mx::detail::compile_erase(mx::detail::compile_cache(),
                              reinterpret_cast<uintptr_t>(f.ctx));
  } catch (...) {
    // Erasing only frees cached traces early; failing to is harmless.
  }
}

void spx_compiled_free(spx_closure f) {
  if (f.ctx == nullptr) {
    return;
  }
  spx_compiled_reset(f);
  delete static_cast<compiled*>(f.ctx);
}

}  // extern "C"

// ---- graph statistics ------------------------------------------------------

extern "C" int spx_graph_ops(char** out, const spx_array* outputs, size_t n) {
  SPX_TRY
  // Count the pending (unevaluated) nodes reachable from outputs by
  // primitive name; siblings (the outputs of one multi-output primitive)
  // are one node.
  std::map<std::string, int> counts;
  std::unordered_set<std::uintptr_t> seen;
  std::vector<mx::array> stack;
  for (size_t i = 0; i < n; i++) {
    stack.push_back(arr(outputs[i]));
  }
  while (!stack.empty()) {
    mx::array a = std::move(stack.back());
    stack.pop_back();
    if (!a.has_primitive() || a.is_available()) {
      continue;
    }
    if (!seen.insert(a.id()).second) {
      continue;
    }
    for (const auto& s : a.siblings()) {
      seen.insert(s.id());
    }
    counts[a.primitive().name()]++;
    for (const auto& in : a.inputs()) {
      stack.push_back(in);
    }
  }
  std::string text;
  for (const auto& [name, count] : counts) {
    text += name + " " + std::to_string(count) + "\n";
  }
  *out = static_cast<char*>(std::malloc(text.size() + 1));
  std::memcpy(*out, text.c_str(), text.size() + 1);
  SPX_CATCH
}
