// tests/openai_client.js — OpenAI's official Node.js client (the `openai` npm package) driving an
// OpenAI-compatible server: completions, chat completions, streaming of both, errors, faults.
//
//   node tests/openai_client.js MODE BASE_URL API_KEY MODEL
//     MODE = api     everything a client of the real API would do (run against serve, and by the
//                    gateway tests against the gateway)
//     MODE = 429     the server answers 429 with Retry-After (serve --fault-status 429)
//     MODE = empty   the server answers empty 200s (serve --fault-empty 1)
//
// The package is loaded from $MT_NODE_DIR (tests/run_openai.sh installs it there with npm; it is
// never committed). Greedy answers are cross-checked against plain HTTP (fetch) to the same
// server, so the client is shown to read exactly what the server sent. Exit 0 when every check
// passes; one line per check.
"use strict";
const { createRequire } = require("module");
const dir = process.env.MT_NODE_DIR || "build/node";
const OpenAI = createRequire(require("path").resolve(dir) + "/")("openai");

const [mode, baseURL, apiKey, model] = process.argv.slice(2);
let failed = 0;
function check(what, cond, detail) {
  if (cond) console.log("  ok   " + what);
  else { console.log("  FAIL " + what + (detail !== undefined ? ": " + JSON.stringify(detail) : "")); failed++; }
}
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });

async function raw(path, body) { // plain HTTP, the independent reference
  const r = await fetch(baseURL + path, {
    method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + apiKey },
  });
  return { status: r.status, headers: r.headers, json: await r.json() };
}

async function api() {
  const models = await client.models.list();
  check("models.list() names the model", models.data.length >= 1 && models.data.some((m) => m.id === model), models.data);

  // completions
  // sampled with a seed, not greedy: a tiny model's greedy text is often all spaces, which would
  // make "same text" checks pass for the wrong reasons; same seed + same prompt = same text
  const req = { model, prompt: "ROMEO:", max_tokens: 24, temperature: 0.9, seed: 42 };
  const c = await client.completions.create(req);
  check("completions.create: text_completion with one choice", c.object === "text_completion" && c.choices.length === 1, c);
  check("completions.create: usage adds up", c.usage.prompt_tokens > 0 && c.usage.completion_tokens === 24 &&
        c.usage.total_tokens === c.usage.prompt_tokens + 24, c.usage);
  const ref = await raw("/completions", req);
  check("completions.create: same text as plain HTTP (same seed)", c.choices[0].text === ref.json.choices[0].text,
        [c.choices[0].text, ref.json.choices[0].text]);
  let streamed = "", finish = null, nchunks = 0, usage = null;
  const cs = await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  for await (const ch of cs) {
    if (ch.choices.length) { streamed += ch.choices[0].text; finish = ch.choices[0].finish_reason || finish; nchunks++; }
    if (ch.usage) usage = ch.usage;
  }
  check("completions streaming: chunks concatenate to the same text", streamed === c.choices[0].text && nchunks >= 2,
        [streamed, nchunks]);
  check("completions streaming: finish_reason and the usage chunk", finish === "length" && usage && usage.completion_tokens === 24,
        [finish, usage]);

  // chat completions
  const messages = [{ role: "system", content: "You are a player." }, { role: "user", content: "Speak the speech." }];
  const creq = { model, messages, max_tokens: 32, temperature: 0.9, seed: 42 };
  const chat = await client.chat.completions.create(creq);
  const msg = chat.choices[0].message;
  check("chat.completions.create: chat.completion, assistant message", chat.object === "chat.completion" &&
        chat.id.startsWith("chatcmpl-") && msg.role === "assistant" && typeof msg.content === "string", chat);
  check("chat.completions.create: finish_reason stop|length", ["stop", "length"].includes(chat.choices[0].finish_reason),
        chat.choices[0]);
  // the documented template: the same greedy text as /v1/completions on the rendered prompt
  const tmpl = "System: You are a player.\nUser: Speak the speech.\nAssistant:";
  const viaCompl = await raw("/completions", { model, prompt: tmpl, max_tokens: 32, temperature: 0.9, seed: 42, stop: ["\nUser:"] });
  check("chat = completions on the documented template (same seed)", msg.content.trim().length > 0 &&
        msg.content === viaCompl.json.choices[0].text &&
        chat.usage.prompt_tokens === viaCompl.json.usage.prompt_tokens, [msg.content, viaCompl.json.choices[0].text]);
  let content = "", role = null, cfinish = null, cusage = null, n = 0, first = null;
  const st = await client.chat.completions.create({ ...creq, stream: true, stream_options: { include_usage: true } });
  for await (const ch of st) {
    if (first === null) first = ch;
    if (ch.object !== "chat.completion.chunk") role = "bad-object";
    if (ch.choices.length) {
      const d = ch.choices[0].delta;
      if (d.role) role = role || d.role;
      if (d.content) { content += d.content; n++; }
      if (ch.choices[0].finish_reason) cfinish = ch.choices[0].finish_reason;
    }
    if (ch.usage) cusage = ch.usage;
  }
  check("chat streaming: opens with the assistant role", role === "assistant" && first.choices[0].delta.role === "assistant", first);
  check("chat streaming: deltas concatenate to the same content", content === msg.content && n >= 2, [content, msg.content]);
  check("chat streaming: finish_reason and usage", cfinish === chat.choices[0].finish_reason && cusage &&
        cusage.completion_tokens === chat.usage.completion_tokens, [cfinish, cusage]);
  // the stream helper the SDK offers on top
  const runner = client.chat.completions.stream({ ...creq });
  const final = await runner.finalChatCompletion();
  check("chat.completions.stream().finalChatCompletion() assembles the same message",
        final.choices[0].message.content === msg.content, final.choices[0].message);

  // errors come back as the SDK's typed errors, with OpenAI's error object
  const bad = new OpenAI({ baseURL, apiKey: apiKey + "x", maxRetries: 0 });
  try { await bad.completions.create(req); check("wrong key -> AuthenticationError", false); }
  catch (e) { check("wrong key -> AuthenticationError (401)", e instanceof OpenAI.AuthenticationError && e.status === 401, [e.name, e.status]); }
  try { await client.chat.completions.create({ ...creq, model: "gpt-4o" }); check("unknown model -> NotFoundError", false); }
  catch (e) { check("unknown model -> NotFoundError (404, code model_not_found)", e instanceof OpenAI.NotFoundError && e.code === "model_not_found", [e.name, e.code]); }
  try { await client.chat.completions.create({ ...creq, temperature: 5 }); check("temperature 5 -> BadRequestError", false); }
  catch (e) { check("temperature 5 -> BadRequestError (400, param temperature)", e instanceof OpenAI.BadRequestError && e.param === "temperature", [e.name, e.param]); }
  try { await client.chat.completions.create({ ...creq, tools: [{ type: "function", function: { name: "f", parameters: {} } }] }); check("tools -> 400", false); }
  catch (e) { check("tools -> BadRequestError naming 'tools'", e instanceof OpenAI.BadRequestError && e.param === "tools", [e.name, e.param]); }
}

