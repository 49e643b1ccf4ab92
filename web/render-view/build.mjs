// Builds the render view into ONE self-contained HTML document (script and styles inlined, hls.js bundled in, nothing
// loaded from the network): `make app-view` runs it and writes mcp_protocol/app_view/render.html.
import { readFile, readdir, writeFile, mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const [out, licensesOut] = process.argv.slice(2);
if (!out || !licensesOut) throw new Error("usage: node render-view/build.mjs OUTPUT.html THIRD_PARTY_LICENSES.txt");

const script = await esbuild.build({
  entryPoints: [join(here, "main.ts")],
  bundle: true,
  minify: true,
  format: "iife",
  platform: "browser",
  target: ["es2020"],
  legalComments: "none", // the notices go to THIRD_PARTY_LICENSES.txt beside the document
  define: { "process.env.NODE_ENV": '"production"' },
  write: false,
  metafile: true,
});
const style = await esbuild.build({
  entryPoints: [join(here, "style.css")],
  bundle: true,
  minify: true,
  loader: { ".css": "css" },
  write: false,
});

// Inlined in <script>: a "</script" or "<!--" in the code would end or change the element early.
const js = script.outputFiles[0].text.replace(/<\/(script)/gi, "<\\/$1").replace(/<!--/g, "<\\!--");
const css = style.outputFiles[0].text.replace(/<\/(style)/gi, "<\\/$1");
const template = await readFile(join(here, "render.html"), "utf8");
if (!template.includes("/*__SCRIPT__*/") || !template.includes("/*__STYLE__*/")) throw new Error("template placeholders missing");
const html = template.replace("/*__STYLE__*/", () => css).replace("/*__SCRIPT__*/", () => js);
// The document's own markup and styles load nothing from elsewhere (the script's only requests are to the links the
// status tool gives it).
const outside = (template + css).match(/<script[^>]*\ssrc=|<link[^>]*\shref=|@import|url\(\s*["']?(https?:)?\/\//i);
if (outside) throw new Error(`the view must load nothing from outside: ${outside[0]}`);
await mkdir(dirname(out), { recursive: true });
await writeFile(out, html);

// The licence notices of every third-party package whose code the bundle holds (esbuild's metafile says which).
const packages = new Set();
const [bundled] = Object.values(script.metafile.outputs);
for (const [input, { bytesInOutput }] of Object.entries(bundled.inputs)) {
  if (bytesInOutput === 0) continue; // imported, but none of it kept
  const m = input.match(/^(.*?node_modules\/(?:@[^/]+\/)?[^/]+)\//);
  if (m) packages.add(m[1]);
}
const notices = [
  "Third-party code bundled into render.html (built from web/render-view/ by `make app-view`), with its licence notices.",
  "",
];
for (const dir of [...packages].sort()) {
  const meta = JSON.parse(await readFile(join(dir, "package.json"), "utf8"));
  const files = (await readdir(dir)).filter((name) => /^(licen[cs]e|copying|notice)/i.test(name)).sort();
  notices.push("=".repeat(100), `${meta.name} ${meta.version} (${meta.license ?? "see below"})`, "=".repeat(100), "");
  if (files.length === 0) throw new Error(`${meta.name}: no licence file to copy`);
  for (const name of files) notices.push((await readFile(join(dir, name), "utf8")).trimEnd(), "");
}
await writeFile(licensesOut, notices.join("\n"));
console.log(`wrote ${out} (${html.length} bytes)`);
