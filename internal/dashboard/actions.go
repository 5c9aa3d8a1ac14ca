package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/auth"
	"github.com/delayq/delayq/internal/domain"
)

// actTarget reads the topic (from the path or the form) and optional id
// of an action and checks that the viewer may act on the topic.
func actTarget(r *http.Request, v *viewer, needID bool) (topic, id string, err error) {
	topic = r.PathValue("topic")
	if topic == "" {
		topic = r.PostForm.Get("topic")
	}
	if err := domain.ValidateTopic(topic); err != nil {
		return "", "", err
	}
	if needID {
		id = r.PostForm.Get("id")
		if err := domain.ValidateID(id); err != nil {
			return "", "", err
		}
	}
	if !v.CanAct(topic) {
		return "", "", fmt.Errorf("%w (topic %s)", errReadOnly, topic)
	}
	return topic, id, nil
}

func messageURL(topic, id, done string) string {
	return "/ui/message?" + url.Values{"topic": {topic}, "id": {id}, "done": {done}}.Encode()
}

func (d *Dashboard) cancelMessage(w http.ResponseWriter, r *http.Request, v *viewer) error {
	topic, id, err := actTarget(r, v, true)
	if err != nil {
		return err
	}
	if _, err := d.q.Cancel(r.Context(), topic, id); err != nil {
		return err
	}
	return redirect(w, r, messageURL(topic, id, "cancelled"))
}

func (d *Dashboard) rescheduleMessage(w http.ResponseWriter, r *http.Request, v *viewer) error {
	topic, id, err := actTarget(r, v, true)
	if err != nil {
		return err
	}
	when, err := parseWhen(r.PostForm.Get("delay"), r.PostForm.Get("deliver_at"))
	if err != nil {
		return err
	}
	if _, err := d.q.Reschedule(r.Context(), topic, id, when); err != nil {
		return err
	}
	return redirect(w, r, messageURL(topic, id, "rescheduled"))
}

// parseWhen reads a reschedule form: a delay ("90s", "2h30m") or an
// absolute RFC 3339 time, exactly one of them.
func parseWhen(delay, at string) (domain.When, error) {
	delay, at = strings.TrimSpace(delay), strings.TrimSpace(at)
	switch {
	case delay != "" && at != "":
		return domain.When{}, domain.Invalid("delay", "give either a delay or a time, not both")
	case delay != "":
		d, err := time.ParseDuration(delay)
		if err != nil {
			return domain.When{}, domain.Invalid("delay", "is not a duration such as 90s or 2h30m")
		}
		return domain.When{Delay: d}, nil
	case at != "":
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return domain.When{}, domain.Invalid("deliver_at", "is not an RFC 3339 time such as 2030-01-02T15:04:05Z")
		}
		return domain.When{DeliverAt: t}, nil
	}
	return domain.When{}, domain.Invalid("delay", "give a delay or a time")
}

func (d *Dashboard) deadReplay(w http.ResponseWriter, r *http.Request, v *viewer) error {
	topic, id, err := actTarget(r, v, true)
	if err != nil {
		return err
	}
	if _, err := d.q.DeadReplay(r.Context(), topic, id); err != nil {
		return err
	}
	return redirect(w, r, deadURL(topic, "done", "replayed"))
}

func (d *Dashboard) deadDelete(w http.ResponseWriter, r *http.Request, v *viewer) error {
	topic, id, err := actTarget(r, v, true)
	if err != nil {
		return err
	}
	if err := d.q.DeadDelete(r.Context(), topic, id); err != nil {
		return err
	}
	return redirect(w, r, deadURL(topic, "done", "deleted"))
}

func (d *Dashboard) deadReplayAll(w http.ResponseWriter, r *http.Request, v *viewer) error {
	topic, _, err := actTarget(r, v, false)
	if err != nil {
		return err
	}
	n, err := d.q.DeadReplayAll(r.Context(), topic)
	if err != nil {
		return err
	}
	return redirect(w, r, deadURL(topic, "done", "replayed-all", "n", strconv.Itoa(n)))
}

