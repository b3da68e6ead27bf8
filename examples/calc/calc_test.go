package calc

import "testing"

func TestSum(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want int
	}{
		{nil, 0},
		{[]int{4}, 4},
		{[]int{1, 2, 3}, 6},
	} {
		if got := Sum(c.in); got != c.want {
			t.Errorf("Sum(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestMean(t *testing.T) {
	if got := Mean([]int{2, 4, 6}); got != 4 {
		t.Errorf("Mean([2 4 6]) = %v, want 4", got)
	}
}
