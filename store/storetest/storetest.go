// Package storetest is the conformance suite of store.Store: every
// implementation (store/sqlite and store/postgres) runs Run and passes
// it, so the layers above can rely on the contract and not on one database.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := sqlite.Open(filepath.Join(t.TempDir(), "h.db"))
//			...
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// Each subtest gets a fresh, empty store from open. The suite uses no
// sleeps: lock, lease and node expiry is checked with TTLs that are
// already over when given (the store's clock, a database server's for
// PostgreSQL, cannot be moved by a test, and need not be).
// Times the suite writes have microsecond precision, which every database
// keeps; times a store sets itself are compared to the clock with a
// tolerance.
package storetest

import (
	"testing"

	"github.com/harvest-dev/harvest/store"
)

// Run runs the suite; open returns a new empty store (closed by the
// caller's cleanup).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("Sessions", func(t *testing.T) { testSessions(t, open) })
	t.Run("ListSessions", func(t *testing.T) { testListSessions(t, open) })
	t.Run("ListSessionsPaged", func(t *testing.T) { testListSessionsPaged(t, open) })
	t.Run("CountSessions", func(t *testing.T) { testCountSessions(t, open) })
	t.Run("UpdateSession", func(t *testing.T) { testUpdateSession(t, open) })
	t.Run("UpdateSessionConcurrent", func(t *testing.T) { testUpdateConcurrent(t, open) })
	t.Run("DeleteSession", func(t *testing.T) { testDeleteSession(t, open) })
	t.Run("Branches", func(t *testing.T) { testBranches(t, open) })
	t.Run("BranchRace", func(t *testing.T) { testBranchRace(t, open) })
	t.Run("Messages", func(t *testing.T) { testMessages(t, open) })
	t.Run("MessagesConcurrent", func(t *testing.T) { testMessagesConcurrent(t, open) })
	t.Run("MessageKeys", func(t *testing.T) { testMessageKeys(t, open) })
	t.Run("EventsWithMessages", func(t *testing.T) { testEventsWithMessages(t, open) })
	t.Run("Events", func(t *testing.T) { testEvents(t, open) })
	t.Run("EventConflicts", func(t *testing.T) { testEventConflicts(t, open) })
	t.Run("Retention", func(t *testing.T) { testRetention(t, open) })
	t.Run("Locks", func(t *testing.T) { testLocks(t, open) })
	t.Run("LockExpiry", func(t *testing.T) { testLockExpiry(t, open) })
	t.Run("Tokens", func(t *testing.T) { testTokens(t, open) })
	t.Run("People", func(t *testing.T) { testPeople(t, open) })
	t.Run("Audit", func(t *testing.T) { testAudit(t, open) })
	t.Run("Teams", func(t *testing.T) { testTeams(t, open) })
	t.Run("Quotas", func(t *testing.T) { testQuotas(t, open) })
	t.Run("Deliveries", func(t *testing.T) { testDeliveries(t, open) })
	t.Run("DeliveryQueue", func(t *testing.T) { testDeliveryQueue(t, open) })
	t.Run("GitHubMarks", func(t *testing.T) { testGitHubMarks(t, open) })
	t.Run("Slack", func(t *testing.T) { testSlack(t, open) })
	t.Run("SlackLinks", func(t *testing.T) { testSlackLinks(t, open) })
	t.Run("SlackInbox", func(t *testing.T) { testSlackInbox(t, open) })
	t.Run("Environments", func(t *testing.T) { testEnvironments(t, open) })
	t.Run("Secrets", func(t *testing.T) { testSecrets(t, open) })
	t.Run("Memory", func(t *testing.T) { testMemory(t, open) })
	t.Run("MemorySeed", func(t *testing.T) { testMemorySeed(t, open) })
	t.Run("MemoryBoundConcurrent", func(t *testing.T) { testMemoryBoundConcurrent(t, open) })
	t.Run("WebSessions", func(t *testing.T) { testWebSessions(t, open) })
	t.Run("UserWebSessions", func(t *testing.T) { testUserWebSessions(t, open) })
	t.Run("SignInFlows", func(t *testing.T) { testSignInFlows(t, open) })
	t.Run("OAuthGrants", func(t *testing.T) { testOAuthGrants(t, open) })
	t.Run("Nodes", func(t *testing.T) { testNodes(t, open) })
	t.Run("Leases", func(t *testing.T) { testLeases(t, open) })
	t.Run("Generations", func(t *testing.T) { testGenerations(t, open) })
	t.Run("LeaseTakeover", func(t *testing.T) { testLeaseTakeover(t, open) })
	t.Run("Orphans", func(t *testing.T) { testOrphans(t, open) })
	t.Run("LeaseRace", func(t *testing.T) { testLeaseRace(t, open) })
	t.Run("FenceRace", func(t *testing.T) { testFenceRace(t, open) })
	t.Run("Carry", func(t *testing.T) { testCarry(t, open) })
	t.Run("CancelledContext", func(t *testing.T) { testCancelled(t, open) })
}
