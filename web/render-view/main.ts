// vidforge's render view: an MCP App (io.modelcontextprotocol/ui) that follows a render, asks for the watermark's
// approval, and plays the finished video. Every caller-provided string goes in through textContent or an attribute;
// the view talks to vidforge only through the host's bridge, and loads nothing but the links the status tool gives.
// This module connects to the host and routes its notifications; the work is in the modules it imports.
import { ui, announce, show } from "./dom"; // first: the element lookups run before anything else
import {
  PostMessageTransport,
  applyDocumentTheme,
  applyHostStyleVariables,
  type McpUiHostContext,
} from "@modelcontextprotocol/ext-apps";
import { INSPECT_TOOL, RENDER_TOOL, STATUS_TOOL, app, isObject, str, type ToolResult } from "./bridge";
import "./decision"; // wires the Approve and Reject buttons
import { clearError, errorMessage, showError, toolErrorText } from "./errors";
import { applyStatus, poll, showInspection, stopPolling } from "./follow";
import { state } from "./state";

// How long after the tool's input the view waits for its result before it looks the render up itself.
const RESULT_GRACE_MS = 3000;

// --- the host ---------------------------------------------------------------------------------------------------

function applyHostContext(ctx: McpUiHostContext | undefined): void {
  if (!ctx) return;
  if (ctx.theme === "light" || ctx.theme === "dark") {
    applyDocumentTheme(ctx.theme);
    document.documentElement.dataset.theme = ctx.theme;
  }
  const variables = ctx.styles?.variables;
  if (variables) applyHostStyleVariables(variables);
  const name = ctx.toolInfo?.tool?.name;
  if (name) state.toolName = name;
  updateDisplayModeButton(ctx);
}

function updateDisplayModeButton(ctx: McpUiHostContext): void {
  if (ctx.displayMode) state.displayMode = ctx.displayMode;
  const modes = ctx.availableDisplayModes ?? app.getHostContext()?.availableDisplayModes ?? [];
  const canToggle = modes.includes("fullscreen") && modes.includes("inline");
  show(ui.displayMode, canToggle);
  ui.displayMode.textContent = state.displayMode === "fullscreen" ? "Back to inline" : "Full screen";
}

ui.displayMode.addEventListener("click", async () => {
  const wanted = state.displayMode === "fullscreen" ? "inline" : "fullscreen";
  try {
    const answer = await app.requestDisplayMode({ mode: wanted });
    state.displayMode = answer.mode;
    ui.displayMode.textContent = state.displayMode === "fullscreen" ? "Back to inline" : "Full screen";
  } catch (err) {
    showError(`The host did not change the display mode: ${errorMessage(err)}`);
  }
});

app.onhostcontextchanged = (ctx) => applyHostContext({ ...app.getHostContext(), ...ctx });

app.ontoolinput = (params) => {
  state.toolArgs = isObject(params.arguments) ? params.arguments : {};
  if (!state.toolName) state.toolName = app.getHostContext()?.toolInfo?.tool?.name;
  const { toolName, toolArgs } = state;
  if (toolName === INSPECT_TOOL || (!toolName && str(toolArgs.uri) && !str(toolArgs.render_id))) {
    announce("Inspecting the video…");
  } else if (toolName === STATUS_TOOL || (!toolName && str(toolArgs.render_id))) {
    announce("Getting the render's status…");
  } else {
    announce("Starting the render…");
    state.findTimer = window.setTimeout(() => void findRender(), RESULT_GRACE_MS);
  }
};

// A host that runs the render as a task (MCP Inspector does) hands the view the tool's result only when the task
// has ended. With an idempotency key the same call answers the render that is already running, not a new one (the
// tool's contract), so the view asks it and follows the render from there; without one it says what it waits for.
async function findRender(): Promise<void> {
  if (state.renderId) return;
  if (str(state.toolArgs.idempotency_key)) {
    try {
      const result = (await app.callServerTool({ name: RENDER_TOOL, arguments: state.toolArgs })) as ToolResult;
      if (!state.renderId) handleToolResult(result);
      return;
    } catch {
      // The host runs this call as a task too, which its bridge cannot hand back (MCP Inspector 2.12): wait for it.
    }
  }
  announce("Waiting for the host to hand over the render: it shows here once the host has its result.");
}

app.ontoolresult = (params) => handleToolResult(params as ToolResult);

app.ontoolcancelled = (params) => {
  stopPolling();
  announce("The tool call was cancelled");
  if (params.reason) ui.statusMessage.textContent = params.reason;
};

app.onteardown = async () => {
  stopPolling();
  state.hls?.destroy();
  return {};
};

function handleToolResult(result: ToolResult): void {
  window.clearTimeout(state.findTimer);
  if (!state.toolName) state.toolName = app.getHostContext()?.toolInfo?.tool?.name;
  clearError();
  if (result.isError) {
    announce("The tool call failed");
    showError(toolErrorText(result));
    return;
  }
  const { toolName, toolArgs } = state;
  const sc = isObject(result.structuredContent) ? result.structuredContent : undefined;
  const inspecting = toolName === INSPECT_TOOL || (!toolName && str(toolArgs.uri) !== undefined && !sc?.render_id);
  if (inspecting) {
    showInspection(sc, result);
    return;
  }
  const task = isObject(result.task) ? result.task : undefined;
  const id = str(sc?.render_id) ?? str(result.taskId) ?? str(task?.taskId) ?? str(toolArgs.render_id);
  if (!id) {
    if (sc) {
      showInspection(sc, result);
    } else {
      announce("Nothing to show");
      showError("The tool's result names no render to follow.");
    }
    return;
  }
  state.renderId = id;
  ui.title.textContent = `Render ${id}`;
  if (sc && typeof sc.state === "string" && typeof sc.terminal === "boolean") {
    // A status result already: show it, then keep following.
    applyStatus(result);
  } else {
    announce("Render accepted: following it…");
    void poll();
  }
}

// --- start ------------------------------------------------------------------------------------------------------

app
  .connect(new PostMessageTransport(window.parent, window.parent))
  .then(() => applyHostContext(app.getHostContext()))
  .catch((err) => {
    announce("Could not connect to the host");
    showError(`Could not connect to the host: ${errorMessage(err)}`);
  });
