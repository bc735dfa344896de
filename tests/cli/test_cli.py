#!/usr/bin/env python3
"""End-to-end checks of the clusterkv-model command line (its interface is
used by external checks, so the formats asserted here are the contract)."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

BIN = sys.argv.pop(1) if len(sys.argv) > 1 else "build/model/clusterkv-model"
FIXTURES = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "fixtures")


def run(*args, check=True):
    p = subprocess.run([BIN, *args], capture_output=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"{args}: rc={p.returncode} {p.stderr.decode()}")
    return p


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ckv_cli_")
        cls.model = os.path.join(cls.tmp, "r.gguf")
        run("make-random", "--out", cls.model, "--layers", "2", "--dim", "64",
            "--heads", "4", "--kv-heads", "2", "--ffn", "96", "--dtype", "f16",
            "--seed", "5")

    def path(self, name, text):
        p = os.path.join(self.tmp, name)
        with open(p, "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())
        return p

    def test_startup_loads_no_cublas(self):
        # cuBLAS is opened by the CUDA backend when it needs a GEMM
        # (kernels/cuda/cublas_loader.h); linked, libcublasLt's initialisers
        # cost every command ~0.45 s of CPU at start.
        env = dict(os.environ, LD_DEBUG="libs")
        p = subprocess.run([BIN, "--help"], capture_output=True, env=env,
                           timeout=60)
        self.assertIn(b"calling init", p.stderr)  # LD_DEBUG took effect
        self.assertNotIn(b"libcublas", p.stderr)

    def test_info_reports_shape(self):
        info = json.loads(run("info", self.model).stdout)
        self.assertEqual(info["architecture"], "llama")
        self.assertEqual((info["layers"], info["dim"], info["heads"],
                          info["kv_heads"], info["head_dim"], info["ffn"],
                          info["vocab_size"]), (2, 64, 4, 2, 16, 96, 259))
        self.assertIn("F16", info["tensor_types"])
        self.assertIn("freq_base", info["rope"])

    def test_make_random_variants(self):
        for extra in (["--dtype", "q8_0"], ["--dtype", "bf16", "--tied"],
                      ["--arch", "qwen2", "--dtype", "f32"], ["--rope-freqs"]):
            out = os.path.join(self.tmp, "v.gguf")
            run("make-random", "--out", out, "--layers", "1", "--dim", "64",
                "--heads", "2", "--kv-heads", "1", "--ffn", "64", *extra)
            info = json.loads(run("info", out).stdout)
            self.assertEqual(info["layers"], 1, extra)
        bad = run("make-random", "--out", out, "--dim", "63", check=False)
        self.assertEqual(bad.returncode, 2)

    def test_generate_is_reproducible_and_reports_speed(self):
        args = ("generate", self.model, "--prompt", "hello there",
                "--max-tokens", "12", "--temperature", "0.9", "--seed", "11",
                "--threads", "1")
        a, b = run(*args), run(*args)
        self.assertEqual(a.stdout, b.stdout)
        self.assertIn(b"tok/s", a.stderr)
        c = run(*args[:-4], "--seed", "12", "--threads", "2")
        self.assertIn(b"prefill", c.stderr)

    def test_logits_positions(self):
        toks = self.path("t.txt", "1 72 101 108 108\n111")
        last = json.loads(run("logits", self.model, "--tokens-file", toks).stdout)
        allp = json.loads(run("logits", self.model, "--tokens-file", toks,
                              "--positions", "all").stdout)
        self.assertEqual(last["positions"], [5])
        self.assertEqual(allp["positions"], list(range(6)))
        self.assertEqual(len(allp["logits"][0]), 259)
        for a, b in zip(last["logits"][0], allp["logits"][5]):
            self.assertAlmostEqual(a, b, places=4)

    def test_bad_input_is_a_clear_error(self):
        toks = self.path("bad.txt", "1 2 999999")
        p = run("logits", self.model, "--tokens-file", toks, check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"outside the vocabulary", p.stderr)
        corrupt = self.path("corrupt.gguf", open(self.model, "rb").read()[:5000])
        p = run("info", corrupt, check=False)
        self.assertIn(p.returncode, (1, 2))
        self.assertIn(b"error:", p.stderr)
        p = run("generate", self.model, "--prompt", "x", "--top-p", "0",
                check=False)
        self.assertEqual(p.returncode, 2)
        p = run("nonsense", self.model, check=False)
        self.assertEqual(p.returncode, 2)
        # --backend cuda where it cannot run: a build without it is a usage
        # error (exit 2); a build with it and no usable device fails to
        # start (exit 1) naming the missing device or driver.
        p = run("generate", self.model, "--prompt", "x", "--backend", "cuda",
                check=False)
        if p.returncode == 2:
            self.assertIn(b"--backend cuda: this build has no", p.stderr)
        else:
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(b"error: --backend cuda: no CUDA device: ", p.stderr)
        # The fake device (the device backend's test instrument) runs the
        # model: the same greedy text as the CPU.
        gen = ("generate", self.model, "--prompt", "In the beginning",
               "--max-tokens", "6", "--temperature", "0")
        cpu = run(*gen, "--backend", "cpu")
        fake = run(*gen, "--backend", "fake")
        self.assertEqual(fake.stdout, cpu.stdout)
        self.assertIn(b"backend fake: fake (fake device (schedule", fake.stderr)
        p = run("generate", self.model, "--prompt", "x", "--max-tokens", "2",
                "--backend", "auto")
        self.assertIn(b"backend auto: cpu", p.stderr)

    def test_generate_forks_answer_as_generate_and_refuse_bad_specs(self):
        # A prompt long enough to close segments (64-token clusters of a
        # 2-layer model with dense_layers 1: the second layer selects).
        prompt = self.path("forks.txt", "In the beginning " * 150)
        common = ("--prompt-file", prompt, "--temperature", "0",
                  "--max-tokens", "8", "--dense-layers", "1",
                  "--tokens-per-cluster", "16", "--sink-tokens", "4")
        p = run("generate-forks", self.model, *common,
                "--forks", "clusterkv:32,quest:48,streaming:32")
        lines = [json.loads(x) for x in p.stdout.decode().splitlines()]
        self.assertEqual([x["fork"] for x in lines],
                         ["clusterkv:32", "quest:48", "streaming:32"])
        for x, (policy, budget) in zip(
                lines, [("clusterkv", 32), ("quest", 48), ("streaming", 32)]):
            self.assertTrue(x["shared_prefill"])
            self.assertEqual(x["finish"], "length")
            self.assertEqual(x["tokens"], 8)
            want = run("generate", self.model, *common, "--policy", policy,
                       "--budget", str(budget)).stdout.decode()
            self.assertEqual(x["text"] + "\n", want, (policy, budget))
        for forks, why in (("", b"--forks is empty"),
                           ("clusterkv", b"is not POLICY:BUDGET"),
                           ("clusterkv:-3", b"is not POLICY:BUDGET"),
                           ("nope:32", b"unknown policy 'nope'")):
            p = run("generate-forks", self.model, *common, "--forks", forks,
                    check=False)
            self.assertEqual(p.returncode, 2, (forks, p.stderr))
            self.assertIn(why, p.stderr, forks)
        p = run("generate-forks", self.model, "--prompt", "x",
                "--temperature", "0.7", "--forks", "quest:32", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"generate-forks is greedy", p.stderr)

    def test_help_lists_every_registered_policy(self):
        # The registry names every policy in the error for an unknown one.
        p = run("info", self.model, "--policy", "no-such-policy", check=False)
        self.assertEqual(p.returncode, 2)
        m = re.search(rb"unknown policy 'no-such-policy' \(([^)]*)\)", p.stderr)
        self.assertIsNotNone(m, p.stderr)
        names = m.group(1).decode().split(", ")
        self.assertIn("oracle", names)
        listed = "|".join(names)
        usage = run("nonsense", self.model, check=False).stderr.decode()
        self.assertIn("--policy " + listed + "\n", usage)
        # absl wraps help texts at any space.
        helpfull = " ".join(run("--helpfull", check=False).stdout.decode()
                            .split())
        self.assertIn("--policy (" + listed + ");", helpfull)

    def test_recall_reports_quality(self):
        ids = [(i * 37 + 11) % 259 for i in range(400)]
        toks = self.path("recall.txt", " ".join(map(str, ids)))
        base = ("recall", self.model, "--tokens-file", toks,
                "--prompt-tokens", "360", "--dense-layers", "1",
                "--window", "32", "--threads", "1")
        full = json.loads(run(*base, "--policy", "full").stdout)
        for key in ("steps", "topk_recall", "mass_recall", "kl",
                    "top1_agreement", "layers"):
            self.assertIn(key, full)
        self.assertEqual(full["steps"], 40)
        self.assertEqual([l["layer"] for l in full["layers"]], [1])
        self.assertEqual(full["topk_recall"], 1.0)
        self.assertAlmostEqual(full["mass_recall"], 1.0, places=9)
        self.assertLess(full["kl"], 1e-6)
        self.assertEqual(full["top1_agreement"], 1.0)
        for policy in ("clusterkv", "quest", "streaming"):
            got = json.loads(run(*base, "--policy", policy,
                                 "--budget", "16").stdout)
            self.assertEqual(got["steps"], 40, policy)
            self.assertLess(got["topk_recall"], 1.0, policy)
            self.assertLess(got["mass_recall"], 1.0, policy)
            self.assertGreater(got["kl"], 0.0, policy)
            layer = got["layers"][0]
            self.assertGreater(layer["topk_recall"], 0.0, policy)
            self.assertLessEqual(layer["mass_recall"], 1.0, policy)
        for bad in (["--prompt-tokens", "0"], ["--prompt-tokens", "400"]):
            p = run(*base[:4], *bad, check=False)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn(b"--prompt-tokens", p.stderr)
        bad_ids = self.path("recall_bad.txt", "1 2 999999 4")
        p = run("recall", self.model, "--tokens-file", bad_ids,
                "--prompt-tokens", "2", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"outside the vocabulary", p.stderr)

    def test_recall_reports_every_policy_beside_the_oracle(self):
        ids = [(i * 37 + 11) % 259 for i in range(300)]
        toks = self.path("recall_all.txt", " ".join(map(str, ids)))
        out = run("recall", self.model, "--tokens-file", toks,
                  "--prompt-tokens", "280", "--dense-layers", "1",
                  "--window", "32", "--threads", "1", "--budget", "16",
                  "--recall-policies", "clusterkv,quest,streaming,oracle")
        lines = [json.loads(l) for l in out.stdout.decode().splitlines()]
        got = {l["config"]["policy"]: l for l in lines}
        self.assertEqual(sorted(got),
                         ["clusterkv", "oracle", "quest", "streaming"])
        # The oracle's selection is the truth of top-k recall.
        self.assertEqual(got["oracle"]["topk_recall"], 1.0)
        for policy, line in got.items():
            self.assertEqual(line["steps"], 20, policy)
            self.assertLessEqual(line["topk_recall"],
                                 got["oracle"]["topk_recall"], policy)
        p = run("recall", self.model, "--tokens-file", toks,
                "--prompt-tokens", "280", "--recall-policies", "best",
                check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"--recall-policies", p.stderr)

    def test_recall_probes_a_span(self):
        ids = [(i * 37 + 11) % 259 for i in range(300)]
        toks = self.path("recall_span.txt", " ".join(map(str, ids)))
        base = ("recall", self.model, "--tokens-file", toks,
                "--prompt-tokens", "280", "--dense-layers", "1",
                "--window", "32", "--threads", "1", "--budget", "16",
                "--policy", "clusterkv")
        got = json.loads(run(*base, "--probe-span", "100:120").stdout)
        steps = got["span_probe"]
        self.assertEqual([s["q_pos"] for s in steps], list(range(280, 300)))
        for step in steps:
            self.assertEqual([l["layer"] for l in step["layers"]], [1])
            for head in step["layers"][0]["heads"]:
                keys = head["keys"]
                self.assertEqual([k["pos"] for k in keys],
                                 list(range(100, 120)))
                self.assertTrue(0 <= head["target"] < 20)
                self.assertLessEqual(head["span_weight"], 1.0 + 1e-9)
                for k in keys:  # clustered: ranked, and B decides
                    self.assertGreaterEqual(k["cluster_rank"], 0)
                    self.assertGreaterEqual(k["span_members"], 1)
                    if k["tokens_ahead"] >= 16:
                        self.assertFalse(k["selected"], k)
        self.assertNotIn("span_probe", json.loads(run(*base).stdout))
        for bad in ("5:3", "7", "a:9"):
            p = run(*base, "--probe-span", bad, check=False)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn(b"--probe-span", p.stderr)

    def test_tokenize_matches_llama_cpp(self):
        tok = os.path.join(FIXTURES, "tokenizer")
        for vocab in ("llama-spm", "llama-bpe", "qwen2", "gpt-2"):
            base = os.path.join(tok, f"ggml-vocab-{vocab}.gguf")
            inputs = open(base + ".inp", encoding="utf-8").read().split(
                "\n__ggml_vocab_test__\n")
            outputs = open(base + ".out").read().split("\n")
            for text, want in list(zip(inputs, outputs))[:8]:
                f = self.path("in.txt", text)
                got = run("tokenize", base, "--text-file", f).stdout.decode()
                self.assertEqual(got.split(), want.split(), (vocab, text))

    def test_logits_match_fixture(self):
        models = os.path.join(FIXTURES, "models")
        golden = json.load(open(os.path.join(models, "tiny-a-f32.p64.json")))
        toks = self.path("p.txt", " ".join(map(str, golden["prompt"])))
        got = json.loads(run("logits", os.path.join(models, "tiny-a-f32.gguf"),
                             "--tokens-file", toks, "--positions", "all",
                             "--kv-type", "f32").stdout)
        for pos, want in zip(golden["logit_positions"], golden["logits"]):
            row = got["logits"][pos]
            spread = max(want) - min(want)
            err = max(abs(a - b) for a, b in zip(row, want)) / spread
            self.assertLess(err, 1e-3, pos)

    def render(self, *args):
        return run("render-template", *args, check=False)

    def test_render_template_matches_every_chat_fixture(self):
        chat = os.path.join(FIXTURES, "chat")
        specs = sorted(f for f in os.listdir(chat) if f.endswith(".cases.json"))
        self.assertEqual(len(specs), 10)
        for spec_name in specs:
            spec = json.load(open(os.path.join(chat, spec_name), encoding="utf-8"))
            for case in spec["cases"]:
                msgs = self.path("msgs.json", json.dumps(case["messages"]))
                args = ["--template", os.path.join(chat, spec["template"]),
                        "--messages", msgs]
                if case["add_generation_prompt"]:
                    args.append("--add-generation-prompt")
                for flag, key in (("--bos-token", "bos_token"),
                                  ("--eos-token", "eos_token")):
                    if spec[key] is not None:
                        args += [flag, spec[key]]
                p = self.render(*args)
                where = (spec_name, case["name"])
                if "error" in case:
                    self.assertEqual(p.returncode, 1, where)
                    self.assertEqual(p.stdout, b"", where)
                    self.assertIn(case["error"].encode(), p.stderr, where)
                else:
                    self.assertEqual(p.returncode, 0, (where, p.stderr))
                    self.assertEqual(p.stdout.decode("utf-8"),
                                     case["expected"], where)

    def test_render_template_from_model_file(self):
        # ggml-vocab-qwen2.gguf carries Qwen2's tokenizer.chat_template; the
        # expected text was rendered by Jinja2 3.1.6 set up as transformers
        # does (apply_chat_template, add_generation_prompt=True).
        vocab = os.path.join(FIXTURES, "tokenizer", "ggml-vocab-qwen2.gguf")
        msgs = self.path("m.json", json.dumps(
            [{"role": "user", "content": "What does this licence allow?"}]))
        p = self.render("--model", vocab, "--messages", msgs,
                        "--add-generation-prompt")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.decode(),
                         "<|im_start|>system\nYou are a helpful assistant"
                         "<|im_end|>\n<|im_start|>user\nWhat does this "
                         "licence allow?<|im_end|>\n<|im_start|>assistant\n")
        # A model file without a template is an error, not an empty render.
        p = self.render("--model", self.model, "--messages", msgs)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"chat_template", p.stderr)

    def test_render_template_errors_exit_1(self):
        msgs = self.path("ok.json", '[{"role": "user", "content": "hi"}]')
        tmpl = self.path("t.jinja", "{{ messages[0].content | upper }}")
        p = self.render("--template", tmpl, "--messages", msgs)
        self.assertEqual((p.returncode, p.stdout), (0, b"HI"))
        bad_cases = [
            (self.path("syntax.jinja", "{% if %}"), msgs, b"syntax"),
            (self.path("raise.jinja", "{{ raise_exception('no way') }}"), msgs,
             b"no way"),
            (self.path("loop.jinja",
                       "{% for i in range(999) %}{% for j in range(999)"
                       " %}{% endfor %}{% endfor %}"), msgs, b"loop"),
            (tmpl, self.path("bad.json", "[{"), b"JSON"),
            (tmpl, self.path("obj.json", '{"role": "user"}'), b"list"),
            (os.path.join(self.tmp, "missing.jinja"), msgs, b"cannot read"),
        ]
        for template, messages, needle in bad_cases:
            p = self.render("--template", template, "--messages", messages)
            self.assertEqual(p.returncode, 1, (template, p.stderr))
            self.assertEqual(p.stdout, b"")
            self.assertIn(needle, p.stderr)
        p = self.render("--messages", msgs)  # neither --template nor --model
        self.assertEqual(p.returncode, 1)


if __name__ == "__main__":
    unittest.main()
