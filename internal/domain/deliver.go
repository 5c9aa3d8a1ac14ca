package domain

import (
	"net/url"
	"strings"
	"time"
)

// DeliverSettings make the server publish a topic's due messages into a
// broker the user runs (see docs/deliver.md): a confirmed publish acks
// the message, a refused or unconfirmed one nacks it with the topic's
// backoff. Exactly one of Kafka, RabbitMQ, NATS and Redis is set; a topic
// has either Deliver or Push, not both.
//
// Credentials (passwords, the NATS token, the password inside a RabbitMQ
// or NATS URL) are write-only: Redacted clears them for answers, and
// KeepSecrets carries the stored ones over a SetTopicSettings that
// leaves them out.
//
// The field names are also the stored format of the engine: rename none.
type DeliverSettings struct {
	Kafka    *KafkaTarget
	RabbitMQ *RabbitMQTarget
	NATS     *NATSTarget
	Redis    *RedisTarget
	// MaxInFlight bounds the messages leased and not yet confirmed per
	// topic and server (default 256, at most MaxBatch).
	MaxInFlight int
	// Timeout bounds one publish, confirmation included (default 10 s,
	// at most 5 min).
	Timeout time.Duration
}

// TLSSettings configure TLS to a broker. A nil *TLSSettings means plain
// TCP (unless the URL's scheme says TLS: amqps, tls, rediss).
type TLSSettings struct {
	CAPEM              string // PEM CA certificates to trust instead of the system's
	ServerName         string
	InsecureSkipVerify bool
}

// KafkaTarget produces to one Kafka topic with an idempotent producer
// and acks=all.
type KafkaTarget struct {
	Brokers []string // host:port seeds
	Topic   string
	// KeyHeader names the message header whose value is the record key;
	// empty: the delayq message id.
	KeyHeader string
	SASL      *KafkaSASL
	TLS       *TLSSettings
}

// KafkaSASL authenticates to Kafka.
type KafkaSASL struct {
	Mechanism   string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	User        string
	Password    string
	PasswordSet bool // answers only
}

// RabbitMQTarget publishes (with publisher confirms) to an exchange.
type RabbitMQTarget struct {
	URL        string // amqp:// or amqps://; its password is write-only
	Exchange   string // empty: the default exchange
	RoutingKey string
	TLS        *TLSSettings
}

// NATSTarget publishes to a JetStream subject.
type NATSTarget struct {
	URL         string // nats:// or tls://; a password in it is write-only
	Subject     string
	User        string
	Password    string
	PasswordSet bool // answers only
	Token       string
	TokenSet    bool // answers only
	TLS         *TLSSettings
}

// RedisTarget XADDs to a Redis stream.
type RedisTarget struct {
	Addr        string // host:port
	Stream      string
	MaxLen      int64 // >0: XADD MAXLEN ~ MaxLen
	Username    string
	Password    string
	PasswordSet bool // answers only
	DB          int
	TLS         *TLSSettings
}

// Deliver limits and defaults.
const (
	DefaultDeliverTimeout     = 10 * time.Second
	MaxDeliverTimeout         = 5 * time.Minute
	DefaultDeliverMaxInFlight = 256
	maxDeliverString          = 4096
	// The settings blob must fit the stores' columns (MySQL: a 64 KiB
	// BLOB): these bound it to about 40 KiB.
	maxCAPEM   = 16 << 10
	maxBrokers = 32
)

// Kind names the target: "kafka", "rabbitmq", "nats", "redis" or "" when
// none is set.
func (d *DeliverSettings) Kind() string {
	switch {
	case d == nil:
		return ""
	case d.Kafka != nil:
		return "kafka"
	case d.RabbitMQ != nil:
		return "rabbitmq"
	case d.NATS != nil:
		return "nats"
	case d.Redis != nil:
		return "redis"
	}
	return ""
}

