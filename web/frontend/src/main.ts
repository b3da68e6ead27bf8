// The Harvest web UI: sign-in, the session list, a new session, and a
// session's page with its streaming timeline. Routes are in the URL's hash
// (#/, #/new, #/s/ID, #/me, #/admin, #/link/slack/CODE), so the server
// serves one page.

import { adminPage } from "./admin";
import { linkSlackPage, mePage } from "./links";
import { api, ApiError, must, providers, signIn, signOut, whoAmI, type Session, type SignedIn } from "./api";
import { clear, h } from "./dom";
import { sessionPage } from "./session";
import { ago, money, STATES } from "./format";

const root = document.getElementById("app")!;
let me: SignedIn | null = null;
// stop ends the current view's polling and streams.
let stop: () => void = () => {};

function errorText(e: unknown): string {
  if (e instanceof ApiError) return e.details.length ? `${e.message}: ${e.details.join("; ")}` : e.message;
  return e instanceof Error ? e.message : String(e);
}

function frame(...body: Node[]): void {
  clear(root);
  const nav = h("nav", { class: "top" },
    h("a", { href: "#/", class: "brand" }, "harvest"),
    h("a", { href: "#/" }, "Sessions"),
    h("a", { href: "#/new" }, "New session"),
    me?.admin ? h("a", { href: "#/admin", class: "admin-link" }, "Admin") : null,
    h("span", { class: "grow" }),
    me ? h("a", { class: "who", href: "#/me", title: "You and your linked accounts" }, `${me.name}${me.admin ? " (admin)" : ""}`) : null,
    me ? h("button", { type: "button", onclick: async () => { await signOut(); me = null; route(); } }, "Sign out") : null,
  );
  root.append(nav, h("main", {}, ...body));
}

// signInError is why a sign-in with GitHub or OIDC was refused: the
// server sends the browser back with ?signin_error=WHY. It is read once,
// and taken out of the address bar.
function signInError(): string {
  const q = new URLSearchParams(location.search);
  const why = q.get("signin_error") ?? "";
  if (why) history.replaceState(null, "", location.pathname + location.hash);
  return why;
}

// providerButtons are the "Sign in with GitHub" / "Sign in with NAME"
// links the server offers (GET /v1/auth/providers): each goes to the
// provider and comes back to this page (return: the path and hash).
async function providerButtons(into: HTMLElement): Promise<void> {
  const p = await providers();
  const back = "?return=" + encodeURIComponent("/" + location.hash);
  if (p.github && p.github_url) into.append(h("a", { class: "button provider", id: "signin-github", href: p.github_url + back }, "Sign in with GitHub"));
  if (p.oidc && p.oidc_url) into.append(h("a", { class: "button provider", id: "signin-oidc", href: p.oidc_url + back }, `Sign in with ${p.oidc_name ?? "OIDC"}`));
  if (into.childElementCount) into.append(h("p", { class: "or" }, "or with an API token:"));
}

function signInView(): void {
  // No name: were the form ever submitted natively, the token would not
  // go into a URL.
  const input = h("input", { type: "password", id: "token", autocomplete: "off", placeholder: "hvt_…", required: true, "aria-label": "API token" });
  const msg = h("p", { class: "error", role: "alert" });
  msg.textContent = signInError();
  const buttons = h("div", { class: "providers" });
  void providerButtons(buttons);
  const form = h("form", {
    class: "signin",
    method: "post",
    onsubmit: async (e: Event) => {
      e.preventDefault();
      msg.textContent = "";
      try {
        me = await signIn(input.value.trim());
        input.value = "";
        route();
      } catch (err) {
        msg.textContent = errorText(err);
      }
    },
  },
  h("h1", {}, "Sign in to Harvest"),
  buttons,
  h("p", {}, "Paste an API token (harvest serve writes an admin one to DATA/admin-token; harvest token create makes more). It is exchanged for a sign-in cookie and not kept by this page."),
  input, h("button", { type: "submit" }, "Sign in"), msg);
  clear(root);
  root.append(h("main", {}, form));
  input.focus();
}

function seenKey(id: string): string {
  return "harvest.seen." + id;
}

// The list's scope, remembered by this browser: the caller's own
// sessions, or every one they may read (others' on repositories they can
// read, too).
type Scope = "mine" | "visible";
const scopeKey = "harvest.scope";

function savedScope(): Scope {
  return localStorage.getItem(scopeKey) === "mine" ? "mine" : "visible";
}

