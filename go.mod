module github.com/harvest-dev/harvest

go 1.26.8

require (
	github.com/bmatcuk/doublestar/v4 v4.10.4
	github.com/creack/pty v1.1.24
	golang.org/x/sys v0.49.0
)
