// The timeline of a session page, built from its events. Pure (no DOM), so
// it is unit-tested under node (test/timeline.test.ts): the page renders
// what it holds.
//
// Events arrive over an EventSource that reconnects after a network drop or
// a server restart; the server replays from Last-Event-ID, and a replay may
// overlap what was already seen. apply() takes every event once, by seq,
// and refuses a gap, so the page neither repeats nor loses anything.
//
// The one gap it takes is the server's own: events its retention policy
// removed (harvest serve --event-retention) come as one events.compacted
// event per removed run, with the run's last seq and data {from, to}. The
// page says how many of them it had not seen ("N earlier events were
// removed by the retention policy") and carries on; a turn whose text was
// removed shows its result (turn.finished's) as the agent's answer.

export interface Ev {
  session: string;
  seq: number;
  time: string;
  turn?: string;
  type: string;
  data: Record<string, unknown>;
}

export type Item =
  | { kind: "user"; seq: number; id: string; text: string; mode: string; state: "queued" | "delivered" }
  // result: the text is the turn's result (turn.finished), shown because
  // retention removed its messages; its seq is the turn.finished's.
  | { kind: "assistant"; seq: number; turn: string; text: string; done: boolean; result?: boolean }
  | { kind: "thinking"; seq: number; turn: string; text: string }
  | {
      kind: "tool"; seq: number; callID: string; tool: string; input: string; summary: string;
      output: string; running: boolean; error: boolean; durationMS: number; blocked: string;
      // removed: its end (output, tool.finished) was removed by retention.
      removed?: boolean;
    }
  | { kind: "turn"; seq: number; turn: string; outcome: "finished" | "cancelled" | "failed"; text: string; costUSD: number }
  | { kind: "alert"; seq: number; level: "warn" | "error"; title: string; text: string }
  | { kind: "note"; seq: number; text: string; url?: string }
  | { kind: "removed"; seq: number; count: number; from: number; to: number };

export interface Totals {
  inputTokens: number;
  outputTokens: number;
  costUSD: number;
}

// outputTail is how much of a tool's output the page keeps: the end, where
// the result and the errors are.
export const outputTail = 4000;

export function tail(s: string, n = outputTail): string {
  return s.length <= n ? s : "…" + s.slice(s.length - n);
}

const str = (v: unknown): string => (typeof v === "string" ? v : v === undefined || v === null ? "" : JSON.stringify(v));
const num = (v: unknown): number => (typeof v === "number" ? v : 0);

export class Timeline {
  items: Item[] = [];
  lastSeq = 0;
  state = "";
  stateReason = "";
  totals: Totals = { inputTokens: 0, outputTokens: 0, costUSD: 0 };
  // terminal holds the bytes of terminal.output, for the xterm replay.
  terminal: Uint8Array[] = [];
  // changed lists the indexes of items changed since the last take().
  private changed = new Set<number>();
  private byCall = new Map<string, number>();
  private byMessage = new Map<string, number>();
  private assistantOf = new Map<string, number>();
  private thinkingOf = new Map<string, number>();
  private turnUsage = { inputTokens: 0, outputTokens: 0, costUSD: 0 };
  // answered holds the turns that have an assistant item; removedInTurn
  // says events of the current turn were removed by retention.
  private answered = new Set<string>();
  private removedInTurn = false;

  // apply takes one event: true if it was new, false if already seen. An
  // event past the next seq is an error (the caller reconnects from
  // lastSeq).
  apply(ev: Ev): boolean {
    if (ev.seq <= this.lastSeq) return false;
    if (ev.type === "events.compacted") {
      // It stands for the seqs from..seq: those after lastSeq are news.
      const from = num(ev.data?.from);
      if (from < 1 || from > this.lastSeq + 1) {
        throw new Error(`events ${from}-${ev.seq} removed after ${this.lastSeq}: a gap in the stream`);
      }
      const first = this.lastSeq + 1;
      this.lastSeq = ev.seq;
      this.removedInTurn = true;
      // A tool still running here ended in the removed events.
      for (const i of this.byCall.values()) {
        const it = this.items[i];
        if (it?.kind === "tool" && it.running) { it.running = false; it.removed = true; this.changed.add(i); }
      }
      this.push({ kind: "removed", seq: ev.seq, count: ev.seq - first + 1, from: first, to: ev.seq });
      return true;
    }
    if (ev.seq !== this.lastSeq + 1) {
      throw new Error(`event ${ev.seq} after ${this.lastSeq}: a gap in the stream`);
    }
    this.lastSeq = ev.seq;
    this.handle(ev);
    return true;
  }

