// A minimal MCP Apps host, as a chat client that renders MCP Apps would be: it connects to the
// server (through the test's proxy at /mcp, which adds the agent's Bearer key) declaring the
// io.modelcontextprotocol/ui extension, shows the model only the tools meant for it, calls
// ask_user_questions as the model would, and renders the tool's ui:// resource in a sandboxed
// iframe (opaque origin, the spec's restrictive CSP) through the ext-apps AppBridge, which
// forwards the app's tools/call to the server. window.host is what the test reads.
//
// Query: era=legacy|modern (the initialize handshake, or 2026-07-28 pinned), questions=<JSON>,
// hold=1 (keep the call's result from the app until window.host.release() is called).
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  AppBridge, PostMessageTransport, RESOURCE_MIME_TYPE, getToolUiResourceUri, isToolVisibilityAppOnly,
} from "@modelcontextprotocol/ext-apps/app-bridge";

const params = new URLSearchParams(location.search);
const questions = JSON.parse(params.get("questions"));
const host = (window.host = { state: "starting", appCalls: [], refused: [], result: null, error: null });
const stateLine = document.getElementById("state");
const setState = (state) => { host.state = state; stateLine.textContent = state; };
const CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
  + "media-src data:; connect-src 'none'; frame-src 'none'; object-src 'none'; base-uri 'none'";

async function main() {
  const info = { name: "askcards-test-host", version: "1" };
  const client = new Client(info, {
    capabilities: { extensions: { "io.modelcontextprotocol/ui": { mimeTypes: [RESOURCE_MIME_TYPE] } } },
    ...(params.get("era") === "modern" ? { versionNegotiation: { mode: { pin: "2026-07-28" } } } : {}),
  });
  await client.connect(new StreamableHTTPClientTransport(new URL("/mcp", location.href)));
  const { tools } = await client.listTools();
  const byName = new Map(tools.map((tool) => [tool.name, tool]));
  host.modelTools = tools.filter((tool) => !isToolVisibilityAppOnly(tool)).map((tool) => tool.name);
  host.allTools = tools.map((tool) => tool.name);

  const uri = getToolUiResourceUri(byName.get("ask_user_questions"));
  host.uri = uri;
  const [resource] = (await client.readResource({ uri })).contents;
  host.mimeType = resource.mimeType;
  const html = resource.text.replace("<head>", `<head><meta http-equiv="Content-Security-Policy" content="${CSP}">`);

  const iframe = document.getElementById("app");
  const bridge = new AppBridge(client, info, { serverTools: {}, serverResources: {}, logging: {} });
  const initialized = new Promise((resolve) => { bridge.oninitialized = resolve; });
  bridge.onsizechange = ({ height }) => { if (height) iframe.style.height = `${Math.ceil(height) + 4}px`; };
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  // The host's rule: an app may call only tools whose visibility includes "app".
  bridge.oncalltool = async (call) => {
    const tool = byName.get(call.name);
    const visibility = (tool && tool._meta && tool._meta.ui && tool._meta.ui.visibility) || ["model", "app"];
    if (!tool || !visibility.includes("app")) {
      host.refused.push(call.name);
      throw new Error(`${call.name} is not callable from the app`);
    }
    host.appCalls.push(call.name);
    return client.callTool(call);
  };
  iframe.srcdoc = html;

  // The model's call: it blocks until the ask ends (progress keeps the client's timer alive).
  const call = client.callTool(
    { name: "ask_user_questions", arguments: { questions } },
    { onprogress: () => {}, resetTimeoutOnProgress: true, timeout: 120000 },
  );
  await initialized;
  await bridge.sendToolInput({ arguments: { questions } });
  setState("shown");
  const result = await call;
  host.result = result;
  setState("returned");
  if (params.get("hold") === "1") await new Promise((resolve) => { host.release = resolve; });
  await bridge.sendToolResult(result);
  setState("result sent");
}

main().catch((error) => {
  host.error = String((error && error.stack) || error);
  setState("failed");
});
