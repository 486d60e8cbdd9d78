package distributed

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Cluster is a launch hostfile: the hosts of one distributed group and how
// many ranks each runs. The same file is given to `specula launch
// --hostfile FILE --node I` on every host; node I starts the ranks of
// Hosts[I], numbered after those of the hosts before it. Its JSON form
// follows the hostfile of MLX's own launcher (mlx.launch): an object with a
// list of hosts, each with "ssh" (a name, shown in messages) and "ips" (the
// IPv4 addresses its ranks listen on), to which specula adds "slots" (the
// ranks on that host, 1 when absent, as in an MLX hostfile where each entry
// is one rank) and "port":
//
//	{
//	  "port": 32323,
//	  "hosts": [
//	    {"ssh": "gpu-a", "ips": ["10.0.0.1"], "slots": 4},
//	    {"ssh": "gpu-b", "ips": ["10.0.0.2"], "slots": 4}
//	  ]
//	}
//
// A bare list of hosts is read as {"hosts": […]}. "backend" ("ring" or
// "nccl") and "envs" (["KEY=value", …], set in every rank) are read as
// mlx.launch reads them.
//
// Every port is derived from "port" (DefaultPort when absent), so every
// node derives the same ones without talking: the launchers meet at
// host 0's first address on port; ring rank r listens on port+1+r·A+a for
// its a-th of A addresses; NCCL's rank 0 serves its id on port+1.
type Cluster struct {
	Path    string   // the file it was read from, for messages
	Hosts   []Host   // at least one
	Port    int      // the first of the ports the group uses
	Backend string   // "ring", "nccl" or "" (the launcher decides)
	Envs    []string // KEY=value pairs set in every rank's environment
}

// Host is one entry of a Cluster.
type Host struct {
	SSH   string   // the host's name, for messages (optional)
	IPs   []string // IPv4 addresses its ranks listen on; the first one is the host's address
	Slots int      // ranks it runs, at least 1
}

// DefaultPort is a Cluster's first port when the file gives none: the
// ring backend's starting port in mlx.launch.
const DefaultPort = 32323

// maxSlots bounds one host's ranks, far above any machine's accelerators,
// so that summing them cannot overflow and a typo is caught early.
const maxSlots = 4096

// clusterFile is a Cluster's JSON form.
type clusterFile struct {
	Hosts   []hostEntry `json:"hosts"`
	Port    *int        `json:"port"`
	Backend string      `json:"backend"`
	Envs    []string    `json:"envs"`
}

type hostEntry struct {
	SSH   string   `json:"ssh"`
	IPs   []string `json:"ips"`
	Slots *int     `json:"slots"` // nil: absent, which means 1
}

// envKey is what a rank's environment variable may be called.
var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ReadCluster reads and checks a launch hostfile (see Cluster).
func ReadCluster(path string) (*Cluster, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hostfile: %w", err)
	}
	return ParseCluster(path, b)
}

// ParseCluster reads and checks the launch hostfile data read from path
// (named in errors). Every error names the file and the entry at fault and
// says how to fix it.
func ParseCluster(path string, data []byte) (*Cluster, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("hostfile %s: %s", path, fmt.Sprintf(format, a...))
	}
	var f clusterFile
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		// mlx.launch also reads a bare list of hosts.
		if err := decodeStrict(trimmed, &f.Hosts); err != nil {
			return nil, bad("not a launch hostfile (a JSON list of hosts, or {\"hosts\": […]}): %v", err)
		}
	} else if err := decodeStrict(trimmed, &f); err != nil {
		return nil, bad("not a launch hostfile (JSON like {\"hosts\": [{\"ips\": [\"10.0.0.1\"], \"slots\": 2}, …]}): %v", err)
	}
	if len(f.Hosts) == 0 {
		return nil, bad(`lists no hosts: give "hosts": [{"ips": ["10.0.0.1"], "slots": 2}, …], one entry per host`)
	}
	c := &Cluster{Path: path, Port: DefaultPort, Backend: f.Backend, Envs: f.Envs}
	if f.Port != nil {
		c.Port = *f.Port
	}
	if c.Backend != "" {
		if err := CheckBackend(c.Backend); err != nil {
			return nil, bad("\"backend\": %v", err)
		}
	}
	for i, kv := range c.Envs {
		if k, _, ok := strings.Cut(kv, "="); !ok || !envKey.MatchString(k) {
			return nil, bad("envs[%d] = %q: want KEY=value, KEY made of letters, digits and _", i, kv)
		}
	}
	ranks, addrs := 0, 0
	for i, h := range f.Hosts {
		name := hostName(i, h.SSH)
		host := Host{SSH: h.SSH, IPs: h.IPs, Slots: 1}
		if h.Slots != nil {
			host.Slots = *h.Slots
		}
		if host.Slots < 1 || host.Slots > maxSlots {
			return nil, bad("%s: \"slots\": %d: give the number of ranks this host runs, 1 to %d", name, host.Slots, maxSlots)
		}
		if len(h.IPs) == 0 {
			return nil, bad("%s: no \"ips\": give the IPv4 address its ranks listen on, e.g. \"ips\": [\"10.0.0.1\"] (the ring backend needs addresses, not host names)", name)
		}
		if addrs == 0 {
			addrs = len(h.IPs)
		} else if len(h.IPs) != addrs {
			return nil, bad("%s has %d addresses and host 0 has %d: every host needs as many (each rank makes one connection per address)", name, len(h.IPs), addrs)
		}
		for _, ip := range h.IPs {
			if err := checkIPv4(ip); err != nil {
				return nil, bad("%s: %v", name, err)
			}
		}
		if isLoopback(h.IPs[0]) != isLoopback(f.Hosts[0].IPs[0]) {
			return nil, bad("%s's address %s and host 0's %s: loopback and network addresses cannot be mixed (a loopback address is only reachable from its own host)", name, h.IPs[0], f.Hosts[0].IPs[0])
		}
		ranks += host.Slots
		c.Hosts = append(c.Hosts, host)
	}
	// The ring's ports are port+1 … port+ranks·addrs: all must be valid.
	if last := c.Port + ranks*addrs; c.Port < 1 || last > 65535 {
		return nil, bad("\"port\": %d: the group uses ports %d to %d (the launchers' meeting port, then one per rank and address), which must lie within 1 … 65535", c.Port, c.Port, last)
	}
	return c, nil
}

