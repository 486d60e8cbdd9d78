package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/specula-dev/specula/loader"
)

func init() {
	register(&command{name: "inspect", summary: "list the tensors of a .safetensors file, index or checkpoint folder", run: runInspect})
}

// runInspect validates PATH with package loader and prints what it holds:
// every tensor, totals by dtype, metadata and, for a checkpoint folder, the
// architecture and the generation and tokenizer files found.
func runInspect(e *env, args []string) int {
	fs := newFlags(e, "inspect", "[--json] PATH   (a .safetensors file, an index.json, or a checkpoint folder)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintln(e.stderr, "specula inspect: want exactly one PATH")
		fs.Usage()
		return exitUsage
	}
	r, err := inspect(pos[0])
	if err != nil {
		if *asJSON {
			// As check does: a script reads the verdict from stdout.
			failed := struct {
				Path  string `json:"path"`
				OK    bool   `json:"ok"`
				Error string `json:"error"`
			}{pos[0], false, err.Error()}
			if code := writeReportJSON(e, "inspect", failed); code != exitOK {
				return code
			}
		}
		return fail(e, "inspect", err)
	}
	if *asJSON {
		r.OK = true
		return writeReportJSON(e, "inspect", r)
	}
	r.writeText(e.stdout)
	return exitOK
}

// inspectReport is what inspect shows; its JSON form is the --json output.
type inspectReport struct {
	Path string `json:"path"`
	// OK is true: a path that cannot be inspected gives {"path", "ok":
	// false, "error"} instead.
	OK     bool           `json:"ok"`
	Kind   string         `json:"kind"`            // "file" or "checkpoint"
	Index  string         `json:"index,omitempty"` // the index file, for a sharded checkpoint
	Config *inspectConfig `json:"config,omitempty"`
	// Layout is how the checkpoint stores its weights: MLX format,
	// quantization, and each group of layers dense or quantized.
	Layout *loader.Layout    `json:"layout,omitempty"`
	Files  map[string]string `json:"files,omitempty"` // recognised non-weight files found: role -> file name
	Shards []inspectShard    `json:"shards"`
	// Tensors are in file order, shard by shard.
	Tensors []inspectTensor `json:"tensors"`
	Totals  []inspectTotal  `json:"totals"` // by dtype, in dtype order
	Total   inspectTotal    `json:"total"`
}

type inspectConfig struct {
	Architecture string `json:"architecture"`
	ModelType    string `json:"model_type"`
}

