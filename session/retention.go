package session

import "context"

// compactEnded compacts the events of ended sessions past
// Config.EventRetention and returns how many events it removed.
func (m *Manager) compactEnded(ctx context.Context) int64 { return 0 }
