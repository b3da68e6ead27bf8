package session

import (
	"fmt"
	"unicode/utf8"
)

// maxRepos bounds the repositories of one session.
const maxRepos = 16

// checkSizes checks the bounds openapi.json states as maxLength and
// maxItems. Lengths are in characters (what JSON Schema's maxLength
// counts), not bytes: 200 characters of any script fit a title.
func checkSizes(req CreateRequest) []string {
	var problems []string
	if n := utf8.RuneCountInString(req.Title); n > maxTitle {
		problems = append(problems, fmt.Sprintf("title is %d characters: at most %d", n, maxTitle))
	}
	if len(req.Repos) > maxRepos {
		problems = append(problems, fmt.Sprintf("repos has %d repositories: at most %d", len(req.Repos), maxRepos))
	}
	return problems
}
