#!/usr/bin/env python3
"""Independent PyTorch reference for the trainer: loss and gradients of a Llama model.

Computes what Hugging Face `LlamaForCausalLM` computes, written from its published formulas with
`torch.nn.functional` only (no project code), in float64 for a tight reference:

  embed -> per layer: x += o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))),
                      n = RMSNorm(x); x += mlp(RMSNorm(x)) -> RMSNorm -> lm_head (or embed if tied)
  RMSNorm(x) = x * rsqrt(mean(x^2) + eps) * w
  RoPE: rotate_half convention, inv_freq = 1 / theta^(arange(0, d, 2) / d), positions 0..S-1
  attention: causal, GQA (query head h uses KV head h // (heads / kv_heads)), scale 1/sqrt(d)
  mlp: down(silu(gate(x)) * up(x)) when gated_mlp (default); else down(gelu(up(x))) with the
       exact (erf) GELU

Token convention: TOKENS.bin holds B * (S + 1) int64 little-endian tokens; sequence b is
tokens[b*(S+1) : (b+1)*(S+1)]; its inputs are the first S tokens and its targets are tokens 1..S
(position p predicts token p + 1). The loss is the mean cross-entropy over all B * S predictions.

Usage:
  reference_llama.py --model MODEL.yaml --weights W.safetensors --tokens T.bin --seq S --batch B
                     -o OUT.safetensors
      writes `loss` (F64, shape [1]) and each parameter's gradient under its Hugging Face name
      (F32), with metadata describing the run.
  reference_llama.py --model MODEL.yaml --make-weights SEED --weights W.safetensors
      writes Hugging Face-style initial weights (normal(0, 0.02) matrices, unit norms), F32.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_lite  # noqa: E402  (standard-library safetensors reader/writer beside this file)

MODEL_FIELDS = {
    # field: (type, default; None means required)
    "layers": (int, None),
    "hidden": (int, None),
    "heads": (int, None),
    "kv_heads": (int, None),
    "ffn_hidden": (int, None),
    "vocab": (int, None),
    "head_dim": (int, 0),
    "gated_mlp": (bool, True),
    "tied_embeddings": (bool, False),
    "rope_theta": (float, 10000.0),
    "norm_eps": (float, 1e-5),
}
INIT_STD = 0.02  # Hugging Face LlamaConfig.initializer_range
TORCH_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "U8": torch.uint8,
}


class ReferenceError(Exception):
    """A bad input; main() prints it and exits with status 1."""


# ---------------------------------------------------------------------------------------------
# Model file.


def parse_scalar(text):
    """A YAML scalar of the model file: bool, int, float or string."""
    lowered = text.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text.strip("'\"")


def parse_flat_yaml(text):
    """Minimal parser for `key: value` lines with # comments (PyYAML is used when present)."""
    try:
        import yaml

        data = yaml.safe_load(text)
        return data if isinstance(data, dict) else {}
    except ImportError:
        pass
    data = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if ":" not in line or line[0].isspace():
            raise ReferenceError("model file line %r: expected `key: value`" % line)
        key, value = line.split(":", 1)
        data[key.strip()] = parse_scalar(value.strip())
    return data


def model_config(data, source="model"):
    """Validates the model fields and fills the defaults."""
    config = {}
    for field, (kind, default) in MODEL_FIELDS.items():
        if field not in data:
            if default is None:
                raise ReferenceError("%s: field %s is missing (it is required)" % (source, field))
            config[field] = default
            continue
        value = data[field]
        if kind is not bool and isinstance(value, str):
            value = parse_scalar(value)  # PyYAML (YAML 1.1) reads 1e-5 as a string
        ok = isinstance(value, bool) if kind is bool else (
            isinstance(value, (int, float)) and not isinstance(value, bool))
        if not ok or (kind is int and int(value) != value):
            raise ReferenceError("%s: %s = %r: must be a %s" % (source, field, value, kind.__name__))
        config[field] = kind(value)
    if config["head_dim"] == 0:
        if config["hidden"] % config["heads"] != 0:
            raise ReferenceError("%s: hidden is not divisible by heads; set head_dim" % source)
        config["head_dim"] = config["hidden"] // config["heads"]
    if config["heads"] % config["kv_heads"] != 0:
        raise ReferenceError("%s: heads = %d is not a multiple of kv_heads = %d"
                             % (source, config["heads"], config["kv_heads"]))
    if config["head_dim"] % 2 != 0:
        raise ReferenceError("%s: head_dim = %d must be even for RoPE" % (source, config["head_dim"]))
    return config


def load_model(path):
    with open(path) as f:
        return model_config(parse_flat_yaml(f.read()), path)


# ---------------------------------------------------------------------------------------------
# Parameters: names, shapes, loading, initialization.


