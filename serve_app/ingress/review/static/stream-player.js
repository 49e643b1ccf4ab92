// The watch page's stream (a <video> with data-hls): hls.js plays the HLS ladder where the browser has Media
// Source Extensions, the browser itself where it plays HLS natively, and the progressive file (the video's own
// src) everywhere else. Under it, a scrub bar shows the storyboard's tile for the moment under the pointer.
"use strict";
const video = document.getElementById("video");
const hlsUrl = video && video.dataset.hls;
if (hlsUrl) {
  if (window.Hls && window.Hls.isSupported()) {
    const hls = new window.Hls();
    hls.loadSource(hlsUrl);
    hls.attachMedia(video);
    video.dataset.player = "hls.js";
    window.vidforgeStream = hls;  // the page's player, for whoever inspects it
  } else if (video.canPlayType("application/vnd.apple.mpegurl")) {
    video.src = hlsUrl;
    video.dataset.player = "native";
  } else {
    video.dataset.player = "progressive";
  }
  const scrub = document.getElementById("scrub");
  const tile = document.getElementById("scrub-tile");
  const track = video.querySelector("track[kind=metadata]");
  if (scrub && tile && track) {
    track.track.mode = "hidden";  // its cues load, nothing is drawn on the video
    const tileAt = (seconds) => {
      for (const cue of track.track.cues || []) {
        if (cue.startTime <= seconds && seconds < cue.endTime) return cue.text;
      }
      return null;
    };
    const show = (seconds) => {
      const text = tileAt(seconds);
      if (!text) { tile.hidden = true; return; }
      const [sprite, fragment] = text.split("#xywh=");
      const [x, y, w, h] = fragment.split(",").map(Number);
      tile.style.backgroundImage = `url("${new URL(sprite, track.src).href}")`;
      tile.style.backgroundPosition = `-${x}px -${y}px`;
      tile.style.width = `${w}px`;
      tile.style.height = `${h}px`;
      tile.dataset.at = String(seconds);
      tile.hidden = false;
    };
    const pointed = (event) => {
      const box = scrub.getBoundingClientRect();
      return Math.min(Math.max((event.clientX - box.left) / box.width, 0), 1) * Number(scrub.max);
    };
    video.addEventListener("loadedmetadata", () => { scrub.max = String(video.duration); });
    video.addEventListener("timeupdate", () => { if (!scrub.matches(":active")) scrub.value = String(video.currentTime); });
    scrub.addEventListener("pointermove", (event) => show(pointed(event)));
    scrub.addEventListener("pointerleave", () => { tile.hidden = true; });
    scrub.addEventListener("input", () => {
      show(Number(scrub.value));
      video.currentTime = Number(scrub.value);
    });
  }
}
