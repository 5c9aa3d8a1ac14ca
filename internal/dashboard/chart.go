package dashboard

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
)

// Charts are SVG drawn on the server: no script runs in the dashboard, so
// its Content-Security-Policy forbids scripts outright, nothing is
// vendored, pages render at once (also in screenshots and text browsers),
// and tests can assert on the markup. Colours come from style.css classes;
// a <title> per bar gives the exact value on hover.

// bar is one column of a bar chart.
type bar struct {
	Label string // x-axis label (shown every labelEvery bars)
	Value int64
	Tip   string // hover text
	Class string // extra CSS class, e.g. "warn"
}

// chartOpts sizes a chart.
type chartOpts struct {
	Title      string // accessible name
	Width      int    // viewBox width; default 960
	Height     int    // viewBox height; default 220
	LabelEvery int    // label every n-th bar; default about 12 labels
	Empty      string // text drawn when every value is 0
}

const (
	padLeft, padRight, padTop, padBottom = 48, 12, 14, 30
)

// barChart draws bars as an inline SVG. Values are numbers and labels are
// escaped, so the result is safe HTML.
func barChart(bars []bar, o chartOpts) template.HTML {
	if o.Width == 0 {
		o.Width = 960
	}
	if o.Height == 0 {
		o.Height = 220
	}
	if o.LabelEvery == 0 {
		o.LabelEvery = max(1, (len(bars)+11)/12)
	}
	var top int64
	for _, b := range bars {
		top = max(top, b.Value)
	}
	ticks := niceTicks(top)
	ymax := ticks[len(ticks)-1]
	plotW := float64(o.Width - padLeft - padRight)
	plotH := float64(o.Height - padTop - padBottom)
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		o.Width, o.Height, html.EscapeString(o.Title))
	for _, t := range ticks {
		y := float64(padTop) + plotH - plotH*float64(t)/float64(ymax)
		fmt.Fprintf(&sb, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padLeft, o.Width-padRight, y, y)
		fmt.Fprintf(&sb, `<text class="axis" x="%d" y="%.1f" text-anchor="end">%s</text>`, padLeft-6, y+4, shortNum(t))
	}
	n := max(len(bars), 1)
	slot := plotW / float64(n)
	gap := math.Min(slot*0.2, 4)
	for i, b := range bars {
		x := float64(padLeft) + float64(i)*slot
		if b.Value > 0 {
			h := math.Max(plotH*float64(b.Value)/float64(ymax), 1.5)
			fmt.Fprintf(&sb, `<rect class="bar %s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s</title></rect>`,
				html.EscapeString(b.Class), x+gap/2, float64(padTop)+plotH-h, math.Max(slot-gap, 1), h, html.EscapeString(b.Tip))
		}
		if i%o.LabelEvery == 0 && b.Label != "" {
			fmt.Fprintf(&sb, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">%s</text>`,
				x+slot/2, o.Height-padBottom+16, html.EscapeString(b.Label))
		}
	}
	fmt.Fprintf(&sb, `<line class="baseline" x1="%d" x2="%d" y1="%d" y2="%d"/>`, padLeft, o.Width-padRight, o.Height-padBottom, o.Height-padBottom)
	if top == 0 && o.Empty != "" {
		fmt.Fprintf(&sb, `<text class="empty" x="%d" y="%d" text-anchor="middle">%s</text>`,
			padLeft+int(plotW)/2, padTop+int(plotH)/2, html.EscapeString(o.Empty))
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String()) // #nosec G203 -- built only from numbers and html.EscapeString'd text
}

// niceTicks returns 0 and up to 4 round tick values covering top.
func niceTicks(top int64) []int64 {
	if top <= 0 {
		return []int64{0, 1}
	}
	raw := float64(top) / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if mag*m >= raw {
			step = mag * m
			break
		}
	}
	st := int64(math.Max(1, math.Ceil(step)))
	out := []int64{0}
	for v := st; ; v += st {
		out = append(out, v)
		if v >= top {
			return out
		}
	}
}

// shortNum shows 1500 as 1.5k.
func shortNum(n int64) string {
	switch {
	case n >= 1_000_000:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e6)) + "M"
	case n >= 10_000:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e3)) + "k"
	}
	return fmt.Sprint(n)
}

func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }
