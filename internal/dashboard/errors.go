package dashboard

import "errors"

// Errors the dashboard makes itself; statusOf maps them (and delayq's
// sentinels) to HTTP statuses.
var (
	// errCrossSite: a POST that a browser says came from another site.
	errCrossSite = errors.New("cross-site request refused: the form must be posted from this dashboard")
	// errCSRF: a POST without this session's (or browser's) CSRF token.
	errCSRF = errors.New("the form's CSRF token is missing or stale: reload the page and try again")
	// errLoginRequired: a POST without a session while auth is on.
	errLoginRequired = errors.New("log in first")
	// errPageNotFound: no page at this path.
	errPageNotFound = errors.New("no such page")
	// errReadOnly: an action on a topic the token has no admin scope on.
	errReadOnly = errors.New("your token cannot change this topic: actions need the admin scope on it")
)