  // take returns the items changed since the last call, in order.
  take(): number[] {
    const out = [...this.changed].sort((a, b) => a - b);
    this.changed.clear();
    return out;
  }

  private push(it: Item): number {
    this.items.push(it);
    const i = this.items.length - 1;
    this.changed.add(i);
    return i;
  }

  private touch(i: number | undefined): Item | undefined {
    if (i === undefined) return undefined;
    this.changed.add(i);
    return this.items[i];
  }

  private handle(ev: Ev): void {
    const d = ev.data ?? {};
    const turn = ev.turn ?? "";
    switch (ev.type) {
      case "session.state":
        this.state = str(d.state);
        this.stateReason = str(d.reason);
        if (this.state === "failed") {
          this.push({ kind: "alert", seq: ev.seq, level: "error", title: "session failed", text: this.stateReason });
        }
        return;
      case "message.queued": {
        const id = str(d.message_id);
        this.byMessage.set(id, this.push({ kind: "user", seq: ev.seq, id, text: str(d.text), mode: str(d.mode), state: "queued" }));
        return;
      }
      case "message.delivered": {
        const it = this.touch(this.byMessage.get(str(d.message_id)));
        if (it?.kind === "user") it.state = "delivered";
        return;
      }
      case "turn.started":
        this.turnUsage = { inputTokens: 0, outputTokens: 0, costUSD: 0 };
        this.removedInTurn = false;
        return;
      case "assistant.delta":
      case "assistant.message": {
        const i = this.assistantOf.get(turn);
        const it = this.touch(i);
        if (it?.kind === "assistant" && !it.done) {
          if (ev.type === "assistant.delta") it.text += str(d.text);
          else { it.text = str(d.text); it.done = true; this.assistantOf.delete(turn); }
          return;
        }
        this.answered.add(turn);
        const n = this.push({ kind: "assistant", seq: ev.seq, turn, text: str(d.text), done: ev.type === "assistant.message" });
        if (ev.type === "assistant.delta") this.assistantOf.set(turn, n);
        return;
      }
      case "assistant.thinking.delta":
      case "assistant.thinking": {
        const it = this.touch(this.thinkingOf.get(turn));
        if (it?.kind === "thinking") {
          it.text = ev.type === "assistant.thinking" ? str(d.text) : it.text + str(d.text);
        } else {
          this.thinkingOf.set(turn, this.push({ kind: "thinking", seq: ev.seq, turn, text: str(d.text) }));
        }
        if (ev.type === "assistant.thinking") this.thinkingOf.delete(turn);
        return;
      }
      case "tool.started": {
        // Text after a tool call is a new message.
        this.assistantOf.delete(turn);
        const id = str(d.call_id);
        this.byCall.set(id, this.push({
          kind: "tool", seq: ev.seq, callID: id, tool: str(d.tool), input: d.input === undefined ? "" : JSON.stringify(d.input, null, 1),
          summary: str(d.summary), output: "", running: true, error: false, durationMS: 0, blocked: "",
        }));
        return;
      }
      case "tool.output": {
        const it = this.touch(this.byCall.get(str(d.call_id)));
        if (it?.kind === "tool") it.output = tail(it.output + str(d.text));
        return;
      }
      case "tool.finished": {
        const it = this.touch(this.byCall.get(str(d.call_id)));
        if (it?.kind === "tool") {
          it.running = false;
          it.output = tail(str(d.output) || it.output);
          it.error = d.is_error === true;
          it.durationMS = num(d.duration_ms);
          it.blocked = str(d.blocked);
        }
        return;
      }
      case "step.finished": {
        const u = (d.usage ?? {}) as Record<string, unknown>;
        this.turnUsage.inputTokens += num(u.input_tokens);
        this.turnUsage.outputTokens += num(u.output_tokens);
        this.turnUsage.costUSD += num(d.cost_usd);
        this.totals.inputTokens += num(u.input_tokens);
        this.totals.outputTokens += num(u.output_tokens);
        this.totals.costUSD += num(d.cost_usd);
        return;
      }
      case "turn.finished":
        this.endTurn(turn);
        if (this.removedInTurn && !this.answered.has(turn) && str(d.result) !== "") {
          // Its messages were removed by retention: its result is its answer.
          this.answered.add(turn);
          this.push({ kind: "assistant", seq: ev.seq, turn, text: str(d.result), done: true, result: true });
        }
        this.push({ kind: "turn", seq: ev.seq, turn, outcome: "finished", text: str(d.stop_reason), costUSD: num(d.cost_usd) });
        return;
      case "turn.cancelled":
        this.endTurn(turn);
        this.push({ kind: "turn", seq: ev.seq, turn, outcome: "cancelled", text: str(d.reason), costUSD: this.turnUsage.costUSD });
        return;
      case "turn.failed":
        this.endTurn(turn);
        this.push({ kind: "turn", seq: ev.seq, turn, outcome: "failed", text: `${str(d.kind)}: ${str(d.error)}`, costUSD: num(d.cost_usd) });
        return;
      case "loop.detected":
        this.push({ kind: "alert", seq: ev.seq, level: "warn", title: `loop detected (${str(d.pattern)})`, text: `${str(d.detail)} — ${str(d.action)}` });
        return;
      case "stuck":
        this.push({ kind: "alert", seq: ev.seq, level: "warn", title: "the agent is stuck", text: str(d.text) });
        return;
      case "github.failed":
        this.push({ kind: "alert", seq: ev.seq, level: "error", title: `GitHub: ${str(d.what)} failed`, text: str(d.error) });
        return;
      case "pr.opened":
        this.push({ kind: "note", seq: ev.seq, text: `pull request #${num(d.number)} opened`, url: str(d.url) });
        return;
      case "pr.merged":
        this.push({ kind: "note", seq: ev.seq, text: `pull request #${num(d.number)} merged${d.by ? " by " + str(d.by) : ""}: the session ends`, url: str(d.url) });
        return;
      case "pr.closed":
        this.push({ kind: "note", seq: ev.seq, text: `pull request #${num(d.number)} closed${d.by ? " by " + str(d.by) : ""}: the session ends`, url: str(d.url) });
        return;
      case "git.committed":
        this.push({ kind: "note", seq: ev.seq, text: `committed ${str(d.sha).slice(0, 12)} on ${str(d.branch)}: ${str(d.message)}` });
        return;
      case "git.pushed":
        this.push({ kind: "note", seq: ev.seq, text: d.refused ? `push of ${str(d.branch)} refused: ${str(d.refused)}` : `pushed ${str(d.branch)}` });
        return;
      case "compaction":
        this.push({ kind: "note", seq: ev.seq, text: `context compacted: ${num(d.before_tokens)} → ${num(d.after_tokens)} tokens` });
        return;
      case "shell.opened":
        this.push({ kind: "note", seq: ev.seq, text: `${str(d.by_name) || str(d.by)} opened a shell in the box` });
        return;
      case "shell.closed":
        this.push({ kind: "note", seq: ev.seq, text: `the shell closed (${str(d.reason)}, code ${num(d.code)}) after ${Math.round(num(d.duration_ms) / 1000)}s` });
        return;
      case "terminal.output":
        this.terminal.push(base64Bytes(str(d.data)));
        return;
    }
  }

  // endTurn marks what a turn left running as ended.
  private endTurn(turn: string): void {
    this.assistantOf.delete(turn);
    this.thinkingOf.delete(turn);
    for (const i of this.byCall.values()) {
      const it = this.items[i];
      if (it?.kind === "tool" && it.running) { it.running = false; this.changed.add(i); }
    }
  }
}

// base64Bytes decodes the base64 of a []byte in JSON.
export function base64Bytes(b64: string): Uint8Array {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
