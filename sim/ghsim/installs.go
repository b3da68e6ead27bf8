package ghsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Installations change as people manage them on GitHub: suspended and
// unsuspended, deleted, given or taken repositories, granted new
// permissions. Each change is delivered to the App (installation and
// installation_repositories events go to every App, subscribed or not).
// A suspended installation gets no other webhook and can mint no token
// (403 "This installation has been suspended"); its tokens are revoked,
// as are a deleted one's.

// InstallationActionSpec names an installation and who acts on it.
type InstallationActionSpec struct {
	InstallationID int64  `json:"installation_id"`
	Login          string `json:"login,omitempty"` // default the account
}

// SuspendInstallation suspends an installation (installation suspend).
func (s *Server) SuspendInstallation(spec InstallationActionSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, who, err := s.installationAs(spec.InstallationID, spec.Login)
	if err != nil {
		return err
	}
	if in.suspendedBy != nil {
		return fmt.Errorf("installation %d is suspended already", in.id)
	}
	in.suspendedBy, in.suspendedAt, in.updated = who, s.now(), s.now()
	s.revokeTokens(in)
	s.emitInstallation(in, "suspend", who, nil)
	return nil
}

// UnsuspendInstallation lifts a suspension (installation unsuspend).
func (s *Server) UnsuspendInstallation(spec InstallationActionSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, who, err := s.installationAs(spec.InstallationID, spec.Login)
	if err != nil {
		return err
	}
	if in.suspendedBy == nil {
		return fmt.Errorf("installation %d is not suspended", in.id)
	}
	in.suspendedBy, in.updated = nil, s.now()
	s.emitInstallation(in, "unsuspend", who, nil)
	return nil
}

// DeleteInstallation uninstalls the App from the account (installation
// deleted): its tokens are revoked and its id is never used again.
func (s *Server) DeleteInstallation(spec InstallationActionSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, who, err := s.installationAs(spec.InstallationID, spec.Login)
	if err != nil {
		return err
	}
	// Delivered as of before the deletion (the payload describes it).
	in.suspendedBy = nil
	s.emitInstallation(in, "deleted", who, nil)
	s.revokeTokens(in)
	delete(s.insts, in.id)
	return nil
}

// InstallationReposSpec adds repositories to an installation, or removes
// them (installation_repositories added or removed). Adding to one that
// covers all of them, or removing all it has, is refused.
type InstallationReposSpec struct {
	InstallationID int64    `json:"installation_id"`
	Login          string   `json:"login,omitempty"`
	Add            []string `json:"add,omitempty"`    // names in the account
	Remove         []string `json:"remove,omitempty"` // names in the account
}

