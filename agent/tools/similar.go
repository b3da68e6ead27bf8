package tools

import (
	"slices"
	"sort"
	"strings"
)

// Similarity between lines is the Dice coefficient of their byte bigrams:
// cheap (linear in the line length once profiled), forgiving of typos, and
// order-sensitive enough to rank "the same line with a small change" first.

type profile []uint16

func newProfile(s string) profile {
	if s == "" {
		return nil
	}
	p := make(profile, 0, len(s)+1)
	prev := byte(0) // a sentinel, so one-character strings have bigrams
	for i := 0; i < len(s); i++ {
		p = append(p, uint16(prev)<<8|uint16(s[i]))
		prev = s[i]
	}
	p = append(p, uint16(prev)<<8)
	slices.Sort(p)
	return p
}

// similarity is in [0, 1]; 1 for equal strings.
func similarity(a, b profile) float64 {
	if len(a) == 0 && len(b) == 0 {
		return 1
	}
	common := 0
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			common++
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return 2 * float64(common) / float64(len(a)+len(b))
}

// nearMatch is a window of file lines resembling the text searched for.
type nearMatch struct {
	start int // 0-based index of the first line
	n     int // lines
	score float64
	// differ is the index (within the window) of the first line that differs
	// from the searched text, -1 if they only differ in whitespace.
	differ int
}

// nearest finds the window of len(want) consecutive lines of have that is
// most similar to want, comparing lines with their surrounding whitespace
// trimmed and weighting each by its length (so "}" counts for little).
//
// To stay fast on big files it anchors on want's longest line: the file lines
// most similar to it place candidate windows, and only those are scored in
// full.
func nearest(have, want []string) (nearMatch, bool) {
	if len(have) == 0 || len(want) == 0 {
		return nearMatch{}, false
	}
	k := min(len(want), len(have))
	wp := make([]profile, len(want))
	anchor := 0
	for j, w := range want {
		wp[j] = newProfile(strings.TrimSpace(w))
		if len(strings.TrimSpace(w)) > len(strings.TrimSpace(want[anchor])) {
			anchor = j
		}
	}
	hp := make([]profile, len(have))
	profileOf := func(i int) profile {
		if hp[i] == nil {
			hp[i] = newProfile(strings.TrimSpace(have[i]))
		}
		return hp[i]
	}
	type cand struct {
		line  int
		score float64
	}
	cands := make([]cand, 0, len(have))
	for i := range have {
		cands = append(cands, cand{i, similarity(profileOf(i), wp[anchor])})
	}
	sort.SliceStable(cands, func(a, b int) bool { return cands[a].score > cands[b].score })
	const maxCandidates = 64
	best := nearMatch{score: -1}
	tried := map[int]bool{}
	for _, c := range cands[:min(len(cands), maxCandidates)] {
		start := c.line - anchor
		start = max(0, min(start, len(have)-k))
		if tried[start] {
			continue
		}
		tried[start] = true
		var num, den float64
		for j := 0; j < k; j++ {
			h, w := strings.TrimSpace(have[start+j]), strings.TrimSpace(want[j])
			weight := float64(max(len(h), len(w)) + 1)
			num += weight * similarity(profileOf(start+j), wp[j])
			den += weight
		}
		if s := num / den; s > best.score {
			best = nearMatch{start: start, n: k, score: s}
		}
	}
	best.differ = -1
	for j := 0; j < best.n; j++ {
		if strings.TrimSpace(have[best.start+j]) != strings.TrimSpace(want[j]) {
			best.differ = j
			break
		}
	}
	return best, true
}

// similarNames returns up to n names from names resembling name, best first.
func similarNames(name string, names []string, n int) []string {
	type scored struct {
		name  string
		score float64
	}
	np := newProfile(strings.ToLower(name))
	var out []scored
	for _, c := range names {
		if s := similarity(np, newProfile(strings.ToLower(c))); s >= 0.5 {
			out = append(out, scored{c, s})
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].score > out[b].score })
	var res []string
	for _, s := range out[:min(len(out), n)] {
		res = append(res, s.name)
	}
	return res
}
