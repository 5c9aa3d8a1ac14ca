package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// WritePlot writes an SVG with one panel per scenario that measured
// lateness: the CDF of each target's lateness (merged over runs) on a log
// x axis in µs. Values of 0 µs sit on the left edge. It writes nothing
// useful (an empty note) when no scenario measured lateness.
func WritePlot(w io.Writer, title string, scenarios []ScenarioReport) error {
	var panels []ScenarioReport
	for _, s := range scenarios {
		for _, r := range s.Results {
			if r.Lateness != nil && r.Lateness.Count() > 0 {
				panels = append(panels, s)
				break
			}
		}
	}
	const (
		W      = 900
		panelH = 420
		left   = 70
		right  = 230
		top    = 50
		bottom = 55
	)
	H := 30 + max(len(panels), 1)*panelH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	if len(panels) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="60">no scenario measured lateness</text>`+"\n", left)
	}
	for pi, s := range panels {
		y0 := 30 + pi*panelH
		pw, ph := W-left-right, panelH-top-bottom
		px, py := left, y0+top
		// x range in decades of µs.
		lo, hi := math.Inf(1), 1.0
		for _, r := range s.Results {
			h := r.Lateness
			if h == nil || h.Count() == 0 {
				continue
			}
			for _, bk := range h.Buckets() {
				if bk.Hi > 0 {
					lo = math.Min(lo, float64(max(bk.Lo, 1)))
					break
				}
			}
			hi = math.Max(hi, float64(h.Max()))
		}
		if math.IsInf(lo, 1) {
			lo = 1
		}
		dlo := math.Floor(math.Log10(lo))
		dhi := math.Max(math.Ceil(math.Log10(hi)), dlo+1)
		xOf := func(us float64) float64 {
			if us < math.Pow(10, dlo) {
				us = math.Pow(10, dlo)
			}
			return float64(px) + (math.Log10(us)-dlo)/(dhi-dlo)*float64(pw)
		}
		yOf := func(q float64) float64 { return float64(py) + (1-q)*float64(ph) }
		var ps []string
		for _, p := range s.Params {
			ps = append(ps, p.Name+"="+p.Value)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" font-weight="bold">%s scenario: CDF of lateness (receive − due)</text>`+"\n", px, y0+22, html.EscapeString(s.Scenario))
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">%s</text>`+"\n", px, y0+38, html.EscapeString(strings.Join(ps, " ")))
		// grid
		for d := dlo; d <= dhi; d++ {
			x := xOf(math.Pow(10, d))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, py, x, py+ph)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, py+ph+16, usLabel(math.Pow(10, d)))
		}
		for _, q := range []float64{0, 0.25, 0.5, 0.75, 0.9, 0.99, 1} {
			y := yOf(q)
			dash := ""
			if q == 0.9 || q == 0.99 {
				dash = ` stroke-dasharray="4 3"`
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"%s/>`+"\n", px, y, px+pw, y, dash)
			if q == 0.99 { // too close to 1 for the axis: label it inside the plot
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="10" fill="#777">0.99</text>`+"\n", px+4, y+11)
				continue
			}
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", px-6, y+4, q)
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", px, py, pw, ph)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">lateness (log scale; 0 drawn at the left edge)</text>`+"\n", px+pw/2, py+ph+36)
		fmt.Fprintf(&b, `<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle">fraction delivered</text>`+"\n", px-48, py+ph/2)
		// curves
		li := 0
		for ri, r := range s.Results {
			h := r.Lateness
			if h == nil || h.Count() == 0 {
				continue
			}
			col := plotColors[ri%len(plotColors)]
			var pts []string
			var cum uint64
			prevY := yOf(0)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(0), prevY))
			for _, bk := range h.Buckets() {
				cum += bk.Count
				x := xOf(float64(min(bk.Hi, h.Max())))
				y := yOf(float64(cum) / float64(h.Count()))
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, prevY), fmt.Sprintf("%.1f,%.1f", x, y))
				prevY = y
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", col, strings.Join(pts, " "))
			ly := py + 10 + li*46
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", px+pw+12, ly, px+pw+32, ly, col)
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", px+pw+38, ly+4, html.EscapeString(r.Target))
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">p50 %s · p99 %s · max %s</text>`+"\n", px+pw+38, ly+18,
				usLabel(float64(h.Quantile(0.5))), usLabel(float64(h.Quantile(0.99))), usLabel(float64(h.Max())))
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">n=%d</text>`+"\n", px+pw+38, ly+31, h.Count())
			li++
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// usLabel renders µs as "10µs", "1ms", "2.5s".
func usLabel(us float64) string {
	switch {
	case us >= 1e6:
		return trimF(us/1e6) + "s"
	case us >= 1e3:
		return trimF(us/1e3) + "ms"
	}
	return trimF(us) + "µs"
}

func trimF(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