// SetInstallationRepos changes which repositories an installation covers.
// Removing from an "all" installation makes it "selected" with the rest.
func (s *Server) SetInstallationRepos(spec InstallationReposSpec) error {
	if (len(spec.Add) == 0) == (len(spec.Remove) == 0) {
		return errors.New("give add or remove (repository names), not both")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, who, err := s.installationAs(spec.InstallationID, spec.Login)
	if err != nil {
		return err
	}
	var changed []*repo
	for _, name := range append(spec.Add, spec.Remove...) {
		r := s.repoByName(in.account.login, name)
		if r == nil {
			return fmt.Errorf("repository %s/%s: %w", in.account.login, name, ErrNotFound)
		}
		if in.covers(r) == (len(spec.Add) > 0) {
			return fmt.Errorf("repository %s: already %s", r.fullName(), map[bool]string{true: "covered", false: "not covered"}[len(spec.Add) > 0])
		}
		changed = append(changed, r)
	}
	if in.selected == nil {
		in.selected = map[int64]bool{}
		for _, r := range s.repos {
			if r.owner == in.account {
				in.selected[r.id] = true
			}
		}
	}
	for _, r := range changed {
		if len(spec.Add) > 0 {
			in.selected[r.id] = true
		} else {
			delete(in.selected, r.id)
		}
	}
	if len(in.selected) == 0 {
		return errors.New("an installation keeps at least one repository: delete it instead")
	}
	in.updated = s.now()
	action := "added"
	if len(spec.Remove) > 0 {
		action = "removed"
	}
	s.emitInstallationRepos(in, action, changed, who)
	return nil
}

// InstallationPermissionsSpec accepts new permissions for an
// installation (installation new_permissions_accepted).
type InstallationPermissionsSpec struct {
	InstallationID int64             `json:"installation_id"`
	Login          string            `json:"login,omitempty"`
	Permissions    map[string]string `json:"permissions"` // at most the App's
}

// AcceptPermissions grants an installation the permissions given (the
// account's admin accepting what the App asks).
func (s *Server) AcceptPermissions(spec InstallationPermissionsSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, who, err := s.installationAs(spec.InstallationID, spec.Login)
	if err != nil {
		return err
	}
	if len(spec.Permissions) == 0 {
		return errors.New("give the permissions accepted")
	}
	for k, v := range spec.Permissions {
		if levelRank(v) == 0 || levelRank(in.app.permissions[k]) < levelRank(v) {
			return fmt.Errorf("permission %s: %s is more than app %s asks for (%q)", k, v, in.app.slug, in.app.permissions[k])
		}
	}
	in.perms, in.updated = clonePerms(spec.Permissions), s.now()
	s.emitInstallation(in, "new_permissions_accepted", who, nil)
	return nil
}

// installationAs finds an installation and who acts on it (a user; the
// account by default). Called with s.mu held.
func (s *Server) installationAs(id int64, login string) (*installation, *user, error) {
	in := s.insts[id]
	if in == nil {
		return nil, nil, fmt.Errorf("installation %d: %w", id, ErrNotFound)
	}
	who, err := s.installer(login, in.account)
	return in, who, err
}

// installer is who manages an account's installation: login, or the
// account itself. Called with s.mu held.
func (s *Server) installer(login string, acct *user) (*user, error) {
	if login == "" {
		return acct, nil
	}
	u := s.users[strings.ToLower(login)]
	if u == nil {
		return nil, fmt.Errorf("user %s: %w", login, ErrNotFound)
	}
	return u, nil
}

// revokeTokens revokes an installation's tokens. Called with s.mu held.
func (s *Server) revokeTokens(in *installation) {
	for v, t := range s.tokens {
		if t.kind == tokInstallation && t.inst == in {
			delete(s.tokens, v)
		}
	}
}

type wireInstallRepo struct {
	ID       int64  `json:"id"`
	NodeID   string `json:"node_id"`
	Name     string `json:"name"`
	FullName string `json:"full_name"`
	Private  bool   `json:"private"`
}

func wInstallRepo(r *repo) wireInstallRepo {
	return wireInstallRepo{ID: r.id, NodeID: nodeID("Repository", r.id), Name: r.name, FullName: r.fullName(), Private: r.private}
}

// coveredRepos lists what an installation covers, by id. Called with s.mu
// held.
func (s *Server) coveredRepos(in *installation) []wireInstallRepo {
	out := []wireInstallRepo{}
	for _, r := range s.sortedRepos() {
		if in.covers(r) {
			out = append(out, wInstallRepo(r))
		}
	}
	return out
}

type installationHook struct {
	Action       string            `json:"action"`
	Installation wireInstallation  `json:"installation"`
	Repositories []wireInstallRepo `json:"repositories"`
	Requester    *wireUser         `json:"requester"`
	Sender       *wireUser         `json:"sender"`
}

type installationReposHook struct {
	Action              string            `json:"action"`
	Installation        wireInstallation  `json:"installation"`
	RepositorySelection string            `json:"repository_selection"`
	RepositoriesAdded   []wireInstallRepo `json:"repositories_added"`
	RepositoriesRemoved []wireInstallRepo `json:"repositories_removed"`
	Requester           *wireUser         `json:"requester"`
	Sender              *wireUser         `json:"sender"`
}

// installationKinds maps an installation action to its webhook kind.
var installationKinds = map[string]WebhookKind{
	"created": HookInstallationCreated, "deleted": HookInstallationDeleted, "suspend": HookInstallationSuspend,
	"unsuspend": HookInstallationUnsuspend, "new_permissions_accepted": HookInstallationNewPermissions,
}

// emitInstallation queues an installation event to the installation's
// App. Called with s.mu held.
func (s *Server) emitInstallation(in *installation, action string, sender, requester *user) {
	s.emitApp(in, installationKinds[action], "installation", action, installationHook{Action: action,
		Installation: s.wInstallation(in), Repositories: s.coveredRepos(in), Requester: s.wUser(requester), Sender: s.wUser(sender)})
}

// emitInstallationRepos queues installation_repositories. Called with
// s.mu held.
func (s *Server) emitInstallationRepos(in *installation, action string, changed []*repo, sender *user) {
	p := installationReposHook{Action: action, Installation: s.wInstallation(in), RepositorySelection: "selected",
		RepositoriesAdded: []wireInstallRepo{}, RepositoriesRemoved: []wireInstallRepo{}, Sender: s.wUser(sender)}
	kind := HookInstallationReposAdded
	for _, r := range changed {
		if action == "added" {
			p.RepositoriesAdded = append(p.RepositoriesAdded, wInstallRepo(r))
		} else {
			p.RepositoriesRemoved = append(p.RepositoriesRemoved, wInstallRepo(r))
			kind = HookInstallationReposRemoved
		}
	}
	s.emitApp(in, kind, "installation_repositories", action, p)
}

// emitApp queues an event about an installation to its App, which gets
// installation events whatever it subscribes to. Called with s.mu held.
func (s *Server) emitApp(in *installation, kind WebhookKind, event, action string, payload any) {
	a := in.app
	if a.webhookURL == "" {
		return
	}
	body, err := json.Marshal(payload)
	if err != nil {
		s.logger.Error("webhook payload", "event", event, "err", err)
		return
	}
	d := &Delivery{ID: s.newID(), GUID: newGUID(), Event: event, Action: action, Kind: kind,
		AppID: a.id, InstallationID: in.id, URL: a.webhookURL, Payload: body, State: DeliveryPending}
	d.Header, d.BadSignature = s.hookHeader(a, d)
	s.enqueue(d)
}

// installationRoutes are the control API's installation endpoints.
func (s *Server) installationRoutes(m *http.ServeMux) {
	const p = "/_sim/github/installations/{id}/"
	act := func(f func(InstallationActionSpec) error) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			id, err := pathID(req, "installation")
			if err != nil {
				controlError(w, err)
				return
			}
			var in struct {
				Login string `json:"login"`
			}
			if req.ContentLength != 0 {
				if err := decodeStrict(req, &in); err != nil {
					controlError(w, fmt.Errorf("body: %w", err))
					return
				}
			}
			controlReply(w, struct{}{}, f(InstallationActionSpec{InstallationID: id, Login: in.Login}))
		}
	}
	m.HandleFunc("POST "+p+"suspend", act(s.SuspendInstallation))
	m.HandleFunc("POST "+p+"unsuspend", act(s.UnsuspendInstallation))
	m.HandleFunc("POST "+p+"delete", act(s.DeleteInstallation))
	m.HandleFunc("POST /_sim/github/installation-repositories", control(noResult(s.SetInstallationRepos)))
	m.HandleFunc("POST /_sim/github/installation-permissions", control(noResult(s.AcceptPermissions)))
}
