// Package deptest holds the dependency tests, so the layering cannot
// drift:
//
//   - TestDependencies: what the packages that must stay small (the in-box
//     binary, the sandbox contract, the API client, the wire types, ...)
//     may import, transitively (rules, deps_test.go);
//   - TestFloors: the module's floors, ground first (floors,
//     floors_test.go: ground, stand-ins, words, sandbox, infra, agent,
//     session, edge, top). Every package is on one; its non-test files
//     import only its own floor and those below; only cmd/ imports
//     internal/cli, from any file. TestFloorsRules shows each rule
//     failing on a graph made for it;
//   - TestFileSizes: no non-test Go file over 700 lines (size_test.go).
package deptest
