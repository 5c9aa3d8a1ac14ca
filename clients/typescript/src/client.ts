// A small client for delayq's HTTP API v1. Its request and answer types
// are generated from the API's OpenAPI document (internal/httpapi/openapi.json, by
// openapi-typescript on every build), so a field the document does not
// have does not compile.
//
// Durations are whole milliseconds throughout: answers carry every
// duration as a number (`lease_ms` beside `lease`), and requests send
// `delay_ms` where the API takes it, else "<n>ms", a duration string the
// server reads exactly.

import type { components, operations } from "./generated/openapi.js";

type Schemas = components["schemas"];
type Answer<Op extends keyof operations, Status extends number> =
  operations[Op]["responses"] extends Record<Status, { content: { "application/json": infer T } }> ? T : never;

export type Message = Schemas["Message"];
export type BatchResult = Schemas["BatchResult"];
export type CancelResult = Schemas["CancelResponse"];
export type Topic = Schemas["Topic"];
export type MessagePage = Schemas["MessagePage"];
export type MessageFilter = Schemas["MessageFilter"];
export type TopicSettings = Schemas["TopicSettings"];
export type TopicSettingsRequest = Schemas["TopicSettingsRequest"];
/** A topic's broker target as answered (credentials left out, *_set instead). */
export type Deliver = Schemas["Deliver"];
/** A topic's broker target as PUT: exactly one of kafka, rabbitmq, nats, redis. */
export type DeliverRequest = Schemas["DeliverRequest"];
export type Schedule = Schemas["Schedule"];
export type ErrorCode = Schemas["ErrorBody"]["code"];

/** A payload: text is sent as `payload`, bytes as `payload_base64`. */
export type Payload = string | Uint8Array;

export interface ClientOptions {
  /** Sent as "Authorization: Bearer <token>" on every request. */
  token?: string;
  /** Bounds each attempt (a lease gets its wait on top). Default 30 000 ms. */
  timeoutMs?: number;
  /**
   * Retries after the first attempt (default 3; 0 turns retries and
   * client-made send ids off). See the README for which failures are retried.
   */
  retries?: number;
  /** The first retry's wait, doubled for each next one (±25 % jitter). Default 100 ms. */
  backoffMs?: number;
  /** The longest wait between attempts, Retry-After included. Default 5 000 ms. */
  maxBackoffMs?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

export interface ListOptions {
  state: "scheduled" | "ready" | "inflight" | "dead";
  dueAfter?: Date | string;
  dueBefore?: Date | string;
  /** 1 to 1000 (default 100). */
  limit?: number;
  cursor?: string;
}

export interface SendOptions {
  /** Makes the send idempotent: a retry answers the existing message (`duplicate: true`). */
  id?: string;
  headers?: Record<string, string>;
  /** Due this many milliseconds from now. At most one of delayMs and deliverAt. */
  delayMs?: number;
  /** Due at this time. */
  deliverAt?: Date | string;
  /** Failures before the message goes dead (default: the topic's setting). */
  maxAttempts?: number;
  /**
   * 0 (the default, the most urgent) to 255: among the topic's due messages, lower is
   * leased first. It never makes a message due earlier.
   */
  priority?: number;
}

export interface LeaseOptions {
  /** Most messages to hand out, 1–1000 (default 1). */
  max?: number;
  /** How long they stay leased (default: the topic's lease). */
  leaseMs?: number;
  /** Long-poll up to this long (at most 30 000) when nothing is due. */
  waitMs?: number;
}

export interface NackOptions {
  /** Retry after this long (0: now); default: the topic's backoff. */
  delayMs?: number;
  /** Why it failed; becomes the message's last_error. */
  reason?: string;
}

export interface ScheduleOptions {
  /** A 5-field cron expression, a descriptor (@daily) or "@every <duration>". */
  cron: string;
  topic: string;
  payload: Payload;
  timezone?: string;
  headers?: Record<string, string>;
  maxAttempts?: number;
  /** Each message's priority, 0 (the default, the most urgent) to 255. */
  priority?: number;
  /** Each message is due this long after its tick. */
  delayMs?: number;
  paused?: boolean;
  missed?: "fire-once" | "skip";
}

/** An error answer of the API. */
export class DelayqError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode | string,
    message: string,
    /** The offending request field, such as "messages[1].id". */
    readonly field?: string,
    readonly requestId?: string,
  ) {
    super(`delayq: ${status} ${code}: ${message}`);
    this.name = "DelayqError";
  }
}

