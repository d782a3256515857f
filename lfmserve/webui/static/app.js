// The chat page: the conversation list, the messages, the composer and the settings, wired to the server.

import { Api } from "./api.js";
import { Attachments } from "./attachments.js";
import { chatRequest, emptyReply, endReasoning, streamReply } from "./chat.js";
import { Settings, SettingsError } from "./settings.js";
import * as store from "./store.js";
import { runCall, toolMessage, Tools } from "./tools.js";
import * as view from "./view.js";

const $ = (id) => document.getElementById(id);
/** Below this width the sidebar is an overlay, closed until asked for (as in style.css). */
const PHONE = matchMedia("(max-width: 720px)");
/** Replies in a row that may ask for tools before the page stops running them: a model that calls tools forever
 * ends there, and the user's next message lets it go on. */
const MAX_TOOL_STEPS = 10;

const api = new Api(askKey);
const settings = new Settings($("settings-form"));
const tools = new Tools($("tools"));
const attachments = new Attachments({
  list: $("attachments"),
  picker: $("file-input"),
  button: $("attach"),
  dropZone: document.querySelector("main"),
  textarea: $("prompt"),
  onError: showError,
});
let conversation = store.newConversation();
let running = null; // the AbortController of the reply that streams now and of the tool calls that follow it
let thinking = null; // the reply whose thinking End thinking ends (null: none, or it was asked already)
let nCtx = 0; // tokens a slot holds: /props `default_generation_settings.n_ctx`
let propsLoaded = false;
/** A router's model chosen in the picker, sent with every request (null: a single-model server). */
let model = null;
/** localStorage key of the model last chosen on a router. */
const MODEL_STORAGE = "lfmserve.model";

const messageActions = { edit: (index, text) => resend(index, text), regenerate: () => regenerate() };
const listActions = {
  open(id) {
    if (running) return;
    conversation = store.listConversations().find((c) => c.id === id) ?? conversation;
    showConversation();
    closeSidebarOnPhone();
  },
  rename(id, title) {
    const target = id === conversation.id ? conversation : store.listConversations().find((c) => c.id === id);
    target.title = title;
    save(target);
    renderSidebar();
  },
  export: (id) => store.exportConversation(store.listConversations().find((c) => c.id === id)),
  remove(id) {
    if (!confirm("Delete this conversation?")) return;
    store.deleteConversation(id);
    if (id === conversation.id && !running) startNewConversation();
    else renderSidebar();
  },
};

/** Ask the server for its defaults; while the model loads (503) say so and ask again each second. Sending
 * waits for the first answer (a refusal too: the next message asks again). */
