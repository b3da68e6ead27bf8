package cli

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sim/slacksim"
)

// BenchmarkSlackMention: a real harvest serve, the Slack stand-in (Socket
// Mode) and the model stand-in on loopback; each iteration is a mention
// naming a repository, up to the turn's final message. It reports, as
// p50 and p99 over the iterations: the mention's posting to the 👀
// reaching Slack (eyes-ms), and the turn's end (turn.finished) to the
// final message reaching Slack (final-ms).
//
//	go test -run '^$' -bench SlackMention -benchtime 20x ./internal/cli/
func BenchmarkSlackMention(b *testing.B) {
	se := newSlackEnv(b, slacksim.Options{})
	se.serve(b, false)
	c := se.e.client(se.s)
	ctx := context.Background()
	var eyes, final []float64
	for i := 0; b.Loop(); i++ {
		// A channel each: Slack's chat.postMessage limit (about one a
		// second per channel) is not what this measures.
		ch, err := se.ss.AddChannel(slacksim.ChannelSpec{Name: fmt.Sprint("bench-", i), Members: []string{se.alice.ID}})
		if err != nil {
			b.Fatal(err)
		}
		se.general = ch
		m := se.post(b, se.alice, fmt.Sprintf("%s fix calc (%d)", se.mention(), i), "")
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		f := se.waitFinal(b, wctx, m.TS, 1)
		cancel()
		var reacted time.Time
		for _, call := range se.ss.Calls() {
			if call.Method == "reactions.add" && call.Params["timestamp"] == m.TS && call.Params["name"] == "eyes" {
				reacted = call.Time
				break
			}
		}
		var id string
		for _, s := range se.slackSessions(b, ctx) {
			if s.Title == fmt.Sprintf("fix calc (%d)", i) {
				id = s.ID
			}
		}
		evs := follow(b, c, id, 0, "the turn's end", func(ev event.Event) bool { return ev.Type() == event.TypeTurnFinished })
		eyes = append(eyes, ms(reacted.Sub(m.PostedAt)))
		final = append(final, ms(f.PostedAt.Sub(evs[len(evs)-1].Time)))
	}
	b.ReportMetric(pct(eyes, 50), "eyes-p50-ms")
	b.ReportMetric(pct(eyes, 99), "eyes-p99-ms")
	b.ReportMetric(pct(final, 50), "final-p50-ms")
	b.ReportMetric(pct(final, 99), "final-p99-ms")
}
