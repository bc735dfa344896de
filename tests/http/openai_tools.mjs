// Issue 28 through the official `openai` npm package, on a random model
// with Qwen2.5's (Hermes) chat template: structured outputs, the prefix
// cache's cached_tokens, and tool calls (a round trip and streamed
// deltas). A random model follows no instructions, so calls come from
// tool_choice "required" / a named function (grammar-forced).
// Usage: node openai_tools.mjs BASE_URL API_KEY
// Prints "ok <check>" per check and "validate {schema, value}" lines
// that openai_client_test.py validates with python3-jsonschema; throws
// (exit 1) on the first failure.
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const model = (await client.models.list()).data[0].id;

function ok(check) { console.log(`ok ${check}`); }
// The driver validates value against schema (python3-jsonschema).
function validate(schema, value) {
  console.log(`validate ${JSON.stringify({ schema, value })}`);
}

// ---- structured outputs ------------------------------------------------
const tripSchema = {
  type: "object",
  properties: {
    city: { type: "string", enum: ["Paris", "Rome", "Oslo"] },
    days: { type: "integer", minimum: 1, maximum: 14 },
    tags: { type: "array", items: { type: "string", maxLength: 6 },
            minItems: 1, maxItems: 3 },
    budget: { anyOf: [{ type: "number", minimum: 0, maximum: 5000 },
                      { type: "null" }] },
    traveller: { type: "object",
                 properties: { name: { type: "string", maxLength: 8 },
                               adult: { type: "boolean" } },
                 required: ["name", "adult"], additionalProperties: false },
  },
  required: ["city", "days", "tags", "budget", "traveller"],
  additionalProperties: false,
};
for (const seed of [1, 2, 3]) {
  const r = await client.chat.completions.create({
    model, max_tokens: 300, seed, temperature: 1,
    messages: [{ role: "user", content: "Plan a trip as JSON." }],
    response_format: { type: "json_schema",
                       json_schema: { name: "trip", strict: true,
                                      schema: tripSchema } },
  });
  assert.equal(r.choices[0].finish_reason, "stop");
  const out = JSON.parse(r.choices[0].message.content);
  assert.equal(Object.keys(out).join(","), "city,days,tags,budget,traveller",
               "properties in schema order");
  validate(tripSchema, out);
}
ok("response_format json_schema strict (3 seeds)");

for (const seed of [4, 5]) {
  const r = await client.chat.completions.create({
    model, max_tokens: 400, seed, temperature: 1,
    messages: [{ role: "user", content: "Any JSON object." }],
    response_format: { type: "json_object" },
  });
  assert.equal(r.choices[0].finish_reason, "stop", r.choices[0].message.content);
  const out = JSON.parse(r.choices[0].message.content);
  assert.ok(out !== null && typeof out === "object" && !Array.isArray(out));
}
ok("response_format json_object parses");

await assert.rejects(
  client.chat.completions.create({
    model, messages: [{ role: "user", content: "x" }],
    response_format: { type: "json_schema",
                       json_schema: { name: "bad", schema: { not: {} } } } }),
  (e) => e instanceof OpenAI.BadRequestError &&
         e.error?.param === "response_format");
ok("unsupported schema -> BadRequestError(param response_format)");

// ---- prefix cache: the same long document, two stateless requests --------
const doc = "Document 91: " +
  Array.from({ length: 40 }, (_, i) => `clause ${i} holds fast.`).join(" ");
const ask = (question, extra = {}) => client.chat.completions.create({
  model, max_tokens: 2, temperature: 0, ...extra,
  messages: [{ role: "system", content: doc },
             { role: "user", content: question }],
});
const q1 = await ask("What does clause 3 say?");
assert.equal(q1.usage.prompt_tokens_details.cached_tokens, 0);
const q2 = await ask("And clause 7?");
const cached = q2.usage.prompt_tokens_details.cached_tokens;
assert.ok(cached > 0, `second request cached_tokens ${cached}`);
// Whole 32-token blocks (--prefix-cache-block-tokens 32) of the shared
// part only: the byte vocabulary has a token per byte, and the question
// and the turns after it differ.
assert.equal(cached % 32, 0);
assert.ok(cached <= q2.usage.prompt_tokens - "And clause 7?".length);
assert.ok(cached > doc.length - 32, `${cached} of a ${doc.length}-byte doc`);
let streamUsage = null;
for await (const chunk of await ask("And clause 9?", {
  stream: true, stream_options: { include_usage: true } })) {
  if (chunk.usage) streamUsage = chunk.usage;
}
assert.equal(streamUsage.prompt_tokens_details.cached_tokens, cached);
ok(`prefix cache: cached_tokens 0 then ${cached} of ` +
   `${q2.usage.prompt_tokens} (streamed usage too)`);

