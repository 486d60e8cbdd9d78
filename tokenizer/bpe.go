package tokenizer

import (
	"strings"
	"sync"
)

// bpeModel is the BPE model of a byte-level tokenizer: it turns one
// pre-tokenized word (raw bytes; the byte-level mapping is folded into its
// tables) into token ids.
type bpeModel struct {
	// merges maps a pair of ids (left<<32 | right) to its rank and result.
	merges map[uint64]mergeTarget
	// initial holds, for each byte and each position kind (posFirst|posLast
	// bits), what the byte's character turns into before any merge.
	initial [4][256]initialSymbol
	unkID   int32 // the unk_token's id, or -1: unknown characters are dropped
	fuseUnk bool  // consecutive unknown characters make one unk token
	// whole maps a word's bytes to a token (ignore_merges: a word that is a
	// token is taken whole); nil when merges are never ignored.
	whole map[string]int32
	cache wordCache
}

// Position kinds of a character in its word: the continuing-subword prefix
// goes on every character but the first, the end-of-word suffix on the last.
const (
	posFirst = 1
	posLast  = 2
)

// mergeTarget is what a pair of adjacent tokens merges into, and when: the
// pair of lowest rank in a word merges first.
type mergeTarget struct {
	rank int32
	id   int32
}

// initialSymbol is what one character of a word becomes: its token, or its
// byte-fallback tokens, or (unknown) the unk token or nothing.
type initialSymbol struct {
	ids     []int32
	unknown bool
}

func pairKey(left, right int32) uint64 {
	return uint64(uint32(left))<<32 | uint64(uint32(right))
}

// appendWord appends the ids of word (a non-empty pre-tokenized piece) to ids.
func (m *bpeModel) appendWord(ids []int32, word string) []int32 {
	if cached, ok := m.cache.get(word); ok {
		return append(ids, cached...)
	}
	start := len(ids)
	ids = m.tokenize(ids, word)
	m.cache.put(word, ids[start:])
	return ids
}

// symbol is a token in a word being merged, in a doubly linked list over the
// word's initial symbols.
type symbol struct {
	id         int32
	prev, next int32 // indices of the neighbours, -1 at the ends
	dead       bool  // merged into its left neighbour
}

// tokenize runs the BPE of Hugging Face's BPE::merge_word and Word::merge_all:
// every adjacent pair that has a merge goes into a queue ordered by (rank,
// position); the lowest is merged, entries made stale by earlier merges are
// dropped, and the new symbol's pairs with its neighbours are queued.
func (m *bpeModel) tokenize(ids []int32, word string) []int32 {
	if m.whole != nil {
		if id, ok := m.whole[word]; ok {
			return append(ids, id)
		}
	}
	syms := make([]symbol, 0, len(word))
	add := func(id int32) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: n - 1, next: n + 1})
	}
	pendingUnk := false
	for i := 0; i < len(word); i++ {
		kind := 0
		if i == 0 {
			kind |= posFirst
		}
		if i == len(word)-1 {
			kind |= posLast
		}
		in := &m.initial[kind][word[i]]
		if !in.unknown {
			if pendingUnk {
				add(m.unkID)
				pendingUnk = false
			}
			for _, id := range in.ids {
				add(id)
			}
			continue
		}
		if m.unkID < 0 {
			continue
		}
		if pendingUnk && !m.fuseUnk {
			add(m.unkID)
		}
		pendingUnk = true
	}
	if pendingUnk {
		add(m.unkID)
	}
	if len(syms) == 0 {
		return ids
	}
	syms[len(syms)-1].next = -1
	m.mergeAll(syms)
	for i := 0; i >= 0; i = int(syms[i].next) {
		ids = append(ids, syms[i].id)
	}
	return ids
}

func (m *bpeModel) mergeAll(syms []symbol) {
	if len(syms) < 2 {
		return
	}
	q := mergeQueue(make([]mergeItem, 0, len(syms)))
	for i := 0; i+1 < len(syms); i++ {
		if t, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			q.push(mergeItem{rank: t.rank, pos: int32(i), id: t.id})
		}
	}
	for len(q) > 0 {
		top := q.pop()
		s := &syms[top.pos]
		if s.dead || s.next < 0 {
			continue
		}
		right := &syms[s.next]
		// An entry is stale if either symbol changed since it was queued.
		if t, ok := m.merges[pairKey(s.id, right.id)]; !ok || t.id != top.id {
			continue
		}
		s.id = top.id
		right.dead = true
		s.next = right.next
		if s.next >= 0 {
			syms[s.next].prev = top.pos
		}
		if s.prev >= 0 {
			if t, ok := m.merges[pairKey(syms[s.prev].id, s.id)]; ok {
				q.push(mergeItem{rank: t.rank, pos: s.prev, id: t.id})
			}
		}
		if s.next >= 0 {
			if t, ok := m.merges[pairKey(s.id, syms[s.next].id)]; ok {
				q.push(mergeItem{rank: t.rank, pos: top.pos, id: t.id})
			}
		}
	}
}

// mergeItem is a queued merge of the symbol at pos with its right neighbour.
type mergeItem struct {
	rank, pos, id int32
}

// mergeQueue is a binary min-heap of merges by (rank, pos).
type mergeQueue []mergeItem

func (q mergeQueue) less(i, j int) bool {
	if q[i].rank != q[j].rank {
		return q[i].rank < q[j].rank
	}
	return q[i].pos < q[j].pos
}

func (q *mergeQueue) push(it mergeItem) {
	*q = append(*q, it)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (q *mergeQueue) pop() mergeItem {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, small := 2*i+1, 2*i+2, i
		if l < len(h) && h.less(l, small) {
			small = l
		}
		if r < len(h) && h.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
	*q = h
	return top
}

// Cache limits: a word longer than cacheMaxWord bytes is rare enough not to
// repeat (Hugging Face uses the same bound); cacheMaxEntries bounds memory
// (about 100 bytes an entry) for long-running servers.
const (
	cacheMaxWord    = 256
	cacheMaxEntries = 1 << 17
)

// wordCache remembers the ids of words already tokenized. It is safe for
// concurrent use; once full it stops growing.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func (c *wordCache) get(word string) ([]int32, bool) {
	if len(word) > cacheMaxWord {
		return nil, false
	}
	c.mu.RLock()
	ids, ok := c.m[word]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(word string, ids []int32) {
	if len(word) > cacheMaxWord {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string][]int32)
	}
	if len(c.m) < cacheMaxEntries {
		// Copy both: word may point into a large text, ids into a caller's slice.
		c.m[strings.Clone(word)] = append([]int32(nil), ids...)
	}
}
