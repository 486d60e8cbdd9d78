package distributed_test

import (
	"encoding/json"
	"net"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/specula-dev/specula/distributed"
)

// The documented example: two hosts of 4 ranks; ring ranks listen on the
// ports after the meeting port, in rank order, host 0's ranks first.
func TestParseClusterExample(t *testing.T) {
	c, err := distributed.ParseCluster("hosts.json", []byte(`{
	  "port": 40000,
	  "hosts": [
	    {"ssh": "gpu-a", "ips": ["10.0.0.1"], "slots": 4},
	    {"ssh": "gpu-b", "ips": ["10.0.0.2"], "slots": 4}
	  ]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Ranks() != 8 || c.FirstRank(0) != 0 || c.FirstRank(1) != 4 {
		t.Errorf("Ranks %d, FirstRank(0) %d, FirstRank(1) %d; want 8, 0, 4", c.Ranks(), c.FirstRank(0), c.FirstRank(1))
	}
	want := distributed.Hostfile{
		{"10.0.0.1:40001"}, {"10.0.0.1:40002"}, {"10.0.0.1:40003"}, {"10.0.0.1:40004"},
		{"10.0.0.2:40005"}, {"10.0.0.2:40006"}, {"10.0.0.2:40007"}, {"10.0.0.2:40008"},
	}
	if got := c.RingHostfile(); !reflect.DeepEqual(got, want) {
		t.Errorf("RingHostfile = %v, want %v", got, want)
	}
	if got := c.MeetAddr(); got != "10.0.0.1:40000" {
		t.Errorf("MeetAddr = %s, want 10.0.0.1:40000", got)
	}
	if host, port := c.NCCLAddr(); host != "10.0.0.1" || port != 40001 {
		t.Errorf("NCCLAddr = %s %d, want 10.0.0.1 40001", host, port)
	}
	if got := c.NodeName(1); got != "node 1 (gpu-b, 10.0.0.2)" {
		t.Errorf("NodeName(1) = %q", got)
	}
}

// MLX's own forms: a bare list of hosts, one rank each when "slots" is
// absent, the default port, several addresses per host (one connection
// each), "backend" and "envs".
func TestParseClusterMLXForms(t *testing.T) {
	c, err := distributed.ParseCluster("l.json", []byte(`[{"ssh": "a", "ips": ["127.0.0.1"]}, {"ips": ["127.0.0.1"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	p := distributed.DefaultPort
	want := distributed.Hostfile{{"127.0.0.1:" + strconv.Itoa(p+1)}, {"127.0.0.1:" + strconv.Itoa(p+2)}}
	if got := c.RingHostfile(); c.Ranks() != 2 || !reflect.DeepEqual(got, want) {
		t.Errorf("%d ranks, RingHostfile %v; want 2, %v", c.Ranks(), got, want)
	}

	c, err = distributed.ParseCluster("o.json", []byte(`{"backend": "ring", "envs": ["OMP_NUM_THREADS=1"], "port": 100,
	  "hosts": [{"ips": ["10.0.0.1", "10.1.0.1"], "slots": 2}, {"ips": ["10.0.0.2", "10.1.0.2"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want = distributed.Hostfile{{"10.0.0.1:101", "10.1.0.1:102"}, {"10.0.0.1:103", "10.1.0.1:104"}, {"10.0.0.2:105", "10.1.0.2:106"}}
	if got := c.RingHostfile(); !reflect.DeepEqual(got, want) {
		t.Errorf("RingHostfile = %v, want %v", got, want)
	}
	if c.Backend != "ring" || !reflect.DeepEqual(c.Envs, []string{"OMP_NUM_THREADS=1"}) {
		t.Errorf("backend %q, envs %v", c.Backend, c.Envs)
	}
}

func TestParseClusterErrors(t *testing.T) {
	cases := []struct {
		name, data, want string
	}{
		{"not JSON", `hosts: a`, `hostfile h.json: not a launch hostfile (JSON like {"hosts"`},
		{"trailing data", `{"hosts": [{"ips": ["10.0.0.1"]}]} {}`, "more data after the JSON value"},
		{"unknown key", `{"hosts": [{"ips": ["10.0.0.1"], "slot": 2}]}`, `unknown field "slot"`},
		{"no hosts", `{"port": 5}`, "lists no hosts"},
		{"empty list", `[]`, "lists no hosts"},
		{"zero slots", `{"hosts": [{"ips": ["10.0.0.1"]}, {"ssh": "b", "ips": ["10.0.0.2"], "slots": 0}]}`, `host 1 ("b"): "slots": 0: give the number of ranks this host runs, 1 to 4096`},
		{"negative slots", `[{"ips": ["10.0.0.1"], "slots": -2}]`, `host 0: "slots": -2`},
		{"no address", `[{"ssh": "a"}]`, `host 0 ("a"): no "ips": give the IPv4 address`},
		{"host name", `[{"ips": ["gpu-a.local"]}]`, `host 0: address "gpu-a.local" is not an IPv4 address like 10.0.0.1`},
		{"IPv6", `[{"ips": ["::1"]}]`, `address "::1" is not an IPv4 address`},
		{"address with a port", `[{"ips": ["10.0.0.1:80"]}]`, `address "10.0.0.1:80" is not an IPv4 address`},
		{"unspecified", `[{"ips": ["0.0.0.0"]}]`, `address "0.0.0.0" cannot be connected to`},
		{"ragged addresses", `[{"ips": ["10.0.0.1"]}, {"ips": ["10.0.0.2", "10.1.0.2"]}]`, "host 1 has 2 addresses and host 0 has 1: every host needs as many"},
		{"loopback and network", `[{"ips": ["127.0.0.1"]}, {"ips": ["10.0.0.2"]}]`, "host 1's address 10.0.0.2 and host 0's 127.0.0.1: loopback and network addresses cannot be mixed"},
		{"ports past 65535", `{"port": 65530, "hosts": [{"ips": ["10.0.0.1"], "slots": 8}]}`, `"port": 65530: the group uses ports 65530 to 65538`},
		{"port zero", `{"port": 0, "hosts": [{"ips": ["10.0.0.1"]}]}`, `"port": 0: the group uses ports 0 to 1`},
		{"backend", `{"backend": "mpi", "hosts": [{"ips": ["10.0.0.1"]}]}`, `"backend": unknown distributed backend "mpi" (known: ring, nccl)`},
		{"env", `{"envs": ["1X=2"], "hosts": [{"ips": ["10.0.0.1"]}]}`, `envs[0] = "1X=2": want KEY=value`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := distributed.ParseCluster("h.json", []byte(c.data))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "hostfile h.json: ") {
				t.Fatalf("ParseCluster: %v; want an error naming h.json and containing %q", err, c.want)
			}
		})
	}
}

func TestClusterCheckNode(t *testing.T) {
	c, err := distributed.ParseCluster("h.json", []byte(`[{"ips": ["10.0.0.1"]}, {"ips": ["10.0.0.2"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckNode(1); err != nil {
		t.Errorf("CheckNode(1): %v", err)
	}
	for _, n := range []int{-1, 2} {
		want := "--node " + strconv.Itoa(n) + ": hostfile h.json lists 2 hosts, nodes 0 to 1"
		if err := c.CheckNode(n); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckNode(%d): %v, want %q", n, err, want)
		}
	}
}

func TestReadClusterNamesAMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.json")
	if _, err := distributed.ReadCluster(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("ReadCluster: %v, want an error naming %s", err, path)
	}
}

// FuzzParseCluster: any input gives a Cluster or an error naming the file;
// an accepted Cluster is one the launchers can start: hosts with ranks and
// equally many IPv4 addresses, every port in range, every ring address
// distinct, and a ring hostfile the ranks' reader accepts.
func FuzzParseCluster(f *testing.F) {
	for _, s := range []string{
		`{"port": 40000, "hosts": [{"ssh": "gpu-a", "ips": ["10.0.0.1"], "slots": 4}, {"ssh": "gpu-b", "ips": ["10.0.0.2"], "slots": 4}]}`,
		`[{"ssh": "a", "ips": ["127.0.0.1"]}, {"ips": ["127.0.0.1"]}]`,
		`{"backend": "nccl", "envs": ["A=1"], "hosts": [{"ips": ["10.0.0.1", "10.1.0.1"], "slots": 2}]}`,
		`{"port": 65534, "hosts": [{"ips": ["10.0.0.1"]}]}`,
		`{"hosts": [{"ips": ["10.0.0.1"], "slots": 0}]}`,
		`[{"ips": ["::1"]}]`,
		`{"hosts": null}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := distributed.ParseCluster("f.json", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "hostfile f.json: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(c.Hosts) == 0 || c.Ranks() < 1 {
			t.Fatalf("accepted %d hosts, %d ranks", len(c.Hosts), c.Ranks())
		}
		for i, h := range c.Hosts {
			if h.Slots < 1 || len(h.IPs) != len(c.Hosts[0].IPs) {
				t.Fatalf("host %d: %d slots, %d addresses", i, h.Slots, len(h.IPs))
			}
			for _, ip := range h.IPs {
				if p := net.ParseIP(ip); p == nil || p.To4() == nil || p.IsUnspecified() {
					t.Fatalf("host %d: accepted address %q", i, ip)
				}
			}
		}
		ring := c.RingHostfile()
		if len(ring) != c.Ranks() {
			t.Fatalf("ring hostfile of %d ranks, want %d", len(ring), c.Ranks())
		}
		seen := map[string]bool{c.MeetAddr(): true}
		for r, addrs := range ring {
			for _, a := range addrs {
				_, port, _ := net.SplitHostPort(a)
				if p, _ := strconv.Atoi(port); p < 1 || p > 65535 || seen[a] {
					t.Fatalf("rank %d: address %s out of range or repeated", r, a)
				}
				seen[a] = true
			}
		}
		path := filepath.Join(t.TempDir(), "ring.json")
		if err := ring.Write(path); err != nil {
			t.Fatal(err)
		}
		if got, err := distributed.ReadHostfile(path); err != nil || !reflect.DeepEqual(got, ring) {
			t.Fatalf("ring hostfile read back as %v, %v", got, err)
		}
		// The hosts survive a round trip through the documented form.
		type host struct {
			IPs   []string `json:"ips"`
			Slots int      `json:"slots"`
		}
		var hosts []host
		for _, h := range c.Hosts {
			hosts = append(hosts, host{h.IPs, h.Slots})
		}
		b, _ := json.Marshal(map[string]any{"port": c.Port, "hosts": hosts})
		again, err := distributed.ParseCluster("f.json", b)
		if err != nil || !reflect.DeepEqual(again.RingHostfile(), ring) {
			t.Fatalf("%s: read back as %v, %v", b, again, err)
		}
	})
}

// A run for one-host launchers lies below Linux's ephemeral range (from
// 32768), where no outgoing connection can take a port between the choice
// and the ranks' binds, and every port of it could be bound when chosen.
func TestFreePortRunAvoidsEphemeralPorts(t *testing.T) {
	for _, n := range []int{1, 3, 9} {
		first, err := distributed.FreePortRun(n)
		if err != nil {
			t.Fatal(err)
		}
		if first < 1024 || first+n > 32768 {
			t.Fatalf("run of %d from port %d: want it inside 1024..32767", n, first)
		}
		for p := first; p < first+n; p++ {
			l, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("port %d of the run from %d: %v", p, first, err)
			}
			l.Close()
		}
	}
	if _, err := distributed.FreePortRun(0); err == nil {
		t.Fatal("a run of 0 ports: no error")
	}
}