def parameter_shapes(config):
    """Hugging Face name -> shape ([out, in] for linear layers), in a fixed order."""
    hidden, vocab, ffn, d = config["hidden"], config["vocab"], config["ffn_hidden"], config["head_dim"]
    q_width, kv_width = config["heads"] * d, config["kv_heads"] * d
    shapes = {"model.embed_tokens.weight": [vocab, hidden]}
    for layer in range(config["layers"]):
        prefix = "model.layers.%d." % layer
        shapes[prefix + "input_layernorm.weight"] = [hidden]
        shapes[prefix + "self_attn.q_proj.weight"] = [q_width, hidden]
        shapes[prefix + "self_attn.k_proj.weight"] = [kv_width, hidden]
        shapes[prefix + "self_attn.v_proj.weight"] = [kv_width, hidden]
        shapes[prefix + "self_attn.o_proj.weight"] = [hidden, q_width]
        shapes[prefix + "post_attention_layernorm.weight"] = [hidden]
        if config["gated_mlp"]:
            shapes[prefix + "mlp.gate_proj.weight"] = [ffn, hidden]
        shapes[prefix + "mlp.up_proj.weight"] = [ffn, hidden]
        shapes[prefix + "mlp.down_proj.weight"] = [hidden, ffn]
    shapes["model.norm.weight"] = [hidden]
    if not config["tied_embeddings"]:
        shapes["lm_head.weight"] = [vocab, hidden]
    return shapes


def tensor_from_raw(dtype, shape, raw):
    if len(raw) == 0:
        return torch.zeros(shape, dtype=TORCH_DTYPES[dtype])
    return torch.frombuffer(bytearray(raw), dtype=TORCH_DTYPES[dtype]).reshape(shape).clone()


def load_weights(path, config):
    """Reads the weights as float64 tensors, checking names and shapes against the model."""
    tensors, _ = safetensors_lite.read(path)
    expected = parameter_shapes(config)
    missing = [name for name in expected if name not in tensors]
    extra = [name for name in tensors if name not in expected]
    if missing:
        raise ReferenceError("%s: tensor %s is missing (the model needs it)" % (path, missing[0]))
    if extra:
        raise ReferenceError("%s: tensor %s is not a parameter of this model" % (path, extra[0]))
    params = {}
    for name, shape in expected.items():
        dtype, got_shape, raw = tensors[name]
        if got_shape != shape:
            raise ReferenceError("%s: tensor %s has shape %s, the model needs %s"
                                 % (path, name, got_shape, shape))
        if dtype not in ("F64", "F32", "F16", "BF16"):
            raise ReferenceError("%s: tensor %s has dtype %s, must be floating" % (path, name, dtype))
        value = tensor_from_raw(dtype, shape, raw).to(torch.float64)
        if not torch.isfinite(value).all():
            raise ReferenceError("%s: tensor %s holds NaN or inf" % (path, name))
        params[name] = value
    return params


def init_weights(config, seed):
    """Hugging Face initialization: matrices normal(0, 0.02), norm weights one (float32)."""
    generator = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in parameter_shapes(config).items():
        if len(shape) == 1:
            params[name] = torch.ones(shape, dtype=torch.float32)
        else:
            params[name] = torch.normal(0.0, INIT_STD, shape, generator=generator)
    return params


def save_tensors(path, named, metadata=None):
    """Writes {name: tensor} (float32 or float64 or int64) with safetensors_lite."""
    names = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}
    entries = []
    for name, value in named.items():
        value = value.detach().contiguous()
        entries.append((name, names[value.dtype], list(value.shape), value.numpy().tobytes()))
    safetensors_lite.write(path, entries, metadata)


# ---------------------------------------------------------------------------------------------
# Tokens.


def load_tokens(path, seq, batch, vocab):
    """Returns (inputs, targets), each [batch, seq] int64."""
    expected_bytes = batch * (seq + 1) * 8
    size = os.path.getsize(path)
    if size != expected_bytes:
        raise ReferenceError("%s: %d bytes, --batch %d x (--seq %d + 1) x 8 needs %d"
                             % (path, size, batch, seq, expected_bytes))
    with open(path, "rb") as f:
        tokens = torch.frombuffer(bytearray(f.read()), dtype=torch.int64).reshape(batch, seq + 1)
    bad = ((tokens < 0) | (tokens >= vocab)).nonzero()
    if len(bad) > 0:
        b, p = bad[0].tolist()
        raise ReferenceError("%s: sequence %d token %d = %d: must be in [0, vocab = %d)"
                             % (path, b, p, tokens[b, p].item(), vocab))
    return tokens[:, :-1].clone(), tokens[:, 1:].clone()