async function rate429() {
  try { await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], max_tokens: 4 }); check("429 fault", false); }
  catch (e) {
    check("429 fault -> RateLimitError with Retry-After", e instanceof OpenAI.RateLimitError && e.status === 429 &&
          e.headers && e.headers.get("retry-after") === "3", [e.name, e.status, e.headers && e.headers.get("retry-after")]);
    check("429 fault: OpenAI error object, code injected_fault", e.code === "injected_fault", e.error);
  }
}

async function empty() {
  // --fault-empty 1 alternates the two empty shapes: no choices, then empty content without finish
  const a = await client.completions.create({ model, prompt: "x", max_tokens: 4 });
  const b = await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], max_tokens: 4 });
  check("empty 200 #1: no choices", a.choices.length === 0, a);
  check("empty 200 #2: empty content, no finish_reason", b.choices.length === 1 && b.choices[0].message.content === "" &&
        b.choices[0].finish_reason === null, b);
  let events = 0, text = "";
  const s = await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], max_tokens: 4, stream: true });
  for await (const ch of s) { events++; for (const c of ch.choices) text += c.delta.content || ""; }
  check("empty stream: nothing but [DONE]", events === 0 && text === "", [events, text]);
}

(mode === "api" ? api() : mode === "429" ? rate429() : empty())
  .catch((e) => { console.log("  FAIL unexpected: " + (e && e.stack || e)); failed++; })
  .then(() => { console.log(`openai client (${mode}): ${failed ? "FAILED" : "all passed"}`); process.exit(failed ? 1 : 0); });
