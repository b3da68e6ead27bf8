package sandboxtest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/harvest-dev/harvest/sandbox"
)

// concurrentRuns is how many commands one round of Concurrent runs at once.
const concurrentRuns = 32

// concurrentRounds is how many rounds Concurrent runs on the shared box: 1,
// or HARVEST_CONCURRENT_ROUNDS. Many rounds on a loaded machine are how a
// lost output is hunted (CI once saw `echo 27` come back empty under
// gVisor and the full suite's load): without starting a box for each, as
// -count would, 300 rounds take minutes, not hours.
func concurrentRounds(t *testing.T) int {
	v := os.Getenv("HARVEST_CONCURRENT_ROUNDS")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("HARVEST_CONCURRENT_ROUNDS=%q: give a number of rounds, 1 or more", v)
	}
	return n
}

// testConcurrent: concurrentRuns commands at once on one box each get
// their own output whole, and files written at once read back. Every
// round is checked; the log says how many rounds passed.
func testConcurrent(t *testing.T, sb *sandbox.Sandbox) {
	rounds, failed := concurrentRounds(t), 0
	for r := range rounds {
		errs := concurrentRound(t, sb, r)
		if len(errs) > 0 {
			failed++
		}
		for _, err := range errs {
			t.Errorf("round %d: %v", r, err)
		}
	}
	if rounds > 1 {
		t.Logf("%d/%d rounds of %d concurrent runs passed", rounds-failed, rounds, concurrentRuns)
	}
}

func concurrentRound(t *testing.T, sb *sandbox.Sandbox, round int) []error {
	var wg sync.WaitGroup
	errs := make(chan error, 2*concurrentRuns)
	for i := range concurrentRuns {
		wg.Go(func() {
			var out bytes.Buffer
			st, err := sb.Run(ctxFor(t), &sandbox.Cmd{Args: []string{"echo", fmt.Sprint(i)}, Stdout: &out})
			if err != nil || !st.Success() || strings.TrimSpace(out.String()) != fmt.Sprint(i) {
				errs <- fmt.Errorf("run %d: %v %v %q", i, st, err, out.String())
			}
			p := fmt.Sprintf("/tmp/conc-%d", i)
			content := []byte(fmt.Sprintf("%s round %d", p, round))
			if err := sb.WriteFile(ctxFor(t), p, content, 0o644); err != nil {
				errs <- err
				return
			}
			if b, err := sb.ReadFile(ctxFor(t), p); err != nil || !bytes.Equal(b, content) {
				errs <- fmt.Errorf("file %d: %q %v", i, b, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}
