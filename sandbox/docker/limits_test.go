package docker

import (
	"slices"
	"testing"
)

// TestDiscardedLimits: dockerd's warnings about limits its kernel cannot
// enforce (moby's verifyPlatformContainerResources) name them; other
// warnings, swap's included (memory is still limited), name none.
func TestDiscardedLimits(t *testing.T) {
	for w, want := range map[string][]string{
		"Your kernel does not support memory limit capabilities or the cgroup is not mounted. Limit discarded.":           {"memory"},
		"Your kernel does not support PIDs limit capabilities or the cgroup is not mounted. PIDs limit discarded.":        {"pids"},
		"Your kernel does not support swap limit capabilities or the cgroup is not mounted. Memory limited without swap.": nil,
		"Published ports are discarded when using host network mode":                                                      nil,
	} {
		if got := discardedLimits(w); !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", w, got, want)
		}
	}
}
