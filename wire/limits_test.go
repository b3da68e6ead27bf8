package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDurationsOnTheWire(t *testing.T) {
	var l Limits
	if err := json.Unmarshal([]byte(`{"idle_timeout":"10m","max_lifetime":3600000000000,"turn_watchdog":"1h30m","max_steps":7,"budget_usd":1.5}`), &l); err != nil {
		t.Fatal(err)
	}
	if l.IdleTimeout != 10*time.Minute || l.MaxLifetime != time.Hour || l.TurnWatchdog != 90*time.Minute || l.MaxSteps != 7 || l.BudgetUSD != 1.5 {
		t.Errorf("decoded %+v", l)
	}
	// Written as strings (openapi.json's schema), read back the same.
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"max_steps":7,"budget_usd":1.5,"idle_timeout":"10m","max_lifetime":"1h","turn_watchdog":"1h30m"}`; string(b) != want {
		t.Errorf("encoded %s\n   want %s", b, want)
	}
	if b, _ := json.Marshal(Limits{}); string(b) != `{}` {
		t.Errorf("zero limits encoded as %s", b)
	}
	for d, want := range map[time.Duration]string{24 * time.Hour: "24h", 90 * time.Second: "1m30s", 1500 * time.Millisecond: "1.5s", 2*time.Hour + time.Second: "2h0m1s", 10 * time.Minute: "10m"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%d) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(want); err != nil || back != d {
			t.Errorf("%q reads back as %v, %v", want, back, err)
		}
	}
	var back Limits
	if err := json.Unmarshal(b, &back); err != nil || back != l {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	var tc TerminalCLI
	if err := json.Unmarshal([]byte(`{"command":["bash"],"idle_timeout":"20s"}`), &tc); err != nil || tc.IdleTimeout != 20*time.Second || tc.Command[0] != "bash" {
		t.Errorf("terminal: %+v, %v", tc, err)
	}
	if b, err := json.Marshal(tc); err != nil || string(b) != `{"command":["bash"],"idle_timeout":"20s"}` {
		t.Errorf("terminal encoded as %s, %v", b, err)
	}
	for in, want := range map[string]string{
		`{"idle_timeout":"ten minutes"}`: `idle_timeout "ten minutes" is not a duration`,
		`{"turn_watchdog":true}`:         "turn_watchdog: got true",
		`{"idle_timeot":"5m"}`:           `unknown field "idle_timeot"`,
		`{"max_steps":"x"}`:              "max_steps",
	} {
		var l Limits
		if err := json.Unmarshal([]byte(in), &l); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", in, err, want)
		}
	}
}
