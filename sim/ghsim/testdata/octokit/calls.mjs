// Drives the stand-in with the official @octokit/rest client; run by
// TestOctokit with NODE_PATH-free resolution from OCTOKIT_DIR.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.OCTOKIT_DIR, "package.json"));
const { Octokit } = require("@octokit/rest");

const octokit = new Octokit({ auth: process.env.GH_TOKEN, baseUrl: process.env.GH_BASE_URL });
const owner = "acme", repo = "widget";
const out = {};

const r = await octokit.rest.repos.get({ owner, repo });
out.repo = { status: r.status, full_name: r.data.full_name, default_branch: r.data.default_branch };

const c = await octokit.rest.issues.createComment({ owner, repo, issue_number: 1, body: "from octokit" });
out.comment = { status: c.status, body: c.data.body, user: c.data.user.login };

const p = await octokit.rest.pulls.create({ owner, repo, title: "From octokit", head: "feature", base: "main", draft: true });
out.pull = { status: p.status, number: p.data.number, draft: p.data.draft, head: p.data.head.ref };

const l = await octokit.rest.pulls.list({ owner, repo, state: "open", head: "acme:feature" });
out.list = { status: l.status, numbers: l.data.map((x) => x.number) };

try {
  await octokit.rest.pulls.create({ owner, repo, title: "Again", head: "feature", base: "main" });
  out.duplicate = { status: 0 };
} catch (e) {
  out.duplicate = { status: e.status, message: e.response.data.errors[0].message };
}

console.log(JSON.stringify(out));
