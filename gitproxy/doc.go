// Package gitproxy is the git endpoint of the boxes.
package gitproxy
