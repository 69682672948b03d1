// A client in another language for TestMCP_NodeClient: the official MCP
// TypeScript SDK over streamable HTTP, with a Bearer key. It lists the
// tools, submits one target, reads the job's status, and prints one JSON
// line: {"tools":[…],"id":"…","status":"…","targets_total":N}.
// Usage: node client.mjs MCP_URL KEY TARGET_URL
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [endpoint, key, target] = process.argv.slice(2);
if (!endpoint || !key || !target) {
  console.error("usage: node client.mjs MCP_URL KEY TARGET_URL");
  process.exit(2);
}

const transport = new StreamableHTTPClientTransport(new URL(endpoint), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
const client = new Client({ name: "siftbatch-node-test", version: "1.0.0" });
await client.connect(transport);

const { tools } = await client.listTools();
for (const t of tools) {
  if (!t.description || t.inputSchema?.type !== "object") {
    throw new Error(`tool ${t.name} lacks a description or an object input schema`);
  }
}

const submitted = await client.callTool({ name: "batch_submit", arguments: { targets: [{ url: target }] } });
if (submitted.isError) throw new Error(`batch_submit: ${JSON.stringify(submitted.content)}`);
const { id } = submitted.structuredContent;

const status = await client.callTool({ name: "batch_status", arguments: { id } });
if (status.isError) throw new Error(`batch_status: ${JSON.stringify(status.content)}`);

console.log(JSON.stringify({
  tools: tools.map((t) => t.name),
  id,
  status: status.structuredContent.status,
  targets_total: status.structuredContent.targets_total,
}));
await client.close();
