package bench

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// SVG geometry, in pixels.
const (
	svgWidth  = 900
	svgLeft   = 150 // room for variant names
	svgRight  = 30
	svgTop    = 50
	svgRow    = 56
	svgBottom = 62
)

// WriteSVG draws each variant's wall-time distribution as a box plot (box: quartiles,
// line: median, whiskers: min and p90, dots: every sample, jittered) on one shared
// logarithmic millisecond axis: the variants differ by a factor of ten and more, and
// on a loaded machine a few launches take a hundred times the median. The axis ends
// at the slowest 0.5% overall; samples beyond are drawn at its edge as triangles.
func (r *Report) WriteSVG(w io.Writer) error {
	var all []float64
	for _, v := range r.Variants {
		all = append(all, v.Samples...)
	}
	if len(all) == 0 {
		return fmt.Errorf("bench: no samples to draw")
	}
	sort.Float64s(all)
	lo := math.Pow(10, math.Floor(math.Log10(math.Max(all[0], 0.01))))
	hi := math.Pow(10, math.Ceil(math.Log10(math.Max(quantile(all, 0.995), lo*10))))
	plotW := float64(svgWidth - svgLeft - svgRight)
	x := func(v float64) float64 {
		v = math.Min(math.Max(v, lo), hi)
		return svgLeft + math.Log10(v/lo)/math.Log10(hi/lo)*plotW
	}
	height := svgTop + svgRow*len(r.Variants) + svgBottom

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("agentbox bench: %s, %d rounds, wall time per launch (ms)", strings.Join(r.Command, " "), r.Runs)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", svgLeft, svgEscape(title))

	// Grid and axis: 1, 2, 5 per decade.
	axisY := svgTop + svgRow*len(r.Variants)
	for dec := lo; dec < hi*1.001; dec *= 10 {
		for _, m := range []float64{1, 2, 5} {
			t := dec * m
			if t > hi*1.001 {
				break
			}
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x(t), svgTop-5, x(t), axisY, stroke)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(t), axisY+16, trimFloat(t))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">ms (log scale)</text>`+"\n", svgLeft+int(plotW)/2, axisY+32)

	colors := []string{"#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#7f7f7f", "#9467bd", "#8c564b"}
	for i, v := range r.Variants {
		cy := float64(svgTop + svgRow*i + svgRow/2)
		col := colors[i%len(colors)]
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", svgLeft-10, cy-6, svgEscape(v.Name))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle" fill="#555" font-size="11">median %.2f</text>`+"\n", svgLeft-10, cy+9, v.Wall.Median)
		s := append([]float64(nil), v.Samples...)
		sort.Float64s(s)
		if len(s) == 0 {
			continue
		}
		q1, q3 := quantile(s, 0.25), quantile(s, 0.75)
		// Whisker min..p90, box q1..q3, median line.
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x(v.Wall.Min), cy, x(v.Wall.P90), cy, col)
		for _, e := range []float64{v.Wall.Min, v.Wall.P90} {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x(e), cy-8, x(e), cy+8, col)
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="24" fill="%s" fill-opacity="0.15" stroke="%s"/>`+"\n", x(q1), cy-12, math.Max(x(q3)-x(q1), 1), col, col)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", x(v.Wall.Median), cy-12, x(v.Wall.Median), cy+12, col)
		for j, val := range v.Samples {
			jit := (float64((j*7919)%23)/22 - 0.5) * 20 // deterministic jitter
			if val > hi {
				fmt.Fprintf(&b, `<path d="M%.1f %.1f l-6 -4 l0 8 z" fill="%s"/>`+"\n", x(hi), cy+jit, col)
				continue
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="1.6" fill="%s" fill-opacity="0.45"/>`+"\n", x(val), cy+jit, col)
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555" font-size="11">box: quartiles; thick line: median; whiskers: min and p90; dots: samples; triangles: beyond the axis</text>`+"\n", svgLeft, height-8)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// svgEscape escapes text for the SVG's XML (html.EscapeString's set, without
// linking package html into agentbox).
// Built when drawn, not by every agentbox process's start-up.
func svgEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}
