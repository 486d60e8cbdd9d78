# specula: `make test` and `make demo` do all set-up on a fresh machine.
#
#   make deps      fetch and unpack the pinned MLX wheel into .deps/ (idempotent;
#                  every other target runs it first)
#   make build     build bin: build/specula
#   make test      gofmt check, go vet, all tests, short fuzz runs
#   make demo      plain vs DFlash vs DFlash2 on the trained go-tiny family in
#                  models/go-tiny (DEMO_ARGS=--random: the random-weight demo)
#   make bench     Go benchmarks
#   make install PREFIX=/opt/specula
#                  the program, its MLX (and OpenBLAS, CUDA) libraries found
#                  relative to it, example plugins, manifests and models/:
#                  runs after the checkout is moved or deleted (docs/install.md)
#   make test-install
#                  install into a temporary folder and run it there with the
#                  checkout hidden (part of make test)
#   make bundle [PART_SIZE=50M]
#                  an offline bundle in build/bundle/: the install as an xz
#                  archive (or parts), SHA256SUMS, install-bundle.sh
#
# MLX_BACKEND=cuda make deps switches .deps/ to the mlx-cuda-13 wheel and the
# nvidia-* runtime wheels it needs (CUDA_RUNTIME=system: this machine's CUDA 13
# libraries instead, e.g. PyTorch's); MLX_BACKEND=cpu switches back. Later
# targets keep whichever backend .deps/ holds. docs/install.md has the details.

GO        ?= go
FUZZTIME  ?= 10s
GOFILES    = $(shell find . -name '*.go' -not -path './.deps/*' -not -path './build/*')

.PHONY: all deps build test vet fmt-check fuzz-short demo bench clean install test-install bundle train-smoke

PREFIX    ?= /usr/local

all: build

deps:
	@./scripts/deps.sh
	@./scripts/shim-stamp.sh
	@./scripts/fetch-tokenizer.sh

build: deps
	$(GO) build -o build/specula ./cmd/specula

fmt-check:
	@out="$$(gofmt -l $(GOFILES))"; \
	if [ -n "$$out" ]; then echo "gofmt would change these files:"; echo "$$out"; exit 1; fi

vet: deps
	$(GO) vet ./...
	$(GO) vet -tags cgotraceback ./mlx

# The cgotraceback build (C++ frames in CPU profiles, mlx/cgotraceback.go)
# is a measuring build; its test runs here so it keeps working. NVRTC=1
# unpacks NVRTC and CUDA's headers into .deps/nvrtc, with which the
# TestKernelsCompile tests compile every CUDA kernel without a GPU; here
# they must not skip.
test: deps fmt-check vet
	@NVRTC=1 ./scripts/deps.sh
	SPECULA_REQUIRE_NVRTC=1 $(GO) test ./...
	$(GO) test -tags cgotraceback -run CgoTraceback ./mlx
	@$(MAKE) --no-print-directory fuzz-short
	@$(MAKE) --no-print-directory test-install
	@$(MAKE) --no-print-directory train-smoke

# The training recipe at its smoke preset on the CPU, every stage, plus the
# PyTorch-side parity checks (scripts/train-smoke.sh; its Python environment
# goes to .deps/train-venv).
train-smoke:
	@./scripts/train-smoke.sh

install: deps
	@GO=$(GO) ./scripts/install.sh "$(PREFIX)"

test-install: deps
	@GO=$(GO) ./scripts/test-install.sh

bundle: deps
	@GO=$(GO) ./scripts/bundle.sh

# Short fuzz runs of every parser that reads files (longer: FUZZTIME=5m).
fuzz-short: deps
	@for spec in $$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./.deps' | sort); do \
	  pkg="./$$(dirname $${spec#./})"; \
	  for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$spec); do \
	    echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
	    log=$$(mktemp); \
	    if ! $(GO) test $$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) >$$log 2>&1; then \
	      echo "fuzzing $$fn in $$pkg failed:"; cat $$log; \
	      echo "running it again (a crasher the fuzzer found is now in testdata/fuzz and fails again):"; \
	      $(GO) test $$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) || { rm -f $$log; exit 1; }; \
	      echo "warning: $$fn passed on the rerun; the failure above did not reproduce (a fuzz worker lost under load?)"; \
	    fi; \
	    rm -f $$log; \
	  done; \
	done

demo: build
	./build/specula demo $(DEMO_ARGS)

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 3x ./...

clean:
	rm -rf build

# Example plugins into build/plugins/, named as spec/plugins.md says
# (specula-plugin-<name>_v<version>_x1.0_<os>_<arch>), each with _SHA256SUM.
.PHONY: plugins
plugins: deps
	@mkdir -p build/plugins
	@for dir in plugins/examples/*/; do \
	  name=$$(basename $$dir); \
	  ver=$$(sed -n 's/^const version = "\(.*\)"/\1/p' $$dir/main.go); \
	  out="build/plugins/specula-plugin-$${name}_v$${ver}_x1.0_$$($(GO) env GOOS)_$$($(GO) env GOARCH)"; \
	  $(GO) build -o "$$out" "./$$dir" || exit 1; \
	  chmod go-w "$$out"; \
	  sha256sum "$$out" | cut -d' ' -f1 > "$${out}_SHA256SUM"; \
	  echo "built $$out"; \
	done
