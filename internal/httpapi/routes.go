package httpapi

import (
	"github.com/delayq/delayq/internal/auth"
)

// access says who may call a route when authentication is on.
type access int

const (
	open       access = iota // no token needed (health checks, the API document)
	topicScope               // a scope of route.scope on the path's {topic}
	anyTopic                 // a scope of route.scope on some topic; answers are filtered
	everywhere               // a scope of route.scope on "*" (data about all topics)
)

// route is one line of the routing table.
type route struct {
	pattern string
	access  access
	scope   auth.Scope // any one of these is enough; Admin implies the others
	limit   int64      // request body limit in bytes; 0: the body is not read
	query   []string   // allowed query parameters; others are a 400
	h       handlerFunc
}

// routes is the routing table of HTTP API v1: Go 1.22 ServeMux patterns
// with methods. "messages:batch" is a literal segment (ServeMux matches a
// colon inside a segment literally; tested).
//
// Scopes: produce sends, reschedules and cancels; consume leases and acks;
// reading a message takes produce or consume; reading topic stats and dead
// letters takes consume (or admin); changing settings and dead letters
// takes admin; so do pausing or deleting a topic and bulk changes. Browsing
// a topic's messages takes consume, like reading its dead letters.
func (s *Server) routes() []route {
	const t = "/v1/topics/{topic}"
	pc := auth.Produce | auth.Consume
	return []route{
		{pattern: "POST " + t + "/messages", access: topicScope, scope: auth.Produce, limit: s.cfg.MaxBodyBytes, h: s.send},
		{pattern: "POST " + t + "/messages:batch", access: topicScope, scope: auth.Produce, limit: s.cfg.MaxBatchBodyBytes, h: s.sendBatch},
		{pattern: "GET " + t + "/messages/{id}", access: topicScope, scope: pc, h: s.get},
		{pattern: "DELETE " + t + "/messages/{id}", access: topicScope, scope: auth.Produce, h: s.cancel},
		{pattern: "PATCH " + t + "/messages/{id}", access: topicScope, scope: auth.Produce, limit: smallBodyBytes, h: s.reschedule},

		{pattern: "POST " + t + "/lease", access: topicScope, scope: auth.Consume, limit: smallBodyBytes, h: s.lease},
		{pattern: "POST " + t + "/messages/{id}/ack", access: topicScope, scope: auth.Consume, limit: smallBodyBytes, h: s.ack},
		{pattern: "POST " + t + "/acks", access: topicScope, scope: auth.Consume, limit: ackBatchBodyBytes, h: s.ackBatch},
		{pattern: "POST " + t + "/messages/{id}/nack", access: topicScope, scope: auth.Consume, limit: smallBodyBytes, h: s.nack},
		{pattern: "POST " + t + "/messages/{id}/extend", access: topicScope, scope: auth.Consume, limit: smallBodyBytes, h: s.extend},

		{pattern: "GET /v1/topics", access: anyTopic, scope: auth.Consume, h: s.topics},
		{pattern: "GET " + t, access: topicScope, scope: auth.Consume, h: s.topic},
		{pattern: "PUT " + t, access: topicScope, scope: auth.Admin, limit: smallBodyBytes, h: s.putTopic},
		{pattern: "POST " + t + "/pause", access: topicScope, scope: auth.Admin, limit: smallBodyBytes, h: s.pauseTopic},
		{pattern: "POST " + t + "/resume", access: topicScope, scope: auth.Admin, limit: smallBodyBytes, h: s.resumeTopic},

		// Browsing and bulk changes.
		{pattern: "GET " + t + "/messages", access: topicScope, scope: auth.Consume, query: []string{"state", "due_after", "due_before", "limit", "cursor"}, h: s.listMessages},
		{pattern: "POST " + t + "/messages:cancel", access: topicScope, scope: auth.Admin, limit: smallBodyBytes, h: s.bulkCancel},
		{pattern: "POST " + t + "/messages:reschedule", access: topicScope, scope: auth.Admin, limit: smallBodyBytes, h: s.bulkReschedule},
		{pattern: "PATCH " + t, access: topicScope, scope: auth.Admin, limit: smallBodyBytes, h: s.patchTopic},
		{pattern: "DELETE " + t, access: topicScope, scope: auth.Admin, h: s.deleteTopic},

		{pattern: "GET " + t + "/dead", access: topicScope, scope: auth.Consume, query: []string{"limit", "cursor"}, h: s.deadList},
		{pattern: "DELETE " + t + "/dead", access: topicScope, scope: auth.Admin, h: s.deadPurge},
		{pattern: "POST " + t + "/dead/replay", access: topicScope, scope: auth.Admin, limit: smallBodyBytes, h: s.deadReplayAll},
		{pattern: "POST " + t + "/dead/{id}/replay", access: topicScope, scope: auth.Admin, limit: smallBodyBytes, h: s.deadReplay},
		{pattern: "DELETE " + t + "/dead/{id}", access: topicScope, scope: auth.Admin, h: s.deadDelete},

		// Recurring schedules (admin on "*": a schedule may target any topic).
		{pattern: "PUT /v1/schedules/{name}", access: everywhere, scope: auth.Admin, limit: s.cfg.MaxBodyBytes, h: s.putSchedule},
		{pattern: "PATCH /v1/schedules/{name}", access: everywhere, scope: auth.Admin, limit: smallBodyBytes, h: s.patchSchedule},
		{pattern: "GET /v1/schedules", access: everywhere, scope: auth.Admin, h: s.listSchedules},
		{pattern: "GET /v1/schedules/{name}", access: everywhere, scope: auth.Admin, h: s.getSchedule},
		{pattern: "DELETE /v1/schedules/{name}", access: everywhere, scope: auth.Admin, h: s.deleteSchedule},

		// The API's OpenAPI document: public, like the API's shape it describes.
		{pattern: "GET /v1/openapi.json", access: open, h: s.openAPI},

		{pattern: "GET /healthz", access: open, h: s.healthz},
		{pattern: "GET /readyz", access: open, h: s.readyz},
		{pattern: "GET /metrics", access: everywhere, scope: auth.Admin, h: s.metrics},
		{pattern: "GET /v1/admin/backup", access: everywhere, scope: auth.Admin, h: s.backup},
	}
}
