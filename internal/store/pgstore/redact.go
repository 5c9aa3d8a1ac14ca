package pgstore

import (
	"net/url"
	"strings"
)

// RedactURL returns a connection string fit for logs and error messages:
// the password of a URL's user:pass@ and the values of password= and
// sslpassword= (URL query or key=value form) are replaced by "xxxxx",
// the rest is kept as given. It works on malformed strings too.
func RedactURL(s string) string {
	out, _ := redact(s)
	return out
}

// redact returns s redacted and the secrets it hid.
func redact(s string) (string, []string) {
	if strings.Contains(s, "://") {
		return redactURLForm(s)
	}
	return redactKeyValue(s)
}

func redactURLForm(s string) (string, []string) {
	var secrets []string
	head, query, hasQuery := strings.Cut(s, "?")
	query, frag, hasFrag := strings.Cut(query, "#")
	if !hasQuery {
		head, frag, hasFrag = strings.Cut(head, "#")
	}
	start := strings.Index(head, "://") + len("://")
	// The userinfo ends at the last '@' (as in net/url), so a password
	// holding an unescaped '/' or '@' is still hidden.
	if at := strings.LastIndex(head, "@"); at >= start {
		if user, pass, ok := strings.Cut(head[start:at], ":"); ok {
			secrets = append(secrets, pass)
			head = head[:start] + user + ":xxxxx" + head[at:]
		}
	}
	out := head
	if hasQuery {
		params := strings.Split(query, "&")
		for i, p := range params {
			k, v, _ := strings.Cut(p, "=")
			if key, err := url.QueryUnescape(k); err != nil || secretParam(key) {
				secrets = append(secrets, v)
				params[i] = k + "=xxxxx"
			}
		}
		out += "?" + strings.Join(params, "&")
	}
	if hasFrag {
		out += "#" + frag
	}
	return out, secrets
}

// redactKeyValue hides the secrets of "host=h password='p w' …" (values
// may be single-quoted, with \' and \\ escapes).
func redactKeyValue(s string) (string, []string) {
	var b strings.Builder
	var secrets []string
	i := 0
	for i < len(s) {
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			b.WriteString(s[i:])
			break
		}
		key := strings.TrimSpace(s[i : i+eq])
		b.WriteString(s[i : i+eq+1])
		i += eq + 1
		for i < len(s) && s[i] == ' ' {
			b.WriteByte(' ')
			i++
		}
		start := i
		if i < len(s) && s[i] == '\'' {
			for i++; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' {
					i++
				}
			}
			i = min(i+1, len(s))
		} else {
			for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' {
				i++
			}
		}
		if secretParam(key) {
			secrets = append(secrets, strings.Trim(s[start:i], "'"))
			b.WriteString("xxxxx")
		} else {
			b.WriteString(s[start:i])
		}
	}
	return b.String(), secrets
}

func secretParam(key string) bool {
	return strings.HasSuffix(strings.ToLower(key), "password")
}

// redactErr hides the connection string's secrets wherever they appear in
// err's text (drivers quote connection strings in some errors) and puts
// the text on one line (pgx lists each address it tried on a line of its
// own); errors.Is and errors.As still see the original.
func redactErr(err error, connString string) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*redactedError); ok {
		return err
	}
	_, raw := redact(connString)
	var secrets []string
	for _, p := range raw {
		forms := []string{p}
		if u, err := url.QueryUnescape(p); err == nil && u != p {
			forms = append(forms, u)
		}
		for _, f := range forms {
			// Very short secrets would blank out unrelated text; such a
			// password is no secret anyway.
			if len(f) >= 4 && strings.Contains(err.Error(), f) {
				secrets = append(secrets, f)
			}
		}
	}
	if len(secrets) == 0 && !strings.Contains(err.Error(), "\n") {
		return err
	}
	return &redactedError{err: err, secrets: secrets}
}

type redactedError struct {
	err     error
	secrets []string
}

func (e *redactedError) Error() string {
	s := e.err.Error()
	for _, p := range e.secrets {
		s = strings.ReplaceAll(s, p, "xxxxx")
	}
	s = strings.ReplaceAll(s, ":\n\t", ": ")
	s = strings.ReplaceAll(s, "\n\t", "; ")
	return strings.ReplaceAll(s, "\n", " ")
}

func (e *redactedError) Unwrap() error { return e.err }
