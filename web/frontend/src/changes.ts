// The Changes tab: each repository's changes since the session started
// (GET /v1/sessions/{id}/diff, read in the session's box), a list of files
// with their status and counts, and each file's patch in a unified or a
// side-by-side view. Patches are text: never HTML.

import { api, ApiError, must, type Schemas } from "./api";
import { clear, h } from "./dom";
import { parsePatch, splitRows, type Line } from "./diff";

type FileChange = Schemas["FileChange"];
type Mode = "unified" | "split";

function num(n: number | undefined): string {
  return n === undefined ? "" : String(n);
}

// cols fixes the columns' widths (a fixed table layout takes them from
// the first row, which may span them all).
function cols(...classes: string[]): HTMLElement {
  return h("colgroup", {}, ...classes.map((c) => h("col", { class: c })));
}

function unified(lines: Line[]): HTMLElement {
  const body = h("tbody");
  for (const l of lines) {
    if (l.kind === "hunk" || l.kind === "meta") {
      body.append(h("tr", { class: l.kind }, h("td", { colspan: 3 }, l.text)));
      continue;
    }
    const sign = l.kind === "add" ? "+" : l.kind === "del" ? "-" : " ";
    body.append(h("tr", { class: l.kind }, h("td", { class: "ln" }, num(l.old)), h("td", { class: "ln" }, num(l.new)), h("td", { class: "code" }, sign + l.text)));
  }
  return h("table", { class: "diff unified" }, cols("ln", "ln", "code"), body);
}

function split(lines: Line[]): HTMLElement {
  const body = h("tbody");
  for (const r of splitRows(lines)) {
    if (r.wide) {
      body.append(h("tr", { class: r.wide.kind }, h("td", { colspan: 4 }, r.wide.text)));
      continue;
    }
    body.append(h("tr", {},
      h("td", { class: `ln ${r.left?.kind ?? "empty"}` }, num(r.left?.old)),
      h("td", { class: `code ${r.left?.kind ?? "empty"}` }, r.left?.text ?? ""),
      h("td", { class: `ln ${r.right?.kind ?? "empty"}` }, num(r.right?.new)),
      h("td", { class: `code ${r.right?.kind ?? "empty"}` }, r.right?.text ?? "")));
  }
  return h("table", { class: "diff split" }, cols("ln", "code", "ln", "code"), body);
}

function fileNode(f: FileChange, mode: Mode): HTMLElement {
  const name = f.old_path ? `${f.old_path} → ${f.path}` : f.path;
  let body: HTMLElement;
  if (f.binary) body = h("p", { class: "muted" }, "Binary file.");
  else if (!f.patch) body = h("p", { class: "muted" }, f.truncated ? "Left out: the changes are larger than the server shows at once." : "No textual change.");
  else {
    const lines = parsePatch(f.patch).filter((l) => !(l.kind === "meta" && /^(diff --git|index |--- |\+\+\+ )/.test(l.text)));
    body = mode === "split" ? split(lines) : unified(lines);
  }
  return h("details", { class: "file", open: true, "data-path": f.path },
    h("summary", {}, h("span", { class: `fstatus ${f.status}` }, f.status), " ", h("span", { class: "path" }, name), " ",
      h("span", { class: "adds" }, `+${f.additions}`), " ", h("span", { class: "dels" }, `−${f.deletions}`),
      f.truncated ? h("span", { class: "tag" }, "truncated") : null),
    body);
}

export interface TabContext {
  errorText(e: unknown): string;
  onSignedOut(): void;
}

export function changesTab(id: string, ctx: TabContext): { node: HTMLElement; load(): Promise<void> } {
  let mode: Mode = (localStorage.getItem("harvest.diffmode") as Mode) === "split" ? "split" : "unified";
  let data: Schemas["Changes"] | null = null;
  const out = h("div", { class: "changes-body" });
  const msg = h("p", { class: "error", role: "alert" });
  const modeBtn = (m: Mode, label: string) => h("button", { type: "button", class: `mode ${m}`, "aria-pressed": String(mode === m), onclick: () => { mode = m; localStorage.setItem("harvest.diffmode", m); render(); } }, label);
  const uni = modeBtn("unified", "Unified"), spl = modeBtn("split", "Split");
  const refresh = h("button", { type: "button", class: "refresh", onclick: () => void load() }, "Refresh");
  const node = h("section", { class: "changes" }, h("div", { class: "bar" }, h("div", { class: "modes" }, uni, spl), refresh), msg, out);

  function render() {
    uni.setAttribute("aria-pressed", String(mode === "unified"));
    spl.setAttribute("aria-pressed", String(mode === "split"));
    clear(out);
    if (!data) return;
    for (const r of data.repos) {
      const base = r.base_known ? `since ${r.base.slice(0, 12)}, where the session started` : `uncommitted changes only (against HEAD ${r.base.slice(0, 12)}: this session predates recording its start)`;
      out.append(h("h2", { class: "repo" }, r.repo, " ", h("span", { class: "adds" }, `+${r.additions}`), " ", h("span", { class: "dels" }, `−${r.deletions}`), " ", h("small", {}, base)));
      if (r.error) out.append(h("p", { class: "error" }, r.error));
      if (r.truncated) out.append(h("p", { class: "note" }, "Some files or patches are left out: the changes are larger than the server shows at once."));
      if (r.files.length === 0 && !r.error) out.append(h("p", { class: "muted" }, "No changes."));
      for (const f of r.files) out.append(fileNode(f, mode));
    }
  }

  async function load() {
    msg.textContent = "";
    refresh.setAttribute("disabled", "");
    try {
      data = must(await api.GET("/v1/sessions/{id}/diff", { params: { path: { id } } }));
      render();
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return ctx.onSignedOut();
      // 409: the session has no box (suspended, starting, ended): the
      // message says what to do.
      data = null;
      render();
      msg.textContent = ctx.errorText(e);
    } finally {
      refresh.removeAttribute("disabled");
    }
  }
  return { node, load };
}