// ---- tools -------------------------------------------------------------
const weatherParams = {
  type: "object",
  properties: {
    city: { type: "string", enum: ["Paris", "Rome"] },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 5 },
  },
  required: ["city", "unit", "days"],
  additionalProperties: false,
};
const tools = [
  { type: "function",
    function: { name: "get_weather", description: "Weather forecast",
                parameters: weatherParams } },
  { type: "function",
    function: { name: "get_time", description: "Local time",
                parameters: { type: "object",
                              properties: { zone: { type: "string",
                                                    enum: ["UTC", "CET"] } },
                              required: ["zone"],
                              additionalProperties: false } } },
];
const question = { role: "user", content: "What is the weather in Paris?" };
const call1 = await client.chat.completions.create({
  model, max_tokens: 120, seed: 7, temperature: 1, tools, tool_choice: "required",
  messages: [question],
});
const choice = call1.choices[0];
assert.equal(choice.finish_reason, "tool_calls");
assert.equal(choice.message.tool_calls.length, 1);
const tc = choice.message.tool_calls[0];
assert.match(tc.id, /^call_[A-Za-z0-9]{24}$/);
assert.equal(tc.type, "function");
assert.ok(["get_weather", "get_time"].includes(tc.function.name));
assert.equal(typeof tc.function.arguments, "string");
validate(tools.find((t) => t.function.name === tc.function.name)
           .function.parameters, JSON.parse(tc.function.arguments));
ok(`tool_choice required -> ${tc.function.name}(${tc.function.arguments})`);

// The round trip: the call and its result in the history, then an answer.
const answer = await client.chat.completions.create({
  model, max_tokens: 8, temperature: 0, tools, tool_choice: "auto",
  messages: [question, choice.message,
             { role: "tool", tool_call_id: tc.id, content: "Sunny, 24 C" }],
});
assert.equal(typeof answer.choices[0].message.content, "string");
assert.ok(["stop", "length"].includes(answer.choices[0].finish_reason));
assert.equal(answer.choices[0].message.tool_calls, undefined);
assert.ok(answer.usage.prompt_tokens > call1.usage.prompt_tokens);
ok("tool round trip: call -> tool message -> answer");

const named = await client.chat.completions.create({
  model, max_tokens: 120, seed: 8, temperature: 1, tools,
  tool_choice: { type: "function", function: { name: "get_time" } },
  messages: [{ role: "user", content: "Time?" }],
});
const ntc = named.choices[0].message.tool_calls;
assert.equal(ntc.length, 1);
assert.equal(ntc[0].function.name, "get_time");
validate(tools[1].function.parameters, JSON.parse(ntc[0].function.arguments));
ok("tool_choice named -> get_time");

// Streamed: delta.tool_calls with index, id, type and name first, then the
// arguments; the same call as the non-streamed answer of the same seed.
const deltas = await client.chat.completions.create({
  model, max_tokens: 120, seed: 7, temperature: 1, tools, tool_choice: "required",
  messages: [question], stream: true,
});
let sid = null, sname = "", sargs = "", sfinish = null, pieces = 0;
for await (const chunk of deltas) {
  const c = chunk.choices[0];
  if (!c) continue;
  if (c.finish_reason) sfinish = c.finish_reason;
  for (const d of c.delta.tool_calls ?? []) {
    assert.equal(d.index, 0);
    pieces++;
    if (d.id) { assert.equal(sid, null); sid = d.id; assert.equal(d.type, "function"); }
    if (d.function?.name) sname += d.function.name;
    if (d.function?.arguments) sargs += d.function.arguments;
  }
}
assert.equal(sfinish, "tool_calls");
assert.ok(pieces >= 2, `${pieces} tool_calls deltas`);
assert.match(sid, /^call_/);
assert.equal(sname, tc.function.name);
assert.equal(sargs, tc.function.arguments);
ok(`streamed tool call deltas (${pieces}) == non-streamed call`);