// decodeStrict decodes one JSON value into v, refusing unknown keys and
// anything after the value.
func decodeStrict(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more data after the JSON value")
	}
	return nil
}

func hostName(i int, ssh string) string {
	if ssh != "" {
		return fmt.Sprintf("host %d (%q)", i, ssh)
	}
	return fmt.Sprintf("host %d", i)
}

// checkIPv4 accepts a dotted IPv4 address a rank can be reached at: MLX's
// ring backend opens IPv4 sockets and splits "ip:port" at the first colon.
func checkIPv4(s string) error {
	ip := net.ParseIP(s)
	if ip == nil || ip.To4() == nil || strings.Contains(s, ":") {
		return fmt.Errorf("address %q is not an IPv4 address like 10.0.0.1 (MLX's ring backend speaks IPv4 only)", s)
	}
	if ip.IsUnspecified() || ip.IsMulticast() || ip.Equal(net.IPv4bcast) {
		return fmt.Errorf("address %q cannot be connected to: give the host's own address", s)
	}
	return nil
}

func isLoopback(ip string) bool { return net.ParseIP(ip).IsLoopback() }

// Ranks is the number of ranks of the whole group.
func (c *Cluster) Ranks() int {
	n := 0
	for _, h := range c.Hosts {
		n += h.Slots
	}
	return n
}

// FirstRank is the rank of node's first rank: the ranks of the hosts
// before it come first.
func (c *Cluster) FirstRank(node int) int {
	r := 0
	for _, h := range c.Hosts[:node] {
		r += h.Slots
	}
	return r
}

// CheckNode returns an error naming the file when node is not one of its
// hosts.
func (c *Cluster) CheckNode(node int) error {
	if node < 0 || node >= len(c.Hosts) {
		return fmt.Errorf("--node %d: hostfile %s lists %d hosts, nodes 0 to %d: give this host's place in the list", node, c.Path, len(c.Hosts), len(c.Hosts)-1)
	}
	return nil
}

// NodeName names node in messages: its index, its name and address.
func (c *Cluster) NodeName(node int) string {
	h := c.Hosts[node]
	if h.SSH != "" {
		return fmt.Sprintf("node %d (%s, %s)", node, h.SSH, h.IPs[0])
	}
	return fmt.Sprintf("node %d (%s)", node, h.IPs[0])
}

// RingHostfile is the ring backend's hostfile of the whole group: each
// rank's addresses, in rank order, on the derived ports.
func (c *Cluster) RingHostfile() Hostfile {
	var h Hostfile
	port := c.Port + 1
	for _, host := range c.Hosts {
		for range host.Slots {
			var addrs []string
			for _, ip := range host.IPs {
				addrs = append(addrs, net.JoinHostPort(ip, strconv.Itoa(port)))
				port++
			}
			h = append(h, addrs)
		}
	}
	return h
}

// MeetAddr is where the launchers meet before starting their ranks: node
// 0's address, on Port.
func (c *Cluster) MeetAddr() string {
	return net.JoinHostPort(c.Hosts[0].IPs[0], strconv.Itoa(c.Port))
}

// NCCLAddr is where NCCL's rank 0 (on node 0) serves the group's id.
func (c *Cluster) NCCLAddr() (host string, port int) {
	return c.Hosts[0].IPs[0], c.Port + 1
}

// digest identifies the group a launcher starts: its hosts, ports and
// settings, with backend (the one chosen on the command line), so that
// launchers given different files or backends refuse to start together.
func (c *Cluster) digest(backend string) string {
	b, _ := json.Marshal(struct {
		Hosts   []Host
		Port    int
		Backend string
		Envs    []string
	}{c.Hosts, c.Port, backend, c.Envs})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// FreePortRun returns the first of n consecutive ports that are free on
// 127.0.0.1 now, for a Cluster of launchers on one host (tests, trials):
// "port" must leave room for the meeting port and every rank's. (A port
// can be taken between this choice and its use; the launcher or rank that
// binds it then fails and says so.) The run is drawn below 32768, where
// Linux hands out no ports for outgoing connections (its default ephemeral
// range is 32768–60999): a run taken from that range, as a port the kernel
// chose would be, could go to any connection opened before the ranks bind
// it — another test's ranks connecting to each other, say — and the ranks
// then failed with MLX's "[ring] Couldn't bind socket (error: 98)".
func FreePortRun(n int) (int, error) {
	const low, high = 10000, 32768
	if n < 1 || n > high-low {
		return 0, fmt.Errorf("distributed: cannot find a run of %d ports", n)
	}
	for range 50 {
		first := low + rand.IntN(high-low-n+1)
		var ls []net.Listener
		ok := true
		for p := first; p < first+n && ok; p++ {
			l, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if ok = err == nil; ok {
				ls = append(ls, l)
			}
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return first, nil
		}
	}
	return 0, fmt.Errorf("distributed: found no %d consecutive free ports on 127.0.0.1", n)
}
