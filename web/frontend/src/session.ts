// A session's page: state banner, tokens and cost, the timeline as it
// streams, and the composer (send queued or interrupting, cancel the
// turn). Terminal-agent sessions also get an xterm.js replay of the PTY.
// Two more tabs: the Changes (changes.ts) and a live Shell (shell.ts).

import { Terminal } from "@xterm/xterm";
import { api, ApiError, must, type View } from "./api";
import { changesTab } from "./changes";
import { shellTab } from "./shell";
import { clear, h } from "./dom";
import { duration, live, money, tokens } from "./format";
import { renderMarkdown } from "./markdown";
import { EventStream } from "./stream";
import { Timeline, type Item } from "./timeline";

export interface PageContext {
  frame(...body: Node[]): void;
  errorText(e: unknown): string;
  onSignedOut(): void;
  seen(updatedAt: string): void;
}

function itemNode(it: Item): HTMLElement {
  switch (it.kind) {
    case "user":
      return h("div", { class: `item user ${it.state}`, "data-seq": it.seq },
        h("div", { class: "who" }, "you", it.state === "queued" ? h("span", { class: "tag queued" }, it.mode === "interrupt" ? "interrupting" : "queued") : null),
        h("div", { class: "text" }, it.text));
    case "assistant": {
      const text = h("div", { class: "text md" });
      text.innerHTML = renderMarkdown(it.text); // sanitized (markdown.ts)
      // A turn's result stands in for its removed messages: the seq is the
      // turn item's (after it), so it carries none of its own.
      return h("div", it.result ? { class: "item assistant result" } : { class: "item assistant", "data-seq": it.seq }, h("div", { class: "who" }, "agent"), text);
    }
    case "thinking":
      return h("details", { class: "item thinking", "data-seq": it.seq }, h("summary", {}, "thinking"), h("div", { class: "text" }, it.text));
    case "tool": {
      const status = it.running ? "running…" : it.removed ? "its end was removed by the retention policy" : it.blocked ? `blocked: ${it.blocked}` : `${it.error ? "failed" : "done"} in ${duration(it.durationMS)}`;
      return h("details", { class: `item tool${it.error || it.blocked ? " failed" : ""}${it.running ? " running" : ""}`, "data-seq": it.seq, open: it.running || it.error },
        h("summary", {}, h("span", { class: "tool-name" }, it.tool), " ", h("span", { class: "summary" }, it.summary || firstLine(it.input)), " ", h("span", { class: "status" }, status)),
        it.input ? h("pre", { class: "input" }, it.input) : null,
        it.output ? h("pre", { class: "output" }, it.output) : null);
    }
    case "turn":
      return h("div", { class: `item turn ${it.outcome}`, "data-seq": it.seq },
        `turn ${it.outcome}${it.text ? `: ${it.text}` : ""} · ${money(it.costUSD)}`);
    case "alert":
      return h("div", { class: `item alert ${it.level}`, role: "alert", "data-seq": it.seq }, h("strong", {}, it.title), it.text ? " " + it.text : "");
    case "note":
      return h("div", { class: "item note", "data-seq": it.seq }, it.text, it.url ? h("a", { href: it.url, target: "_blank", rel: "noopener noreferrer" }, " " + it.url) : null);
    case "removed":
      return h("div", { class: "item removed", "data-seq": it.seq, title: `events ${it.from} to ${it.to}` },
        `${it.count} earlier ${it.count === 1 ? "event was" : "events were"} removed by the retention policy`);
  }
}

function firstLine(s: string): string {
  const l = s.replace(/\s+/g, " ").trim();
  return l.length > 100 ? l.slice(0, 100) + "…" : l;
}

