"""The transformer of a sentence-transformers model, run with ONNX Runtime.

Same vectors, a fraction of the CPU time: on the bundled all-MiniLM-L6-v2 a short query
took 2.8 ms instead of 9.5 ms, and documents in batches of 64 about 13 % less
(measured on the 2-core CI machine). The model is exported once, offline, with torch's
own exporter (about a second) into a cache directory, under a name that hashes the
model's weights; the export is then checked against the torch model on probe texts
and used only if every vector agrees (cosine >= ``AGREEMENT``). Tokenization stays
the model's own tokenizer; mean pooling and normalization are done here in numpy.

Only the common pipeline is taken over: a Transformer, then mean pooling, then
normalization (MiniLM and most of its family). Any other pipeline (CLS pooling, a
Dense layer, ...) stays on torch, as does a GPU.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embeddings import Vectors

log = logging.getLogger("mneme.embeddings")

AGREEMENT = 0.9999
# int8 weights (onnxruntime's dynamic quantization) move every vector a little: each
# probe's must still point where the model's does, within this cosine.
AGREEMENT_INT8 = 0.98
PROBES = [
    "What does Alice drink in the morning?",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "x",
    "A much longer text about many things, " * 20,
]
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def supported(model: Any) -> bool:
    """Whether ``model`` (a SentenceTransformer) is Transformer → mean Pooling → Normalize."""
    names = [type(module).__name__ for module in model]
    if names[:2] != ["Transformer", "Pooling"] or names[2:] not in ([], ["Normalize"]):
        return False
    pooling = model[1]
    # sentence-transformers 6 says pooling_mode; earlier versions get_pooling_mode_str().
    mode = getattr(pooling, "pooling_mode", None)
    if mode is None:
        mode = getattr(pooling, "get_pooling_mode_str", lambda: None)()
    return mode in ("mean", ["mean"], ("mean",))


def weights_digest(model_dir: Path) -> str:
    """A short hash of the model's files (weights and configuration)."""
    digest = hashlib.sha256()
    for path in sorted(model_dir.rglob("*")):
        if path.is_file() and path.suffix in (".safetensors", ".bin", ".json", ".txt"):
            digest.update(path.relative_to(model_dir).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def export(model: Any, target: Path) -> None:
    """Write the model's transformer to ``target`` as ONNX (atomically)."""
    import torch

    transformer = model[0].auto_model.eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    example = torch.ones(1, 8, dtype=torch.long)
    axes = {"0": "batch", "1": "tokens"}
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".tmp", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter announces its age
            torch.onnx.export(
                LastHiddenState(),
                (example, example, torch.zeros_like(example)),
                str(partial),
                input_names=list(INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes={
                    name: {int(k): v for k, v in axes.items()}
                    for name in (*INPUTS, "last_hidden_state")
                },
                opset_version=17,
                dynamo=False,
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


class OnnxTransformer:
    """Encodes with an exported transformer; pools and normalizes like the model did."""

    def __init__(self, path: Path, tokenizer: Any, max_tokens: int, threads: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle threads sleep instead of spinning: on a small machine a spinning pool
        # takes the cores PostgreSQL and the event loop need right after each query.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.path = path
        # The fast tokenizer's own (Rust) tokenizer, copied so that no call of the
        # tokenizer above changes its settings: a text through it in one call, where the
        # tokenizer's __call__ costs about 0.3 ms of Python per query on a small machine.
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._backend = None if backend is None else type(backend).from_str(backend.to_str())
        if self._backend is not None:
            self._backend.no_truncation()
            self._backend.no_padding()

    def encode(self, texts: Sequence[str]) -> Vectors:
        batch = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_tokens,
            return_tensors="np",
        )  # fmt: skip
        feed = {name: batch[name].astype(np.int64) for name in INPUTS if name in batch}
        if "token_type_ids" not in feed:
            feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
        return self._pooled(feed)

    def _pooled(self, feed: dict[str, Any]) -> Vectors:
        """The model's output for ``feed``, mean-pooled over its tokens and normalized."""
        hidden = self.session.run(None, feed)[0]
        mask = feed["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: Vectors = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return out

    def encode_counted(self, text: str) -> tuple[Vectors, int] | None:
        """One text's vector (1, dimension) and its token count without special tokens,
        from one tokenizer pass; ``None`` when it is too long to take whole (``encode``
        truncates it) or the tokenizer is not a fast one."""
        if self._backend is None:
            return None
        bare = self._backend.encode(text, add_special_tokens=False)
        full = self._backend.post_process(bare)
        if len(full.ids) > self.max_tokens:
            return None
        feed = {
            "input_ids": np.array([full.ids], dtype=np.int64),
            "attention_mask": np.array([full.attention_mask], dtype=np.int64),
            "token_type_ids": np.array([full.type_ids], dtype=np.int64),
        }
        return self._pooled(feed), len(bare.ids)


def quantize(source: Path, target: Path) -> None:
    """Write ``source`` with its weights quantized to int8 to ``target`` (atomically)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".tmp", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        # Per channel: each output channel its own scale (min cosine to the model 0.989 on
        # LoCoMo questions, against 0.946 with one scale per tensor).
        quantize_dynamic(str(source), str(partial), weight_type=QuantType.QInt8, per_channel=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def load(
    model: Any,
    model_dir: Path,
    cache_dir: Path,
    threads: int,
    *,
    int8: bool = False,
    tokenizer: Any = None,
) -> OnnxTransformer | None:
    """The model's ONNX twin from ``cache_dir`` (exported first if need be; ``int8``: with
    its weights quantized), or ``None`` when the pipeline is not one this module runs or
    the twin disagrees with torch. ``tokenizer``: the twin's own (default: the model's)."""
    if not supported(model):
        log.info("embedding pipeline not covered by the ONNX backend; using torch")
        return None
    target = cache_dir / f"{model_dir.name}-{weights_digest(model_dir)}.onnx"
    if not target.is_file():
        log.info("exporting the embedding model to ONNX", extra={"path": str(target)})
        export(model, target)
    if int8:
        fp32, target = target, target.with_name(f"{target.stem}-int8.onnx")
        if not target.is_file():
            log.info("quantizing the embedding model to int8", extra={"path": str(target)})
            quantize(fp32, target)
    twin = OnnxTransformer(
        target, tokenizer or model.tokenizer, model.max_seq_length or 256, threads
    )
    expected = model.encode(PROBES, normalize_embeddings=True, convert_to_numpy=True)
    agreement = float((twin.encode(PROBES) * expected).sum(axis=1).min())
    if agreement < (AGREEMENT_INT8 if int8 else AGREEMENT):
        log.warning(
            "the ONNX export disagrees with the model; using torch",
            extra={"min_cosine": agreement, "path": str(target)},
        )
        return None
    return twin
