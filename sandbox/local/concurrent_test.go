package local_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
)

// TestConcurrentCreates starts 50 boxes at once, as a busy server would.
func TestConcurrentCreates(t *testing.T) {
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t)})
	testreq.Check(t, testreq.Local, p.Available(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 50
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		boxes []*sandbox.Sandbox
	)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := p.Start(ctx, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			boxes = append(boxes, sb)
			mu.Unlock()
			if st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err != nil {
				errs <- fmt.Errorf("true in box %s: %w", sb.ID(), err)
			} else if !st.Success() {
				errs <- fmt.Errorf("true in box %s: %v", sb.ID(), st)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, sb := range boxes {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Error(err)
		}
	}
}
