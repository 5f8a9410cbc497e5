"""Checks that reference_llama.py is itself right, without trusting its formulas a second time:
(a) its written gradients against central finite differences of its loss, in float64;
(b) its attention, RoPE and whole loss against explicit per-position loops in plain Python
    floats written from the definitions;
(c) the loss at Hugging Face initialization is near ln(vocab); plus causality, RMSNorm, the
model-file parser and the error messages of the command line.
Run: /usr/bin/python3 -m pytest -q tests/train/test_reference_llama.py
"""
import contextlib
import io
import math
import os
import struct
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference_llama as ref  # noqa: E402
import safetensors_lite  # noqa: E402

SCRIPT = os.path.join(HERE, "reference_llama.py")
torch.set_num_threads(1)
TINY = {"layers": 2, "hidden": 8, "heads": 4, "kv_heads": 2, "ffn_hidden": 12, "vocab": 11,
        "rope_theta": 10000.0, "norm_eps": 1e-5}


def write_model(path, fields):
    with open(path, "w") as f:
        f.write("# test model\nname: t\n")
        for key, value in fields.items():
            f.write("%s: %s\n" % (key, str(value).lower() if isinstance(value, bool) else value))
    return str(path)


def random_params(config, seed, std=0.4):
    """Weights large enough that every path carries gradient; norm weights around one."""
    generator = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in ref.parameter_shapes(config).items():
        noise = torch.randn(shape, generator=generator, dtype=torch.float64) * std
        params[name] = 1.0 + noise if len(shape) == 1 else noise
    return params


def write_tokens(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<%dq" % len(tokens), *tokens))
    return str(path)


def run_script(*args, subprocess_run=False):
    """Runs the command line (in this process unless asked; torch's import costs seconds)."""
    argv = [str(arg) for arg in args]
    if subprocess_run:
        return subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True)
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        returncode = ref.main(argv)
    return subprocess.CompletedProcess(argv, returncode, "", stderr.getvalue())


# ---------------------------------------------------------------------------------------------
# (a) Gradients written by the command line equal finite differences of the loss.


@pytest.mark.parametrize("gated,tied,head_dim", [(True, False, 4), (False, True, 0)])
def test_gradients_match_finite_differences(tmp_path, gated, tied, head_dim):
    fields = dict(TINY, gated_mlp=gated, tied_embeddings=tied, head_dim=head_dim)
    config = ref.model_config(fields)
    params = random_params(config, seed=5)
    seq, batch = 5, 2
    generator = torch.Generator().manual_seed(9)
    tokens = torch.randint(0, config["vocab"], (batch * (seq + 1),), generator=generator).tolist()
    model = write_model(tmp_path / "m.yaml", fields)
    weights = str(tmp_path / "w.safetensors")
    ref.save_tensors(weights, params)  # float64 weights: no rounding between here and the script
    out = str(tmp_path / "out.safetensors")
    result = run_script("--model", model, "--weights", weights, "--tokens",
                        write_tokens(tmp_path / "t.bin", tokens), "--seq", seq, "--batch", batch,
                        "-o", out)
    assert result.returncode == 0, result.stderr
    written, metadata = safetensors_lite.read(out)
    assert metadata["seq"] == str(seq)
    assert set(written) == set(params) | {"loss"}

    inputs = torch.tensor(tokens).reshape(batch, seq + 1)[:, :-1]
    targets = torch.tensor(tokens).reshape(batch, seq + 1)[:, 1:]
    with torch.no_grad():
        loss = ref.loss_fn(params, config, inputs, targets).item()
    assert safetensors_lite.decode("F64", written["loss"][2])[0] == pytest.approx(loss, rel=1e-13)

    step, checked = 1e-6, 0
    for name, value in params.items():
        dtype, shape, raw = written[name]
        assert dtype == "F32" and shape == list(value.shape)
        grad = torch.tensor(safetensors_lite.decode("F32", raw), dtype=torch.float64)
        flat = value.reshape(-1)
        for index in torch.randperm(flat.numel(), generator=generator)[:6].tolist():
            saved = flat[index].item()
            with torch.no_grad():
                flat[index] = saved + step
                plus = ref.loss_fn(params, config, inputs, targets).item()
                flat[index] = saved - step
                minus = ref.loss_fn(params, config, inputs, targets).item()
                flat[index] = saved
            numeric = (plus - minus) / (2 * step)
            # float32 storage of the gradient (rel 6e-8) plus the difference quotient's error.
            assert abs(grad[index].item() - numeric) <= 1e-6 + 1e-5 * abs(numeric), (
                "%s[%d]: written %.9g, finite difference %.9g" % (name, index, grad[index], numeric))
            checked += 1
    assert checked > 6 * len(params) - 10


