// A scripted Gemini API (generativelanguage `v1beta`) on 127.0.0.1 for driving the real Gemini
// CLI offline, through its base-URL override (`GOOGLE_GEMINI_BASE_URL`, with `GEMINI_API_KEY`).
// The same script as model.mjs: every main-loop request (one that offers function
// declarations) takes the next step, a tool call (`functionCall`) or a final text; side requests
// (the next-speaker check, routing, summaries) get a short answer, JSON where JSON is asked for.
// The CLI calls `models/M:streamGenerateContent?alt=sse` (server-sent events, one chunk here)
// and `models/M:generateContent`; `countTokens` gets a count. Every request is kept in
// `requests` so a test can read the tool results the host sent back (`functionResponse`).

import http from "node:http";

/**
 * Starts the server. `script` is an array of steps, each `{ tool, input }` (a function call),
 * `{ text }` (the turn's final answer) or `{ hold: true }` (no answer at all: the host waits),
 * or a function `(request body) => step`. Returns `{ url, requests, results, step, close }`.
 */
export async function startGeminiModel(script) {
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
      requests.push({ url: req.url, body, t: Date.now() });
      if (req.url.includes(":countTokens")) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ totalTokens: 10 }));
        return;
      }
      const generate = req.url.includes(":generateContent") || req.url.includes(":streamGenerateContent");
      if (!generate) {
        res.writeHead(404, { "content-type": "application/json" });
        res.end("{}");
        return;
      }
      const stream = req.url.includes(":streamGenerateContent");
      const main = (body.tools || []).some((t) => (t.functionDeclarations || []).length > 0);
      let s;
      if (main) {
        s = next(body);
        if (s.hold) {
          // Never answered: the host waits mid-turn (for a test that kills it there).
          held.push(res);
          return;
        }
      } else {
        s = { text: sideAnswer(body) };
      }
      answer(res, s, ++seq, stream);
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    requests,
    /** The text of every tool result the host sent, in order. */
    results() {
      return geminiToolResults(requests);
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

/** A side request's answer: JSON where the request asks for JSON (the next-speaker check). */
function sideAnswer(body) {
  const config = body.generationConfig || {};
  if (config.responseMimeType === "application/json") {
    const props = config.responseJsonSchema?.properties || config.responseSchema?.properties || {};
    if ("next_speaker" in props) return JSON.stringify({ reasoning: "done", next_speaker: "user" });
    if ("model_choice" in props) return JSON.stringify({ reasoning: "simple", model_choice: "flash" });
    return "{}";
  }
  return "ok";
}

/** Tool results in the requests: `functionResponse` parts, each `{ id, name, text }`. */
export function geminiToolResults(requests) {
  const seen = new Map();
  for (const { body } of requests) {
    for (const c of body.contents || []) {
      for (const p of c.parts || []) {
        const f = p.functionResponse;
        if (!f) continue;
        const o = f.response?.output ?? f.response?.error ?? f.response;
        const text = typeof o === "string" ? o : JSON.stringify(o);
        seen.set(f.id || `${f.name}:${seen.size}`, { id: f.id, name: f.name, text });
      }
    }
  }
  return [...seen.values()];
}

function answer(res, s, n, stream) {
  const part = s.tool ? { functionCall: { id: `call_${n}`, name: s.tool, args: s.input } } : { text: s.text };
  const chunk = {
    candidates: [{ content: { role: "model", parts: [part] }, finishReason: "STOP", index: 0 }],
    usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 5, totalTokenCount: 15 },
    modelVersion: "gemini-2.5-flash",
    responseId: `resp_${n}`,
  };
  if (!stream) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(chunk));
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  res.write(`data: ${JSON.stringify(chunk)}\r\n\r\n`);
  res.end();
}
