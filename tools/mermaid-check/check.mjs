// Parse Mermaid texts with the official parser, offline. Input: a JSON array of strings (file path argument or
// stdin). Output: a JSON array of {ok, error} in the same order. jsdom supplies window/document because mermaid's
// sanitizer (DOMPurify) needs a DOM even when only parsing.
import { readFileSync } from "node:fs";
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!DOCTYPE html><html><body></body></html>", { pretendToBeVisual: true });
globalThis.window = dom.window;
globalThis.document = dom.window.document;
for (const key of ["DOMParser", "Element", "HTMLElement", "Node", "NodeFilter", "DocumentFragment"]) {
  if (!(key in globalThis)) globalThis[key] = dom.window[key];
}

const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });

const raw = process.argv[2] ? readFileSync(process.argv[2], "utf8") : readFileSync(0, "utf8");
const texts = JSON.parse(raw);
if (!Array.isArray(texts)) throw new TypeError("expected a JSON array of Mermaid texts");

const results = [];
for (const text of texts) {
  try {
    const parsed = await mermaid.parse(String(text));
    results.push(parsed ? { ok: true, error: null } : { ok: false, error: "mermaid.parse returned false" });
  } catch (err) {
    results.push({ ok: false, error: String(err?.message ?? err).slice(0, 500) });
  }
}
process.stdout.write(JSON.stringify(results) + "\n");
