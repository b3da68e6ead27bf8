package event

import "testing"

// TestBulky: retention removes the streamed and tool-level types and
// keeps the turn-level record (retention.go's table).
func TestBulky(t *testing.T) {
	kept := []Type{
		TypeSessionState, TypeMessageQueued, TypeMessageDelivered, TypeTurnStarted, TypeStepFinished,
		TypeTurnFinished, TypeTurnCancelled, TypeTurnFailed, TypeCompaction, TypeLoopDetected, TypeTodoUpdated,
		TypeGitCommitted, TypeGitPushed, TypePROpened, TypePRMerged, TypePRClosed, TypeStuck, TypeGitHubFailed,
		TypeShellOpened, TypeShellClosed, TypeEventsCompacted,
	}
	removed := []Type{
		TypeAssistantDelta, TypeAssistantMessage, TypeThinkingDelta, TypeThinking, TypeToolStarted,
		TypeToolInputDelta, TypeToolOutput, TypeToolFinished, TypeTerminalOutput,
	}
	if len(kept)+len(removed) != len(registry) {
		t.Fatalf("%d kept and %d removed types for %d registered: decide for the new type here and in retention.go", len(kept), len(removed), len(registry))
	}
	for _, ty := range kept {
		if Bulky(ty) {
			t.Errorf("%s is removed by retention: it is part of the turn-level record", ty)
		}
	}
	for _, ty := range removed {
		if !Bulky(ty) {
			t.Errorf("%s is kept by retention: it is bulky", ty)
		}
	}
}

func TestMissed(t *testing.T) {
	c := EventsCompacted{From: 5, To: 9}
	for _, tc := range []struct{ last, want int64 }{{0, 5}, {4, 5}, {5, 4}, {8, 1}, {9, 0}, {12, 0}} {
		if got := c.Missed(tc.last); got != tc.want {
			t.Errorf("Missed(%d) of %d..%d = %d, want %d", tc.last, c.From, c.To, got, tc.want)
		}
	}
}
