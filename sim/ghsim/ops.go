package ghsim

// An Operation is one REST operation the stand-in serves, named as GitHub's
// OpenAPI description names it: the method and the path template exactly as
// they appear under "paths". A test fails if one is not in GitHub's
// description (package ghschema).
type Operation struct {
	Method string // GET, POST, PATCH, DELETE
	Path   string // like /repos/{owner}/{repo}/issues/{issue_number}
}

// operations are the REST operations served, in the order the doc lists them.
var operations = []Operation{
	{"GET", "/app"},
	{"GET", "/repos/{owner}/{repo}/installation"},
	{"POST", "/app/installations/{installation_id}/access_tokens"},
	{"GET", "/app/installations"},
	{"GET", "/installation/repositories"},
	{"GET", "/user"},
	{"GET", "/users/{username}"},
	{"GET", "/repos/{owner}/{repo}"},
	{"POST", "/repos/{owner}/{repo}/forks"},
	{"GET", "/repos/{owner}/{repo}/branches/{branch}"},
	{"GET", "/repos/{owner}/{repo}/collaborators/{username}/permission"},
	{"GET", "/repos/{owner}/{repo}/issues/{issue_number}"},
	{"GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments"},
	{"POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments"},
	{"GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}"},
	{"PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}"},
	{"POST", "/repos/{owner}/{repo}/issues/{issue_number}/labels"},
	{"POST", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"},
	{"POST", "/repos/{owner}/{repo}/issues/{issue_number}/reactions"},
	{"POST", "/repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions"},
	{"POST", "/repos/{owner}/{repo}/pulls"},
	{"GET", "/repos/{owner}/{repo}/pulls"},
	{"GET", "/repos/{owner}/{repo}/pulls/{pull_number}"},
	{"PATCH", "/repos/{owner}/{repo}/pulls/{pull_number}"},
	{"POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments"},
	{"POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies"},
	{"POST", "/repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers"},
	{"GET", "/repos/{owner}/{repo}/check-suites/{check_suite_id}/check-runs"},
	{"POST", "/repos/{owner}/{repo}/check-runs"},
	{"PATCH", "/repos/{owner}/{repo}/check-runs/{check_run_id}"},
	{"GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}"},
	{"GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments"},
	{"DELETE", "/repos/{owner}/{repo}/git/refs/{ref}"},
}

// Operations returns the REST operations the stand-in serves.
func Operations() []Operation { return append([]Operation(nil), operations...) }

// A WebhookKind names one webhook the stand-in delivers as the webhooks
// OpenAPI description keys it: event "-" action, underscores as dashes
// (issue_comment created is "issue-comment-created").
type WebhookKind string

// The webhooks the stand-in delivers.
const (
	HookIssueCommentCreated      WebhookKind = "issue-comment-created"
	HookIssueCommentEdited       WebhookKind = "issue-comment-edited"
	HookIssuesOpened             WebhookKind = "issues-opened"
	HookIssuesLabeled            WebhookKind = "issues-labeled"
	HookIssuesAssigned           WebhookKind = "issues-assigned"
	HookPullRequestOpened        WebhookKind = "pull-request-opened"
	HookPullRequestSynchronize   WebhookKind = "pull-request-synchronize"
	HookPullRequestClosed        WebhookKind = "pull-request-closed"
	HookPullRequestReviewComment WebhookKind = "pull-request-review-comment-created"
	HookPullRequestReview        WebhookKind = "pull-request-review-submitted"
	HookCheckSuiteCompleted      WebhookKind = "check-suite-completed"
	HookPush                     WebhookKind = "push"

	HookInstallationCreated        WebhookKind = "installation-created"
	HookInstallationDeleted        WebhookKind = "installation-deleted"
	HookInstallationSuspend        WebhookKind = "installation-suspend"
	HookInstallationUnsuspend      WebhookKind = "installation-unsuspend"
	HookInstallationNewPermissions WebhookKind = "installation-new-permissions-accepted"
	HookInstallationReposAdded     WebhookKind = "installation-repositories-added"
	HookInstallationReposRemoved   WebhookKind = "installation-repositories-removed"
)

// WebhookKinds lists every kind the stand-in delivers.
func WebhookKinds() []WebhookKind {
	return []WebhookKind{HookIssueCommentCreated, HookIssueCommentEdited, HookIssuesOpened,
		HookIssuesLabeled, HookIssuesAssigned, HookPullRequestOpened, HookPullRequestSynchronize,
		HookPullRequestClosed, HookPullRequestReviewComment, HookPullRequestReview, HookCheckSuiteCompleted, HookPush,
		HookInstallationCreated, HookInstallationDeleted, HookInstallationSuspend, HookInstallationUnsuspend,
		HookInstallationNewPermissions, HookInstallationReposAdded, HookInstallationReposRemoved}
}
