package conformance

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/specula-dev/specula/plugins/proto/draftv1"
)

// scenarios are run in order against every architecture, each on a fresh
// connection and a freshly loaded draft.
var scenarios = []struct {
	name string
	run  func(t *testing.T, r *rig)
}{
	{"bounds", bounds},
	{"flush", flush},
	{"gap", gap},
	{"rewind", rewind},
	{"close", closeTwice},
	{"greedy equals plain", greedyEqualsPlain},
}

// bounds: no proposal before anything is committed or without budget; at
// most max_depth tokens however many are asked for (S4).
func bounds(t *testing.T, r *rig) {
	id := r.open()
	if got := r.propose(id, 1, 4); len(got) != 0 {
		t.Fatalf("Propose before any Committed = %v, want a decline (no context)", got)
	}
	r.mustCommit(id, 0, []int32{1}, 1)
	if got := r.propose(id, 2, 0); len(got) != 0 {
		t.Fatalf("Propose with max 0 = %v, want a decline", got)
	}
	got := r.propose(id, 2, 1000)
	if len(got) > int(r.load.GetMaxDepth()) {
		t.Fatalf("Propose with max 1000 drafted %d tokens, above max_depth %d", len(got), r.load.GetMaxDepth())
	}
}

// flush: a run longer than the in-process flush cap, then an overlapping
// run, then Settle: the frontier and the settled offset follow (S1).
func flush(t *testing.T, r *rig) {
	id := r.open()
	toks := r.randomTokens(1, 300)
	r.mustCommit(id, 0, toks, 300)
	r.mustCommit(id, 299, []int32{toks[299], 1, 2}, 302)
	r.settle(id, 302)
	r.propose(id, 3, r.load.GetMaxDepth())
	r.settle(id, 302)
}

// gap: a run that would leave slots unfed is refused with InvalidArgument,
// and the session keeps working (S2).
func gap(t *testing.T, r *rig) {
	id := r.open()
	r.mustCommit(id, 0, []int32{1}, 1)
	_, err := r.committed(id, 3, []int32{4})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Committed leaving slots 1..2 unfed: err = %v, want InvalidArgument", err)
	}
	r.mustCommit(id, 1, []int32{2}, 2)
	r.settle(id, 2)
}

// rewind: after a proposal, reporting the accepted run rewinds the block;
// the session then proposes exactly as a fresh session fed the same context
// in one run (S5, S6, and the restored-state equivalence behind S3).
func rewind(t *testing.T, r *rig) {
	ctxToks := r.randomTokens(2, 20)
	maxD := r.load.GetMaxDepth()

	a := r.open()
	r.mustCommit(a, 0, ctxToks, 20)
	anchor := int32(3)
	first := r.propose(a, anchor, maxD)
	keep := min(len(first), 2)
	accepted := append([]int32{anchor}, first[:keep]...)
	r.mustCommit(a, 20, accepted, 20+len(accepted))
	next := int32(5)
	gotA := r.propose(a, next, maxD)
	r.settle(a, 20+len(accepted))

	b := r.open()
	all := append(slices.Clone(ctxToks), accepted...)
	r.mustCommit(b, 0, all, len(all))
	gotB := r.propose(b, next, maxD)
	if !slices.Equal(gotA, gotB) {
		t.Fatalf("after a proposal and the accepted run, Propose = %v; a fresh session fed the same context proposes %v (a stale block was not rewound?)", gotA, gotB)
	}
	if err := r.close(a); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.close(b); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// closeTwice: Close drains an outstanding block and is idempotent; the
// session is gone afterwards.
func closeTwice(t *testing.T, r *rig) {
	id := r.open()
	r.mustCommit(id, 0, []int32{1, 2, 3}, 3)
	r.propose(id, 4, r.load.GetMaxDepth())
	if err := r.close(id); err != nil {
		t.Fatalf("Close with a block outstanding: %v", err)
	}
	if err := r.close(id); err != nil {
		t.Fatalf("second Close: %v, want a no-op", err)
	}
	_, err := r.c.Propose(context.Background(), &draftv1.ProposeRequest{SessionId: id, Anchor: 1, Max: 1})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("Propose after Close: err = %v, want NotFound", err)
	}
}

// greedyEqualsPlain decodes speculatively through the plugin — greedy
// verification against the fake target, reporting each accepted run as the
// host does — and compares with plain greedy decoding.
func greedyEqualsPlain(t *testing.T, r *rig) {
	const budget = 40
	for _, seed := range []uint64{1, 2, 3} {
		prompt := r.randomTokens(10+seed, 6)
		// Make the prompt repetitive so that lookup drafts have material.
		prompt = append(prompt, prompt...)
		var plain []int32
		cur := prompt[len(prompt)-1]
		for range budget {
			cur = r.target.GreedyNext(cur)
			plain = append(plain, cur)
		}

		id := r.open()
		pos := len(prompt) - 1
		r.mustCommit(id, 0, prompt[:pos], pos)
		cur = prompt[pos]
		var out []int32
		drafted, accepted := 0, 0
		for len(out) < budget {
			var d []int32
			if n := min(int(r.load.GetMaxDepth()), budget-len(out)-1); n > 0 {
				d = r.propose(id, cur, uint32(n))
			}
			drafted += len(d)
			last, acc := cur, 0
			for _, x := range d {
				if x != r.target.GreedyNext(last) {
					break
				}
				last, acc = x, acc+1
			}
			accepted += acc
			emitted := append(slices.Clone(d[:acc]), r.target.GreedyNext(last))
			run := append([]int32{cur}, d[:acc]...)
			r.mustCommit(id, pos, run, pos+len(run))
			pos += len(run)
			out = append(out, emitted...)
			cur = emitted[len(emitted)-1]
		}
		out = out[:budget]
		if !slices.Equal(out, plain) {
			t.Fatalf("seed %d: speculative %v, plain %v", seed, out, plain)
		}
		r.settle(id, pos)
		if err := r.close(id); err != nil {
			t.Fatalf("Close: %v", err)
		}
		t.Logf("seed %d: %d drafted, %d accepted", seed, drafted, accepted)
	}
}