// whose says whose a session is, as the list shows it.
function whose(s: Session): string {
  if (me?.user && s.user === me.user) return "you";
  if (s.github?.requester) return "@" + s.github.requester;
  return s.user ?? s.owner;
}

function listView(): void {
  const filter = h("select", { "aria-label": "Filter by state", onchange: () => load() },
    h("option", { value: "" }, "all states"), ...STATES.map((s) => h("option", { value: s }, s)));
  filter.value = new URLSearchParams(location.hash.split("?")[1] ?? "").get("state") ?? "";
  let scope = savedScope();
  const scopes = (["mine", "visible"] as const).map((sc) => h("button", {
    type: "button", class: `scope scope-${sc}`, "data-scope": sc, "aria-pressed": String(sc === scope),
    onclick: () => {
      scope = sc;
      localStorage.setItem(scopeKey, sc);
      for (const b of scopes) b.setAttribute("aria-pressed", String(b.dataset.scope === sc));
      void load();
    },
  }, sc === "mine" ? "Mine" : "Everything I can see"));
  const body = h("tbody");
  const msg = h("p", { class: "error", role: "alert" });
  const table = h("table", { class: "sessions" },
    h("thead", {}, h("tr", {}, ...["", "state", "session", "whose", "repos", "agent", "model", "PR", "cost", "activity"].map((c) => h("th", {}, c)))), body);
  frame(h("div", { class: "bar" }, h("h1", {}, "Sessions"), h("div", { class: "scopes", role: "group", "aria-label": "Whose sessions" }, ...scopes), filter), msg, table);
  let timer = 0;
  let alive = true;
  let loads = 0;
  async function load() {
    window.clearTimeout(timer);
    const mine = ++loads;
    try {
      const list = must(await api.GET("/v1/sessions", { params: { query: { scope, ...(filter.value ? { state: filter.value } : {}) } } }));
      // A newer load (the toggle or the filter moved) shows its own list.
      if (mine !== loads) return;
      if (!alive) return;
      msg.textContent = "";
      clear(body);
      if (list.sessions.length === 0) body.append(h("tr", {}, h("td", { colspan: 10, class: "empty" },
        scope === "mine" ? "No sessions of yours: start one with New session, or from a GitHub comment." : "No sessions you can see yet: start one with New session.")));
      for (const s of list.sessions) {
        const unread = (localStorage.getItem(seenKey(s.id)) ?? "") < s.updated_at;
        const pr = s.repos.find((r) => r.pr_url);
        body.append(h("tr", { class: `state-${s.state}`, "data-id": s.id },
          h("td", { class: "unread", title: unread ? "new activity" : "" }, unread ? "●" : ""),
          h("td", {}, h("span", { class: `badge ${s.state}` }, s.state)),
          h("td", {}, h("a", { href: `#/s/${s.id}` }, s.title || s.id)),
          h("td", { class: "whose" }, whose(s)),
          h("td", {}, s.repos.map((r) => `${r.name}${r.branch ? ` @ ${r.branch}` : ""}`).join(", ")),
          h("td", {}, s.agent),
          h("td", {}, s.model ?? ""),
          h("td", {}, pr?.pr_url ? h("a", { href: pr.pr_url, target: "_blank", rel: "noopener noreferrer" }, `#${pr.pr_number ?? ""}`) : ""),
          h("td", { class: "num" }, money(s.cost_usd)),
          h("td", {}, ago(s.active_at || s.updated_at)),
        ));
      }
    } catch (e) {
      if (mine !== loads) return;
      if (e instanceof ApiError && e.status === 401) return signedOut();
      msg.textContent = errorText(e);
    }
    // The API has no list stream: the list refreshes every 3 seconds.
    if (alive) timer = window.setTimeout(load, 3000);
  }
  stop = () => { alive = false; window.clearTimeout(timer); };
  load();
}

