// The admin page (#/admin): people, their roles, tokens and linked
// accounts, and teams,
// through the admin API (GET/POST/PATCH /v1/users, /v1/tokens,
// /v1/teams). Someone who is not an admin gets a plain "admins only"
// page, and the API refuses them anyway. Every action's refusal is shown
// next to what was tried, in the API's words.

import { api, ApiError, must, type Schemas, type SignedIn } from "./api";
import { clear, h } from "./dom";
import { identitiesTable } from "./links";

type User = Schemas["User"];
type Token = Schemas["Token"];
type Team = Schemas["Team"];

export interface AdminContext {
  frame(...body: Node[]): void;
  errorText(e: unknown): string;
  onSignedOut(): void;
}

const ROLES = ["admin", "member", "viewer"] as const;
type Role = (typeof ROLES)[number];

export function adminPage(me: SignedIn, ctx: AdminContext): { stop(): void } {
  if (!me.admin) {
    ctx.frame(h("h1", {}, "Admin"),
      h("p", { class: "error admins-only", role: "alert" },
        "Admins only: this page manages people, roles, tokens and teams, and you are signed in without an admin's rights. Ask an admin of this server if you need a change."));
    return { stop() {} };
  }
  let alive = true;
  const usersMsg = h("p", { class: "error users-error", role: "alert" });
  // usersNote says what the last change of a user did, once it is done.
  const usersNote = h("p", { class: "note users-status", role: "status" });
  const usersBody = h("tbody");
  const tokensBox = h("section", { class: "tokens", hidden: true });
  const idsBox = h("section", { class: "identities", hidden: true });
  const teamsMsg = h("p", { class: "error teams-error", role: "alert" });
  const teamsBody = h("tbody");
  let users: User[] = [];
  let openTokens = "";

  // act runs an action, showing its refusal in msg; true when it worked.
  async function act(msg: HTMLElement, f: () => Promise<void>): Promise<boolean> {
    msg.textContent = "";
    try {
      await f();
      return true;
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        ctx.onSignedOut();
        return false;
      }
      msg.textContent = ctx.errorText(e);
      return false;
    }
  }
  const nameOf = (id: string) => users.find((u) => u.id === id)?.name ?? id;

  async function loadUsers() {
    await act(usersMsg, async () => {
      const l = must(await api.GET("/v1/users"));
      if (!alive) return;
      users = l.users;
      clear(usersBody);
      for (const u of users) usersBody.append(userRow(u));
    });
  }

  function userRow(u: User): HTMLElement {
    const role = h("select", { class: "role", "aria-label": `Role of ${u.name}` }, ...ROLES.map((r) => h("option", { value: r }, r)));
    role.value = u.role;
    role.addEventListener("change", () => void act(usersMsg, async () => {
      usersNote.textContent = "";
      const v = must(await api.PATCH("/v1/users/{id}", { params: { path: { id: u.id } }, body: { role: role.value as Role } }));
      await loadUsers();
      usersNote.textContent = `${v.name} is now a ${v.role} (from their next request on).`;
    }).then((ok) => { if (!ok) role.value = u.role; }));
    const able = h("button", { type: "button", class: u.disabled ? "enable" : "disable", onclick: () => void act(usersMsg, async () => {
      usersNote.textContent = "";
      const v = must(await api.PATCH("/v1/users/{id}", { params: { path: { id: u.id } }, body: { disabled: !u.disabled } }));
      await loadUsers();
      usersNote.textContent = v.disabled ? `${v.name} is disabled: their sign-ins and tokens stop working now.` : `${v.name} is enabled again.`;
    }) }, u.disabled ? "Enable" : "Disable");
    const toks = h("button", { type: "button", class: "show-tokens", onclick: () => void showTokens(u) }, "Tokens");
    const accts = h("button", { type: "button", class: "show-identities", onclick: () => void showIdentities(u) }, "Accounts");
    return h("tr", { "data-user": u.id, class: u.disabled ? "disabled" : "" },
      h("td", {}, u.name, h("div", { class: "muted" }, u.id)),
      h("td", {}, role),
      h("td", {}, u.disabled ? "disabled" : "active"),
      h("td", {}, new Date(u.created_at).toLocaleDateString()),
      h("td", { class: "actions" }, able, " ", toks, " ", accts));
  }

  // showTokens lists u's tokens, with a form for a new one (its secret
  // shown once) and a Revoke button for each.
  async function showTokens(u: User) {
    openTokens = u.id;
    tokensBox.hidden = false;
    tokensBox.dataset.user = u.id;
    const msg = h("p", { class: "error tokens-error", role: "alert" });
    const body = h("tbody");
    const secret = h("div", { class: "secret", hidden: true });
    const name = h("input", { name: "token-name", placeholder: "what it is for, like laptop or ci", "aria-label": "Token name", required: true });
    const adminBox = h("input", { type: "checkbox", name: "token-admin", "aria-label": "Admin token" });
    adminBox.style.width = "auto";
    const form = h("form", { class: "new-token inline", method: "post", onsubmit: (e: Event) => {
      e.preventDefault();
      void act(msg, async () => {
        const t = must(await api.POST("/v1/tokens", { body: { name: name.value.trim(), admin: adminBox.checked, user: u.id } }));
        name.value = "";
        adminBox.checked = false;
        clear(secret);
        secret.append(h("strong", {}, `Token ${t.name} (${t.id}): `), h("code", { class: "token-secret" }, t.token),
          h("p", { class: "muted" }, "Copy it now: it is shown this once, and the server keeps only its hash."));
        secret.hidden = false;
        await list();
      });
    } }, name, h("label", { class: "check" }, adminBox, " admin"), h("button", { type: "submit" }, "Create token"));
    async function list() {
      await act(msg, async () => {
        const l = must(await api.GET("/v1/tokens", { params: { query: { user: u.id } } }));
        if (!alive || openTokens !== u.id) return;
        clear(body);
        if (l.tokens.length === 0) body.append(h("tr", {}, h("td", { colspan: 4, class: "empty" }, "No tokens.")));
        for (const t of l.tokens) body.append(tokenRow(t, msg, list));
      });
    }
    clear(tokensBox);
    tokensBox.append(h("h2", {}, `Tokens of ${u.name}`), secret, msg,
      h("table", { class: "admin tokens-table" }, h("thead", {}, h("tr", {}, ...["name", "id", "kind", "created", ""].map((c) => h("th", {}, c)))), body), form);
    await list();
  }

  // showIdentities lists u's linked accounts (GitHub, OIDC, Slack), each
  // with Unlink.
  async function showIdentities(u: User) {
    idsBox.hidden = false;
    idsBox.dataset.user = u.id;
    const msg = h("p", { class: "error identities-error", role: "alert" });
    async function list() {
      await act(msg, async () => {
        const v = must(await api.GET("/v1/users/{id}", { params: { path: { id: u.id } } }));
        if (!alive || idsBox.dataset.user !== u.id) return;
        clear(idsBox);
        idsBox.append(h("h2", {}, `Accounts of ${u.name}`), msg,
          h("p", { class: "muted" }, "Unlinking a GitHub or OIDC account means its next sign-in makes a new user; an unlinked Slack account can be linked again (its person asks the Slack app for a link)."),
          identitiesTable(u.id, v.identities ?? [], () => true, msg, list, ctx));
      });
    }
    await list();
  }

  function tokenRow(t: Token, msg: HTMLElement, again: () => Promise<void>): HTMLElement {
    return h("tr", { "data-token": t.id },
      h("td", {}, t.name), h("td", { class: "muted" }, t.id), h("td", {}, t.admin ? "admin" : "user"),
      h("td", {}, new Date(t.created_at).toLocaleString()),
      h("td", {}, h("button", { type: "button", class: "revoke", onclick: () => void act(msg, async () => {
        must(await api.DELETE("/v1/tokens/{id}", { params: { path: { id: t.id } } }));
        await again();
      }) }, "Revoke")));
  }

  async function loadTeams() {
    await act(teamsMsg, async () => {
      const l = must(await api.GET("/v1/teams"));
      if (!alive) return;
      clear(teamsBody);
      if (l.teams.length === 0) teamsBody.append(h("tr", {}, h("td", { colspan: 3, class: "empty" }, "No teams yet.")));
      for (const t of l.teams) teamsBody.append(teamRow(t));
    });
  }

  function teamRow(t: Team): HTMLElement {
    const who = h("select", { "aria-label": `Add a member to ${t.name}` }, h("option", { value: "" }, "add a member…"),
      ...users.filter((u) => !t.members.includes(u.id)).map((u) => h("option", { value: u.id }, u.name)));
    who.style.width = "auto";
    who.addEventListener("change", () => {
      if (!who.value) return;
      void act(teamsMsg, async () => {
        must(await api.POST("/v1/teams/{team}/members", { params: { path: { team: t.name } }, body: { user: who.value } }));
        await loadTeams();
      });
    });
    const members = t.members.map((m) => h("span", { class: "member", "data-user": m }, nameOf(m), " ",
      h("button", { type: "button", class: "remove", title: `Remove ${nameOf(m)} from ${t.name}`, onclick: () => void act(teamsMsg, async () => {
        must(await api.DELETE("/v1/teams/{team}/members/{user}", { params: { path: { team: t.name, user: m } } }));
        await loadTeams();
      }) }, "×")));
    return h("tr", { "data-team": t.name }, h("td", {}, t.name),
      h("td", { class: "members" }, ...(members.length ? members : [h("span", { class: "muted" }, "no members")])), h("td", {}, who));
  }

  const newUserName = h("input", { name: "user-name", placeholder: "the person's name", "aria-label": "New user's name", required: true });
  const newUserRole = h("select", { name: "user-role", "aria-label": "New user's role" }, ...ROLES.map((r) => h("option", { value: r }, r)));
  newUserRole.value = "member";
  const newUser = h("form", { class: "new-user inline", method: "post", onsubmit: (e: Event) => {
    e.preventDefault();
    void act(usersMsg, async () => {
      must(await api.POST("/v1/users", { body: { name: newUserName.value, role: newUserRole.value as Role } }));
      newUserName.value = "";
      await loadUsers();
    });
  } }, newUserName, newUserRole, h("button", { type: "submit" }, "Add user"));
  const newTeamName = h("input", { name: "team-name", placeholder: "team name, like qa", "aria-label": "New team's name", required: true });
  const newTeam = h("form", { class: "new-team inline", method: "post", onsubmit: (e: Event) => {
    e.preventDefault();
    void act(teamsMsg, async () => {
      must(await api.POST("/v1/teams", { body: { name: newTeamName.value.trim() } }));
      newTeamName.value = "";
      await loadTeams();
    });
  } }, newTeamName, h("button", { type: "submit" }, "Create team"));

  ctx.frame(h("h1", {}, "Admin"),
    h("section", { class: "users" }, h("h2", {}, "Users"), usersMsg, usersNote,
      h("table", { class: "admin users-table" }, h("thead", {}, h("tr", {}, ...["user", "role", "status", "since", ""].map((c) => h("th", {}, c)))), usersBody), newUser),
    tokensBox, idsBox,
    h("section", { class: "teams" }, h("h2", {}, "Teams"), teamsMsg,
      h("p", { class: "muted" }, "A --repo-root policy names teams (DIR?read=team:NAME): who is in them decides who sees the sessions there, from the next request on."),
      h("table", { class: "admin teams-table" }, h("thead", {}, h("tr", {}, ...["team", "members", ""].map((c) => h("th", {}, c)))), teamsBody), newTeam));
  void loadUsers().then(loadTeams);
  return { stop() { alive = false; } };
}
