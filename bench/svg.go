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
	svgHead   = 84 // below the title, the run line and the machine line: the headline
	svgRow    = 56
	svgGap    = 28 // between the sandboxes and the floors
	svgBottom = 78
)

// isFloor says whether a variant is a floor (no sandbox) rather than a sandbox.
func isFloor(name string) bool { return name == ForkExec || name == EmptyGo }

// WriteSVG draws each variant's wall-time distribution as a box plot (box: quartiles,
// line: median, whiskers: min and p90, dots: every sample, jittered) on one shared
// logarithmic millisecond axis: the variants differ by a factor of ten and more, and
// on a loaded machine a few launches take a hundred times the median. The axis starts
// just below the fastest sample and ends at the slowest 0.5% overall; samples beyond
// are drawn at its edge as triangles. Above the plot: what ran, when, on what
// machine, and the headline ratios against their targets; the floors (no sandbox)
// are drawn apart, below the sandboxes.
func (r *Report) WriteSVG(w io.Writer) error {
	var all []float64
	for _, v := range r.Variants {
		all = append(all, v.Samples...)
	}
	if len(all) == 0 {
		return fmt.Errorf("bench: no samples to draw")
	}
	sort.Float64s(all)
	lo := tickBelow(math.Max(all[0]*0.9, 0.01))
	hi := tickAbove(math.Max(quantile(all, 0.995), lo*2))
	plotW := float64(svgWidth - svgLeft - svgRight)
	x := func(v float64) float64 {
		v = math.Min(math.Max(v, lo), hi)
		return svgLeft + math.Log10(v/lo)/math.Log10(hi/lo)*plotW
	}
	// Sandboxes first, floors after a gap.
	var order []VariantReport
	for _, floors := range []bool{false, true} {
		for _, v := range r.Variants {
			if isFloor(v.Name) == floors {
				order = append(order, v)
			}
		}
	}
	lines := headline(r)
	top := svgHead + 16*len(lines) + 12
	rowY := make([]float64, len(order))
	y := float64(top)
	for i, v := range order {
		if i > 0 && isFloor(v.Name) && !isFloor(order[i-1].Name) {
			y += svgGap
		}
		rowY[i] = y + svgRow/2
		y += svgRow
	}
	axisY := int(y)
	height := axisY + svgBottom

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("agentbox bench: wall time per launch of %q (ms)", strings.Join(r.Command, " "))
	fmt.Fprintf(&b, `<text x="20" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", svgEscape(title))
	run := fmt.Sprintf("%s · agentbox %s · %d rounds interleaved (+%d warm-up), shuffled order · load %.2f → %.2f",
		r.Start.UTC().Format("2006-01-02 15:04 UTC"), orUnknown(r.Version), r.Runs, r.Warmup, r.LoadStart, r.LoadEnd)
	fmt.Fprintf(&b, `<text x="20" y="42" fill="#333">%s</text>`+"\n", svgEscape(run))
	fmt.Fprintf(&b, `<text x="20" y="60" fill="#333">%s</text>`+"\n", svgEscape("machine: "+r.Machine.String()))
	for i, l := range lines {
		fmt.Fprintf(&b, `<text x="20" y="%d" font-weight="bold" fill="%s">%s</text>`+"\n", 84+16*i, l.color, svgEscape(l.text))
	}

	// Grid and axis: 1, 2, 5 per decade.
	for dec := math.Pow(10, math.Floor(math.Log10(lo))); dec < hi*1.001; dec *= 10 {
		for _, m := range []float64{1, 2, 5} {
			t := dec * m
			if t < lo*0.999 {
				continue
			}
			if t > hi*1.001 {
				break
			}
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x(t), top-5, x(t), axisY, stroke)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(t), axisY+16, trimFloat(t))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">ms (log scale)</text>`+"\n", svgLeft+int(plotW)/2, axisY+32)
	for i, v := range order {
		if i > 0 && isFloor(v.Name) && !isFloor(order[i-1].Name) {
			sy := rowY[i] - svgRow/2 - svgGap/2
			fmt.Fprintf(&b, `<line x1="20" y1="%.1f" x2="%d" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/>`+"\n", sy, svgWidth-svgRight, sy)
			fmt.Fprintf(&b, `<text x="20" y="%.1f" fill="#555" font-size="11">floors: no sandbox</text>`+"\n", sy+12)
		}
	}

	colors := []string{"#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#7f7f7f", "#9467bd", "#8c564b", "#17becf"}
	for i, v := range order {
		cy := rowY[i]
		col := colors[i%len(colors)]
		if isFloor(v.Name) {
			col = "#7f7f7f"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", svgLeft-10, cy-6, svgEscape(v.Name))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle" fill="#555" font-size="11">median %.2f</text>`+"\n", svgLeft-10, cy+9, v.Wall.Median)
		s := append([]float64(nil), v.Samples...)
		sort.Float64s(s)
		if len(s) == 0 {
			continue
		}
		q1, q3 := quantile(s, 0.25), quantile(s, 0.75)
		// Dots first, so that the box and the median stay readable over them.
		for j, val := range v.Samples {
			jit := (float64((j*7919)%23)/22 - 0.5) * 24 // deterministic jitter
			if val > hi {
				fmt.Fprintf(&b, `<path d="M%.1f %.1f l-6 -4 l0 8 z" fill="%s"/>`+"\n", x(hi), cy+jit, col)
				continue
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.2" fill="%s" fill-opacity="0.6"/>`+"\n", x(val), cy+jit, col)
		}
		// Whisker min..p90, box q1..q3, median line.
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x(v.Wall.Min), cy, x(v.Wall.P90), cy, col)
		for _, e := range []float64{v.Wall.Min, v.Wall.P90} {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x(e), cy-8, x(e), cy+8, col)
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="24" fill="%s" fill-opacity="0.12" stroke="%s"/>`+"\n", x(q1), cy-12, math.Max(x(q3)-x(q1), 1), col, col)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="3"/>`+"\n", x(v.Wall.Median), cy-12, x(v.Wall.Median), cy+12)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555" font-size="11">box: quartiles; thick line: median; whiskers: min and p90; dots: samples; triangles: beyond the axis</text>`+"\n", svgLeft, height-24)
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555" font-size="11">%s</text>`+"\n", svgLeft, height-8, svgEscape("measured with: "+"agentbox bench --runs "+fmt.Sprint(r.Runs)+" --warmup "+fmt.Sprint(r.Warmup)+" --svg FILE"))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

type headlineLine struct{ text, color string }

// headline is the picture's summary: each target with its ratio and verdict, then
// what the session extras add.
func headline(r *Report) []headlineLine {
	var out []headlineLine
	for _, t := range r.Targets {
		verdict, col := "not met", "#b00020"
		if t.Met {
			verdict, col = "met", "#1a7f37"
		}
		out = append(out, headlineLine{fmt.Sprintf("%s: measured %.3f, %s", t.What, t.Ratio, verdict), col})
	}
	if r.DefaultsAdd > 0 {
		out = append(out, headlineLine{fmt.Sprintf("the session extras (snapshot, audit, record) add %.2f ms per launch (median)", r.DefaultsAdd), "#333"})
	}
	return out
}

// tickBelow returns the largest 1-2-5 value not above v; tickAbove the smallest not below.
func tickBelow(v float64) float64 {
	dec := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{5, 2, 1} {
		if dec*m <= v*1.0000001 {
			return dec * m
		}
	}
	return dec
}

func tickAbove(v float64) float64 {
	dec := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if dec*m >= v*0.9999999 {
			return dec * m
		}
	}
	return dec * 10
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
