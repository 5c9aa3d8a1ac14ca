package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/auth"
)

// viewer is who is looking: a logged-in token, or anyone when auth is off.
type viewer struct {
	authOff bool
	token   *auth.Token // nil when auth is off or not logged in
	session *session    // nil when not logged in
	expires time.Time
	csrf    string // the token every form must carry
}

// Read scope: topic stats, upcoming, timeliness and dead letters need
// consume (as GET /v1/topics/{topic} and …/dead do); a message needs
// produce or consume (as GET …/messages/{id} does). Every action needs
// admin on the topic: the dashboard is read-only for other tokens.
const (
	readScope    = auth.Consume
	messageScope = auth.Produce | auth.Consume
	actScope     = auth.Admin
)

func (v *viewer) allows(s auth.Scope, topic string) bool {
	return v.authOff || (v.token != nil && v.token.Allows(s, topic))
}

// CanRead reports whether the viewer may see a topic's stats and dead letters.
func (v *viewer) CanRead(topic string) bool { return v.allows(readScope, topic) }

// CanAct reports whether the viewer may change a topic and its messages.
func (v *viewer) CanAct(topic string) bool { return v.allows(actScope, topic) }

// CanSetPushURL reports whether the viewer may point a topic's push at a
// new URL: admin on "*" (auth.MaySetPushURL).
func (v *viewer) CanSetPushURL() bool {
	return v.authOff || (v.token != nil && v.token.AllowsEverywhere(auth.Admin))
}

// CanActSomewhere reports whether any topic may be changed (for the badge).
func (v *viewer) CanActSomewhere() bool {
	return v.authOff || (v.token != nil && v.token.Has(actScope))
}

// LoggedIn reports whether there is someone to log out.
func (v *viewer) LoggedIn() bool { return v.token != nil }

// Name is shown in the header.
func (v *viewer) Name() string {
	switch {
	case v.authOff:
		return "auth off"
	case v.token != nil:
		return v.token.Name
	}
	return ""
}

// CSRF is the form token.
func (v *viewer) CSRF() string { return v.csrf }

// AuthOff reports whether the server runs without tokens.
func (v *viewer) AuthOff() bool { return v.authOff }

type viewerKey struct{}

func withViewer(ctx context.Context, v *viewer) context.Context {
	return context.WithValue(ctx, viewerKey{}, v)
}

func viewerFrom(r *http.Request) *viewer {
	v, _ := r.Context().Value(viewerKey{}).(*viewer)
	if v == nil {
		v = &viewer{}
	}
	return v
}

// flashes are the messages a redirect after an action may show, chosen by
// code so a crafted link cannot put words on the page.
var flashes = map[string]string{
	"cancelled":     "Message cancelled.",
	"rescheduled":   "Message rescheduled.",
	"replayed":      "Dead letter replayed: it is ready for delivery again.",
	"replayed-all":  "%d dead letters replayed.",
	"deleted":       "Dead letter purged.",
	"purged":        "%d dead letters purged.",
	"settings":      "Settings saved.",
	"paused":        "Topic paused: nothing is delivered until it is resumed; sends are still accepted.",
	"resumed":       "Topic resumed.",
	"topic-deleted": "Topic deleted: its settings are gone; a send would make it again, with the defaults.",
}

func flashFrom(r *http.Request) string {
	f, ok := flashes[r.URL.Query().Get("done")]
	if !ok {
		return ""
	}
	if strings.Contains(f, "%d") {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		return fmt.Sprintf(f, n)
	}
	return f
}
