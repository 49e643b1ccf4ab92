// A minimal MCP Apps host (the io.modelcontextprotocol/ui extension) for the test suite, built on the official pieces:
// the TypeScript SDK's client over Streamable HTTP (to the same origin's /mcp, with the bearer token from the page's
// query string: the token stays here, in the host) and ext-apps' AppBridge over PostMessageTransport (to the view, in a
// sandboxed iframe whose CSP the host builds from the resource's `_meta.ui.csp`, as real hosts do).
//
// The page's query string: `token` (required), `theme` (light | dark, default light), `negotiation` (`auto`: the
// 2026-07-28 handshake; default: the client's own, the 2025 `initialize`), `result` (`withheld`: the view gets the
// tool's input but never its result, as from a host that runs the call as a task and hands over its end only).
//
// window.host.callTool(name, args) calls the tool, shows its view (if the tool names one), hands it the input and the
// result, and resolves with the result; window.host.log records every tools/call the view made through the bridge.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  AppBridge,
  PostMessageTransport,
  RESOURCE_MIME_TYPE,
  getToolUiResourceUri,
  type McpUiHostContext,
} from "@modelcontextprotocol/ext-apps/app-bridge";

type Json = Record<string, unknown>;
type LogEntry = { name: string; arguments: Json; result?: unknown; error?: string; at: number };

const query = new URLSearchParams(location.search);
const token = query.get("token") ?? "";
const theme = query.get("theme") === "dark" ? "dark" : "light";
const HOST_INFO = { name: "vidforge-test-host", version: "1.0.0" };

const log: LogEntry[] = [];
const errors: string[] = [];
let client: Client | undefined;
let tools: Json[] | undefined;

async function connected(): Promise<Client> {
  if (client) return client;
  const c = new Client(HOST_INFO, {
    capabilities: { extensions: { "io.modelcontextprotocol/ui": { mimeTypes: [RESOURCE_MIME_TYPE] } } },
    ...(query.get("negotiation") === "auto" ? { versionNegotiation: { mode: "auto" } } : {}),
  } as ConstructorParameters<typeof Client>[1]);
  const transport = new StreamableHTTPClientTransport(new URL("/mcp", location.href), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await c.connect(transport);
  client = c;
  return c;
}

/** `c`, with every tools/call made through it recorded in `log`: the bridge forwards the view's calls to the server
 * through the client it is given (`client.request`), so handing it this records exactly the view's calls. */
function recording(c: Client): Client {
  return new Proxy(c, {
    get(target, prop) {
      if (prop === "request") {
        return async (request: { method: string; params?: Json }, ...rest: unknown[]) => {
          if (request.method !== "tools/call") return (target.request as Function).call(target, request, ...rest);
          const params = request.params ?? {};
          const entry: LogEntry = {
            name: String(params.name),
            arguments: (params.arguments ?? {}) as Json,
            at: Date.now(),
          };
          log.push(entry);
          try {
            entry.result = await (target.request as Function).call(target, request, ...rest);
            return entry.result;
          } catch (err) {
            entry.error = String(err);
            throw err;
          }
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

function cspOf(meta: unknown): string {
  const csp = (meta as { ui?: { csp?: { connectDomains?: string[]; resourceDomains?: string[] } } })?.ui?.csp ?? {};
  const resources = (csp.resourceDomains ?? []).join(" ");
  const connect = (csp.connectDomains ?? []).join(" ") || "'none'";
  return [
    "default-src 'none'",
    "script-src 'unsafe-inline'",
    "style-src 'unsafe-inline'",
    `img-src data: blob: ${resources}`.trim(),
    `media-src data: blob: ${resources}`.trim(),
    `connect-src ${connect}`,
  ].join("; ");
}

function withCsp(html: string, policy: string): string {
  const meta = `<meta http-equiv="Content-Security-Policy" content="${policy.replace(/"/g, "&quot;")}">`;
  if (/<head[^>]*>/i.test(html)) return html.replace(/<head[^>]*>/i, (head) => head + meta);
  return meta + html;
}

async function callTool(name: string, args: Json = {}): Promise<unknown> {
  const c = await connected();
  tools ??= (await c.listTools()).tools as unknown as Json[];
  const tool = tools.find((t) => t.name === name);
  const resultPromise = c.callTool({ name, arguments: args });
  const uri = tool ? getToolUiResourceUri(tool) : undefined;
  if (!uri) return resultPromise; // a tool without a view: nothing to show

  const read = await c.readResource({ uri });
  const content = read.contents[0] as Json & { text?: string; mimeType?: string; _meta?: Json };
  if (content.mimeType !== RESOURCE_MIME_TYPE || typeof content.text !== "string") {
    throw new Error(`resource ${uri} is not an MCP App (${String(content.mimeType)})`);
  }
  const csp = cspOf(content._meta);

  const iframe = document.createElement("iframe");
  iframe.className = "app-frame";
  iframe.title = `${name} view`;
  iframe.setAttribute("sandbox", "allow-scripts");
  iframe.srcdoc = withCsp(content.text, csp);
  iframe.dataset.csp = csp;
  document.getElementById("apps")!.append(iframe);

  const hostContext: McpUiHostContext = {
    theme,
    displayMode: "inline",
    availableDisplayModes: ["inline", "fullscreen"],
    platform: "web",
    locale: navigator.language,
    toolInfo: { tool: tool as never },
    styles: {
      variables: (theme === "dark"
        ? { "--color-background-primary": "#15171c", "--color-text-primary": "#f2f4f7" }
        : { "--color-background-primary": "#ffffff", "--color-text-primary": "#15171c" }) as never,
    },
  };
  const bridge = new AppBridge(recording(c), HOST_INFO, { serverTools: {}, openLinks: {}, logging: {} }, { hostContext });
  bridge.onsizechange = ({ height }) => {
    if (typeof height === "number" && !iframe.classList.contains("fullscreen")) iframe.style.height = `${height}px`;
  };
  bridge.onrequestdisplaymode = async ({ mode }) => {
    const granted = mode === "fullscreen" ? "fullscreen" : "inline";
    iframe.classList.toggle("fullscreen", granted === "fullscreen");
    bridge.sendHostContextChange({ displayMode: granted });
    return { mode: granted };
  };
  bridge.onloggingmessage = (params) => errors.push(`view log: ${JSON.stringify(params)}`);
  bridge.oninitialized = async () => {
    await bridge.sendToolInput({ arguments: args });
    if (query.get("result") === "withheld") return;
    try {
      await bridge.sendToolResult((await resultPromise) as never);
    } catch (err) {
      errors.push(`tool call failed: ${String(err)}`);
    }
  };

  await bridge.connect(new PostMessageTransport(iframe.contentWindow!, iframe.contentWindow!));
  views.push({ name, iframe, bridge });
  return resultPromise;
}

const views: { name: string; iframe: HTMLIFrameElement; bridge: AppBridge }[] = [];

(window as unknown as { host: unknown }).host = { callTool, log, errors, views };
