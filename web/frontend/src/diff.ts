// Unified patches (git diff's) read into lines with their numbers, and the
// rows of a side-by-side view. Pure functions: the page renders them
// (changes.ts), the tests check them under node.

export type LineKind = "ctx" | "add" | "del" | "hunk" | "meta";

export interface Line {
  kind: LineKind;
  text: string;
  old?: number;
  new?: number;
}

// parsePatch reads one file's patch: its header lines are "meta", each
// "@@ -a,b +c,d @@" a "hunk", then context, added and deleted lines
// numbered on their side.
export function parsePatch(patch: string): Line[] {
  const out: Line[] = [];
  let o = 0, n = 0, inHunk = false;
  const lines = patch.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  for (const l of lines) {
    const m = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(l);
    if (m) {
      o = Number(m[1]);
      n = Number(m[2]);
      inHunk = true;
      out.push({ kind: "hunk", text: l });
    } else if (!inHunk || l.startsWith("\\")) {
      out.push({ kind: "meta", text: l });
    } else if (l.startsWith("+")) {
      out.push({ kind: "add", text: l.slice(1), new: n++ });
    } else if (l.startsWith("-")) {
      out.push({ kind: "del", text: l.slice(1), old: o++ });
    } else if (l.startsWith(" ") || l === "") {
      out.push({ kind: "ctx", text: l.slice(1), old: o++, new: n++ });
    } else {
      // The next file's header in a concatenated patch.
      inHunk = false;
      out.push({ kind: "meta", text: l });
    }
  }
  return out;
}

// A row of the split view: the old side and the new side (either may be
// empty), or a full-width line (hunk headers, meta).
export interface SplitRow {
  left?: Line;
  right?: Line;
  wide?: Line;
}

// splitRows pairs each run of deleted lines with the added lines that
// follow it, row by row; context lines stand on both sides.
export function splitRows(lines: Line[]): SplitRow[] {
  const rows: SplitRow[] = [];
  for (let i = 0; i < lines.length;) {
    const l = lines[i]!;
    if (l.kind === "ctx") {
      rows.push({ left: l, right: l });
      i++;
    } else if (l.kind === "del" || l.kind === "add") {
      const dels: Line[] = [], adds: Line[] = [];
      while (i < lines.length && lines[i]!.kind === "del") dels.push(lines[i++]!);
      while (i < lines.length && lines[i]!.kind === "add") adds.push(lines[i++]!);
      for (let k = 0; k < Math.max(dels.length, adds.length); k++) rows.push({ left: dels[k], right: adds[k] });
    } else {
      rows.push({ wide: l });
      i++;
    }
  }
  return rows;
}
