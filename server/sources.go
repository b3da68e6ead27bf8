package server

import "net/http"

// listSources answers what the caller may start sessions on (the form of
// the web UI offers it).
func (s *Server) listSources(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, s.cfg.Manager.Sources(c.admin()))
	return nil
}
