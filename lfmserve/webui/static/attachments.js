// Images and audio for the next message, from the file picker, a paste or a drop: read as data: URLs (the
// form the API takes them in, and one that localStorage can keep) and previewed until the message is sent.
// Only the kinds the model reads (/props `modalities`) are offered or taken.

export class Attachments {
  /** `onError(message)` reports a file that cannot be attached. */
  constructor({ list, picker, button, dropZone, textarea, onError }) {
    this.list = list;
    this.picker = picker;
    this.button = button;
    this.onError = onError;
    this.kinds = { image: false, audio: false };
    this.pending = [];
    button.addEventListener("click", () => picker.click());
    picker.addEventListener("change", () => {
      this.add([...picker.files]);
      picker.value = ""; // the same file can be picked again
    });
    textarea.addEventListener("paste", (event) => {
      const files = [...(event.clipboardData?.files ?? [])];
      if (files.length === 0) return; // text: the textarea's own paste
      event.preventDefault();
      this.add(files);
    });
    dropZone.addEventListener("dragover", (event) => {
      if (this.accepts() && event.dataTransfer.types.includes("Files")) event.preventDefault();
    });
    dropZone.addEventListener("drop", (event) => {
      event.preventDefault();
      this.add([...event.dataTransfer.files]);
    });
  }

  /** What the server's model reads: `{vision, audio}` from /props. */
  setModalities({ vision = false, audio = false } = {}) {
    this.kinds = { image: vision, audio };
    this.picker.accept = [vision && "image/*", audio && "audio/*"].filter(Boolean).join(",");
    this.button.hidden = !this.accepts();
  }

  accepts() {
    return this.kinds.image || this.kinds.audio;
  }

  async add(files) {
    for (const file of files) {
      const kind = file.type.split("/")[0];
      if (!this.kinds[kind]) {
        this.onError(`${file.name} cannot be attached: this model does not read ${kind || "such"} files.`);
        continue;
      }
      this.pending.push({ kind, name: file.name, type: file.type, dataUrl: await dataUrl(file) });
      this.render();
    }
  }

  /** The attachments for the message being sent; the previews go. */
  take() {
    const taken = this.pending;
    this.pending = [];
    this.render();
    return taken;
  }

  render() {
    this.list.replaceChildren(
      ...this.pending.map((attachment, index) => {
        const item = attachmentElement(attachment);
        const remove = document.createElement("button");
        remove.type = "button";
        remove.textContent = "×";
        remove.setAttribute("aria-label", `Remove ${attachment.name}`);
        remove.addEventListener("click", () => {
          this.pending.splice(index, 1);
          this.render();
        });
        item.append(remove);
        return item;
      }),
    );
  }
}

/** An attachment's preview (in the composer and in a sent message): the image, or a player for the audio. */
export function attachmentElement(attachment) {
  const item = document.createElement("figure");
  item.className = "attachment";
  const media = document.createElement(attachment.kind === "image" ? "img" : "audio");
  media.src = attachment.dataUrl;
  if (attachment.kind === "image") media.alt = attachment.name;
  else Object.assign(media, { controls: true, ariaLabel: attachment.name });
  const caption = document.createElement("figcaption");
  caption.textContent = attachment.name;
  item.append(media, caption);
  return item;
}

function dataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}
