// Model output as HTML: markdown by marked, code coloured by highlight.js, then everything through DOMPurify.
// Model output is untrusted text: it must never run script, whatever it contains. DOMPurify is the wall;
// the page's Content-Security-Policy (no inline script, no other origin) is the second one.

import { Marked } from "./vendor/marked/marked.esm.js";
import "./vendor/dompurify/purify.min.js"; // a UMD file: as a module it defines globalThis.DOMPurify
import hljs from "./vendor/highlight/core.min.js";
import bash from "./vendor/highlight/languages/bash.min.js";
import c from "./vendor/highlight/languages/c.min.js";
import cpp from "./vendor/highlight/languages/cpp.min.js";
import go from "./vendor/highlight/languages/go.min.js";
import java from "./vendor/highlight/languages/java.min.js";
import javascript from "./vendor/highlight/languages/javascript.min.js";
import json from "./vendor/highlight/languages/json.min.js";
import python from "./vendor/highlight/languages/python.min.js";
import rust from "./vendor/highlight/languages/rust.min.js";
import sql from "./vendor/highlight/languages/sql.min.js";
import typescript from "./vendor/highlight/languages/typescript.min.js";
import xml from "./vendor/highlight/languages/xml.min.js";
import yaml from "./vendor/highlight/languages/yaml.min.js";

const LANGUAGES = { bash, c, cpp, go, java, javascript, json, python, rust, sql, typescript, xml, yaml };
for (const [name, grammar] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, grammar);

const DOMPurify = globalThis.DOMPurify;
const PURIFY = {
  // Markup that could restyle the page or look like the page's own controls has no place in a reply.
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "option", "dialog"],
  FORBID_ATTR: ["style"],
};
// A link in a reply opens in a new tab that cannot reach back to this page.
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

const marked = new Marked({
  gfm: true,
  renderer: {
    // A fenced block in a language highlight.js knows is coloured; any other falls back to marked's own.
    code({ text, lang }) {
      const language = (lang ?? "").trim().split(/\s+/)[0];
      if (!language || !hljs.getLanguage(language)) return false;
      const html = hljs.highlight(text, { language, ignoreIllegals: true }).value;
      return `<pre><code class="hljs language-${language}">${html}</code></pre>\n`;
    },
  },
});

/** `text` (markdown) as sanitised HTML, safe to assign to innerHTML. */
export function renderMarkdown(text) {
  return DOMPurify.sanitize(marked.parse(text), PURIFY);
}
