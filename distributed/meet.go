package distributed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultStartTimeout is how long a launcher waits for the other nodes'
// launchers before giving up: long enough to start `specula launch` on
// every host by hand, short enough that a host that never comes up is
// reported rather than waited for.
const DefaultStartTimeout = 2 * time.Minute

// redialEvery is how often a node retries node 0's launcher while it is
// not listening yet.
const redialEvery = 200 * time.Millisecond

// Peers links this node's launcher with the others of its Cluster while
// their ranks run. Node 0 holds a connection to every other node; every
// other node holds one to node 0, which relays what one node says to the
// rest. A node whose ranks fail says so, and every other node ends its
// ranks (a rank waiting on a collective with a dead peer might otherwise
// wait for ever: MLX's ring backend accepts its left neighbour without a
// timeout); a launcher that goes away counts as failed.
type Peers struct {
	c    *Cluster
	node int
	// conns: node 0's connection to each other node, by node; on another
	// node, the connection to node 0 at index 0.
	conns map[int]*peerConn
	fail  chan error // the first failure of another node
	once  sync.Once

	ended chan nodeEnd // node 0: each other node's end, as it arrives
}

// nodeEnd is how another node's ranks ended (err nil: they succeeded).
type nodeEnd struct {
	node int
	err  error
}

// peerConn is one connection between launchers, with one JSON message per
// line each way.
type peerConn struct {
	node int // the node at the other end
	conn net.Conn
	dec  *json.Decoder
	wmu  sync.Mutex
	enc  *json.Encoder
}

// message is what launchers say to each other.
type message struct {
	Op     string `json:"op"`               // hello, go, abort, done, end
	Node   int    `json:"node,omitempty"`   // hello: the sender's node
	Digest string `json:"digest,omitempty"` // hello: the sender's Cluster.digest
	Err    string `json:"err,omitempty"`    // abort, end: why; done: how the sender's ranks failed ("" when they succeeded)
}

func newPeerConn(node int, c net.Conn) *peerConn {
	return &peerConn{node: node, conn: c, dec: json.NewDecoder(c), enc: json.NewEncoder(c)}
}

func (p *peerConn) send(m message) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.enc.Encode(m)
}

// Meet waits until the launchers of every node of c have come up, this one
// being node, and returns their link. Node 0 listens at c.MeetAddr() and
// lets every node start once all have said hello with the same hostfile
// and backend; the others connect to it, retrying until it listens. When
// timeout passes first, Meet returns an error naming the nodes it waited
// for and where; when ctx ends, ctx's error.
func Meet(ctx context.Context, c *Cluster, node int, backend string, timeout time.Duration) (*Peers, error) {
	if err := c.CheckNode(node); err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	p := &Peers{c: c, node: node, conns: map[int]*peerConn{}, fail: make(chan error, 1)}
	if len(c.Hosts) == 1 {
		return p, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	if node == 0 {
		err = p.gather(ctx, backend, timeout)
	} else {
		err = p.join(ctx, backend, timeout)
	}
	if err != nil {
		p.closeAll()
		return nil, err
	}
	p.watch()
	return p, nil
}

// gather is Meet on node 0.
func (p *Peers) gather(ctx context.Context, backend string, timeout time.Duration) error {
	addr := p.c.MeetAddr()
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp4", addr)
	if err != nil {
		return fmt.Errorf("node 0 cannot listen for the other nodes' launchers at %s (host 0's first address in %s, on its \"port\"): %w; run node 0 on that host, or free the port", addr, p.c.Path, err)
	}
	defer l.Close()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	digest := p.c.digest(backend)
	abort := func(why string) {
		for _, pc := range p.conns {
			_ = pc.send(message{Op: "abort", Err: why})
		}
	}
	for len(p.conns) < len(p.c.Hosts)-1 {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil {
				return fmt.Errorf("node 0: waiting for the other nodes at %s: %w", addr, err)
			}
			if errors.Is(ctx.Err(), context.Canceled) {
				abort("node 0's launcher was interrupted")
				return ctx.Err()
			}
			var missing []string
			var last int
			for i := 1; i < len(p.c.Hosts); i++ {
				if p.conns[i] == nil {
					missing, last = append(missing, p.c.NodeName(i)), i
				}
			}
			start := fmt.Sprintf("--node %d -- …` there", last)
			if len(missing) > 1 {
				start = "--node I -- …` on each"
			}
			why := fmt.Sprintf("node 0 waited %v for %s: no launcher connected to %s; start `specula launch --hostfile %s %s (the same file and command on every host), or give more time with --start-timeout", timeout, strings.Join(missing, ", "), addr, p.c.Path, start)
			abort(why)
			return errors.New(why)
		}
		pc := newPeerConn(-1, conn)
		// The hello is due within the wait, so that a silent connection
		// cannot hold the others past it.
		deadline, _ := ctx.Deadline()
		_ = conn.SetReadDeadline(deadline)
		var hello message
		if err := pc.dec.Decode(&hello); err != nil || hello.Op != "hello" {
			// Not a launcher (a port scan, another program): ignore it.
			conn.Close()
			continue
		}
		_ = conn.SetReadDeadline(time.Time{})
		var why string
		switch {
		case hello.Node < 1 || hello.Node >= len(p.c.Hosts):
			why = fmt.Sprintf("a launcher says it is node %d, but %s lists nodes 0 to %d", hello.Node, p.c.Path, len(p.c.Hosts)-1)
		case p.conns[hello.Node] != nil:
			why = fmt.Sprintf("two launchers say they are node %d: give each host its own --node", hello.Node)
		case hello.Digest != digest:
			why = fmt.Sprintf("node %d's hostfile or --backend differs from node 0's (%s, backend %s): give every node the same file and backend", hello.Node, p.c.Path, backend)
		}
		if why != "" {
			_ = pc.send(message{Op: "abort", Err: why})
			conn.Close()
			abort(why)
			return errors.New(why)
		}
		pc.node = hello.Node
		p.conns[hello.Node] = pc
	}
	for _, pc := range p.conns {
		if err := pc.send(message{Op: "go"}); err != nil {
			why := fmt.Sprintf("node 0 lost %s before the start: %v", p.c.NodeName(pc.node), err)
			abort(why)
			return errors.New(why)
		}
	}
	return nil
}

