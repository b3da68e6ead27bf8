package ghsim

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Wire shapes: the JSON GitHub sends, field for field as its OpenAPI
// description requires them (nullable fields present as null). They are
// built from the domain under Server.mu and never kept.

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func tsOrNil(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := ts(t)
	return &s
}

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nodeID(kind string, id int64) string {
	return base64.RawStdEncoding.EncodeToString(fmt.Appendf(nil, "0:%s%d", kind, id))
}

type wireUser struct {
	Login             string  `json:"login"`
	ID                int64   `json:"id"`
	NodeID            string  `json:"node_id"`
	AvatarURL         string  `json:"avatar_url"`
	GravatarID        *string `json:"gravatar_id"`
	URL               string  `json:"url"`
	HTMLURL           string  `json:"html_url"`
	FollowersURL      string  `json:"followers_url"`
	FollowingURL      string  `json:"following_url"`
	GistsURL          string  `json:"gists_url"`
	StarredURL        string  `json:"starred_url"`
	SubscriptionsURL  string  `json:"subscriptions_url"`
	OrganizationsURL  string  `json:"organizations_url"`
	ReposURL          string  `json:"repos_url"`
	EventsURL         string  `json:"events_url"`
	ReceivedEventsURL string  `json:"received_events_url"`
	Type              string  `json:"type"`
	UserViewType      string  `json:"user_view_type"`
	SiteAdmin         bool    `json:"site_admin"`
}

func (s *Server) wUser(u *user) *wireUser {
	if u == nil {
		return nil
	}
	// As GitHub writes them: a bot's login escaped in its API URLs
	// (dependabot%5Bbot%5D), its page the app's (/apps/SLUG).
	api := s.api + "/users/" + url.PathEscape(u.login)
	html := s.base + "/" + u.login
	if u.typ == "Bot" {
		html = s.base + "/apps/" + strings.TrimSuffix(u.login, "[bot]")
	}
	empty := ""
	return &wireUser{
		Login: u.login, ID: u.id, NodeID: nodeID(u.typ, u.id),
		AvatarURL: fmt.Sprintf("%s/avatars/u/%d?v=4", s.base, u.id), GravatarID: &empty,
		URL: api, HTMLURL: html,
		FollowersURL: api + "/followers", FollowingURL: api + "/following{/other_user}",
		GistsURL: api + "/gists{/gist_id}", StarredURL: api + "/starred{/owner}{/repo}",
		SubscriptionsURL: api + "/subscriptions", OrganizationsURL: api + "/orgs",
		ReposURL: api + "/repos", EventsURL: api + "/events{/privacy}",
		ReceivedEventsURL: api + "/received_events", Type: u.typ, UserViewType: "public",
	}
}

// wirePublicUser is GitHub's public-user: GET /users/{username}, anyone's
// profile as others see it. The description forbids other fields
// (additionalProperties false), so it carries none of the private ones.
type wirePublicUser struct {
	wireUser
	Name            *string `json:"name"`
	Company         *string `json:"company"`
	Blog            *string `json:"blog"`
	Location        *string `json:"location"`
	Email           *string `json:"email"` // the public email, else null
	Hireable        *bool   `json:"hireable"`
	Bio             *string `json:"bio"`
	TwitterUsername *string `json:"twitter_username"`
	PublicRepos     int     `json:"public_repos"`
	PublicGists     int     `json:"public_gists"`
	Followers       int     `json:"followers"`
	Following       int     `json:"following"`
	CreatedAt       string  `json:"created_at"`
	UpdatedAt       string  `json:"updated_at"`
}

// wPublicUser is u's profile; showEmail says whether the caller may see
// u's email (it is public and the caller is authenticated).
func (s *Server) wPublicUser(u *user, showEmail bool) wirePublicUser {
	w := wirePublicUser{wireUser: *s.wUser(u), Name: strOrNil(u.name), CreatedAt: ts(u.created), UpdatedAt: ts(u.created)}
	if showEmail {
		w.Email = strOrNil(u.email)
	}
	for _, r := range s.repos {
		if r.owner == u && !r.private {
			w.PublicRepos++
		}
	}
	return w
}

// wirePrivateUser is GET /user's shape for the token's own user.
type wirePrivateUser struct {
	wirePublicUser
	NotificationEmail       *string `json:"notification_email"`
	PrivateGists            int     `json:"private_gists"`
	TotalPrivateRepos       int     `json:"total_private_repos"`
	OwnedPrivateRepos       int     `json:"owned_private_repos"`
	DiskUsage               int     `json:"disk_usage"`
	Collaborators           int     `json:"collaborators"`
	TwoFactorAuthentication bool    `json:"two_factor_authentication"`
}

