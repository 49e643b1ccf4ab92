// Following a render: polls the status tool and shows each status (progress, approval, outcome, the result).
import { QC_META, STATUS_TOOL, VIEW_META, app, isObject, num, str } from "./bridge";
import type { Json, Links, ToolResult } from "./bridge";
import { announce, factText, fillFacts, formatBytes, formatDuration, setImage, show, ui } from "./dom";
import { clearError, errorMessage, showError, toolErrorText } from "./errors";
import { playVideo } from "./player";
import { state } from "./state";

const MIN_POLL_MS = 200;
const DEFAULT_POLL_MS = 1000;

const PHASES: Record<string, string> = {
  queued: "Queued",
  probing: "Reading the source",
  rendering: "Rendering",
  muxing: "Writing the file",
  done: "Done",
};
const STATES: Record<string, string> = {
  queued: "Queued: waiting for a worker",
  rendering: "Rendering",
  awaiting_watermark_approval: "Waiting for your approval of the watermark",
  succeeded: "Finished",
  failed: "Failed",
  cancelled: "Cancelled",
};

export function stopPolling(): void {
  if (state.pollTimer !== undefined) window.clearTimeout(state.pollTimer);
  state.pollTimer = undefined;
}

function schedule(ms: number): void {
  if (state.pollTimer !== undefined) window.clearTimeout(state.pollTimer);
  state.pollTimer = window.setTimeout(() => {
    state.pollTimer = undefined;
    void poll();
  }, Math.max(MIN_POLL_MS, ms));
}

export async function poll(): Promise<void> {
  if (!state.renderId || state.polling) return;
  state.polling = true;
  try {
    const result = (await app.callServerTool({
      name: STATUS_TOOL,
      arguments: { render_id: state.renderId },
    })) as ToolResult;
    if (result.isError) {
      showError(`Could not get the render's status: ${toolErrorText(result)}`, "Try again");
      return;
    }
    applyStatus(result);
  } catch (err) {
    showError(`Could not reach vidforge through the host: ${errorMessage(err)}`, "Try again");
  } finally {
    state.polling = false;
  }
}

/** How the view ended up not playing a video: `text`, shown as bad news. */
function showOutcome(text: string): void {
  ui.outcome.textContent = text;
  ui.outcome.className = "bad";
  show(ui.outcome, true);
}

/** A rejected watermark, with the person's note when there is one. */
export function showRejected(note: string | undefined): void {
  showOutcome(note ? `Rejected. Note: ${note}` : "Rejected.");
}

/** A decision recorded, while the render has not yet moved on from it. */
export function announceDecision(approved: boolean): void {
  announce(approved ? "Approved: the render continues" : "Rejected: stopping the render");
}

