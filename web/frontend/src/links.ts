// Linked accounts: the page a Slack link opens (#/link/slack/CODE), where
// the signed-in person links a Slack account to themselves, and the list
// of a user's identities (GitHub, OIDC, Slack) with Unlink, shown on the
// person's own page (#/me) and, for an admin, on the admin page.
//
// The Slack app gives an account it does not know a one-time link (the
// code works once, for 15 minutes). Signing in first is the normal
// sign-in, which comes back to the same page.

import { api, ApiError, must, type Schemas, type SignedIn } from "./api";
import { clear, h } from "./dom";

type Identity = Schemas["Identity"];

export interface LinkContext {
  frame(...body: Node[]): void;
  errorText(e: unknown): string;
  onSignedOut(): void;
}

// slackName is how a Slack account is shown: @name, else its id.
function slackName(name: string | undefined, id: string): string {
  return name ? `@${name}` : id;
}

export function linkSlackPage(code: string, me: SignedIn, ctx: LinkContext): void {
  const msg = h("p", { class: "error link-error", role: "alert" });
  const box = h("section", { class: "link-slack" }, h("h1", {}, "Link a Slack account"), h("p", { class: "muted" }, "Reading the link…"));
  ctx.frame(box, msg);
  void (async () => {
    try {
      const l = must(await api.GET("/v1/slack/links/{code}", { params: { path: { code } } }));
      // The user, not the token signed in with: the account becomes theirs.
      const user = must(await api.GET("/v1/me")).user;
      const who = slackName(l.name, l.slack_user);
      const question = h("p", { class: "link-question" },
        `Link Slack user ${who} (team ${l.team}) to your Harvest account `, h("strong", { class: "link-user" }, user?.name ?? me.name),
        user ? h("span", { class: "muted" }, ` ${user.id}`) : null, "?");
      const done = h("p", { class: "note link-done", role: "status", hidden: true });
      const link = h("button", { type: "button", class: "link-confirm", onclick: async () => {
        msg.textContent = "";
        link.disabled = true;
        try {
          must(await api.POST("/v1/slack/links/{code}", { params: { path: { code } } }));
          cancel.hidden = true;
          link.hidden = true;
          question.hidden = true;
          done.textContent = `Done: Slack user ${who} is linked to you. Mention the Harvest app in Slack again: it works for you now.`;
          done.hidden = false;
          done.append(" ", h("a", { href: "#/me", class: "to-me" }, "Your linked accounts"));
        } catch (e) {
          if (e instanceof ApiError && e.status === 401) return ctx.onSignedOut();
          link.disabled = false;
          msg.textContent = ctx.errorText(e);
        }
      } }, "Link");
      const cancel = h("button", { type: "button", class: "link-cancel secondary", onclick: () => { location.hash = "#/"; } }, "Cancel");
      clear(box);
      box.append(h("h1", {}, "Link a Slack account"), question,
        h("p", { class: "muted" }, `Whatever ${who} asks the Harvest app in Slack will then be done as you, with your rights: link only a Slack account that is yours. The link works once, until ${new Date(l.expires_at).toLocaleTimeString()}.`),
        h("div", { class: "actions" }, link, " ", cancel), done);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return ctx.onSignedOut();
      clear(box);
      box.append(h("h1", {}, "Link a Slack account"));
      msg.textContent = ctx.errorText(e);
    }
  })();
}

// identitiesTable lists a user's identities; those canUnlink allows get
// an Unlink button, which removes them and calls again().
export function identitiesTable(user: string, ids: Identity[], canUnlink: (i: Identity) => boolean, msg: HTMLElement, again: () => Promise<void>, ctx: LinkContext): HTMLElement {
  const body = h("tbody");
  if (ids.length === 0) body.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "No linked accounts.")));
  for (const i of ids) {
    const unlink = canUnlink(i) ? h("button", { type: "button", class: "unlink", onclick: async () => {
      msg.textContent = "";
      try {
        must(await api.DELETE("/v1/users/{id}/identities/{kind}/{subject}", {
          params: { path: { id: user, kind: i.kind, subject: i.subject }, query: i.issuer ? { issuer: i.issuer } : {} },
        }));
        await again();
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) return ctx.onSignedOut();
        msg.textContent = ctx.errorText(e);
      }
    } }, "Unlink") : null;
    body.append(h("tr", { "data-kind": i.kind, "data-subject": i.subject },
      h("td", {}, i.kind), h("td", {}, i.login ? (i.kind === "slack" ? "@" + i.login : i.login) : i.subject),
      h("td", { class: "muted" }, i.issuer ?? ""), h("td", {}, i.email ?? ""), h("td", {}, unlink)));
  }
  return h("table", { class: "admin identities-table" },
    h("thead", {}, h("tr", {}, ...["kind", "account", "issuer", "email", ""].map((c) => h("th", {}, c)))), body);
}

// mePage is the signed-in person's page: who they are and their linked
// accounts (their Slack accounts they may unlink themselves).
export function mePage(ctx: LinkContext): { stop(): void } {
  let alive = true;
  const msg = h("p", { class: "error me-error", role: "alert" });
  const box = h("section", { class: "me" });
  ctx.frame(h("h1", {}, "You"), msg, box);
  async function load() {
    try {
      const m = must(await api.GET("/v1/me"));
      if (!alive || !m.user) return;
      const u = m.user;
      clear(box);
      box.append(h("p", {}, h("strong", {}, u.name), ` (${u.role}) `, h("span", { class: "muted" }, u.id)),
        h("h2", {}, "Linked accounts"),
        h("p", { class: "muted" }, "The accounts elsewhere that are you: what you sign in with, and the Slack accounts whose requests to the Harvest app are yours."),
        identitiesTable(u.id, u.identities ?? [], (i) => i.kind === "slack" || m.admin, msg, load, ctx));
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return ctx.onSignedOut();
      msg.textContent = ctx.errorText(e);
    }
  }
  void load();
  return { stop() { alive = false; } };
}
