package audit

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
)

// BenchmarkSortListing sorts a 100-entry listing in getdents64's hash order, as
// the launch walk of the scale bench's tree meets 200 of them: "names" is how a
// whole listing is sorted now (before its lstats), "withStats" how it was (its
// stats swapped beside it), which replay still does for a listing cut by the
// entry bound.
func BenchmarkSortListing(b *testing.B) {
	listing := func() []os.DirEntry {
		ents := make([]os.DirEntry, 100)
		for i := range ents {
			ents[i] = newDirent(fmt.Sprintf("f%03d.txt", i), 0)
		}
		r := rand.New(rand.NewPCG(1, 2))
		r.Shuffle(len(ents), func(i, j int) { ents[i], ents[j] = ents[j], ents[i] })
		return ents
	}
	orig := listing()
	ents := make([]os.DirEntry, len(orig))
	stats := make([]entryStat, len(orig))
	b.Run("names", func(b *testing.B) {
		for b.Loop() {
			copy(ents, orig)
			sortNames(ents)
		}
	})
	b.Run("withStats", func(b *testing.B) {
		for b.Loop() {
			copy(ents, orig)
			sort.Sort(byName{ents, stats})
		}
	})
	b.Run("sortSlice", func(b *testing.B) {
		for b.Loop() {
			copy(ents, orig)
			sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
		}
	})
}
