package memory_test

import (
	"net/http"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/harvest-dev/harvest/memory"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// BenchmarkHandler: what building one session's memory MCP handler costs,
// and what an idle session keeps of it (retained-B/op: the live heap of
// 200 handlers held, per handler).
func BenchmarkHandler(b *testing.B) {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "h.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	svc, err := memory.New(memory.Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		svc.Handler(memory.Scope{Repo: "r"}, "s-1", nil)
	}
	b.StopTimer()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	held := make([]http.Handler, 200)
	for i := range held {
		held[i] = svc.Handler(memory.Scope{Repo: "r"}, "s-1", nil)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(len(held)), "retained-B/op")
	runtime.KeepAlive(held)
}
