#!/usr/bin/python3
"""ctest needle_bench_smoke: bench/needle_bench.py --quick (4k, 3 depths,
one sample, B = 256) through the built clusterkv-model on the committed
retrieval model, single needles and multi-key, then the facts that make
it a benchmark a policy can fail: dense attention, the oracle and
clusterkv_rerank (whose second stage reads the candidates' keys) find
every single needle; streaming (the most recent B tokens) misses the
needle at depth 0, which lies outside its window (in both tasks); the
JSON lists every policy and both tasks; the answer steps' recall
(--recall): the oracle's top-k recall is 1 and it attends every needle
key a copy head retrieves, streaming does not; the forked answers (one
prefill per prompt) equal one generate per configuration. A missing
model fails.

usage: needle_bench_smoke.py BINARY MODEL OUT_PREFIX
"""
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def check_answer_cut():
    """A multi-query answer is several sentences: the cut keeps as many "."
    as the expected answer has, so a right answer is not cut short."""
    sys.path.insert(0, os.path.join(ROOT, "scripts", "train"))
    import eval_needle
    want = " 1234567. The magic number for harp is 7654321."
    assert eval_needle.answer_of(want + " The", want) == want
    assert eval_needle.answer_of(" 1234567. The magic", want) == \
        " 1234567. The magic"
    assert eval_needle.answer_of(" 12.34", " 1234567.") == " 12."


def main():
    check_answer_cut()
    binary, model, out = sys.argv[1:4]
    if not os.path.exists(model):
        sys.exit("needle model missing: %s" % model)
    subprocess.run([sys.executable, os.path.join(ROOT, "bench",
                                                 "needle_bench.py"),
                    "--quick", "--tasks", "single,multikey", "--recall",
                    "--binary", binary, "--model", model,
                    "--out", out], check=True, cwd=ROOT)
    with open(out + ".json") as f:
        report = json.load(f)
    assert report["tasks"] == ["single", "multikey"], report["tasks"]
    # The multi-key prompts hold the asked needle and 3 others, the asked
    # one at each depth: outside streaming's window at depth 0 too.
    multi = report["accuracy"]["multikey"]
    assert multi["streaming B=256"]["4096"]["by_depth"]["0.0"] == 0.0, multi
    assert report["distractors"]["multikey"] == 3, report["distractors"]
    # The model answers multi-key needles densely (44/44 at 4k in its
    # report); the exact top-B keys hold the asked needle's too.
    for policy in ("full", "oracle B=256"):
        assert multi[policy]["4096"]["mean"] == 1.0, (policy, multi[policy])
    acc = report["accuracy"]["single"]
    # The answer steps' recall (teacher-forced): the oracle attends the
    # exact top-B keys, so its top-k recall is 1 and it attends every
    # needle key a copy head retrieves; streaming misses the depth-0 one.
    recall = {k: v["mean"] for k, v in report["recall_single"].items()}
    assert recall["oracle B=256"]["topk_recall"] == 1.0, recall
    assert recall["oracle B=256"]["needle_attended"] == 1.0, recall
    assert recall["streaming B=256"]["needle_attended"] < 1.0, recall
    assert "full" not in recall, recall
    want = {"full", "clusterkv B=256", "clusterkv_rerank B=256", "quest B=256",
            "streaming B=256", "oracle B=256"}
    missing = want - set(acc)
    assert not missing, "policies missing from the JSON: %s" % missing
    for policy in ("full", "oracle B=256", "clusterkv_rerank B=256"):
        assert acc[policy]["4096"]["mean"] == 1.0, (policy, acc[policy])
    depth0 = acc["streaming B=256"]["4096"]["by_depth"]["0.0"]
    assert depth0 == 0.0, ("streaming found a needle outside its window",
                           acc["streaming B=256"])
    check_forks_equal_separate_runs(binary, model, out, report)
    print("needle_bench_smoke: ok", {p: acc[p]["4096"]["mean"] for p in acc})


def check_forks_equal_separate_runs(binary, model, out, report):
    """The run above answered the sparse configurations from one prefill
    per prompt (generate-forks); one `generate` per configuration and
    prompt (--no-forks) gives every answer the same, right or wrong."""
    assert report["forks"] is True, report.get("forks")
    subprocess.run([sys.executable, os.path.join(ROOT, "bench",
                                                 "needle_bench.py"),
                    "--quick", "--tasks", "single,multikey", "--no-forks",
                    "--binary", binary, "--model", model,
                    "--out", out + "_separate"], check=True, cwd=ROOT)
    with open(out + "_separate.json") as f:
        separate = json.load(f)
    for task, configs in report["results"].items():
        for name, rows in configs.items():
            want = [r["answer"] for r in separate["results"][task][name]]
            got = [r["answer"] for r in rows]
            assert got == want, (task, name, got, want)


if __name__ == "__main__":
    main()
