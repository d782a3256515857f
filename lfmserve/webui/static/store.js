// Conversations kept in the browser's localStorage, one key each, so a reload finds them and one that is too
// large to save (attached images count) costs only itself.
//
// A conversation: {id, title, updated, messages}. A message: {role: "user", content, attachments},
// {role: "assistant", content, reasoning, toolCalls, stats, stopped, completionId, finishReason} (see chat.js) or
// {role: "tool", toolCallId, name, content, state}, a tool call's answer (see tools.js).

const PREFIX = "lfmserve.conversation.";

export function newConversation() {
  return { id: crypto.randomUUID(), title: "New chat", updated: Date.now(), messages: [] };
}

/** Every stored conversation, the most recently changed first. */
export function listConversations() {
  const conversations = [];
  for (let i = 0; i < localStorage.length; i++) {
    const key = localStorage.key(i);
    if (!key.startsWith(PREFIX)) continue;
    try {
      conversations.push(JSON.parse(localStorage.getItem(key)));
    } catch {
      // not ours to repair: leave it where it is
    }
  }
  return conversations.sort((a, b) => b.updated - a.updated);
}

/** Store `conversation` (one with no message yet is not worth a key); throws when storage is full. */
export function saveConversation(conversation) {
  if (conversation.messages.length === 0) return;
  conversation.updated = Date.now();
  localStorage.setItem(PREFIX + conversation.id, JSON.stringify(conversation));
}

export function deleteConversation(id) {
  localStorage.removeItem(PREFIX + id);
}

/** Download `conversation` as a JSON file. */
export function exportConversation(conversation) {
  const blob = new Blob([JSON.stringify(conversation, null, 2)], { type: "application/json" });
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = `${conversation.title.replace(/[^\w -]+/g, "").trim() || "conversation"}.json`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 0); // after the download has started
}