// redactedPassword stands for a URL's password in answers; a URL sent
// back with it keeps the stored password.
const redactedPassword = "xxxxx"

// Clone is a deep copy of d.
func (d *DeliverSettings) Clone() *DeliverSettings {
	if d == nil {
		return nil
	}
	c := *d
	cloneTLS := func(t *TLSSettings) *TLSSettings {
		if t == nil {
			return nil
		}
		u := *t
		return &u
	}
	if k := d.Kafka; k != nil {
		kc := *k
		kc.Brokers = append([]string(nil), k.Brokers...)
		if k.SASL != nil {
			s := *k.SASL
			kc.SASL = &s
		}
		kc.TLS = cloneTLS(k.TLS)
		c.Kafka = &kc
	}
	if r := d.RabbitMQ; r != nil {
		rc := *r
		rc.TLS = cloneTLS(r.TLS)
		c.RabbitMQ = &rc
	}
	if n := d.NATS; n != nil {
		nc := *n
		nc.TLS = cloneTLS(n.TLS)
		c.NATS = &nc
	}
	if r := d.Redis; r != nil {
		rc := *r
		rc.TLS = cloneTLS(r.TLS)
		c.Redis = &rc
	}
	return &c
}

// Redacted is d as answers carry it: passwords and token cleared (their
// *Set flags say whether one is stored), URL passwords replaced by
// "xxxxx".
func (d *DeliverSettings) Redacted() *DeliverSettings {
	c := d.Clone()
	if c == nil {
		return nil
	}
	if k := c.Kafka; k != nil && k.SASL != nil {
		k.SASL.PasswordSet = k.SASL.PasswordSet || k.SASL.Password != ""
		k.SASL.Password = ""
	}
	if r := c.RabbitMQ; r != nil {
		r.URL = redactURL(r.URL)
	}
	if n := c.NATS; n != nil {
		n.URL = redactURL(n.URL)
		n.PasswordSet = n.PasswordSet || n.Password != ""
		n.Password = ""
		n.TokenSet = n.TokenSet || n.Token != ""
		n.Token = ""
	}
	if r := c.Redis; r != nil {
		r.PasswordSet = r.PasswordSet || r.Password != ""
		r.Password = ""
	}
	return c
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); !ok {
		return s
	}
	u.User = url.UserPassword(u.User.Username(), redactedPassword)
	return u.String()
}

// KeepSecrets fills the credentials d leaves out (an empty password or
// token, a URL without a password or with the redacted one) from old,
// the stored settings, when old has the same kind of target. It also
// clears the answer-only *Set flags.
func (d *DeliverSettings) KeepSecrets(old *DeliverSettings) {
	if d == nil {
		return
	}
	if k := d.Kafka; k != nil && k.SASL != nil {
		k.SASL.PasswordSet = false
		if k.SASL.Password == "" && old != nil && old.Kafka != nil && old.Kafka.SASL != nil {
			k.SASL.Password = old.Kafka.SASL.Password
		}
	}
	if r := d.RabbitMQ; r != nil && old != nil && old.RabbitMQ != nil {
		r.URL = keepURLPassword(r.URL, old.RabbitMQ.URL)
	}
	if n := d.NATS; n != nil {
		n.PasswordSet, n.TokenSet = false, false
		if old != nil && old.NATS != nil {
			n.URL = keepURLPassword(n.URL, old.NATS.URL)
			if n.Password == "" {
				n.Password = old.NATS.Password
			}
			if n.Token == "" {
				n.Token = old.NATS.Token
			}
		}
	}
	if r := d.Redis; r != nil {
		r.PasswordSet = false
		if r.Password == "" && old != nil && old.Redis != nil {
			r.Password = old.Redis.Password
		}
	}
}

// keepURLPassword is s with old's password when s names the same user
// and gives no password or the redacted one.
func keepURLPassword(s, old string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if p, ok := u.User.Password(); ok && p != redactedPassword {
		return s
	}
	ou, err := url.Parse(old)
	if err != nil || ou.User == nil || ou.User.Username() != u.User.Username() {
		return s
	}
	if p, ok := ou.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), p)
		return u.String()
	}
	return s
}

