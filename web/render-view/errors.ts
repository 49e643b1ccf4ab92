// The error panel, and what a media link that fails to load does to it.
import { isObject, str, type Json, type ToolResult } from "./bridge";
import { show, ui } from "./dom";
import { state } from "./state";

const LINK_FAILED = "This link has expired or was refused.";

export function clearError(): void {
  ui.errorText.textContent = "";
  show(ui.retry, false);
  show(ui.error, false);
}

export function showError(text: string, retryLabel?: string): void {
  ui.errorText.textContent = text;
  if (retryLabel) {
    ui.retry.textContent = retryLabel;
    show(ui.retry, true);
  } else {
    show(ui.retry, false);
  }
  show(ui.error, true);
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return typeof err === "string" ? err : "unknown error";
}

/** Why a tool call with `isError` failed: its structured error's message, else its text content. */
export function toolErrorText(result: ToolResult): string {
  const sc = result.structuredContent;
  const structured = isObject(sc) && isObject(sc.error) ? str(sc.error.message) : undefined;
  if (structured) return structured;
  if (isObject(sc) && str(sc.message)) return str(sc.message)!;
  const texts = (result.content ?? [])
    .filter((block): block is Json => isObject(block) && block.type === "text" && typeof block.text === "string")
    .map((block) => block.text as string);
  return texts.join("\n") || "The tool reported an error without saying why.";
}

/** A signed link expired or was refused: say so, and offer fresh links (the retry button, wired in follow.ts). */
export function mediaFailed(): void {
  state.linkFailed = true;
  showError(LINK_FAILED, "Get fresh links");
}

for (const img of [ui.preview, ui.sourceFrame, ui.contactSheet]) {
  img.addEventListener("error", () => {
    if (img.getAttribute("src")) mediaFailed();
  });
}
// With hls.js attached, its own error handler (player.ts) decides instead.
ui.video.addEventListener("error", () => {
  if (!state.hls && ui.video.getAttribute("src")) mediaFailed();
});
