// The timeline's rules, under node (npm test): each event once by seq, no
// gaps, and what each kind of event makes of the page.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ago, duration, money } from "../src/format";
import { tail, Timeline, type Ev } from "../src/timeline";

let seq = 0;
function ev(type: string, data: Record<string, unknown>, turn = "t1"): Ev {
  return { session: "s-x", seq: ++seq, time: "2026-01-01T00:00:00Z", turn, type, data };
}

test("each event is taken once, in order; a gap throws", () => {
  seq = 0;
  const tl = new Timeline();
  const a = ev("session.state", { state: "pending" });
  const b = ev("session.state", { state: "idle" });
  assert.equal(tl.apply(a), true);
  assert.equal(tl.apply(b), true);
  // A replay after a reconnect overlaps: nothing is repeated.
  assert.equal(tl.apply(a), false);
  assert.equal(tl.apply(b), false);
  assert.equal(tl.state, "idle");
  const gap = { ...b, seq: 5 };
  assert.throws(() => tl.apply(gap), /gap/);
  assert.equal(tl.lastSeq, 2);
});

test("a turn: queued then delivered message, streamed text, a tool, usage and cost", () => {
  seq = 0;
  const tl = new Timeline();
  tl.apply(ev("message.queued", { message_id: "m1", text: "fix it", mode: "queue", position: 1 }));
  assert.deepEqual(tl.take(), [0]);
  assert.equal(tl.items[0]!.kind === "user" && tl.items[0]!.state, "queued");
  tl.apply(ev("message.delivered", { message_id: "m1" }));
  tl.apply(ev("turn.started", { prompt: "fix it" }));
  tl.apply(ev("assistant.delta", { text: "Look" }));
  tl.apply(ev("assistant.delta", { text: "ing" }));
  tl.apply(ev("tool.started", { call_id: "c1", tool: "bash", input: { command: "ls" } }));
  tl.apply(ev("tool.output", { call_id: "c1", text: "a\n" }));
  tl.apply(ev("tool.finished", { call_id: "c1", tool: "bash", output: "a\nb\n", duration_ms: 1500 }));
  tl.apply(ev("assistant.delta", { text: "Done" }));
  tl.apply(ev("assistant.message", { text: "Done." }));
  tl.apply(ev("step.finished", { step: 1, usage: { input_tokens: 100, output_tokens: 10 }, cost_usd: 0.5, duration_ms: 1 }));
  tl.apply(ev("turn.finished", { result: "", steps: 1, usage: {}, cost_usd: 0.5, duration_ms: 3 }));
  assert.deepEqual(tl.items.map((i) => i.kind), ["user", "assistant", "tool", "assistant", "turn"]);
  const [user, a1, tool, a2] = tl.items;
  assert.equal(user!.kind === "user" && user!.state, "delivered");
  assert.equal(a1!.kind === "assistant" && a1!.text, "Looking");
  assert.ok(tool!.kind === "tool" && !tool!.running && tool!.output === "a\nb\n" && tool!.durationMS === 1500 && !tool!.error);
  assert.equal(a2!.kind === "assistant" && a2!.text, "Done.");
  assert.deepEqual(tl.totals, { inputTokens: 100, outputTokens: 10, costUSD: 0.5 });
});

test("failures, cancels, loops and stuck are called out; a cancelled turn's tools stop running", () => {
  seq = 0;
  const tl = new Timeline();
  tl.apply(ev("tool.started", { call_id: "c1", tool: "bash" }));
  tl.apply(ev("turn.cancelled", { reason: "cancelled by the user" }));
  assert.ok(tl.items[0]!.kind === "tool" && !tl.items[0]!.running);
  tl.apply(ev("loop.detected", { pattern: "same_call", detail: "bash ls x3", action: "stopped" }, "t2"));
  tl.apply(ev("stuck", { text: "I cannot" }, "t2"));
  tl.apply(ev("turn.failed", { kind: "model", error: "overloaded" }, "t2"));
  tl.apply(ev("session.state", { state: "failed", reason: "boom" }));
  const kinds = tl.items.map((i) => (i.kind === "alert" ? `alert:${i.level}` : i.kind === "turn" ? `turn:${i.outcome}` : i.kind));
  assert.deepEqual(kinds, ["tool", "turn:cancelled", "alert:warn", "alert:warn", "turn:failed", "alert:error"]);
});

