// Messages and the conversation list as DOM. The model's text reaches innerHTML only through renderMarkdown
// (sanitised); everything else (the user's text, reasoning, tool calls and results, titles) is set as textContent.

import { attachmentElement } from "./attachments.js";
import { renderMarkdown } from "./markdown.js";

/** The stats under a reply: field of the message's `stats`, its label, and the digits shown. */
const STATS = [
  ["promptTokens", "prompt tokens", 0],
  ["cachedTokens", "cached", 0],
  ["promptPerSecond", "prompt tok/s", 1],
  ["completionTokens", "tokens", 0],
  ["predictedPerSecond", "tok/s", 1],
];

function element(tag, className = "", text = "") {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text) node.textContent = text;
  return node;
}

function button(text, onClick, label = "") {
  const node = element("button", "", text);
  node.type = "button";
  if (label) node.setAttribute("aria-label", label);
  node.addEventListener("click", onClick);
  return node;
}

/** What a tool message's summary says in each of its states (see tools.js). */
const TOOL_STATES = { running: "is running…", done: "answered", error: "failed", stopped: "was stopped" };

/** Show `messages`; `actions` are `edit(index, text)` (resend from a user message) and `regenerate()`. */
export function renderMessages(container, messages, actions) {
  const last = messages.length - 1;
  container.replaceChildren(
    ...messages.map((message, index) => {
      if (message.role === "user") return userMessage(message, index, actions);
      if (message.role === "tool") return toolResult(message);
      return reply(message, index === last, actions);
    }),
  );
}

function userMessage(message, index, actions) {
  const article = element("article", "message user");
  article.setAttribute("aria-label", "You");
  const attachments = element("div", "attachments");
  attachments.append(...(message.attachments ?? []).map(attachmentElement));
  const text = element("div", "content", message.content);
  const actionBar = element("div", "actions");
  actionBar.append(button("Edit", () => startEdit(text, actionBar, message, (edited) => actions.edit(index, edited))));
  article.append(attachments, text, actionBar);
  return article;
}

function reply(message, isLast, actions) {
  const article = element("article", "message assistant");
  article.setAttribute("aria-label", "Assistant");
  const reasoning = element("details", "reasoning");
  reasoning.append(element("summary", "", "Reasoning"), element("div", "reasoning-text"));
  const actionBar = element("div", "actions");
  actionBar.append(element("p", "stats"));
  if (isLast) actionBar.append(button("Regenerate", actions.regenerate));
  article.append(reasoning, element("div", "tool-calls"), element("div", "content markdown"), actionBar);
  updateReply(article, message);
  return article;
}

/** Show the reply's current state (called as it streams). */
export function updateReply(article, message) {
  const reasoning = article.querySelector(".reasoning");
  reasoning.hidden = !message.reasoning;
  reasoning.querySelector(".reasoning-text").textContent = message.reasoning;
  article.querySelector(".tool-calls").replaceChildren(...message.toolCalls.filter(Boolean).map(toolCall));
  article.querySelector(".content").innerHTML = renderMarkdown(message.content);
  article.querySelector(".stats").replaceChildren(...stats(message));
}

/** A tool's answer, folded (it can be a whole file); its text is exactly what the model reads. */
function toolResult(message) {
  const article = element("article", `message tool ${message.state}`);
  article.setAttribute("aria-label", `Tool ${message.name}`);
  const details = element("details", "tool-result");
  const summary = element("summary");
  summary.append(element("span", "tool-name", message.name), ` ${TOOL_STATES[message.state] ?? ""}`);
  details.append(summary, element("pre", "tool-output", message.content));
  article.append(details);
  return article;
}

function toolCall(call) {
  const node = element("div", "tool-call");
  node.append(element("span", "tool-name", call.name), element("pre", "tool-arguments", call.arguments));
  return node;
}

function stats({ stats: numbers, stopped }) {
  const parts = [];
  for (const [key, label, digits] of STATS) {
    if (typeof numbers?.[key] !== "number") continue;
    const part = element("span", "stat");
    part.dataset.stat = key;
    part.append(element("b", "", numbers[key].toFixed(digits)), ` ${label}`);
    parts.push(part);
  }
  if (stopped) parts.push(element("span", "stat stopped", "stopped"));
  return parts;
}

/** Swap a user message's text for an editor; sending it calls `onSend(text)`, Cancel or Esc puts it back. */
function startEdit(text, actionBar, message, onSend) {
  const form = element("form", "edit");
  const editor = element("textarea");
  editor.value = message.content;
  editor.setAttribute("aria-label", "Edit the message");
  const send = element("button", "", "Send");
  const cancel = () => {
    form.replaceWith(text);
    actionBar.hidden = false;
  };
  form.append(editor, send, button("Cancel", cancel));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    onSend(editor.value.trim());
  });
  editor.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    } else if (event.key === "Escape") {
      event.stopPropagation(); // Esc here leaves the editor; it does not also stop a reply
      cancel();
    }
  });
  text.replaceWith(form);
  actionBar.hidden = true;
  editor.focus();
}

/** The sidebar; `actions` are `open(id)`, `rename(id, title)`, `export(id)` and `remove(id)`. */
export function renderConversations(list, conversations, currentId, actions) {
  list.replaceChildren(
    ...conversations.map((conversation) => {
      const { id, title } = conversation;
      const item = element("li", "conversation");
      const open = button(title, () => actions.open(id));
      open.className = "title";
      if (id === currentId) open.setAttribute("aria-current", "true");
      item.append(
        open,
        button("✎", () => startRename(open, title, (name) => actions.rename(id, name)), `Rename ${title}`),
        button("⤓", () => actions.export(id), `Export ${title}`),
        button("×", () => actions.remove(id), `Delete ${title}`),
      );
      return item;
    }),
  );
}

/** Swap a conversation's title for a text field: Enter or leaving it renames, Esc keeps the old name. */
function startRename(open, title, onRename) {
  const input = element("input", "rename");
  input.value = title;
  input.setAttribute("aria-label", "New name");
  let done = false;
  const finish = (name) => {
    if (done) return;
    done = true;
    input.replaceWith(open);
    if (name && name !== title) onRename(name);
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") finish(input.value.trim());
    if (event.key === "Escape") finish(null);
  });
  input.addEventListener("blur", () => finish(input.value.trim()));
  open.replaceWith(input);
  input.focus();
  input.select();
}