// Validate checks d; errors name the field under "deliver.".
func (d *DeliverSettings) Validate() error {
	n := 0
	for _, set := range []bool{d.Kafka != nil, d.RabbitMQ != nil, d.NATS != nil, d.Redis != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return Invalid("deliver", "needs one target: kafka, rabbitmq, nats or redis")
	case n > 1:
		return Invalid("deliver", "has %d targets; set exactly one of kafka, rabbitmq, nats and redis", n)
	case d.MaxInFlight < 0 || d.MaxInFlight > MaxBatch:
		return Invalid("deliver.max_in_flight", "must be between 1 and %d", MaxBatch)
	case d.Timeout < 0 || d.Timeout > MaxDeliverTimeout:
		return Invalid("deliver.timeout_ms", "must be between 1 and %d", MaxDeliverTimeout.Milliseconds())
	}
	switch {
	case d.Kafka != nil:
		return d.Kafka.validate()
	case d.RabbitMQ != nil:
		return d.RabbitMQ.validate()
	case d.NATS != nil:
		return d.NATS.validate()
	}
	return d.Redis.validate()
}

func (k *KafkaTarget) validate() error {
	const f = "deliver.kafka."
	if len(k.Brokers) == 0 {
		return Invalid(f+"brokers", "needs at least one host:port")
	}
	if len(k.Brokers) > maxBrokers {
		return Invalid(f+"brokers", "has %d entries, the limit is %d", len(k.Brokers), maxBrokers)
	}
	for i, b := range k.Brokers {
		if err := checkHostPort(b); err != nil {
			return Invalid(f+"brokers", "entry %d: %s", i, err.Error())
		}
	}
	if err := checkName(f+"topic", k.Topic, true); err != nil {
		return err
	}
	if err := checkName(f+"key_header", k.KeyHeader, false); err != nil {
		return err
	}
	if s := k.SASL; s != nil {
		switch s.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return Invalid(f+"sasl.mechanism", "must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", s.Mechanism)
		}
		if s.User == "" {
			return Invalid(f+"sasl.user", "is required")
		}
		if err := checkLen(f+"sasl.user", s.User); err != nil {
			return err
		}
		if err := checkLen(f+"sasl.password", s.Password); err != nil {
			return err
		}
	}
	return checkTLS(f+"tls", k.TLS)
}

func (r *RabbitMQTarget) validate() error {
	const f = "deliver.rabbitmq."
	if err := checkURL(f+"url", r.URL, "amqp", "amqps"); err != nil {
		return err
	}
	if err := checkLen(f+"exchange", r.Exchange); err != nil {
		return err
	}
	if err := checkLen(f+"routing_key", r.RoutingKey); err != nil {
		return err
	}
	return checkTLS(f+"tls", r.TLS)
}

func (n *NATSTarget) validate() error {
	const f = "deliver.nats."
	if err := checkURL(f+"url", n.URL, "nats", "tls"); err != nil {
		return err
	}
	if n.Subject == "" {
		return Invalid(f+"subject", "is required")
	}
	if strings.ContainsAny(n.Subject, " \t\r\n*>") {
		return Invalid(f+"subject", "must not contain spaces or wildcards (* >)")
	}
	for _, c := range []struct{ field, v string }{{"subject", n.Subject}, {"user", n.User}, {"password", n.Password}, {"token", n.Token}} {
		if err := checkLen(f+c.field, c.v); err != nil {
			return err
		}
	}
	return checkTLS(f+"tls", n.TLS)
}