func (s *Server) wPrivateUser(u *user) wirePrivateUser {
	w := wirePrivateUser{wirePublicUser: s.wPublicUser(u, true)}
	w.UserViewType = "private" // the description's discriminator: private-user
	for _, r := range s.repos {
		if r.owner == u && r.private {
			w.OwnedPrivateRepos++
			w.TotalPrivateRepos++
		}
	}
	return w
}

type wireApp struct {
	ID          int64             `json:"id"`
	Slug        string            `json:"slug"`
	NodeID      string            `json:"node_id"`
	ClientID    string            `json:"client_id"`
	Owner       *wireUser         `json:"owner"`
	Name        string            `json:"name"`
	Description *string           `json:"description"`
	ExternalURL string            `json:"external_url"`
	HTMLURL     string            `json:"html_url"`
	CreatedAt   string            `json:"created_at"`
	UpdatedAt   string            `json:"updated_at"`
	Permissions map[string]string `json:"permissions"`
	Events      []string          `json:"events"`
}

func (s *Server) wApp(a *app) *wireApp {
	if a == nil {
		return nil
	}
	return &wireApp{ID: a.id, Slug: a.slug, NodeID: nodeID("Integration", a.id),
		ClientID: a.clientID, Owner: s.wUser(a.owner), Name: a.name,
		ExternalURL: s.base, HTMLURL: s.base + "/apps/" + a.slug,
		CreatedAt: ts(a.created), UpdatedAt: ts(a.created),
		Permissions: a.permissions, Events: appEvents(a)}
}

// appEvents are the events an App is subscribed to, as GitHub lists them:
// an App registered with none listed gets every event the stand-in sends
// (installation events go to every App and are not listed).
func appEvents(a *app) []string {
	if len(a.events) > 0 {
		return a.events
	}
	return []string{"check_suite", "issue_comment", "issues", "pull_request", "pull_request_review_comment", "push"}
}

func nonNil[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}

type wireInstallation struct {
	ID                  int64             `json:"id"`
	ClientID            string            `json:"client_id"`
	Account             *wireUser         `json:"account"`
	RepositorySelection string            `json:"repository_selection"`
	AccessTokensURL     string            `json:"access_tokens_url"`
	RepositoriesURL     string            `json:"repositories_url"`
	HTMLURL             string            `json:"html_url"`
	AppID               int64             `json:"app_id"`
	AppSlug             string            `json:"app_slug"`
	TargetID            int64             `json:"target_id"`
	TargetType          string            `json:"target_type"`
	Permissions         map[string]string `json:"permissions"`
	Events              []string          `json:"events"`
	CreatedAt           string            `json:"created_at"`
	UpdatedAt           string            `json:"updated_at"`
	SingleFileName      *string           `json:"single_file_name"`
	HasMultipleSingle   bool              `json:"has_multiple_single_files"`
	SingleFilePaths     []string          `json:"single_file_paths"`
	SuspendedBy         *wireUser         `json:"suspended_by"`
	SuspendedAt         *string           `json:"suspended_at"`
}

func (s *Server) wInstallation(in *installation) wireInstallation {
	w := wireInstallation{ID: in.id, ClientID: in.app.clientID,
		Account: s.wUser(in.account), RepositorySelection: "all",
		AccessTokensURL: fmt.Sprintf("%s/app/installations/%d/access_tokens", s.api, in.id),
		RepositoriesURL: s.api + "/installation/repositories",
		HTMLURL:         fmt.Sprintf("%s/settings/installations/%d", s.base, in.id),
		AppID:           in.app.id, AppSlug: in.app.slug, TargetID: in.account.id, TargetType: in.account.typ,
		Permissions: clonePerms(in.perms), Events: appEvents(in.app),
		CreatedAt: ts(in.created), UpdatedAt: ts(in.updated), SingleFilePaths: []string{}}
	if in.selected != nil {
		w.RepositorySelection = "selected"
	}
	if in.suspendedBy != nil {
		w.SuspendedBy = s.wUser(in.suspendedBy)
		at := ts(in.suspendedAt)
		w.SuspendedAt = &at
	}
	return w
}

