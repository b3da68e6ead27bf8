package cli

import (
	"strings"
	"testing"
)

// TestNodeConfigCarryFlags: --shared-data and --carry-max are checked,
// each mistake said with what to do.
func TestNodeConfigCarryFlags(t *testing.T) {
	node := serveFlags{store: "postgres://h/db", nodeID: "a", leaseTTL: 10e9}
	for _, tt := range []struct {
		name string
		f    func(*serveFlags)
		want int64
		err  string
	}{
		{"default", func(*serveFlags) {}, 0, ""},
		{"shared", func(f *serveFlags) { f.sharedData = true }, -1, ""},
		{"max", func(f *serveFlags) { f.carryMax = "2g" }, 2 << 30, ""},
		{"bad max", func(f *serveFlags) { f.carryMax = "lots" }, 0, "--carry-max \"lots\": give a size like 4g"},
		{"zero max", func(f *serveFlags) { f.carryMax = "0" }, 0, "--carry-max \"0\""},
		{"both", func(f *serveFlags) { f.sharedData, f.carryMax = true, "1g" }, 0, "give one of them"},
		{"lone shared", func(f *serveFlags) { f.nodeID, f.store = "", ""; f.sharedData = true }, 0, "give --node-id or --advertise too"},
		{"lone max", func(f *serveFlags) { f.nodeID, f.store = "", ""; f.carryMax = "1g" }, 0, "give --node-id or --advertise too"},
		{"takeover rate", func(f *serveFlags) { f.takeRate = 20 }, 0, ""},
		{"negative takeover rate", func(f *serveFlags) { f.takeRate = -1 }, 0, "--takeover-rate -1: give how many sessions a second"},
		{"lone takeover rate", func(f *serveFlags) { f.nodeID, f.store = "", ""; f.takeRate = 20 }, 0, "give --node-id or --advertise too"},
	} {
		f := node
		tt.f(&f)
		_, max, err := nodeConfig(f, "127.0.0.1:7777")
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.err)
		case tt.err == "" && max != tt.want:
			t.Errorf("%s: carry max %d, want %d", tt.name, max, tt.want)
		}
	}
}
