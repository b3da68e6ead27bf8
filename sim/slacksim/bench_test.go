package slacksim_test

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/slack-go/slack"

	"github.com/harvest-dev/harvest/sim/slacksim"
)

// BenchmarkSocketModeDelivery: a person's message in a channel to the
// event's arrival on a Socket Mode connection and its ack recorded: the
// stand-in's own share of any mention → reaction latency measured
// through it. Reports p50 and p99.
func BenchmarkSocketModeDelivery(b *testing.B) {
	srv, err := slacksim.Start(slacksim.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	tok := srv.Tokens()
	alice, _ := srv.AddUser(slacksim.UserSpec{Name: "alice"})
	// The bot is in the channel: one event (message.channels) a post.
	ch, _ := srv.AddChannel(slacksim.ChannelSpec{Name: "bench", Members: []string{alice.ID}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	api := slack.New(tok.Bot, slack.OptionAPIURL(srv.APIURL()), slack.OptionAppLevelToken(tok.App))
	_, u, err := api.StartSocketModeContext(ctx)
	if err != nil {
		b.Fatal(err)
	}
	ws, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.CloseNow()
	if _, _, err := ws.Read(ctx); err != nil { // hello
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := srv.Post(slacksim.PostSpec{User: alice.ID, Channel: ch.ID, Text: "ping"}); err != nil {
			b.Fatal(err)
		}
		_, frame, err := ws.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var f struct {
			EnvelopeID string `json:"envelope_id"`
		}
		json.Unmarshal(frame, &f)
		ack, _ := json.Marshal(f)
		if err := ws.Write(ctx, websocket.MessageText, ack); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	if _, err := srv.WaitEnvelopes(ctx); err != nil {
		b.Fatal(err)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