export function applyStatus(result: ToolResult): void {
  const sc = (result.structuredContent ?? {}) as Json;
  const meta = isObject(result._meta) ? result._meta : {};
  const view = isObject(meta[VIEW_META]) ? (meta[VIEW_META] as Json) : {};
  const links: Links = isObject(view.links) ? (view.links as Links) : {};
  const figures = isObject(view.progress) ? (view.progress as Json) : {};
  const renderState = str(sc.state) ?? "unknown";
  const terminal = sc.terminal === true;
  // A failed link of the previous state is no longer shown.
  if (renderState !== state.shownState) state.linkFailed = false;
  state.shownState = renderState;
  if (!state.linkFailed) clearError();

  ui.statusMessage.textContent = str(sc.status_message) ?? "";

  // Progress, while it is running.
  const running = !terminal && renderState !== "awaiting_watermark_approval";
  show(ui.progressPanel, running);
  if (running) {
    let percent = num(figures.percent);
    if (percent === undefined && num(sc.progress) !== undefined) percent = Math.round(num(sc.progress)! * 100);
    if (percent === undefined) {
      ui.progress.removeAttribute("value");
      ui.percent.textContent = "";
    } else {
      ui.progress.value = Math.max(0, Math.min(100, percent));
      ui.percent.textContent = `${Math.round(percent)} %`;
    }
    const phase = str(figures.phase);
    ui.phase.textContent = phase ? (PHASES[phase] ?? phase) : (STATES[renderState] ?? renderState);
    const fps = num(figures.fps);
    ui.fps.textContent = fps !== undefined ? `${fps.toFixed(1)} frames/s` : "—";
    const eta = num(figures.eta_s);
    ui.eta.textContent = eta !== undefined ? formatDuration(eta) : "—";
  }

  // The approval.
  const awaiting = renderState === "awaiting_watermark_approval";
  show(ui.approval, awaiting);
  if (awaiting) {
    setImage(ui.preview, links.preview);
    setImage(ui.sourceFrame, links.source_frame);
    const pending = state.decision !== undefined;
    ui.approve.disabled = pending;
    ui.reject.disabled = pending;
  }

  // The outcome.
  const decision = state.decision;
  const errorInfo = isObject(sc.error) ? sc.error : undefined;
  const rejected =
    (renderState === "cancelled" || renderState === "failed") &&
    (decision?.approved === false || str(errorInfo?.code) === "watermark_rejected");
  if (renderState === "succeeded") {
    announce(STATES.succeeded);
    showResult(sc, links, isObject(meta[QC_META]) ? (meta[QC_META] as Json) : undefined);
  } else if (rejected) {
    announce("Rejected: the watermark was not approved, so the render stopped");
    showRejected(decision?.note ?? str(errorInfo?.note) ?? str(errorInfo?.reason));
  } else if (renderState === "failed" || renderState === "cancelled") {
    announce(STATES[renderState]);
    const why = str(errorInfo?.message);
    showOutcome(why ? `${STATES[renderState]}: ${why}` : `${STATES[renderState]}.`);
  } else if (awaiting && decision) {
    announceDecision(decision.approved);
  } else {
    announce(STATES[renderState] ?? renderState);
  }

  state.freshLinksWanted = false;
  if (terminal) {
    stopPolling();
  } else {
    schedule(num(sc.poll_after_ms) ?? DEFAULT_POLL_MS);
  }
}

function showResult(sc: Json, links: Links, qc: Json | undefined): void {
  show(ui.result, true);
  const facts: [string, unknown][] = [];
  const duration = num(sc.duration_seconds);
  if (duration !== undefined) facts.push(["Duration", formatDuration(duration)]);
  const size = num(sc.size_bytes);
  if (size !== undefined) facts.push(["Size", formatBytes(size)]);
  if (sc.resolution !== undefined) facts.push(["Resolution", sc.resolution]);
  if (sc.watermark_applied !== undefined) facts.push(["Watermark applied", sc.watermark_applied]);
  if (str(sc.video_uri)) facts.push(["Video", sc.video_uri]);
  fillFacts(ui.facts, facts);
  show(ui.facts, facts.length > 0);

  if (links.download) {
    ui.download.href = links.download;
    show(ui.download, true);
  } else {
    ui.download.removeAttribute("href");
    show(ui.download, false);
  }

  playVideo(links);

  if (qc) {
    const verdict = str(qc.verdict) ?? "unknown";
    ui.qcVerdict.textContent = `Verdict: ${verdict}`;
    ui.qcVerdict.className = verdict;
    const reasons = Array.isArray(qc.reasons) ? qc.reasons : [];
    ui.qcReasons.replaceChildren(
      ...reasons.map((reason) => {
        const li = document.createElement("li");
        li.textContent = factText(reason);
        return li;
      }),
    );
    setImage(ui.contactSheet, links.contact_sheet);
    show(ui.contactSheet, Boolean(links.contact_sheet));
    show(ui.qc, true);
  } else {
    show(ui.qc, false);
  }
}

/** An inspection's result (or any result that names no render): its facts as a list. */
export function showInspection(sc: Json | undefined, result: ToolResult): void {
  ui.title.textContent = "Video facts";
  announce("Video facts");
  if (!sc) {
    showError(toolErrorText(result));
    return;
  }
  fillFacts(ui.facts, Object.entries(sc));
  show(ui.facts, true);
}

// "Get fresh links" / "Try again": a new status brings newly signed links, which then replace the failed ones.
ui.retry.addEventListener("click", () => {
  state.linkFailed = false;
  state.freshLinksWanted = true;
  clearError();
  void poll();
});
