package wire

import "time"

// GitHub delivery states (GitHubDelivery.State).
const (
	DeliveryPending = "pending" // stored, not yet processed (or due again at NotBefore)
	DeliveryDone    = "done"    // processed: Result says what it did
	DeliveryFailed  = "failed"  // failed for good: Result says why; it can be replayed
)

// GitHubDelivery is a webhook delivery GitHub sent, as Harvest stored and
// processed it (GET /v1/github/deliveries, admin).
type GitHubDelivery struct {
	// ID is GitHub's X-GitHub-Delivery.
	ID    string `json:"id"`
	Event string `json:"event"`
	// Action, Repo ("owner/name"), Number (the issue or pull request),
	// Sender and Installation are read from the payload, when it has them.
	Action       string `json:"action,omitempty"`
	Repo         string `json:"repo,omitempty"`
	Number       int    `json:"number,omitempty"`
	Sender       string `json:"sender,omitempty"`
	Installation int64  `json:"installation,omitempty"`
	State        string `json:"state"`
	// Attempts counts the attempts since it arrived or was last replayed
	// (one held back by GitHub's limits is not counted).
	Attempts   int       `json:"attempts"`
	Replays    int       `json:"replays"`
	Result     string    `json:"result,omitempty"`
	ReceivedAt time.Time `json:"received_at"`
	DoneAt     time.Time `json:"done_at,omitzero"`
	// NotBefore is when a pending delivery is due again.
	NotBefore time.Time `json:"not_before,omitzero"`
}

// GitHubDeliveryList is GET /v1/github/deliveries.
type GitHubDeliveryList struct {
	Deliveries []GitHubDelivery `json:"deliveries"`
}

// ValidDeliveryID reports whether id can be a delivery's id (GitHub's
// X-GitHub-Delivery: a GUID; letters, digits and dashes, at most 64).
func ValidDeliveryID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
