// The view's mutable state, in one object so every module reads and writes the same values.
import type Hls from "hls.js";
import type { Json } from "./bridge";

export const state: {
  toolName: string | undefined;
  toolArgs: Json;
  renderId: string | undefined;
  pollTimer: number | undefined;
  findTimer: number | undefined; // looking the render up when the host holds back the tool's result
  polling: boolean;
  decision: { approved: boolean; note?: string } | undefined;
  lastAnnounced: string;
  freshLinksWanted: boolean;
  videoSource: string; // what the <video> plays now (the hls or the progressive link)
  hls: Hls | undefined;
  shownState: string;
  linkFailed: boolean; // a media link failed to load: the error stays until fresh links are asked for
  displayMode: string;
} = {
  toolName: undefined,
  toolArgs: {},
  renderId: undefined,
  pollTimer: undefined,
  findTimer: undefined,
  polling: false,
  decision: undefined,
  lastAnnounced: "",
  freshLinksWanted: false,
  videoSource: "",
  hls: undefined,
  shownState: "",
  linkFailed: false,
  displayMode: "inline",
};
