package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
)

func init() {
	register(&command{name: "compare", summary: "compare the tensors of two safetensors files (bring-up)", run: runCompare})
}

// runCompare compares the tensors two safetensors files share, B being the
// reference: per tensor the maximum absolute error max|a−b| and the maximum
// relative error max|a−b|/|b| (over elements with b ≠ 0; infinite where
// b = 0 and a ≠ 0). A tensor is within tolerance when every element has
// |a−b| <= atol + rtol·|b| (NumPy's allclose) and the shapes agree. Tensors
// present in only one file are listed and do not fail the comparison.
// Exit codes: 0 all within tolerance, 1 some are not (or nothing is shared,
// or a file cannot be read), 2 usage error.
func runCompare(e *env, args []string) int {
	fs := newFlags(e, "compare", "A.safetensors B.safetensors [--rtol 1e-5] [--atol 1e-6] [--json]")
	rtol := fs.Float64("rtol", 1e-5, "relative tolerance (times |b|)")
	atol := fs.Float64("atol", 1e-6, "absolute tolerance")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	rest, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if len(rest) != 2 {
		fmt.Fprintln(e.stderr, "specula compare: want two files, A and B (the reference)")
		fs.Usage()
		return exitUsage
	}
	if *rtol < 0 || *atol < 0 || math.IsNaN(*rtol) || math.IsNaN(*atol) {
		fmt.Fprintln(e.stderr, "specula compare: --rtol and --atol must be non-negative")
		return exitUsage
	}
	rep := compareReport{A: rest[0], B: rest[1], RTol: *rtol, ATol: *atol, OnlyInA: []string{}, OnlyInB: []string{}}
	err := mlx.Do(e.ctx, func() error { return rep.compare() })
	if err != nil {
		return fail(e, "compare", err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fail(e, "compare", err)
		}
	} else {
		rep.print(e)
	}
	if !rep.OK {
		return exitFailure
	}
	return exitOK
}

// compareReport is the result of one comparison (also its JSON form).
type compareReport struct {
	A       string          `json:"a"`
	B       string          `json:"b"`
	RTol    float64         `json:"rtol"`
	ATol    float64         `json:"atol"`
	Tensors []tensorCompare `json:"tensors"`
	OnlyInA []string        `json:"only_in_a"`
	OnlyInB []string        `json:"only_in_b"`
	OK      bool            `json:"ok"`
}

// tensorCompare is one shared tensor's comparison. Tensors whose shapes
// differ are not compared element-wise: MaxAbs and MaxRel are nil (left out
// of the JSON) and ShapesDiffer is set.
type tensorCompare struct {
	Name         string     `json:"name"`
	ShapeA       []int      `json:"shape_a"`
	ShapeB       []int      `json:"shape_b"`
	ShapesDiffer bool       `json:"shapes_differ,omitempty"`
	MaxAbs       *jsonFloat `json:"max_abs,omitempty"`
	MaxRel       *jsonFloat `json:"max_rel,omitempty"`
	Within       bool       `json:"within"`
}

// jsonFloat encodes non-finite values as strings ("inf", "nan"), which JSON
// numbers cannot hold.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"nan"`), nil
	case math.IsInf(v, 0):
		return []byte(`"inf"`), nil
	}
	return []byte(strconv.FormatFloat(v, 'g', -1, 64)), nil
}

