// A session's event stream that survives network drops and server
// restarts. EventSource reconnects by itself with Last-Event-ID after a
// dropped connection; but when the server answers a reconnect with an
// error (503 while it restarts) it gives up for good. Then this opens a new
// one from the last seq the page applied (?since=N), with backoff. The
// Timeline drops what it has seen, so overlaps are harmless; a gap makes
// it throw, and the stream restarts from its last seq.

import type { Ev } from "./timeline";

export interface StreamHandlers {
  // apply takes one event; it throws on a gap.
  apply(ev: Ev): void;
  lastSeq(): number;
  // status reports the connection: "live", "reconnecting", or the reason it
  // ended for good.
  status(s: string): void;
}

export class EventStream {
  private es: EventSource | null = null;
  private timer = 0;
  private tries = 0;
  private closed = false;

  constructor(
    private readonly session: string,
    private readonly h: StreamHandlers,
  ) {
    this.open();
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.es?.close();
    this.es = null;
  }

  private open(): void {
    if (this.closed) return;
    const since = this.h.lastSeq();
    const es = new EventSource(`/v1/sessions/${encodeURIComponent(this.session)}/events${since > 0 ? `?since=${since}` : ""}`);
    this.es = es;
    es.onopen = () => {
      this.tries = 0;
      this.h.status("live");
    };
    es.onmessage = (m) => this.take(m);
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) this.retry();
      else this.h.status("reconnecting");
    };
    es.addEventListener("stream.error", (m) => {
      let code = "";
      try {
        code = JSON.parse((m as MessageEvent).data).error.code;
      } catch { /* not JSON: reconnect */ }
      if (code === "deleted") {
        this.h.status("the session was deleted");
        this.close();
        return;
      }
      this.retry();
    });
    // Every event type arrives as a named SSE event.
    for (const t of EVENT_TYPES) es.addEventListener(t, (m) => this.take(m as MessageEvent));
  }

  private take(m: MessageEvent): void {
    try {
      this.h.apply(JSON.parse(m.data) as Ev);
    } catch (e) {
      console.warn("event stream:", e);
      this.retry();
    }
  }

  private retry(): void {
    this.es?.close();
    this.es = null;
    if (this.closed) return;
    this.h.status("reconnecting");
    const delay = Math.min(5000, 250 * 2 ** this.tries++);
    clearTimeout(this.timer);
    this.timer = window.setTimeout(() => this.open(), delay);
  }
}

// EVENT_TYPES are the event types of package event (events.compacted:
// event/retention.go).
export const EVENT_TYPES = [
  "session.state", "message.queued", "message.delivered", "turn.started", "assistant.delta", "assistant.message",
  "assistant.thinking.delta", "assistant.thinking", "tool.started", "tool.input.delta", "tool.output", "tool.finished",
  "step.finished", "turn.finished", "turn.cancelled", "turn.failed", "terminal.output", "compaction", "loop.detected",
  "todo.updated", "git.committed", "git.pushed", "pr.opened", "pr.merged", "pr.closed", "stuck", "github.failed",
  "shell.opened", "shell.closed", "events.compacted",
];
