// One turn over /v1/chat/completions: the request made from the conversation and the settings, the streamed
// answer folded into the assistant message as its events arrive, and the control that ends its thinking. No DOM.

import { streamEvents } from "./api.js";

/** Content-type subtypes that are not the format's name (the server reads the bytes; the field is OpenAI's). */
const AUDIO_FORMATS = { mpeg: "mp3", "x-wav": "wav", wave: "wav", "x-flac": "flac" };
const JSON_HEADERS = { "Content-Type": "application/json" };

/**
 * The request for the reply that follows `messages`; `options` are the settings panel's request fields, `tools`
 * the definitions of the tools the model may call.
 */
export function chatRequest(messages, systemPrompt, options, tools = []) {
  const answered = new Set(messages.filter((m) => m.role === "tool").map((m) => m.toolCallId));
  const history = messages.map((message) => apiMessage(message, answered));
  if (systemPrompt) history.unshift({ role: "system", content: systemPrompt });
  return {
    messages: history,
    stream: true,
    stream_options: { include_usage: true },
    timings_per_token: true, // timings on every step, so the stats move while the reply streams
    reasoning_control: true, // so that End thinking can end it (POST v1/chat/completions/control)
    ...(tools.length > 0 ? { tools } : {}),
    ...options,
  };
}

/**
 * A stored message as the API takes it: attachments become content parts before the text. An assistant's tool
 * calls go only where a tool message answers them (`answered` ids): a call cut short by Stop has no answer, and
 * a call without one is a malformed history.
 */
function apiMessage(message, answered) {
  if (message.role === "tool") return { role: "tool", tool_call_id: message.toolCallId, content: message.content };
  if (message.role === "assistant") return assistantMessage(message, answered);
  const attachments = message.attachments ?? [];
  if (attachments.length === 0) return { role: "user", content: message.content };
  const parts = attachments.map(contentPart);
  if (message.content) parts.push({ type: "text", text: message.content });
  return { role: "user", content: parts };
}

function assistantMessage(message, answered) {
  const calls = (message.toolCalls ?? []).filter((call) => call && answered.has(call.id));
  if (calls.length === 0) return { role: "assistant", content: message.content };
  const toolCalls = calls.map((call) => ({
    id: call.id,
    type: "function",
    function: { name: call.name, arguments: call.arguments },
  }));
  return { role: "assistant", content: message.content, tool_calls: toolCalls };
}

function contentPart(attachment) {
  if (attachment.kind === "image") return { type: "image_url", image_url: { url: attachment.dataUrl } };
  const data = attachment.dataUrl.slice(attachment.dataUrl.indexOf(",") + 1);
  const subtype = attachment.type.split("/")[1] ?? "wav";
  return { type: "input_audio", input_audio: { data, format: AUDIO_FORMATS[subtype] ?? subtype } };
}

/**
 * A new, empty assistant message, filled by `streamReply`: `completionId` is the answer's id (`chatcmpl-...`),
 * `finishReason` its choice's, "tool_calls" when it ends by asking for the calls it made.
 */
export function emptyReply() {
  return {
    role: "assistant",
    content: "",
    reasoning: "",
    toolCalls: [],
    stats: null,
    stopped: false,
    completionId: "",
    finishReason: null,
  };
}

/**
 * Stream the answer to `body` into `reply`, calling `onUpdate()` after each event. Rejects with ApiError for
 * an error answer or an error inside the stream, and with an AbortError once `signal` is aborted (Stop):
 * the connection closes, and the server cancels the generation.
 */
export async function streamReply(api, body, reply, signal, onUpdate) {
  const init = { method: "POST", headers: JSON_HEADERS, body: JSON.stringify(body), signal };
  const response = await api.fetch("v1/chat/completions", init);
  for await (const event of streamEvents(response)) {
    applyEvent(reply, event);
    onUpdate();
  }
}

function applyEvent(reply, event) {
  const choice = event.choices?.[0] ?? {};
  const delta = choice.delta ?? {};
  reply.completionId ||= event.id ?? "";
  reply.finishReason = choice.finish_reason ?? reply.finishReason;
  if (delta.content) reply.content += delta.content;
  if (delta.reasoning_content) reply.reasoning += delta.reasoning_content;
  for (const call of delta.tool_calls ?? []) {
    // a call comes as a header (its id and name) and then its arguments in pieces, all under the call's index
    const entry = (reply.toolCalls[call.index ?? 0] ??= { id: "", name: "", arguments: "" });
    entry.id ||= call.id ?? "";
    entry.name += call.function?.name ?? "";
    entry.arguments += call.function?.arguments ?? "";
  }
  if (event.timings || event.usage) reply.stats = foldStats(reply.stats ?? {}, event);
}

/** The reply's numbers: llama-server's `timings` while it streams, OpenAI's `usage` at the end. */
function foldStats(stats, { timings, usage }) {
  const next = { ...stats };
  if (timings) {
    next.promptTokens = timings.prompt_n + timings.cache_n;
    next.cachedTokens = timings.cache_n;
    next.completionTokens = timings.predicted_n;
    next.promptPerSecond = timings.prompt_per_second;
    next.predictedPerSecond = timings.predicted_per_second;
  }
  if (usage) {
    next.promptTokens = usage.prompt_tokens;
    next.cachedTokens = usage.prompt_tokens_details?.cached_tokens ?? next.cachedTokens ?? 0;
    next.completionTokens = usage.completion_tokens;
  }
  return next;
}

/**
 * Ask the server to end the thinking of the running answer `completionId` (sent with `reasoning_control`): the
 * answer follows at its next token. `model` names it on a router. Resolves to `{success, message?}`; `success` is
 * false for an answer that has finished meanwhile.
 */
export async function endReasoning(api, completionId, model) {
  const body = { id: completionId, action: "reasoning_end", ...(model ? { model } : {}) };
  return api.json("v1/chat/completions/control", { method: "POST", headers: JSON_HEADERS, body: JSON.stringify(body) });
}
