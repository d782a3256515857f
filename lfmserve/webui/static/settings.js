// The settings panel: sampling fields pre-filled from the server's GET /props, a system prompt, max tokens,
// the thinking switch and a JSON schema. Only what the user changed is kept (localStorage), so a field the
// user left alone follows the server's defaults, even after the server restarts with other ones.

const STORAGE = "lfmserve.settings";
/** The /props `default_generation_settings.params` that fill the sampling fields (same names as the request's). */
const SAMPLING = ["temperature", "top_k", "top_p", "min_p", "repeat_penalty"];
/** The /props `ui_settings` (--ui-config, in llama-server's web UI names) this panel has: key -> field. */
const UI_SETTINGS = { systemMessage: "system_prompt", max_tokens: "max_tokens", ...Object.fromEntries(SAMPLING.map((n) => [n, n])) };

export class SettingsError extends Error {}

export class Settings {
  constructor(form) {
    this.form = form;
    this.defaults = { system_prompt: "", max_tokens: "", json_schema: "", ignore_eos: false, enable_thinking: true };
    this.thinking = false; // whether the chat template reads `enable_thinking`
    this.fill();
    form.addEventListener("input", () => this.remember());
    form.querySelector("#reset-settings").addEventListener("click", () => {
      localStorage.removeItem(STORAGE);
      this.fill();
    });
  }

  /** Take the server's defaults from its /props answer. */
  applyProps(props) {
    const params = props.default_generation_settings?.params ?? {};
    for (const name of SAMPLING) {
      if (typeof params[name] === "number") this.defaults[name] = String(Number(params[name].toPrecision(6)));
    }
    for (const [key, name] of Object.entries(UI_SETTINGS)) {
      const value = props.ui_settings?.[key]; // the server's operator chose these: they win over the model's
      if (typeof value === "string" || typeof value === "number") this.defaults[name] = String(value);
    }
    this.thinking = (props.chat_template ?? "").includes("enable_thinking");
    this.form.querySelector("#thinking-row").hidden = !this.thinking;
    this.fill();
  }

  /** The fields' values: the user's where they changed one, the server's defaults elsewhere. */
  fill() {
    const values = { ...this.defaults, ...this.changed() };
    for (const [name, value] of Object.entries(values)) {
      const field = this.form.elements[name];
      if (!field) continue;
      if (field.type === "checkbox") field.checked = value;
      else field.value = value;
    }
    this.checkSchema();
  }

  changed() {
    try {
      return JSON.parse(localStorage.getItem(STORAGE)) ?? {};
    } catch {
      return {};
    }
  }

  remember() {
    const changed = {};
    for (const field of this.form.elements) {
      if (!field.name) continue;
      const value = field.type === "checkbox" ? field.checked : field.value;
      if (value !== (this.defaults[field.name] ?? "")) changed[field.name] = value;
    }
    localStorage.setItem(STORAGE, JSON.stringify(changed));
    this.checkSchema();
  }

  get systemPrompt() {
    return this.form.elements.system_prompt.value.trim();
  }

  /** The request's fields from the panel; throws SettingsError (also shown under the field) for a bad schema. */
  requestFields() {
    const fields = this.form.elements;
    const options = {};
    for (const name of [...SAMPLING, "max_tokens"]) {
      if (fields[name].value !== "") options[name] = Number(fields[name].value); // empty: the server's default
    }
    if (fields.ignore_eos.checked) options.ignore_eos = true;
    if (this.thinking) options.chat_template_kwargs = { enable_thinking: fields.enable_thinking.checked };
    const { schema, error } = this.checkSchema();
    if (error) throw new SettingsError(error);
    if (schema) options.response_format = { type: "json_schema", json_schema: { name: schemaName(schema), schema } };
    return options;
  }

  /** The schema in its textarea as `{schema}` (null when empty), or `{error}`, which is also shown under it. */
  checkSchema() {
    const text = this.form.elements.json_schema.value.trim();
    const result = text ? parseObject(text) : { schema: null };
    if (result.error) result.error = `The JSON schema is not valid: ${result.error}.`;
    this.form.querySelector("#json-schema-error").textContent = result.error ?? "";
    return result;
  }
}

function parseObject(text) {
  try {
    const value = JSON.parse(text);
    const isObject = value !== null && typeof value === "object" && !Array.isArray(value);
    return isObject ? { schema: value } : { error: "it is not a JSON object" };
  } catch (error) {
    return { error: error.message };
  }
}

/** OpenAI's `json_schema.name`: the schema's title when it has a usable one. */
function schemaName(schema) {
  const title = typeof schema.title === "string" ? schema.title.replace(/[^\w-]+/g, "_").slice(0, 64) : "";
  return title || "response";
}
