// Package deptest holds the dependency test: what the packages that must
// stay small (the in-box binary, the sandbox contract, the API client) may
// import, so the layering cannot drift.
package deptest
