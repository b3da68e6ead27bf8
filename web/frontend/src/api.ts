// The API client, typed from server/openapi.json (npm run gen writes
// src/gen/api.d.ts; the build type-checks against it, so the page cannot
// call a route or read a field the API does not have).
//
// The page authenticates with the harvest_session cookie (HttpOnly: this
// code never sees it) and sends the sign-in's CSRF token on every request
// that changes state. The CSRF token lives in memory only; a reloaded page
// learns it again from GET /v1/auth/session. No token is ever stored.

import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "./gen/api";

export type Schemas = components["schemas"];
export type View = Schemas["View"];
export type Session = Schemas["Session"];
export type SignedIn = Schemas["SignedIn"];
export type Providers = Schemas["Providers"];

export const api = createClient<paths>({ baseUrl: location.origin, credentials: "same-origin" });

let csrf = "";

export function setCSRF(token: string): void {
  csrf = token;
}

const csrfMiddleware: Middleware = {
  onRequest({ request }) {
    if (!["GET", "HEAD", "OPTIONS"].includes(request.method) && csrf) {
      request.headers.set("X-Harvest-CSRF", csrf);
    }
    return request;
  },
};
api.use(csrfMiddleware);

// ApiError is the API's error envelope as an Error.
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: string[] = [],
  ) {
    super(message);
  }
}

// must returns data, or throws the error envelope as an ApiError.
export function must<T>(r: { data?: T; error?: unknown; response: Response }): T {
  if (r.error !== undefined || r.data === undefined && r.response.status !== 204) {
    const e = (r.error as { error?: { code?: string; message?: string; details?: string[] } } | undefined)?.error;
    throw new ApiError(r.response.status, e?.code ?? "", e?.message ?? `${r.response.status} ${r.response.statusText}`, e?.details ?? []);
  }
  return r.data as T;
}

export async function whoAmI(): Promise<SignedIn | null> {
  const r = await api.GET("/v1/auth/session");
  if (r.response.status === 401) return null;
  const me = must(r);
  setCSRF(me.csrf_token);
  return me;
}

export async function signIn(token: string): Promise<SignedIn> {
  const me = must(await api.POST("/v1/auth/session", { body: { token } }));
  setCSRF(me.csrf_token);
  return me;
}

export async function signOut(): Promise<void> {
  must(await api.DELETE("/v1/auth/session"));
  setCSRF("");
}

// providers says which sign-ins the server offers besides the token form
// (GitHub, an OIDC provider); none when it cannot say.
export async function providers(): Promise<Providers> {
  const r = await api.GET("/v1/auth/providers");
  return r.data ?? { token: true, github: false, oidc: false };
}