// The SDK's own accumulator (ChatCompletionStream) rebuilds the message.
const runner = client.beta.chat.completions.stream({
  model, max_tokens: 120, seed: 7, temperature: 1, tools, tool_choice: "required",
  messages: [question],
});
const final = await runner.finalChatCompletion();
assert.equal(final.choices[0].message.tool_calls[0].function.arguments,
             tc.function.arguments);
ok("beta.chat.completions.stream accumulates the call");

// n: 2 with a forced call: each choice has its own call (choice 0 the
// seed-7 call above, seed + 0); streamed, the SDK's accumulator rebuilds
// both choices' calls from the interleaved deltas.
const twoCalls = await client.chat.completions.create({
  model, max_tokens: 120, seed: 7, temperature: 1, tools, tool_choice: "required",
  messages: [question], n: 2,
});
assert.deepEqual(twoCalls.choices.map((c) => c.index), [0, 1]);
for (const c of twoCalls.choices) {
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.tool_calls.length, 1);
  const f = c.message.tool_calls[0].function;
  validate(tools.find((t) => t.function.name === f.name).function.parameters,
           JSON.parse(f.arguments));
}
assert.equal(twoCalls.choices[0].message.tool_calls[0].function.arguments,
             tc.function.arguments);
assert.equal(twoCalls.usage.prompt_tokens, call1.usage.prompt_tokens);
const twoStream = await client.beta.chat.completions.stream({
  model, max_tokens: 120, seed: 7, temperature: 1, tools, tool_choice: "required",
  messages: [question], n: 2,
}).finalChatCompletion();
assert.equal(twoStream.choices.length, 2);
for (const i of [0, 1]) {
  assert.equal(twoStream.choices[i].message.tool_calls[0].function.arguments,
               twoCalls.choices[i].message.tool_calls[0].function.arguments);
}
ok("n: 2 tool calls, one per choice, streamed alike");

// parallel_tool_calls: false keeps an answer to its first call. Under
// tool_choice "auto" a GBNF (llama.cpp's `grammar`, passed through the
// SDK as an extra field) makes the model write two Hermes calls.
const twoCallsText =
  '<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>' +
  '<tool_call>{"name": "get_weather", "arguments": ' +
  '{"city": "Rome", "unit": "celsius", "days": 2}}</tool_call>';
const forcedTwo = {
  model, max_tokens: 400, temperature: 0, tools, tool_choice: "auto",
  grammar: `root ::= ${JSON.stringify(twoCallsText)}`, messages: [question] };
const parallel = await client.chat.completions.create(forcedTwo);
assert.equal(parallel.choices[0].finish_reason, "tool_calls");
assert.deepEqual(parallel.choices[0].message.tool_calls.map(
  (t) => t.function.name), ["get_time", "get_weather"]);
const single = await client.chat.completions.create(
  { ...forcedTwo, parallel_tool_calls: false });
assert.equal(single.choices[0].finish_reason, "tool_calls");
assert.deepEqual(single.choices[0].message.tool_calls.map(
  (t) => [t.function.name, JSON.parse(t.function.arguments)]),
  [["get_time", { zone: "UTC" }]]);
const singleStream = await client.chat.completions.create(
  { ...forcedTwo, parallel_tool_calls: false, stream: true });
const streamedNames = [];
for await (const chunk of singleStream) {
  for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
    assert.equal(d.index, 0);
    if (d.function?.name) streamedNames.push(d.function.name);
  }
}
assert.deepEqual(streamedNames, ["get_time"]);
await assert.rejects(
  client.chat.completions.create({ ...forcedTwo, parallel_tool_calls: "no" }),
  (e) => e.status === 400 &&
         (e.param ?? e.error?.param) === "parallel_tool_calls");
ok("parallel_tool_calls: false -> the first of two calls (streamed too)");
