// One watermarked render through the official TypeScript SDK v2 client (@modelcontextprotocol/client).
//
// Usage: node render.mjs <mcp-url> <legacy|auto> <source-asset-uri> <watermark-asset-uri> [<import-url>]
// `legacy` leaves `versionNegotiation` unset, so the client runs with its defaults (the 2025 `initialize`
// handshake); `auto` probes with `server/discover` first. The client declares no tasks extension, so vidforge
// answers `status: "accepted"` and the script drives the documented fallback tools: poll
// vidforge_get_render_status, approve the watermark with vidforge_approve_watermark, poll to a terminal state.
// With an import URL, vidforge_import_asset runs first (without tasks it answers once the import has ended), and the
// asset it made is the render's source instead of <source-asset-uri>.
// Prints one JSON line describing what happened; tests/test_typescript_client.py asserts on it.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const DEADLINE_MS = 300_000;
const [url, mode, sourceUri, logoUri, importUrl] = process.argv.slice(2);
if (!['legacy', 'auto'].includes(mode) || !logoUri) {
    console.error('usage: node render.mjs <mcp-url> <legacy|auto> <source-asset-uri> <watermark-asset-uri> [<import-url>]');
    process.exit(2);
}

const client = new Client(
    { name: 'vidforge-ts-sdk-test', version: '1.0.0' },
    mode === 'auto' ? { versionNegotiation: { mode: 'auto' } } : undefined
);
await client.connect(new StreamableHTTPClientTransport(new URL(url)));

// A tool error (isError) is a failed step here: the script only walks the happy path.
async function call(name, args) {
    const result = await client.callTool({ name, arguments: args });
    if (result.isError) throw new Error(`${name} failed: ${JSON.stringify(result.structuredContent ?? result.content)}`);
    return result.structuredContent;
}

async function pollStatus(renderId, done) {
    const deadline = Date.now() + DEADLINE_MS;
    const seen = [];
    for (;;) {
        const status = await call('vidforge_get_render_status', { render_id: renderId });
        if (seen.at(-1) !== status.state) seen.push(status.state);
        if (done(status)) return { status, seen };
        if (Date.now() > deadline) throw new Error(`render ${renderId} stuck; states seen: ${seen.join(' > ')}`);
        await new Promise(resolve => setTimeout(resolve, Math.max(status.poll_after_ms ?? 0, 200)));
    }
}

const { tools } = await client.listTools();
const imported = importUrl ? await call('vidforge_import_asset', { url: importUrl }) : undefined;
const accepted = await call('vidforge_render_video', {
    source_asset_uri: imported?.asset_uri ?? sourceUri,
    output_format: 'mp4',
    resolution: '720p',
    watermark: { image_asset_uri: logoUri, position: 'bottom_right', opacity: 0.6 }
});
const renderId = accepted.render_id;
const waiting = await pollStatus(renderId, s => s.state === 'awaiting_watermark_approval' || s.terminal);
const approval = await call('vidforge_approve_watermark', { render_id: renderId, approved: true });
const done = await pollStatus(renderId, s => s.terminal);
// The finished status again, whole: the quality check's contact sheet rides as an `image` block.
const answered = await client.callTool({ name: 'vidforge_get_render_status', arguments: { render_id: renderId } });
const images = answered.content.filter(block => block.type === 'image').map(({ mimeType, data }) => ({ mimeType, data }));

console.log(
    JSON.stringify({
        era: client.getProtocolEra(),
        protocolVersion: client.getNegotiatedProtocolVersion(),
        serverName: client.getServerVersion()?.name,
        tools: tools.map(tool => tool.name),
        imported,
        accepted,
        approval,
        states: [...waiting.seen, ...done.seen],
        final: done.status,
        images
    })
);
await client.close();
