package dashboard

import (
	"fmt"
	"html/template"
	"net/url"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// pageNames are the templates/<name>.html files; each defines "content"
// and is executed inside templates/layout.html.
var pageNames = []string{"topics", "topic", "upcoming", "timeliness", "message", "dead", "login", "error"}

var funcs = template.FuncMap{
	"time": fmtTime,
	"rel":  fmtRel,
	"age": func(t, now time.Time) string {
		if t.IsZero() || !now.After(t) {
			return "—"
		}
		return fmtAge(now.Sub(t))
	},
	"lat":        fmtLat,
	"dur":        fmtDur,
	"deliveryOf": deliveryOf,
	"span":       fmtAge,
	"rate":       fmtRate,
	"pct": func(part, whole int64) string {
		if whole == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
	},
	"topicURL": func(t string) string { return "/ui/topics/" + url.PathEscape(t) },
	"msgURL": func(t, id string) string {
		return "/ui/message?" + url.Values{"topic": {t}, "id": {id}}.Encode()
	},
	"deadURL": func(t string) string { return deadURL(t) },
	"counter": func(s Summary, c Counter) int64 { return s.Counts[c] },
	"perMin":  func(s Summary, c Counter) string { return fmtRate(s.Rate(c)) },
	"q":       func(s Summary, q float64) string { return latOrDash(s, s.Quantile(q)) },
	"lmax":    func(s Summary) string { return latOrDash(s, s.Max()) },
	"lmean":   func(s Summary) string { return latOrDash(s, s.Mean()) },
	"cancellable": func(m *domain.Message) bool {
		return m.State == domain.StateScheduled || m.State == domain.StateReady || m.State == domain.StateInflight
	},
	"reschedulable": func(m *domain.Message) bool {
		return m.State == domain.StateScheduled || m.State == domain.StateReady
	},
	"rateLimit": func(r *domain.RateLimit) string {
		if r == nil {
			return "none"
		}
		return fmt.Sprintf("%g/s, burst %d", r.PerSecond, r.Burst)
	},
}

func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: parse layout: %w", err)
	}
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.Must(base.Clone()).ParseFS(assets, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: parse page %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// latOrDash shows a lateness, or "—" when there were no deliveries.
func latOrDash(s Summary, d time.Duration) string {
	if s.Deliveries() == 0 {
		return "—"
	}
	return fmtLat(d)
}
