// Assistant text is markdown from a model: rendered by marked, then
// sanitized by DOMPurify, since a model can be made to write any HTML.
// Links open in a new tab without a referrer; nothing is fetched (the
// page's Content-Security-Policy forbids other origins anyway).

import DOMPurify from "dompurify";
import { marked } from "marked";

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

export function renderMarkdown(md: string): string {
  const html = marked.parse(md, { async: false, gfm: true, breaks: false }) as string;
  return DOMPurify.sanitize(html, { FORBID_TAGS: ["style", "img", "form", "input"], FORBID_ATTR: ["style"] });
}
