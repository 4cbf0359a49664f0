// tests/gateway_embeddings.js — OpenAI's Node.js client's embeddings.create (the `openai` npm
// package) against `minitrain serve` or `minitrain gateway`: one string, a batch of strings, token
// ids; float and base64 (the client's default: it asks for base64 and decodes the float32 bytes
// itself) must give the same vectors, unit length, d_model dimensions.
//
//   node tests/gateway_embeddings.js BASE_URL API_KEY MODEL DIMS OUT.json   (BASE_URL ends in /v1)
//
// OUT.json gets the float answer of the batch, for tests/reference/embed_reference.py to check
// against PyTorch. The package is loaded from $MT_NODE_DIR (tests/run_gateway*.sh install it).
"use strict";
const { createRequire } = require("module");
const fs = require("fs");
const dir = process.env.MT_NODE_DIR || "build/node";
const OpenAI = createRequire(require("path").resolve(dir) + "/")("openai");

const [baseURL, apiKey, model, dims, out] = process.argv.slice(2);
let failed = 0;
function check(what, cond, detail) {
  if (cond) console.log("  ok   " + what);
  else { console.log("  FAIL " + what + (detail !== undefined ? ": " + JSON.stringify(detail).slice(0, 300) : "")); failed++; }
}
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

async function main() {
  const one = await client.embeddings.create({ model, input: "ROMEO:" }); // base64 on the wire
  const e = one.data[0].embedding;
  check("embeddings.create(string): one vector of " + dims + " floats, unit length, usage",
        one.data.length === 1 && e.length === Number(dims) && Math.abs(norm(e) - 1) < 1e-5 &&
        one.usage.prompt_tokens === 6, [one.data.length, e.length, norm(e), one.usage]);
  const batch = await client.embeddings.create({ model, input: ["ROMEO:", "hi", [1, 2, 3]], encoding_format: "float" });
  fs.writeFileSync(out, JSON.stringify(batch));
  const f = batch.data[0].embedding;
  check("a batch (strings and token ids) with encoding_format float: 3 vectors in order",
        batch.data.length === 3 && batch.data.every((d, i) => d.index === i) && batch.usage.prompt_tokens === 11, batch.usage);
  check("float and base64 give the same vector (to float32 precision)",
        f.every((x, i) => Math.abs(x - e[i]) < 1e-6), [f.slice(0, 3), e.slice(0, 3)]);
  let err = null;
  try { await client.embeddings.create({ model, input: "x", dimensions: 8 }); } catch (x) { err = x; }
  check("dimensions is refused with a typed 400", err instanceof OpenAI.BadRequestError, String(err));
  process.exit(failed ? 1 : 0);
}
main().catch((x) => { console.log("  FAIL " + x); process.exit(1); });
