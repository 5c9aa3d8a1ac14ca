// Runs the client against a live server (DELAYQ_URL; test.sh starts one):
// each call goes over HTTP as another language would make it.

import { test } from "node:test";
import assert from "node:assert/strict";

import { Client, DelayqError, newId, payloadBytes } from "../src/client.js";

const url = process.env.DELAYQ_URL;
if (!url) throw new Error("set DELAYQ_URL to a running delayq server (clients/typescript/test.sh starts one)");
const c = new Client(url);
const run = `ts${Date.now()}`; // topics of this run, so a reused server does not interfere

async function refused(p: Promise<unknown>, status: number, code: string, field?: string): Promise<DelayqError> {
  const err = await p.then(
    () => assert.fail(`want ${status} ${code}, the call succeeded`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof DelayqError, `want a DelayqError, got ${String(err)}`);
  assert.equal(err.status, status);
  assert.equal(err.code, code);
  if (field !== undefined) assert.equal(err.field, field);
  return err;
}

test("send, get, duplicate, reschedule, cancel", async () => {
  const topic = `${run}.orders`;
  const m = await c.send(topic, "close order 42", { id: "order-42", delayMs: 30 * 60_000, headers: { tenant: "acme" }, maxAttempts: 5 });
  assert.equal(m.id, "order-42");
  assert.equal(m.state, "scheduled");
  assert.equal(m.max_attempts, 5);
  assert.equal(m.duplicate, undefined);
  assert.ok(Date.parse(m.deliver_at) - Date.now() > 29 * 60_000, `due ${m.deliver_at}`);

  const dup = await c.send(topic, "other", { id: "order-42" });
  assert.equal(dup.duplicate, true);
  assert.equal(dup.payload, "close order 42");

  const got = await c.get(topic, "order-42");
  assert.equal(got.payload, "close order 42");
  assert.deepEqual(got.headers, { tenant: "acme" });

  const at = new Date(Date.now() + 2 * 3_600_000);
  at.setUTCMilliseconds(0);
  const moved = await c.reschedule(topic, "order-42", { deliverAt: at });
  assert.equal(Date.parse(moved.deliver_at), at.getTime());

  const cancelled = await c.cancel(topic, "order-42");
  assert.equal(cancelled.cancelled, true);
  assert.equal(cancelled.prior_state, "scheduled");
  await refused(c.get(topic, "order-42"), 404, "not_found");
});

test("binary payloads go as base64 and come back as bytes", async () => {
  const topic = `${run}.bytes`;
  const bytes = new Uint8Array([0xff, 0x00, 0xfe, 0x01]);
  const m = await c.send(topic, bytes, { delayMs: 3_600_000 });
  const got = await c.get(topic, m.id);
  assert.equal(got.payload, undefined);
  assert.deepEqual(payloadBytes(got), bytes);
  assert.deepEqual(payloadBytes(await c.get(topic, (await c.send(topic, "ünïcode ✓", { delayMs: 3_600_000 })).id)), new TextEncoder().encode("ünïcode ✓"));
});

test("a batch with a bad item is refused whole, naming the item's index", async () => {
  const topic = `${run}.batch`;
  const res = await c.sendBatch(topic, [{ payload: "a", id: "a" }, { payload: "b" }, { payload: "again", id: "a" }]);
  assert.equal(res.length, 3);
  assert.equal(res[0]?.message?.id, "a");
  assert.ok(res[1]?.message?.id);
  assert.equal(res[2]?.message?.duplicate, true);

  await refused(c.sendBatch(topic, [{ payload: "x", id: "ok" }, { payload: "y", id: "bad id!" }]), 400, "invalid_argument", "messages[1].id");
  await refused(c.get(topic, "ok"), 404, "not_found"); // nothing of the refused batch was stored
});

test("lease, extend, ack, nack, batch ack", async () => {
  const topic = `${run}.work`;
  for (const id of ["a", "b", "c"]) await c.send(topic, `payload-${id}`, { id });
  const msgs = await c.lease(topic, { max: 3, leaseMs: 60_000 });
  assert.deepEqual(msgs.map((m) => m.id), ["a", "b", "c"]);
  const [a, b, m3] = msgs;
  assert.ok(a && b && m3 && a.receipt && b.receipt && m3.receipt && a.lease_expires_at);
  assert.equal(a.state, "inflight");

  const ext = await c.extend(topic, a.id, a.receipt, 120_000);
  assert.ok(Date.parse(ext.lease_expires_at!) > Date.parse(a.lease_expires_at));
  await c.ack(topic, a.id, a.receipt);
  await c.ack(topic, a.id, a.receipt); // a retry after a lost answer: ok again
  await refused(c.ack(topic, a.id, `${a.receipt}0`), 409, "conflict");
  await refused(c.extend(topic, b.id, "stale", 60_000), 409, "conflict");

  const nacked = await c.nack(topic, b.id, b.receipt, { delayMs: 3_600_000, reason: "downstream 502" });
  assert.equal(nacked.state, "scheduled");
  assert.equal(nacked.failures, 1);
  assert.equal(nacked.last_error, "downstream 502");

  const results = await c.ackBatch(topic, [{ id: m3.id, receipt: m3.receipt }, { id: "zzz", receipt: "r" }]);
  assert.equal(results[0]?.ok, true);
  assert.equal(results[1]?.ok, false);
  assert.ok(results[1]?.error?.code);

  assert.deepEqual(await c.lease(topic, { waitMs: 50 }), []); // nothing due: the long-poll ends empty
});

test("ackAndLease: the acks are done first, each answered, and the lease goes on", async () => {
  const topic = `${run}.acklease`;
  await c.send(topic, "a", { id: "a" });
  await c.send(topic, "b", { id: "b" });
  const [a] = await c.lease(topic, { max: 1 });
  assert.equal(a?.id, "a");
  const got = await c.ackAndLease(topic, [{ id: "a", receipt: a!.receipt! }, { id: "zzz", receipt: "r" }], { max: 5 });
  assert.deepEqual(got.acks.map((r) => r.ok), [true, false]);
  assert.deepEqual(got.messages.map((m) => m.id), ["b"]);
  assert.equal((await c.get(topic, "a")).state, "acked");
  const last = await c.ackAndLease(topic, [{ id: "b", receipt: got.messages[0]!.receipt! }], { waitMs: 50 });
  assert.deepEqual(last, { messages: [], acks: [{ id: "b", ok: true }] });
  await refused(c.ackAndLease(topic, [{ id: "b", receipt: "" }]), 400, "invalid_argument", "acks[0].receipt");
});

test("priority: due messages are leased lowest first; out of range is refused", async () => {
  const topic = `${run}.prio`;
  await c.send(topic, "later", { id: "later", delayMs: 3_600_000 }); // priority 0, not due: never leased early
  await c.send(topic, "low", { id: "low", priority: 9 });
  await c.send(topic, "default", { id: "default" });
  const p3 = await c.send(topic, "mid", { id: "mid", priority: 3 });
  assert.equal(p3.priority, 3);
  assert.equal((await c.get(topic, "default")).priority, 0);
  const msgs = await c.lease(topic, { max: 10 });
  assert.deepEqual(msgs.map((m) => [m.id, m.priority]), [["default", 0], ["mid", 3], ["low", 9]]);
  await refused(c.send(topic, "x", { priority: 256 }), 400, "invalid_argument", "priority");
  await refused(c.sendBatch(topic, [{ payload: "ok" }, { payload: "x", priority: -1 }]), 400, "invalid_argument", "messages[1].priority");
});

test("a long-poll wakes on a send", async () => {
  const topic = `${run}.poll`;
  const polled = c.lease(topic, { waitMs: 20_000 });
  await new Promise((r) => setTimeout(r, 50));
  await c.send(topic, "x", { id: "p1" });
  assert.deepEqual((await polled).map((m) => m.id), ["p1"]);
});

test("durations come as numbers beside the strings", async () => {
  const topic = `${run}.settings`;
  const set = await c.setTopicSettings(topic, { max_attempts: 3, lease_ms: 45_000, backoff: { initial_ms: 2_000, max: "1m", multiplier: 3, jitter: 0.1 } });
  assert.equal(set.lease, "45s");
  assert.equal(set.lease_ms, 45_000);
  assert.equal(set.backoff?.initial_ms, 2_000);
  assert.equal(set.backoff?.max_ms, 60_000);
  // An answer sent back as it is means the same settings.
  const again = await c.setTopicSettings(topic, set);
  assert.deepEqual(again, set);
  await refused(c.setTopicSettings(topic, { lease: "30s", lease_ms: 60_000 }), 400, "invalid_argument", "lease_ms");
  const info = await c.topic(topic);
  assert.equal(info.settings.lease_ms, 45_000);
});

test("browse, bulk changes, pause, delete", async () => {
  const topic = `${run}.browse`;
  for (const [id, min] of [["b3", 3], ["b1", 1], ["b2", 2]] as const) await c.send(topic, "x", { id, delayMs: min * 60_000 });
  const first = await c.listMessages(topic, { state: "scheduled", limit: 2 });
  assert.deepEqual(first.messages.map((m) => m.id), ["b1", "b2"]);
  assert.ok(first.next_cursor);
  const rest = await c.listMessages(topic, { state: "scheduled", cursor: first.next_cursor });
  assert.deepEqual(rest.messages.map((m) => m.id), ["b3"]);
  assert.equal(rest.next_cursor, undefined);
  assert.equal(await c.rescheduleMessages(topic, { state: "scheduled" }, { delayMs: 0 }), 3);
  assert.equal((await c.pauseTopic(topic, true)).paused, true);
  assert.deepEqual(await c.lease(topic, { max: 10 }), []); // paused: nothing is handed out
  assert.equal((await c.pauseTopic(topic, false)).paused, false);
  assert.equal(await c.cancelMessages(topic, { state: "ready", due_after: new Date(0).toISOString() }), 3);
  await refused(c.listMessages(topic, { state: "ready", limit: 1001 }), 400, "invalid_argument", "limit");
  await c.cancelMessages(topic, { state: "scheduled" });
  await c.cancelMessages(topic, { state: "ready" });
  await c.deleteTopic(topic);
  await refused(c.deleteTopic(topic), 404, "not_found");
});

test("schedules: set, pause, get, delete", async () => {
  const name = `${run}-report`;
  const s = await c.setSchedule(name, { topic: `${run}.reports`, cron: "@every 1h", payload: new Uint8Array([0xff, 0x00]), headers: { h: "v" }, maxAttempts: 3, delayMs: 60_000, missed: "skip" });
  assert.equal(s.name, name);
  assert.equal(s.delay, "1m0s");
  assert.equal(s.delay_ms, 60_000);
  assert.deepEqual(payloadBytes(s), new Uint8Array([0xff, 0x00]));
  assert.ok(s.next_tick);
  const paused = await c.pauseSchedule(name, true);
  assert.equal(paused.paused, true);
  assert.equal((await c.getSchedule(name)).paused, true);
  await c.deleteSchedule(name);
  await refused(c.getSchedule(name), 404, "not_found");
  await refused(c.setSchedule(`${run}-bad`, { topic: "t", cron: "nope", payload: "" }), 400, "invalid_argument");
});

test("the server serves the document the client was built from", async () => {
  const doc = await c.openapi();
  assert.equal(doc["openapi"], "3.1.0");
  assert.ok(Object.keys(doc["paths"] as object).includes("/v1/topics/{topic}/messages:batch"));
});

/**
 * A fetch that lets the request reach the server, reads the answer, then
 * reports a dropped connection — a proxy failing between server and client
 * — for the first `drop` calls whose path ends with one of `paths`.
 */
function dropping(paths: string[], drop: number): { fetch: typeof fetch; dropped: () => number } {
  let dropped = 0;
  const f: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    const path = new URL(String(input)).pathname;
    if (dropped < drop && paths.some((p) => path.endsWith(p))) {
      await res.arrayBuffer();
      dropped++;
      throw new TypeError(`fetch failed (the test dropped the answer to ${path})`);
    }
    return res;
  };
  return { fetch: f, dropped: () => dropped };
}

