package cli

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/store"
)

// openSecretKey loads the key of the stored secrets, DATA/secret.key,
// making it on first start, and warns of stored secrets that another key
// sealed (the key file was replaced or lost): they cannot be read.
func openSecretKey(ctx context.Context, st store.Secrets, data string, stderr io.Writer) (*secrets.Key, error) {
	key, created, err := secrets.LoadOrCreateKey(data)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(data, secrets.KeyFile)
	if created {
		fmt.Fprintf(stderr, "harvest: created the key of the stored secrets, %s (mode 0600): back it up apart from the database; without it the secrets cannot be read\n", path)
	}
	xs, err := st.ListSecrets(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the stored secrets: %w", err)
	}
	others := 0
	for _, x := range xs {
		if x.KeyID != key.ID() {
			others++
		}
	}
	if others > 0 {
		fmt.Fprintf(stderr, "harvest: WARNING: %d of the %d stored secrets were sealed with another key than %s (%s): they cannot be read; put back the key file that sealed them, or set them again (harvest secret ls lists them)\n", others, len(xs), path, key.ID())
	}
	return key, nil
}
