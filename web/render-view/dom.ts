// The view's elements and the small helpers that write to them; caller text goes in only through textContent.
import { state } from "./state";

const $ = <T extends HTMLElement = HTMLElement>(id: string): T => {
  const el = document.getElementById(id);
  if (!el) throw new Error(`missing #${id}`);
  return el as T;
};

export const ui = {
  title: $("title"),
  displayMode: $<HTMLButtonElement>("display-mode"),
  state: $("state"),
  progressPanel: $("progress-panel"),
  progress: $<HTMLProgressElement>("progress"),
  percent: $("percent"),
  phase: $("phase"),
  fps: $("fps"),
  eta: $("eta"),
  statusMessage: $("status-message"),
  approval: $("approval"),
  preview: $<HTMLImageElement>("preview"),
  sourceFrame: $<HTMLImageElement>("source-frame"),
  note: $<HTMLInputElement>("note"),
  approve: $<HTMLButtonElement>("approve"),
  reject: $<HTMLButtonElement>("reject"),
  outcome: $("outcome"),
  result: $("result"),
  video: $<HTMLVideoElement>("video"),
  download: $<HTMLAnchorElement>("download"),
  qc: $("qc"),
  qcVerdict: $("qc-verdict"),
  qcReasons: $("qc-reasons"),
  contactSheet: $<HTMLImageElement>("contact-sheet"),
  facts: $("facts"),
  error: $("error"),
  errorText: $("error-text"),
  retry: $<HTMLButtonElement>("retry"),
};

/** Sets the live-region text only when it changes, so screen readers don't repeat it on every poll. */
export function announce(text: string): void {
  if (text !== state.lastAnnounced) {
    state.lastAnnounced = text;
    ui.state.textContent = text;
  }
}

export function show(el: HTMLElement, visible: boolean): void {
  el.hidden = !visible;
}

export function formatDuration(seconds: number): string {
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  const minutes = Math.floor(seconds / 60);
  const rest = Math.round(seconds - minutes * 60);
  return `${minutes} min ${rest} s`;
}

export function formatBytes(bytes: number): string {
  const units = ["bytes", "KB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return unit === 0 ? `${bytes} bytes` : `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]}`;
}

export function factText(value: unknown): string {
  if (value === null || value === undefined) return "—";
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export function fillFacts(list: HTMLElement, entries: [string, unknown][]): void {
  list.replaceChildren();
  for (const [key, value] of entries) {
    const dt = document.createElement("dt");
    dt.textContent = key;
    const dd = document.createElement("dd");
    dd.textContent = factText(value);
    list.append(dt, dd);
  }
}

/** Points an <img> at `url` if it shows nothing yet or fresh links were asked for: every poll hands the links again,
 * and only the person's "Get fresh links" replaces one that failed to load. */
export function setImage(img: HTMLImageElement, url: string | undefined): void {
  if (!url) {
    img.removeAttribute("src");
    delete img.dataset.link;
    return;
  }
  if (!img.dataset.link || state.freshLinksWanted) {
    img.dataset.link = url;
    img.src = url;
  }
}
