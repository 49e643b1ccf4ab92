// Plays the finished video: hls.js where the browser has MSE, native HLS (Safari), else the progressive file.
import Hls from "hls.js";
import type { Links } from "./bridge";
import { ui } from "./dom";
import { mediaFailed } from "./errors";
import { state } from "./state";

export function playVideo(links: Links): void {
  // Every poll hands the links again: re-point only when none is set yet or fresh links were asked for, so a poll
  // never restarts the video.
  if (links.poster && (!ui.video.poster || state.freshLinksWanted)) ui.video.poster = links.poster;
  const wanted = links.hls ?? links.video;
  if (!wanted) return;
  if (state.videoSource && !state.freshLinksWanted) return; // already playing this render's video
  state.videoSource = wanted;
  state.hls?.destroy();
  state.hls = undefined;
  if (links.hls && Hls.isSupported()) {
    const hls = new Hls({ enableWorker: false });
    state.hls = hls;
    hls.on(Hls.Events.ERROR, (_event, data) => {
      if (!data.fatal) return;
      if (links.video && ui.video.getAttribute("src") !== links.video) {
        // The stream failed: the progressive file instead.
        state.hls?.destroy();
        state.hls = undefined;
        ui.video.src = links.video;
      } else {
        mediaFailed();
      }
    });
    hls.loadSource(links.hls);
    hls.attachMedia(ui.video);
  } else if (links.hls && ui.video.canPlayType("application/vnd.apple.mpegurl")) {
    ui.video.src = links.hls;
  } else if (links.video) {
    ui.video.src = links.video;
  }
}