# ---------------------------------------------------------------------------------------------
# (b) Attention and RoPE against loops written from the definitions.


def naive_attention(q, k, v):
    """Per (batch, head, position): softmax over keys 0..p of q.k / sqrt(d), weighted sum of v."""
    batch, heads, seq, d = q.shape
    group = heads // k.shape[1]
    out = torch.zeros_like(q)
    for b in range(batch):
        for head in range(heads):
            kv = head // group
            for p in range(seq):
                scores = [sum(q[b, head, p, i].item() * k[b, kv, key, i].item() for i in range(d))
                          / math.sqrt(d) for key in range(p + 1)]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                for i in range(d):
                    out[b, head, p, i] = sum(w * v[b, kv, key, i].item()
                                             for key, w in enumerate(weights)) / total
    return out


def test_attention_matches_per_position_loop():
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(2, 6, 7, 4, generator=generator, dtype=torch.float64)
    k = torch.randn(2, 2, 7, 4, generator=generator, dtype=torch.float64)
    v = torch.randn(2, 2, 7, 4, generator=generator, dtype=torch.float64)
    got = ref.causal_gqa_attention(q, k, v)
    expected = naive_attention(q, k, v)
    assert (got - expected).abs().max().item() < 1e-12


def test_rope_rotates_pairs_by_position_angles():
    """rotate_half RoPE: pair (i, i + d/2) at position p turns by p / theta^(2i/d)."""
    seq, d, theta = 6, 8, 500.0
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(1, 1, seq, d, generator=generator, dtype=torch.float64)
    cos, sin = ref.rope_tables(seq, d, theta)
    got = ref.apply_rope(x, cos, sin)
    for p in range(seq):
        for i in range(d // 2):
            angle = p / theta ** (2 * i / d)
            a, b = x[0, 0, p, i].item(), x[0, 0, p, i + d // 2].item()
            assert got[0, 0, p, i].item() == pytest.approx(a * math.cos(angle) - b * math.sin(angle),
                                                           abs=1e-12)
            assert got[0, 0, p, i + d // 2].item() == pytest.approx(
                b * math.cos(angle) + a * math.sin(angle), abs=1e-12)


def test_rms_norm_definition():
    x = torch.tensor([[3.0, 4.0]], dtype=torch.float64)
    weight = torch.tensor([2.0, 0.5], dtype=torch.float64)
    rms = math.sqrt((9 + 16) / 2 + 1e-5)
    got = ref.rms_norm(x, weight, 1e-5)
    assert got[0, 0].item() == pytest.approx(2 * 3 / rms, rel=1e-14)
    assert got[0, 1].item() == pytest.approx(0.5 * 4 / rms, rel=1e-14)


def test_logits_are_causal():
    config = ref.model_config(TINY)
    params = random_params(config, seed=6)
    tokens = torch.tensor([[1, 5, 2, 7, 3, 9]])
    changed = tokens.clone()
    changed[0, 4] = 0
    with torch.no_grad():
        before, after = ref.logits(params, config, tokens), ref.logits(params, config, changed)
    assert torch.equal(before[0, :4], after[0, :4]), "positions before the change are unaffected"
    assert not torch.allclose(before[0, 4:], after[0, 4:]), "the change reaches later positions"


def naive_loss(params, config, sequences):
    """The whole model token by token in plain Python floats, from the definitions."""
    w = {name: value.tolist() for name, value in params.items()}
    d, heads, kv_heads = config["head_dim"], config["heads"], config["kv_heads"]
    eps, theta = config["norm_eps"], config["rope_theta"]

    def matvec(matrix, x):
        return [sum(row[i] * x[i] for i in range(len(x))) for row in matrix]

    def norm(x, weight):
        scale = 1.0 / math.sqrt(sum(value * value for value in x) / len(x) + eps)
        return [value * scale * weight[i] for i, value in enumerate(x)]

    def rope(vector, position):
        out = list(vector)
        for head in range(len(vector) // d):
            for i in range(d // 2):
                angle = position / theta ** (2 * i / d)
                a, b = vector[head * d + i], vector[head * d + i + d // 2]
                out[head * d + i] = a * math.cos(angle) - b * math.sin(angle)
                out[head * d + i + d // 2] = b * math.cos(angle) + a * math.sin(angle)
        return out

    total, count = 0.0, 0
    for tokens in sequences:
        inputs, targets = tokens[:-1], tokens[1:]
        xs = [list(w["model.embed_tokens.weight"][token]) for token in inputs]
        for layer in range(config["layers"]):
            prefix = "model.layers.%d." % layer
            ns = [norm(x, w[prefix + "input_layernorm.weight"]) for x in xs]
            qs = [rope(matvec(w[prefix + "self_attn.q_proj.weight"], n), p) for p, n in enumerate(ns)]
            ks = [rope(matvec(w[prefix + "self_attn.k_proj.weight"], n), p) for p, n in enumerate(ns)]
            vs = [matvec(w[prefix + "self_attn.v_proj.weight"], n) for n in ns]
            for p in range(len(xs)):
                o = []
                for head in range(heads):
                    kv = head // (heads // kv_heads)
                    q = qs[p][head * d:(head + 1) * d]
                    scores = [sum(q[i] * ks[key][kv * d + i] for i in range(d)) / math.sqrt(d)
                              for key in range(p + 1)]
                    weights = [math.exp(score - max(scores)) for score in scores]
                    o += [sum(weights[key] * vs[key][kv * d + i] for key in range(p + 1)) /
                          sum(weights) for i in range(d)]
                attn = matvec(w[prefix + "self_attn.o_proj.weight"], o)
                xs[p] = [a + b for a, b in zip(xs[p], attn)]
            for p in range(len(xs)):
                n = norm(xs[p], w[prefix + "post_attention_layernorm.weight"])
                up = matvec(w[prefix + "mlp.up_proj.weight"], n)
                if config["gated_mlp"]:
                    gate = matvec(w[prefix + "mlp.gate_proj.weight"], n)
                    hidden = [g / (1 + math.exp(-g)) * u for g, u in zip(gate, up)]
                else:
                    hidden = [0.5 * u * (1 + math.erf(u / math.sqrt(2))) for u in up]
                xs[p] = [a + b for a, b in zip(xs[p], matvec(w[prefix + "mlp.down_proj.weight"], hidden))]
        head_weight = w["model.embed_tokens.weight" if config["tied_embeddings"] else "lm_head.weight"]
        for p, x in enumerate(xs):
            logit = matvec(head_weight, norm(x, w["model.norm.weight"]))
            top = max(logit)
            total += top + math.log(sum(math.exp(value - top) for value in logit)) - logit[targets[p]]
            count += 1
    return total / count


@pytest.mark.parametrize("gated,tied,head_dim", [(True, False, 4), (False, True, 0)])
def test_loss_matches_token_by_token_model(gated, tied, head_dim):
    config = ref.model_config(dict(TINY, gated_mlp=gated, tied_embeddings=tied, head_dim=head_dim,
                                   rope_theta=100.0, norm_eps=1e-3))
    params = random_params(config, seed=8)
    tokens = torch.randint(0, config["vocab"], (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = ref.loss_fn(params, config, tokens[:, :-1], tokens[:, 1:]).item()
    expected = naive_loss(params, config, tokens.tolist())
    assert got == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# (c) Loss at Hugging Face initialization.


def test_initial_loss_is_near_log_vocab(tmp_path):
    fields = dict(TINY, vocab=256, hidden=32, ffn_hidden=64)
    model = write_model(tmp_path / "m.yaml", fields)
    weights = tmp_path / "w.safetensors"
    assert run_script("--model", model, "--make-weights", 1, "--weights", weights).returncode == 0
    written, _ = safetensors_lite.read(str(weights))
    assert written["model.norm.weight"][0] == "F32"
    seq, batch = 16, 2
    tokens = torch.randint(0, 256, (batch * (seq + 1),), generator=torch.Generator().manual_seed(2))
    out = tmp_path / "out.safetensors"
    result = run_script("--model", model, "--weights", weights, "--tokens",
                        write_tokens(tmp_path / "t.bin", tokens.tolist()), "--seq", seq,
                        "--batch", batch, "-o", out, subprocess_run=True)
    assert result.returncode == 0, result.stderr
    loss = safetensors_lite.decode("F64", safetensors_lite.read(str(out))[0]["loss"][2])[0]
    assert abs(loss - math.log(256)) < 0.05, loss


# ---------------------------------------------------------------------------------------------
# Model file parsing and bad inputs.


def test_model_file_with_and_without_pyyaml(tmp_path, monkeypatch):
    path = write_model(tmp_path / "m.yaml", dict(TINY, gated_mlp=False, rope_theta=500000.0))
    with_yaml = ref.load_model(path)
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` now raises ImportError
    without_yaml = ref.load_model(path)
    assert with_yaml == without_yaml
    assert without_yaml["gated_mlp"] is False and without_yaml["tied_embeddings"] is False
    assert without_yaml["rope_theta"] == 500000.0 and without_yaml["norm_eps"] == 1e-5
    assert without_yaml["head_dim"] == 2
    examples = os.path.join(HERE, "..", "..", "examples", "models", "tiny.yaml")
    if os.path.exists(examples):
        assert ref.load_model(examples)["head_dim"] == 8


def test_bad_inputs_are_clear_errors(tmp_path):
    model = write_model(tmp_path / "m.yaml", TINY)
    config = ref.model_config(TINY)
    params = ref.init_weights(config, 0)
    tokens = write_tokens(tmp_path / "t.bin", [1] * 2 * 5)

    def error_of(weights_dict, token_file=tokens):
        path = str(tmp_path / "w.safetensors")
        ref.save_tensors(path, weights_dict)
        result = run_script("--model", model, "--weights", path, "--tokens", token_file,
                            "--seq", 4, "--batch", 2, "-o", tmp_path / "o.safetensors")
        assert result.returncode == 1
        return result.stderr

    missing = dict(params)
    del missing["model.layers.1.mlp.gate_proj.weight"]
    assert "tensor model.layers.1.mlp.gate_proj.weight is missing" in error_of(missing)
    extra = dict(params, **{"model.layers.2.mlp.up_proj.weight": torch.zeros(2)})
    assert "tensor model.layers.2.mlp.up_proj.weight is not a parameter" in error_of(extra)
    wrong = dict(params, **{"model.norm.weight": torch.ones(9)})
    assert "model.norm.weight has shape [9], the model needs [8]" in error_of(wrong)
    nan = dict(params, **{"model.norm.weight": torch.full([8], float("nan"))})
    assert "model.norm.weight holds NaN or inf" in error_of(nan)
    short = write_tokens(tmp_path / "s.bin", [1] * 7)
    assert "56 bytes, --batch 2 x (--seq 4 + 1) x 8 needs 80" in error_of(params, short)
    big = write_tokens(tmp_path / "b.bin", [1] * 6 + [11] + [1] * 3)
    assert "sequence 1 token 1 = 11: must be in [0, vocab = 11)" in error_of(params, big)
    with pytest.raises(ref.ReferenceError, match="field vocab is missing"):
        ref.model_config({k: v for k, v in TINY.items() if k != "vocab"})
    with pytest.raises(ref.ReferenceError, match="heads = 4 is not a multiple of kv_heads = 3"):
        ref.model_config(dict(TINY, kv_heads=3))
