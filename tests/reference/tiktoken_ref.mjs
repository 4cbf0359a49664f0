// tests/reference/tiktoken_ref.mjs — the independent reference for minitrain's GPT-2 tokenizer:
// js-tiktoken from the npm registry (pure JavaScript, MIT licence, GPT-2 ranks bundled), run with
// the machine's Node.js. tests/run_tokenizer_gpt2.sh installs it into build/node and calls:
//
//   node tiktoken_ref.mjs ranks OUT.tiktoken     write the gpt2 ranks as a tiktoken rank file
//                                               ("<base64 token> <rank>" per line), so no copy of
//                                               the ranks is committed to this repository
//   node tiktoken_ref.mjs corpus SHAKESPEARE OUT_DIR
//                                               write the corpus (OUT_DIR/NN_name.txt, UTF-8) and
//                                               the ids js-tiktoken gives each (NN_name.ids, one
//                                               decimal id per line): ordinary encoding, i.e.
//                                               encode(text, [], []) — "<|endoftext|>" in the text
//                                               is text, as in GPT-2's encoder.py
//   node tiktoken_ref.mjs llmc-shakespeare SHAKESPEARE OUT.ids
//                                               llm.c's dev/data/tinyshakespeare.py token stream:
//                                               <|endoftext|> before every "\n\n"-separated section
//   node tiktoken_ref.mjs count TEXT           the number of ids of TEXT
//   node tiktoken_ref.mjs classes OUT.bin       for every code point 0..0x10FFFF one byte: the
//                                               class the GPT-2 regex sees in JavaScript
//                                               (1 letter \p{L}, 2 number \p{N}, 3 space \s,
//                                               0 other; +16 when \p{Cn}, unassigned; 255 for
//                                               surrogates)
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const modDir = process.env.JS_TIKTOKEN_DIR; // build/node/node_modules
const { Tiktoken } = require(path.join(modDir, "js-tiktoken/dist/lite.cjs"));
const gpt2 = require(path.join(modDir, "js-tiktoken/dist/ranks/gpt2.cjs"));
const enc = new Tiktoken(gpt2.default ?? gpt2);

