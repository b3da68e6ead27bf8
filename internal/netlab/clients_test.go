package netlab_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/netlab"
)

// labClients is an admin client of each node, by its name.
func labClients(t *testing.T, nodes []*netlab.Node) map[string]*client.Client {
	t.Helper()
	tok := nodes[0].AdminToken()
	clients := map[string]*client.Client{}
	for _, n := range nodes {
		c, err := client.New(n.URL, tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		clients[n.Name] = c
	}
	return clients
}

// leaseReader reads, from the lab's PostgreSQL, which node holds a
// session's lease (its name; "" for nobody's).
func leaseReader(t *testing.T, ctx context.Context, lab *netlab.Lab) func(id string) string {
	t.Helper()
	db, err := pgx.Connect(ctx, lab.LocalStoreURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	return func(id string) string {
		var node string
		if err := db.QueryRow(ctx, "SELECT node FROM session_leases WHERE session = $1", id).Scan(&node); err != nil {
			return ""
		}
		name, _, _ := strings.Cut(node, "-")
		return name
	}
}
