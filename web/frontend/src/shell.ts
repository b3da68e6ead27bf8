// The Shell tab: a live terminal in the session's box (xterm.js over the
// WebSocket GET /v1/sessions/{id}/shell). The socket authenticates with
// the sign-in cookie; the server checks the upgrade's Origin, which the
// browser sets and a page cannot forge. Keys go out as binary messages,
// the terminal's size as {"type":"resize"} text messages.

import { Terminal } from "@xterm/xterm";
import { h } from "./dom";

export function shellTab(id: string): { node: HTMLElement; open(): void; allow(write: boolean): void; stop(): void } {
  const status = h("span", { class: "shell-status" }, "not connected");
  const connect = h("button", { type: "button", class: "connect", onclick: () => open() }, "Connect");
  const screen = h("div", { class: "shell-screen" });
  const node = h("section", { class: "shell" },
    h("div", { class: "bar" }, h("span", {}, "A shell in the session's box, in its first repository. Opening and closing it are recorded in the session's events; what you type is not."), h("span", {}, status, " ", connect)),
    screen);
  let term: Terminal | null = null;
  let ws: WebSocket | null = null;
  const enc = new TextEncoder();
  // allowed: the caller writes the session (GET's access); the shell is
  // refused to a reader, so the page does not offer it.
  let allowed: boolean | null = null; // null: not known yet
  let wanted = false;
  const refused = "not yours to open: the shell needs write access to the session's repositories";

  function size() {
    if (ws?.readyState === WebSocket.OPEN && term) ws.send(JSON.stringify({ type: "resize", rows: term.rows, cols: term.cols }));
  }
  function open() {
    wanted = true;
    if (allowed !== true) {
      status.textContent = allowed === null ? "checking…" : refused;
      status.className = "shell-status off";
      return;
    }
    if (ws && ws.readyState <= WebSocket.OPEN) return;
    if (!term) {
      term = new Terminal({ rows: 24, cols: 100, scrollback: 5000, cursorBlink: true });
      term.open(screen);
      term.onData((d) => { if (ws?.readyState === WebSocket.OPEN) ws.send(enc.encode(d)); });
      term.onResize(() => size());
    }
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/sessions/${encodeURIComponent(id)}/shell`;
    const sock = new WebSocket(url);
    ws = sock;
    sock.binaryType = "arraybuffer";
    status.textContent = "connecting…";
    status.className = "shell-status";
    connect.setAttribute("disabled", "");
    sock.onopen = () => {
      status.textContent = "connected";
      status.className = "shell-status live";
      size();
      term?.focus();
    };
    sock.onmessage = (e) => {
      if (e.data instanceof ArrayBuffer) term?.write(new Uint8Array(e.data));
    };
    sock.onclose = (e) => {
      if (ws !== sock) return;
      ws = null;
      // 1006: refused before the upgrade (a 409 when the session has no
      // box) or cut off; the browser does not show why.
      status.textContent = e.code === 1000 ? `closed: ${e.reason}` : e.reason ? `closed: ${e.reason}` : "closed (is the session running? a suspended session has no box until its next message)";
      status.className = "shell-status off";
      connect.removeAttribute("disabled");
      connect.textContent = "Reconnect";
    };
  }
  return {
    node,
    open,
    allow(write: boolean) {
      const was = allowed;
      allowed = write;
      if (write) {
        if (!ws) connect.removeAttribute("disabled");
        if (!was && wanted) open();
        return;
      }
      connect.setAttribute("disabled", "");
      if (wanted) status.textContent = refused;
    },
    stop() {
      const s = ws;
      ws = null;
      s?.close(1000, "page closed");
      term?.dispose();
      term = null;
    },
  };
}
