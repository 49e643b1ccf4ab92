// The watermark decision: Approve or Reject (with an optional note) through the approve tool, then follow on.
import { APPROVE_TOOL, app, type Json, type ToolResult } from "./bridge";
import { announce, show, ui } from "./dom";
import { clearError, errorMessage, showError, toolErrorText } from "./errors";
import { announceDecision, poll, showRejected } from "./follow";
import { state } from "./state";

async function decide(approved: boolean): Promise<void> {
  if (!state.renderId) return;
  const note = ui.note.value.trim();
  const args: Json = { render_id: state.renderId, approved };
  if (!approved && note) args.note = note;
  ui.approve.disabled = true;
  ui.reject.disabled = true;
  announce(approved ? "Sending your approval…" : "Sending your rejection…");
  try {
    const result = (await app.callServerTool({ name: APPROVE_TOOL, arguments: args })) as ToolResult;
    if (result.isError) {
      notRecorded(toolErrorText(result));
      return;
    }
    state.decision = { approved, note: !approved && note ? note : undefined };
    clearError();
    announceDecision(approved);
    if (!approved) showRejected(note || undefined);
    show(ui.approval, false);
    await poll();
  } catch (err) {
    notRecorded(errorMessage(err));
  }
}

/** The decision did not reach the server (`why`): the buttons work again, and the view says why. */
function notRecorded(why: string): void {
  ui.approve.disabled = false;
  ui.reject.disabled = false;
  announce("Your decision was not recorded");
  showError(`Your decision was not recorded: ${why}`);
}

ui.approve.addEventListener("click", () => void decide(true));
ui.reject.addEventListener("click", () => void decide(false));