func (d *Dashboard) deadPurge(w http.ResponseWriter, r *http.Request, v *viewer) error {
	topic, _, err := actTarget(r, v, false)
	if err != nil {
		return err
	}
	n, err := d.q.DeadPurge(r.Context(), topic)
	if err != nil {
		return err
	}
	return redirect(w, r, deadURL(topic, "done", "purged", "n", strconv.Itoa(n)))
}

func (d *Dashboard) saveSettings(w http.ResponseWriter, r *http.Request, v *viewer) error {
	topic, _, err := actTarget(r, v, false)
	if err != nil {
		return err
	}
	s, err := parseSettings(r.PostForm)
	if err != nil {
		return err
	}
	// The form does not edit a broker target: keep the current one (with
	// its stored credentials, which the engine answers here).
	ti, err := d.q.Topic(r.Context(), topic)
	switch {
	case errors.Is(err, domain.ErrNotFound):
	case err != nil:
		return err
	default:
		s.Deliver = ti.Settings.Deliver
	}
	if err := d.checkPushURL(r, v, topic, s); err != nil {
		return err
	}
	if _, err := d.q.SetTopicSettings(r.Context(), topic, s); err != nil {
		return err
	}
	return redirect(w, r, "/ui/topics/"+url.PathEscape(topic)+"?done=settings")
}

// checkPushURL refuses a new push URL from a token without admin on "*"
// (see auth.MaySetPushURL), as the API does; the form shows such a token
// the URL read-only, so saving it back unchanged passes.
func (d *Dashboard) checkPushURL(r *http.Request, v *viewer, topic string, s domain.TopicSettings) error {
	if v.token == nil || s.Push == nil || v.CanSetPushURL() {
		return nil
	}
	var old string
	ti, err := d.q.Topic(r.Context(), topic)
	switch {
	case errors.Is(err, domain.ErrNotFound):
	case err != nil:
		return err
	case ti.Settings.Push != nil:
		old = ti.Settings.Push.URL
	}
	if !auth.MaySetPushURL(v.token, old, s.Push.URL) {
		return fmt.Errorf("%w: setting or changing the push URL needs a token with admin on \"*\"; the other settings may be saved with the URL as it is", domain.ErrForbidden)
	}
	return nil
}

// parseSettings reads the settings form. An empty field means "server
// default"; the rate limit and push target are off when their first
// field is empty.
func parseSettings(f url.Values) (domain.TopicSettings, error) {
	p := formParser{f: f}
	s := domain.TopicSettings{
		MaxAttempts: p.int("max_attempts"),
		Lease:       p.dur("lease"),
		Backoff: domain.Backoff{
			Initial: p.dur("backoff_initial"), Max: p.dur("backoff_max"),
			Multiplier: p.float("backoff_multiplier"), Jitter: p.float("backoff_jitter"),
			// "0" in these fields means zero (retry at once, no jitter), empty the default.
			InitialSet: strings.TrimSpace(f.Get("backoff_initial")) != "",
			JitterSet:  strings.TrimSpace(f.Get("backoff_jitter")) != "",
		},
	}
	if f.Get("rate_per_second") != "" {
		s.RateLimit = &domain.RateLimit{PerSecond: p.float("rate_per_second"), Burst: p.int("rate_burst")}
	}
	if f.Get("push_url") != "" {
		s.Push = &domain.PushSettings{URL: strings.TrimSpace(f.Get("push_url")), Timeout: p.dur("push_timeout"), Concurrency: p.int("push_concurrency")}
	}
	return s, p.err
}

// formParser reads typed form fields, keeping the first error.
type formParser struct {
	f   url.Values
	err error
}

func (p *formParser) field(name string) string { return strings.TrimSpace(p.f.Get(name)) }

