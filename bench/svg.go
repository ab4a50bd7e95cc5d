package bench

import (
	"fmt"
	"html"
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
// linear millisecond axis. Samples beyond the axis's end (the slowest 1% overall) are
// drawn at the edge as triangles, so one outlier does not squash the rest.
func (r *Report) WriteSVG(w io.Writer) error {
	var all []float64
	for _, v := range r.Variants {
		all = append(all, v.Samples...)
	}
	if len(all) == 0 {
		return fmt.Errorf("bench: no samples to draw")
	}
	sort.Float64s(all)
	hi := niceCeil(quantile(all, 0.99) * 1.05)
	plotW := float64(svgWidth - svgLeft - svgRight)
	x := func(v float64) float64 { return svgLeft + math.Min(v, hi)/hi*plotW }
	height := svgTop + svgRow*len(r.Variants) + svgBottom

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("agentbox bench: %s, %d rounds, wall time per launch (ms)", strings.Join(r.Command, " "), r.Runs)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", svgLeft, html.EscapeString(title))

	// Grid and axis.
	step := niceStep(hi / 8)
	axisY := svgTop + svgRow*len(r.Variants)
	for t := 0.0; t <= hi+1e-9; t += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x(t), svgTop-5, x(t), axisY)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(t), axisY+16, trimFloat(t))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">ms</text>`+"\n", svgLeft+int(plotW)/2, axisY+32)

	colors := []string{"#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#7f7f7f", "#9467bd", "#8c564b"}
	for i, v := range r.Variants {
		cy := float64(svgTop + svgRow*i + svgRow/2)
		col := colors[i%len(colors)]
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", svgLeft-10, cy-6, html.EscapeString(v.Name))
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

// niceStep rounds d up to 1, 2 or 5 times a power of ten.
func niceStep(d float64) float64 {
	if d <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(d)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= d {
			return m * p
		}
	}
	return 10 * p
}

func niceCeil(v float64) float64 {
	s := niceStep(v / 8)
	return math.Ceil(v/s) * s
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