type wireRepo struct {
	ID               int64     `json:"id"`
	NodeID           string    `json:"node_id"`
	Name             string    `json:"name"`
	FullName         string    `json:"full_name"`
	Private          bool      `json:"private"`
	Owner            *wireUser `json:"owner"`
	HTMLURL          string    `json:"html_url"`
	Description      *string   `json:"description"`
	Fork             bool      `json:"fork"`
	URL              string    `json:"url"`
	ArchiveURL       string    `json:"archive_url"`
	AssigneesURL     string    `json:"assignees_url"`
	BlobsURL         string    `json:"blobs_url"`
	BranchesURL      string    `json:"branches_url"`
	CollaboratorsURL string    `json:"collaborators_url"`
	CommentsURL      string    `json:"comments_url"`
	CommitsURL       string    `json:"commits_url"`
	CompareURL       string    `json:"compare_url"`
	ContentsURL      string    `json:"contents_url"`
	ContributorsURL  string    `json:"contributors_url"`
	DeploymentsURL   string    `json:"deployments_url"`
	DownloadsURL     string    `json:"downloads_url"`
	EventsURL        string    `json:"events_url"`
	ForksURL         string    `json:"forks_url"`
	GitCommitsURL    string    `json:"git_commits_url"`
	GitRefsURL       string    `json:"git_refs_url"`
	GitTagsURL       string    `json:"git_tags_url"`
	GitURL           string    `json:"git_url"`
	IssueCommentURL  string    `json:"issue_comment_url"`
	IssueEventsURL   string    `json:"issue_events_url"`
	IssuesURL        string    `json:"issues_url"`
	KeysURL          string    `json:"keys_url"`
	LabelsURL        string    `json:"labels_url"`
	LanguagesURL     string    `json:"languages_url"`
	MergesURL        string    `json:"merges_url"`
	MilestonesURL    string    `json:"milestones_url"`
	NotificationsURL string    `json:"notifications_url"`
	PullsURL         string    `json:"pulls_url"`
	ReleasesURL      string    `json:"releases_url"`
	SSHURL           string    `json:"ssh_url"`
	StargazersURL    string    `json:"stargazers_url"`
	StatusesURL      string    `json:"statuses_url"`
	SubscribersURL   string    `json:"subscribers_url"`
	SubscriptionURL  string    `json:"subscription_url"`
	TagsURL          string    `json:"tags_url"`
	TeamsURL         string    `json:"teams_url"`
	TreesURL         string    `json:"trees_url"`
	CloneURL         string    `json:"clone_url"`
	MirrorURL        *string   `json:"mirror_url"`
	HooksURL         string    `json:"hooks_url"`
	SvnURL           string    `json:"svn_url"`
	Homepage         *string   `json:"homepage"`
	Language         *string   `json:"language"`
	ForksCount       int       `json:"forks_count"`
	StargazersCount  int       `json:"stargazers_count"`
	WatchersCount    int       `json:"watchers_count"`
	Size             int       `json:"size"`
	DefaultBranch    string    `json:"default_branch"`
	OpenIssuesCount  int       `json:"open_issues_count"`
	IsTemplate       bool      `json:"is_template"`
	Topics           []string  `json:"topics"`
	HasIssues        bool      `json:"has_issues"`
	HasProjects      bool      `json:"has_projects"`
	HasWiki          bool      `json:"has_wiki"`
	HasPages         bool      `json:"has_pages"`
	HasDownloads     bool      `json:"has_downloads"`
	HasDiscussions   bool      `json:"has_discussions"`
	Archived         bool      `json:"archived"`
	Disabled         bool      `json:"disabled"`
	Visibility       string    `json:"visibility"`
	PushedAt         string    `json:"pushed_at"`
	CreatedAt        string    `json:"created_at"`
	UpdatedAt        string    `json:"updated_at"`
	AllowForking     bool      `json:"allow_forking"`
	WebCommitSignoff bool      `json:"web_commit_signoff_required"`
	License          *struct{} `json:"license"`
	Forks            int       `json:"forks"`
	OpenIssues       int       `json:"open_issues"`
	Watchers         int       `json:"watchers"`
	// full-repository only; present everywhere, which GitHub's shapes allow.
	NetworkCount     int `json:"network_count"`
	SubscribersCount int `json:"subscribers_count"`
}