export class Client {
  private readonly base: string;
  private readonly token: string | undefined;
  private readonly timeoutMs: number;
  private readonly retries: number;
  private readonly backoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly fetch: typeof fetch;

  /** baseUrl is the server, such as "http://127.0.0.1:7070". */
  constructor(baseUrl: string, opts: ClientOptions = {}) {
    this.base = baseUrl.replace(/\/+$/, "");
    this.token = opts.token;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.retries = opts.retries ?? 3;
    this.backoffMs = opts.backoffMs ?? 100;
    this.maxBackoffMs = opts.maxBackoffMs ?? 5_000;
    for (const [name, v] of [["retries", this.retries], ["backoffMs", this.backoffMs], ["maxBackoffMs", this.maxBackoffMs]] as const) {
      if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`${name} must be a whole, non-negative number, got ${v}`);
    }
    this.fetch = opts.fetch ?? globalThis.fetch;
  }

  /**
   * Sends one message. A known id answers the existing message with
   * duplicate: true. With retries on, a message without an id gets one
   * (newId) before the first attempt, so a retried send that had landed
   * finds its own message instead of making a second one.
   */
  send(topic: string, payload: Payload, opts: SendOptions = {}): Promise<Answer<"sendMessage", 201>> {
    const body = sendRequest(payload, opts);
    if (body.id === undefined && this.retries > 0) body.id = newId();
    return this.call("POST", `/v1/topics/${seg(topic)}/messages`, body, { idempotent: true });
  }

  /**
   * Sends up to 1000 messages. A malformed item rejects the whole batch
   * (a DelayqError whose field names it, such as "messages[1].id") and
   * stores nothing; otherwise each item's message or error comes back in
   * order.
   */
  async sendBatch(topic: string, items: Array<SendOptions & { payload: Payload }>): Promise<BatchResult[]> {
    const messages = items.map((it) => sendRequest(it.payload, it));
    if (this.retries > 0) for (const m of messages) m.id ??= newId();
    const body: Schemas["SendBatchRequest"] = { messages };
    const out: Answer<"sendBatch", 200> = await this.call("POST", `/v1/topics/${seg(topic)}/messages:batch`, body, { idempotent: true });
    return out.results;
  }

  get(topic: string, id: string): Promise<Answer<"getMessage", 200>> {
    return this.call("GET", `/v1/topics/${seg(topic)}/messages/${seg(id)}`, undefined, { idempotent: true });
  }

  /** Removes a scheduled, ready or inflight message; answers it as it was. */
  cancel(topic: string, id: string): Promise<CancelResult> {
    return this.call("DELETE", `/v1/topics/${seg(topic)}/messages/${seg(id)}`);
  }

  /** Moves a scheduled or ready message to a new due time. */
  reschedule(topic: string, id: string, when: { delayMs: number } | { deliverAt: Date | string }): Promise<Message> {
    const body: Schemas["RescheduleRequest"] =
      "delayMs" in when ? { delay_ms: millis(when.delayMs) } : { deliver_at: time(when.deliverAt) };
    return this.call("PATCH", `/v1/topics/${seg(topic)}/messages/${seg(id)}`, body, { idempotent: true });
  }

  /** Leases due messages, long-polling up to waitMs when none is. */
  async lease(topic: string, opts: LeaseOptions = {}): Promise<Message[]> {
    return (await this.ackAndLease(topic, [], opts)).messages;
  }

  /**
   * Acknowledges acks, as ackBatch would, then leases as lease would, in one
   * call: a consumer that acks what it handled with its next lease makes one
   * round trip where it made two. The acks are carried out first and
   * durably (before a long-poll waits); `acks` in the answer has one result
   * per item, in order. A thrown error leaves their fate unknown: send them
   * again with ackBatch (an ack repeated with its receipt is ok again).
   */
  async ackAndLease(
    topic: string,
    acks: Array<{ id: string; receipt: string }>,
    opts: LeaseOptions = {},
  ): Promise<{ messages: Message[]; acks: Schemas["AckResult"][] }> {
    const body: Schemas["LeaseRequest"] = {};
    if (opts.max !== undefined) body.max = opts.max;
    if (opts.leaseMs !== undefined) body.lease = duration(opts.leaseMs);
    if (opts.waitMs !== undefined) body.wait = duration(opts.waitMs);
    if (acks.length > 0) body.acks = acks;
    const out: Answer<"lease", 200> = await this.call("POST", `/v1/topics/${seg(topic)}/lease`, body, { extraMs: opts.waitMs ?? 0 });
    return { messages: out.messages, acks: out.acks ?? [] };
  }

  /**
   * Done with a leased message. Safe to repeat with the same receipt (a
   * retry after a lost answer is ok again); a stale receipt is a DelayqError
   * with status 409.
   */
  async ack(topic: string, id: string, receipt: string): Promise<void> {
    const body: Schemas["AckRequest"] = { receipt };
    await this.call("POST", `/v1/topics/${seg(topic)}/messages/${seg(id)}/ack`, body, { idempotent: true });
  }

  /** Acknowledges many; one result per item, in order. */
  async ackBatch(topic: string, acks: Array<{ id: string; receipt: string }>): Promise<Schemas["AckResult"][]> {
    const body: Schemas["AckBatchRequest"] = { acks };
    const out: Answer<"ackBatch", 200> = await this.call("POST", `/v1/topics/${seg(topic)}/acks`, body, { idempotent: true });
    return out.results;
  }

  /**
   * Reports a failed delivery: retried later, or dead at max_attempts. Safe
   * to repeat with the same receipt and reason: a repeat of a nack that was
   * done answers the message as that nack left it, its failure counted once.
   */
  nack(topic: string, id: string, receipt: string, opts: NackOptions = {}): Promise<Message> {
    const body: Schemas["NackRequest"] = { receipt };
    if (opts.delayMs !== undefined) body.delay = duration(opts.delayMs);
    if (opts.reason !== undefined) body.reason = opts.reason;
    return this.call("POST", `/v1/topics/${seg(topic)}/messages/${seg(id)}/nack`, body, { idempotent: true });
  }

  /** Moves a lease's expiry to now + leaseMs. */
  extend(topic: string, id: string, receipt: string, leaseMs: number): Promise<Message> {
    const body: Schemas["ExtendRequest"] = { receipt, lease: duration(leaseMs) };
    return this.call("POST", `/v1/topics/${seg(topic)}/messages/${seg(id)}/extend`, body, { idempotent: true });
  }

  topic(topic: string): Promise<Topic> {
    return this.call("GET", `/v1/topics/${seg(topic)}`, undefined, { idempotent: true });
  }

  /** Replaces a topic's settings (omitted ones take the defaults); answers them with the defaults filled in. */
  setTopicSettings(topic: string, settings: TopicSettingsRequest): Promise<TopicSettings> {
    return this.call("PUT", `/v1/topics/${seg(topic)}`, settings, { idempotent: true });
  }

  /**
   * One page of a topic's messages in one state, from the store's index:
   * scheduled and ready ones soonest first (dueAfter inclusive, dueBefore
   * exclusive bound them), inflight ones by lease expiry, dead ones by
   * death. Pass the answer's next_cursor as cursor for the next page.
   */
  listMessages(topic: string, o: ListOptions): Promise<MessagePage> {
    const q = new URLSearchParams({ state: o.state });
    if (o.dueAfter !== undefined) q.set("due_after", time(o.dueAfter));
    if (o.dueBefore !== undefined) q.set("due_before", time(o.dueBefore));
    if (o.limit !== undefined) q.set("limit", String(o.limit));
    if (o.cursor !== undefined) q.set("cursor", o.cursor);
    return this.call("GET", `/v1/topics/${seg(topic)}/messages?${q}`, undefined, { idempotent: true });
  }

  /** Cancels the scheduled and ready messages the filter selects ({}: all); answers how many. */
  async cancelMessages(topic: string, filter: MessageFilter): Promise<number> {
    const body: Schemas["BulkCancelRequest"] = { filter };
    const out: Schemas["CountResponse"] = await this.call("POST", `/v1/topics/${seg(topic)}/messages:cancel`, body);
    return out.count;
  }

  /** Moves the scheduled and ready messages the filter selects to one due time; answers how many. */
  async rescheduleMessages(topic: string, filter: MessageFilter, when: { delayMs: number } | { deliverAt: Date | string }): Promise<number> {
    const body: Schemas["BulkRescheduleRequest"] =
      "delayMs" in when ? { filter, delay_ms: millis(when.delayMs) } : { filter, deliver_at: time(when.deliverAt) };
    const out: Schemas["CountResponse"] = await this.call("POST", `/v1/topics/${seg(topic)}/messages:reschedule`, body);
    return out.count;
  }

  /** Pauses (true) or resumes (false) a topic's deliveries; sends are still accepted. */
  pauseTopic(topic: string, paused: boolean): Promise<Topic> {
    return this.call("POST", `/v1/topics/${seg(topic)}/${paused ? "pause" : "resume"}`, undefined, { idempotent: true });
  }

  /** Deletes an empty topic (409 while it holds scheduled, ready, inflight or dead messages). */
  async deleteTopic(topic: string): Promise<void> {
    await this.call("DELETE", `/v1/topics/${seg(topic)}`);
  }

  /** Creates or replaces the recurring schedule name. */
  setSchedule(name: string, s: ScheduleOptions): Promise<Schedule> {
    const body: Schemas["ScheduleRequest"] = { topic: s.topic, cron: s.cron, ...payloadFields(s.payload) };
    if (s.timezone !== undefined) body.timezone = s.timezone;
    if (s.headers !== undefined) body.headers = s.headers;
    if (s.maxAttempts !== undefined) body.max_attempts = s.maxAttempts;
    if (s.priority !== undefined) body.priority = s.priority;
    if (s.delayMs !== undefined) body.delay = duration(s.delayMs);
    if (s.paused !== undefined) body.paused = s.paused;
    if (s.missed !== undefined) body.missed = s.missed;
    return this.call("PUT", `/v1/schedules/${seg(name)}`, body, { idempotent: true });
  }

  getSchedule(name: string): Promise<Schedule> {
    return this.call("GET", `/v1/schedules/${seg(name)}`, undefined, { idempotent: true });
  }

  /** Pauses (true) or resumes (false) a schedule. */
  pauseSchedule(name: string, paused: boolean): Promise<Schedule> {
    const body: Schemas["SchedulePatch"] = { paused };
    return this.call("PATCH", `/v1/schedules/${seg(name)}`, body, { idempotent: true });
  }

  async deleteSchedule(name: string): Promise<void> {
    await this.call("DELETE", `/v1/schedules/${seg(name)}`);
  }

  /** The server's OpenAPI document. */
  openapi(): Promise<Record<string, unknown>> {
    return this.call("GET", "/v1/openapi.json", undefined, { idempotent: true });
  }

  /**
   * Makes the request, retrying as the README says: an answer of 503, 502,
   * 504, 408 or 429 (the request was not carried out; Retry-After is honoured)
   * always, a failed connection or a timeout (the request may have been
   * carried out) only when the call is safe to repeat (idempotent).
   */
  private async call<T>(method: string, path: string, body?: unknown, o: { idempotent?: boolean; extraMs?: number } = {}): Promise<T> {
    const headers: Record<string, string> = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (this.token !== undefined) headers["Authorization"] = `Bearer ${this.token}`;
    const encoded = body === undefined ? undefined : JSON.stringify(body);
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      let text: string;
      try {
        res = await this.fetch(this.base + path, {
          method,
          headers,
          body: encoded,
          signal: AbortSignal.timeout(this.timeoutMs + (o.extraMs ?? 0)),
        });
        text = await res.text();
      } catch (e) {
        // No answer: refused, reset, timed out. Whether the server acted is unknown.
        if (attempt >= this.retries || !o.idempotent) throw e;
        await sleep(this.backoff(attempt, 0));
        continue;
      }
      if (res.ok) return JSON.parse(text) as T;
      if (attempt >= this.retries || !notCarriedOut.has(res.status)) throw errorOf(res.status, text);
      await sleep(this.backoff(attempt, retryAfterMs(res.headers.get("Retry-After"))));
    }
  }

  private backoff(attempt: number, retryAfterMs: number): number {
    if (retryAfterMs > 0) return Math.min(retryAfterMs, this.maxBackoffMs);
    const d = Math.min(this.backoffMs * 2 ** Math.min(attempt, 20), this.maxBackoffMs);
    // ±25 % jitter, so clients that failed together do not retry together.
    return d * (0.75 + Math.random() / 2);
  }
}

