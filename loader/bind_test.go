package loader

import (
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// specFromFixture declares exactly the tensors reference.json lists, under
// the names the reference model uses (renamed_on_save maps model name ->
// stored name for the quirks).
func specFromFixture(doc fixtureDoc) Spec {
	toModel := map[string]string{}
	for model, stored := range doc.renamed {
		toModel[stored] = model
	}
	var s Spec
	for _, stored := range slices.Sorted(maps.Keys(doc.tensors)) {
		name := stored
		if m, ok := toModel[stored]; ok {
			name = m
		}
		s.Tensors = append(s.Tensors, Expect{Name: name, Shape: doc.tensors[stored]})
	}
	if len(toModel) > 0 {
		s.Rename = func(stored string) string {
			if m, ok := toModel[stored]; ok {
				return m
			}
			return stored
		}
	}
	return s
}

func TestBindFixtures(t *testing.T) {
	for _, name := range []string{"qwen35-tiny", "dflash-tiny", "dflash2-tiny"} {
		t.Run(name, func(t *testing.T) {
			doc := readFixture(t, name)
			c, err := OpenCheckpoint(doc.dir)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			bound, err := c.Bind(name, specFromFixture(doc))
			if err != nil {
				t.Fatal(err)
			}
			if len(bound) != doc.count {
				t.Errorf("%d tensors bound, want %d", len(bound), doc.count)
			}
		})
	}
}

// DFlash2 checkpoints store the selector codebooks without ".weight"; the
// Spec's Rename absorbs that, and without it both names are reported.
func TestBindRenameAbsorbsTheCodebookQuirk(t *testing.T) {
	doc := readFixture(t, "dflash2-tiny")
	c, err := OpenCheckpoint(doc.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	spec := specFromFixture(doc)
	bound, err := c.Bind("DFlash2DraftModel", spec)
	if err != nil {
		t.Fatal(err)
	}
	got := bound["candidate_selector.predecessor_codebook.weight"]
	if got.Name != "candidate_selector.predecessor_codebook" || !slices.Equal(got.Shape, []uint64{512, 8}) {
		t.Errorf("codebook bound to %+v", got)
	}

	spec.Rename = nil
	_, err = c.Bind("DFlash2DraftModel", spec)
	var be *BindError
	if !errors.As(err, &be) || len(be.Missing) != 2 || len(be.Unexpected) != 2 {
		t.Fatalf("without Rename: %v", err)
	}
}

func TestBindReportsEveryProblemAtOnce(t *testing.T) {
	doc := readFixture(t, "qwen35-tiny")
	c, err := OpenCheckpoint(doc.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	spec := specFromFixture(doc)
	var kept []Expect
	for _, x := range spec.Tensors {
		switch x.Name {
		case "model.norm.weight": // drop it: now unexpected
		case "model.embed_tokens.weight":
			kept = append(kept, Expect{Name: x.Name, Shape: []uint64{1024, 64}}) // wrong shape
		default:
			kept = append(kept, x)
		}
	}
	spec.Tensors = append(kept,
		Expect{Name: "lm_head.weight", Shape: []uint64{512, 64}},                  // required, absent
		Expect{Name: "model.rotary.inv_freq", Shape: []uint64{4}, Optional: true}, // optional, absent: fine
	)
	spec.Ignore = []string{"model.layers.3."} // a whole layer the architecture skips

	_, err = c.Bind("Qwen3_5ForCausalLM", spec)
	if !errors.Is(err, ErrBind) {
		t.Fatalf("err = %v, want ErrBind", err)
	}
	var be *BindError
	if !errors.As(err, &be) {
		t.Fatal("not a *BindError")
	}
	// Ignoring layer 3 makes its expected tensors missing, too.
	var layer3 int
	for _, x := range spec.Tensors {
		if strings.HasPrefix(x.Name, "model.layers.3.") {
			layer3++
		}
	}
	if len(be.Missing) != 1+layer3 || len(be.Mismatched) != 1 || len(be.Unexpected) != 1 || len(be.Duplicates) != 0 {
		t.Fatalf("missing %d (want %d), mismatched %d, unexpected %d:\n%v", len(be.Missing), 1+layer3, len(be.Mismatched), len(be.Unexpected), err)
	}
	file := filepath.Join(doc.dir, "model.safetensors")
	for _, line := range []string{
		"Qwen3_5ForCausalLM: checkpoint " + doc.dir + " does not match",
		"Qwen3_5ForCausalLM: tensor model.embed_tokens.weight expected shape [1024, 64], found [512, 64] in " + file,
		"Qwen3_5ForCausalLM: tensor lm_head.weight expected shape [512, 64], missing from " + doc.dir,
		"Qwen3_5ForCausalLM: unexpected tensor model.norm.weight [64] in " + file,
	} {
		if !strings.Contains(err.Error(), line) {
			t.Errorf("message lacks %q:\n%v", line, err)
		}
	}
	if strings.Contains(err.Error(), "inv_freq") {
		t.Errorf("an absent optional tensor was reported:\n%v", err)
	}
}

func TestBindChecksOptionalTensorsWhenPresent(t *testing.T) {
	have := []TensorInfo{{Name: "a", Shape: []uint64{2}, Path: "x"}, {Name: "b", Shape: []uint64{3}, Path: "x"}}
	_, err := Bind("arch", have, Spec{Tensors: []Expect{{Name: "a", Shape: []uint64{2}}, {Name: "b", Shape: []uint64{4}, Optional: true}}})
	var be *BindError
	if !errors.As(err, &be) || len(be.Mismatched) != 1 || be.Mismatched[0].Want.Name != "b" {
		t.Fatalf("err = %v", err)
	}
}

func TestBindReportsTwoStoredNamesForOneTensor(t *testing.T) {
	have := []TensorInfo{{Name: "model.w", Shape: []uint64{2}, Path: "x"}, {Name: "w", Shape: []uint64{2}, Path: "y"}}
	spec := Spec{Tensors: []Expect{{Name: "w", Shape: []uint64{2}}}, Rename: func(s string) string { return strings.TrimPrefix(s, "model.") }}
	_, err := Bind("arch", have, spec)
	if err == nil || !strings.Contains(err.Error(), "arch: tensor w is stored twice: as model.w in x and as w in y") {
		t.Fatalf("err = %v", err)
	}
}