func (s *Server) wRepo(r *repo) *wireRepo {
	api := s.api + "/repos/" + r.fullName()
	html := s.base + "/" + r.fullName()
	vis := "public"
	if r.private {
		vis = "private"
	}
	open := 0
	for _, is := range r.issues {
		if is.state == "open" {
			open++
		}
	}
	forks := s.forkCount(r)
	host := strings.TrimPrefix(strings.TrimPrefix(s.base, "http://"), "https://")
	return &wireRepo{
		ID: r.id, NodeID: nodeID("Repository", r.id), Name: r.name, FullName: r.fullName(),
		Private: r.private, Owner: s.wUser(r.owner), HTMLURL: html, Description: strOrNil(r.description),
		URL: api, ArchiveURL: api + "/{archive_format}{/ref}", AssigneesURL: api + "/assignees{/user}",
		BlobsURL: api + "/git/blobs{/sha}", BranchesURL: api + "/branches{/branch}",
		CollaboratorsURL: api + "/collaborators{/collaborator}", CommentsURL: api + "/comments{/number}",
		CommitsURL: api + "/commits{/sha}", CompareURL: api + "/compare/{base}...{head}",
		ContentsURL: api + "/contents/{+path}", ContributorsURL: api + "/contributors",
		DeploymentsURL: api + "/deployments", DownloadsURL: api + "/downloads", EventsURL: api + "/events",
		ForksURL: api + "/forks", GitCommitsURL: api + "/git/commits{/sha}", GitRefsURL: api + "/git/refs{/sha}",
		GitTagsURL: api + "/git/tags{/sha}", GitURL: "git://" + host + "/" + r.fullName() + ".git",
		IssueCommentURL: api + "/issues/comments{/number}", IssueEventsURL: api + "/issues/events{/number}",
		IssuesURL: api + "/issues{/number}", KeysURL: api + "/keys{/key_id}", LabelsURL: api + "/labels{/name}",
		LanguagesURL: api + "/languages", MergesURL: api + "/merges", MilestonesURL: api + "/milestones{/number}",
		NotificationsURL: api + "/notifications{?since,all,participating}", PullsURL: api + "/pulls{/number}",
		ReleasesURL: api + "/releases{/id}", SSHURL: "git@" + host + ":" + r.fullName() + ".git",
		StargazersURL: api + "/stargazers", StatusesURL: api + "/statuses/{sha}",
		SubscribersURL: api + "/subscribers", SubscriptionURL: api + "/subscription", TagsURL: api + "/tags",
		TeamsURL: api + "/teams", TreesURL: api + "/git/trees{/sha}", CloneURL: html + ".git",
		HooksURL: api + "/hooks", SvnURL: html, DefaultBranch: r.defaultBranch,
		OpenIssuesCount: open, Topics: []string{}, HasIssues: true, HasProjects: true, HasWiki: true,
		HasDownloads: true, Visibility: vis, PushedAt: ts(r.pushed), CreatedAt: ts(r.created),
		UpdatedAt: ts(r.pushed), AllowForking: true, OpenIssues: open,
		Fork: r.parent != nil, ForksCount: forks, Forks: forks,
	}
}

type wireReactions struct {
	URL        string `json:"url"`
	TotalCount int    `json:"total_count"`
	PlusOne    int    `json:"+1"`
	MinusOne   int    `json:"-1"`
	Laugh      int    `json:"laugh"`
	Confused   int    `json:"confused"`
	Heart      int    `json:"heart"`
	Hooray     int    `json:"hooray"`
	Eyes       int    `json:"eyes"`
	Rocket     int    `json:"rocket"`
}

func wReactions(url string, rs []*reaction) wireReactions {
	w := wireReactions{URL: url, TotalCount: len(rs)}
	for _, r := range rs {
		switch r.content {
		case "+1":
			w.PlusOne++
		case "-1":
			w.MinusOne++
		case "laugh":
			w.Laugh++
		case "confused":
			w.Confused++
		case "heart":
			w.Heart++
		case "hooray":
			w.Hooray++
		case "eyes":
			w.Eyes++
		case "rocket":
			w.Rocket++
		}
	}
	return w
}

type wireReaction struct {
	ID        int64     `json:"id"`
	NodeID    string    `json:"node_id"`
	User      *wireUser `json:"user"`
	Content   string    `json:"content"`
	CreatedAt string    `json:"created_at"`
}

func (s *Server) wReaction(r *reaction) wireReaction {
	return wireReaction{ID: r.id, NodeID: nodeID("Reaction", r.id), User: s.wUser(r.user),
		Content: r.content, CreatedAt: ts(r.created)}
}

type wireLabel struct {
	ID          int64   `json:"id"`
	NodeID      string  `json:"node_id"`
	URL         string  `json:"url"`
	Name        string  `json:"name"`
	Color       string  `json:"color"`
	Default     bool    `json:"default"`
	Description *string `json:"description"`
}

func (s *Server) wLabel(r *repo, l *label) wireLabel {
	return wireLabel{ID: l.id, NodeID: nodeID("Label", l.id),
		URL: s.api + "/repos/" + r.fullName() + "/labels/" + l.name, Name: l.name, Color: l.color}
}

// authorAssociation is how GitHub relates a user to a repository.
func authorAssociation(r *repo, u *user) string {
	switch {
	case u == nil:
		return "NONE"
	case r.owner == u:
		return "OWNER"
	case r.perms[u.login].rank() > 0:
		return "COLLABORATOR"
	}
	return "NONE"
}
