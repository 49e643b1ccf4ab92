// The host bridge: the one App connection, the tools the view calls, and the shapes of what they send back.
import { App } from "@modelcontextprotocol/ext-apps";

export const RENDER_TOOL = "vidforge_render_video";
export const STATUS_TOOL = "vidforge_get_render_status";
export const INSPECT_TOOL = "vidforge_inspect_video";
export const APPROVE_TOOL = "vidforge_approve_watermark";
export const VIEW_META = "com.vidforge/view";
export const QC_META = "com.vidforge/qc";

export type Json = Record<string, unknown>;
export type ToolResult = {
  content?: unknown[];
  structuredContent?: Json;
  isError?: boolean;
  _meta?: Json;
  [key: string]: unknown;
};
export type Links = Partial<
  Record<"preview" | "source_frame" | "video" | "download" | "poster" | "contact_sheet" | "hls", string>
>;

export const app = new App(
  { name: "vidforge-render-view", version: "1.0.0" },
  { availableDisplayModes: ["inline", "fullscreen"] },
  { autoResize: true },
);

// Readers for untrusted tool output: anything of the wrong type counts as absent.

export function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function str(value: unknown): string | undefined {
  return typeof value === "string" && value !== "" ? value : undefined;
}

export function num(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}
