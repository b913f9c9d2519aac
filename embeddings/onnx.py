"""The transformer of a sentence-transformers model, run with ONNX Runtime.

Same vectors, a fraction of the CPU time: on the bundled all-MiniLM-L6-v2 a short query
took 2.8 ms instead of 9.5 ms, and documents in batches of 64 about 13 % less
(measured on the 2-core CI machine). The model is exported once, offline, with torch's
own exporter (about a second) into a cache directory, under a name that hashes the
model's weights; the export is then checked against the torch model on probe texts
and used only if every vector agrees (cosine >= ``AGREEMENT``). Tokenization stays
the model's own (fast) tokenizer; mean pooling and normalization are done here in numpy.

Only the common pipeline is taken over: a Transformer, then mean pooling, then
normalization (MiniLM and most of its family). Any other pipeline (CLS pooling, a
Dense layer, ...) stays on torch, as does a GPU.

Any number of processes may share the cache directory and start at the same moment
(replicas and workers of one deployment): a file is made by one of them, under an
exclusive lock (``LOCK``, in the directory), in a private temporary directory, and
renamed into place; the others wait for the lock, find the file made and read it. A
directory that already holds the files is only read (no lock, nothing written): an
image may bake them into a read-only directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
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
# In the cache directory: the lock a process holds while it makes a file there, and the
# prefix of the private directory it makes the file in.
LOCK = ".lock"
MAKING = ".making-"


def supported(model: Any) -> bool:
    """Whether ``model`` (a SentenceTransformer) is Transformer → mean Pooling → Normalize,
    with a fast tokenizer (``OnnxTransformer`` tokenizes with its Rust half)."""
    names = [type(module).__name__ for module in model]
    if names[:2] != ["Transformer", "Pooling"] or names[2:] not in ([], ["Normalize"]):
        return False
    pooling = model[1]
    # sentence-transformers 6 says pooling_mode; earlier versions get_pooling_mode_str().
    mode = getattr(pooling, "pooling_mode", None)
    if mode is None:
        mode = getattr(pooling, "get_pooling_mode_str", lambda: None)()
    fast = getattr(getattr(model, "tokenizer", None), "backend_tokenizer", None) is not None
    return fast and mode in ("mean", ["mean"], ("mean",))


def weights_digest(model_dir: Path) -> str:
    """A short hash of the model's files (weights and configuration)."""
    digest = hashlib.sha256()
    for path in sorted(model_dir.rglob("*")):
        if path.is_file() and path.suffix in (".safetensors", ".bin", ".json", ".txt"):
            digest.update(path.relative_to(model_dir).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s lock (``LOCK``): one process at a time makes files there.

    Under it, what a process that died while making a file left (its ``MAKING``
    directory) is removed: every maker holds the lock, so none is still at work."""
    directory.mkdir(parents=True, exist_ok=True)
    # Open for writing: on NFS an exclusive flock is a POSIX lock, which needs it.
    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
        for stray in directory.glob(f"{MAKING}*"):
            shutil.rmtree(stray, ignore_errors=True)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _private(target: Path) -> Iterator[Path]:
    """A path to write ``target`` at, in a temporary directory of this process's own in
    ``target``'s (so no other process sees a partial file or a tool's temporaries, and
    the rename is atomic); moved to ``target`` if the block succeeds."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=MAKING) as private:
        partial = Path(private) / target.name
        yield partial
        os.replace(partial, target)


def ensure(target: Path, make: Callable[[Path], None], what: str) -> None:
    """Make ``target`` with ``make`` (which writes the path it is given) unless it is
    there: under the directory's lock, and only if no other process made it meanwhile."""
    if target.is_file():  # the common case, and a read-only directory's: no lock
        return
    with _locked(target.parent):
        if target.is_file():
            log.info(f"{what}: made by another process", extra={"path": str(target)})
            return
        log.info(what, extra={"path": str(target)})
        with _private(target) as partial:
            make(partial)


