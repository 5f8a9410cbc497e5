#!/usr/bin/env python3
"""Builds the fuzzers' seed corpora from the repository's own inputs.

  make_seeds.py REPO_ROOT OUT_DIR [HEXISEQ_BINARY]

OUT_DIR/<fuzzer>/ gets, for the cluster, device table and model fuzzers, the example files and the YAML/JSON
string literals of the reader tests; for the plan and validate fuzzers, the test plans, the JSON
literals of the plan tests, and (when a built hexiseq binary is given) plans made by every
strategy for the small example clusters. Files are named by content hash, so reruns add nothing
twice.
"""
import concurrent.futures
import hashlib
import pathlib
import re
import subprocess
import sys

# The string literals of C++ source: raw strings R"d(...)d" and ordinary "..." (escapes kept).
LITERAL = re.compile(r'R"(?P<delim>[^(\s]*)\((?P<raw>.*?)\)(?P=delim)"|"(?P<text>(?:[^"\\\n]|\\.)*)"',
                     re.S)
ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "0": "\0", "r": "\r"}
# Largest plan the corpus takes from the planner (bigger inputs slow every fuzz iteration).
MAX_GENERATED_RANKS = 16
PLAN_STRATEGIES = ["hexiseq", "ring", "ulysses", "usp", "hetero-ring", "subset"]
PLAN_SEQ = "16K"


def unescape(text):
    return re.sub(r"\\(.)", lambda m: ESCAPES.get(m.group(1), m.group(1)), text)


def literal_runs(source):
    """Adjacent string literals joined (C++ concatenation), in file order."""
    runs, current, last_end = [], [], None
    for match in LITERAL.finditer(source):
        joined = last_end is not None and source[last_end:match.start()].strip() == ""
        if not joined and current:
            runs.append("".join(current))
            current = []
        current.append(match.group("raw") if match.group("raw") is not None
                       else unescape(match.group("text")))
        last_end = match.end()
    if current:
        runs.append("".join(current))
    return runs


def looks_like_document(text, json_only):
    """A whole input rather than an expected message: JSON, or YAML spanning lines."""
    stripped = text.lstrip()
    if stripped.startswith("{") or stripped.startswith("["):
        return True
    return not json_only and "\n" in text and ":" in text


def add(out_dir, content):
    data = content if isinstance(content, bytes) else content.encode("utf-8", "surrogateescape")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / hashlib.sha1(data).hexdigest()).write_bytes(data)


def add_test_literals(out_dir, test_files, json_only):
    for test_file in test_files:
        for text in literal_runs(test_file.read_text()):
            if looks_like_document(text, json_only):
                add(out_dir, text)


def plan_json(binary, cluster, model, strategy):
    run = subprocess.run([binary, "plan", "--cluster", str(cluster), "--model", str(model),
                          "--seq", PLAN_SEQ, "--strategy", strategy, "--format", "json"],
                         capture_output=True, timeout=120)
    return run.stdout if run.returncode == 0 else None


def add_generated_plans(out_dirs, root, binary):
    """Plans by every strategy for each example cluster of at most MAX_GENERATED_RANKS ranks
    (the first plan of a cluster tells its size), two planner runs at a time."""
    models = [root / "examples/models/tiny.yaml", "llama3-8b"]
    small = []
    for cluster in sorted((root / "examples/clusters").glob("*.yaml")):
        first = plan_json(binary, cluster, models[1], "ring")
        if first is not None and first.count(b'"rank":') <= 2 * MAX_GENERATED_RANKS:
            small.append(cluster)
    jobs = [(cluster, model, strategy) for cluster in small for model in models
            for strategy in PLAN_STRATEGIES]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for plan in pool.map(lambda job: plan_json(binary, *job), jobs):
            if plan is not None:
                for out_dir in out_dirs:
                    add(out_dir, plan)


def main():
    root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    binary = sys.argv[3] if len(sys.argv) > 3 else None
    for example in (root / "examples/clusters").glob("*.yaml"):
        add(out / "cluster", example.read_bytes())
    add_test_literals(out / "cluster", sorted((root / "tests/spec").glob("cluster*_test.cc")) +
                      sorted((root / "tests/spec").glob("device*_test.cc")), json_only=False)
    add_test_literals(out / "device_table", sorted((root / "tests/spec").glob("device*_test.cc")),
                      json_only=False)
    for example in (root / "examples/models").glob("*.yaml"):
        add(out / "model", example.read_bytes())
    add_test_literals(out / "model", sorted((root / "tests/spec").glob("model*_test.cc")),
                      json_only=False)
    for target in ("plan", "validate"):
        for plan in (root / "tests/mpi/plans").glob("*.json"):
            add(out / target, plan.read_bytes())
        add_test_literals(out / target, sorted((root / "tests/plan").glob("*_test.cc")),
                          json_only=True)
    if binary:
        add_generated_plans([out / "plan", out / "validate"], root, binary)
    for target in ("cluster", "device_table", "model", "plan", "validate"):
        count = len(list((out / target).glob("*")))
        print(f"make_seeds: {count} seeds for {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