test("terminal output is kept as bytes for the replay", () => {
  seq = 0;
  const tl = new Timeline();
  tl.apply(ev("terminal.output", { data: Buffer.from("hi\r\n").toString("base64") }));
  assert.equal(new TextDecoder().decode(tl.terminal[0]), "hi\r\n");
});

test("tails and formats", () => {
  assert.equal(tail("abcdef", 3), "…def");
  assert.equal(tail("abc", 3), "abc");
  assert.equal(money(0), "$0");
  assert.equal(money(0.001), "<$0.01");
  assert.equal(money(1.234), "$1.23");
  assert.equal(duration(250), "250 ms");
  assert.equal(duration(1500), "1.5 s");
  assert.equal(duration(125000), "2 min 5 s");
  assert.equal(ago("2026-01-01T00:00:00Z", Date.parse("2026-01-01T00:02:00Z")), "2m ago");
});

test("events removed by the retention policy: a marker says how many, and the timeline carries on", () => {
  seq = 0;
  const tl = new Timeline();
  tl.apply(ev("message.queued", { message_id: "m1", text: "fix it", mode: "queue", position: 1 }));
  tl.apply(ev("turn.started", { prompt: "fix it" }));
  // Seqs 3-7 removed (text, tools): one marker at 7.
  seq = 7;
  tl.apply({ session: "s-x", seq: 7, time: "2026-01-01T00:00:00Z", type: "events.compacted", data: { from: 3, to: 7, reason: "retention" } });
  tl.apply(ev("step.finished", { step: 1, usage: { input_tokens: 10, output_tokens: 1 }, cost_usd: 0.1 }));
  tl.apply(ev("turn.finished", { result: "Fixed the test.", steps: 1, usage: {}, cost_usd: 0.1 }));
  assert.equal(tl.lastSeq, 9);
  assert.deepEqual(tl.items.map((i) => i.kind), ["user", "removed", "assistant", "turn"]);
  const removed = tl.items[1]!;
  assert.ok(removed.kind === "removed" && removed.count === 5 && removed.from === 3 && removed.to === 7);
  // The turn's text was removed: its result is shown as its answer.
  assert.ok(tl.items[2]!.kind === "assistant" && tl.items[2]!.text === "Fixed the test.");
  assert.deepEqual(tl.totals, { inputTokens: 10, outputTokens: 1, costUSD: 0.1 });

  // A page that had seen up to seq 4 before the compaction: only 5-7 are news.
  const seen = new Timeline();
  seq = 0;
  for (const t of ["message.queued", "turn.started", "assistant.message"]) seen.apply(ev(t, { message_id: "m1", text: "x" }));
  seen.apply(ev("tool.started", { call_id: "c1", tool: "bash" }));
  assert.equal(seen.apply({ session: "s-x", seq: 7, time: "", type: "events.compacted", data: { from: 3, to: 7 } }), true);
  const r = seen.items[seen.items.length - 1]!;
  assert.ok(r.kind === "removed" && r.count === 3 && r.from === 5, JSON.stringify(r));
  // The tool it saw start ended in the removed events: not running, and said so.
  const tool = seen.items.find((i) => i.kind === "tool")!;
  assert.ok(tool.kind === "tool" && !tool.running && tool.removed === true);
  // Replayed: nothing twice.
  assert.equal(seen.apply({ session: "s-x", seq: 7, time: "", type: "events.compacted", data: { from: 3, to: 7 } }), false);

  // A marker that starts after the next seq is a gap all the same.
  const gap = new Timeline();
  gap.apply({ session: "s-x", seq: 1, time: "", type: "session.state", data: { state: "idle" } });
  assert.throws(() => gap.apply({ session: "s-x", seq: 9, time: "", type: "events.compacted", data: { from: 5, to: 9 } }), /gap/);
  assert.equal(gap.lastSeq, 1);
});

test("a turn answered in its messages shows no result twice", () => {
  seq = 0;
  const tl = new Timeline();
  tl.apply(ev("turn.started", { prompt: "x" }));
  tl.apply(ev("assistant.message", { text: "Done." }));
  tl.apply(ev("turn.finished", { result: "Done.", steps: 1, usage: {}, cost_usd: 0 }));
  assert.deepEqual(tl.items.map((i) => i.kind), ["assistant", "turn"]);
});
