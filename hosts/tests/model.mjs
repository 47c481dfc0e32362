// A scripted model API on 127.0.0.1 for driving the real agent hosts offline: Anthropic's
// Messages API (Claude Code, `ANTHROPIC_BASE_URL`), OpenAI's Responses API (Codex, a custom
// provider) and OpenAI's Chat Completions API (opencode, an `@ai-sdk/openai-compatible`
// provider). Every main-loop request (one that offers tools) takes the next step of the script;
// a step is a tool call or a final text. Side requests (titles, summaries) get a short text.
// Every request is kept in `requests` so a test can read what the host sent back (tool results).

import http from "node:http";

/**
 * Starts the server. `script` is an array of steps, each `{ tool, input }` (a tool call; with
 * `namespace` too for a tool of a Responses `namespace`, as Codex offers an MCP server's),
 * `{ text }` (the turn's final answer) or `{ hold: true }` (no answer at all: the host waits),
 * or a function `(request) => step` for steps that depend on the previous tool result. Returns `{ url, requests, results, close, waitFor }`.
 */
export async function startModel(script) {
  const requests = [];
  const held = [];
  let step = 0;
  let seq = 0;
  const next = (body) => {
    const s = step < script.length ? script[step++] : { text: "done" };
    return typeof s === "function" ? s(body) : s;
  };
  const server = http.createServer((req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      let body = {};
      try {
        body = JSON.parse(raw || "{}");
      } catch {}
      requests.push({ url: req.url, body });
      const main = Array.isArray(body.tools) && body.tools.length > 0 && !req.url.includes("count_tokens");
      if (main) {
        const s = next(body);
        if (s.hold) {
          // Never answered: the host waits mid-turn (for a test that kills it there).
          held.push(res);
          return;
        }
        if (req.url.startsWith("/v1/messages")) anthropic(res, s, ++seq, body.stream !== false);
        else if (req.url.endsWith("/chat/completions")) chat(res, s, ++seq);
        else responses(res, s, ++seq);
      } else if (req.url.startsWith("/v1/messages") && !req.url.includes("count_tokens")) {
        anthropic(res, { text: "ok" }, ++seq, body.stream !== false);
      } else if (req.url.includes("count_tokens")) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ input_tokens: 10 }));
      } else if (req.url.endsWith("/chat/completions")) {
        chat(res, { text: "ok" }, ++seq);
      } else if (req.url.endsWith("/responses")) {
        responses(res, { text: "ok" }, ++seq);
      } else {
        res.writeHead(404, { "content-type": "application/json" });
        res.end("{}");
      }
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    requests,
    /** The text of every tool result the host sent, in order (both APIs). */
    results() {
      return toolResults(requests);
    },
    /** The number of script steps taken. */
    get step() {
      return step;
    },
    close: () => {
      for (const r of held) r.destroy();
      server.closeAllConnections?.();
      return new Promise((r) => server.close(r));
    },
  };
}

/**
 * Tool results in the requests: Anthropic `tool_result` blocks, Responses `function_call_output`,
 * Chat Completions `role: "tool"` messages.
 */
export function toolResults(requests) {
  const seen = new Map();
  for (const { body } of requests) {
    for (const m of body.messages || []) {
      if (m.role === "tool") {
        const text = typeof m.content === "string" ? m.content : (m.content || []).map((c) => c.text || "").join("");
        seen.set(m.tool_call_id, { id: m.tool_call_id, text, isError: false });
        continue;
      }
      for (const b of Array.isArray(m.content) ? m.content : []) {
        if (b.type === "tool_result") {
          const text = typeof b.content === "string" ? b.content : (b.content || []).map((c) => c.text || "").join("");
          seen.set(b.tool_use_id, { id: b.tool_use_id, text, isError: !!b.is_error });
        }
      }
    }
    for (const item of Array.isArray(body.input) ? body.input : []) {
      if (item.type === "function_call_output" || item.type === "custom_tool_call_output") {
        const o = item.output;
        const text = typeof o === "string" ? o : o?.content ?? JSON.stringify(o);
        seen.set(item.call_id, { id: item.call_id, text, isError: false });
      }
    }
  }
  return [...seen.values()];
}

function sse(res, events) {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  for (const [event, data] of events) res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  res.end();
}

function anthropic(res, s, n, stream) {
  const usage = { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
  const block = s.tool
    ? { type: "tool_use", id: `toolu_${n}`, name: s.tool, input: s.input }
    : { type: "text", text: s.text };
  const stop = s.tool ? "tool_use" : "end_turn";
  const message = { id: `msg_${n}`, type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage };
  if (!stream) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ ...message, content: [block], stop_reason: stop }));
    return;
  }
  const start = s.tool ? { ...block, input: {} } : { type: "text", text: "" };
  const delta = s.tool
    ? { type: "input_json_delta", partial_json: JSON.stringify(s.input) }
    : { type: "text_delta", text: s.text };
  sse(res, [
    ["message_start", { type: "message_start", message }],
    ["content_block_start", { type: "content_block_start", index: 0, content_block: start }],
    ["content_block_delta", { type: "content_block_delta", index: 0, delta }],
    ["content_block_stop", { type: "content_block_stop", index: 0 }],
    ["message_delta", { type: "message_delta", delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: 5 } }],
    ["message_stop", { type: "message_stop" }],
  ]);
}

function responses(res, s, n) {
  const id = `resp_${n}`;
  const item = s.tool
    ? { type: "function_call", id: `fc_${n}`, call_id: `call_${n}`, name: s.tool, ...(s.namespace ? { namespace: s.namespace } : {}), arguments: JSON.stringify(s.input), status: "completed" }
    : { type: "message", id: `m_${n}`, role: "assistant", status: "completed", content: [{ type: "output_text", text: s.text, annotations: [] }] };
  const usage = { input_tokens: 10, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 15 };
  const events = [
    ["response.created", { type: "response.created", response: { id, object: "response", status: "in_progress", output: [] } }],
    ["response.output_item.added", { type: "response.output_item.added", output_index: 0, item }],
    ["response.output_item.done", { type: "response.output_item.done", output_index: 0, item }],
    ["response.completed", { type: "response.completed", response: { id, object: "response", status: "completed", output: [item], usage } }],
  ];
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  for (const [event, data] of events) res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  res.end();
}

/** A Chat Completions stream: one tool call (`finish_reason: "tool_calls"`) or one text. */
function chat(res, s, n) {
  const id = `chatcmpl_${n}`;
  const chunk = (choices, extra = {}) => `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created: 0, model: "scripted", choices, ...extra })}\n\n`;
  const delta = s.tool
    ? { role: "assistant", tool_calls: [{ index: 0, id: `call_${n}`, type: "function", function: { name: s.tool, arguments: JSON.stringify(s.input) } }] }
    : { role: "assistant", content: s.text };
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  res.write(chunk([{ index: 0, delta, finish_reason: null }]));
  res.write(chunk([{ index: 0, delta: {}, finish_reason: s.tool ? "tool_calls" : "stop" }]));
  res.write(chunk([], { usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } }));
  res.end("data: [DONE]\n\n");
}