def export(model: Any, target: Path) -> None:
    """Write the model's transformer to ``target`` as ONNX (a private path: ``ensure``)."""
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter announces its age
        torch.onnx.export(
            LastHiddenState(),
            (example, example, torch.zeros_like(example)),
            str(target),
            input_names=list(INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes={
                name: {int(k): v for k, v in axes.items()}
                for name in (*INPUTS, "last_hidden_state")
            },
            opset_version=17,
            dynamo=False,
        )


class OnnxTransformer:
    """Encodes with an exported transformer; pools and normalizes like the model did.

    ``tokenizer`` is the model's fast tokenizer as a ``tokenizers.Tokenizer`` (a Hugging
    Face tokenizer's ``backend_tokenizer``, or the one ``embeddings.exported`` saved):
    copied twice, so that nothing the caller does to it changes these, one truncating and
    padding a batch as the model's tokenizer does (to ``max_tokens``, with ``pad_id``),
    one for a single query in one call (the Hugging Face tokenizer's ``__call__`` costs
    about 0.3 ms of Python per query on a small machine)."""

    def __init__(
        self, path: Path, tokenizer: Any, max_tokens: int, threads: int, pad_id: int = 0
    ) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle threads sleep instead of spinning: on a small machine a spinning pool
        # takes the cores PostgreSQL and the event loop need right after each query.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.max_tokens = max_tokens
        self.path = path
        self._batch = type(tokenizer).from_str(tokenizer.to_str())
        self._batch.enable_truncation(max_length=max_tokens)
        pad_token = tokenizer.id_to_token(pad_id) or "[PAD]"
        self._batch.enable_padding(pad_id=pad_id, pad_token=pad_token)
        self._backend = type(tokenizer).from_str(tokenizer.to_str())
        self._backend.no_truncation()
        self._backend.no_padding()

    def encode(self, texts: Sequence[str]) -> Vectors:
        encoded = self._batch.encode_batch(list(texts))
        feed = {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
        }
        return self._pooled(feed)

    def special_ids(self) -> tuple[int, int]:
        """The ids the tokenizer puts before and after a text ([CLS] and [SEP] here)."""
        ids = self._backend.post_process(self._backend.encode("", add_special_tokens=False)).ids
        return ids[0], ids[-1]

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
        truncates it)."""
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
    """Write ``source`` with its weights quantized to int8 to ``target`` (a private path:
    ``ensure``).

    Quantized from a copy beside ``target``: onnxruntime's shape inference writes
    ``<stem>-inferred.onnx`` beside its input and deletes it, and beside the shared
    ``source`` two processes would use (and delete) the same file."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    copy = target.with_name(f"source-{source.name}")
    shutil.copyfile(source, copy)
    # Per channel: each output channel its own scale (min cosine to the model 0.989 on
    # LoCoMo questions, against 0.946 with one scale per tensor).
    quantize_dynamic(str(copy), str(target), weight_type=QuantType.QInt8, per_channel=True)


def load(
    model: Any,
    model_dir: Path,
    cache_dir: Path,
    threads: int,
    *,
    int8: bool = False,
) -> OnnxTransformer | None:
    """The model's ONNX twin from ``cache_dir`` (exported first if need be; ``int8``: with
    its weights quantized), or ``None`` when the pipeline is not one this module runs or
    the twin disagrees with torch."""
    if not supported(model):
        log.info("embedding pipeline not covered by the ONNX backend; using torch")
        return None
    target = cache_dir / f"{model_dir.name}-{weights_digest(model_dir)}.onnx"
    ensure(target, lambda path: export(model, path), "exporting the embedding model to ONNX")
    if int8:
        fp32, target = target, target.with_name(f"{target.stem}-int8.onnx")
        ensure(target, lambda path: quantize(fp32, path), "quantizing the embedding model to int8")
    tokenizer = model.tokenizer
    twin = OnnxTransformer(
        target,
        tokenizer.backend_tokenizer,
        model.max_seq_length or 256,
        threads,
        pad_id=tokenizer.pad_token_id or 0,
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