export function sessionPage(id: string, ctx: PageContext): { stop(): void } {
  const tl = new Timeline();
  const title = h("h1", {}, id);
  const banner = h("div", { class: "banner", role: "status", "aria-live": "polite" });
  const meter = h("div", { class: "meter" });
  const conn = h("span", { class: "conn" }, "connecting…");
  const list = h("div", { class: "timeline", "aria-live": "off" });
  const msg = h("p", { class: "error", role: "alert" });
  const text = h("textarea", { rows: 3, placeholder: "Message the agent (Ctrl+Enter sends after the current turn; Alt+Enter interrupts it)", "aria-label": "Message" });
  const term = h("div", { class: "replay" });
  let xterm: Terminal | null = null;
  let termDone = 0;
  let view: View | null = null;
  const nodes: HTMLElement[] = [];

  async function send(mode: "queue" | "interrupt") {
    const t = text.value;
    if (!t.trim()) {
      msg.textContent = "Write a message first.";
      return;
    }
    msg.textContent = "";
    try {
      must(await api.POST("/v1/sessions/{id}/messages", { params: { path: { id } }, body: { text: t, mode } }));
      text.value = "";
    } catch (e) {
      fail(e);
    }
  }
  // remove deletes the session: the first click asks, the second does it.
  let armed = false;
  async function remove() {
    msg.textContent = "";
    if (!armed) {
      armed = true;
      del.textContent = "Click again to delete";
      return;
    }
    try {
      must(await api.DELETE("/v1/sessions/{id}", { params: { path: { id } } }));
      location.hash = "#/";
    } catch (e) {
      armed = false;
      del.textContent = "Delete session";
      fail(e);
    }
  }
  async function cancel() {
    msg.textContent = "";
    try {
      must(await api.POST("/v1/sessions/{id}/cancel", { params: { path: { id } } }));
    } catch (e) {
      fail(e);
    }
  }
  function fail(e: unknown) {
    if (e instanceof ApiError && e.status === 401) return ctx.onSignedOut();
    msg.textContent = ctx.errorText(e);
  }
  text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); void send("queue"); }
    if (e.key === "Enter" && e.altKey) { e.preventDefault(); void send("interrupt"); }
  });
  const del = h("button", { type: "button", class: "delete", onclick: () => void remove() }, "Delete session");
  // Who may only read the session gets no controls to act on it (the
  // server refuses them anyway): they stay disabled until GET says the
  // caller writes, and readOnly says why.
  const controls = [text,
    h("button", { type: "button", class: "send", onclick: () => void send("queue") }, "Send"),
    h("button", { type: "button", class: "interrupt", onclick: () => void send("interrupt") }, "Interrupt"),
    h("button", { type: "button", class: "cancel", onclick: () => void cancel() }, "Cancel turn"),
    del];
  const readOnly = h("p", { class: "read-only muted", hidden: true },
    "You may read this session but not act on it: sending, cancelling, deleting and the shell need write access to its repositories (and a member's or admin's role).");
  const composer = h("div", { class: "composer" }, text,
    h("div", { class: "buttons" }, ...controls.slice(1)),
    readOnly, msg);
  function allow(write: boolean) {
    for (const c of controls) c.disabled = !write;
    readOnly.hidden = write;
    shell.allow(write);
  }
  const changes = changesTab(id, ctx);
  const shell = shellTab(id);
  const timelineTab = h("section", { class: "timeline-tab" }, term, list, composer);
  const panes = { timeline: timelineTab, changes: changes.node, shell: shell.node };
  type Tab = keyof typeof panes;
  const tabButtons = (Object.keys(panes) as Tab[]).map((t) =>
    h("button", { type: "button", role: "tab", class: `tab tab-${t}`, "data-tab": t, onclick: () => show(t) }, t[0]!.toUpperCase() + t.slice(1)));
  function show(t: Tab) {
    for (const b of tabButtons) b.setAttribute("aria-selected", String(b.dataset.tab === t));
    for (const [k, n] of Object.entries(panes)) n.hidden = k !== t;
    if (t === "changes") void changes.load();
    if (t === "shell") shell.open();
  }
  show("timeline");
  ctx.frame(h("div", { class: "session-head" }, title, conn), banner, meter, h("div", { class: "tabs", role: "tablist" }, ...tabButtons), timelineTab, changes.node, shell.node);

  function header() {
    const state = tl.state || view?.state || "";
    banner.className = `banner ${state}`;
    banner.textContent = state ? `${state}${tl.stateReason ? ` — ${tl.stateReason}` : ""}` : "";
    const cost = Math.max(view?.cost_usd ?? 0, tl.totals.costUSD);
    meter.textContent = `${tokens(tl.totals.inputTokens)} in · ${tokens(tl.totals.outputTokens)} out · ${money(cost)}`;
    composer.classList.toggle("ended", state !== "" && !live(state));
  }

  let pending = 0;
  function flush() {
    pending = 0;
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
    for (const i of tl.take()) {
      const it = tl.items[i]!;
      const old = nodes[i];
      // A tool the reader opened stays open when it is redrawn.
      const open = old instanceof HTMLDetailsElement && old.open;
      const n = itemNode(it);
      if (open && n instanceof HTMLDetailsElement) n.open = true;
      nodes[i] = n;
      if (old) old.replaceWith(n);
      else list.append(n);
    }
    header();
    if (xterm) for (; termDone < tl.terminal.length; termDone++) xterm.write(tl.terminal[termDone]!);
    if (atBottom) window.scrollTo(0, document.body.scrollHeight);
  }

  const stream = new EventStream(id, {
    apply: (ev) => {
      tl.apply(ev);
      if (!pending) pending = requestAnimationFrame(flush);
      if (ev.type === "session.state" || ev.type.startsWith("turn.")) void refresh();
    },
    lastSeq: () => tl.lastSeq,
    status: (s) => {
      conn.textContent = s;
      conn.className = `conn ${s === "live" ? "live" : "off"}`;
    },
  });

  async function refresh() {
    try {
      view = must(await api.GET("/v1/sessions/{id}", { params: { path: { id } } }));
      title.textContent = view.title || `${view.id} · ${view.repos.map((r) => r.name).join(", ")} · ${view.agent}${view.model ? ` · ${view.model}` : ""}`;
      ctx.seen(view.updated_at);
      allow(view.access === "write");
      if (view.agent === "terminal" && !xterm) {
        xterm = new Terminal({ convertEol: false, disableStdin: true, rows: 24, cols: 100, scrollback: 5000 });
        xterm.open(term);
        term.classList.add("on");
      }
      header();
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        // Gone, or never theirs to see (the server does not say which):
        // nothing of it stays on the page.
        stream.close();
        shell.stop();
        ctx.frame(h("h1", {}, id), h("p", { class: "error gone", role: "alert" },
          `${ctx.errorText(e)}: there is no such session, it was deleted, or it is not yours to see (its repository's access decides).`),
          h("p", {}, h("a", { href: "#/" }, "Back to your sessions")));
        return;
      }
      fail(e);
    }
  }
  for (const c of controls) c.disabled = true; // until GET says
  void refresh().then(() => { if (!text.disabled) text.focus(); });
  return {
    stop() {
      stream.close();
      cancelAnimationFrame(pending);
      xterm?.dispose();
      shell.stop();
    },
  };
}