func (p *formParser) fail(name, want string) {
	if p.err == nil {
		p.err = domain.Invalid(name, "must be %s", want)
	}
}

func (p *formParser) int(name string) int {
	s := p.field(name)
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		p.fail(name, "a whole number")
	}
	return n
}

func (p *formParser) float(name string) float64 {
	s := p.field(name)
	if s == "" {
		return 0
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		p.fail(name, "a number")
	}
	return x
}

func (p *formParser) dur(name string) time.Duration {
	s := p.field(name)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.fail(name, "a duration such as 30s or 1h")
	}
	return d
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request, v *viewer) error {
	if v.authOff || v.token != nil {
		return redirect(w, r, "/ui/")
	}
	d.render(w, http.StatusOK, "login", &page{Title: "Log in", V: v})
	return nil
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request, v *viewer) error {
	if v.authOff {
		return redirect(w, r, "/ui/")
	}
	secret := strings.TrimSpace(r.PostForm.Get("token"))
	tok, err := d.cfg.Tokens.Authenticate(http.Header{"Authorization": {"Bearer " + secret}})
	if err != nil {
		d.render(w, http.StatusUnauthorized, "login", &page{Title: "Log in", V: v, Data: "That token is not configured on this server."})
		return nil
	}
	if v.session != nil {
		d.sessions.revoke(v.session) // a fresh session at every login
	}
	value, expires := d.sessions.issue(tok)
	setCookie(w, r, sessionCookie, value, int(expires.Sub(d.cfg.Now())/time.Second))
	return redirect(w, r, "/ui/")
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request, v *viewer) error {
	// The browser forgets the cookie, and this server refuses it until it
	// expires; other servers would still accept a copy until then.
	if v.session != nil {
		d.sessions.revoke(v.session)
	}
	setCookie(w, r, sessionCookie, "", -1)
	return redirect(w, r, "/ui/login")
}

// Pauser pauses and resumes topics (domain.TopicAdmin's PauseTopic; the
// engine implements it). The dashboard finds it on Config.Queue.
type Pauser interface {
	PauseTopic(ctx context.Context, topic string, paused bool) (*domain.TopicInfo, error)
}

// TopicDeleter deletes empty topics (domain.TopicAdmin's DeleteTopic; the
// engine implements it). The dashboard finds it on Config.Queue.
type TopicDeleter interface {
	DeleteTopic(ctx context.Context, topic string) error
}

func (d *Dashboard) deleteTopic(w http.ResponseWriter, r *http.Request, v *viewer) error {
	topic, _, err := actTarget(r, v, false)
	if err != nil {
		return err
	}
	if d.deleter == nil {
		return fmt.Errorf("%w: this server's queue cannot delete topics", domain.ErrInvalid)
	}
	if err := d.deleter.DeleteTopic(r.Context(), topic); err != nil {
		return err
	}
	return redirect(w, r, "/ui/?done=topic-deleted")
}

func (d *Dashboard) pauseTopic(w http.ResponseWriter, r *http.Request, v *viewer) error {
	return d.setPaused(w, r, v, true)
}

func (d *Dashboard) resumeTopic(w http.ResponseWriter, r *http.Request, v *viewer) error {
	return d.setPaused(w, r, v, false)
}

func (d *Dashboard) setPaused(w http.ResponseWriter, r *http.Request, v *viewer, paused bool) error {
	topic, _, err := actTarget(r, v, false)
	if err != nil {
		return err
	}
	if d.pauser == nil {
		return fmt.Errorf("%w: this server's queue cannot pause topics", domain.ErrInvalid)
	}
	if _, err := d.pauser.PauseTopic(r.Context(), topic, paused); err != nil {
		return err
	}
	done := "resumed"
	if paused {
		done = "paused"
	}
	return redirect(w, r, "/ui/topics/"+url.PathEscape(topic)+"?done="+done)
}
