// Builds the web UI into ../dist (committed, embedded by package web):
// app.js and app.css bundled and minified by esbuild, index.html pointing
// at them by content hash, and SOURCES, the hash of what they were built
// from, which package web's test compares with the sources (sourcesHash
// there computes the same), so a change to the sources without a rebuild
// fails `go test`.
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as esbuild from "esbuild";

const out = "../dist";
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

await esbuild.build({
  entryPoints: { app: "src/main.ts" },
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  outdir: out,
  legalComments: "eof",
  logLevel: "warning",
});
await esbuild.build({
  entryPoints: { app: "src/style.css" },
  bundle: true,
  minify: true,
  outdir: out,
  logLevel: "warning",
});

const sha = (b) => createHash("sha256").update(b).digest("hex");
const js = readFileSync(join(out, "app.js"));
const css = readFileSync(join(out, "app.css"));
writeFileSync(join(out, "index.html"), readFileSync("src/index.html", "utf8")
  .replace("HASH_JS", sha(js).slice(0, 16))
  .replace("HASH_CSS", sha(css).slice(0, 16)));

// The sources: these files, and everything under src/.
function walk(dir) {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? walk(p) : [p];
  });
}
const files = ["build.mjs", "package.json", "package-lock.json", "tsconfig.json", ...walk("src")].sort();
const h = createHash("sha256");
for (const f of files) h.update(`${f}\n${sha(readFileSync(f))}\n`);
writeFileSync(join(out, "SOURCES"), h.digest("hex") + "\n");
console.log(`built ${out}: app.js ${js.length} bytes, app.css ${css.length} bytes`);
