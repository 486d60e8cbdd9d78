package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/registry"
)

func init() {
	register(&command{name: "quantize", summary: "write an MLX-format (quantized) checkpoint from a Hugging Face one, as mlx_lm.convert -q does", run: runQuantize})
}

// mlxExporter is what quantize needs of an architecture: its tensors in
// MLX's layout (arch/qwen35, arch/dflash and arch/dflash2 provide it).
type mlxExporter interface {
	ExportMLX(tensors map[string]*mlx.Array) (*loader.MLXModel, error)
}

// runQuantize writes SRC (a Hugging Face checkpoint) to the new folder DST
// in MLX's layout, quantized unless --bits 0: what mlx_lm.convert -q
// writes for the same arguments (config.json with its quantization
// sections, model.safetensors with format = mlx and an index), plus the
// tokenizer files. The folder appears whole or not at all. Exit codes: 0
// written, 1 failure, 2 usage error.
func runQuantize(e *env, args []string) int {
	fs := newFlags(e, "quantize", "SRC DST [--bits 4] [--group-size 64] [--mode affine] [--dtype bfloat16]")
	bits := fs.Int("bits", 0, "bits per weight; 0 with --mode none writes an unquantized MLX checkpoint (default: the mode's, 4 for affine)")
	group := fs.Int("group-size", 0, "values sharing one scale (default: the mode's, 64 for affine)")
	mode := fs.String("mode", "affine", "quantization mode: affine (bits 2, 3, 4, 5, 6, 8; groups 32, 64, 128), mxfp4, nvfp4, mxfp8, or none")
	dtypeFlag := fs.String("dtype", "", "cast the unquantized tensors to float16, bfloat16 or float32 first (default: config.json's torch_dtype, as mlx_lm.convert does)")
	rest, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	usage := func(msg string) int {
		fmt.Fprintf(e.stderr, "specula quantize: %s\n", msg)
		fs.Usage()
		return exitUsage
	}
	if len(rest) != 2 {
		return usage("want SRC and DST folders")
	}
	var opts loader.MLXOptions
	if *dtypeFlag != "" {
		d, err := mlx.ParseDType(*dtypeFlag)
		if err != nil || !d.IsFloat() || d == mlx.Float64 {
			return usage(fmt.Sprintf("--dtype %q: want float16, bfloat16 or float32", *dtypeFlag))
		}
		opts.DType = d
	}
	if *mode != "none" {
		q, err := mlx.DefaultQuant(mlx.QuantMode(*mode))
		if err != nil {
			return usage("--mode: " + err.Error())
		}
		if *bits != 0 {
			q.Bits = *bits
		}
		if *group != 0 {
			q.GroupSize = *group
		}
		if err := q.Validate(); err != nil {
			return usage(err.Error())
		}
		opts.Quant = q
	} else if *bits != 0 || *group != 0 {
		return usage("--bits and --group-size need a quantization --mode")
	}

	src, dst := rest[0], filepath.Clean(rest[1])
	if _, err := os.Stat(dst); err == nil {
		return fail(e, "quantize", fmt.Errorf("%s already exists: choose a new folder (nothing is overwritten)", dst))
	} else if !errors.Is(err, os.ErrNotExist) {
		return fail(e, "quantize", err)
	}
	// The checkpoint is written inside a temporary folder beside DST and
	// renamed into place. Writing a shard cannot be cut short, so an
	// interrupted quantize may be ended by the signal watch: the folder is
	// registered for removal then.
	work, err := os.MkdirTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".quantize-")
	if err != nil {
		return fail(e, "quantize", err)
	}
	// Deferred calls run last first: the folder is removed before it is
	// forgotten, so a forced exit at any moment still finds it registered
	// (the other order left it behind when the second Ctrl-C came between
	// the two).
	defer removeOnForcedExit(work)()
	defer removeSettled(work)
	var summary string
	err = mlx.Do(e.ctx, func() error {
		var err error
		summary, err = quantize(src, filepath.Join(work, filepath.Base(dst)), dst, opts)
		return err
	})
	if err == nil {
		err = os.Rename(filepath.Join(work, filepath.Base(dst)), dst)
	}
	if err != nil {
		return fail(e, "quantize", err)
	}
	fmt.Fprintln(e.stdout, summary)
	return exitOK
}

// quantize does the work on the MLX worker, writing the checkpoint to out,
// and returns the summary line, which names the final folder dst.
func quantize(src, out, dst string, opts loader.MLXOptions) (string, error) {
	ck, err := loader.OpenCheckpoint(src)
	if err != nil {
		return "", err
	}
	defer ck.Close()
	if ck.Config == nil || ck.Config.Architecture == "" {
		return "", fmt.Errorf("%s: config.json is missing or has no architectures[0]", src)
	}
	abs, err := filepath.Abs(ck.Dir)
	if err != nil {
		return "", err
	}
	v, _, err := registry.Default.Build(ck.Config.Architecture, registry.Config{Dir: abs, JSON: ck.Config.Raw, DType: mlx.Float32})
	if err != nil {
		return "", err
	}
	ex, ok := v.(mlxExporter)
	if !ok {
		return "", fmt.Errorf("architecture %s cannot be written in MLX's layout (quantize supports Qwen3.5 targets and DFlash/DFlash2 drafts)", ck.Config.Architecture)
	}
	tensors, err := ck.Arrays()
	if err != nil {
		return "", err
	}
	m, err := ex.ExportMLX(tensors)
	if err != nil {
		return "", err
	}
	if err := loader.WriteMLX(out, ck, m, opts); err != nil {
		return "", err
	}
	what := "unquantized"
	if !opts.Quant.IsZero() {
		what = "quantized " + opts.Quant.String()
	}
	return fmt.Sprintf("wrote %s: %s in MLX's layout (%s), %d tensors", dst, ck.Config.Architecture, what, len(m.Tensors)), nil
}