function newView(): void {
  const field = (label: string, el: HTMLElement, hint = "") => h("label", {}, h("span", {}, label), el, hint ? h("small", {}, hint) : null);
  const source = h("input", { name: "source", required: true, list: "sources", autocomplete: "off", placeholder: "/path/on/the/server or https://host/owner/repo.git" });
  // What the server allows, offered as the field's suggestions.
  const offered = h("datalist", { id: "sources" });
  const allowed = h("small", { class: "allowed" });
  api.GET("/v1/sources").then((r) => {
    const l = must(r);
    for (const repo of l.repositories) offered.append(h("option", { value: repo.source }, repo.git ? repo.name : `${repo.name} (not git)`));
    const also: string[] = [];
    if (l.git_hosts.length) also.push(`git URLs on ${l.git_hosts.join(", ")}`);
    if (l.github) also.push("GitHub's owner/name");
    if (l.any_directory) also.push("any directory on the server (admin)");
    allowed.textContent = `${l.repositories.length}${l.truncated ? "+" : ""} repositories listed` + (also.length ? `; also ${also.join("; ")}` : "");
  }).catch((e) => { allowed.textContent = errorText(e); });
  const agent = h("select", { name: "agent" }, ...["builtin", "claudecode", "opencode", "terminal"].map((a) => h("option", { value: a }, a)));
  const model = h("input", { name: "model", placeholder: "the server's default" });
  const budget = h("input", { name: "budget", type: "number", min: "0", step: "0.01", placeholder: "none" });
  const prompt = h("textarea", { name: "prompt", rows: 6, placeholder: "What should the agent do?" });
  const msg = h("p", { class: "error", role: "alert" });
  const start = h("button", { type: "submit" }, "Start session");
  const form = h("form", {
    class: "new",
    method: "post",
    onsubmit: async (e: Event) => {
      e.preventDefault();
      msg.textContent = "";
      const b = budget.value.trim();
      if (b !== "" && !(Number(b) > 0)) {
        msg.textContent = "budget: give a positive number of US dollars, or leave it empty for none";
        return;
      }
      try {
        const v = must(await api.POST("/v1/sessions", {
          body: {
            repos: [repoSpec(source.value.trim())],
            agent: agent.value,
            model: model.value.trim() || undefined,
            prompt: prompt.value,
            limits: b ? { budget_usd: Number(b) } : undefined,
          },
        }));
        location.hash = `#/s/${v.id}`;
      } catch (err) {
        msg.textContent = errorText(err);
      }
    },
  },
  field("Repository", source, "A directory under the server's repository roots (harvest serve --repo-root), or a git URL on one of its hosts"), offered, allowed,
  field("Agent", agent), field("Model", model, "provider/model"), field("Budget (USD)", budget), field("Prompt", prompt),
  start, msg);
  // A viewer reads sessions and does not start them: the form says so
  // (and the server would refuse).
  api.GET("/v1/me").then((r) => {
    const m = must(r);
    if (m.admin || m.user?.role !== "viewer") return;
    start.disabled = true;
    msg.textContent = "You are a viewer: viewers read sessions, they do not start them. An admin can make you a member.";
  }).catch(() => {});
  frame(h("h1", {}, "New session"), form);
  source.focus();
}

// repoSpec is a typed source as a session names it: owner/name is
// GitHub's, anything else a directory or a git URL.
export function repoSpec(v: string): { source?: string; github?: string } {
  return /^[A-Za-z0-9-]+\/[A-Za-z0-9._-]+$/.test(v) ? { github: v } : { source: v };
}

function signedOut(): void {
  me = null;
  route();
}

async function route(): Promise<void> {
  stop();
  stop = () => {};
  if (!me) {
    try {
      me = await whoAmI();
    } catch (e) {
      clear(root);
      root.append(h("p", { class: "error" }, "The server did not answer: " + errorText(e)));
      return;
    }
    if (!me) return signInView();
  }
  const path = location.hash.replace(/^#/, "").split("?")[0] || "/";
  const m = /^\/s\/([a-z0-9-]+)$/.exec(path);
  if (m) {
    const id = m[1]!;
    const view = sessionPage(id, { frame, errorText, onSignedOut: signedOut, seen: (t) => localStorage.setItem(seenKey(id), t) });
    stop = view.stop;
    return;
  }
  if (path === "/new") return newView();
  const link = /^\/link\/slack\/([A-Za-z0-9_-]+)$/.exec(path);
  if (link) return linkSlackPage(link[1]!, me, { frame, errorText, onSignedOut: signedOut });
  if (path === "/me") {
    stop = mePage({ frame, errorText, onSignedOut: signedOut }).stop;
    return;
  }
  if (path === "/admin") {
    stop = adminPage(me, { frame, errorText, onSignedOut: signedOut }).stop;
    return;
  }
  listView();
}

window.addEventListener("hashchange", () => void route());
void route();