/** Answers that mean the request was not carried out: always safe to retry. */
const notCarriedOut = new Set([408, 429, 502, 503, 504]);

/** Retry-After in seconds (the form delayq sends), as milliseconds; 0 when absent or a date. */
function retryAfterMs(h: string | null): number {
  const s = h === null ? NaN : Number(h);
  return Number.isFinite(s) && s > 0 ? s * 1000 : 0;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
let lastIdMs = 0;
let lastIdRandom = 0n;

/**
 * A new message id: 26 characters of Crockford base32, a 48-bit Unix
 * millisecond time, then 80 bits random at each new millisecond and
 * incremented within one (the monotonic ULID layout the server and the Go
 * client make), so this process's ids sort by creation.
 */
export function newId(): string {
  let ms = Date.now();
  if (ms <= lastIdMs) {
    ms = lastIdMs;
    lastIdRandom = (lastIdRandom + 1n) & ((1n << 80n) - 1n);
  } else {
    lastIdMs = ms;
    const b = crypto.getRandomValues(new Uint8Array(10));
    lastIdRandom = b.reduce((acc, x) => (acc << 8n) | BigInt(x), 0n);
  }
  let v = (BigInt(ms) << 80n) | lastIdRandom;
  let out = "";
  for (let i = 0; i < 26; i++) {
    out = crockford[Number(v & 31n)] + out;
    v >>= 5n;
  }
  return out;
}

/** The bytes of a message's (or schedule's) payload, whichever field carries it. */
export function payloadBytes(m: { payload?: string; payload_base64?: string }): Uint8Array {
  if (m.payload_base64 !== undefined) return fromBase64(m.payload_base64);
  return new TextEncoder().encode(m.payload ?? "");
}

function sendRequest(payload: Payload, o: SendOptions): Schemas["SendRequest"] {
  const r: Schemas["SendRequest"] = payloadFields(payload);
  if (o.id !== undefined) r.id = o.id;
  if (o.headers !== undefined) r.headers = o.headers;
  if (o.delayMs !== undefined && o.deliverAt !== undefined) throw new TypeError("give delayMs or deliverAt, not both");
  if (o.delayMs !== undefined) r.delay_ms = millis(o.delayMs);
  if (o.deliverAt !== undefined) r.deliver_at = time(o.deliverAt);
  if (o.maxAttempts !== undefined) r.max_attempts = o.maxAttempts;
  if (o.priority !== undefined) r.priority = o.priority;
  return r;
}

function payloadFields(p: Payload): { payload: string } | { payload_base64: string } {
  return typeof p === "string" ? { payload: p } : { payload_base64: toBase64(p) };
}

function millis(ms: number): number {
  if (!Number.isSafeInteger(ms) || ms < 0) throw new RangeError(`a duration must be a whole, non-negative number of milliseconds, got ${ms}`);
  return ms;
}

/** ms as a Go duration string: "<n>ms" is exact, so nothing is parsed or rounded. */
function duration(ms: number): string {
  return `${millis(ms)}ms`;
}

function time(t: Date | string): string {
  return typeof t === "string" ? t : t.toISOString();
}

function seg(s: string): string {
  return encodeURIComponent(s);
}

function errorOf(status: number, text: string): DelayqError {
  try {
    const body = JSON.parse(text) as Partial<Schemas["ErrorResponse"]> & { request_id?: string };
    const e = body.error;
    if (e && typeof e.code === "string") {
      return new DelayqError(status, e.code, e.message ?? "", e.field, e.request_id ?? body.request_id);
    }
  } catch {
    // not the API's error shape: a proxy's, or net/http's plain-text 431
  }
  return new DelayqError(status, `http_${status}`, text.slice(0, 200));
}

function toBase64(b: Uint8Array): string {
  let s = "";
  for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode(...b.subarray(i, i + 0x8000));
  return btoa(s);
}

function fromBase64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
