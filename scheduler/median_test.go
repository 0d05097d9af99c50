package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	shapes := map[string]func(n int) []float64{
		"random": func(n int) []float64 {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = rng.Float64() * 100
			}
			return xs
		},
		"few distinct": func(n int) []float64 {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = float64(rng.IntN(3))
			}
			return xs
		},
		"all equal": func(n int) []float64 {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = 42
			}
			return xs
		},
		"sorted": func(n int) []float64 {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = float64(i)
			}
			return xs
		},
		"reversed": func(n int) []float64 {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = float64(n - i)
			}
			return xs
		},
		"organ pipe": func(n int) []float64 {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = float64(min(i, n-i))
			}
			return xs
		},
	}
	for name, gen := range shapes {
		for _, n := range []int{0, 1, 2, 3, 4, 5, 10, 31, 100, 101, 1000} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				xs := gen(n)
				sorted := slices.Clone(xs)
				slices.Sort(sorted)
				want := 0.0
				if n > 0 {
					want = sorted[n/2]
					if n%2 == 0 {
						want = sorted[n/2-1]/2 + sorted[n/2]/2
					}
				}
				if got := median(xs); got != want {
					t.Errorf("median = %v, want %v", got, want)
				}
			})
		}
	}
}
