// Drives clusterkv-server's OpenAI-compatible API with the official `openai`
// npm package (tests/http/openai_client_test.py installs it).
// Usage: node openai_client.mjs BASE_URL API_KEY
// Prints "ok <check>" per passed check; throws (exit 1) on the first failure.
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });

function ok(check) { console.log(`ok ${check}`); }

const models = await client.models.list();
const model = models.data[0].id;
assert.ok(model.length > 0);
ok(`models.list -> ${model}`);

// Chat, non-streaming.
const chat = await client.chat.completions.create({
  model, max_tokens: 5, temperature: 0,
  messages: [{ role: "system", content: "Be brief." },
             { role: "user", content: "Name a colour." }],
});
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices.length, 1);
assert.equal(chat.choices[0].message.role, "assistant");
assert.equal(typeof chat.choices[0].message.content, "string");
assert.ok(["stop", "length"].includes(chat.choices[0].finish_reason));
assert.ok(chat.usage.prompt_tokens > 0);
assert.equal(chat.usage.total_tokens,
             chat.usage.prompt_tokens + chat.usage.completion_tokens);
assert.ok(chat.usage.completion_tokens <= 5);
ok("chat.completions non-streaming");

// Chat, streaming: the same greedy answer, chunk by chunk.
const stream = await client.chat.completions.create({
  model, max_tokens: 5, temperature: 0, stream: true,
  stream_options: { include_usage: true },
  messages: [{ role: "system", content: "Be brief." },
             { role: "user", content: "Name a colour." }],
});
let streamed = "", finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  assert.equal(chunk.object, "chat.completion.chunk");
  if (chunk.usage) usage = chunk.usage;
  if (chunk.choices.length === 0) continue;
  chunks++;
  streamed += chunk.choices[0].delta.content ?? "";
  if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
}
assert.ok(chunks >= 1);
assert.equal(streamed, chat.choices[0].message.content);
assert.equal(finish, chat.choices[0].finish_reason);
assert.deepEqual(usage, chat.usage);
ok(`chat.completions streaming (${chunks} chunks)`);

// Completion, non-streaming and streaming.
const prompt = "Once upon a time";
const done = await client.completions.create({
  model, prompt, max_tokens: 6, temperature: 0, stop: ["\n\n"] });
assert.equal(done.object, "text_completion");
assert.equal(typeof done.choices[0].text, "string");
assert.ok(done.usage.completion_tokens <= 6);
let text = "";
for await (const chunk of await client.completions.create({
  model, prompt, max_tokens: 6, temperature: 0, stop: ["\n\n"],
  stream: true })) {
  text += chunk.choices[0]?.text ?? "";
}
assert.equal(text, done.choices[0].text);
ok("completions non-streaming and streaming");

// A session kept across requests: x-session-id "KEY.new" creates it, the
// returned id continues it (its token count grows), a fork branches off.
const first = await client.completions.create(
  { model, prompt: "A long document. ", max_tokens: 3 },
  { headers: { "x-session-id": "doc7.new" } }).withResponse();
const sid = first.response.headers.get("x-session-id");
assert.ok(sid && sid.startsWith("doc7."), `session id ${sid}`);
const tokens1 = Number(first.response.headers.get("x-session-tokens"));
assert.ok(tokens1 > 0);
const second = await client.chat.completions.create(
  { model, max_tokens: 3, messages: [{ role: "user", content: "Question?" }] },
  { headers: { "x-session-id": sid } }).withResponse();
assert.equal(second.response.headers.get("x-session-id"), sid);
const tokens2 = Number(second.response.headers.get("x-session-tokens"));
assert.equal(tokens2, tokens1 + second.data.usage.prompt_tokens +
                      second.data.usage.completion_tokens);
ok(`session continued: ${tokens1} -> ${tokens2} tokens`);
const fork = await client.chat.completions.create(
  { model, max_tokens: 2, messages: [{ role: "user", content: "Other?" }] },
  { headers: { "x-session-id": sid, "x-session-fork": "1" } }).withResponse();
const child = fork.response.headers.get("x-session-id");
assert.ok(child !== sid && child.startsWith("doc7."), `fork id ${child}`);
ok("session forked");

// Errors surface as the SDK's typed errors.
await assert.rejects(
  client.completions.create({ model, prompt: "x" },
                            { headers: { "x-session-id": "s-00000000" } }),
  (e) => e instanceof OpenAI.NotFoundError && e.error?.type === "not_found_error");
await assert.rejects(
  client.chat.completions.create({ model, n: 0,
                                   messages: [{ role: "user", content: "x" }] }),
  (e) => e instanceof OpenAI.BadRequestError && e.error?.param === "n");
const anonymous = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
await assert.rejects(anonymous.models.list(),
                     (e) => e instanceof OpenAI.AuthenticationError);
ok("errors: 404, 400, 401");