async function loadProps() {
  for (;;) {
    try {
      let props = await api.json("props");
      if (!propsLoaded) loadTools(); // once the page may call the API (an API key asked for the first answer)
      if (props.role === "router") props = await routerModelProps();
      settings.applyProps(props);
      attachments.setModalities(props.modalities);
      nCtx = props.default_generation_settings?.n_ctx ?? 0;
      $("model-name").textContent = props.model_alias || "lfmserve";
      document.title = `${props.model_alias || "lfmserve"} · lfmserve`;
      propsLoaded = true;
      showStatus("");
      showContext();
      $("send").disabled = false;
      return;
    } catch (error) {
      if (error.status !== 503) {
        showStatus("");
        showError(`Cannot read the server's settings: ${error.message}`);
        $("send").disabled = false;
        return;
      }
      showStatus("Loading model…");
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
}

/** The server's tools in the settings panel; a server without tools shows nothing. */
async function loadTools() {
  try {
    await tools.load(api);
  } catch (error) {
    showError(`Cannot read the server's tools: ${error.message}`);
  }
}

/** A router: its models in the picker (with their status), the one chosen before or else the first loaded or
 * the first, and that model's /props, which loads it. */
async function routerModelProps() {
  const models = (await api.json("v1/models")).data ?? [];
  if (models.length === 0) throw new Error("This router has no models.");
  const ids = models.map((m) => m.id);
  const saved = localStorage.getItem(MODEL_STORAGE);
  model = ids.includes(model) ? model : ids.includes(saved) ? saved : (models.find(isLoaded) ?? models[0]).id;
  const picker = $("model-picker");
  picker.replaceChildren(...models.map((m) => new Option(`${m.id}${isLoaded(m) ? "" : " (not loaded)"}`, m.id)));
  picker.value = model;
  picker.hidden = false;
  $("model-name").hidden = true;
  showStatus(models.find((m) => m.id === model && isLoaded(m)) ? "" : `Loading ${model}…`);
  const props = await api.json(`props?model=${encodeURIComponent(model)}`);
  picker.selectedOptions[0].text = model; // loaded now
  props.model_alias = model;
  return props;
}

function isLoaded(entry) {
  return entry.status?.value === "loaded";
}

/** The request fields, or null (the reason shown) when the settings cannot make a request. */
function requestFields() {
  try {
    return settings.requestFields();
  } catch (error) {
    if (!(error instanceof SettingsError)) throw error;
    showError(error.message);
    openSettings(true);
    return null;
  }
}

async function send(event) {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (running || (!text && attachments.pending.length === 0)) return;
  if (!propsLoaded) await loadProps();
  const options = requestFields();
  if (!options) return; // the message stays in the composer
  $("prompt").value = "";
  if (conversation.messages.length === 0) conversation.title = titleFor(text, attachments.pending);
  conversation.messages.push({ role: "user", content: text, attachments: attachments.take() });
  await generate(options);
}

/** Edit user message `index`: the messages after it go, and the reply is asked for again. */
async function resend(index, text) {
  const options = running ? null : requestFields();
  if (!options) return;
  conversation.messages = conversation.messages.slice(0, index + 1);
  conversation.messages[index] = { ...conversation.messages[index], content: text };
  await generate(options);
}

async function regenerate() {
  const options = running ? null : requestFields();
  if (!options) return;
  if (conversation.messages.at(-1)?.role === "assistant") conversation.messages.pop();
  await generate(options);
}

/**
 * The agent loop: stream the reply to the conversation so far; while it asks for the tools it was offered (those
 * ticked when each request goes), run its calls and send their answers back for the next reply, at most
 * MAX_TOOL_STEPS times. Calls of a reply offered no tool are only shown. Stop (or Esc) aborts the reply or the
 * call that runs, keeps what came, and sends nothing more.
 */
async function generate(options) {
  hideError();
  running = new AbortController();
  const { signal } = running;
  setRunning(true);
  try {
    for (let step = 1; ; step++) {
      const offered = tools.definitions();
      const reply = await streamTurn(options, offered, signal);
      const calls = reply?.finishReason === "tool_calls" ? reply.toolCalls.filter(Boolean) : [];
      if (signal.aborted || offered.length === 0 || calls.length === 0) break;
      await runCalls(calls, signal);
      if (signal.aborted) break;
      if (step === MAX_TOOL_STEPS) {
        showError(`The model asked for tools ${MAX_TOOL_STEPS} times in a row; send a message to let it go on.`);
        break;
      }
    }
  } finally {
    running = null;
    setRunning(false);
    save(conversation);
    showConversation();
  }
}

/** Stream one reply into the conversation; it is returned once complete (null: it failed or was stopped). */
async function streamTurn(options, offered, signal) {
  const body = chatRequest(conversation.messages, settings.systemPrompt, options, offered);
  if (model) body.model = model;
  const reply = emptyReply();
  conversation.messages.push(reply);
  save(conversation);
  showConversation();
  const article = $("messages").lastElementChild;
  thinking = reply;
  let frame = 0; // one render per animation frame, however many tokens arrive
  const update = () => {
    frame ||= requestAnimationFrame(() => {
      frame = 0;
      view.updateReply(article, reply);
      showContext();
      showEndThinking();
    });
  };
  try {
    await streamReply(api, body, reply, signal, update);
    return reply;
  } catch (error) {
    if (error.name === "AbortError") reply.stopped = true;
    else showError(error.message);
    return null;
  } finally {
    cancelAnimationFrame(frame);
    thinking = null;
    showEndThinking();
    const empty = !reply.content && !reply.reasoning && reply.toolCalls.length === 0;
    if (empty && !reply.stopped) conversation.messages.pop(); // nothing came: the error says why
    save(conversation);
    showConversation();
  }
}

/** Run the reply's tool calls one after the other, each answer shown and kept as a "tool" message. */
async function runCalls(calls, signal) {
  for (const call of calls) {
    const message = toolMessage(call);
    conversation.messages.push(message);
    showConversation();
    try {
      await runCall(api, call, message, signal);
    } catch (error) {
      if (error.name !== "AbortError") throw error;
      return; // Stop: the message says so
    } finally {
      save(conversation);
      showConversation();
    }
  }
}

/** End thinking is offered while the reply streams its reasoning and nothing else yet. */
function showEndThinking() {
  const reply = thinking;
  $("end-thinking").hidden = !(reply?.completionId && reply.reasoning && !reply.content && !reply.toolCalls.length);
}

async function endThinking() {
  const reply = thinking;
  thinking = null; // asked once: the button goes
  showEndThinking();
  if (!reply) return;
  try {
    await endReasoning(api, reply.completionId, model); // {success: false}: the reply ended meanwhile
  } catch (error) {
    showError(`Cannot end the thinking: ${error.message}`);
  }
}

function stop() {
  running?.abort();
}

function setRunning(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
  $("messages").setAttribute("aria-busy", String(on));
  if (!on) $("prompt").focus();
}

function save(target) {
  try {
    store.saveConversation(target);
  } catch {
    showError("This conversation could not be saved: the browser's storage for this page is full.");
  }
}

function showConversation() {
  view.renderMessages($("messages"), conversation.messages, messageActions);
  $("messages").lastElementChild?.scrollIntoView({ block: "end" });
  renderSidebar();
  showContext();
}

function renderSidebar() {
  view.renderConversations($("conversations"), store.listConversations(), conversation.id, listActions);
}

function startNewConversation() {
  if (running) return;
  conversation = store.newConversation();
  showConversation();
  closeSidebarOnPhone();
  $("prompt").focus();
}

/** The context bar: the last reply's prompt + cached + generated tokens against the slot's n_ctx. */
function showContext() {
  const stats = conversation.messages.findLast((m) => m.role === "assistant" && m.stats)?.stats;
  const used = stats ? stats.promptTokens + stats.completionTokens : 0;
  const meter = $("context");
  meter.max = nCtx || 1;
  meter.value = used;
  $("context-text").textContent = nCtx ? `${used} / ${nCtx}` : "";
}

function titleFor(text, pending) {
  const title = text || pending[0]?.name || "New chat";
  return title.length > 48 ? `${title.slice(0, 47)}…` : title;
}

function showStatus(text) {
  $("status").textContent = text;
}

function showError(message) {
  $("error-text").textContent = message;
  $("error").hidden = false;
}

function hideError() {
  $("error").hidden = true;
}

/** The API key dialog; resolves to the key, or null when cancelled. `rejected`: a key was sent and refused. */
function askKey(rejected) {
  const dialog = $("key-dialog");
  $("key-reason").textContent = rejected ? "The server refused that key." : "This server needs an API key.";
  $("api-key").value = "";
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    const key = () => (dialog.returnValue === "ok" ? $("api-key").value.trim() || null : null);
    dialog.addEventListener("close", () => resolve(key()), { once: true });
  });
}