test("answers lost after the server acted: safe calls are retried and find what was done; others say so", async () => {
  const topic = `${run}.lost`;
  const sends = dropping(["/messages"], 1);
  const m = await new Client(url, { fetch: sends.fetch, backoffMs: 1 }).send(topic, "no id given", { delayMs: 3_600_000 });
  assert.equal(sends.dropped(), 1);
  assert.equal(m.duplicate, true, "the retry found the message its first attempt made");
  assert.equal(m.id.length, 26);
  const batches = dropping(["/messages:batch"], 1);
  const batch = await new Client(url, { fetch: batches.fetch, backoffMs: 1 }).sendBatch(topic, [{ payload: "a", delayMs: 3_600_000 }, { payload: "b", delayMs: 3_600_000 }]);
  assert.equal(batches.dropped(), 1);
  assert.deepEqual(batch.map((r) => r.message?.duplicate), [true, true]);
  const page = await c.listMessages(topic, { state: "scheduled" });
  assert.equal(page.messages.length, 3, "one message per send, none made twice");

  const work = `${run}.lostwork`;
  for (const id of ["x", "y"]) await c.send(work, id, { id });
  const [x, y] = await c.lease(work, { max: 2 });
  assert.ok(x?.receipt && y?.receipt);
  const acks = dropping(["/ack"], 1);
  await new Client(url, { fetch: acks.fetch, backoffMs: 1 }).ack(work, x.id, x.receipt);
  assert.equal(acks.dropped(), 1);
  assert.equal((await c.get(work, x.id)).state, "acked");

  const nacks = dropping(["/nack"], 1);
  const nacked = await new Client(url, { fetch: nacks.fetch, backoffMs: 1 }).nack(work, y.id, y.receipt, { delayMs: 3_600_000, reason: "downstream 502" });
  assert.equal(nacks.dropped(), 1);
  assert.equal(nacked.state, "scheduled");
  assert.equal(nacked.failures, 1, "the retry found the nack done and did not count it again");
  assert.equal((await c.get(work, y.id)).failures, 1);

  // A cancel is not repeated: its outcome is unknown, and the error says so.
  const cancels = dropping([`/messages/${y.id}`], 1);
  await assert.rejects(new Client(url, { fetch: cancels.fetch, backoffMs: 1 }).cancel(work, y.id), TypeError);
  await assert.rejects(c.get(work, y.id), "the cancel had landed");

  // With retries off nothing is repeated, and a send without an id stays without one.
  const off = dropping(["/messages"], 1);
  await assert.rejects(new Client(url, { fetch: off.fetch, retries: 0 }).send(topic, "once", { delayMs: 3_600_000 }), TypeError);
  assert.equal((await c.listMessages(topic, { state: "scheduled" })).messages.length, 4);
});

