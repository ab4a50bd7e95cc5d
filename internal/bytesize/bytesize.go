// Package bytesize reads and writes byte counts with a binary suffix (K, M, G, T),
// as the size flags take them and the plan shows them.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Parse reads a byte count with an optional binary suffix (K, M, G, T); a
// number without one is bytes, as --git-save-max-size reads it. Zero, negative
// and overflowing counts are refused.
func Parse(s string) (int64, error) {
	mult := int64(1)
	num := s
	if n := len(s); n > 0 {
		if i := strings.IndexByte("KkMmGgTt", s[n-1]); i >= 0 {
			mult = 1 << (10 * (i/2 + 1))
			num = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v <= 0 || num[0] == '+' || v > math.MaxInt64/mult {
		return 0, fmt.Errorf("not a positive size (a number with an optional suffix K, M, G or T; without one it is bytes)")
	}
	return v * mult, nil
}

// Format writes n bytes the way Parse reads them, in the largest unit that
// divides it, or with one decimal in the largest that fits (for messages).
func Format(n int64) string {
	units := "KMGT"
	for i := len(units) - 1; i >= 0; i-- {
		u := int64(1) << (10 * (i + 1))
		switch {
		case n >= u && n%u == 0:
			return strconv.FormatInt(n/u, 10) + units[i:i+1]
		case n >= u:
			return strconv.FormatFloat(float64(n)/float64(u), 'f', 1, 64) + units[i:i+1]
		}
	}
	return strconv.FormatInt(n, 10)
}