type inspectShard struct {
	File     string            `json:"file"`
	Bytes    int64             `json:"bytes"`
	Tensors  int               `json:"tensors"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

type inspectTensor struct {
	Name   string   `json:"name"`
	DType  string   `json:"dtype"`
	Shape  []uint64 `json:"shape"`
	Bytes  int64    `json:"bytes"`
	Offset int64    `json:"offset"`
	File   string   `json:"file"`
}

type inspectTotal struct {
	DType string `json:"dtype,omitempty"`
	Count int    `json:"count"`
	Bytes int64  `json:"bytes"`
}

// inspect opens path as a checkpoint (a folder or an index file) or as a
// single safetensors file, and summarises it.
func inspect(path string) (*inspectReport, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	r := &inspectReport{Path: path}
	var tensors []loader.TensorInfo
	var shards []*loader.File
	dir := filepath.Dir(path)
	if st.IsDir() || strings.HasSuffix(path, ".index.json") {
		c, err := loader.OpenCheckpoint(path)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		r.Kind, dir, tensors, shards = "checkpoint", c.Dir, c.Tensors(), c.Shards()
		if c.Index != "" {
			r.Index = filepath.Base(c.Index)
		}
		if c.Config != nil {
			r.Config = &inspectConfig{Architecture: c.Config.Architecture, ModelType: c.Config.ModelType}
		}
		if r.Layout, err = c.Layout(); err != nil {
			return nil, err
		}
		r.Files = map[string]string{}
		for role, p := range map[string]string{
			"generation_config": c.Files.GenerationConfig, "tokenizer": c.Files.Tokenizer,
			"tokenizer_config": c.Files.TokenizerConfig, "special_tokens_map": c.Files.SpecialTokensMap,
			"vocab": c.Files.Vocab, "merges": c.Files.Merges, "chat_template": c.Files.ChatTemplate,
		} {
			if p != "" {
				r.Files[role] = filepath.Base(p)
			}
		}
	} else {
		f, err := loader.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r.Kind, tensors, shards = "file", f.Tensors(), []*loader.File{f}
	}

	rel := func(p string) string {
		if q, err := filepath.Rel(dir, p); err == nil {
			return q
		}
		return p
	}
	counts := map[string]int{}
	for _, f := range shards {
		counts[f.Path()] = 0
	}
	byDType := map[loader.DType]*inspectTotal{}
	r.Tensors = []inspectTensor{}
	for _, t := range tensors {
		r.Tensors = append(r.Tensors, inspectTensor{Name: t.Name, DType: t.DType.String(), Shape: t.Shape,
			Bytes: t.Size, Offset: t.Offset, File: rel(t.Path)})
		counts[t.Path]++
		tot := byDType[t.DType]
		if tot == nil {
			tot = &inspectTotal{DType: t.DType.String()}
			byDType[t.DType] = tot
		}
		tot.Count++
		tot.Bytes += t.Size
		r.Total.Count++
		r.Total.Bytes += t.Size
	}
	r.Totals = []inspectTotal{}
	for _, d := range slices.Sorted(maps.Keys(byDType)) {
		r.Totals = append(r.Totals, *byDType[d])
	}
	for _, f := range shards {
		r.Shards = append(r.Shards, inspectShard{File: rel(f.Path()), Bytes: f.Size(), Tensors: counts[f.Path()], Metadata: f.Metadata()})
	}
	return r, nil
}

// writeText prints the report as a header block and two tables.
func (r *inspectReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "path: %s\n", r.Path)
	switch {
	case r.Kind == "file":
		fmt.Fprintln(w, "kind: safetensors file")
	case r.Index != "":
		fmt.Fprintf(w, "kind: checkpoint folder, %d shards listed by %s\n", len(r.Shards), r.Index)
	default:
		fmt.Fprintln(w, "kind: checkpoint folder, single model.safetensors")
	}
	if r.Kind == "checkpoint" {
		if r.Config != nil {
			fmt.Fprintf(w, "architecture: %s (model_type %s)\n", orDash(r.Config.Architecture), orDash(r.Config.ModelType))
		} else {
			fmt.Fprintln(w, "architecture: - (no config.json)")
		}
		var found []string
		for _, role := range slices.Sorted(maps.Keys(r.Files)) {
			found = append(found, r.Files[role])
		}
		fmt.Fprintf(w, "generation and tokenizer files: %s\n", orDash(strings.Join(found, ", ")))
		if l := r.Layout; l != nil {
			format := "Hugging Face (no format = mlx metadata)"
			if l.Format == "mlx" {
				format = "MLX (format = mlx)"
			}
			fmt.Fprintf(w, "layout: %s; quantization: %s\n", format, orDash(l.Quantization))
			for _, g := range l.Groups {
				fmt.Fprintf(w, "  %s (%d): %s\n", g.Pattern, g.Count, g.Storage)
			}
		}
	}
	for _, s := range r.Shards {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(s.Metadata)) {
			kv = append(kv, k+"="+s.Metadata[k])
		}
		fmt.Fprintf(w, "file %s: %d bytes, %d tensors, metadata: %s\n", s.File, s.Bytes, s.Tensors, orDash(strings.Join(kv, " ")))
	}

	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	sharded := len(r.Shards) > 1
	fmt.Fprint(tw, "NAME\tDTYPE\tSHAPE\tBYTES")
	if sharded {
		fmt.Fprint(tw, "\tFILE")
	}
	fmt.Fprintln(tw)
	for _, t := range r.Tensors {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d", t.Name, t.DType, shapeString(t.Shape), t.Bytes)
		if sharded {
			fmt.Fprintf(tw, "\t%s", t.File)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DTYPE\tTENSORS\tBYTES")
	for _, t := range r.Totals {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", t.DType, t.Count, t.Bytes)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\n", r.Total.Count, r.Total.Bytes)
	tw.Flush()
}

func shapeString(s []uint64) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