// join is Meet on a node other than 0.
func (p *Peers) join(ctx context.Context, backend string, timeout time.Duration) error {
	addr := p.c.MeetAddr()
	var d net.Dialer
	var conn net.Conn
	for {
		var err error
		if conn, err = d.DialContext(ctx, "tcp4", addr); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return ctx.Err()
			}
			return fmt.Errorf("node %d waited %v for %s: its launcher never answered at %s (%v); start `specula launch --hostfile %s --node 0 -- …` there, or give more time with --start-timeout", p.node, timeout, p.c.NodeName(0), addr, err, p.c.Path)
		case <-time.After(redialEvery):
		}
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	pc := newPeerConn(0, conn)
	p.conns[0] = pc
	if err := pc.send(message{Op: "hello", Node: p.node, Digest: p.c.digest(backend)}); err != nil {
		return fmt.Errorf("node %d: saying hello to node 0 at %s: %w", p.node, addr, err)
	}
	var m message
	if err := pc.dec.Decode(&m); err != nil {
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			return ctx.Err()
		case ctx.Err() != nil:
			return fmt.Errorf("node %d waited %v for the group to start: node 0 (%s) answered but was still waiting for other nodes; start every node of %s, or give more time with --start-timeout", p.node, timeout, addr, p.c.Path)
		}
		return fmt.Errorf("node %d: node 0's launcher at %s went away before the start: %w", p.node, addr, err)
	}
	switch m.Op {
	case "go":
		return nil
	case "abort":
		return fmt.Errorf("node 0 did not start the group: %s", m.Err)
	}
	return fmt.Errorf("node %d: node 0's launcher said %q before the start", p.node, m.Op)
}

// watch reads what the other launchers say while the ranks run.
func (p *Peers) watch() {
	if p.node != 0 {
		pc := p.conns[0]
		go func() {
			for {
				var m message
				if err := pc.dec.Decode(&m); err != nil {
					p.failed(fmt.Errorf("node 0's launcher (%s) went away: %v", p.c.MeetAddr(), err))
					return
				}
				switch {
				case m.Op == "end":
					p.failed(errors.New(m.Err))
				case m.Op == "done" && m.Err != "":
					p.failed(fmt.Errorf("%s failed: %s", p.c.NodeName(0), m.Err))
				case m.Op == "done":
					return // node 0's ranks succeeded; it says no more
				}
			}
		}()
		return
	}
	p.ended = make(chan nodeEnd, len(p.conns))
	for _, pc := range p.conns {
		go func() {
			var end error
			var m message
			if err := pc.dec.Decode(&m); err != nil {
				end = fmt.Errorf("%s: its launcher went away before its ranks ended: %v", p.c.NodeName(pc.node), err)
			} else if m.Op != "done" {
				end = fmt.Errorf("%s: its launcher said %q instead of how its ranks ended", p.c.NodeName(pc.node), m.Op)
			} else if m.Err != "" {
				end = fmt.Errorf("%s failed: %s", p.c.NodeName(pc.node), m.Err)
			}
			p.ended <- nodeEnd{pc.node, end}
			if end != nil {
				p.failed(end)
			}
		}()
	}
}

// failed records the first failure of another node; on node 0, it also
// tells every other node to end its ranks.
func (p *Peers) failed(err error) {
	p.once.Do(func() {
		p.fail <- err
		if p.node == 0 {
			for _, pc := range p.conns {
				_ = pc.send(message{Op: "end", Err: err.Error()})
			}
		}
	})
}

// Failed receives the first failure of another node (its ranks failed, or
// its launcher went away) while the ranks run: this node should end its
// own ranks then. Nothing arrives when every node succeeds.
func (p *Peers) Failed() <-chan error { return p.fail }

// Finish tells the other nodes how this node's ranks ended (result nil:
// they succeeded) and closes the link. On node 0 it first waits, up to
// wait, for every other node to say how its ranks ended, and returns the
// first failure among them (its ranks' failure or its launcher lost), or
// an error naming the nodes that said nothing in time.
func (p *Peers) Finish(result error, wait time.Duration) error {
	defer p.closeAll()
	msg := message{Op: "done"}
	if result != nil {
		msg.Err = result.Error()
	}
	for _, pc := range p.conns {
		_ = pc.send(msg)
	}
	if p.node != 0 || len(p.conns) == 0 {
		return nil
	}
	var first error         // the first failure to arrive
	heard := map[int]bool{} // the nodes whose end arrived
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(heard) < len(p.conns) {
		select {
		case e := <-p.ended:
			heard[e.node] = true
			if first == nil {
				first = e.err
			}
		case <-timer.C:
			var silent []string
			for n := range p.conns {
				if !heard[n] {
					silent = append(silent, p.c.NodeName(n))
				}
			}
			slices.Sort(silent)
			return fmt.Errorf("%s did not say how their ranks ended within %v after node 0's ended", strings.Join(silent, ", "), wait)
		}
	}
	return first
}

func (p *Peers) closeAll() {
	for _, pc := range p.conns {
		pc.conn.Close()
	}
}
