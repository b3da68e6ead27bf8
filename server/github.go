package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// GitHubDeliveries is the GitHub side's queue of webhook deliveries, for
// its operator (package ghbot's Hooks).
type GitHubDeliveries interface {
	// ListDeliveries lists deliveries newest first: all, or those in
	// state; at most limit (0: 100).
	ListDeliveries(ctx context.Context, state string, limit int) ([]wire.GitHubDelivery, error)
	// Replay makes a failed delivery pending again, once however many
	// ask (the others: store.ErrConflict); store.ErrNotFound for an
	// unknown one.
	Replay(ctx context.Context, id string) (wire.GitHubDelivery, error)
}

// maxDeliveries bounds GET /v1/github/deliveries' limit.
const maxDeliveries = 1000

func (s *Server) noGitHub(what string) *apiError {
	return errorf(http.StatusNotFound, CodeNotFound, what+"this server has no GitHub configured: start harvest serve with --github-app-id, --github-app-key and --github-webhook-secret-file")
}

// listDeliveries is GET /v1/github/deliveries?state=S&limit=N (admin).
func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	q := r.URL.Query()
	for k := range q {
		if k != "state" && k != "limit" {
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: GET /v1/github/deliveries takes state and limit", k))
		}
	}
	state := q.Get("state")
	switch state {
	case "", wire.DeliveryPending, wire.DeliveryDone, wire.DeliveryFailed:
	default:
		return errorf(http.StatusBadRequest, CodeBadRequest, "state "+state+": use pending, done or failed")
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxDeliveries {
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("limit %q: a number from 1 to %d", v, maxDeliveries))
		}
		limit = n
	}
	if s.cfg.GitHubDeliveries == nil {
		return s.noGitHub("")
	}
	ds, err := s.cfg.GitHubDeliveries.ListDeliveries(r.Context(), state, limit)
	if err != nil {
		return storeFailed("listing the deliveries", err)
	}
	if ds == nil {
		ds = []wire.GitHubDelivery{}
	}
	writeJSON(w, http.StatusOK, wire.GitHubDeliveryList{Deliveries: ds})
	return nil
}

// replayDelivery is POST /v1/github/deliveries/{id}/replay (admin).
func (s *Server) replayDelivery(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	id := r.PathValue("id")
	if s.cfg.GitHubDeliveries == nil {
		return s.noGitHub("delivery " + id + ": ")
	}
	d, err := s.cfg.GitHubDeliveries.Replay(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("delivery %s: no such delivery (see GET /v1/github/deliveries)", id))
	case errors.Is(err, store.ErrConflict):
		return errorf(http.StatusConflict, CodeConflict, err.Error())
	case err != nil:
		return storeFailed("replaying delivery "+id, err)
	}
	writeJSON(w, http.StatusAccepted, d)
	return nil
}