// compare fills the report; it runs on the MLX worker.
func (r *compareReport) compare() error {
	// Package loader checks each file first: its errors name the file and
	// the rule a damaged or foreign file breaks, where MLX's reader only
	// says it could not read some bytes.
	for _, path := range []string{r.A, r.B} {
		f, err := loader.Open(path)
		if err != nil {
			return err
		}
		f.Close()
	}
	a, err := mlx.LoadSafetensors(r.A)
	if err != nil {
		return fmt.Errorf("%s: %w", r.A, err)
	}
	b, err := mlx.LoadSafetensors(r.B)
	if err != nil {
		return fmt.Errorf("%s: %w", r.B, err)
	}
	var shared []string
	for name := range a {
		if _, ok := b[name]; ok {
			shared = append(shared, name)
		} else {
			r.OnlyInA = append(r.OnlyInA, name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			r.OnlyInB = append(r.OnlyInB, name)
		}
	}
	sort.Strings(shared)
	sort.Strings(r.OnlyInA)
	sort.Strings(r.OnlyInB)
	if len(shared) == 0 {
		return fmt.Errorf("%s and %s share no tensor names", r.A, r.B)
	}
	// Keep the loaded (lazy) tensors across the per-tensor sweeps, and
	// release each pair once compared so memory stays at one pair.
	for _, m := range []map[string]*mlx.Array{a, b} {
		for _, t := range m {
			mlx.Pin(t)
		}
		defer func() {
			for _, t := range m {
				mlx.Free(t)
			}
		}()
	}
	r.OK = true
	for _, name := range shared {
		tc, err := compareTensor(name, a[name], b[name], r.RTol, r.ATol)
		if err != nil {
			return err
		}
		r.OK = r.OK && tc.Within
		r.Tensors = append(r.Tensors, tc)
		mlx.Free(a[name], b[name])
		mlx.Sweep()
	}
	return nil
}

// compareTensor measures one pair in float32 (float64 values are compared in
// float32 too, which is what specula's outputs hold).
func compareTensor(name string, a, b *mlx.Array, rtol, atol float64) (tensorCompare, error) {
	tc := tensorCompare{Name: name, ShapeA: a.Shape(), ShapeB: b.Shape()}
	if !slices.Equal(tc.ShapeA, tc.ShapeB) {
		tc.ShapesDiffer = true
		return tc, nil
	}
	if a.Size() == 0 {
		zero := jsonFloat(0)
		tc.MaxAbs, tc.MaxRel, tc.Within = &zero, &zero, true
		return tc, nil
	}
	fa, fb := mlx.AsType(a, mlx.Float32), mlx.AsType(b, mlx.Float32)
	diff := mlx.Abs(mlx.Subtract(fa, fb))
	mag := mlx.Abs(fb)
	zero := mlx.Scalar(0, mlx.Float32)
	// |a−b|/|b| where b ≠ 0; where b = 0 the error is 0 if a = b, else +inf.
	rel := mlx.Where(mlx.Greater(mag, zero), mlx.Divide(diff, mag),
		mlx.Where(mlx.Greater(diff, zero), mlx.Scalar(math.Inf(1), mlx.Float32), zero))
	// NaN anywhere makes the pair fail: comparisons with NaN are false.
	within := mlx.All(mlx.LessEqual(diff, mlx.AddScalar(mlx.MultiplyScalar(mag, rtol), atol)), false)
	anyNaN := mlx.Any(mlx.LogicalOr(mlx.IsNaN(fa), mlx.IsNaN(fb)), false)
	vals := mlx.Stack(0, mlx.Max(diff, false), mlx.Max(rel, false),
		mlx.AsType(within, mlx.Float32), mlx.AsType(anyNaN, mlx.Float32))
	v, err := vals.Float32s()
	if err != nil {
		return tc, fmt.Errorf("comparing %s: %w", name, err)
	}
	maxAbs, maxRel := jsonFloat(v[0]), jsonFloat(v[1])
	tc.Within = v[2] == 1
	if v[3] == 1 {
		maxAbs, maxRel, tc.Within = jsonFloat(math.NaN()), jsonFloat(math.NaN()), false
	}
	tc.MaxAbs, tc.MaxRel = &maxAbs, &maxRel
	return tc, nil
}

func (r *compareReport) print(e *env) {
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "tensor\tshape\tmax abs\tmax rel\t")
	failed := 0
	for _, t := range r.Tensors {
		shape, maxAbs, maxRel, verdict := fmt.Sprint(t.ShapeA), "-", "-", "ok"
		if t.ShapesDiffer {
			shape = fmt.Sprintf("%v vs %v", t.ShapeA, t.ShapeB)
		} else {
			maxAbs, maxRel = fmt.Sprintf("%.3g", float64(*t.MaxAbs)), fmt.Sprintf("%.3g", float64(*t.MaxRel))
		}
		switch {
		case t.ShapesDiffer:
			verdict = "SHAPES DIFFER"
			failed++
		case !t.Within:
			verdict = "PAST TOLERANCE"
			failed++
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.Name, shape, maxAbs, maxRel, verdict)
	}
	w.Flush()
	for _, only := range []struct {
		file  string
		names []string
	}{{r.A, r.OnlyInA}, {r.B, r.OnlyInB}} {
		if len(only.names) > 0 {
			fmt.Fprintf(e.stdout, "only in %s: %v\n", only.file, only.names)
		}
	}
	fmt.Fprintf(e.stdout, "%d tensors compared, %d past tolerance or of different shapes (rtol %g, atol %g)\n", len(r.Tensors), failed, r.RTol, r.ATol)
}