test("503, 502, 504, 408 and 429 mean not carried out: retried, lease included, up to retries", async () => {
  const topic = `${run}.busy`;
  await c.send(topic, "x", { id: "busy-1" });
  for (const status of [503, 502, 504, 408, 429]) {
    let refusedCalls = 0;
    const busy: typeof fetch = async (input, init) => {
      if (refusedCalls < 2) {
        refusedCalls++;
        return new Response(JSON.stringify({ error: { code: "unavailable", message: "busy" } }), { status, headers: { "Retry-After": "0" } });
      }
      return fetch(input, init);
    };
    const got = await new Client(url, { fetch: busy, backoffMs: 1 }).get(topic, "busy-1");
    assert.equal(got.id, "busy-1", `after two ${status} answers`);
  }
  let calls = 0;
  const always503: typeof fetch = async () => {
    calls++;
    return new Response(JSON.stringify({ error: { code: "unavailable", message: "down" } }), { status: 503 });
  };
  await refused(new Client(url, { fetch: always503, retries: 2, backoffMs: 1 }).lease(topic), 503, "unavailable");
  assert.equal(calls, 3, "the first attempt and two retries");
  assert.throws(() => new Client(url, { retries: -1 }), RangeError);
});

test("newId: 26 Crockford characters that sort by creation, also within a millisecond", () => {
  const ids = Array.from({ length: 2000 }, () => newId());
  for (const id of ids) assert.match(id, /^[0-9A-HJKMNP-TV-Z]{26}$/);
  assert.deepEqual([...ids].sort(), ids);
  assert.equal(new Set(ids).size, ids.length);
  const ms = Date.now();
  const t = parseInt(ids[ids.length - 1]!.slice(0, 10).split("").map((ch) => "0123456789ABCDEFGHJKMNPQRSTVWXYZ".indexOf(ch).toString(32)).join(""), 32);
  assert.ok(Math.abs(t - ms) < 60_000, `the id's time ${t} is now (${ms})`);
});
