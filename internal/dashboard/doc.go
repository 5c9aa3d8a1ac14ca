// Package dashboard is delayq's operator web UI, served by `delayq serve`
// under /ui/ and embedded in the binary (go:embed): server-rendered
// html/template pages, one small CSS file and SVG charts drawn on the
// server. No script runs in the pages, so the Content-Security-Policy
// forbids scripts outright. See docs/dashboard.md for the pages.
//
// # Pieces
//
//   - Recorder subscribes to the engine's events (Recorder.Subscription)
//     and keeps per-topic, per-minute counters and release-lateness
//     histograms over a short window, a short event history per message
//     id and the due times of observed sends. All of it is bounded
//     (RecorderConfig).
//   - UpcomingSource is the "count scheduled messages by due time" query
//     the Upcoming page needs. The engine implements it; without one,
//     the Recorder answers from the sends it saw since start, and the
//     page says so.
//   - Dashboard is the http.Handler.
//
// Wiring, as the server package does it:
//
//	rec := dashboard.NewRecorder(dashboard.RecorderConfig{})
//	eng, _ := engine.Open(ctx, engine.Config{Store: st, Subscriptions: []engine.Subscription{metrics.Subscription(), rec.Subscription()}})
//	dash, _ := dashboard.New(dashboard.Config{Queue: eng, Recorder: rec, Upcoming: eng, Tokens: tokens})
//	api, _ := httpapi.New(httpapi.Config{Queue: eng, Dashboard: dash, …})
//
// # Authentication and CSRF
//
// The dashboard uses the API's tokens and scopes (package auth), but not
// the API's bearer header: a browser logs in once with a token, and the
// dashboard gives it a signed session cookie (HttpOnly, SameSite=Strict,
// Path /ui/, Secure over TLS): the token's name, an expiry
// (Config.SessionTTL) and a nonce, with an HMAC-SHA256 over them and the
// token secret's digest under Config.SessionKeys. Nothing is kept on the
// server, so every server with the same keys and tokens accepts it (no
// sticky sessions behind a load balancer), and a changed or removed token
// ends its sessions. Logout revokes a session on the answering server
// only (Config.MaxRevokedSessions of them until they expire); other
// servers accept a copy of the cookie until it expires.
//
// Reading needs the scope the API needs for the same data: consume for
// topic stats, upcoming, timeliness and dead letters; produce or consume
// for a message. Every action (cancel, reschedule, settings, replay,
// purge) needs admin on the topic: for other tokens the dashboard is
// read-only, and the buttons are not shown. Without a session a page
// redirects to the login form and a POST is refused (401); neither
// reveals or changes anything.
//
// Every POST, login included, must come from this host (Sec-Fetch-Site,
// Origin or Referer, whichever the browser sends) and carry a CSRF token:
// HMAC-SHA256 under the session key over the session cookie (or, before
// login and when auth is off, over a random per-browser visitor id),
// compared in constant time against every configured key.
// With no tokens configured the dashboard is open, like the API, but
// still CSRF-protected.
//
// # Caveats
//
//   - The Recorder sees only this server's events: with several servers
//     on one Redis, each dashboard shows its own rates and lateness.
//   - Message histories hold what this server's engine did to a message
//     (sends, leases and pushes, acks, nacks, cancels, reschedules,
//     replays); promotions and lease expiries appear only through the
//     record's timestamps.
//   - Saving settings replaces them (as PUT /v1/topics/{topic} does):
//     the form shows effective values, so saving stores the defaults of
//     the moment as the topic's own.
package dashboard
