package builtin

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sim"
)

// BenchmarkLoopStep measures what the loop itself costs per step: a 20-step
// turn against harvest sim (no delays), each step one `read` tool call in a
// real local box, and reports the time per step split into the model call
// (HTTP to the sim, streaming, parsing), the tool (a round trip to the box)
// and the loop's own overhead (everything else: building requests,
// compaction checks, loop detection, hooks bookkeeping, events).
//
//	go test -run '^$' -bench LoopStep -benchtime 20x ./agent/builtin/
func BenchmarkLoopStep(b *testing.B) {
	const steps = 20
	var sb strings.Builder
	sb.WriteString("mode: sequence\nrules:\n")
	for i := 1; i < steps; i++ {
		fmt.Fprintf(&sb, "  - reply: {text: \"Step %d.\", tool_calls: [{name: read, input: {path: f%d.txt}}]}\n", i, i%5)
	}
	sb.WriteString("  - reply: {text: \"Done.\"}\n")
	script, err := sim.ParseScript("bench.yaml", []byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	h := newHarnessScript(b, script, harnessOpt{wsName: "w", api: "anthropic", model: "claude-sonnet-4-5"})
	for i := 0; i < 5; i++ {
		h.write(fmt.Sprintf("f%d.txt", i), strings.Repeat(fmt.Sprintf("line %d of a file\n", i), 50))
	}
	discard := func(event.Payload) {}
	var total TurnStats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// A fresh sim (the sequence starts over) and agent per turn.
		h.reset(script)
		a := h.agent(nil)
		b.StartTimer()
		out := a.Turn(context.Background(), "read the files", discard)
		b.StopTimer()
		if out.Finished == nil || out.Finished.Steps != steps {
			b.Fatalf("turn: %+v", out.Payload())
		}
		st := a.LastTurn()
		total.Total += st.Total
		total.Model += st.Model
		total.Tools += st.Tools
		total.Hooks += st.Hooks
		a.Close(context.Background())
		b.StartTimer()
	}
	n := float64(b.N * steps)
	b.ReportMetric(float64(total.Overhead().Nanoseconds())/n, "overhead-ns/step")
	b.ReportMetric(float64(total.Model.Nanoseconds())/n, "model-ns/step")
	b.ReportMetric(float64(total.Tools.Nanoseconds())/n, "tool-ns/step")
}
