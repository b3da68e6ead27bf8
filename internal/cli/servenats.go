package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/harvest-dev/harvest/journal/natsbus"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
)

// checkNATSFlags validates --nats and --nats-follow before anything starts.
func checkNATSFlags(f serveFlags) error {
	if f.nats != "" {
		if err := natsbus.CheckURL(f.nats); err != nil {
			return fmt.Errorf("--nats: %w", err)
		}
		return nil
	}
	if f.natsFollow {
		return errors.New("--nats-follow needs --nats URL: the NATS server to follow the sessions' events on")
	}
	return nil
}

// connectBus connects to the NATS server of --nats (nil, nil without
// one): the journal publishes every stored event there.
func connectBus(ctx context.Context, f serveFlags, st store.EventStore, logger *slog.Logger) (*natsbus.Bus, error) {
	if f.nats == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	bus, err := natsbus.Connect(ctx, st, natsbus.Config{URL: f.nats, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("--nats: %w", err)
	}
	return bus, nil
}

func closeBus(bus *natsbus.Bus) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bus.Close(ctx)
}

// followBus serves the API's event streams from bus (--nats-follow).
func followBus(bus *natsbus.Bus) func(ctx context.Context, session string, after int64) (server.EventStream, error) {
	return func(ctx context.Context, session string, after int64) (server.EventStream, error) {
		fl, err := bus.Follow(ctx, session, after)
		if err != nil {
			return nil, err
		}
		return fl, nil
	}
}
