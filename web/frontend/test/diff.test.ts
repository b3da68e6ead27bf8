// The patch reader and the split view's rows, under node (npm test).
import assert from "node:assert/strict";
import { test } from "node:test";
import { parsePatch, splitRows } from "../src/diff";

const fix = `diff --git a/calc.go b/calc.go
index 1111111..2222222 100644
--- a/calc.go
+++ b/calc.go
@@ -3,7 +3,7 @@ package calc
 // Sum adds xs.
 func Sum(xs []int) int {
 	s := 0
-	for i := 1; i < len(xs); i++ {
+	for i := 0; i < len(xs); i++ {
 		s += xs[i]
 	}
 	return s
`;

test("a patch's lines are numbered on their side", () => {
  const ls = parsePatch(fix);
  assert.deepEqual(ls.slice(0, 5).map((l) => l.kind), ["meta", "meta", "meta", "meta", "hunk"]);
  const del = ls.find((l) => l.kind === "del")!;
  const add = ls.find((l) => l.kind === "add")!;
  assert.deepEqual([del.old, del.new, del.text], [6, undefined, "\tfor i := 1; i < len(xs); i++ {"]);
  assert.deepEqual([add.old, add.new, add.text], [undefined, 6, "\tfor i := 0; i < len(xs); i++ {"]);
  const last = ls[ls.length - 1]!;
  assert.deepEqual([last.kind, last.old, last.new], ["ctx", 9, 9]);
});

test("split rows pair a deletion with the addition after it", () => {
  const rows = splitRows(parsePatch(fix));
  const changed = rows.filter((r) => r.left?.kind === "del" || r.right?.kind === "add");
  assert.equal(changed.length, 1);
  assert.equal(changed[0]!.left!.old, 6);
  assert.equal(changed[0]!.right!.new, 6);
  assert.equal(rows.filter((r) => r.wide).length, 5);
  // Uneven runs leave a side empty.
  const uneven = splitRows(parsePatch("@@ -1,2 +1,1 @@\n-a\n-b\n+c\n"));
  assert.deepEqual(uneven.slice(1).map((r) => [r.left?.text, r.right?.text]), [["a", "c"], ["b", undefined]]);
});

test("a new file's patch and a no-newline marker", () => {
  const ls = parsePatch("diff --git a/N b/N\nnew file mode 100644\n--- /dev/null\n+++ b/N\n@@ -0,0 +1,2 @@\n+one\n+two\n\\ No newline at end of file\n");
  assert.deepEqual(ls.filter((l) => l.kind === "add").map((l) => [l.new, l.text]), [[1, "one"], [2, "two"]]);
  assert.equal(ls[ls.length - 1]!.kind, "meta");
});