// a small seeded generator (xorshift32) so the random corpus is the same on every machine
let seed = 2463534242;
function rnd() {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
function randomScalar(lo, hi) {
  for (;;) {
    const cp = lo + Math.floor(rnd() * (hi - lo));
    if (cp < 0xd800 || cp > 0xdfff) return String.fromCodePoint(cp);
  }
}

function corpus(shakespeare) {
  const c = [];
  c.push(["shakespeare", shakespeare]);
  c.push(["chinese",
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。\n" +
    "自然语言处理是人工智能的一个重要分支，它研究如何让计算机理解和生成人类语言。" +
    "今天是2024年5月20日，天气晴朗，气温25度。我们在北京大学的图书馆里学习了三个小时。\n" +
    "《红楼梦》是中国古典四大名著之一。“你好！”他说道——然后离开了……\n" +
    "繁體中文與简体中文混合：機器學習、机器学习。日本語も少し：東京は大きい都市です。"]);
  c.push(["emoji",
    "I love pizza 🍕🍕🍕! Family: 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵🇺🇳 skin 👍🏽👍🏿 " +
    "hearts ❤️💙💚 faces 😀😃😄😁😆😅🤣😂 keycap 1️⃣ #️⃣ \u{1F9D1}\u200D\u{1F680} " +
    "alone:🚀\n🚀🚀 x🚀y  🎉\t🎉"]);
  const ws = [];
  for (const n of [1, 2, 3, 7, 16, 33, 100, 257, 1000]) ws.push("a" + " ".repeat(n) + "b");
  ws.push("\n".repeat(50) + "x" + "\t".repeat(20) + " \n \n" + "  \t  \r\n\r\n" + " ".repeat(5000));
  ws.push("end with spaces   ");
  ws.push("   leading and \u00a0 no-break \u3000 ideographic \u2003 em space");
  c.push(["whitespace", ws.join("|")]);
  c.push(["digits",
    "0 1 12 123 1234 12345 123456 1234567890123456789 3.14159 2,718 1e-10 -42 +7 " +
    "١٢٣ ٤٥٦ (Arabic-Indic) ½ ¾ Ⅻ ² 0x1F 2024-05-20T12:00:00Z 555-0100 $99.99 100%"]);
  c.push(["contractions",
    "I'm you're he'll they've we'd it's can't won't shan't y'all 's 't 're 've 'm 'll 'd " +
    "DON'T I'M YOU'RE 'S 'T O'Neil rock'n'roll '' ''' ' s don’t (curly) it’s"]);
  c.push(["mixed",
    "Hello, world! Привет, мир! مرحبا بالعالم! नमस्ते दुनिया! 안녕하세요 세계! Γειά σου Κόσμε! " +
    "שלום עולם! Xin chào thế giới! ¿Qué tal? Ça va? naïve café résumé Zürich " +
    "<|endoftext|> is text here <|endoftext|><|endoftext|> " +
    "code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; } // done\n" +
    "https://example.com/path?q=1&r=2#frag user@example.org ~/.bashrc C:\\Windows\\ " +
    "ＡＢＣ１２３ (fullwidth) ﬁ ﬂ (ligatures) e\u0301 a\u0308 (combining) \u200b\u200c\u200d (zero width)"]);
  // random scalars: Basic Multilingual Plane, then all planes, with spaces sprinkled in
  let r1 = "", r2 = "";
  for (let i = 0; i < 20000; i++) r1 += rnd() < 0.15 ? " " : randomScalar(0x20, 0x10000);
  for (let i = 0; i < 5000; i++) r2 += rnd() < 0.1 ? (rnd() < 0.5 ? " " : "\n") : randomScalar(0x20, 0x110000);
  c.push(["random_bmp", r1]);
  c.push(["random_all", r2]);
  return c;
}

const [cmd, a1, a2] = process.argv.slice(2);
if (cmd === "ranks") {
  const lines = (gpt2.default ?? gpt2).bpe_ranks.split("\n").filter(Boolean);
  const out = [];
  for (const line of lines) {
    const [, off, ...toks] = line.split(" ");
    toks.forEach((t, i) => out.push(`${t} ${Number(off) + i}`));
  }
  fs.writeFileSync(a1, out.join("\n") + "\n");
  console.log(`${out.length} ranks -> ${a1}`);
} else if (cmd === "corpus") {
  const text = fs.readFileSync(a1, "utf8");
  fs.mkdirSync(a2, { recursive: true });
  let n = 0;
  for (const [name, s] of corpus(text)) {
    const base = path.join(a2, String(n++).padStart(2, "0") + "_" + name);
    fs.writeFileSync(base + ".txt", s, "utf8");
    fs.writeFileSync(base + ".ids", enc.encode(s, [], []).join("\n") + "\n");
  }
  console.log(`${n} corpus files -> ${a2}`);
} else if (cmd === "llmc-shakespeare") {
  const text = fs.readFileSync(a1, "utf8");
  const eot = (gpt2.default ?? gpt2).special_tokens["<|endoftext|>"];
  const sections = text.split("\n\n");
  const ids = [];
  sections.forEach((s, i) => {
    ids.push(eot);
    ids.push(...enc.encode(i !== sections.length - 1 ? s + "\n\n" : s, [], []));
  });
  fs.writeFileSync(a2, ids.join("\n") + "\n");
  console.log(`${ids.length} tokens -> ${a2}`);
} else if (cmd === "count") {
  console.log(enc.encode(a1, [], []).length);
} else if (cmd === "classes") {
  const out = new Uint8Array(0x110000);
  const L = /^\p{L}$/u, N = /^\p{N}$/u, S = /^\s$/u, Cn = /^\p{Cn}$/u;
  for (let cp = 0; cp < 0x110000; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) { out[cp] = 255; continue; }
    const ch = String.fromCodePoint(cp);
    out[cp] = (L.test(ch) ? 1 : N.test(ch) ? 2 : S.test(ch) ? 3 : 0) + (Cn.test(ch) ? 16 : 0);
  }
  fs.writeFileSync(a1, out);
  console.log(`classes of 0x110000 code points -> ${a1}`);
} else {
  console.error("usage: node tiktoken_ref.mjs ranks|corpus|llmc-shakespeare|classes ...");
  process.exit(2);
}
