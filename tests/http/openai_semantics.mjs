// OpenAI semantics of clusterkv-server's HTTP API through the official
// `openai` npm package (tests/http/http_front_test.py installs it and starts
// the server with --context-length 1024): seeds, errors that name the
// OpenAI field, roles and content, GET /v1/models/{id}, logprobs, n.
// Usage: node openai_semantics.mjs BASE_URL API_KEY
// Prints "ok <check>" per passed check; throws (exit 1) on the first failure.
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
function ok(check) { console.log(`ok ${check}`); }

const model = (await client.models.list()).data[0].id;
const retrieved = await client.models.retrieve(model);
assert.equal(retrieved.id, model);
assert.equal(retrieved.object, "model");
await assert.rejects(client.models.retrieve("no-such-model"),
                     (e) => e instanceof OpenAI.NotFoundError &&
                            e.error?.code === "model_not_found");
ok("models.retrieve: the model, 404 model_not_found for another");

// temperature 1 without a seed: a fresh seed per request.
const prompt = "Tell me a story";
const sample = async (extra) => (await client.completions.create({
  model, prompt, max_tokens: 24, temperature: 1, ...extra })).choices[0].text;
const unseeded = new Set();
for (let i = 0; i < 4; i++) unseeded.add(await sample({}));
assert.ok(unseeded.size >= 3, `4 unseeded samples, ${unseeded.size} distinct`);
const a = await sample({ seed: 42 }), b = await sample({ seed: 42 });
assert.equal(a, b);
assert.notEqual(await sample({ seed: 43 }), a);
ok(`seeds: ${unseeded.size}/4 distinct without, reproducible with`);

// Requests that can never succeed: 400 with the OpenAI field, no retry.
const badRequest = async (promise, param, code) => {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, `${e.status} ${e.message}`);
    assert.equal(e.error?.type, "invalid_request_error");
    assert.equal(e.error?.param, param, JSON.stringify(e.error));
    if (code) assert.equal(e.error?.code, code);
    assert.equal(e.headers?.["retry-after"], undefined);
    assert.ok(!e.message.includes("sampling."), e.message);
    return true;
  });
};
await badRequest(client.completions.create({
  model, prompt, max_tokens: 1000000 }), "prompt", "context_length_exceeded");
await badRequest(client.chat.completions.create({
  model, max_tokens: 1000000, messages: [{ role: "user", content: "hi" }] }),
  "messages", "context_length_exceeded");
await badRequest(client.chat.completions.create({
  model, messages: [{ role: "wizard", content: "hi" }] }),
  "messages.[0].role");
await badRequest(client.chat.completions.create({
  model, messages: [{ role: "system", content: "be brief" },
                    { role: "user" }] }), "messages.[1].content");
await badRequest(client.chat.completions.create({
  model, temperature: 3, messages: [{ role: "user", content: "x" }] }),
  "temperature");
await badRequest(client.chat.completions.create({
  model, top_logprobs: 2, messages: [{ role: "user", content: "x" }] }),
  "top_logprobs");
ok("400s name the OpenAI field: context, role, content, ranges");

// Chat logprobs, non-streaming and streaming: one entry per token, the
// chosen token's log-probability is the best of the top ones (greedy).
const chatBody = { model, max_tokens: 6, temperature: 0, logprobs: true,
                   top_logprobs: 3,
                   messages: [{ role: "user", content: "Name a colour." }] };
const chat = await client.chat.completions.create(chatBody);
const content = chat.choices[0].logprobs.content;
assert.equal(content.length, chat.usage.completion_tokens);
for (const t of content) {
  assert.equal(typeof t.token, "string");
  assert.ok(t.logprob <= 0);
  assert.ok(Array.isArray(t.bytes));
  assert.equal(t.top_logprobs.length, 3);
  assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-5);
}
const streamed = [];
for await (const chunk of await client.chat.completions.create(
    { ...chatBody, stream: true })) {
  for (const t of chunk.choices[0]?.logprobs?.content ?? []) streamed.push(t);
}
assert.deepEqual(streamed.map((t) => [t.token, t.logprob]),
                 content.map((t) => [t.token, t.logprob]));
ok(`chat logprobs: ${content.length} tokens, top 3, streamed alike`);

// Completions: logprobs N and echo.
const done = await client.completions.create({
  model, prompt, max_tokens: 5, temperature: 0, logprobs: 2, echo: true });
const lp = done.choices[0].logprobs;
assert.ok(done.choices[0].text.startsWith(prompt));
assert.equal(lp.tokens.length, done.usage.completion_tokens);
assert.equal(lp.token_logprobs.length, lp.tokens.length);
assert.equal(lp.top_logprobs.length, lp.tokens.length);
// Two ids whose bytes are not valid UTF-8 alone may print alike (U+FFFD)
// and share a key of OpenAI's {token: logprob} map: 1 or 2 keys.
for (const top of lp.top_logprobs) {
  const n = Object.keys(top).length;
  assert.ok(n >= 1 && n <= 2, `top_logprobs keys ${n}`);
}
assert.equal(lp.text_offset[0], prompt.length);
let text = "";
const offsets = [];
for await (const chunk of await client.completions.create({
    model, prompt, max_tokens: 5, temperature: 0, logprobs: 2, echo: true,
    stream: true })) {
  text += chunk.choices[0]?.text ?? "";
  offsets.push(...(chunk.choices[0]?.logprobs?.text_offset ?? []));
}
assert.equal(text, done.choices[0].text);
assert.deepEqual(offsets, lp.text_offset);
ok("completions logprobs 2 + echo, streamed alike");

// n: 2 — two choices (indices 0 and 1) from one prefilled prompt, counted
// once in usage; streamed interleaved, each choice with one finish_reason
// and the non-streamed choice's text.
const nBody = { model, prompt, max_tokens: 6, temperature: 1, seed: 5 };
const two = await client.completions.create({ ...nBody, n: 2 });
assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
const single = await client.completions.create(nBody);
assert.equal(two.usage.prompt_tokens, single.usage.prompt_tokens);
assert.equal(two.choices[0].text, single.choices[0].text);  // seed + 0
const chatN = { model, max_tokens: 6, temperature: 1, seed: 5, n: 2,
                messages: [{ role: "user", content: "Two ideas, please." }] };
const chatTwo = await client.chat.completions.create(chatN);
assert.equal(chatTwo.choices.length, 2);
const texts = ["", ""], finishes = [0, 0];
for await (const chunk of await client.chat.completions.create(
    { ...chatN, stream: true })) {
  for (const c of chunk.choices) {
    texts[c.index] += c.delta?.content ?? "";
    if (c.finish_reason) finishes[c.index]++;
  }
}
assert.deepEqual(finishes, [1, 1]);
assert.deepEqual(texts, chatTwo.choices.map((c) => c.message.content));
await badRequest(client.completions.create({ ...nBody, n: 17 }), "n");
ok("n: 2 choices, prompt counted once, streamed interleaved; n 17: 400");
