package environment_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/environment"
	"github.com/harvest-dev/harvest/store"
)

// TestBuildFailsClosedOnUnreadable: a setup that hides its secret where
// the host cannot read it (a directory in HOME deeper than PATH_MAX, made
// one level at a time in the box) does not get it past the scan: the build
// fails, naming the directory, and the environment is not ready.
func TestBuildFailsClosedOnUnreadable(t *testing.T) {
	b, st, _ := newBuilder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src := repo(t, map[string]string{".harvest/setup.sh": `set -e
python3 -c '
import os
os.chdir(os.path.expanduser("~"))
for i in range(25):
    os.mkdir("d" * 200)
    os.chdir("d" * 200)
open(".npmrc", "w").write("//registry/:_authToken=" + os.environ["SETUP_TOKEN"] + "\n")
'
echo hidden
`})
	var log strings.Builder
	e, err := b.Build(ctx, environment.Request{Repo: "test:hidden", Name: "hidden", Backend: "local", Checkout: checkoutOf(t, src),
		Env: []string{"SETUP_TOKEN=s3cret-canary"}, Log: &log})
	if err == nil {
		t.Fatalf("a setup that hid its secret from the scan built: %+v\n%s", e, log.String())
	}
	if !strings.Contains(log.String(), "hidden") {
		t.Fatalf("the setup did not run to its end:\n%s", log.String())
	}
	for _, w := range []string{"could not be searched for setup secrets", "cannot read home/dddd", "file name too long"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the build's error %q does not say %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "s3cret-canary") {
		t.Errorf("the error shows the secret: %v", err)
	}
	if e == nil || e.State != store.EnvFailed {
		t.Fatalf("the build: %+v; want it stored failed", e)
	}
	if got, err := st.GetEnvironment(ctx, e.ID); err != nil || got.State != store.EnvFailed {
		t.Fatalf("stored: %+v, %v", got, err)
	}
	if _, err := os.Stat(b.LogPath(e.ID)); err != nil {
		t.Fatalf("the failed build's log: %v", err)
	}
}