function toggleSidebar() {
  const name = PHONE.matches ? "sidebar-open" : "sidebar-closed";
  document.body.classList.toggle(name);
  $("toggle-sidebar").setAttribute("aria-expanded", String(sidebarShown()));
}

function sidebarShown() {
  const classes = document.body.classList;
  return PHONE.matches ? classes.contains("sidebar-open") : !classes.contains("sidebar-closed");
}

function closeSidebarOnPhone() {
  if (PHONE.matches) document.body.classList.remove("sidebar-open");
  $("toggle-sidebar").setAttribute("aria-expanded", String(sidebarShown()));
}

function openSettings(open) {
  $("settings").hidden = !open;
  $("toggle-settings").setAttribute("aria-expanded", String(open));
}

$("model-picker").addEventListener("change", async () => {
  model = $("model-picker").value;
  localStorage.setItem(MODEL_STORAGE, model);
  propsLoaded = false;
  $("send").disabled = true;
  await loadProps(); // loads the model chosen
});
$("composer").addEventListener("submit", send);
$("stop").addEventListener("click", stop);
$("end-thinking").addEventListener("click", endThinking);
$("new-chat").addEventListener("click", startNewConversation);
$("toggle-sidebar").addEventListener("click", toggleSidebar);
$("toggle-settings").addEventListener("click", () => openSettings($("settings").hidden));
$("close-settings").addEventListener("click", () => openSettings(false));
// At phone width the sidebar lies over the chat: a tap on the chat closes it (the toggle button toggles it).
document.querySelector("main").addEventListener("click", (event) => {
  if (!event.target.closest("#toggle-sidebar")) closeSidebarOnPhone();
});
$("error-close").addEventListener("click", hideError);
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape") return;
  if (running) stop();
  else closeSidebarOnPhone();
});

$("toggle-sidebar").setAttribute("aria-expanded", String(sidebarShown()));
showConversation();
loadProps();