func (r *RedisTarget) validate() error {
	const f = "deliver.redis."
	if err := checkHostPort(r.Addr); err != nil {
		return Invalid(f+"addr", "%s", err.Error())
	}
	if err := checkName(f+"stream", r.Stream, true); err != nil {
		return err
	}
	switch {
	case r.MaxLen < 0:
		return Invalid(f+"maxlen", "must not be negative (0: no trimming)")
	case r.DB < 0 || r.DB > 1<<20:
		return Invalid(f+"db", "must be between 0 and %d", 1<<20)
	}
	if err := checkLen(f+"username", r.Username); err != nil {
		return err
	}
	if err := checkLen(f+"password", r.Password); err != nil {
		return err
	}
	return checkTLS(f+"tls", r.TLS)
}

func checkTLS(field string, t *TLSSettings) error {
	if t == nil {
		return nil
	}
	if len(t.CAPEM) > maxCAPEM {
		return Invalid(field+".ca_pem", "is longer than %d bytes", maxCAPEM)
	}
	if t.CAPEM != "" && !strings.Contains(t.CAPEM, "-----BEGIN CERTIFICATE-----") {
		return Invalid(field+".ca_pem", "holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
	}
	return checkLen(field+".server_name", t.ServerName)
}

func checkLen(field, v string) error {
	if len(v) > maxDeliverString {
		return Invalid(field, "is longer than %d bytes", maxDeliverString)
	}
	return nil
}

// checkName checks a broker-side name (topic, stream, header): printable,
// no spaces, bounded.
func checkName(field, v string, required bool) error {
	if v == "" {
		if required {
			return Invalid(field, "is required")
		}
		return nil
	}
	if len(v) > 249 {
		return Invalid(field, "is %d bytes, the limit is 249", len(v))
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return Invalid(field, "has %s at byte %d; use printable ASCII without spaces", quoteByte(v[i]), i)
		}
	}
	return nil
}

type plainError string

func (e plainError) Error() string { return string(e) }

func checkHostPort(s string) error {
	switch {
	case s == "":
		return plainError("is required (host:port)")
	case len(s) > 255:
		return plainError("is longer than 255 bytes")
	case strings.ContainsAny(s, "/@ \t\r\n"):
		return plainError("must be host:port, not a URL")
	}
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return plainError("must be host:port, got " + s)
	}
	for _, c := range s[i+1:] {
		if c < '0' || c > '9' {
			return plainError("has a port that is not a number: " + s)
		}
	}
	return nil
}

func checkURL(field, s string, schemes ...string) error {
	if s == "" {
		return Invalid(field, "is required")
	}
	if len(s) > maxDeliverString {
		return Invalid(field, "is longer than %d bytes", maxDeliverString)
	}
	u, err := url.Parse(s)
	if err != nil {
		// url's error quotes the URL, password included.
		return Invalid(field, "is not a URL")
	}
	ok := false
	for _, sc := range schemes {
		ok = ok || u.Scheme == sc
	}
	switch {
	case !ok:
		return Invalid(field, "must be a %s:// URL, got scheme %q", strings.Join(schemes, ":// or "), u.Scheme)
	case u.Host == "":
		return Invalid(field, "has no host")
	}
	return nil
}

// Endpoint is where d sends to, without credentials: the kind and the
// broker addresses (URLs without their user info). Setting a new one
// needs admin on "*" like a push URL (the server connects wherever it
// points); changing only credentials does not.
func (d *DeliverSettings) Endpoint() string {
	switch {
	case d == nil:
		return ""
	case d.Kafka != nil:
		return "kafka " + strings.Join(d.Kafka.Brokers, ",")
	case d.RabbitMQ != nil:
		return "rabbitmq " + withoutUser(d.RabbitMQ.URL)
	case d.NATS != nil:
		return "nats " + withoutUser(d.NATS.URL)
	case d.Redis != nil:
		return "redis " + d.Redis.Addr
	}
	return ""
}

// withoutUser is s without user info; "(invalid URL)" when it does not
// parse (its text may hold a password).
func withoutUser(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(invalid URL)"
	}
	u.User = nil
	return u.String()
}
