package scheduler

import (
	"math/bits"
	"slices"
)

// median returns the median of xs (the mean of the two middle values for
// an even count), or 0 for none. It reorders xs in place and allocates
// nothing: a selection in expected linear time, not a sort, because Pick
// runs it on every request over the whole pool.
func median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	k := n / 2
	selectKth(xs, k)
	m := xs[k]
	if n%2 == 0 {
		// After selection xs[:k] holds the k smallest, so the lower middle
		// is their maximum.
		lo := xs[0]
		for _, v := range xs[1:k] {
			if v > lo {
				lo = v
			}
		}
		m = lo/2 + m/2
	}
	return m
}

// selectKth reorders xs so that xs[k] is the value a sort would put there,
// with nothing larger before it and nothing smaller after it. xs must hold
// no NaN. Quickselect with a median-of-three pivot; if it goes quadratic on
// a hostile order it sorts what is left instead, so the worst case stays
// n log n.
func selectKth(xs []float64, k int) {
	lo, hi := 0, len(xs)-1
	budget := 2 * bits.Len(uint(len(xs)))
	for hi > lo {
		if budget == 0 {
			slices.Sort(xs[lo : hi+1])
			return
		}
		budget--
		mid := lo + (hi-lo)/2
		if xs[mid] < xs[lo] {
			xs[mid], xs[lo] = xs[lo], xs[mid]
		}
		if xs[hi] < xs[lo] {
			xs[hi], xs[lo] = xs[lo], xs[hi]
		}
		if xs[hi] < xs[mid] {
			xs[hi], xs[mid] = xs[mid], xs[hi]
		}
		pivot := xs[mid]
		i, j := lo, hi
		for i <= j {
			for xs[i] < pivot {
				i++
			}
			for xs[j] > pivot {
				j--
			}
			if i <= j {
				xs[i], xs[j] = xs[j], xs[i]
				i++
				j--
			}
		}
		// Now xs[lo..j] ≤ pivot ≤ xs[i..hi], and anything between equals
		// the pivot.
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return
		}
	}
}
