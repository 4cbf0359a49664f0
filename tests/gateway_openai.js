// tests/gateway_openai.js — OpenAI's official Node.js client (the `openai` npm package) through
// `minitrain gateway`: completions, chat completions, streaming of both, typed errors.
//
//   node tests/gateway_openai.js BASE_URL API_KEY MODEL     (BASE_URL ends in /v1)
//
// The package is loaded from $MT_NODE_DIR (tests/run_gateway.sh installs it there with npm; it is
// never committed). Each streamed text is checked against the same request unstreamed (same seed:
// same text), so the client is shown to read exactly what the gateway passed through. Exit 0 when
// every check passes; one line per check.
"use strict";
const { createRequire } = require("module");
const dir = process.env.MT_NODE_DIR || "build/node";
const OpenAI = createRequire(require("path").resolve(dir) + "/")("openai");

const [baseURL, apiKey, model] = process.argv.slice(2);
let failed = 0;
function check(what, cond, detail) {
  if (cond) console.log("  ok   " + what);
  else { console.log("  FAIL " + what + (detail !== undefined ? ": " + JSON.stringify(detail) : "")); failed++; }
}
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });

async function main() {
  const models = await client.models.list();
  check("models.list() through the gateway names the model", models.data.some((m) => m.id === model), models.data);

  const req = { model, prompt: "ROMEO:", max_tokens: 16, temperature: 0.9, seed: 5 };
  const c = await client.completions.create(req);
  check("completions.create: one choice, usage", c.object === "text_completion" && c.choices.length === 1 &&
        c.usage.completion_tokens === 16, c);
  let text = "", finish = null, usage = null;
  for await (const ch of await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
    if (ch.choices.length) { text += ch.choices[0].text; finish = ch.choices[0].finish_reason || finish; }
    if (ch.usage) usage = ch.usage;
  }
  check("completions streaming = unstreamed text, finish_reason, usage chunk", text === c.choices[0].text &&
        finish === "length" && usage && usage.completion_tokens === 16, [text, c.choices[0].text, finish, usage]);

  const creq = { model, messages: [{ role: "system", content: "You are a player." }, { role: "user", content: "Speak." }],
                 max_tokens: 16, temperature: 0.9, seed: 5 };
  const chat = await client.chat.completions.create(creq);
  const msg = chat.choices[0].message;
  check("chat.completions.create: assistant message", chat.object === "chat.completion" && msg.role === "assistant" &&
        typeof msg.content === "string", chat);
  let content = "", cfinish = null, chunks = 0;
  for await (const ch of await client.chat.completions.create({ ...creq, stream: true })) {
    chunks++;
    if (ch.choices.length) { content += ch.choices[0].delta.content || ""; cfinish = ch.choices[0].finish_reason || cfinish; }
  }
  check("chat streaming = unstreamed content, finish_reason", content === msg.content && chunks >= 2 &&
        ["stop", "length"].includes(cfinish), [content, msg.content, cfinish]);

  try {
    await new OpenAI({ baseURL, apiKey: "mt-wrong", maxRetries: 0 }).completions.create(req);
    check("a wrong key raises AuthenticationError", false);
  } catch (e) { check("a wrong key raises AuthenticationError (401)", e instanceof OpenAI.AuthenticationError && e.status === 401, e.status); }
  try {
    await client.completions.create({ ...req, model: "no-such-model" });
    check("an unknown model raises NotFoundError", false);
  } catch (e) { check("an unknown model raises NotFoundError (404)", e instanceof OpenAI.NotFoundError && e.status === 404, e.status); }
}

main().then(() => process.exit(failed ? 1 : 0), (e) => { console.log("  FAIL " + e.stack); process.exit(1); });
