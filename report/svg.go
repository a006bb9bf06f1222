package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// A line of a chart: one value per second.
type line struct {
	Name   string
	Color  string
	Values []float64
}

// band shades a span of the x axis, such as the time a node was down.
type band struct {
	From, To float64
	Label    string
}

const (
	chartW, chartH         = 720, 220
	padL, padR, padT, padB = 64, 16, 28, 36
)

// lineChart draws lines over seconds as an inline SVG, with a y axis from
// zero to a round maximum and the bands shaded behind the lines.
func lineChart(id, title, unit string, lines []line, bands []band) string {
	return chart{ID: id, Title: title, Unit: unit, Lines: lines, Bands: bands}.draw()
}

// mark is a dot above the plot at one x, such as a run's verdict.
type mark struct {
	Color, Title string
}

// chart is a line chart: one value per x step of each line, x labelled in
// seconds unless XLabels names each step; Marks, one per step, are dots
// in a row above the plot.
type chart struct {
	ID, Title, Unit string
	Lines           []line
	Bands           []band
	XLabels         []string
	Marks           []mark
	Height          int // default chartH
}

func (c chart) draw() string {
	h := c.Height
	if h == 0 {
		h = chartH
	}
	top := padT
	if len(c.Marks) > 0 {
		top += 16
	}
	n := len(c.XLabels)
	peak := 0.0
	for _, l := range c.Lines {
		n = max(n, len(l.Values))
		for _, v := range l.Values {
			if !math.IsNaN(v) { // a run without this line's figure
				peak = max(peak, v)
			}
		}
	}
	peak = niceCeil(peak)
	x := func(s float64) float64 {
		if n <= 1 {
			return padL
		}
		return padL + s*float64(chartW-padL-padR)/float64(n-1)
	}
	y := func(v float64) float64 { return float64(h-padB) - v/peak*float64(h-top-padB) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" id="%s" viewBox="0 0 %d %d" role="img" aria-label="%s">`, c.ID, chartW, h, esc(c.Title))
	fmt.Fprintf(&b, `<title>%s</title>`, esc(c.Title))
	fmt.Fprintf(&b, `<text x="%d" y="16" class="ct">%s</text>`, padL, esc(c.Title))
	for _, bd := range c.Bands {
		x0, x1 := x(bd.From), x(max(bd.To, bd.From+0.2))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" class="band"/>`, x0, top, x1-x0, h-top-padB)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="bl">%s</text>`, x0+3, top+12, esc(bd.Label))
	}
	for i := 0; i <= 4; i++ {
		v := peak * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" class="grid"/>`, padL, chartW-padR, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" class="yl">%s</text>`, padL-6, y(v)+4, esc(short(v)))
	}
	fmt.Fprintf(&b, `<text x="12" y="%d" class="yl" transform="rotate(-90 12 %d)">%s</text>`, h/2, h/2, esc(c.Unit))
	step := max(1, n/10)
	if c.XLabels != nil {
		step = 1
	}
	for s := 0; s < n; s += step {
		label, style := fmt.Sprintf("%ds", s), ""
		if c.XLabels != nil {
			label = c.XLabels[s]
			switch { // the ends' labels stay inside the chart
			case s == n-1 && n > 1:
				style = ` style="text-anchor:end"`
			case s == 0 && n > 1:
				style = ` style="text-anchor:start"`
			}
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="xl"%s>%s</text>`, x(float64(s)), h-padB+16, style, esc(label))
	}
	for i, m := range c.Marks {
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="5" fill="%s"><title>%s</title></circle>`, x(float64(i)), padT+4, m.Color, esc(m.Title))
	}
	for i, l := range c.Lines {
		var pts []string
		for s, v := range l.Values {
			if math.IsNaN(v) {
				continue // a run without this line's figure
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(s)), y(v)))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), l.Color)
		if c.XLabels != nil { // few points: each a dot of its own
			for _, p := range pts {
				px, py, _ := strings.Cut(p, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`, px, py, l.Color)
			}
		}
		lx := padL + 8 + i*150
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" class="lg">%s</text>`,
			lx, h-12, l.Color, lx+14, h-3, esc(l.Name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// timeline draws events on a horizontal axis of seconds.
func timeline(id, title string, seconds float64, events []event) string {
	rows := max(1, min(len(events), 4))
	h := 40 + 34*rows
	x := func(s float64) float64 {
		return padL + s/math.Max(seconds, 1)*float64(chartW-padL-padR)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" id="%s" viewBox="0 0 %d %d" role="img" aria-label="%s">`, id, chartW, h, esc(title))
	fmt.Fprintf(&b, `<title>%s</title><text x="%d" y="16" class="ct">%s</text>`, esc(title), padL, esc(title))
	axisY := 40
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" class="axis"/>`, padL, chartW-padR, axisY, axisY)
	for s := 0.0; s <= seconds; s += math.Max(1, math.Round(seconds/10)) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="xl">%.0fs</text>`, x(s), axisY-6, s)
	}
	for i, e := range events {
		ex := x(e.Second)
		ty := axisY + 24 + 34*(i%rows)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" class="tick"/>`, ex, ex, axisY, ty-10, e.Color)
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="5" fill="%s"/>`, ex, axisY, e.Color)
		anchor := "start"
		if ex > chartW*0.6 {
			anchor = "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="ev" text-anchor="%s">%.1fs %s</text>`, ex, ty, anchor, e.Second, esc(e.What))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

type event struct {
	Second float64
	What   string
	Color  string
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// short writes an axis label: 12000 as 12k, 0.25 as 0.25.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return trim(v/1e6) + "M"
	case v >= 1e3:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}

func trim(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func esc(s string) string { return html.EscapeString(s) }