# ---------------------------------------------------------------------------------------------
# The model.


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_tables(seq, head_dim, theta, dtype=torch.float64):
    """cos, sin of shape [seq, head_dim] (the frequencies repeated for both halves)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=dtype) / head_dim))
    angles = torch.outer(torch.arange(seq, dtype=dtype), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x, cos, sin):
    """x: [batch, heads, seq, head_dim]."""
    return x * cos + rotate_half(x) * sin


def causal_gqa_attention(q, k, v):
    """q: [B, H, S, d], k and v: [B, G, S, d] -> [B, H, S, d]; causal, scale 1/sqrt(d)."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    seq = q.shape[2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return F.softmax(scores, dim=-1) @ v


def attention_block(x, params, prefix, config, cos, sin):
    batch, seq, _ = x.shape
    d = config["head_dim"]
    n = rms_norm(x, params[prefix + "input_layernorm.weight"], config["norm_eps"])

    def project(name, heads):
        out = F.linear(n, params[prefix + "self_attn.%s_proj.weight" % name])
        return out.view(batch, seq, heads, d).transpose(1, 2)

    q = apply_rope(project("q", config["heads"]), cos, sin)
    k = apply_rope(project("k", config["kv_heads"]), cos, sin)
    v = project("v", config["kv_heads"])
    o = causal_gqa_attention(q, k, v).transpose(1, 2).reshape(batch, seq, config["heads"] * d)
    return F.linear(o, params[prefix + "self_attn.o_proj.weight"])


def mlp_block(x, params, prefix, config):
    n = rms_norm(x, params[prefix + "post_attention_layernorm.weight"], config["norm_eps"])
    up = F.linear(n, params[prefix + "mlp.up_proj.weight"])
    if config["gated_mlp"]:
        hidden = F.silu(F.linear(n, params[prefix + "mlp.gate_proj.weight"])) * up
    else:
        hidden = F.gelu(up)  # exact: 0.5 * x * (1 + erf(x / sqrt(2)))
    return F.linear(hidden, params[prefix + "mlp.down_proj.weight"])


def logits(params, config, inputs):
    """inputs: [B, S] int64 -> logits [B, S, vocab]."""
    x = F.embedding(inputs, params["model.embed_tokens.weight"])
    cos, sin = rope_tables(inputs.shape[1], config["head_dim"], config["rope_theta"], x.dtype)
    for layer in range(config["layers"]):
        prefix = "model.layers.%d." % layer
        x = x + attention_block(x, params, prefix, config, cos, sin)
        x = x + mlp_block(x, params, prefix, config)
    x = rms_norm(x, params["model.norm.weight"], config["norm_eps"])
    head = params["model.embed_tokens.weight" if config["tied_embeddings"] else "lm_head.weight"]
    return F.linear(x, head)


def loss_fn(params, config, inputs, targets):
    """Mean cross-entropy over all B * S predictions."""
    out = logits(params, config, inputs)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1))


def loss_and_grads(params, config, inputs, targets):
    """float64 loss and {name: gradient} (float64)."""
    leaves = {name: value.detach().clone().requires_grad_(True) for name, value in params.items()}
    loss = loss_fn(leaves, config, inputs, targets)
    loss.backward()
    return loss.detach(), {name: leaf.grad for name, leaf in leaves.items()}


# ---------------------------------------------------------------------------------------------
# Command line.


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="model YAML file")
    parser.add_argument("--weights", required=True, help="safetensors weights (read or written)")
    parser.add_argument("--make-weights", type=int, metavar="SEED",
                        help="write initial weights to --weights and exit")
    parser.add_argument("--tokens", help="B*(S+1) int64 little-endian tokens")
    parser.add_argument("--seq", type=int, help="S: predictions per sequence")
    parser.add_argument("--batch", type=int, default=1, help="B: sequences")
    parser.add_argument("-o", "--output", help="safetensors file for loss and gradients")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    if args.make_weights is None:
        for flag in ("tokens", "seq", "output"):
            if getattr(args, flag) is None:
                parser.error("--%s is required unless --make-weights is given" % flag)
        if args.seq < 1 or args.batch < 1:
            parser.error("--seq = %d and --batch = %d must both be >= 1" % (args.seq, args.batch))
    return args


def run(args):
    torch.set_num_threads(args.threads)
    config = load_model(args.model)
    if args.make_weights is not None:
        save_tensors(args.weights, init_weights(config, args.make_weights),
                     {"seed": str(args.make_weights)})
        return
    params = load_weights(args.weights, config)
    inputs, targets = load_tokens(args.tokens, args.seq, args.batch, config["vocab"])
    loss, grads = loss_and_grads(params, config, inputs, targets)
    out = {"loss": loss.reshape(1)}
    out.update({name: grad.to(torch.float32) for name, grad in grads.items()})
    metadata = {"seq": str(args.seq), "batch": str(args.batch), "loss": repr(loss.item()),
                "writer": "tests/train/reference_llama.py"}
    save_tensors(args.output, out, metadata)
    print("loss %.17g" % loss.item())


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except (ReferenceError, ValueError, OSError) as error:
        sys.stderr.write("reference_llama.py: %s\n" % error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
