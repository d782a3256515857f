// The server's tools (GET /tools, with --tools or MCP servers): a checkbox each in the settings panel, the
// definitions of the ticked ones for a chat request, and a call the model made run through POST /tools, its answer
// kept as the text the model reads next.

/** localStorage key for the names of the tools the user unticked (so a tool the server adds later starts on). */
const OFF_STORAGE = "lfmserve.toolsOff";
const JSON_HEADERS = { "Content-Type": "application/json" };

export class Tools {
  /** `section` holds a `ul` for the list; it stays hidden while the server has no tools. */
  constructor(section) {
    this.section = section;
    this.listed = []; // the entries of GET /tools: {tool, display_name, permissions, definition, ...}
  }

  /** Read the server's tools; a server with none (403 `feature_disabled`, or 404 elsewhere) is no error. */
  async load(api) {
    try {
      this.listed = await api.json("tools");
    } catch (error) {
      if (error.status !== 403 && error.status !== 404) throw error;
      this.listed = [];
    }
    this.render();
  }

  /** The function definitions of the ticked tools, read at each request, so unticking one takes effect at once. */
  definitions() {
    const off = unticked();
    return this.listed.filter((entry) => !off.has(entry.tool)).map((entry) => entry.definition);
  }

  render() {
    const off = unticked();
    const items = this.listed.map((entry) => toolItem(entry, !off.has(entry.tool)));
    this.section.querySelector("ul").replaceChildren(...items);
    this.section.hidden = this.listed.length === 0;
  }
}

function toolItem(entry, ticked) {
  const box = document.createElement("input");
  box.type = "checkbox";
  box.checked = ticked;
  box.addEventListener("change", () => setUnticked(entry.tool, !box.checked));
  const label = document.createElement("label");
  label.className = "check";
  label.title = entry.definition?.function?.description ?? "";
  const name = document.createElement("code");
  name.textContent = entry.tool;
  label.append(box, ` ${entry.display_name || entry.tool} `, name);
  if (entry.permissions?.write) label.append(tag("writes"));
  const item = document.createElement("li");
  item.append(label);
  return item;
}

function tag(text) {
  const node = document.createElement("span");
  node.className = "tool-tag";
  node.textContent = text;
  return node;
}

function unticked() {
  try {
    return new Set(JSON.parse(localStorage.getItem(OFF_STORAGE)) ?? []);
  } catch {
    return new Set();
  }
}

function setUnticked(name, off) {
  const names = unticked();
  if (off) names.add(name);
  else names.delete(name);
  localStorage.setItem(OFF_STORAGE, JSON.stringify([...names]));
}

/** The "tool" message that answers `call` ({id, name, arguments}), its content empty until `runCall` fills it. */
export function toolMessage(call) {
  return { role: "tool", toolCallId: call.id, name: call.name, content: "", state: "running" };
}

/**
 * Run `call` through POST /tools and fill `message` in: the answer's text (`plain_text_response`, else the
 * answer as JSON), or what went wrong, which the model reads as the tool's answer too (state "error"), so it
 * can try again. Rejects with an AbortError once `signal` is aborted (Stop), the message then marked "stopped".
 */
export async function runCall(api, call, message, signal) {
  const params = parseArguments(call.arguments);
  if (typeof params === "string") return finish(message, "error", params);
  const init = { method: "POST", headers: JSON_HEADERS, body: JSON.stringify({ tool: call.name, params }), signal };
  try {
    const answer = await api.json("tools", init);
    if (answer.error !== undefined) return finish(message, "error", `Error: ${answer.error}`);
    const text = typeof answer.plain_text_response === "string" ? answer.plain_text_response : JSON.stringify(answer);
    return finish(message, "done", text);
  } catch (error) {
    if (error.name === "AbortError") {
      finish(message, "stopped", "Stopped before the tool answered.");
      throw error;
    }
    return finish(message, "error", `Error: ${error.message}`);
  }
}

/** The call's arguments as the object POST /tools takes, or the reason they are not one. */
function parseArguments(text) {
  let params;
  try {
    params = text ? JSON.parse(text) : {};
  } catch (error) {
    return `Error: the arguments are not JSON (${error.message}).`;
  }
  const isObject = params !== null && typeof params === "object" && !Array.isArray(params);
  return isObject ? params : "Error: the arguments are not a JSON object.";
}

function finish(message, state, content) {
  message.state = state;
  message.content = content;
  return message;
}
