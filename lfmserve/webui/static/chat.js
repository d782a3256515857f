// One turn over /v1/chat/completions: the request made from the conversation and the settings, and the
// streamed answer folded into the assistant message as its events arrive. No DOM here.

import { streamEvents } from "./api.js";

/** Content-type subtypes that are not the format's name (the server reads the bytes; the field is OpenAI's). */
const AUDIO_FORMATS = { mpeg: "mp3", "x-wav": "wav", wave: "wav", "x-flac": "flac" };

/** The request for the reply that follows `messages`; `options` are the settings panel's request fields. */
export function chatRequest(messages, systemPrompt, options) {
  const history = messages.map(apiMessage);
  if (systemPrompt) history.unshift({ role: "system", content: systemPrompt });
  return {
    messages: history,
    stream: true,
    stream_options: { include_usage: true },
    timings_per_token: true, // timings on every step, so the stats move while the reply streams
    ...options,
  };
}

/** A stored message as the API takes it: attachments become content parts before the text. */
function apiMessage(message) {
  if (message.role === "assistant") return { role: "assistant", content: message.content };
  const attachments = message.attachments ?? [];
  if (attachments.length === 0) return { role: "user", content: message.content };
  const parts = attachments.map(contentPart);
  if (message.content) parts.push({ type: "text", text: message.content });
  return { role: "user", content: parts };
}

function contentPart(attachment) {
  if (attachment.kind === "image") return { type: "image_url", image_url: { url: attachment.dataUrl } };
  const data = attachment.dataUrl.slice(attachment.dataUrl.indexOf(",") + 1);
  const subtype = attachment.type.split("/")[1] ?? "wav";
  return { type: "input_audio", input_audio: { data, format: AUDIO_FORMATS[subtype] ?? subtype } };
}

/** A new, empty assistant message, filled by `streamReply`. */
export function emptyReply() {
  return { role: "assistant", content: "", reasoning: "", toolCalls: [], stats: null, stopped: false };
}

/**
 * Stream the answer to `body` into `reply`, calling `onUpdate()` after each event. Rejects with ApiError for
 * an error answer or an error inside the stream, and with an AbortError once `signal` is aborted (Stop):
 * the connection closes, and the server cancels the generation.
 */
export async function streamReply(api, body, reply, signal, onUpdate) {
  const init = { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const response = await api.fetch("v1/chat/completions", { ...init, signal });
  for await (const event of streamEvents(response)) {
    applyEvent(reply, event);
    onUpdate();
  }
}

function applyEvent(reply, event) {
  const delta = event.choices?.[0]?.delta ?? {};
  if (delta.content) reply.content += delta.content;
  if (delta.reasoning_content) reply.reasoning += delta.reasoning_content;
  for (const call of delta.tool_calls ?? []) {
    // a call comes as a header (its name) and then its arguments in pieces, all under the call's index
    const entry = (reply.toolCalls[call.index ?? 0] ??= { name: "", arguments: "" });
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
